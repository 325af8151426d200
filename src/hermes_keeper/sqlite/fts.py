"""Hermes's FTS5 indexes while the keeper writes: merges on our schedule, never inside Hermes's writes.

Every transaction that deletes or inserts messages leaves a new segment in each FTS5
index, and FTS5's *automerge* merges segments inside whichever write comes next: ours, or
a gateway's append. On a Hermes home that merge is unbounded: its page quota is 64 x the
number of levels, and Hermes's periodic 'optimize' adds a level each time (158 on the
bench home). So for the length of a run :class:`MergeHold` switches automerge off (and
lifts crisismerge, FTS5's other self-triggered merge, out of reach), merges in budgeted
steps itself (an index where its segments add up to a big one all the way into one, as
'optimize' does), and then puts Hermes's settings back exactly as they were.

The settings in force are saved to ``keeper/fts-hold.json`` before they are changed, so a
run killed in between is put right by the next keeper command that writes (an empty
``with MergeHold(...)`` block merges and restores). Until then Hermes keeps working: its
indexes are only merged less often.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from hermes_keeper.errors import TryLater, warn
from hermes_keeper.fs import HomeFS, durable_rename, fsync_dir, open_private, private_dir
from hermes_keeper.journal import Journal
from hermes_keeper.sqlite.connect import time_limit
from hermes_keeper.sqlite.schema import CJK_INDEX, SchemaInfo
from hermes_keeper.sqlite.writer import AdaptiveBatch, Writer

#: Hermes's FTS5 indexes: the trigram one since ~0.15, the CJK one (schema 23+, where its tokenizer
#: library is in the home) in today's Hermes. Longest name last: :func:`fts_index` matches prefixes.
FTS_TABLES = ("messages_fts", "messages_fts_trigram", CJK_INDEX)
#: The settings a hold changes, with FTS5's defaults (used when the config table has no row).
HELD = {"automerge": 4, "crisismerge": 16, "usermerge": 4}
#: While held: automerge off; a level needs this many segments before FTS5 merges it by itself;
#: our rounds' ``'merge'`` starts on a level of 16 segments or more (FTS5's most; its default is
#: 4). Level 0 has 64 when a round is due; above it the rounds' outputs gather 16 to a merge, so
#: the tombstones climb a level a fourth as often, and the full merge at the end has a few dozen
#: inputs, not one per round (each of its steps pays for every input: at 5 GB, 143 inputs made
#: steps of up to 576 ms). Today's Hermes sets usermerge to 2 for its own bounded passes (once per
#: process, so also in the middle of a run); with 2, every round of ours carried the tombstones up
#: into Hermes's biggest level and rewrote it: 190 s of the 2 GB DELETE-mode bench's 259 s of lock.
HOLD_VALUES = {"automerge": 0, "crisismerge": 512, "usermerge": 16}
#: For a hold's full merge, ``'merge', N`` (only ours: Hermes never sends one) continues on any level of
#: two segments or more. With FTS5's 4, a merge in progress is not continued while a lower level
#: holds as many segments as it has inputs but fewer than 4: two gateway writes between two
#: steps of a full merge of two segments ended it halfway, and the tombstones stayed. (For
#: the whole hold, 2 made the tombstones climb Hermes's levels one merge at a time: 2x slower.)
FULL_MERGE_VALUES = {"usermerge": 2}
#: For the last round of a hold that ends without a full merge: FTS5's default, the level size
#: Hermes's automerge starts on, so that no level is left for it to merge inside a gateway write.
SETTLE_VALUES = {"usermerge": HELD["usermerge"]}
#: A segment this many pages or more is one of our delete transactions' (a gateway write's own
#: segment is one page, and merges away cheaply).
BIG_SEGMENT_PAGES = 2
#: The hold merges an index once it gained this many such big segments. Each
#: merge of a level pays per step for every input segment, so neither many small rounds nor one
#: huge one (measured on the bench home: 64 cost half of what 32 or 128 did).
MERGE_EVERY_SEGMENTS = 64
#: ... or once it gained this many segments of any size (well below HOLD_VALUES' crisismerge).
MERGE_GUARD_SEGMENTS = 256
#: Where the hold's segments add up to this many pages, the whole index is merged into one at its end
#: ('optimize', in budgeted steps). Left at a low level, FTS5's automerge would merge it
#: inside one gateway write once its level filled: 1.2-1.6 s in the bench, for the 9k-page
#: segment of tombstones a run left in the trigram index. Hermes's own segments reach
#: 256 pages between two of its optimizes (every 1,000 writes), and merging four of those
#: is what its automerge normally costs.
FULL_MERGE_PAGES = 256
#: Pages of the first step of such a full merge (steps then grow with the budget).
FULL_MERGE_START_PAGES = 16
HOLD_NAME = "fts-hold.json"
MERGE_START_PAGES = 64
#: A safety stop for one round of merges; each step is bounded by the budget.
MERGE_MAX_STEPS = 100_000
#: Rowid of an FTS5 index's structure record in ``<table>_data`` (fixed by the file format).
STRUCTURE_ROWID = 10
_STRUCTURE_V2 = b"\xff\x00\x00\x01"


def fts5_tables(schema: SchemaInfo) -> list[str]:
    """Hermes's FTS5 indexes present in this database (an FTS5 table has ``_data`` and ``_config``)
    that the keeper's writes reach: the CJK index only with its triggers (:attr:`SchemaInfo.cjk_live`;
    without them Hermes rebuilds it whole, and touching it would need its tokenizer)."""
    return [
        t
        for t in FTS_TABLES
        if schema.has(t)
        and schema.has(f"{t}_data")
        and schema.has(f"{t}_config")
        and (t != CJK_INDEX or schema.cjk_live)
    ]


def fts_index(name: str) -> str | None:
    """The FTS index a table (the index itself or one of its shadow tables) belongs to, or None."""
    found = [t for t in FTS_TABLES if name == t or name.startswith(f"{t}_")]
    return max(found, key=len) if found else None


def _varint(buf: bytes, i: int) -> tuple[int, int]:
    """SQLite's big-endian varint at ``buf[i]``: (value, next offset)."""
    value = 0
    for n in range(9):
        byte = buf[i + n]
        if n == 8:
            return (value << 8) | byte, i + 9
        value = (value << 7) | (byte & 0x7F)
        if not byte & 0x80:
            return value, i + n + 1
    raise AssertionError("unreachable")


