"""Why the plan keeps or prunes a session, as values made where the plan decides.

A :class:`Reason` carries its stable ``code`` (what scripts match: ``--json``, docs/json.md, the
table in docs/run.md) beside the words a person reads, and the facts the words were made from (as
restic's ``KeepReason`` carries its matches and counters). Nothing reads a code back out of words:
the words may change, the code does not. This module is the full list of codes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from hermes_keeper import units


@dataclass(frozen=True)
class Reason:
    code: str  # stable, an identifier
    text: str  # the words ``plan`` prints and ``--json`` gives as ``reason``
    #: what the words were made from (a source, its retention, an idle time, another member's reason)
    details: Mapping[str, object] = field(default_factory=dict, compare=False)


def days(seconds: float) -> str:
    """A duration in the plan's words: whole days, or hours, minutes under a day (``units.span``)."""
    return units.span(seconds)


# Signs that Hermes still relies on a session, or that its row is not one the keeper can address
# exactly (plan.in_use): they keep it from the prune and from a zombie close.
ODD_ID = Reason("odd_id", "id is not valid UTF-8")
NUL_ID = Reason("odd_id", "id holds a NUL byte")
ROUTED = Reason("routed", "routed by the gateway")
ROUTING_UNKNOWN = Reason("routing_unknown", "routing unknown (the gateway's routing unreadable)")
GATEWAY_RECOVERABLE = Reason("gateway_recoverable", "gateway-recoverable")
COMPRESSION_LEASE = Reason("lease", "live compression lease")
TURN_LEASE = Reason("lease", "live turn lease")
CHAT_SURFACE = Reason("chat_surface", "open chat surface (runtime/active_sessions.json)")
HANDOFF = Reason("handoff", "handoff in flight")
TOPIC_BINDING = Reason("topic_binding", "telegram topic binding")
PENDING_DELEGATION = Reason("pending_delegation", "pending delegation")
SCHEDULE = Reason("schedule", "live /loop or /heartbeat schedule")

# The other protections (plan.protections): kept whatever its age.
OPEN = Reason("open", "open")
OPEN_ACTIVE = Reason("open_active", "open and active")
FUTURE = Reason("future", "dated in the future")  # its age is unknown (not "within retention")
PINNED = Reason("pinned", "pinned")
TITLED = Reason("titled", "titled")

# What else stops a zombie close (plan.zombie_blockers). The plan shows none of them: a blocked
# session stays open, and its decision says "open".
GATEWAY_KEY = Reason("gateway_key", "messaging session with a gateway key")
PINNED_CHAIN = Reason("pinned_chain", "continuation of a pinned conversation")
HEARTBEAT = Reason("heartbeat", "its gateway backend heartbeats")


def restored(remaining_s: float) -> Reason:
    """``archive restore`` brought it back, and its ``restored_keep`` has ``remaining_s`` to go."""
    text = f"restored from the archive ({days(remaining_s)} more)"
    return Reason("restored", text, {"remaining_s": remaining_s})


def protection_unreadable(what: str) -> Reason:
    """A protection exists but could not be read: everything is kept (when unsure, keep)."""
    return Reason("protection_unreadable", f"protection unreadable: {what}", {"what": what})


def conversation_member(member: str, why: Reason) -> Reason:
    """Another member of the unit, ``member``, is protected (for ``why``): the unit is kept whole."""
    return Reason(
        "conversation_member", f"conversation member {member} is {why.text}", {"member": member, "why": why}
    )


def within_retention(retention_s: float, source: str) -> Reason:
    """The unit is not old enough for ``source``'s retention, this session's own."""
    return Reason(
        "within_retention",
        f"within retention ({days(retention_s)} for {source})",
        {"retention_s": retention_s, "source": source},
    )


def parent_kept(retention_s: float, source: str) -> Reason:
    """This session's own retention passed (a subagent's 7d), the unit's longest (``source``'s) not."""
    within = within_retention(retention_s, source)
    return Reason("parent_kept", f"kept with its conversation: {within.text}", within.details)


def retention(idle_s: float, retention_s: float, source: str) -> Reason:
    """Pruned: the unit is idle past the retention of each member's source."""
    return Reason(
        "retention",
        f"idle {days(idle_s)} > {days(retention_s)} ({source})",
        {"idle_s": idle_s, "retention_s": retention_s, "source": source},
    )


def disk_budget(idle_s: float) -> Reason:
    """Pruned: among the oldest units no protection holds, to get under the disk budget's low water."""
    return Reason("disk_budget", f"disk budget: oldest eligible (idle {days(idle_s)})", {"idle_s": idle_s})


# Why the plan keeps a ``sessions/<sid>.jsonl`` its rules would remove (run/transcripts.py): Hermes
# diverts there the messages it could not write to a replaced state.db, and nothing reads them back.
def only_copy(missing: int, messages: int) -> Reason:
    """``missing`` of the file's ``messages`` are rows of its session in neither state.db nor the archive."""
    return Reason(
        "only_copy",
        f"only copy: {missing} of {messages} messages in neither state.db nor the archive",
        {"missing": missing, "messages": messages},
    )


def transcript_unread(why: str) -> Reason:
    """The file was not read whole (over the read cap, a line that is not a JSON object, an error):
    whether it holds the only copy of a message is unknown, so it is kept."""
    return Reason("transcript_unread", f"not checked ({why}): kept, it may be the only copy", {"why": why})
