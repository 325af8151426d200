"""An archived session's payload: everything state.db holds for one session, as JSON.

The one place that reads a session out of Hermes's ``state.db`` for the archive (the prune
captures, the crash resume compares) and the codec that keeps its values exact: text SQLite
cannot decode as UTF-8 and BLOB values survive the JSON round trip as tagged base64
(:func:`encode_value`). The store (:mod:`hermes_keeper.archive.store`) only keeps payloads.
"""

from __future__ import annotations

import base64
import sqlite3

import orjson

from hermes_keeper.sqlite.schema import SchemaInfo

FORMAT = 1
#: ``sessions`` columns that hold a ``system_prompts.hash``: the prompt, and the ``tools[]`` pin
#: Hermes stores in the same content-addressed table (``tool_names`` of older rows is inline JSON).
PROMPT_REFS = ("system_prompt_hash", "tool_names")
#: The per-session ``state_meta`` keys, each ``<prefix><session id>``: Hermes's ``/goal``, ``/loop``
#: and ``/heartbeat`` state (hermes_cli/goals.py, loops.py, heartbeat.py). Archived with the
#: session, deleted with it, put back with it.
SESSION_META_PREFIXES = ("goal:", "loop:", "heartbeat:")


def session_meta_keys(session_id: str) -> list[str]:
    """The ``state_meta`` keys that belong to ``session_id``."""
    return [prefix + session_id for prefix in SESSION_META_PREFIXES]


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
        keys = session_meta_keys(session_id)
        marks = ",".join("?" * len(keys))
        payload["state_meta"] = _rows(
            conn, f"SELECT * FROM state_meta WHERE key IN ({marks}) ORDER BY key", keys
        )
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
