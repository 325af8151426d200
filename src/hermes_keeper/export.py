"""Archived sessions as JSON lines in the shape of Hermes's own ``SessionDB.export_session``.

Each line is the session row plus ``messages``: active messages only, as Hermes's
``get_messages`` returns them (``\\x00json:`` content decoded, ``tool_calls`` parsed).
Hermes's ``SessionDB.import_sessions`` takes at most 500 sessions, 50,000 messages and
25 MiB per call: :func:`import_batches` cuts an export into calls that fit.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterable, Iterator
from pathlib import Path

from .archive import Archive, decode_value
from .archive_query import ALL, CONTENT_JSON_PREFIX, Filters
from .fsutil import private_file

MAX_SESSIONS, MAX_MESSAGES, MAX_BYTES = 500, 50_000, 25 * 1024 * 1024


def _plain(v):
    v = decode_value(v)
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else v


def hermes_export(payload: dict) -> dict:
    session = {k: _plain(v) for k, v in payload["session"].items()}
    messages = []
    for m in payload["messages"]:
        if not m.get("active", 1):
            continue
        msg = {k: _plain(v) for k, v in m.items()}
        content = msg.get("content")
        if isinstance(content, str) and content.startswith(CONTENT_JSON_PREFIX):
            with contextlib.suppress(ValueError):
                msg["content"] = json.loads(content[len(CONTENT_JSON_PREFIX) :])
        if msg.get("tool_calls"):
            try:
                msg["tool_calls"] = json.loads(msg["tool_calls"])
            except (ValueError, TypeError):
                msg["tool_calls"] = []
        messages.append(msg)
    return {**session, "messages": messages}


def export_lines(store: Archive, filters: Filters = ALL) -> Iterator[str]:
    for entry in list(store.entries(*filters.where())):
        yield json.dumps(hermes_export(store.get(entry.session_id)), ensure_ascii=False)


def write_export(store: Archive, out: Path, filters: Filters = ALL) -> int:
    """Write the JSONL file (0600); returns the number of sessions."""
    private_file(out)
    n = 0
    with open(out, "w", encoding="utf-8") as fh:
        for line in export_lines(store, filters):
            fh.write(line + "\n")
            n += 1
    return n


def import_batches(lines: Iterable[str]) -> Iterator[list[dict]]:
    """Group exported sessions into lists that each fit one ``import_sessions`` call."""
    batch, msgs, size = [], 0, 0
    for line in lines:
        s = json.loads(line)
        n, b = len(s.get("messages", [])), len(line.encode("utf-8"))
        if batch and (len(batch) >= MAX_SESSIONS or msgs + n > MAX_MESSAGES or size + b > MAX_BYTES):
            yield batch
            batch, msgs, size = [], 0, 0
        batch.append(s)
        msgs, size = msgs + n, size + b
    if batch:
        yield batch
