"""Per-session message statistics: one aggregate read, and a cache of it kept between reports.

The aggregate (:func:`message_stats`) returns each session's counts plus the timestamp and
bytes of each of its recent messages, so the growth windows can be counted for any later
``now`` from what was read once. ``run`` reads it fresh (it deletes on it); ``report``, ``check``
and the ``plan`` preview go through :class:`StatsCache` (``keeper/stats.db``), which reads only messages
newer than the highest id it has seen, re-reads (through the ``session_id`` index) the sessions
whose ``message_count`` moved away from their count, and reads everything again when it is
:data:`FULL_EVERY_S` old.
"""

from __future__ import annotations

import os
import sqlite3
from array import array
from typing import NamedTuple

from hermes_keeper.errors import KeeperError, warn
from hermes_keeper.fs import KEEPER_DIR, SQLITE_SIDES, HomeFS
from hermes_keeper.model.policy import DAY
from hermes_keeper.sqlite.connect import connect_file, id_steps
from hermes_keeper.sqlite.schema import SchemaInfo, timestamp_counts_sql

#: Days back for which each session's recent messages are counted (the report's growth windows).
RECENT_DAYS = (7, 30)
#: ``Stats.recent`` of a session without recent messages (arrays are never changed in place here).
NO_RECENT = (array("d"), array("q"))
#: ``Stats.windows`` of a session without recent messages.
NO_WINDOWS = ((0,) * len(RECENT_DAYS), (0,) * len(RECENT_DAYS))


class Stats(NamedTuple):
    """One session's messages: counts, text bytes, first/last timestamp, first id (where its rows
    sit in the b-tree), and ``recent``: the timestamps and the bytes of each message since the
    read's cutoff, as two arrays (a timestamp that is text is ``inf``: SQLite orders text after
    every number). Arrays take 16 bytes a message; a tuple of pairs took ~120 (a pair, a float, an
    int and a pointer), 118 MB of a plan's memory on a 6.4 GB home."""

    messages: int = 0
    inactive: int = 0
    bytes: int = 0
    first_at: object = None
    last_at: object = None
    first_id: int | None = None
    recent: tuple[array, array] = NO_RECENT
    #: timestamps that are text, milliseconds, before 1973 (:func:`schema.timestamp_counts_sql`)
    odd_stamps: tuple[int, int, int] = (0, 0, 0)

    @property
    def live(self) -> int:
        """The messages Hermes's ``sessions.message_count`` counts (the active ones)."""
        return self.messages - self.inactive

    def windows(self, now: float) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """Messages and bytes since each of :data:`RECENT_DAYS` before ``now``."""
        if not self.recent[0]:  # most sessions of a big home: none recent
            return NO_WINDOWS
        counts, sizes = [], []
        oldest = min(self.recent[0])
        for days in RECENT_DAYS:
            since = now - days * DAY
            if oldest >= since:  # every one of them (the longest window, as read): counted in C
                counts.append(len(self.recent[0]))
                sizes.append(sum(self.recent[1]))
                continue
            hits = [b for ts, b in zip(*self.recent, strict=True) if ts >= since]
            counts.append(len(hits))
            sizes.append(sum(hits))
        return tuple(counts), tuple(sizes)

    def since(self, cutoff: float) -> Stats:
        if not self.recent[0] or min(self.recent[0]) >= cutoff:  # most sessions: nothing to drop
            return self
        kept = [(ts, b) for ts, b in zip(*self.recent, strict=True) if ts >= cutoff]
        return self._replace(recent=(array("d", (ts for ts, _ in kept)), array("q", (b for _, b in kept))))


def message_size_sql(schema: SchemaInfo) -> str:
    """SQL for one message's text bytes (content, tool calls, reasoning: whichever exist).

    ``length()`` of TEXT counts characters; of a BLOB, bytes (and it skips UTF-8 decoding).
    """
    text_cols = [c for c in ("content", "tool_calls", "reasoning") if schema.has("messages", c)]
    return " + ".join(f"coalesce(length(CAST({c} AS BLOB)), 0)" for c in text_cols)


