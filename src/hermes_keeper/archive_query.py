"""Finding things in the archive: filters, full-text search, and a readable conversation.

Search streams every matching row, decompresses it and looks for the text in the raw
JSON bytes (lower-cased, and JSON-escaped the way the payload stores it); only hits
are parsed to cut a snippet. Measured in bench/archive_search.py: no index to build or
keep in sync, and the archive stays as small as zstd makes it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass

from .archive import Archive, Entry

CONTENT_JSON_PREFIX = "\x00json:"


@dataclass(frozen=True)
class Filters:
    source: str | None = None
    since: float | None = None
    until: float | None = None
    title: str | None = None

    def where(self) -> tuple[str, tuple]:
        clauses, params = [], []
        if self.source:
            clauses.append("source = ?")
            params.append(self.source)
        if self.since is not None:
            clauses.append("last_activity >= ?")
            params.append(self.since)
        if self.until is not None:
            clauses.append("started_at < ?")
            params.append(self.until)
        if self.title:
            clauses.append("instr(lower(title), lower(?)) > 0")
            params.append(self.title)
        sql = ("WHERE " + " AND ".join(clauses)) if clauses else ""
        return sql + " ORDER BY last_activity DESC, session_id", tuple(params)


ALL = Filters()


def list_entries(store: Archive, filters: Filters = ALL) -> list[Entry]:
    return list(store.entries(*filters.where()))


@dataclass(frozen=True)
class Hit:
    entry: Entry
    message_id: int | None
    role: str | None
    timestamp: float | None
    snippet: str

    def to_dict(self) -> dict:
        return {
            "session": asdict(self.entry),
            "message_id": self.message_id,
            "role": self.role,
            "timestamp": self.timestamp,
            "snippet": self.snippet,
        }


def _needles(text: str) -> list[bytes]:
    low = text.lower()
    return list({low.encode("utf-8"), json.dumps(low, ensure_ascii=False)[1:-1].encode("utf-8")})


def _snippet(text: str, needle: str, width: int = 60) -> str:
    i = text.lower().find(needle.lower())
    start, end = max(0, i - width), min(len(text), i + len(needle) + width)
    return ("…" if start else "") + " ".join(text[start:end].split()) + ("…" if end < len(text) else "")


def search(store: Archive, text: str, filters: Filters = ALL, limit: int | None = None) -> Iterator[Hit]:
    """Sessions whose messages contain ``text`` (case-insensitive), one hit per session."""
    needles = _needles(text)
    found = 0
    for entry, raw in store.payloads(*filters.where()):
        if raw is None:
            continue
        low = raw.lower()
        if not any(n in low for n in needles):
            continue
        payload = json.loads(raw)
        for m in payload["messages"]:
            for field in ("content", "tool_calls", "tool_name"):
                value = m.get(field)
                if isinstance(value, str) and text.lower() in value.lower():
                    yield Hit(entry, m.get("id"), m.get("role"), m.get("timestamp"), _snippet(value, text))
                    break
            else:
                continue
            found += 1
            break
        if limit is not None and found >= limit:
            return


def render_conversation(payload: dict, width: int = 100) -> list[str]:
    """The conversation as plain lines: who, when, what; tool calls and results folded."""
    s = payload["session"]
    lines = [
        f"{s['id']}  [{s.get('source')}]  {s.get('title') or ''}".rstrip(),
        f"started {_when(s.get('started_at'))}  ended {_when(s.get('ended_at'))}  "
        f"({len(payload['messages'])} messages, end reason {s.get('end_reason')})",
        "",
    ]
    for m in payload["messages"]:
        content = m.get("content")
        if isinstance(content, str) and content.startswith(CONTENT_JSON_PREFIX):
            content = "[structured content]"
        content = content if isinstance(content, str) else ""
        inactive = "" if m.get("active", 1) else " (inactive)"
        head = f"{_when(m.get('timestamp'))} {m.get('role')}{inactive}"
        if m.get("role") == "tool":
            lines.append(f"{head}: [tool result {m.get('tool_name') or ''}, {len(content)} chars]")
            continue
        if m.get("tool_calls"):
            lines.append(f"{head}: [tool calls folded]")
        text = " ".join(content.split())
        if text:
            lines.append(f"{head}: {text[: width * 3]}{'…' if len(text) > width * 3 else ''}")
    return lines


def _when(ts) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(ts)) if isinstance(ts, (int, float)) else "-"
