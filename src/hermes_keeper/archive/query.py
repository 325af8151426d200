"""Finding things in the archive: filters, full-text search, verification and a readable conversation.

Search reads the rows the search index (``archive/index.py``) names, newest first, decompresses
each payload and looks for the text in the raw JSON bytes (lower-cased, plain and in the escaped
forms the payload stores); only rows that may match are parsed, to confirm the hit in a message
and cut a snippet, until the first match past the limit. Measured in bench/archive_search.py
(figures in docs/search.md): under 0.1 s at 50,000 sessions for a common word, a rare one or none.
"""

from __future__ import annotations

import itertools
import json
import re
import sqlite3
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timedelta

import orjson

from hermes_keeper import units
from hermes_keeper.archive.index import SearchIndex, indexable, open_index
from hermes_keeper.archive.payload import RawText, decode_value
from hermes_keeper.archive.store import Archive, ArchiveDamaged, Entry
from hermes_keeper.errors import KeeperError
from hermes_keeper.sqlite.schema import check_line
from hermes_keeper.units import parse_duration

CONTENT_JSON_PREFIX = "\x00json:"
#: ``#N``: one archive entry, when a session id has several (see :class:`Entry`).
#: ``#N``: archive entry N (at most 18 digits: SQLite's integers end at 2**63, and a longer number
#: names no entry rather than overflowing the query)
ENTRY_ADDRESS = re.compile(r"^#(\d{1,18})$")


def parse_when(text: str, now: float | None = None, end_of_day: bool = False) -> float:
    """``2026-01-31`` (local midnight; the next with ``end_of_day``), ISO time, or ``30d``/``12h`` ago."""
    text = text.strip()
    if text[-1:].isalpha():  # 30d, 12h, 2w, 90m: a duration ago, read as keeper.toml reads one
        try:
            return (time.time() if now is None else now) - parse_duration(text)
        except KeeperError:
            pass  # not a duration: say so as a date below
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(
            f"not a date: {text!r} (use YYYY-MM-DD, an ISO date-time, or 30d / 12h / 2w)"
        ) from None
    if end_of_day and len(text) == 10:
        when += timedelta(days=1)
    return when.timestamp()  # naive = local time, like the dates Hermes shows


@dataclass(frozen=True)
class Filters:
    """Which archive rows a command looks at; every field narrows (empty = all)."""

    sources: tuple[str, ...] = ()
    since: float | None = None  # last activity at or after
    until: float | None = None  # last activity before (the same field as ``since``)
    title: str | None = None  # title contains (case-insensitive)
    ids: tuple[str, ...] = ()
    entries: tuple[int, ...] = ()  # addressed entries (``#N``), beside ``ids``
    newest: bool = False  # of ``ids`` (or of all, without ``entries``): only each newest entry

    def where(self, order: bool = True) -> tuple[str, tuple]:
        """The SQL each archive file runs (newest first, unless not ``order``: to count);
        :meth:`keep` then picks newest entries."""
        clauses, params = [], []
        if self.sources:
            clauses.append(f"source IN ({','.join('?' * len(self.sources))})")
            params += self.sources
        ids = f"session_id IN ({','.join('?' * len(self.ids))})"
        if self.ids:
            params += self.ids
        if self.entries:
            clauses.append(
                f"({ids + ' OR ' if self.ids else ''}entry IN ({','.join('?' * len(self.entries))}))"
            )
            params += self.entries
        elif self.ids:
            clauses.append(ids)
        if self.since is not None:
            clauses.append("coalesce(last_activity, started_at) >= ?")
            params.append(self.since)
        if self.until is not None:
            clauses.append("coalesce(last_activity, started_at) < ?")
            params.append(self.until)
        if self.title:
            clauses.append("instr(lower(title), lower(?)) > 0")
            params.append(self.title)
        sql = ("WHERE " + " AND ".join(clauses)) if clauses else ""
        return sql + (" ORDER BY last_activity DESC, session_id, entry DESC" if order else ""), tuple(params)

    def keep(self, store: Archive) -> Callable[[Entry], bool] | None:
        """With ``newest``: an addressed entry, or the newest of its session over every file."""
        if not self.newest:
            return None
        newest, addressed = store.newest(), set(self.entries)
        return lambda e: e.entry in addressed or newest.get(e.session_id) == e.entry

    def scan(self, store: Archive, payloads: bool = False) -> Iterator:
        """The chosen entries (with their payloads) of every file, newest first."""
        read = store.payloads if payloads else store.entries
        return read(*self.where(), keep=self.keep(store), order=recent)

    def addressed(self, texts: tuple[str, ...]) -> Filters:
        """These filters narrowed to session ids and ``#N`` entry addresses."""
        entries = tuple(int(t[1:]) for t in texts if ENTRY_ADDRESS.match(t))
        ids = tuple(t for t in texts if not ENTRY_ADDRESS.match(t))
        return replace(self, ids=ids, entries=entries, newest=True)