class Segment(NamedTuple):
    segid: int
    first: int  # first and last leaf page
    last: int

    @property
    def pages(self) -> int:
        return self.last - self.first + 1

    @property
    def key(self) -> tuple[int, int]:
        """Id and last page: FTS5 reuses the ids of merged-away segments, and a merge in progress
        trims its inputs from the front."""
        return self.segid, self.last


def structure(conn: sqlite3.Connection, table: str) -> list[tuple[int, list[Segment]]] | None:
    """The index's levels, each as (segments of it in a merge in progress, its segments); None if
    unreadable.

    From the structure record: a 4-byte cookie (and a 4-byte marker in the v2 records of
    SQLite >= 3.43, which add five varints per segment), varints nLevel, nSegment and the
    write counter, then per level nMerge, nSeg and per segment iSegid, pgnoFirst, pgnoLast.
    """
    row = conn.execute(f"SELECT block FROM {table}_data WHERE id = ?", (STRUCTURE_ROWID,)).fetchone()
    if row is None or not isinstance(row[0], bytes) or len(row[0]) < 6:
        return None
    buf = row[0]
    v2 = buf[4:8] == _STRUCTURE_V2
    i = 8 if v2 else 4
    try:
        n_levels, i = _varint(buf, i)
        _segments, i = _varint(buf, i)
        _writes, i = _varint(buf, i)
        out = []
        for _ in range(n_levels):
            merging, i = _varint(buf, i)
            n_segs, i = _varint(buf, i)
            level = []
            for _ in range(n_segs):
                segid, i = _varint(buf, i)
                first, i = _varint(buf, i)
                last, i = _varint(buf, i)
                for _ in range(5 if v2 else 0):
                    _, i = _varint(buf, i)
                level.append(Segment(segid, first, last))
            out.append((merging, level))
    except IndexError:
        return None
    return out


def segments(conn: sqlite3.Connection, table: str) -> list[list[Segment]] | None:
    """The index's levels, each a list of its segments; None if unreadable."""
    st = structure(conn, table)
    return None if st is None else [level for _, level in st]


