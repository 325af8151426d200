"""The per-profile archive: every pruned session, restorable, in ``<home>/keeper/archive*.db``.

One file per UTC month (``archive.db`` first, then ``archive-YYYY-MM.db``), read together as
one :class:`Archive`, so no file grows without bound and retention can drop a month whole.

One row (an *entry*) per archived version of a session: a few columns to list and filter
by, and a zstd-compressed JSON payload holding the session row, *all* its messages
(``active=0`` included, with their original ids), its ``session_model_usage`` rows,
``state_meta`` keys naming it and the shared ``system_prompts`` rows it references by hash
(schema >= 25: Hermes deletes a prompt no session references, so the archive keeps its text
rather than rely on it). The sha256 of the uncompressed payload is stored beside it
and checked on every read, so a damaged row is refused rather than restored wrong.

An entry is never overwritten with other content. Hermes reuses session ids (imports,
client-supplied ids) and a backup restore hands message ids out again, so a session that
comes back with the same id but new content gets an entry of its own (``entry``, newest
last); identity is the content an entry holds, not the ids (:func:`message_keys`).

What a payload holds, and how it is read from state.db, is :mod:`hermes_keeper.archive.payload`.
"""

from __future__ import annotations

import hashlib
import heapq
import os
import re
import sqlite3
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from itertools import chain
from pathlib import Path
from typing import Any

import orjson
import zstandard

from hermes_keeper.archive.payload import FORMAT, canonical_bytes
from hermes_keeper.errors import KeeperError
from hermes_keeper.fs import SQLITE_SIDES, HomeFS
from hermes_keeper.sqlite.connect import connect_file, write_txn

#: Layout of archive.db itself: 1 = one row per session id (before entries), 2 = entries.
LAYOUT = 2
ZSTD_LEVEL = 3
ARCHIVE_NAME = "archive.db"

#: Life of an archive row. ``archived``: payload verified, the session may still be in
#: state.db (a prune in progress, or one a crash interrupted). ``pruned``: gone from
#: state.db. ``restored``: put back; the row stays as history until archived again.
ARCHIVED, PRUNED, RESTORED = "archived", "pruned", "restored"

