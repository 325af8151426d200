"""A logical copy of ``state.db`` for a deduplicating store: SQL files of its rows, indexes rebuilt on load.

A page copy defeats restic's content-defined chunking however it is taken: on the bench a day of
Hermes alone (its FTS5 ``optimize`` every 1,000 writes rewrites the whole index, ~3/4 of the file)
changed half the pages and 44-52 of 64 one-MiB regions. The rows themselves barely change: a
night adds a day's messages and removes the sessions idle longest. So the off-host copy is the
database as SQL, in files laid out so that those are whole files (:func:`statements`), without the
FTS5 indexes' derived data (``_data``, ``_idx``, ``_docsize``). Loading runs the same schema, the
rows, then ``'rebuild'`` on each FTS5 index (from its own ``_content`` or its content table:
exactly what Hermes indexed), then the triggers, and checks the row counts the dump ends with.

Only what this can rebuild is dumped this way: FTS5 indexes with built-in tokenizers and a content
to rebuild from. Anything else (Hermes's CJK index, whose tokenizer is a library in the home; a
contentless index; another virtual table module) is :func:`layout` ``None``: the caller sends the
page copy instead.

The files, in name order, load in the sqlite3 shell too (``cat state.sql.d/* | sqlite3 new.db``).
"""

from __future__ import annotations

import hashlib
import heapq
import io
import math
import os
import re
import sqlite3
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from hermes_keeper.errors import KeeperError
from hermes_keeper.fs import open_private, private_dir, read_regular
from hermes_keeper.sqlite.connect import connect_ro
from hermes_keeper.sqlite.schema import quote_ident

MAGIC = "-- hermes-keeper state dump 1"
#: FTS5's shadow tables; what 'rebuild' makes again is not dumped.
FTS5_SHADOWS = ("_data", "_idx", "_content", "_docsize", "_config")
FTS5_REBUILT = ("_data", "_idx", "_docsize")
#: FTS5's own tokenizers: an index using another needs code the loading machine may not have.
BUILTIN_TOKENIZERS = {"unicode61", "ascii", "porter", "trigram"}
_TOKENIZE = re.compile(r"tokenize\s*=\s*['\"]?\s*(\w+)", re.I)
_CONTENTLESS = re.compile(r"content\s*=\s*(''|\"\")", re.I)
_ROWS = re.compile(r"^-- rows (\S+) (\d+)$")


class _Text(bytes):
    """A TEXT value's bytes (a BLOB comes back as plain ``bytes``): invalid UTF-8 survives."""


@dataclass
class Layout:
    """What a dump of one database holds, in the order it is loaded."""

    first: list[str] = field(default_factory=list)  # CREATE TABLE / VIRTUAL TABLE, as in the schema
    rows: list[str] = field(default_factory=list)  # tables whose rows are dumped
    replaced: set[str] = field(default_factory=set)  # FTS5 _config: rows over those CREATE made
    views: list[str] = field(default_factory=list)
    rebuilt: list[str] = field(default_factory=list)  # FTS5 indexes 'rebuild' makes again
    last: list[str] = field(default_factory=list)  # CREATE INDEX / TRIGGER


def layout(conn: sqlite3.Connection) -> Layout | None:
    """The dump's layout of ``conn``'s database; None where an index could not be rebuilt from it."""
    objects = conn.execute(
        "SELECT type, name, sql FROM sqlite_master WHERE sql IS NOT NULL ORDER BY rowid"
    ).fetchall()
    fts = {}
    for kind, name, sql in objects:
        if kind == "table" and sql.upper().startswith("CREATE VIRTUAL TABLE"):
            words = sql.split("(", 1)[0].split()
            tok = _TOKENIZE.search(sql)
            if words[-1].lower() != "fts5" or _CONTENTLESS.search(sql):
                return None
            if tok and tok.group(1).lower() not in BUILTIN_TOKENIZERS:
                return None
            fts[name] = sql
    shadows = {v + s: v for v in fts for s in FTS5_SHADOWS}
    out = Layout(rebuilt=list(fts))
    for kind, name, sql in objects:
        if name in shadows:
            if not name.endswith(FTS5_REBUILT):
                out.rows.append(name)
                if name.endswith("_config"):
                    out.replaced.add(name)
        elif kind == "table" and name.startswith("sqlite_"):
            continue  # sqlite_sequence is made by its table's CREATE; sqlite_stat*: statistics
        elif kind == "table":
            out.first.append(sql)
            if name not in fts:
                out.rows.append(name)
        elif kind == "view":
            out.views.append(sql)
        else:
            out.last.append(sql)
    return out


def _literal(v) -> str:
    if v is None:
        return "NULL"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return _real(v)
    if isinstance(v, _Text):
        try:
            s = v.decode("utf-8")
        except UnicodeDecodeError:
            s = "\x00"
        if "\x00" not in s:
            return "'" + s.replace("'", "''") + "'"
        return f"CAST(X'{v.hex()}' AS TEXT)"
    return f"X'{bytes(v).hex()}'"


