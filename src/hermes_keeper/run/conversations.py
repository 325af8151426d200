"""What a conversation is: the one answer plan, prune, archive restore and export all use.

Hermes links sessions by ``parent_session_id`` (plus ``model_config._delegate_from`` for
subagents). A compression continuation, a delegate subagent and an untagged child (a
subagent from before Hermes marked them) belong to their parent: Hermes hides them and
deletes them with it, so the keeper decides, archives, deletes, restores and exports them
as one set. A branch (``_branched_from``, or the legacy ``end_reason='branched'`` rule) is a
conversation of its own that only points at where it started, even off a compression
parent (as Hermes's ``get_compression_tip`` and session list see it).

Pure: it reads only the facts below, which a survey row and an archived session row both
give, so a conversation is the same set whichever side of the archive it is on.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol

from hermes_keeper.run.survey import model_config_links, seconds

COMPRESSION, DELEGATE, CHILD, BRANCH = "compression", "delegate", "child", "branch"
#: Link kinds that keep a child in its parent's conversation.
JOINING = frozenset({COMPRESSION, DELEGATE, CHILD})


class Session(Protocol):
    """The facts a conversation is decided by (:class:`SessionRow` has them too)."""

    id: str
    parent_id: str | None
    end_reason: str | None
    started_at: float | None
    ended_at: float | None
    delegate_from: str | None
    branched_from: str | None


@dataclass(frozen=True)
class Facts:
    id: str
    parent_id: str | None = None
    end_reason: str | None = None
    started_at: float | None = None
    ended_at: float | None = None
    delegate_from: str | None = None
    branched_from: str | None = None

    @classmethod
    def of_row(cls, row: dict) -> Facts:
        """From a ``sessions`` row as an archive payload holds it (``payload["session"]``)."""
        config = row.get("model_config")
        delegate, branch = model_config_links(config if isinstance(config, str) else None)
        parent = row.get("parent_session_id")
        return cls(
            id=row["id"],
            parent_id=parent if isinstance(parent, str) else None,
            end_reason=row.get("end_reason") if isinstance(row.get("end_reason"), str) else None,
            started_at=seconds(row.get("started_at")),
            ended_at=seconds(row.get("ended_at")),
            delegate_from=delegate,
            branched_from=branch,
        )


@dataclass(frozen=True)
class Link:
    child: str
    parent: str
    kind: str  # COMPRESSION | DELEGATE | CHILD | BRANCH


def is_branch(child: Session, parent: Session) -> bool:
    """Hermes's ``_BRANCH_CHILD_SQL``: the ``_branched_from`` marker, or the legacy heuristic."""
    ended = parent.ended_at
    return child.branched_from is not None or (
        parent.end_reason == "branched"
        and ended is not None
        and child.started_at is not None
        and child.started_at >= ended
    )


def link_kind(child: Session, parent: Session) -> str:
    """How ``child`` hangs off ``parent`` (its ``parent_session_id``)."""
    if is_branch(child, parent):
        return BRANCH
    if child.delegate_from is not None:
        return DELEGATE
    return COMPRESSION if parent.end_reason == "compression" else CHILD


@dataclass
class Conversations:
    #: root -> members, parents first (insert, export); the root is the first of them
    members: dict[str, list[str]] = field(default_factory=dict)
    #: session -> its conversation's root
    root: dict[str, str] = field(default_factory=dict)
    #: every link between the given sessions, branches included
    links: list[Link] = field(default_factory=list)

    def children_first(self, root: str) -> list[str]:
        """The order to delete in: no member outlives a child pointing at it."""
        return self.members[root][::-1]

    def kind(self, sid: str) -> str | None:
        """The kind of the link that holds ``sid`` in its conversation (None for the root)."""
        return next((k.kind for k in self.links if k.child == sid and k.kind in JOINING), None)

    def parents_first(self) -> list[str]:
        """Every session, conversation by conversation, each after the one it branched from."""
        up: dict[str, set[str]] = {r: set() for r in self.members}
        for k in self.links:
            if k.kind == BRANCH:
                up[self.root[k.child]].add(self.root[k.parent])
        roots = _parents_first(list(self.members), up)
        return [sid for r in roots for sid in self.members[r]]


def conversations(sessions: Iterable[Session]) -> Conversations:
    """Group ``sessions`` into conversations by the links among them (a parent not given is no link)."""
    by_id = {s.id: s for s in sessions}
    links: list[Link] = []
    for s in by_id.values():
        p = by_id.get(s.parent_id) if s.parent_id else None
        if p is not None and p.id != s.id:
            links.append(Link(s.id, p.id, link_kind(s, p)))
        if s.delegate_from in by_id and s.delegate_from not in (s.id, s.parent_id):
            links.append(Link(s.id, s.delegate_from, DELEGATE))
    up: dict[str, set[str]] = {sid: set() for sid in by_id}
    near: dict[str, set[str]] = {sid: set() for sid in by_id}
    for k in links:
        if k.kind in JOINING:
            up[k.child].add(k.parent)
            near[k.child].add(k.parent)
            near[k.parent].add(k.child)
    order = sorted(by_id, key=lambda sid: (by_id[sid].started_at or 0.0, sid))
    place = {sid: i for i, sid in enumerate(order)}
    out = Conversations(links=links)
    for sid in order:
        if sid in out.root:
            continue
        group, todo = {sid}, [sid]
        while todo:
            for n in near[todo.pop()] - group:
                group.add(n)
                todo.append(n)
        members = _parents_first(sorted(group, key=place.__getitem__), up)
        out.members[members[0]] = members
        out.root.update((m, members[0]) for m in members)
    return out


def _parents_first(nodes: list[str], up: dict[str, set[str]]) -> list[str]:
    """``nodes`` in their given order, except that each comes after its ``up`` (cycles broken)."""
    place = {n: i for i, n in enumerate(nodes)}
    out: list[str] = []
    seen: set[str] = set()
    for n in nodes:
        if n in seen:
            continue
        seen.add(n)
        stack = [(n, iter(sorted(up[n], key=place.__getitem__)))]
        while stack:  # depth first up the links, without recursion (chains can be long)
            cur, parents = stack[-1]
            nxt = next((p for p in parents if p not in seen), None)
            if nxt is None:
                stack.pop()
                out.append(cur)
            else:
                seen.add(nxt)
                stack.append((nxt, iter(sorted(up[nxt], key=place.__getitem__))))
    return out
