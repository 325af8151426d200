"""Archived sessions as JSON lines in the shape of Hermes's own ``SessionDB.export_session``.

Each line is the session row plus ``messages``: active messages only, as Hermes's
``get_messages`` returns them (``\\x00json:`` content decoded, ``tool_calls`` parsed),
written like ``hermes sessions export --format jsonl`` writes (``json.dumps``,
``ensure_ascii=False``). Sessions come conversation by conversation, parents before their
children (:mod:`conversations`), so an import cut into batches
(:func:`hermes_keeper.archive.hermes_import.import_batches`) keeps every parent link.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from hermes_keeper.archive.hermes_import import import_batches, too_big
from hermes_keeper.archive.query import ALL, CONTENT_JSON_PREFIX, Filters, list_entries
from hermes_keeper.archive.store import Archive, ArchiveDamaged, Entry, decode_value
from hermes_keeper.fs import check_export_target, durable_rename, open_private
from hermes_keeper.run.conversations import Facts, conversations


def _plain(v):
    """A stored value as Hermes's sqlite3 would hand it back (undecodable bytes replaced)."""
    v = decode_value(v)
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else v


def hermes_message(m: dict) -> dict:
    """One message as ``SessionDB.get_messages`` returns it."""
    msg = {k: _plain(v) for k, v in m.items()}
    content = msg.get("content")
    if isinstance(content, str) and content.startswith(CONTENT_JSON_PREFIX):
        with contextlib.suppress(ValueError):
            msg["content"] = json.loads(content[len(CONTENT_JSON_PREFIX) :])
    if msg.get("tool_calls"):
        try:
            msg["tool_calls"] = json.loads(msg["tool_calls"])
        except (ValueError, TypeError):
            msg["tool_calls"] = []  # what get_messages falls back to
    return msg


def hermes_export(payload: dict) -> dict:
    """The archived session as ``SessionDB.export_session`` returned it before the prune."""
    session = {k: _plain(v) for k, v in payload["session"].items()}
    # Schema >= 25 resolves the prompt and the tools pin through ``system_prompts`` (COALESCE(sp.prompt,
    # s.system_prompt)); its import stores ``system_prompt`` by content again.
    texts = {r.get("hash"): _plain(r.get("prompt")) for r in payload.get("system_prompts", ())}
    if session.get("system_prompt_hash") in texts:
        session["system_prompt"] = texts[session["system_prompt_hash"]]
    if session.get("tool_names") in texts:
        session["tool_names"] = texts[session["tool_names"]]
    # get_messages filters ``active = 1``; a schema without the column has no inactive rows.
    messages = [hermes_message(m) for m in payload["messages"] if m.get("active", 1) == 1]
    return {**session, "messages": messages}


def parents_first(entries: list[Entry], rows: dict[str, dict] | None = None) -> list[Entry]:
    """``entries`` in the conversation model's order: oldest conversation first, each whole and
    parents first, a branch after the conversation it came from (cycles broken, nothing dropped).

    ``rows``: the archived session rows of linked entries (their ``end_reason`` and
    ``model_config`` tell a branch from a continuation); an entry without one keeps its link.
    """
    rows = rows or {}
    by_id = {e.session_id: e for e in entries}
    facts = [
        Facts.of_row(rows[e.session_id])
        if e.session_id in rows
        else Facts(e.session_id, e.parent_session_id, started_at=e.started_at)
        for e in entries
    ]
    return [by_id[sid] for sid in conversations(facts).parents_first()]


def _linked_rows(store: Archive, entries: list[Entry]) -> dict[str, dict]:
    """The session rows of the entries linked to another one (the rest need none to be ordered)."""
    ids = {e.session_id for e in entries}
    linked = {
        sid for e in entries if e.parent_session_id in ids for sid in (e.session_id, e.parent_session_id)
    }
    rows = {}
    for sid in sorted(linked):
        with contextlib.suppress(ArchiveDamaged):  # said when it is written
            rows[sid] = store.get(sid)["session"]
    return rows


@dataclass
class ExportResult:
    sessions: int = 0
    messages: int = 0
    damaged: list[str] = field(default_factory=list)  # not exported
    too_big: dict[str, str] = field(default_factory=dict)  # exported; Hermes's import would refuse them


def export_sessions(
    store: Archive, filters: Filters = ALL, result: ExportResult | None = None
) -> Iterator[dict]:
    """Each matching archived session in export_session shape, parents first; damaged rows counted."""
    result = result if result is not None else ExportResult()
    entries = list_entries(store, filters)
    for entry in parents_first(entries, _linked_rows(store, entries)):
        try:
            session = hermes_export(store.get_entry(entry.entry))
        except ArchiveDamaged:
            result.damaged.append(entry.session_id)
            continue
        reason = too_big(session)
        if reason:
            result.too_big[entry.session_id] = reason
        result.sessions += 1
        result.messages += len(session["messages"])
        yield session


def write_export(
    store: Archive, out: Path | None, filters: Filters = ALL, split: bool = False
) -> tuple[ExportResult, list[Path]]:
    """Write the JSONL to ``out`` (0600, complete or not at all), or to stdout when ``out`` is None.

    ``split`` writes ``<stem>-001<suffix>``, ... instead, each small enough for ONE
    ``import_sessions`` call: the dashboard's Sessions page imports a file in one call.
    """
    result = ExportResult()
    sessions = export_sessions(store, filters, result)
    if out is None:
        _write(sys.stdout, sessions)
        return result, []
    out = check_export_target(out)  # before anything is read or written
    if not split:
        _write_file(out, sessions)
        return result, [out]
    paths = []
    for i, batch in enumerate(import_batches(sessions), 1):
        paths.append(out.with_name(f"{out.stem}-{i:03d}{out.suffix}"))
        _write_file(paths[-1], iter(batch))
    return result, paths


def _write_file(out: Path, sessions: Iterator[dict]) -> None:
    """Complete or not at all: a 0600 temporary file beside ``out``, renamed over it."""
    check_export_target(out)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    try:
        with os.fdopen(open_private(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), "w", encoding="utf-8") as fh:
            _write(fh, sessions)
        durable_rename(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)


def _write(fh: TextIO, sessions: Iterator[dict]) -> None:
    for s in sessions:
        fh.write(json.dumps(s, ensure_ascii=False) + "\n")