def _real(v: float) -> str:
    """``v`` as SQL that SQLite evaluates to exactly ``v``. Its decimal parser is not correctly
    rounded (3.40 misread 25 of 30,000 timestamps and random doubles written with ``repr``, 14
    with 20 digits), so a fraction is written as integer / power of two, both exact in a double."""
    if v != v:
        return "NULL"  # SQLite stores no NaN
    if abs(v) == math.inf:
        return "1e999" if v > 0 else "-1e999"
    if v == int(v) and abs(v) < 2**63:
        return f"CAST({int(v)} AS REAL)"
    m, e = math.frexp(v)
    num, exp = int(m * 2**53), e - 53
    while num % 2 == 0 and exp < 0:
        num, exp = num // 2, exp + 1
    op, k = ("*", exp) if exp > 0 else ("/", -exp)
    steps = [f"{op}CAST({2 ** min(k - i, 62)} AS REAL)" for i in range(0, k, 62)]
    return f"(CAST({num} AS REAL){''.join(steps)})"


def _columns(conn: sqlite3.Connection, table: str) -> tuple[bool, bool, list[str]]:
    """Whether ``table`` has a rowid, whether it is its own to keep (no INTEGER PRIMARY KEY names
    it), and the columns a plain INSERT takes (generated ones are computed)."""
    info = conn.execute(f"PRAGMA table_xinfo({quote_ident(table)})").fetchall()
    cols = [r[1] for r in info if r[6] == 0]
    pks = [r for r in info if r[5]]
    aliased = len(pks) == 1 and pks[0][2].upper() == "INTEGER"
    try:
        conn.execute(f"SELECT rowid FROM {quote_ident(table)} LIMIT 0")
    except sqlite3.OperationalError:  # WITHOUT ROWID
        return False, False, cols
    return True, not aliased, cols


@dataclass(frozen=True)
class _Rows:
    """How one table's rows are read and written (:func:`_columns` decided on text names), and
    the order they go in: ``key``, SQL over the row ``t`` and ``join``."""

    table: str
    verb: str
    names: list[str]  # the INSERT's columns: ``rowid`` first where it is the table's own
    key: tuple[str, ...] = ("0",)
    join: str = ""
    prefix: str = ""  # a WITH the key needs

    @classmethod
    def of(cls, conn: sqlite3.Connection, table: str, verb: str = "INSERT", **order) -> _Rows:
        has_rowid, own, cols = _columns(conn, table)
        order = order or ({"key": ("t.rowid",)} if has_rowid else {})
        return cls(table, verb, (["rowid"] if own else []) + cols, **order)

    def lines(self, conn: sqlite3.Connection) -> Iterator[tuple[tuple, str]]:
        """(key, INSERT) in key order. Read with the connection's text factory :class:`_Text`."""
        cols = ",".join(c if c == "rowid" else quote_ident(c) for c in self.names)
        head = f"{self.verb} INTO {quote_ident(self.table)}({cols}) VALUES("
        picked = ", ".join("t.rowid" if c == "rowid" else f"t.{quote_ident(c)}" for c in self.names)
        n = len(self.key)
        order = ", ".join(str(i) for i in range(1, n + 1))
        source = f"{quote_ident(self.table)} AS t{self.join} ORDER BY {order}"
        for row in conn.execute(f"{self.prefix}SELECT {', '.join(self.key)}, {picked} FROM {source}"):
            yield row[:n], head + ",".join(map(_literal, row[n:])) + ");\n"


#: Each session's newest message and source: the order, and the files, of the messages part.
LAST = (
    "WITH last(sid, ts, src) AS (SELECT session_id, coalesce(max(CAST(timestamp AS REAL)), 0.0),"
    " (SELECT source FROM sessions WHERE id = session_id) FROM messages GROUP BY session_id) "
)
#: Where a row goes: the UTC hour of its session's newest message, the session's source, then that
#: message's time, the session and the row.
_KEY = (
    "CAST(coalesce(last.ts, 0.0) / 3600 AS INTEGER)",
    "CAST(coalesce(last.src, '') AS TEXT)",
    "coalesce(last.ts, 0.0)",
    "CAST(coalesce({m}.session_id, '') AS TEXT)",
    "t.rowid",
)


def _by_activity(m: str) -> dict:
    """The order of a row whose message is ``m`` (:data:`_KEY`)."""
    key = tuple(k.format(m=m) for k in _KEY)
    return {"key": key, "join": f" LEFT JOIN last ON last.sid = {m}.session_id", "prefix": LAST}


