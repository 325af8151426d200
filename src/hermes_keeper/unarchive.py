"""Putting archived sessions back into ``state.db`` exactly as they were.

Ids, timestamps, every message (inactive ones too, with their original ids), model
usage and ``state_meta`` rows go back through the same budgeted :class:`Writer` as a
prune. A conversation comes back whole: asking for one member of a compression chain
(or a session with delegate children) restores every archived member. The session row
is inserted hidden (``archived = 1`` where the column exists) and revealed in the last
step, so a crash never shows a half-restored conversation.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field

from . import archive as arch
from .db import connect_ro
from .discovery import Profile
from .errors import KeeperError
from .journal import Journal
from .schema import SchemaInfo, inspect
from .writer import Writer

TITLE_SUFFIX = " (restored)"


@dataclass
class UnarchiveResult:
    restored: list[str] = field(default_factory=list)
    damaged: list[str] = field(default_factory=list)
    retitled: dict[str, str] = field(default_factory=dict)
    dropped_columns: list[str] = field(default_factory=list)
    messages: int = 0

    def to_dict(self) -> dict:
        return self.__dict__.copy()


def conversation_ids(store: arch.Archive, ids: list[str]) -> list[str]:
    """``ids`` plus archived members of their conversations (parents first)."""
    entries = {e.session_id: e for e in store.entries()}
    children: dict[str, list[str]] = {}
    for e in entries.values():
        if e.parent_session_id:
            children.setdefault(e.parent_session_id, []).append(e.session_id)
    linked: dict[str, bool] = {}

    def is_unit_link(child: str) -> bool:
        """Compression continuation or delegate child: same conversation as its parent."""
        if child not in linked:
            try:
                p = store.get(child)
                parent = store.get(entries[child].parent_session_id)
            except (KeyError, arch.ArchiveDamaged):
                linked[child] = False
            else:
                cfg = p["session"].get("model_config") or ""
                linked[child] = parent["session"].get(
                    "end_reason"
                ) == "compression" or "_delegate_from" in str(cfg)
        return linked[child]

    out, todo = [], list(ids)
    while todo:
        sid = todo.pop()
        if sid in out:
            continue
        out.append(sid)
        e = entries.get(sid)
        if e and e.parent_session_id in entries and is_unit_link(sid):
            todo.append(e.parent_session_id)
        todo.extend(c for c in children.get(sid, []) if is_unit_link(c))

    def depth(sid: str) -> int:
        d = 0
        while sid in entries and entries[sid].parent_session_id in out and d < len(out):
            sid, d = entries[sid].parent_session_id, d + 1
        return d

    return sorted(out, key=lambda s: (depth(s), s))


def _free_title(conn: sqlite3.Connection, title: str, taken: set[str]) -> str:
    candidate, n = title, 1
    while (
        candidate in taken or conn.execute("SELECT 1 FROM sessions WHERE title = ?", (candidate,)).fetchone()
    ):
        candidate = f"{title}{TITLE_SUFFIX}" if n == 1 else f"{title} (restored {n})"
        n += 1
    return candidate


def _insert(c: sqlite3.Connection, table: str, row: dict) -> None:
    cols = list(row)
    values = [arch.decode_value(row[k]) for k in cols]
    ph = ",".join(arch.sql_placeholder(v) for v in values)
    c.execute(f"INSERT INTO {table} ({','.join(cols)}) VALUES ({ph})", values)


def _fit(row: dict, schema: SchemaInfo, table: str, dropped: set[str]) -> dict:
    keep = {k: v for k, v in row.items() if schema.has(table, k)}
    dropped |= {f"{table}.{k}" for k in row if k not in keep}
    return keep


def restore_sessions(
    profile: Profile,
    ids: list[str],
    *,
    journal: Journal | None = None,
    budget_ms: float = 50.0,
    pause_ms: float = 20.0,
) -> UnarchiveResult:
    schema = inspect(profile.db_path)
    schema.require_actionable()
    path = profile.keeper_dir / arch.ARCHIVE_NAME
    if not path.exists():
        raise KeeperError(f"no archive for profile {profile.name} ({path})")
    result = UnarchiveResult()
    dropped: set[str] = set()
    with arch.Archive(path) as store:
        unknown = [i for i in ids if store.entry(i) is None]
        if unknown:
            raise KeeperError(f"not in the archive: {', '.join(unknown)}")
        wanted = conversation_ids(store, ids)
        conn = connect_ro(profile.db_path)
        try:
            present = [
                i for i in wanted if conn.execute("SELECT 1 FROM sessions WHERE id = ?", (i,)).fetchone()
            ]
        finally:
            conn.close()
        if present:
            raise KeeperError(f"already in state.db, not restored: {', '.join(present)}")
        payloads = []
        for sid in wanted:
            try:
                payloads.append(store.get(sid))
            except arch.ArchiveDamaged:
                result.damaged.append(sid)
        restoring = {p["session"]["id"] for p in payloads}
        with Writer(profile.db_path, budget_ms=budget_ms, pause_ms=pause_ms) as w:
            taken: set[str] = set()
            for p in payloads:
                _restore_one(w, schema, p, restoring, taken, dropped, result)
                store.set_state([p["session"]["id"]], arch.RESTORED)
                if journal:
                    journal.write("unarchived", session=p["session"]["id"], messages=len(p["messages"]))
    result.dropped_columns = sorted(dropped)
    return result


def _restore_one(
    w: Writer,
    schema: SchemaInfo,
    p: dict,
    restoring: set[str],
    taken: set[str],
    dropped: set[str],
    result: UnarchiveResult,
) -> None:
    session = _fit(dict(p["session"]), schema, "sessions", dropped)
    sid = session["id"]
    final_archived = session.get("archived", 0)
    parent = session.get("parent_session_id")
    if (
        parent
        and parent not in restoring
        and not w.conn.execute("SELECT 1 FROM sessions WHERE id = ?", (parent,)).fetchone()
    ):
        session["parent_session_id"] = None  # its parent is gone for good; Hermes orphans the same way
    if session.get("title"):
        title = _free_title(w.conn, session["title"], taken)
        if title != session["title"]:
            result.retitled[sid] = title
        session["title"] = title
        taken.add(title)
    if schema.has("sessions", "archived"):
        session["archived"] = 1

    w.step(lambda c: _insert(c, "sessions", session))
    messages = [_fit(m, schema, "messages", dropped) for m in p["messages"]]
    batch = w.batch(start=200)
    done = 0
    while done < len(messages):
        chunk = messages[done : done + batch.size]

        def ins(c, chunk=chunk):
            for m in chunk:
                _insert(c, "messages", m)

        w.step(ins, batch, units=len(chunk))
        done += len(chunk)

    def finish(c):
        if schema.has("session_model_usage"):
            for u in p.get("model_usage", []):
                _insert(c, "session_model_usage", _fit(u, schema, "session_model_usage", dropped))
        if schema.has("state_meta"):
            for kv in p.get("state_meta", []):
                c.execute(
                    "INSERT OR REPLACE INTO state_meta (key, value) VALUES (?, ?)", (kv["key"], kv["value"])
                )
        if schema.has("sessions", "archived"):
            c.execute("UPDATE sessions SET archived = ? WHERE id = ?", (final_archived, sid))

    w.step(finish)
    result.restored.append(sid)
    result.messages += len(messages)
