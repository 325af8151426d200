"""A logical copy of ``state.db`` for a deduplicating store: its rows as SQL, its indexes rebuilt on load.

A page copy defeats restic's content-defined chunking however it is taken: on the bench a day of
Hermes alone (its FTS5 ``optimize`` every 1,000 writes rewrites the whole index, ~3/4 of the file)
changed half the pages and 44-52 of 64 one-MiB regions. The rows themselves barely move: new
messages come at the end of their table, pruned ones leave from the start. So the off-host copy
is the database as SQL text, every table in a fixed order and every row in rowid order, without
the FTS5 indexes' derived data (``_data``, ``_idx``, ``_docsize``): what restic sends the next
night is what changed. Loading runs the same schema, the rows, then ``'rebuild'`` on each FTS5
index (from its own ``_content`` or its content table, exactly what Hermes indexed), then the
triggers, and checks the row counts the dump ends with.

Only what this can rebuild is dumped this way: FTS5 indexes with built-in tokenizers and a content
to rebuild from. Anything else (Hermes's CJK index, whose tokenizer is a library in the home; a
contentless index; another virtual table module) is :func:`layout` ``None``: the caller sends the
page copy instead.

The text loads in the sqlite3 shell too (``sqlite3 new.db < state.sql``).
"""

from __future__ import annotations

import heapq
import math
import re
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from hermes_keeper.errors import KeeperError
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
    """How one table's rows are read and written (:func:`_columns` decided on text names)."""

    table: str
    verb: str
    has_rowid: bool
    names: list[str]  # the INSERT's columns: ``rowid`` first where it is the table's own

    @classmethod
    def of(cls, conn: sqlite3.Connection, table: str, verb: str = "INSERT") -> _Rows:
        has_rowid, own, cols = _columns(conn, table)
        return cls(table, verb, has_rowid, (["rowid"] if own else []) + cols)

    def lines(self, conn: sqlite3.Connection) -> Iterator[tuple[int, str]]:
        """(rowid, INSERT) in rowid order (a WITHOUT ROWID table: its key's; rowid 0). Read with
        the connection's text factory :class:`_Text`."""
        cols = ",".join(c if c == "rowid" else quote_ident(c) for c in self.names)
        head = f"{self.verb} INTO {quote_ident(self.table)}({cols}) VALUES("
        key, order = ("rowid", " ORDER BY rowid") if self.has_rowid else ("0", "")
        picked = ", ".join(c if c == "rowid" else quote_ident(c) for c in self.names)
        for row in conn.execute(f"SELECT {key}, {picked} FROM {quote_ident(self.table)}{order}"):
            yield row[0], head + ",".join(map(_literal, row[1:])) + ");\n"


def _groups(conn: sqlite3.Connection, shape: Layout) -> list[list[_Rows]]:
    """The tables in dump order; ``messages`` with each FTS5 index's copy of its text (``_content``,
    keyed by the message's id as Hermes's triggers index them), merged row by row.

    Hermes writes messages as they come: a prune's rows leave near the start and a day's come at
    the end. Merged, a message's text and its two index copies sit together, so each of those is
    one change in the dump, not three (each change costs restic about one chunk, ~1 MiB).
    (Rows grouped by session were measured worse: retention differs by source, so each source's
    expired sessions made a run of their own in the middle.)"""
    verb = {t: "REPLACE" if t in shape.replaced else "INSERT" for t in shape.rows}
    merged = ["messages", *(f"{t}_content" for t in shape.rebuilt)] if "messages" in shape.rows else []
    merged = [t for t in merged if t in shape.rows]
    groups = [[_Rows.of(conn, t, verb[t]) for t in merged]] if merged else []
    return groups + [[_Rows.of(conn, t, verb[t])] for t in shape.rows if t not in merged]


def _tagged(i: int, rows: _Rows, conn: sqlite3.Connection) -> Iterator[tuple[int, int, str, str]]:
    """``rows``' lines keyed for :func:`heapq.merge`: by rowid, then by the table's place."""
    return ((key, i, rows.table, line) for key, line in rows.lines(conn))


def statements(conn: sqlite3.Connection, shape: Layout) -> Iterator[str]:
    """The dump of ``conn`` (read in one transaction by the caller) as SQL statements."""
    p = {k: conn.execute(f"PRAGMA {k}").fetchone()[0] for k in ("page_size", "auto_vacuum", "user_version")}
    app = conn.execute("PRAGMA application_id").fetchone()[0]
    wal = conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    groups = _groups(conn, shape)
    seq = conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'sqlite_sequence'").fetchone()
    sequence = _Rows.of(conn, "sqlite_sequence") if seq else None
    yield f"{MAGIC}: load with `hermes-keeper restore --from offsite` or `sqlite3 NEW.db < state.sql`\n"
    yield f"PRAGMA page_size={p['page_size']};\nPRAGMA auto_vacuum={p['auto_vacuum']};\n"
    yield f"PRAGMA user_version={p['user_version']};\nPRAGMA application_id={app};\nBEGIN;\n"
    for sql in shape.first:
        yield sql + ";\n"
    counts = {}
    conn.text_factory = _Text
    try:
        for group in groups:
            for rows in group:
                counts[rows.table] = 0
            streams = [_tagged(i, rows, conn) for i, rows in enumerate(group)]
            for _key, _i, table, line in heapq.merge(*streams):
                counts[table] += 1
                yield line
        if sequence:
            yield "DELETE FROM sqlite_sequence;\n"  # the rows above moved it; the original may be higher
            yield from (line for _key, line in sequence.lines(conn))
    finally:
        conn.text_factory = str
    for sql in shape.views:
        yield sql + ";\n"
    for name in shape.rebuilt:
        yield f"INSERT INTO {quote_ident(name)}({quote_ident(name)}) VALUES('rebuild');\n"
    for sql in shape.last:
        yield sql + ";\n"
    yield "COMMIT;\n"
    if wal:
        yield "PRAGMA journal_mode=WAL;\n"
    for table in shape.rows:
        yield f"-- rows {quote_ident(table)} {counts[table]}\n"


def dumpable(db: Path) -> bool:
    """Whether ``db`` can go as a dump (:func:`layout`)."""
    conn = connect_ro(db)
    try:
        return layout(conn) is not None
    finally:
        conn.close()


def write_dump(db: Path, out: IO[bytes]) -> int:
    """Write the dump of ``db`` (a snapshot nobody writes: a backup's copy) to ``out``; its bytes."""
    conn = connect_ro(db)
    try:
        shape = layout(conn)
        if shape is None:
            raise KeeperError(f"{db}: an index the keeper cannot rebuild (send the page copy)")
        conn.execute("BEGIN")
        written = 0
        buf: list[bytes] = []
        for stmt in statements(conn, shape):
            buf.append(stmt.encode())
            if len(buf) >= 512:
                written += out.write(b"".join(buf)) or 0
                buf.clear()
        written += out.write(b"".join(buf)) or 0
        conn.execute("COMMIT")
        return written
    finally:
        conn.close()


def _statements_in(src: IO[bytes]) -> Iterator[str]:
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


def load_dump(src: IO[bytes], db: Path) -> dict[str, int]:
    """Build a new database at ``db`` from a dump; checks it (integrity, each index, the row
    counts) and returns the rows per table. Raises :class:`KeeperError` on a bad dump."""
    if db.exists():
        raise KeeperError(f"{db} exists: a dump loads only into a new file")
    conn = sqlite3.connect(db, isolation_level=None)
    expected: dict[str, int] = {}
    try:
        first = True
        for stmt in _statements_in(src):
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