def _groups(conn: sqlite3.Connection, shape: Layout) -> tuple[list[_Rows], list[_Rows]]:
    """The tables dumped whole, in schema order; and ``messages`` with each FTS5 index's copy of
    its text (``_content``, keyed by the message's id as Hermes's triggers index them), whose rows
    go merged into the hour files (:func:`statements`). No messages table with sessions to group
    by: every table whole."""
    verb = {t: "REPLACE" if t in shape.replaced else "INSERT" for t in shape.rows}
    merged = [t for t in ("messages", *(f"{t}_content" for t in shape.rebuilt)) if t in shape.rows]
    cols = {t: {r[1] for r in conn.execute(f"PRAGMA table_xinfo({t})")} for t in ("messages", "sessions")}
    if not ({"session_id", "timestamp"} <= cols["messages"] and {"id", "source"} <= cols["sessions"]):
        merged = []
    content = _by_activity("m")
    content["join"] = " LEFT JOIN messages AS m ON m.id = t.rowid" + content["join"]
    orders = {t: _by_activity("t") if t == "messages" else content for t in merged}
    whole = [_Rows.of(conn, t, verb[t]) for t in shape.rows if t not in merged]
    return whole, [_Rows.of(conn, t, verb[t], **orders[t]) for t in merged]


def _hour_file(key: tuple) -> str:
    """The file of the rows of one hour and source: ``2-2026-11-23T14-cli-<hash>.sql``; sorted by
    name, the files are in load order. An hour past year 9999 (millisecond stamps) keeps its number.

    An hour, not a day: a prune cuts a source's sessions at a time of day, and the file it cuts
    is re-sent whole (below restic's 512 KiB smallest chunk) or from the cut; a day of cron runs
    was 4 MB a file on the bench."""
    hour, src = max(0, int(key[0])), bytes(key[1]).decode("utf-8", "replace")
    when = time.strftime("%Y-%m-%dT%H", time.gmtime(hour * 3600)) if hour < 70_389_528 else f"h{hour}"
    word = re.sub(r"[^a-z0-9]+", "-", src.lower()).strip("-")[:24] or "none"
    return f"2-{when}-{word}-{hashlib.sha256(src.encode()).hexdigest()[:8]}.sql"


def _tagged(i: int, rows: _Rows, conn: sqlite3.Connection) -> Iterator[tuple[tuple, int, str, str]]:
    """``rows``' lines keyed for :func:`heapq.merge`: by their key, then by the table's place."""
    return ((key, i, rows.table, line) for key, line in rows.lines(conn))


HEAD, TABLES, TAIL = "0-head.sql", "1-tables.sql", "3-tail.sql"


def statements(conn: sqlite3.Connection, shape: Layout) -> Iterator[tuple[str, str]]:
    """The dump of ``conn`` (read in one transaction by the caller): (file, SQL) in load order.

    Hermes's messages go in one file per hour (of their session's newest message) and source,
    each message beside its index copies. restic pays about one ~1 MiB chunk for each place a
    file changes, so a night should change few places: the sessions a prune takes are those idle
    longest per source, whole files here that simply go; a day's new messages make new files;
    only a session active again moves, out of its old hour. (In one stream in rowid order, the
    sessions a prune took were holes all over: 46% of the dump a night on the bench.)"""
    p = {k: conn.execute(f"PRAGMA {k}").fetchone()[0] for k in ("page_size", "auto_vacuum", "user_version")}
    app = conn.execute("PRAGMA application_id").fetchone()[0]
    wal = conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    whole, merged = _groups(conn, shape)
    seq = conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'sqlite_sequence'").fetchone()
    sequence = _Rows.of(conn, "sqlite_sequence") if seq else None
    yield HEAD, f"{MAGIC}: load with `hermes-keeper restore --from offsite` or `cat * | sqlite3 NEW.db`\n"
    yield HEAD, f"PRAGMA page_size={p['page_size']};\nPRAGMA auto_vacuum={p['auto_vacuum']};\n"
    yield HEAD, f"PRAGMA user_version={p['user_version']};\nPRAGMA application_id={app};\nBEGIN;\n"
    for sql in shape.first:
        yield HEAD, sql + ";\n"
    counts = dict.fromkeys(shape.rows, 0)
    conn.text_factory = _Text
    try:
        for rows in whole:
            for _key, line in rows.lines(conn):
                counts[rows.table] += 1
                yield TABLES, line
        for key, _i, table, line in heapq.merge(*(_tagged(i, rows, conn) for i, rows in enumerate(merged))):
            counts[table] += 1
            yield _hour_file(key), line
        if sequence:
            yield (
                TAIL,
                "DELETE FROM sqlite_sequence;\n",
            )  # the rows above moved it; the original may be higher
            yield from ((TAIL, line) for _key, line in sequence.lines(conn))
    finally:
        conn.text_factory = str
    for sql in shape.views:
        yield TAIL, sql + ";\n"
    for name in shape.rebuilt:
        yield TAIL, f"INSERT INTO {quote_ident(name)}({quote_ident(name)}) VALUES('rebuild');\n"
    for sql in shape.last:
        yield TAIL, sql + ";\n"
    yield TAIL, "COMMIT;\n"
    if wal:
        yield TAIL, "PRAGMA journal_mode=WAL;\n"
    for table in shape.rows:
        yield TAIL, f"-- rows {quote_ident(table)} {counts[table]}\n"


