"""The plan: a pure function of (survey, policy, now). No database, no clock, no files.

Sessions are decided as *conversation units*: a compression chain (a parent whose
``end_reason`` is ``compression`` and its continuations) is one conversation, and
delegate subagents go with the session that spawned them. A unit is pruned only when
every member is old enough for its source's retention, measured from the newest
activity anywhere in the unit, and no member is protected. When unsure, keep.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field

from hermes_keeper.backup.compact import LIVE_VACUUM_STALL_S
from hermes_keeper.run.policy import MESSAGING_SOURCES, Policy
from hermes_keeper.run.survey import LIVE_HANDOFF_STATES, SessionRow, Survey

ZOMBIE_END_REASON = "keeper_zombie"


def in_use(s: SessionRow, now: float) -> list[str]:
    """Signs that Hermes (gateway, compressor, handoff, delegation) still relies on ``s``, or that
    the row is not one the keeper can address exactly."""
    checks = (
        (s.odd_id, "id is not valid UTF-8"),  # not Hermes's own: leave it as it is
        (s.routed, "routed by the gateway"),
        (s.gateway_recoverable, "gateway-recoverable"),
        (s.lease_expires_at is not None and s.lease_expires_at > now, "live compression lease"),
        (s.handoff_state in LIVE_HANDOFF_STATES, "handoff in flight"),
        (s.topic_bound, "telegram topic binding"),
        (s.pending_delegation, "pending delegation"),
    )
    return [reason for hit, reason in checks if hit]


def protections(s: SessionRow, policy: Policy, now: float) -> list[str]:
    """Why ``s`` must not be pruned regardless of its age (empty: age decides)."""
    reasons = []
    if s.is_open:
        reasons.append("open" if now - s.last_activity >= policy.zombie_after_s else "open and active")
    reasons += in_use(s, now)
    if s.pinned:
        reasons.append("pinned")
    if s.title and policy.keep_titled:
        reasons.append("titled")
    return reasons


def zombie_blockers(s: SessionRow, now: float) -> list[str]:
    """Why an idle open session must not be closed (the gateway may still write to it)."""
    reasons = in_use(s, now)
    if s.source in MESSAGING_SOURCES and s.session_key:
        reasons.append("messaging session with a gateway key")
    return reasons


@dataclass(frozen=True)
class Decision:
    session_id: str
    source: str
    action: str  # prune | keep
    reason: str
    unit: str
    messages: int
    est_bytes: int


@dataclass(frozen=True)
class ZombieClose:
    session_id: str
    source: str
    ended_at: float
    idle_s: float


@dataclass(frozen=True)
class FileAction:
    path: str
    kind: str
    bytes: int
    reason: str
    session_id: str | None = None


@dataclass
class Plan:
    profile: str
    now: float
    zombies: list[ZombieClose] = field(default_factory=list)
    #: sessions to prune, unit by unit in the order their messages were written (so each delete
    #: transaction's rows sit together in the b-trees and FTS segments), children before parents
    prune: list[str] = field(default_factory=list)
    decisions: dict[str, Decision] = field(default_factory=dict)
    files: list[FileAction] = field(default_factory=list)
    kept_files: list[FileAction] = field(default_factory=list)
    db_bytes: int = 0
    est_freed_bytes: int = 0
    compact: str = ""  # how the run's compact step gives the freed pages back ("": it does not run)
    remaining_sessions: int = 0
    remaining_messages: int = 0

    @property
    def prune_messages(self) -> int:
        return sum(self.decisions[s].messages for s in self.prune)

    def by_source(self) -> dict[str, dict]:
        out: dict[str, Counter] = defaultdict(Counter)
        for d in self.decisions.values():
            c = out[d.source]
            c[d.action] += 1
            if d.action == "prune":
                c["bytes"] += d.est_bytes
                c["messages"] += d.messages
        return {k: dict(v) for k, v in sorted(out.items())}

    def keep_reasons(self) -> dict[str, int]:
        return dict(Counter(d.reason for d in self.decisions.values() if d.action == "keep").most_common())

    def to_dict(self, verbose: bool = False) -> dict:
        out = {
            "profile": self.profile,
            "now": self.now,
            "zombies": [asdict(z) for z in self.zombies],
            "prune": {
                "sessions": len(self.prune),
                "messages": self.prune_messages,
                "est_bytes": self.est_freed_bytes,
            },
            "files": {"remove": len(self.files), "bytes": sum(f.bytes for f in self.files)},
            "by_source": self.by_source(),
            "keep_reasons": self.keep_reasons(),
            "db_bytes": self.db_bytes,
            "compact": self.compact,
            "remaining": {"sessions": self.remaining_sessions, "messages": self.remaining_messages},
        }
        if verbose:
            out["decisions"] = [asdict(self.decisions[k]) for k in sorted(self.decisions)]
            out["file_actions"] = [asdict(f) for f in self.files]
        return out


def is_branch(child: SessionRow, parent: SessionRow) -> bool:
    """Hermes's ``_BRANCH_CHILD_SQL``: the ``_branched_from`` marker, or the legacy heuristic."""
    ended = parent.ended_at
    return child.branched_from is not None or (
        parent.end_reason == "branched" and ended is not None and child.started_at >= ended
    )