def merges_in_progress(conn: sqlite3.Connection, table: str) -> list[list[int]]:
    """[level, input segments, segments] of each level with a merge in progress (:func:`next_merge`)."""
    return [
        [n, merging, len(level)] for n, (merging, level) in enumerate(structure(conn, table) or []) if merging
    ]


def levels(conn: sqlite3.Connection, table: str) -> list[list[int]] | None:
    """The index's levels, each a list of its segments' sizes in pages (None if unreadable)."""
    lv = segments(conn, table)
    return None if lv is None else [[seg.pages for seg in level] for level in lv]


def _new_pages(lv: list[list[Segment]] | None, before: set[tuple[int, int]]) -> int:
    """Pages of the big segments (:data:`BIG_SEGMENT_PAGES`) not in ``before`` (:attr:`Segment.key`):
    about what merging them would make."""
    big = (seg for level in lv or [] for seg in level if seg.pages >= BIG_SEGMENT_PAGES)
    return sum(seg.pages for seg in big if seg.key not in before)


def _last_level(lv: list[list[Segment]] | None) -> set[tuple[int, int]]:
    """The segments (:attr:`Segment.key`) on the index's last non-empty level."""
    return {seg.key for seg in next((level for level in reversed(lv or []) if level), [])}


def next_merge(st: list[tuple[int, list[Segment]]] | None, usermerge: int) -> tuple[int, int] | None:
    """(level, inputs of the merge in progress there or 0 for a new one) that the next positive
    ``'merge'`` works on; None if it has nothing to do. As FTS5 (``fts5IndexMerge``) chooses: the
    lowest merge in progress, unless a level below holds at least as many segments as it has
    inputs; else the level with the most segments, if it holds ``usermerge`` or more."""
    best, best_level = 0, 0
    for n, (merging, level) in enumerate(st or []):
        if merging:
            if merging > best:
                return n, merging
            break
        if len(level) > best:
            best, best_level = len(level), n
    return (best_level, 0) if best >= usermerge else None


def hermes_merge(
    st: list[tuple[int, list[Segment]]] | None, found: set[tuple[int, int]], usermerge: int
) -> list[int] | None:
    """[level, inputs] if the next positive ``'merge'`` would go on with a merge in progress above
    level 0 of segments all in ``found`` (:attr:`Segment.key`, the index's when a hold engaged):
    where a hold's rounds stop.

    Hermes's bounded pass starts such a merge on the level with the most segments (an imported
    index's 24-62 big ones, most of the index) and goes on with it 2,000 pages a pass. A round
    that went on with it rewrote most of the index, and the full merge at the end rewrote it again
    (2 GB DELETE bench: round 1, 386 steps, 15 s of lock). Left, the full merge takes it in. A merge
    on level 0 is gone on with: every write's new segment goes there. So is one of
    :data:`MERGE_GUARD_SEGMENTS` inputs or more: the levels below could not outnumber it (FTS5 goes
    on with a merge in progress unless a level below holds as many segments as its inputs) before
    FTS5's crisismerge merged level 0 inside someone's write.
    """
    nxt = next_merge(st, usermerge)
    if nxt is None or nxt[0] == 0 or not nxt[1]:
        return None
    level, merging = nxt
    inputs = st[level][1][:merging]
    return (
        [level, merging] if merging < MERGE_GUARD_SEGMENTS and all(s.key in found for s in inputs) else None
    )


def _counts(lv: list[list[int]] | None) -> tuple[int, int] | None:
    """(big segments (:data:`BIG_SEGMENT_PAGES`), all segments) of an index's levels."""
    if lv is None:
        return None
    return sum(p >= BIG_SEGMENT_PAGES for sizes in lv for p in sizes), sum(map(len, lv))


def _size(lv: list[list[int]] | None) -> tuple[int | None, int | None]:
    """(segments, pages) of an index's levels (None, None if unreadable)."""
    return (None, None) if lv is None else (sum(map(len, lv)), sum(map(sum, lv)))


def longest_doclist_pages(conn: sqlite3.Connection, table: str) -> int | None:
    """Leaf pages of the longest doclist in any one segment of ``table`` (None if unreadable).

    ``<table>_idx`` has a row per leaf page on which a term starts (its ``pgno`` is the page
    number shifted left one bit); the pages between two such rows hold one term's doclist. A
    merge step ends only between two terms, so a step that reaches that term reads at least
    this many pages whatever it was asked for: why a merge step runs over its budget.
    """
    with contextlib.suppress(sqlite3.Error):
        row = conn.execute(
            f"SELECT max(gap) FROM (SELECT (lead(pgno) OVER (PARTITION BY segid ORDER BY pgno) >> 1)"
            f" - (pgno >> 1) AS gap FROM {table}_idx)"
        ).fetchone()
        return row[0] if row else None
    return None