ALL = Filters()


def recent(e: Entry) -> tuple:
    """The key of :meth:`Filters.where`'s ORDER BY (SQL puts NULL last in DESC)."""
    return (e.last_activity is None, -(e.last_activity or 0.0), e.session_id, -e.entry)


def list_entries(store: Archive, filters: Filters = ALL) -> list[Entry]:
    return list(filters.scan(store))


def resolve_id(store: Archive, text: str) -> Entry:
    """The entry ``text`` names: an exact archived id (its newest entry), ``#N`` (entry N), else a
    unique prefix of an id (like Hermes's ``resolve_session_id``)."""
    if not text.isascii() and not _utf8(text):  # bytes given on the command line that are not UTF-8
        raise KeeperError(
            f"{text!r} is not in the archive: a session whose id is not UTF-8 is never archived, "
            "it stays in state.db as it is"
        )
    if (e := store.entry(text)) is not None:
        return e
    if ENTRY_ADDRESS.match(text) and (e := store.by_entry(int(text[1:]))) is not None:
        return e
    like = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
    found = store.session_ids(like, limit=6)
    if len(found) == 1:
        return store.entry(found[0])
    if not found:
        raise KeeperError(f"{text!r} is not in the archive (see `hermes-keeper archive list`)")
    raise KeeperError(f"{text!r} matches several archived sessions: {', '.join(sorted(set(found))[:5])}, ...")


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def content_text(value) -> str:
    """A message's ``content`` as readable text: structured (``\\x00json:``) parts joined."""
    value = decode_value(value)
    if isinstance(value, RawText):
        return value.decode("utf-8", "replace")
    if not isinstance(value, str):
        return "" if value is None else str(value)
    if not value.startswith(CONTENT_JSON_PREFIX):
        return value
    try:
        parts = json.loads(value[len(CONTENT_JSON_PREFIX) :])
    except ValueError:
        return value
    if isinstance(parts, dict):
        parts = [parts]
    if not isinstance(parts, list):
        return str(parts)
    out = []
    for p in parts:
        if isinstance(p, dict) and isinstance(p.get("text"), str):
            out.append(p["text"])
        elif isinstance(p, dict):
            out.append(f"[{p.get('type', 'part')}]")
        else:
            out.append(str(p))
    return " ".join(out)


def call_parts(value) -> list[tuple[str, object]] | None:
    """Each tool call of a message as (name, arguments as stored); None when it is not JSON."""
    value = decode_value(value)
    try:
        calls = json.loads(value) if isinstance(value, str) else value
    except ValueError:
        return None
    out = []
    for c in calls if isinstance(calls, list) else [calls]:
        fn = c.get("function", c) if isinstance(c, dict) else {}
        name = fn.get("name") if isinstance(fn, dict) else None
        out.append((name or "?", fn.get("arguments", "") if isinstance(fn, dict) else ""))
    return out


