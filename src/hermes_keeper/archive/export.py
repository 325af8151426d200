"""Archived sessions out of the archive: JSON lines Hermes imports, or Markdown people read.

JSONL is in the shape of Hermes's own ``SessionDB.export_session``.
Each line is the session row plus ``messages``: active messages only, as Hermes's
``get_messages`` returns them (``\\x00json:`` content decoded, ``tool_calls`` parsed),
written like ``hermes sessions export --format jsonl`` writes (``json.dumps``,
``ensure_ascii=False``). Sessions come conversation by conversation, parents before their
children (:mod:`conversations`), so an import cut into batches
(:func:`hermes_keeper.archive.hermes_import.import_batches`) keeps every parent link.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import re
import stat
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TextIO

from ruamel.yaml import YAML

from hermes_keeper.archive.hermes_import import import_batches, too_big
from hermes_keeper.archive.payload import decode_value
from hermes_keeper.archive.query import (
    ALL,
    CONTENT_JSON_PREFIX,
    Filters,
    call_parts,
    content_text,
    list_entries,
    when,
)
from hermes_keeper.archive.store import Archive, ArchiveDamaged, Entry
from hermes_keeper.errors import KeeperError
from hermes_keeper.fs import check_export_target, durable_rename, fsync_dir, open_private, plain_name
from hermes_keeper.model.conversations import Facts, conversations


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


def _chosen(store: Archive, filters: Filters, result: ExportResult) -> Iterator[tuple[Entry, dict]]:
    """Each matching entry with its verified payload, parents first; damaged rows counted, skipped."""
    entries = list_entries(store, filters)
    for entry in parents_first(entries, _linked_rows(store, entries)):
        try:
            yield entry, store.get_entry(entry.entry)
        except ArchiveDamaged:
            result.damaged.append(entry.session_id)


def export_sessions(
    store: Archive, filters: Filters = ALL, result: ExportResult | None = None
) -> Iterator[dict]:
    """Each matching archived session in export_session shape, parents first; damaged rows counted."""
    result = result if result is not None else ExportResult()
    for entry, payload in _chosen(store, filters, result):
        session = hermes_export(payload)
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
    check_export_target(out)
    _atomic(out, lambda fh: _write(fh, sessions))


def _atomic(out: Path, write: Callable[[TextIO], object], durable: bool = True) -> None:
    """Complete or not at all: a 0600 temporary file beside ``out``, renamed over it (fsynced
    when ``durable``; many small files get one fsync of their folder instead)."""
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    try:
        with os.fdopen(open_private(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), "w", encoding="utf-8") as fh:
            write(fh)
        if durable:
            durable_rename(tmp, out)
        else:
            os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)


def _write(fh: TextIO, sessions: Iterator[dict]) -> None:
    for s in sessions:
        fh.write(json.dumps(s, ensure_ascii=False) + "\n")


# --- Markdown: one readable file per session -------------------------------------------------

#: Characters of a tool result written out; a longer one is cut there, with a note saying how much.
RESULT_CHARS = 4000
_ROLES = {"user": "User", "assistant": "Assistant", "tool": "Tool result", "system": "System"}


def _iso(ts) -> str | None:
    """Local time with its offset, like the dates Hermes shows (None when unknown)."""
    if not isinstance(ts, (int, float)):
        return None
    return datetime.fromtimestamp(ts).astimezone().isoformat(timespec="seconds")


def _fenced(text: str, info: str = "") -> str:
    """``text`` in a code fence longer than any backtick run inside it, so it cannot close early."""
    ticks = "`" * max(3, 1 + max((len(r) for r in re.findall(r"`+", text)), default=0))
    return f"{ticks}{info}\n{text}\n{ticks}"


_FENCE_LINE = re.compile(r"^ {0,3}(`{3,}|~{3,})")


def _closed(text: str) -> str:
    """Markdown as written, with a code fence it leaves open closed (a reply cut off mid-block
    would otherwise swallow every turn after it)."""
    opened = None
    for line in text.splitlines():
        if not (m := _FENCE_LINE.match(line)):
            continue
        if opened is None:
            opened = m.group(1)
        elif line.strip() == m.group(1) and m.group(1)[0] == opened[0] and len(m.group(1)) >= len(opened):
            opened = None
    return text if opened is None else f"{text}\n{opened}"


def _front_matter(payload: dict, shown: int, hidden: int) -> str:
    s = {k: _plain(v) for k, v in payload["session"].items()}
    meta = {
        "id": s["id"],
        "title": s.get("title"),
        "source": s.get("source"),
        "model": s.get("model"),
        "started": _iso(s.get("started_at")),
        "ended": _iso(s.get("ended_at")),
        "end_reason": s.get("end_reason"),
        "parent": s.get("parent_session_id"),
        "messages": shown,
    }
    if hidden:
        meta["inactive_messages_not_shown"] = hidden
    buf = io.StringIO()
    yaml = YAML(typ="safe", pure=True)
    yaml.default_flow_style = False
    yaml.sort_base_mapping_type_on_output = False  # id, title, source first: the order people read
    yaml.allow_unicode = True
    yaml.width = 1 << 16
    yaml.dump({k: v for k, v in meta.items() if v is not None}, buf)
    return f"---\n{buf.getvalue()}---\n"


def _arguments(args) -> tuple[str, str]:
    """A tool call's arguments as (fence info, text): pretty JSON when they parse, else as stored."""
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except ValueError:
            return "", args
    return "json", json.dumps(args, indent=2, ensure_ascii=False)