def dumpable(db: Path) -> bool:
    """Whether ``db`` can go as a dump (:func:`layout`)."""
    conn = connect_ro(db)
    try:
        return layout(conn) is not None
    finally:
        conn.close()


def write_dump(db: Path, folder: Path) -> int:
    """Write the dump of ``db`` (a snapshot nobody writes: a backup's copy) as files (0600) in the
    new folder ``folder``; its bytes."""
    conn = connect_ro(db)
    try:
        shape = layout(conn)
        if shape is None:
            raise KeeperError(f"{db}: an index the keeper cannot rebuild (send the page copy)")
        private_dir(folder)
        conn.execute("BEGIN")
        written, done, out, name = 0, set(), None, None
        try:
            for part, stmt in statements(conn, shape):
                if part != name:
                    if part in done:  # each file is written once, in one go
                        raise KeeperError(f"the dump came out of order at {part}")
                    if out:
                        out.close()
                    done.add(name := part)
                    out = os.fdopen(open_private(folder / part, os.O_WRONLY | os.O_CREAT | os.O_EXCL), "wb")
                written += out.write(stmt.encode())
        finally:
            if out:
                out.close()
        conn.execute("COMMIT")
        return written
    finally:
        conn.close()


def _lines(src: Path) -> Iterator[bytes]:
    """The lines of a dump: its files in name order (a folder), or the one file. Read through the
    filesystem door: a link, a folder or a FIFO in a fetched copy is refused, never followed."""
    for path in sorted(src.iterdir()) if src.is_dir() else [src]:
        try:
            data = read_regular(path, follow=False)
        except (KeeperError, OSError) as exc:
            raise KeeperError(f"{path}: cannot read this part of the dump ({exc})") from exc
        yield from io.BytesIO(data)


def _statements_in(src: Iterator[bytes]) -> Iterator[str]:
    """The statements of a dump, one at a time (a text may span lines: only a line ending in
    ``;`` can end a statement, and sqlite3 says whether it does)."""
    parts: list[str] = []
    for raw in src:
        line = raw.decode("utf-8")
        if not parts and line.startswith("--"):
            yield line
            continue
        parts.append(line)
        if line.rstrip().endswith(";") and sqlite3.complete_statement(stmt := "".join(parts)):
            parts.clear()
            yield stmt
    if "".join(parts).strip():
        raise KeeperError("the dump ends inside a statement: it was cut short")


def load_dump(src: Path, db: Path) -> dict[str, int]:
    """Build a new database at ``db`` from a dump (its folder, or one file of it all); checks it
    (integrity, each index, the row counts) and returns the rows per table. Raises
    :class:`KeeperError` on a bad dump."""
    if db.exists():
        raise KeeperError(f"{db} exists: a dump loads only into a new file")
    conn = sqlite3.connect(db, isolation_level=None)
    expected: dict[str, int] = {}
    try:
        first = True
        for stmt in _statements_in(_lines(src)):
            if first and not stmt.startswith(MAGIC):
                raise KeeperError("not a hermes-keeper state dump")
            first = False
            if stmt.startswith("--"):
                if m := _ROWS.match(stmt.strip()):
                    expected[m.group(1)] = int(m.group(2))
                continue
            conn.execute(stmt)
        if conn.in_transaction:
            raise KeeperError("the dump ends before its COMMIT: it was cut short")
        return _checked(conn, expected)
    except sqlite3.Error as exc:
        raise KeeperError(f"the dump does not load: {exc}") from exc
    finally:
        conn.close()


def _checked(conn: sqlite3.Connection, expected: dict[str, int]) -> dict[str, int]:
    problems = [r[0] for r in conn.execute("PRAGMA integrity_check")]
    if problems != ["ok"]:
        raise KeeperError(f"the loaded dump fails integrity_check: {problems[0]}")
    shape = layout(conn)
    for name in shape.rebuilt if shape else []:
        conn.execute(f"INSERT INTO {quote_ident(name)}({quote_ident(name)}) VALUES('integrity-check')")
    got = {}
    for quoted, n in expected.items():
        got[quoted] = conn.execute(f"SELECT count(*) FROM {quoted}").fetchone()[0]
        if got[quoted] != n:
            raise KeeperError(f"the loaded dump has {got[quoted]} rows in {quoted}, not {n}: it is damaged")
    return got