def merge_step(c: sqlite3.Connection, table: str, pages: int) -> int:
    """One ``'merge', pages`` command; returns the rows it changed (fewer than 2: no work was left).

    Positive ``pages`` only merges a level holding at least ``usermerge`` segments (or
    continues a merge in progress); negative starts the full merge 'optimize' would do.
    """
    before = c.total_changes
    c.execute(f"INSERT INTO {table}({table}, rank) VALUES('merge', ?)", (pages,))
    return c.total_changes - before


def start_full_merge(w: Writer, table: str) -> AdaptiveBatch:
    """Ready ``table`` for a full ``merge_round`` beside Hermes's writes (:data:`FULL_MERGE_VALUES`);
    returns the batch to size its steps with. A page of the big segments costs more than a page of
    tombstones: the steps are sized afresh, from :data:`FULL_MERGE_START_PAGES`."""
    w.step(lambda c: _apply(c, table, FULL_MERGE_VALUES))
    return w.batch(start=FULL_MERGE_START_PAGES, fill=0.8)


class Round(NamedTuple):
    steps: int
    max_step_ms: float  # the longest a step held the lock: one term's doclist is never split
    max_step_commit_ms: float = 0.0  # of that step, its COMMIT's (DELETE mode: journal and db fsynced)
    max_step_pages: int = 0  # the pages it was asked to write
    over_budget: int = 0  # steps that held the lock longer than the writer's budget
    left: list[int] | None = None  # [level, inputs] of Hermes's merge it stopped before (``found``)


class Watch(NamedTuple):
    """What a round beside Hermes watches for (:meth:`MergeHold._merge`'s); None: nothing."""

    #: Hermes's merges the round stops before (segments of a merge Hermes started)
    found: set[tuple[int, int]] | None = None
    #: the settings the round runs under, taken back where another connection changed them
    hold: dict[str, int] | None = None
    #: told what another connection had changed, once taken back and committed
    moved: Callable[[dict[str, int | None]], None] | None = None


def merge_round(
    w: Writer,
    table: str,
    batch: AdaptiveBatch,
    full: bool = False,
    limit_ms: float | None = None,
    watch: Watch | None = None,
) -> Round:
    """Budgeted ``merge`` steps until no level of ``table`` has merge work left.

    ``full``: first start the merge of every segment into one, as 'optimize' does. A step
    ends only between two terms, so one term's whole doclist (a common word's) may take a
    step longer than the budget: the round says how long its longest step was, how much of
    that its COMMIT took, and how many pages it was asked for. ``limit_ms``: a step still
    running after that long is aborted and rolled back (``sqlite3.OperationalError: interrupted``).
    ``watch.found``: the round stops before a step would go on with a merge Hermes started on those
    segments (:func:`hermes_merge`), as read in that step's own transaction.
    ``watch.hold``: the settings the round runs under, which each step takes back in its own transaction
    where another connection changed them, and hands to ``watch.moved`` once committed. Hermes's first
    bounded pass sets usermerge 2; a round that went on at 2 merged its outputs on up into the
    index's biggest segment (2 GB DELETE bench: one round, 58 s of lock).
    """
    found, hold, moved = watch or Watch()
    longest = Round(0, 0.0)
    over = 0
    left: list[list[int]] = []
    for steps in range(1, MERGE_MAX_STEPS + 1):
        pages = (-1 if full and steps == 1 else 1) * batch.size
        seen: dict = {}  # what the step's committed attempt found: settings moved ("off"), Hermes's merge

        def merge(c: sqlite3.Connection, pages: int = pages, seen: dict = seen) -> int:
            seen.clear()  # a step rolled back and run again finds it all anew
            now = _settings(c, table) if hold or found else {}  # read once a step
            if hold:
                seen["off"] = {k: now[k] for k, v in hold.items() if now[k] != v}
                _apply(c, table, {k: hold[k] for k in seen["off"]})
                now.update(hold)
            if found:
                theirs = hermes_merge(structure(c, table), found, now["usermerge"] or HELD["usermerge"])
                if theirs:
                    seen["theirs"] = theirs
                    return 0
            with time_limit(c, limit_ms):
                return merge_step(c, table, pages)

        changed = w.step(merge, kind="merge")
        if seen.get("off") and moved:
            moved(seen["off"])
        if seen.get("theirs"):
            left.append(seen["theirs"])
        ms = w.stats.last_txn_ms
        over += ms > w.budget.budget_ms
        if ms > longest.max_step_ms:
            longest = Round(0, ms, w.stats.last_commit_ms, abs(pages))
        if changed < 2:
            return longest._replace(steps=steps, over_budget=over, left=left[-1] if left else None)
        batch.record(batch.size, ms)
    return longest._replace(steps=MERGE_MAX_STEPS, over_budget=over)