def units(survey: Survey) -> dict[str, list[str]]:
    """Conversation units: root id -> member ids.

    A child joins its parent's unit unless it is a branch: compression continuations and
    subagent runs (marked ``_delegate_from``, or untagged as before Hermes's v16 migration)
    are the very children Hermes itself hides and cascade-deletes with the parent.
    """
    parent: dict[str, str] = {sid: sid for sid in survey.sessions}

    def find(x: str) -> str:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    def union(a: str, b: str) -> None:
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)

    sessions = survey.sessions
    for s in sessions.values():
        p = sessions.get(s.parent_id) if s.parent_id else None
        if p is not None and (p.end_reason == "compression" or not is_branch(s, p)):
            union(s.id, p.id)
        if s.delegate_from and s.delegate_from in sessions:
            union(s.id, s.delegate_from)
    groups: dict[str, list[str]] = defaultdict(list)
    for sid in sessions:
        groups[find(sid)].append(sid)
    return dict(groups)


def _bytes_per_content_byte(survey: Survey, db_bytes: int) -> float:
    """The database's bytes (FTS and indexes included) per byte of message text."""
    content = sum(s.content_bytes for s in survey.sessions.values())
    return db_bytes / content if content else 0.0


def _first_row(members: list[str], survey: Survey) -> int:
    """The unit's oldest message id (0 for a unit without messages)."""
    ids = [survey.sessions[m].first_message_id for m in members]
    return min((i for i in ids if i is not None), default=0)


def _depth_order(members: list[str], survey: Survey) -> list[str]:
    """Children before parents, so no row ever points at a deleted parent mid-prune."""
    ids = set(members)

    def depth(sid: str) -> int:
        d, seen = 0, set()
        while True:
            p = survey.sessions[sid].parent_id
            if p not in ids or p in seen:
                return d
            seen.add(p)
            sid, d = p, d + 1

    return sorted(members, key=lambda m: (-depth(m), m))


def compact_step(auto_vacuum: str | None, live_bytes: int) -> str:
    """The run's compact step, announced: a full VACUUM stalls Hermes's writes while it runs."""
    if auto_vacuum == "incremental":
        return "incremental vacuum in budgeted steps"
    return (
        f"one-time VACUUM to incremental auto-vacuum (~{live_bytes >> 20} MiB to copy): with Hermes"
        f" stopped, or beside it if its estimated stall is at most {LIVE_VACUUM_STALL_S:.0f} s at a"
        " quiet moment; otherwise the freed pages stay reclaimable in state.db"
    )


