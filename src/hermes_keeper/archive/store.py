"""The per-profile archive: every pruned session, restorable, in ``<home>/keeper/archive.db``.

One row per session: a few columns to list and filter by, and a zstd-compressed JSON
payload holding the session row, *all* its messages (``active=0`` included, with their
original ids), its ``session_model_usage`` rows, ``state_meta`` keys naming it and the
shared ``system_prompts`` rows it references by hash (schema >= 25: Hermes deletes a
prompt no session references, so the archive keeps its text rather than rely on it). The
sha256 of the uncompressed payload is stored beside it and checked on every read, so a
damaged row is refused rather than restored wrong.

Text SQLite cannot decode as UTF-8 and BLOB values survive the JSON round trip as
tagged base64 (see :func:`encode_value`).
"""

from __future__ import annotations

import base64
import hashlib
import sqlite3
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import orjson
import zstandard

from hermes_keeper.fs import private_dir, private_file
from hermes_keeper.sqlite.schema import SchemaInfo

FORMAT = 1
ZSTD_LEVEL = 3
ARCHIVE_NAME = "archive.db"

#: Life of an archive row. ``archived``: payload verified, the session may still be in
#: state.db (a prune in progress, or one a crash interrupted). ``pruned``: gone from
#: state.db. ``restored``: put back; the row stays as history until archived again.
ARCHIVED, PRUNED, RESTORED = "archived", "pruned", "restored"
#: ``sessions`` columns that hold a ``system_prompts.hash``: the prompt, and the ``tools[]`` pin
#: Hermes stores in the same content-addressed table (``tool_names`` of older rows is inline JSON).
PROMPT_REFS = ("system_prompt_hash", "tool_names")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS archive_meta (key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE IF NOT EXISTS archived_sessions (
    session_id TEXT PRIMARY KEY,
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
);
CREATE INDEX IF NOT EXISTS idx_archived_sessions_source ON archived_sessions(source, last_activity);
CREATE INDEX IF NOT EXISTS idx_archived_sessions_state ON archived_sessions(state);
"""


class ArchiveDamaged(Exception):
    """A payload whose sha256 or compression does not check out."""


class RawText(bytes):
    """TEXT that is not valid UTF-8: kept as bytes so the archive is exact."""


def _text_factory(data: bytes) -> str | RawText:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return RawText(data)


def encode_value(value):
    if isinstance(value, RawText):
        return {"$text_b64": base64.b64encode(value).decode("ascii")}
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"$blob_b64": base64.b64encode(bytes(value)).decode("ascii")}
    return value


def decode_value(value):
    """Inverse of :func:`encode_value`; bind the result with :func:`sql_placeholder`."""
    if isinstance(value, dict):
        if "$text_b64" in value:
            return RawText(base64.b64decode(value["$text_b64"]))
        if "$blob_b64" in value:
            return base64.b64decode(value["$blob_b64"])
    return value


def sql_placeholder(value) -> str:
    """``CAST(? AS TEXT)`` for raw text so it goes back as TEXT, not BLOB."""
    return "CAST(? AS TEXT)" if isinstance(value, RawText) else "?"


_BINARY = frozenset({bytes, RawText, memoryview})


def _rows(conn: sqlite3.Connection, sql: str, params: tuple | dict) -> list[dict]:
    cur = conn.execute(sql, params)
    names = [d[0] for d in cur.description]
    out = []
    for row in cur:
        if not _BINARY.isdisjoint(map(type, row)):  # rare: BLOB or undecodable TEXT
            row = [encode_value(v) for v in row]
        out.append(dict(zip(names, row, strict=True)))
    return out


def read_payload(conn: sqlite3.Connection, schema: SchemaInfo, session_id: str) -> dict | None:
    """Everything state.db holds for one session, as a JSON-able dict (None if gone).

    Call inside a read transaction when several sessions must be one snapshot. Text is
    decoded by SQLite's own UTF-8 path; a session holding text that is not UTF-8 is read
    again with :func:`_text_factory`, which keeps such values as :class:`RawText`.
    """
    try:
        return _read_payload(conn, schema, session_id)
    except sqlite3.OperationalError as exc:
        if "decode" not in str(exc):
            raise
    old_factory = conn.text_factory
    conn.text_factory = _text_factory
    try:
        return _read_payload(conn, schema, session_id)
    finally:
        conn.text_factory = old_factory


def _read_payload(conn: sqlite3.Connection, schema: SchemaInfo, session_id: str) -> dict | None:
    session = _rows(conn, "SELECT * FROM sessions WHERE id = ?", (session_id,))
    if not session:
        return None
    payload = {
        "format": FORMAT,
        "schema_version": schema.schema_version,
        "session": session[0],
        "messages": _rows(conn, "SELECT * FROM messages WHERE session_id = ? ORDER BY id", (session_id,)),
        "model_usage": [],
        "state_meta": [],
    }
    if schema.has("session_model_usage"):
        payload["model_usage"] = _rows(
            conn, "SELECT * FROM session_model_usage WHERE session_id = ?", (session_id,)
        )
    if schema.has("state_meta"):
        payload["state_meta"] = _rows(conn, "SELECT * FROM state_meta WHERE key = ?", (f"goal:{session_id}",))
    refs = [c for c in PROMPT_REFS if schema.has("sessions", c)]
    if schema.has("system_prompts") and refs:
        named = " UNION ".join(f"SELECT {c} FROM sessions WHERE id = :id" for c in refs)
        payload["system_prompts"] = _rows(
            conn, f"SELECT * FROM system_prompts WHERE hash IN ({named}) ORDER BY hash", {"id": session_id}
        )
    return payload


def canonical_bytes(payload: dict) -> bytes:
    """Compact UTF-8 JSON with sorted keys (orjson: the same bytes as ``json.dumps`` would give
    with ``ensure_ascii=False, sort_keys=True`` and compact separators, several times faster)."""
    return orjson.dumps(payload, option=orjson.OPT_SORT_KEYS)


@dataclass(frozen=True)
class Entry:
    """An archive row without its payload."""

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


_ENTRY_COLUMNS = ", ".join(Entry.__dataclass_fields__)


class Archive:
    """``archive.db`` of one profile. Owner-only; WAL with synchronous=FULL so a commit is on disk."""

    def __init__(self, path: Path, create: bool = True):
        self.path = Path(path)
        if create:
            private_dir(self.path.parent)
            if not self.path.exists():
                private_file(self.path)
        elif not self.path.exists():
            raise FileNotFoundError(self.path)
        self.conn = sqlite3.connect(self.path, isolation_level=None, timeout=10)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA synchronous=FULL")
        if create:
            self.conn.executescript(_SCHEMA)
        self._zc = zstandard.ZstdCompressor(level=ZSTD_LEVEL)
        self._zd = zstandard.ZstdDecompressor()

    @classmethod
    def for_home(cls, keeper_dir: Path, create: bool = True) -> Archive:
        return cls(keeper_dir / ARCHIVE_NAME, create=create)

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> Archive:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def put(self, payloads: Iterable[dict], reason: str | None = None) -> list[str]:
        """Store payloads in one transaction (replacing older rows of the same ids); returns ids.

        Every row ends up ``archived``; see :meth:`_holds_all_of` for the one row not replaced.
        Serialising and compressing happen before the transaction, so the archive's write lock
        (which the prune's state changes also need) is held only for the inserts.
        """
        now = time.time()
        rows = [(p, self._row(p, reason, now)) for p in payloads]
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            for p, row in rows:
                if self._holds_all_of(p):
                    self.set_state([row[0]], ARCHIVED)
                    continue
                self.conn.execute(
                    "INSERT OR REPLACE INTO archived_sessions (session_id, source, title, parent_session_id,"
                    " started_at, ended_at, last_activity, message_count, raw_bytes, stored_bytes, sha256,"
                    " schema_version, format, reason, state, archived_at, payload)"
                    " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                    row,
                )
            self.conn.execute("COMMIT")
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        return [row[0] for _, row in rows]

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

    def _holds_all_of(self, p: dict) -> bool:
        """A ``pruned`` row that already has every message of ``p`` is kept as it is.

        A session that is in state.db while its row says ``pruned`` is only part of it: an
        ``archive restore`` was interrupted. Replacing the row would lose the rest.
        """
        sid = p["session"]["id"]
        row = self.conn.execute(
            "SELECT sha256, payload FROM archived_sessions WHERE session_id = ? AND state = ?", (sid, PRUNED)
        ).fetchone()
        if row is None:
            return False
        try:
            old = orjson.loads(self._checked(sid, row[0], row[1]))
        except ArchiveDamaged:
            return False
        return {m["id"] for m in p["messages"]} <= {m["id"] for m in old["messages"]}

    def get(self, session_id: str) -> dict:
        """The verified payload of one session; :class:`ArchiveDamaged` if it does not check out."""
        return orjson.loads(self._verified_bytes(session_id))

    def verify(self, session_id: str) -> bool:
        """The stored payload decompresses to exactly the bytes whose sha256 was recorded."""
        try:
            self._verified_bytes(session_id)
        except ArchiveDamaged:
            return False
        return True

    def _verified_bytes(self, session_id: str) -> bytes:
        row = self.conn.execute(
            "SELECT sha256, payload FROM archived_sessions WHERE session_id = ?", (session_id,)
        ).fetchone()
        if row is None:
            raise KeyError(session_id)
        return self._checked(session_id, row[0], row[1])

    def _checked(self, session_id: str, sha: str, blob: bytes) -> bytes:
        try:
            raw = self._zd.decompress(blob)
        except zstandard.ZstdError as exc:
            raise ArchiveDamaged(f"{session_id}: payload does not decompress ({exc})") from None
        if hashlib.sha256(raw).hexdigest() != sha:
            raise ArchiveDamaged(f"{session_id}: sha256 mismatch")
        return raw

    def set_state(self, session_ids: Iterable[str], state: str) -> None:
        ids = list(session_ids)
        if not ids:
            return
        with_marks = ",".join("?" * len(ids))
        self.conn.execute(
            f"UPDATE archived_sessions SET state = ? WHERE session_id IN ({with_marks})", [state, *ids]
        )

    def entry(self, session_id: str) -> Entry | None:
        row = self.conn.execute(
            f"SELECT {_ENTRY_COLUMNS} FROM archived_sessions WHERE session_id = ?", (session_id,)
        ).fetchone()
        return Entry(*row) if row else None

    def entries(self, where: str = "", params: tuple = ()) -> Iterator[Entry]:
        sql = f"SELECT {_ENTRY_COLUMNS} FROM archived_sessions {where}"
        for row in self.conn.execute(sql, params):
            yield Entry(*row)

    def payloads(self, where: str = "", params: tuple = ()) -> Iterator[tuple[Entry, bytes | None]]:
        """Entries with their uncompressed payload bytes (None when damaged), streaming."""
        sql = f"SELECT {_ENTRY_COLUMNS}, payload FROM archived_sessions {where}"
        for row in self.conn.execute(sql, params):
            entry = Entry(*row[:-1])
            try:
                yield entry, self._checked(entry.session_id, entry.sha256, row[-1])
            except ArchiveDamaged:
                yield entry, None


def _plain(value):
    return value if not isinstance(value, dict) else None