_COLUMNS = """
    session_id TEXT NOT NULL,
    source TEXT NOT NULL,
    title TEXT,
    parent_session_id TEXT,
    started_at REAL,
    ended_at REAL,
    last_activity REAL,
    message_count INTEGER NOT NULL,
    raw_bytes INTEGER NOT NULL,
    stored_bytes INTEGER NOT NULL,
    sha256 TEXT NOT NULL,
    schema_version INTEGER,
    format INTEGER NOT NULL,
    reason TEXT,
    state TEXT NOT NULL,
    archived_at REAL NOT NULL,
    payload BLOB NOT NULL
"""
_INDEXES = """
CREATE INDEX IF NOT EXISTS idx_archived_sessions_id ON archived_sessions(session_id, entry);
CREATE INDEX IF NOT EXISTS idx_archived_sessions_source ON archived_sessions(source, last_activity);
CREATE INDEX IF NOT EXISTS idx_archived_sessions_state ON archived_sessions(state);
"""
_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS archive_meta (key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE IF NOT EXISTS archived_sessions (entry INTEGER PRIMARY KEY AUTOINCREMENT, {_COLUMNS});
{_INDEXES}
INSERT OR IGNORE INTO archive_meta VALUES ('layout', '{LAYOUT}');
"""
#: Layout 1 -> 2 in one transaction: the same rows, each now an entry (oldest first).
_MIGRATE_1 = f"""
CREATE TABLE archived_sessions_2 (entry INTEGER PRIMARY KEY AUTOINCREMENT, {_COLUMNS});
INSERT INTO archived_sessions_2 ({{cols}}) SELECT {{cols}} FROM archived_sessions ORDER BY archived_at, rowid;
DROP TABLE archived_sessions;
ALTER TABLE archived_sessions_2 RENAME TO archived_sessions;
{_INDEXES}
INSERT OR REPLACE INTO archive_meta VALUES ('layout', '{LAYOUT}');
"""


class ArchiveDamaged(KeeperError):
    """A payload whose sha256 or compression does not check out: a refusal (one line, nothing
    deleted), never a traceback."""


@dataclass(frozen=True)
class Entry:
    """An archive entry without its payload; ``entry`` addresses it, ``session_id`` may repeat."""

    session_id: str
    source: str
    title: str | None
    parent_session_id: str | None
    started_at: float | None
    ended_at: float | None
    last_activity: float | None
    message_count: int
    raw_bytes: int
    stored_bytes: int
    sha256: str
    schema_version: int | None
    reason: str | None
    state: str
    archived_at: float
    entry: int


_ENTRY_COLUMNS = ", ".join(Entry.__dataclass_fields__)
_INSERT_COLUMNS = (
    "session_id, source, title, parent_session_id, started_at, ended_at, last_activity, message_count,"
    " raw_bytes, stored_bytes, sha256, schema_version, format, reason, state, archived_at, payload"
)


def message_keys(payload: dict) -> set[bytes]:
    """What identifies a message in the archive: all of it (id, content, every column), not the id."""
    return {canonical_bytes(m) for m in payload["messages"]}


def period_of(ts: float) -> str:
    """The rollover period ``ts`` falls in: its UTC month (``2026-12``)."""
    return time.strftime("%Y-%m", time.gmtime(ts))


def archive_exists(keeper_dir: Path) -> bool:
    """Any file of the archive is there (a link too: opening it is refused, not skipped)."""
    return bool(archive_paths(Path(keeper_dir) / ARCHIVE_NAME))


def archive_paths(first: Path) -> list[Path]:
    """The archive's files, oldest first: ``archive.db``, then each ``archive-YYYY-MM.db`` by month.

    Links are listed too (the door refuses them when they are opened), so nothing is skipped silently.
    """
    try:
        names = set(os.listdir(first.parent))
    except FileNotFoundError:
        return []
    rolled = re.compile(rf"{re.escape(first.stem)}-\d{{4}}-\d{{2}}{re.escape(first.suffix)}")
    later = sorted(n for n in names if rolled.fullmatch(n))
    return ([first] if first.name in names else []) + [first.with_name(n) for n in later]


class ArchiveFile:
    """One SQLite file of the archive. Owner-only; WAL with synchronous=FULL so a commit is on disk.

    Opening checks the file before anything is written anywhere: not SQLite, or a layout
    newer than :data:`LAYOUT`, is a :class:`KeeperError`; layout 1 is migrated in place
    (one transaction).
    """

    def __init__(self, path: Path, create: bool = True, synchronous: str = "FULL"):
        self.path = Path(path)
        # Its folder (``keeper/``) and the file through the door: SQLite itself follows symlinks.
        # Not SQLite, or a layout this keeper does not know, is refused in ``_open``, by SQLite
        # (never by reading the file ourselves: closing such a descriptor would drop the POSIX
        # locks another connection of this process holds on it).
        folder = self.path.absolute().parent
        HomeFS(folder.parent).sqlite_file(folder.name, self.path.name, create=create)
        # Used by one thread at a time, but may be closed by another: a command's generator that
        # an exception left suspended is finalised wherever the garbage collector runs.
        self.conn = connect_file(self.path, timeout=10, check_same_thread=False)
        try:
            self._open(create, synchronous)
        except BaseException:
            self.conn.close()
            raise

    def _open(self, create: bool, synchronous: str) -> None:
        try:
            layout = self._layout()
        except sqlite3.DatabaseError as exc:
            raise KeeperError(f"{self.path}: cannot open the archive ({exc})") from None
        if layout is not None and layout > LAYOUT:
            raise KeeperError(
                f"{self.path} has layout {layout}, newer than this hermes-keeper knows ({LAYOUT}); upgrade it"
            )
        if layout is None and not create:  # before the pragmas below, which would write to it
            raise KeeperError(f"{self.path}: cannot open the archive (it holds no archive tables)")
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute(f"PRAGMA synchronous={synchronous}")
        if layout == 1:
            self._migrate_1()
        elif layout is None:
            self.conn.executescript(_SCHEMA)

    def _layout(self) -> int | None:
        """None for a new (empty) file; else the layout recorded, or 1 for the old one-row-per-id table."""
        tables = {r[0] for r in self.conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if "archived_sessions" not in tables:
            return None
        row = None
        if "archive_meta" in tables:
            row = self.conn.execute("SELECT value FROM archive_meta WHERE key = 'layout'").fetchone()
        if row is not None:
            try:
                return int(row[0])
            except (TypeError, ValueError):
                raise KeeperError(f"{self.path}: unknown archive layout {row[0]!r}") from None
        cols = {r[1] for r in self.conn.execute("PRAGMA table_info(archived_sessions)")}
        return LAYOUT if "entry" in cols else 1

    def _migrate_1(self) -> None:
        """Layout 1 -> 2 in one transaction: a crash leaves the old layout, whole."""
        with write_txn(self.conn):
            if self._layout() == 1:  # another keeper process may have migrated it meanwhile
                self.conn.execute(
                    "CREATE TABLE IF NOT EXISTS archive_meta (key TEXT PRIMARY KEY, value TEXT)"
                )
                for stmt in _MIGRATE_1.format(cols=_INSERT_COLUMNS).split(";"):
                    if stmt.strip():
                        self.conn.execute(stmt)

    @property
    def period(self) -> str | None:
        """The month this file holds: recorded when it was made, else (``archive.db``) its first entry's."""
        row = self.conn.execute("SELECT value FROM archive_meta WHERE key = 'period'").fetchone()
        if row is not None:
            return row[0]
        first = self.conn.execute("SELECT min(archived_at) FROM archived_sessions").fetchone()[0]
        return None if first is None else period_of(first)

    def high_water(self) -> int:
        """The highest entry number this file ever handed out (deleted rows included)."""
        row = self.conn.execute("SELECT seq FROM sqlite_sequence WHERE name = 'archived_sessions'").fetchone()
        top = self.conn.execute("SELECT max(entry) FROM archived_sessions").fetchone()[0]
        return max(row[0] if row else 0, top or 0)

    def seed(self, floor: int) -> None:
        """In a write transaction: the next entry of this file is above ``floor`` (entries never repeat)."""
        if self.high_water() < floor:
            self.conn.execute("DELETE FROM sqlite_sequence WHERE name = 'archived_sessions'")
            self.conn.execute(
                "INSERT INTO sqlite_sequence (name, seq) VALUES ('archived_sessions', ?)", (floor,)
            )

    def base_bytes(self) -> int:
        """What this file holds with no entry: page 1 and a page per table and index."""
        roots = self.conn.execute("SELECT count(*) FROM sqlite_master WHERE rootpage > 0").fetchone()[0]
        return (1 + roots) * self.conn.execute("PRAGMA page_size").fetchone()[0]

    def entries(self, where: str = "", params: tuple = ()) -> Iterator[Entry]:
        for row in self.conn.execute(f"SELECT {_ENTRY_COLUMNS} FROM archived_sessions {where}", params):
            yield Entry(*row)

    def delete(self, entries: list[int]) -> int:
        """Delete these entries where this file holds them (inside the caller's transaction); rows deleted."""
        n = 0
        for i in range(0, len(entries), 500):
            chunk = entries[i : i + 500]
            n += self.conn.execute(
                f"DELETE FROM archived_sessions WHERE entry IN ({','.join('?' * len(chunk))})", chunk
            ).rowcount
        return n

    def close(self) -> None:
        self.conn.close()


class Archive:
    """Every file of one profile's archive, read as one; new entries go to the current month's file.

    ``archive.db`` is the first file (every archive written before rollover is one, read as it
    is); each later UTC month gets ``archive-YYYY-MM.db``, so no file grows without bound and
    retention can drop a whole month as a file. Entry numbers run on across files (a new file
    starts above every entry before it), so ``entry`` names one row of one file and a session's
    newest entry is its highest number, whichever file holds it.
    """

    def __init__(self, path: Path, create: bool = True, synchronous: str = "FULL"):
        self.path = Path(path)  # the first file; the others sit beside it
        self.create, self.synchronous = create, synchronous
        self.files: list[ArchiveFile] = []
        self._zc = zstandard.ZstdCompressor(level=ZSTD_LEVEL)
        self._zd = zstandard.ZstdDecompressor()
        try:
            self._refresh()
            if not self.files:  # a new archive (or, reading, the one-line refusal of a missing one)
                self.files.append(ArchiveFile(self.path, create, synchronous))
        except BaseException:
            self.close()
            raise

    def _refresh(self) -> bool:
        """Open the files another connection (the run's archiver) added since; True if any."""
        known = {f.path for f in self.files}
        new = [p for p in archive_paths(self.path) if p not in known]
        for p in new:
            self.files.append(ArchiveFile(p, self.create, self.synchronous))
        self.files.sort(key=lambda f: (f.path != self.path, f.path.name))
        return bool(new)

    @classmethod
    def for_home(cls, keeper_dir: Path, create: bool = True, synchronous: str = "FULL") -> Archive:
        return cls(Path(keeper_dir) / ARCHIVE_NAME, create=create, synchronous=synchronous)

    def close(self) -> None:
        for f in self.files:
            f.close()

    def __enter__(self) -> Archive:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _current(self, now: float) -> ArchiveFile:
        """The file new entries go to: the newest, unless it holds an earlier month (then a new one).

        A clock set back keeps writing to the newest file: entries stay in file order.
        """
        newest, period = self.files[-1], period_of(now)
        if newest.period is None or newest.period >= period:
            return newest
        f = ArchiveFile(
            self.path.with_name(f"{self.path.stem}-{period}{self.path.suffix}"), True, self.synchronous
        )
        self.files.append(f)
        with write_txn(f.conn):
            f.conn.execute("INSERT OR IGNORE INTO archive_meta VALUES ('period', ?)", (period,))
        return f

    def put(self, payloads: Iterable[dict], reason: str | None = None, now: float | None = None) -> list[int]:
        """Store payloads in the current month's file, in one transaction; returns the entry of each.

        Never overwrites other content: a payload the session's newest entry already holds
        reuses that entry (see :meth:`_holder`); otherwise a new entry is added, and the newest
        one is dropped only when it is not ``pruned`` and every message of it is in the new
        payload (a session that woke up mid-prune, archived again: nothing of it is lost).
        Every entry returned ends up ``archived``. Serialising and compressing happen before
        the transaction, so the archive's write lock is held only for the inserts. An entry
        reused or dropped in an older file is changed after the commit, in that file: a crash
        in between leaves one copy too many, never one too few.
        """
        now = time.time() if now is None else now
        rows = [(p, self._row(p, reason, now)) for p in payloads]
        cur = self._current(now)
        decided = [(row, *self._holder(p, row[10])) for p, row in rows]
        out, reused, dropped = [], [], []
        with write_txn(cur.conn):
            cur.seed(max(f.high_water() for f in self.files))
            for row, held, superseded in decided:
                if held is not None:
                    reused.append(held)
                    out.append(held)
                    continue
                if superseded is not None:
                    dropped.append(superseded)
                inserted = cur.conn.execute(
                    f"INSERT INTO archived_sessions ({_INSERT_COLUMNS}) VALUES ({','.join('?' * len(row))})",
                    row,
                )
                out.append(inserted.lastrowid)
            self._each(reused, cur, "UPDATE archived_sessions SET state = ? WHERE entry IN ({})", [ARCHIVED])
            cur.delete(dropped)
        for f in self.files if reused or dropped else ():
            if f is not cur:
                with write_txn(f.conn):
                    self._each(
                        reused, f, "UPDATE archived_sessions SET state = ? WHERE entry IN ({})", [ARCHIVED]
                    )
                    f.delete(dropped)
        return out

    @staticmethod
    def _each(entries: list[int], f: ArchiveFile, sql: str, first: list | None = None) -> int:
        """``sql`` over the ``entries`` that live in ``f`` (``{}``: their placeholders); rows changed."""
        if not entries:
            return 0
        cur = f.conn.execute(sql.format(",".join("?" * len(entries))), [*(first or []), *entries])
        return cur.rowcount

    def _row(self, p: dict, reason: str | None, now: float) -> tuple:
        """The ``archived_sessions`` row of one payload: columns to list by, sha256, zstd payload."""
        s = p["session"]
        raw = canonical_bytes(p)
        blob = self._zc.compress(raw)
        last = max(
            [t for t in [s.get("started_at"), s.get("ended_at")] if isinstance(t, (int, float))]
            + [m["timestamp"] for m in p["messages"] if isinstance(m.get("timestamp"), (int, float))],
            default=None,
        )
        return (
            s["id"],
            s.get("source") or "unknown",
            _plain(s.get("title")),
            _plain(s.get("parent_session_id")),
            s.get("started_at"),
            s.get("ended_at"),
            last,
            len(p["messages"]),
            len(raw),
            len(blob),
            hashlib.sha256(raw).hexdigest(),
            p.get("schema_version"),
            p.get("format", FORMAT),
            reason,
            ARCHIVED,
            now,
            blob,
        )

    def _holder(self, p: dict, sha: str) -> tuple[int | None, int | None]:
        """(entry that already holds ``p``, entry ``p`` may replace) among the session's newest.

        The newest entry holds ``p`` when it is byte for byte the same, or when it is ``pruned``
        and has every message of ``p`` (by content): the session is in state.db only in part
        because an ``archive restore`` was interrupted, and replacing it would lose the rest.
        """
        e = self.entry(p["session"]["id"])
        if e is None:
            return None, None
        if e.sha256 == sha:
            return e.entry, None
        try:
            old = self.get_entry(e.entry)
        except ArchiveDamaged:
            return None, None  # kept as it is; the new content gets an entry of its own
        new_keys, old_keys = message_keys(p), message_keys(old)
        if e.state == PRUNED and new_keys <= old_keys:
            return e.entry, None
        if e.state != PRUNED and old_keys <= new_keys:
            return None, e.entry
        return None, None

    def get(self, session_id: str) -> dict:
        """The verified payload of a session's newest entry (else :class:`ArchiveDamaged`)."""
        e = self.entry(session_id)
        if e is None:
            raise KeyError(session_id)
        return self.get_entry(e.entry)

    def get_entry(self, entry: int) -> dict:
        """The verified payload of one entry."""
        return orjson.loads(self.entry_bytes(entry))

    def verify(self, entry: int) -> bool:
        """The stored payload decompresses to exactly the bytes whose sha256 was recorded."""
        try:
            self.entry_bytes(entry)
        except ArchiveDamaged:
            return False
        return True

    def _find(self, sql: str, params: tuple) -> tuple | None:
        """The first row ``sql`` finds in any file, newest file first (looking again for new files)."""
        for attempt in range(2):
            for f in reversed(self.files):
                row = f.conn.execute(sql, params).fetchone()
                if row is not None:
                    return row
            if attempt or not self._refresh():
                return None
        return None

    def entry_bytes(self, entry: int) -> bytes:
        """The verified payload of one entry, as the JSON bytes it was stored from."""
        row = self._find(
            "SELECT session_id, sha256, payload FROM archived_sessions WHERE entry = ?", (entry,)
        )
        if row is None:
            raise KeyError(entry)
        return self._checked(*row)

    def _checked(self, session_id: str, sha: str, blob: bytes) -> bytes:
        try:
            raw = self._zd.decompress(blob)
        except zstandard.ZstdError as exc:
            raise ArchiveDamaged(f"{session_id}: payload does not decompress ({exc})") from None
        if hashlib.sha256(raw).hexdigest() != sha:
            raise ArchiveDamaged(f"{session_id}: sha256 mismatch")
        return raw

    def set_state(self, entries: Iterable[int], state: str) -> None:
        ids = list(entries)
        sql = "UPDATE archived_sessions SET state = ? WHERE entry IN ({})"
        for i in range(0, len(ids), 500):
            chunk = ids[i : i + 500]
            done = sum(self._each(chunk, f, sql, [state]) for f in self.files)
            if done < len(chunk) and self._refresh():  # some sit in a file the archiver made meanwhile
                self.set_state(chunk, state)

    def drop_file(self, f: ArchiveFile) -> None:
        """Delete one file of the archive (retention: a whole month gone), through the door."""
        self.files.remove(f)
        f.close()
        folder = f.path.absolute().parent
        for side in ("", *SQLITE_SIDES):
            HomeFS(folder.parent).unlink(folder.name, f.path.name + side)

    def entry(self, session_id: str) -> Entry | None:
        """The newest entry of a session."""
        row = self._find(
            f"SELECT {_ENTRY_COLUMNS} FROM archived_sessions WHERE session_id = ?"
            " ORDER BY entry DESC LIMIT 1",
            (session_id,),
        )
        return Entry(*row) if row else None

    def by_entry(self, entry: int) -> Entry | None:
        row = self._find(f"SELECT {_ENTRY_COLUMNS} FROM archived_sessions WHERE entry = ?", (entry,))
        return Entry(*row) if row else None

    def newest(self) -> dict[str, int]:
        """Each archived session id -> its newest entry, over every file (from the index alone)."""
        out: dict[str, int] = {}
        for f in self.files:
            for sid, entry in f.conn.execute(
                "SELECT session_id, max(entry) FROM archived_sessions GROUP BY session_id"
            ):
                out[sid] = max(entry, out.get(sid, 0))
        return out

    def hashes(self) -> set[tuple[int, str]]:
        """(entry, sha256) of every entry: what the archive holds, at the least cost (the search index)."""
        return {
            row for f in self.files for row in f.conn.execute("SELECT entry, sha256 FROM archived_sessions")
        }

    def fingerprint(self) -> str:
        """What changes whenever entries are added or dropped, read from the indexes alone: each
        file's count, sum and highest entry (entries never repeat, a payload never changes in
        place), and the newest entry's sha256 (an archive put in the place of another)."""
        parts = []
        for f in self.files:
            n, total, top = f.conn.execute(
                "SELECT count(*), total(entry), max(entry) FROM archived_sessions"
            ).fetchone()
            sha = f.conn.execute("SELECT sha256 FROM archived_sessions WHERE entry = ?", (top,)).fetchone()
            parts.append(f"{f.path.name}:{n}:{total:.0f}:{top}:{sha[0] if sha else ''}")
        return " ".join(parts)

    def session_ids(self, like: str, limit: int) -> list[str]:
        """Archived ids matching a LIKE pattern (``\\`` escapes), at most ``limit`` per file."""
        sql = "SELECT DISTINCT session_id FROM archived_sessions WHERE session_id LIKE ? ESCAPE '\\' LIMIT ?"
        return sorted({r[0] for f in self.files for r in f.conn.execute(sql, (like, limit))})

    def entries(
        self,
        where: str = "",
        params: tuple = (),
        keep: Callable[[Entry], bool] | None = None,
        order: Callable[[Entry], Any] | None = None,
    ) -> Iterator[Entry]:
        """Entries of every file: ``where`` (SQL, with its ORDER BY) in each, then ``keep``.

        ``order``: the key of that ORDER BY, to merge the files' streams; without it, file after
        file (which is entry order when each file's rows are).
        """
        streams = [(e for e in f.entries(where, params) if keep is None or keep(e)) for f in self.files]
        return (
            heapq.merge(*streams, key=order) if order and len(streams) > 1 else chain.from_iterable(streams)
        )

    def payloads(
        self,
        where: str = "",
        params: tuple = (),
        keep: Callable[[Entry], bool] | None = None,
        order: Callable[[Entry], Any] | None = None,
    ) -> Iterator[tuple[Entry, bytes | None]]:
        """Entries with their uncompressed payload (None when damaged), streaming, as :meth:`entries`."""
        sql = f"SELECT {_ENTRY_COLUMNS}, payload FROM archived_sessions {where}"

        def stream(f: ArchiveFile) -> Iterator[tuple[Entry, bytes | None]]:
            for row in f.conn.execute(sql, params):
                entry = Entry(*row[:-1])
                if keep is not None and not keep(entry):
                    continue
                try:
                    yield entry, self._checked(entry.session_id, entry.sha256, row[-1])
                except ArchiveDamaged:
                    yield entry, None

        streams = [stream(f) for f in self.files]
        if order is None or len(streams) == 1:
            return chain.from_iterable(streams)
        return heapq.merge(*streams, key=lambda pair: order(pair[0]))


def _plain(value):
    return value if not isinstance(value, dict) else None