def _settings(conn: sqlite3.Connection, table: str) -> dict[str, int | None]:
    """The held keys as stored in ``<table>_config`` (None: no row, FTS5's default applies)."""
    marks = ",".join("?" * len(HELD))
    rows = dict(conn.execute(f"SELECT k, v FROM {table}_config WHERE k IN ({marks})", list(HELD)))
    return {k: rows.get(k) for k in HELD}


def _apply(c: sqlite3.Connection, table: str, values: dict[str, int | None]) -> None:
    """Set each key through FTS5, which tells every connection; a key that had no row loses it again.

    (Where SQLite's defensive mode forbids touching the shadow table, the key keeps FTS5's
    default value as an explicit row: the same behaviour.)
    """
    for key, value in values.items():
        c.execute(
            f"INSERT INTO {table}({table}, rank) VALUES(?, ?)", (key, HELD[key] if value is None else value)
        )
        if value is None:
            with contextlib.suppress(sqlite3.OperationalError):
                c.execute(f"DELETE FROM {table}_config WHERE k = ?", (key,))


def _valid_hold(data: object) -> dict[str, dict[str, int | None]]:
    """The hold file's settings, or :class:`ValueError` saying why they are not."""
    if not isinstance(data, dict) or not data:
        raise ValueError("not a table of FTS settings")
    for table, values in data.items():
        if table not in FTS_TABLES or not isinstance(values, dict) or not set(values) <= set(HELD):
            raise ValueError(f"unexpected entry {table!r}")
        if not all(v is None or (isinstance(v, int) and not isinstance(v, bool)) for v in values.values()):
            raise ValueError(f"a value of {table!r} is not a number")
    return data


#: Values only a hold sets (not a full merge's usermerge 2: today's Hermes sets that one itself).
_HOLD_ONLY = {k: {v} for k, v in HOLD_VALUES.items()}


def _settings_without_hold(conn: sqlite3.Connection, table: str) -> dict[str, int | None]:
    """Hermes's settings as the database holds them, a value only a hold sets taken as FTS5's default."""
    return {k: None if v in _HOLD_ONLY[k] else v for k, v in _settings(conn, table).items()}