def _line(value) -> str:
    """A heading's text on one line (a title or tool name with a newline would end the heading)."""
    return " ".join(str(_plain(value)).split())


def _message_md(m: dict) -> list[str]:
    role = _line(m.get("role") or "?")
    head = _ROLES.get(role, role.capitalize())
    if role == "tool" and m.get("tool_name"):
        head += f" · `{_line(m['tool_name'])}`"
    if isinstance(m.get("timestamp"), (int, float)):
        head += f" · {when(m['timestamp'])}"
    out = [f"## {head}", ""]
    reasoning = next((_plain(m.get(k)) for k in ("reasoning", "reasoning_content") if m.get(k)), None)
    if isinstance(reasoning, str) and reasoning.strip():
        out += ["<details>", "<summary>Reasoning</summary>", "", reasoning.strip(), "", "</details>", ""]
    text = content_text(m.get("content"))
    if role == "tool":
        if len(text) > RESULT_CHARS:
            cut = len(text) - RESULT_CHARS
            out += [_fenced(text[:RESULT_CHARS], "text"), "", f"*… {cut:,} more characters not shown.*", ""]
        elif text:
            out += [_fenced(text, "text"), ""]
    elif text.strip():
        out += [_closed(text.strip()), ""]
    calls = call_parts(m["tool_calls"]) if m.get("tool_calls") else []
    for name, raw in calls if calls is not None else [("?", str(_plain(m["tool_calls"])))]:
        info, args = _arguments(raw)
        out += [f"**Tool call** `{_line(name)}`", "", _fenced(args, info), ""]
    return out


def markdown(payload: dict) -> str:
    """One archived session as Markdown: YAML front matter, then the conversation, turn by turn.

    Turns are level-2 headings; user and assistant text as written (it is Markdown already),
    tool calls with their arguments as a fenced JSON block, tool results fenced and cut at
    :data:`RESULT_CHARS`, reasoning folded in ``<details>``. Rewound or compacted messages are
    left out, as Hermes's own views leave them out (the front matter counts them).
    """
    active = [m for m in payload["messages"] if m.get("active", 1) != 0]
    s = payload["session"]
    lines = [_front_matter(payload, len(active), len(payload["messages"]) - len(active))]
    lines += [f"# {_line(s.get('title') or s['id'])}", ""]
    for m in active:
        lines += _message_md(m)
    return "\n".join(lines).rstrip("\n") + "\n"


def _md_name(sid, entry: int, taken: set[str]) -> str:
    """A file name for a session: its id when that is one plain, visible name, else a digest of it."""
    sid = _plain(sid)
    ok = isinstance(sid, str) and plain_name(sid) and not sid.startswith(".") and len(sid.encode()) <= 200
    base = sid if ok else "session-" + hashlib.sha256(str(sid).encode("utf-8", "replace")).hexdigest()[:16]
    name = f"{base}.md" if f"{base}.md" not in taken else f"{base}.entry-{entry}.md"
    taken.add(name)
    return name


def _export_dir(folder: Path) -> Path:
    """The folder Markdown goes to: made 0700 when new; an existing one must be a real folder."""
    folder = Path(os.path.abspath(folder))
    check_export_target(folder / "x.md")  # never inside a home's keeper/ folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileExistsError):
        os.mkdir(folder, 0o700)
    st = os.lstat(folder)
    if not stat.S_ISDIR(st.st_mode):
        raise KeeperError(f"export folder {folder} is not a folder (a symlink or a file); nothing written")
    return folder


def write_markdown(store: Archive, folder: Path, filters: Filters = ALL) -> tuple[ExportResult, list[Path]]:
    """Each chosen session as ``<folder>/<id>.md`` (0600, complete or not at all), parents first."""
    folder = _export_dir(folder)
    result, paths, taken = ExportResult(), [], set()
    for entry, payload in _chosen(store, filters, result):
        out = check_export_target(folder / _md_name(entry.session_id, entry.entry, taken))
        text = markdown(payload)
        _atomic(out, lambda fh, text=text: fh.write(text), durable=False)
        result.sessions += 1
        result.messages += sum(1 for m in payload["messages"] if m.get("active", 1) != 0)
        paths.append(out)
    fsync_dir(folder)
    return result, paths
