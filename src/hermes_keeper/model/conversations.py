"""What a conversation is: the one answer plan, prune, archive restore and export all use.

Hermes links sessions by ``parent_session_id`` (plus ``model_config._delegate_from`` for
subagents). A compression continuation, a delegate subagent and an untagged child (a
subagent from before Hermes marked them) belong to their parent: Hermes hides them and
deletes them with it, so the keeper decides, archives, deletes, restores and exports them
as one set. A branch (``_branched_from``, or the legacy ``end_reason='branched'`` rule) and a
gateway reset (``_reset_from``, or the legacy rule: the parent ended at a reset boundary and
the child rides its exact ``session_key``) are conversations of their own that only point at
where they started, even off a compression parent (as Hermes's ``get_compression_tip``,
session list and ``_RESET_CHILD_SQL`` see them). So a gateway chat's old sessions age on their
own while its newest, routed one is kept.

A marker counts as a fork only when it names the parent: a continuation inherits its
parent's ``model_config`` verbatim, markers included (``_non_continuation_child_sql``).

Pure: it reads only the facts below, which a survey row and an archived session row both
give, so a conversation is the same set whichever side of the archive it is on.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import NamedTuple, Protocol

COMPRESSION, DELEGATE, CHILD, BRANCH, RESET = "compression", "delegate", "child", "branch", "reset"
#: Link kinds that keep a child in its parent's conversation.
JOINING = frozenset({COMPRESSION, DELEGATE, CHILD})
#: End reasons of a gateway reset boundary (Hermes's ``_RESET_END_REASONS``): a child that rides
#: its parent's exact ``session_key`` after one is a new conversation (rows from before the marker).
RESET_END_REASONS = frozenset(
    {"session_reset", "session_switch", "idle", "daily", "suspended", "resume_pending_expired"}
)


def seconds(value) -> float | None:
    """A stored timestamp as unix seconds; text (ISO dates, numbers as text) parsed best-effort.

    Such profiles are flagged by ``schema.inspect`` and maintenance refuses them; this only
    keeps the survey (and so the report) readable instead of failing on mixed types.
    """
    if value is None or isinstance(value, (int, float)):
        return value
    try:
        return float(value)
    except (TypeError, ValueError):
        pass
    try:
        dt = datetime.fromisoformat(str(value).strip())  # 3.11+ reads a "Z" too
    except ValueError:
        return None
    return (dt if dt.tzinfo else dt.replace(tzinfo=UTC)).timestamp()


def model_config_links(raw: str | None) -> tuple[str | None, str | None, str | None]:
    """``model_config``'s ``_delegate_from``, ``_branched_from``, ``_reset_from`` (None: absent)."""
    if not raw:
        return None, None, None
    try:
        cfg = json.loads(raw)
    except (ValueError, TypeError):
        return None, None, None
    if not isinstance(cfg, dict):
        return None, None, None
    marks = (cfg.get(k) for k in ("_delegate_from", "_branched_from", "_reset_from"))
    delegate, branch, reset = (m if isinstance(m, str) else None for m in marks)
    return delegate, branch, reset


class Session(Protocol):
    """The facts a conversation is decided by (:class:`SessionRow` has them too)."""

    id: str
    source: str | None
    parent_id: str | None
    end_reason: str | None
    started_at: float | None
    ended_at: float | None
    delegate_from: str | None
    branched_from: str | None
    reset_from: str | None
    session_key: str | None


@dataclass(frozen=True)
class Facts:
    id: str
    parent_id: str | None = None
    end_reason: str | None = None
    started_at: float | None = None
    ended_at: float | None = None
    delegate_from: str | None = None
    branched_from: str | None = None
    source: str | None = None
    reset_from: str | None = None
    session_key: str | None = None

    @classmethod
    def of_row(cls, row: dict) -> Facts:
        """From a ``sessions`` row as an archive payload holds it (``payload["session"]``)."""
        config = row.get("model_config")
        delegate, branch, reset = model_config_links(config if isinstance(config, str) else None)
        parent, key = row.get("parent_session_id"), row.get("session_key")
        return cls(
            id=row["id"],
            source=row.get("source") if isinstance(row.get("source"), str) else None,
            parent_id=parent if isinstance(parent, str) else None,
            end_reason=row.get("end_reason") if isinstance(row.get("end_reason"), str) else None,
            started_at=seconds(row.get("started_at")),
            ended_at=seconds(row.get("ended_at")),
            delegate_from=delegate,
            branched_from=branch,
            reset_from=reset,
            session_key=key if isinstance(key, str) else None,
        )


class Link(NamedTuple):
    child: str
    parent: str
    kind: str  # COMPRESSION | DELEGATE | CHILD | BRANCH | RESET


def is_branch(child: Session, parent: Session) -> bool:
    """Hermes's ``_BRANCH_CHILD_SQL``: the ``_branched_from`` marker, or the legacy heuristic."""
    ended = parent.ended_at
    return child.branched_from is not None or (
        parent.end_reason == "branched"
        and ended is not None
        and child.started_at is not None
        and child.started_at >= ended
    )


def is_reset(child: Session, parent: Session) -> bool:
    """Hermes's ``_RESET_CHILD_SQL``: the ``_reset_from`` marker, or, for rows from before it, the
    child rides its parent's exact non-empty ``session_key`` and the parent ended at a reset."""
    return child.reset_from is not None or (
        parent.end_reason in RESET_END_REASONS
        and bool(child.session_key)
        and child.session_key == parent.session_key
    )