def tool_calls(value) -> list[str]:
    """Each tool call of a message as ``name(arguments)``."""
    parts = call_parts(value)
    if parts is None:
        return [str(decode_value(value))]
    return [f"{name}({args if isinstance(args, str) else json.dumps(args)})" for name, args in parts]


def searchable_fields(m: dict) -> list[str]:
    """What Hermes's FTS indexes for a message: content, tool name, tool calls (as ``name(args)``)."""
    fields = [content_text(m.get("content"))]
    name = decode_value(m.get("tool_name"))
    if isinstance(name, str) and name:
        fields.append(name)
    if m.get("tool_calls"):
        fields.append(" ".join(tool_calls(m["tool_calls"])))
    return fields


@dataclass(frozen=True)
class Hit:
    """One session that matches: its first matching message and how many messages match."""

    entry: Entry
    message_id: int | None
    role: str | None
    timestamp: float | None
    snippet: str
    matches: int
    inactive: bool = False

    def to_dict(self) -> dict:
        d = asdict(self)
        d["session"] = d.pop("entry")
        return d


@dataclass
class SearchResult:
    hits: list[Hit] = field(default_factory=list)  # newest first, at most ``limit``
    #: Matching sessions. ``complete`` False: the search stopped at the first match past
    #: ``limit``, so ``total`` (``limit`` + 1) is "more than ``limit``", not a count.
    total: int = 0
    scanned: int = 0  # the archived sessions the filters chose
    damaged: list[str] = field(default_factory=list)  # those met on the way
    seconds: float = 0.0
    complete: bool = True

    def to_dict(self) -> dict:
        return {
            "hits": [h.to_dict() for h in self.hits],
            "total": self.total,
            "complete": self.complete,
            "scanned": self.scanned,
            "damaged": self.damaged,
            "seconds": round(self.seconds, 3),
        }


def _escaped(text: str, ensure_ascii: bool) -> str:
    return json.dumps(text, ensure_ascii=ensure_ascii)[1:-1]


def needles(text: str) -> tuple[str, ...]:
    """``text`` lower-cased as it can appear in a payload: plain, JSON-escaped, and escaped twice.

    Twice for structured content: Hermes stores it as ``\\x00json:`` + ``json.dumps`` (ASCII
    escapes) inside a TEXT column, and the payload escapes that text again.
    """
    low = text.lower()
    return tuple(dict.fromkeys((low, _escaped(low, False), _escaped(_escaped(low, True), False))))


def snippet(text: str, needle: str, width: int = 60) -> str:
    """``width`` characters either side of the first match, on one line."""
    i = max(0, text.lower().find(needle.lower()))
    start, end = max(0, i - width), min(len(text), i + len(needle) + width)
    return ("…" if start else "") + " ".join(text[start:end].split()) + ("…" if end < len(text) else "")


def match_payload(payload: dict, entry: Entry, text: str) -> Hit | None:
    """The session's hit for ``text`` (case-insensitive) in any message, or None."""
    low = text.lower()
    first, count = None, 0
    for m in payload["messages"]:
        for value in searchable_fields(m):
            if low in value.lower():
                count += 1
                if first is None:
                    inactive = m.get("active", 1) == 0
                    first = (m.get("id"), m.get("role"), m.get("timestamp"), snippet(value, text), inactive)
                break
    if first is None:
        return None
    mid, role, ts, snip, inactive = first
    return Hit(entry, mid, role, ts, snip, count, inactive)


def search(
    store: Archive, text: str, filters: Filters = ALL, limit: int | None = 50, use_index: bool = True
) -> SearchResult:
    """Sessions whose messages contain ``text``, newest first; damaged rows are listed, not searched.

    It stops at the first match past ``limit`` (the newest ``limit`` are what is shown; counting
    every match would read every matching payload: ``limit=None`` does). With the search index
    (``archive/index.py``) only its candidates are read and confirmed, in the output's order; the
    answer is the same as scanning every payload (``use_index=False``), which is what a text the
    index cannot answer, or a home it cannot be kept in, gets.
    """
    if not text.strip():
        raise KeeperError("search text is empty")
    t0 = time.perf_counter()
    result = SearchResult()
    chosen = _indexed(store, text, filters, limit, result) if use_index else None
    if chosen is None:
        result.scanned = _count(store, filters)
        chosen = filters.scan(store, payloads=True)
    _confirm(result, chosen, text, limit)
    result.seconds = time.perf_counter() - t0
    return result