def make_plan(survey: Survey, policy: Policy, now: float, db_bytes: int | None = None) -> Plan:
    db_bytes = survey.schema.db_bytes if db_bytes is None else db_bytes
    plan = Plan(profile=survey.profile.name, now=now, db_bytes=db_bytes)
    ratio = _bytes_per_content_byte(survey, db_bytes)
    sessions = survey.sessions

    for s in sessions.values():
        idle = now - s.last_activity
        if s.is_open and idle >= policy.zombie_after_s and not zombie_blockers(s, now):
            ended = max(t for t in (s.started_at, s.last_message_at, s.last_activity_at) if t is not None)
            plan.zombies.append(ZombieClose(s.id, s.source, ended, idle))
    plan.zombies.sort(key=lambda z: z.session_id)

    candidates: list[tuple[float, str, list[str]]] = []  # (unit last activity, root, members)
    for root, members in units(survey).items():
        rows = [sessions[m] for m in members]
        last = max(r.last_activity for r in rows)
        age = now - last
        protected = [(r.id, p) for r in rows for p in protections(r, policy, now)]
        if protected:
            sid, why = protected[0]
            reason = why if len(members) == 1 else f"conversation member {sid} is {why}"
            keep_reason = {m: (why if m == sid else reason) for m in members}
            for r in rows:
                plan.decisions[r.id] = _decision(r, "keep", keep_reason[r.id], root, ratio)
            continue
        needed = max(policy.retention_for(r.source) for r in rows)
        if age <= needed:
            for r in rows:
                plan.decisions[r.id] = _decision(
                    r, "keep", f"within retention ({_days(needed)} for {r.source})", root, ratio
                )
            continue
        for r in rows:
            plan.decisions[r.id] = _decision(
                r,
                "prune",
                f"idle {_days(age)} > {_days(policy.retention_for(r.source))} ({r.source})",
                root,
                ratio,
            )
        candidates.append((last, root, members))

    chosen = list(candidates)
    freed = sum(plan.decisions[m].est_bytes for _, _, ms in chosen for m in ms)
    if policy.max_db_bytes is not None and db_bytes - freed > policy.max_db_bytes:
        target = policy.max_db_bytes * policy.low_water
        extra = []
        for root, members in units(survey).items():
            if any(plan.decisions[m].action == "prune" for m in members):
                continue
            rows = [sessions[m] for m in members]
            if any(protections(r, policy, now) for r in rows):
                continue
            extra.append((max(r.last_activity for r in rows), root, members))
        for last, root, members in sorted(extra):
            if db_bytes - freed <= target:
                break
            for m in members:
                r = sessions[m]
                plan.decisions[m] = _decision(
                    r, "prune", f"disk budget: oldest eligible (idle {_days(now - last)})", root, ratio
                )
                freed += plan.decisions[m].est_bytes
            chosen.append((last, root, members))
    for _, members in sorted((_first_row(members, survey), members) for _, _, members in chosen):
        plan.prune.extend(_depth_order(members, survey))
    plan.est_freed_bytes = freed
    if policy.compact and plan.prune:
        plan.compact = compact_step(survey.schema.auto_vacuum, db_bytes - freed)

    pruned = set(plan.prune)
    for f in survey.files:
        if f.kind not in ("transcript", "snapshot", "request_dump"):
            continue
        action = None
        if f.symlink:
            plan.kept_files.append(
                FileAction(str(f.path), f.kind, f.size, "symlink: never followed or removed", f.session_id)
            )
            continue
        if f.session_id in pruned:
            action = "session pruned"
        elif f.orphan and now - f.mtime > policy.files_max_age_s:
            action = f"orphan older than {_days(policy.files_max_age_s)}"
        elif f.kind == "request_dump" and now - f.mtime > policy.files_max_age_s:
            action = f"request dump older than {_days(policy.files_max_age_s)}"
        if action:
            plan.files.append(FileAction(str(f.path), f.kind, f.size, action, f.session_id))
    plan.remaining_sessions = len(sessions) - len(pruned)
    plan.remaining_messages = survey.message_total - sum(sessions[s].messages for s in pruned)
    return plan


def _decision(r: SessionRow, action: str, reason: str, unit: str, ratio: float) -> Decision:
    return Decision(r.id, r.source, action, reason, unit, r.messages, int(r.content_bytes * ratio))


def _days(seconds: float) -> str:
    if seconds >= 86400:
        return f"{seconds / 86400:.0f}d"
    return f"{seconds / 3600:.0f}h"