def forks_off(child: Session, parent: Session) -> bool:
    """A branch, delegate or reset marker that names ``parent``: forked off it, not continuing it.
    A marker naming another row was inherited with the parent's ``model_config``."""
    return parent.id in (child.branched_from, child.delegate_from, child.reset_from)


def link_kind(child: Session, parent: Session) -> str:
    """How ``child`` hangs off ``parent`` (its ``parent_session_id``).

    A compression edge is upstream's ``_CONTINUATION_EDGE_SQL``: the parent ended by compression
    and the child is no branch, delegate run or reset forked off it (markers bound to the parent)
    nor a tool session.
    """
    if parent.end_reason == "compression" and not forks_off(child, parent) and child.source != "tool":
        return COMPRESSION
    if child.delegate_from is not None and child.branched_from is None:
        return DELEGATE  # Hermes deletes it with its parent, whatever the parent's end_reason
    if is_branch(child, parent):
        return BRANCH
    if is_reset(child, parent):
        return RESET
    return CHILD


def continues(child: Session, parent: Session) -> bool:
    """``child`` is a compression continuation of ``parent`` (turn-lease keys, pinned tails)."""
    return link_kind(child, parent) == COMPRESSION


def lineage_root(sid: str, sessions: Mapping[str, Session]) -> str:
    """The compression-lineage root Hermes keys a turn lease by (``_session_turn_lease_key_on_conn``)."""
    seen, current = {sid}, sessions[sid]
    while current.parent_id in sessions and current.parent_id not in seen:
        parent = sessions[current.parent_id]
        if not continues(current, parent):
            break
        seen.add(parent.id)
        current = parent
    return current.id


@dataclass
class Conversations:
    #: root -> members, parents first (insert, export), else oldest first; the root is the first
    members: dict[str, list[str]] = field(default_factory=dict)
    #: session -> its conversation's root
    root: dict[str, str] = field(default_factory=dict)
    #: every link between the given sessions, branches included
    links: list[Link] = field(default_factory=list)
    #: the facts they were made from, by id
    sessions: dict[str, Session] = field(default_factory=dict)

    def children_first(self, root: str) -> list[str]:
        """The order to delete in: no member outlives a child pointing at it."""
        return self.members[root][::-1]

    def kind(self, sid: str) -> str | None:
        """The kind of the link that holds ``sid`` in its conversation (None for the root)."""
        return next((k.kind for k in self.links if k.child == sid and k.kind in JOINING), None)

    def parents_first(self) -> list[str]:
        """Every session, conversation by conversation, each after the one it branched or was
        reset from."""
        up: dict[str, set[str]] = {r: set() for r in self.members}
        for k in self.links:
            if k.kind not in JOINING:
                up[self.root[k.child]].add(self.root[k.parent])
        roots = _parents_first(_oldest_first(self.members, self.sessions), up)
        return [sid for r in roots for sid in self.members[r]]


def conversations(sessions: Iterable[Session]) -> Conversations:
    """Group ``sessions`` into conversations by the links among them (a parent not given is no link)."""
    by_id = {s.id: s for s in sessions}
    links: list[Link] = []
    for s in by_id.values():
        if s.parent_id is not None and s.parent_id != s.id and s.parent_id in by_id:
            links.append(Link(s.id, s.parent_id, link_kind(s, by_id[s.parent_id])))
        if (
            s.delegate_from is not None
            and s.delegate_from not in (s.id, s.parent_id)
            and s.delegate_from in by_id
        ):
            links.append(Link(s.id, s.delegate_from, DELEGATE))
    up: dict[str, list[str]] = {}  # only sessions with a joining link: most have none
    near: dict[str, list[str]] = {}
    for k in links:
        if k.kind in JOINING:
            up.setdefault(k.child, []).append(k.parent)
            near.setdefault(k.child, []).append(k.parent)
            near.setdefault(k.parent, []).append(k.child)

    out = Conversations(links=links, sessions=by_id)
    for sid in by_id:
        if sid in out.root:
            continue
        if sid not in near:
            out.members[sid], out.root[sid] = [sid], sid
            continue
        group, todo = {sid}, [sid]
        while todo:
            for n in near[todo.pop()]:
                if n not in group:
                    group.add(n)
                    todo.append(n)
        members = _parents_first(_oldest_first(group, by_id), up)
        out.members[members[0]] = members
        out.root.update((m, members[0]) for m in members)
    return out


def _oldest_first(ids: Iterable[str], sessions: Mapping[str, Session]) -> list[str]:
    return sorted(ids, key=lambda sid: (sessions[sid].started_at or 0.0, sid))


def _parents_first(nodes: list[str], up: Mapping[str, Collection[str]]) -> list[str]:
    """``nodes`` in their given order, except that each comes after its ``up`` (cycles broken)."""
    place = {n: i for i, n in enumerate(nodes)}
    out: list[str] = []
    seen: set[str] = set()
    for n in nodes:
        if n in seen:
            continue
        seen.add(n)
        stack = [(n, iter(sorted(up.get(n, ()), key=place.__getitem__)))]
        while stack:  # depth first up the links, without recursion (chains can be long)
            cur, parents = stack[-1]
            nxt = next((p for p in parents if p not in seen), None)
            if nxt is None:
                stack.pop()
                out.append(cur)
            else:
                seen.add(nxt)
                stack.append((nxt, iter(sorted(up.get(nxt, ()), key=place.__getitem__))))
    return out