#: Candidates read from the archive per query, at most: the first batch is ``limit`` + 1 (all a
#: common word needs), each next one twice the last.
BATCH = 1024


def refresh_index(store: Archive) -> int | None:
    """Bring the archive's search index up to date; the entries it added (None: no index can be
    kept here). The nightly run does, after it archived, so a search after an upgrade (a first
    build: ~40 s at 50,000 sessions, docs/search.md) or a big prune does not wait for it."""
    index = open_index(store, searchable_fields)
    if index is None:
        return None
    try:
        return index.refresh(store)
    finally:
        index.close()


def _indexed(
    store: Archive, text: str, filters: Filters, limit: int | None, result: SearchResult
) -> Iterator | None:
    """The index's candidates for ``text`` with their payloads, newest first (and ``result.scanned``);
    None: scan every payload (the index cannot answer the text or be kept here)."""
    if not indexable(text):
        return None
    index = open_index(store, searchable_fields)
    if index is None:
        return None
    where = filters.where()
    try:
        found = index.ordered(store, text, where)
        result.scanned = _count(store, filters) if filters.newest else index.count(filters.where(order=False))
    except sqlite3.OperationalError:  # locked by another search's refresh, a full disk: scan
        index.close()
        return None
    return _read(index, store, found, filters.keep(store), size=min(BATCH, (limit or BATCH) + 1))


def _read(
    index: SearchIndex,
    store: Archive,
    entries: Iterator[int],
    keep: Callable[[Entry], bool] | None,
    size: int,
) -> Iterator:
    """(entry, payload or None when damaged) of these entries, in their order, a batch at a time
    (``size`` first, then growing): the search stops reading where it has its hits. The index
    is closed when the search is done with it."""
    try:
        while batch := list(itertools.islice(entries, size)):
            got = {e.entry: (e, raw) for e, raw in store.payloads(_among(batch), tuple(batch), keep=keep)}
            yield from (got[entry] for entry in batch if entry in got)
            size = min(BATCH, size * 2)
    finally:
        index.close()


def _among(entries: list[int]) -> str:
    return f"WHERE entry IN ({','.join('?' * len(entries))})"


def _count(store: Archive, filters: Filters) -> int:
    """How many entries ``filters`` choose, without reading a payload."""
    if filters.newest:
        return sum(1 for _ in filters.scan(store))
    where, params = filters.where(order=False)
    sql = f"SELECT count(*) FROM archived_sessions {where}"
    return sum(f.conn.execute(sql, params).fetchone()[0] for f in store.files)


def _confirm(result: SearchResult, chosen: Iterator, text: str, limit: int | None) -> None:
    """The chosen payloads searched as bytes, newest first, until the first match past ``limit``;
    only rows that may match are parsed."""
    ascii_only = text.isascii()
    byte_needles = [n.encode("utf-8") for n in needles(text)]
    str_needles = needles(text)
    for entry, raw in chosen:
        if raw is None:
            result.damaged.append(entry.session_id)
            continue
        # bytes.lower() folds ASCII only: exact for ASCII text, str.lower() otherwise.
        if ascii_only:
            hay = raw.lower()
            if not any(n in hay for n in byte_needles):
                continue
        else:
            hay_s = raw.decode("utf-8").lower()
            if not any(n in hay_s for n in str_needles):
                continue
        hit = match_payload(orjson.loads(raw), entry, text)
        if hit is None:
            continue
        result.total += 1
        if limit is not None and result.total > limit:
            result.complete = False
            return
        result.hits.append(hit)