def _sql_order(value) -> tuple:
    """SQLite's order of values of mixed types (numbers before text before BLOBs), as min()/max() use."""
    return (0 if isinstance(value, (int, float)) else 1 if isinstance(value, str) else 2, value)


def _first(*stamps):
    return min((t for t in stamps if t is not None), default=None, key=_sql_order)


def _last(*stamps):
    return max((t for t in stamps if t is not None), default=None, key=_sql_order)


def _merge(a: Stats, b: Stats) -> Stats:
    """Two partial aggregates of one session (disjoint message sets) as one."""
    return Stats(
        a.messages + b.messages,
        a.inactive + b.inactive,
        a.bytes + b.bytes,
        _first(a.first_at, b.first_at),
        _last(a.last_at, b.last_at),
        _first(a.first_id, b.first_id),
        (a.recent[0] + b.recent[0], a.recent[1] + b.recent[1]),
        add_counts(a.odd_stamps, b.odd_stamps),
    )


def add_counts(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(x + y for x, y in zip(a, b, strict=True))


def fold(into: dict[str, Stats], part: dict[str, Stats]) -> None:
    for sid, stats in part.items():
        into[sid] = _merge(into[sid], stats) if sid in into else stats


def message_stats(
    conn: sqlite3.Connection, schema: SchemaInfo, since: float, where: str = "", params: tuple = ()
) -> dict[str, Stats]:
    """Per session (of the messages ``where`` selects): :class:`Stats`, with the messages at or
    after ``since`` grouped by timestamp. The one aggregate read of ``messages``."""
    inactive = "sum(active = 0)" if schema.has("messages", "active") else "0"
    size = message_size_sql(schema)
    # each recent message as "timestamp bytes", the timestamp in 17 digits (a double, exactly)
    number = "typeof(timestamp) IN ('real', 'integer')"
    stamp = f"CASE WHEN {number} THEN printf('%!.17g', timestamp) ELSE 'inf' END"
    sql = f"""
        SELECT session_id, count(*), {inactive}, sum({size}), min(timestamp), max(timestamp), min(id),
               group_concat(CASE WHEN timestamp >= ? THEN {stamp} || ' ' || ({size}) END),
               {timestamp_counts_sql("timestamp")}
        FROM messages {where} GROUP BY session_id
    """
    out: dict[str, Stats] = {}
    for row in conn.execute(sql, (since, *params)):
        sid, n, inactive_n, size_n, first, last, first_id, recent, *odd = row
        at, sizes = array("d"), array("q")
        for pair in recent.split(",") if recent else ():
            ts, b = pair.split(" ")
            at.append(float(ts))
            sizes.append(int(b))
        out[sid] = Stats(n, inactive_n or 0, size_n or 0, first, last, first_id, (at, sizes), tuple(odd))
    return out


def message_stats_in_steps(
    conn: sqlite3.Connection,
    schema: SchemaInfo,
    since: float,
    low: int | None = None,
    high: int | None = None,
) -> dict[str, Stats]:
    """:func:`message_stats` of the ids ``low..high`` (default: all) as short reads of id ranges
    (:func:`~hermes_keeper.sqlite.connect.id_steps`): no read holds Hermes's commits longer (a
    rollback-journal database, where a reader blocks every commit)."""
    out: dict[str, Stats] = {}
    for first, last in id_steps(conn, "messages", low, high):
        fold(out, message_stats(conn, schema, since, "WHERE id BETWEEN ? AND ?", (first, last)))
    return out


def recent_since(now: float) -> float:
    return now - max(RECENT_DAYS) * DAY


CACHE_NAME = "stats.db"
CACHE_VERSION = 2
#: The cache is read again in full when older: messages deleted or deactivated in place, which
#: leave ``message_count`` as it was (or a schema without it), are wrong in it at most this long.
FULL_EVERY_S = 7 * DAY
#: sessions re-read per statement (a short read each, as the stepped reads).
REREAD_BATCH = 50

_CACHE_SCHEMA = """
DROP TABLE IF EXISTS meta;
DROP TABLE IF EXISTS sessions;
CREATE TABLE meta (key TEXT PRIMARY KEY, value);
CREATE TABLE sessions (
    sid BLOB PRIMARY KEY, messages, inactive, bytes, first_at, last_at, first_id, seen_count,
    text_stamps, milli_stamps, early_stamps, recent_at BLOB, recent_bytes BLOB
);
"""


def _row(sid: str, stats: Stats, seen_count: int | None) -> tuple:
    """The cache's row of one session (its recent messages packed in two arrays)."""
    at, sizes = stats.recent
    return (_key(sid), *stats[:6], seen_count, *stats.odd_stamps, at.tobytes(), sizes.tobytes())


def _key(sid: str) -> bytes:
    return sid.encode("utf-8", "surrogateescape")  # ids that are not UTF-8 kept byte for byte


class StatsCache:
    """``keeper/stats.db``: the last :func:`message_stats` of every session, the highest message id
    read, when it was read in full, and each session's ``message_count`` then. Only where the
    keeper folder exists (a report on a home the keeper never ran on creates nothing); any problem
    with it is a warning and a fresh read, never a failed report."""

    def __init__(self, fs: HomeFS, db_path) -> None:
        self.fs, self.db_path = fs, db_path

    def stats(
        self,
        conn: sqlite3.Connection,
        schema: SchemaInfo,
        counts: dict[str, int | None],
        now: float,
        stepped: bool,
    ) -> dict[str, Stats]:
        """Every session of ``counts`` (id -> ``sessions.message_count``, None without the column):
        its statistics as a fresh read would give them, reading only what changed since the
        last time. ``conn`` is the survey's (inside its snapshot unless ``stepped``)."""
        since = recent_since(now)
        high = conn.execute("SELECT max(id) FROM messages").fetchone()[0] or 0
        shape = f"{CACHE_VERSION}|{message_size_sql(schema)}|{schema.has('messages', 'active')}"
        try:
            held = self._load(shape, since, now, high)
        except (sqlite3.Error, OSError, KeeperError, ValueError, TypeError, KeyError) as exc:
            warn(
                f"{self.fs.path(KEEPER_DIR, CACHE_NAME)} unreadable ({exc}): message statistics read in full"
            )
            for side in ("", *SQLITE_SIDES):  # written anew below
                self.fs.unlink(KEEPER_DIR, CACHE_NAME + side)
            held = None
        if held is None:
            stats = (
                message_stats_in_steps(conn, schema, since, high=high)
                if stepped
                else message_stats(conn, schema, since, "WHERE id <= ?", (high,))
            )
            stats = {sid: stats.get(sid, Stats()) for sid in counts}
            self._store(stats, counts, {}, _Mark(shape, since, high, now), changed=None)
            return stats
        low, full_at, stats, seen = held
        new = (
            message_stats_in_steps(conn, schema, since, low + 1, high)
            if stepped
            else message_stats(conn, schema, since, "WHERE id > ? AND id <= ?", (low, high))
        )
        stats = {sid: s.since(since) for sid, s in stats.items() if sid in counts}
        fold(stats, {sid: s for sid, s in new.items() if sid in counts})
        reread = [
            sid
            for sid, count in counts.items()
            if sid not in stats
            or (
                count is not None
                and count != stats[sid].live
                and (count != seen.get(sid) or sid in new)  # a lasting mismatch is not read each time
            )
        ]
        for i in range(0, len(reread), REREAD_BATCH):
            batch = reread[i : i + REREAD_BATCH]
            marks = ",".join("?" * len(batch))
            part = message_stats(
                conn, schema, since, f"WHERE session_id IN ({marks}) AND id <= ?", (*batch, high)
            )
            stats.update({sid: part.get(sid, Stats()) for sid in batch})
        changed = {*new, *reread} & set(counts)
        self._store(stats, counts, seen, _Mark(shape, since, high, full_at), changed)
        return stats

    def _connect(self, create: bool) -> sqlite3.Connection:
        path = self.fs.sqlite_file(KEEPER_DIR, CACHE_NAME, create=create)
        conn = connect_file(path)
        conn.text_factory = lambda b: b.decode("utf-8", "surrogateescape")
        return conn

    def _load(self, shape: str, since: float, now: float, high: int):
        """(highest id read, when read in full, stats, message_count seen) or None: no cache, or one
        that cannot stand in (another shape, too old, time went back, fewer messages than it saw)."""
        if not self.fs.plain_dir(KEEPER_DIR) or self.fs.lstat(KEEPER_DIR, CACHE_NAME) is None:
            return None
        conn = self._connect(create=False)
        try:
            meta = dict(conn.execute("SELECT key, value FROM meta"))
            if (
                meta.get("shape") != shape
                or meta.get("db_id") != _db_id(self.db_path)
                or not 0 <= now - float(meta["full_at"]) <= FULL_EVERY_S
                or since < float(meta["since"])
                or high < int(meta["max_id"])
            ):
                return None
            stats, seen = {}, {}
            for sid, n, inactive, size, first, last, first_id, seen_count, *odd, at, sizes in conn.execute(
                "SELECT sid, messages, inactive, bytes, first_at, last_at, first_id, seen_count,"
                " text_stamps, milli_stamps, early_stamps, recent_at, recent_bytes FROM sessions"
            ):
                key = sid.decode("utf-8", "surrogateescape")
                near = (array("d", at), array("q", sizes))
                if len(near[0]) != len(near[1]):
                    raise ValueError(f"{key}: {len(near[0])} recent timestamps, {len(near[1])} sizes")
                stats[key] = Stats(n, inactive, size, first, last, first_id, near, tuple(odd))
                seen[key] = seen_count
            return int(meta["max_id"]), float(meta["full_at"]), stats, seen
        finally:
            conn.close()

    def _store(self, stats, counts, seen, mark: _Mark, changed) -> None:
        """Write what was read (``changed``: only those sessions; None: all), in one transaction."""
        if not self.fs.plain_dir(KEEPER_DIR):
            return
        try:
            conn = self._connect(create=True)
            try:
                conn.execute("BEGIN IMMEDIATE")
                if changed is None:  # read in full: the cache made anew (whatever shape it had)
                    for statement in _CACHE_SCHEMA.split(";")[:-1]:
                        conn.execute(statement)
                    changed = stats
                else:
                    known = {r[0] for r in conn.execute("SELECT sid FROM sessions")}
                    gone = known - {_key(sid) for sid in stats}
                    conn.executemany("DELETE FROM sessions WHERE sid = ?", ((k,) for k in gone))
                rows = (_row(s, stats[s], counts.get(s)) for s in changed)
                conn.executemany(f"INSERT OR REPLACE INTO sessions VALUES ({', '.join('?' * 13)})", rows)
                conn.executemany(
                    "UPDATE sessions SET seen_count = ? WHERE sid = ?",
                    (
                        (count, _key(sid))
                        for sid, count in counts.items()
                        if sid not in changed and count != seen.get(sid)
                    ),
                )
                meta = {"shape": mark.shape, "db_id": _db_id(self.db_path), "max_id": mark.high}
                meta |= {"since": mark.since, "full_at": mark.full_at}
                conn.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)", meta.items())
                conn.execute("COMMIT")
            finally:
                conn.close()
        except (sqlite3.Error, OSError, KeeperError):  # a cache, as facts.json: the next report reads in full
            pass


class _Mark(NamedTuple):
    """What a cache was read against: its shape, the recent window, the highest message id, and
    when it was last read in full."""

    shape: str
    since: float
    high: int
    full_at: float


def _db_id(path) -> str:
    """Which file the ids belong to: a state.db replaced (a restore) is read again in full."""
    st = os.stat(path)
    return f"{st.st_dev}:{st.st_ino}"