class MergeHold:
    """FTS5 automerge off from :meth:`engage` to the end of the ``with`` block.

    Once engaged, :meth:`tick` runs after every step of the writer and merges an index in
    budgeted steps once it has gained enough segments. On exit (also after an error) the
    rest is merged and Hermes's own settings go back, then the saved copy is removed.
    Entering finds the copy a killed keeper left behind: those are Hermes's settings, and
    the block ends by restoring them.
    """

    def __init__(self, w: Writer, schema: SchemaInfo, keeper_dir: Path, journal: Journal | None = None):
        self.w = w
        self.tables = fts5_tables(schema)
        self.path = Path(keeper_dir) / HOLD_NAME
        self.journal = journal
        self.saved: dict[str, dict[str, int | None]] = {}  # set while engaged
        self.batches = {t: w.batch(start=MERGE_START_PAGES, fill=0.8) for t in self.tables}
        self.base: dict[str, tuple[int, int] | None] = {}  # (big, all) segments after the last merge
        self.before: dict[str, set[tuple[int, int]]] = {}  # segments when engaged (unknown for a found hold)
        self.merge_steps = 0
        self.merge_ms = 0.0  # lock time of those steps
        self.max_step_ms = 0.0  # the longest of them
        self._ticks = 0
        self._merging = False

    def __enter__(self) -> MergeHold:
        if self.path.exists():
            self.saved = self._found()
            self.base = {t: _counts(levels(self.w.conn, t)) for t in self.tables}
            self.w.after_step.append(self.tick)
            if self.journal:
                self.journal.write("fts_hold_found", settings=self.saved)
        return self

    def _found(self) -> dict[str, dict[str, int | None]]:
        """Hermes's settings from the hold file a killed keeper left; where the file is empty or
        unreadable (a power cut before its data reached the disk), what the database says, said
        in one line: a value only a hold sets is the keeper's (back to FTS5's default), any other
        is Hermes's own and stays."""
        keeper = self.path.parent
        try:
            saved = _valid_hold(json.loads(HomeFS(keeper.parent).read_bytes(keeper.name, HOLD_NAME) or b""))
        except (ValueError, UnicodeDecodeError) as exc:
            saved = {t: _settings_without_hold(self.w.conn, t) for t in self.tables}
            warn(f"{self.path} unreadable ({exc}); Hermes's FTS settings taken from the database instead")
            if self.journal:
                self.journal.write("fts_hold_recovered", reason=str(exc), settings=saved)
        return saved

    def engage(self) -> None:
        """Save Hermes's settings (durably), then switch automerge off; once per block."""
        if self.saved or not self.tables:
            return
        self._save({t: _settings(self.w.conn, t) for t in self.tables})
        self.w.step(lambda c: [_apply(c, t, HOLD_VALUES) for t in self.tables])
        self.before = {
            t: {s.key for level in segments(self.w.conn, t) or [] for s in level} for t in self.tables
        }
        self.base = {t: _counts(levels(self.w.conn, t)) for t in self.tables}
        self.w.after_step.append(self.tick)
        if self.journal:
            self.journal.write("fts_hold", settings=self.saved)

    def _save(self, saved: dict[str, dict[str, int | None]]) -> None:
        """The settings to put back, durably in the hold file first."""
        private_dir(self.path.parent)
        tmp = self.path.with_suffix(".tmp")
        fd = open_private(tmp, os.O_CREAT | os.O_WRONLY | os.O_TRUNC)
        try:
            os.write(fd, json.dumps(saved).encode())
        finally:
            os.close(fd)
        durable_rename(tmp, self.path)
        self.saved = saved

    def _hermes_wish(self, table: str, changed: dict[str, int | None]) -> None:
        """A held setting Hermes changed during the hold is its new wish: put back at the end
        instead of the one saved (the round that found it took the hold's value back)."""
        self._save({**self.saved, table: {**self.saved[table], **changed}})
        if self.journal:
            self.journal.write("fts_hold_changed", table=table, settings=changed)

    def tick(self) -> None:
        """Merge an index when due (:data:`MERGE_EVERY_SEGMENTS`, :data:`MERGE_GUARD_SEGMENTS`).

        (A structure record we cannot read: merge every ``MERGE_EVERY_SEGMENTS // 2`` writes,
        since each write adds one or two segments.)
        """
        if not self.saved or self._merging:
            return
        self._ticks += 1
        for t in self.tables:
            now, base = _counts(levels(self.w.conn, t)), self.base.get(t)
            if now is None or base is None:
                due = self._ticks % (MERGE_EVERY_SEGMENTS // 2) == 0
            else:
                due = now[0] - base[0] >= MERGE_EVERY_SEGMENTS or now[1] - base[1] >= MERGE_GUARD_SEGMENTS
            if due:
                self._merge(t)

    def _merge(self, table: str, full: bool = False, settle: bool = False) -> None:
        """One round of merges (:func:`merge_round`), journaled with its cost: where a run's time goes.
        ``settle``: with :data:`SETTLE_VALUES`."""
        self._merging = True  # its own steps run the writer's hooks too
        held, t0, before = self.w.stats.total_txn_ms, time.perf_counter(), levels(self.w.conn, table)
        merging = merges_in_progress(self.w.conn, table)
        # A full merge rewrites every doclist: its longest step is at least the longest one's.
        doclist = longest_doclist_pages(self.w.conn, table) if full else None
        r = Round(0, 0.0)
        values = {**HOLD_VALUES, **(FULL_MERGE_VALUES if full else SETTLE_VALUES if settle else {})}
        try:
            if settle:
                self.w.step(lambda c: _apply(c, table, SETTLE_VALUES))
            watch = Watch(
                found=None if full else self.before.get(table),
                hold=values,
                # (Not for a found hold: a value may be the killed run's own.)
                moved=(lambda changed: self._hermes_wish(table, changed)) if table in self.before else None,
            )
            r = merge_round(self.w, table, self.batches[table], full, watch=watch)
        finally:
            self._merging = False
            lock_ms = self.w.stats.total_txn_ms - held
            self.merge_steps += r.steps
            self.merge_ms += lock_ms
            self.max_step_ms = max(self.max_step_ms, r.max_step_ms)
        after = levels(self.w.conn, table)
        self.base[table] = _counts(after)
        if self.journal:
            (segs, pages), (segs_after, pages_after) = _size(before), _size(after)
            self.journal.write(
                "fts_merge",
                durable=False,  # synced with the prune's or the hold's end
                table=table,
                full=full,
                steps=r.steps,
                lock_ms=round(lock_ms, 1),
                max_step_ms=round(r.max_step_ms, 1),
                # why the longest step was long: its COMMIT, or the merge itself (one term's
                # doclist is one step, whatever the pages asked for)
                max_step_commit_ms=round(r.max_step_commit_ms, 1),
                max_step_pages=r.max_step_pages,
                over_budget=r.over_budget,
                **({"longest_doclist_pages": doclist} if full else {}),
                wall_ms=round((time.perf_counter() - t0) * 1000.0, 1),
                segments=[segs, segs_after],
                pages=[pages, pages_after],
                # merges in progress the round found (Hermes's passes start them), and the one of
                # Hermes's it left to the full merge ([level, inputs])
                merging=merging,
                left=r.left,
                levels=[len(sizes) for sizes in before or []],
            )

    def __exit__(self, exc_type, exc, tb) -> None:
        if self.tick in self.w.after_step:
            self.w.after_step.remove(self.tick)
        if not self.saved:
            return
        if isinstance(exc, TryLater):
            # The database stays busy: merging now would only wait again. The saved copy stays,
            # and the next run (or compact) merges and puts Hermes's settings back first.
            if self.journal:
                self.journal.write("fts_hold_kept", reason="database busy")
            return
        try:
            self._release()
        except (sqlite3.Error, OSError):
            if exc is None:
                raise
            # Already failing (a full disk, say): keep that error; the saved copy stays for the next run.

    def _release(self) -> None:
        """A last round; then, where the hold's segments add up to :data:`FULL_MERGE_PAGES`, merge
        the whole index into one, so Hermes's automerge finds only its own small segments
        afterwards, and where they do not, merge until no level holds 4 segments
        (:data:`SETTLE_VALUES`). For a hold found after a kill, which
        segments it made is unknown: all count, except those on the last level, where 'optimize'
        (Hermes's, or a full merge the killed run got through) leaves its one segment.
        """
        t0 = time.perf_counter()
        held = [t for t in self.saved if t in self.tables]
        full = []
        for t in held:
            self._merge(t)
            lv = segments(self.w.conn, t)
            before = self.before[t] if t in self.before else _last_level(lv)
            if _new_pages(lv, before) >= FULL_MERGE_PAGES:
                self.batches[t] = start_full_merge(self.w, t)
                self._merge(t, full=True)
                full.append(t)
            else:
                self._merge(t, settle=True)
        self.w.step(lambda c: [_apply(c, t, self.saved[t]) for t in held])
        keeper = self.path.parent
        if HomeFS(keeper.parent).unlink(keeper.name, HOLD_NAME) is None:  # gone, or a link the door keeps
            raise FileNotFoundError(errno.ENOENT, "gone or not a regular file", str(self.path))
        fsync_dir(keeper)
        if self.journal:
            self.journal.write(
                "fts_restored",
                settings=self.saved,
                merge_steps=self.merge_steps,
                full_merge=full,
                final_merge_s=round(time.perf_counter() - t0, 3),
            )
        self.saved = {}


def release_leftover_hold(
    w: Writer, schema: SchemaInfo, keeper_dir: Path, journal: Journal | None = None
) -> bool:
    """Finish a hold a killed keeper left behind (merge, restore Hermes's settings); True if there was one."""
    with MergeHold(w, schema, keeper_dir, journal) as hold:
        return bool(hold.saved)