@dataclass
class VerifyResult:
    checked: int = 0
    damaged: dict[str, str] = field(default_factory=dict)  # session id (``#N`` beside it if older) -> why
    database: str = "ok"  # PRAGMA quick_check of every archive file

    @property
    def ok(self) -> bool:
        return not self.damaged and self.database == "ok"

    def to_dict(self) -> dict:
        return {"checked": self.checked, "damaged": self.damaged, "database": self.database, "ok": self.ok}


def verify(store: Archive) -> VerifyResult:
    """Decompress every payload, recompute its sha256 and parse it; plus a quick_check of each file."""
    result = VerifyResult()
    problems = []
    for f in store.files:
        if (line := check_line(f.conn.execute("PRAGMA quick_check").fetchall())) != "ok":
            problems.append(f"{f.path.name}: {line}")
    result.database = "; ".join(problems)[:500] or "ok"
    newest = store.newest()
    for e in sorted(store.entries(), key=lambda e: (e.session_id, -e.entry)):
        result.checked += 1
        sid = e.session_id
        key = sid if newest[sid] == e.entry else f"{sid} #{e.entry}"
        try:
            payload = store.get_entry(e.entry)
        except ArchiveDamaged as exc:
            result.damaged[key] = str(exc)
            continue
        except ValueError as exc:  # checks out by sha256 but is not our JSON: written wrong
            result.damaged[key] = f"{sid}: payload is not valid JSON ({exc})"
            continue
        if payload.get("session", {}).get("id") != sid:
            result.damaged[key] = f"{sid}: payload holds another session"
    return result


def when(ts, zone: bool = True) -> str:
    """:func:`units.when`, or ``-`` where Hermes recorded no time."""
    return units.when(ts, zone=zone) if isinstance(ts, (int, float)) else "-"


def _fold(text: str, limit: int) -> str:
    one = " ".join(text.split())
    return one if len(one) <= limit else one[: limit - 1] + "…"


def render_conversation(
    payload: dict, full: bool = False, inactive: bool = False, width: int = 100
) -> list[str]:
    """The conversation as plain lines: who and when, then what; tool calls and results folded.

    ``full`` unfolds tool calls and results; ``inactive`` also shows rewound/compacted
    messages (Hermes's own views hide them), marked as such.
    """
    s = {k: decode_value(v) for k, v in payload["session"].items()}
    msgs = payload["messages"]
    hidden = sum(1 for m in msgs if m.get("active", 1) == 0)
    lines = [
        f"{s['id']}  [{s.get('source')}]  {s.get('title') or ''}".rstrip(),
        f"started {when(s.get('started_at'))}  ended {when(s.get('ended_at'))} ({s.get('end_reason') or '-'})"
        f"  model {s.get('model') or '-'}  {len(msgs)} messages"
        + (f", {hidden} inactive{'' if inactive else ' hidden (--inactive shows them)'}" if hidden else ""),
    ]
    if s.get("parent_session_id"):
        lines.append(f"linked to {s['parent_session_id']} (parent_session_id)")
    lines.append("")
    limit = 10**9 if full else width * 3
    for m in msgs:
        if m.get("active", 1) == 0 and not inactive:
            continue
        mark = " (inactive)" if m.get("active", 1) == 0 else ""
        head = f"[{when(m.get('timestamp'), zone=False)}] {m.get('role')}{mark}"  # zone: the header's
        text = content_text(m.get("content"))
        if m.get("role") == "tool":
            name = m.get("tool_name") or ""
            if full:
                lines.append(f"{head} ({name})")
                lines += ["    " + ln for ln in text.splitlines()]
            else:
                lines.append(f"{head} ({name}) ▸ {len(text):,} chars: {_fold(text, width)}")
            continue
        lines.append(head)
        if text.strip():
            lines += ["    " + ln for ln in (text.splitlines() if full else [_fold(text, limit)])]
        for call in tool_calls(m.get("tool_calls")) if m.get("tool_calls") else []:
            lines.append(f"    ▸ tool call {call if full else _fold(call, width)}")
    return lines
