"""The plan: a pure function of (survey, policy, now). No database, no clock, no files.

Sessions are decided as whole conversations (:mod:`conversations`: a compression chain
with its delegate and untagged subagents is one, a branch is its own). One is pruned only when
every member is old enough for its source's retention, measured from the newest
activity anywhere in the unit, and no member is protected. When unsure, keep. Each decision
carries its :class:`~hermes_keeper.run.reasons.Reason`, made where it is decided.

The plan also says what makes the run's changes undoable (:func:`safeguard`): a snapshot
first, or, where a snapshot would stall Hermes, the verified archive and the journal.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field, fields, replace
from typing import NamedTuple

from hermes_keeper import units
from hermes_keeper.archive.retention import RetentionPlan
from hermes_keeper.model.conversations import Conversations, continues, conversations, lineage_root
from hermes_keeper.model.policy import MESSAGING_SOURCES, Policy
from hermes_keeper.run import reasons as why
from hermes_keeper.run.files import SYMLINK, FileAction, NotInStateDb, plan_folders, retired_wal_warning
from hermes_keeper.run.reasons import Reason, days
from hermes_keeper.run.survey import LIVE_HANDOFF_STATES, SessionRow, Survey
from hermes_keeper.sqlite.holders import Holder
from hermes_keeper.sqlite.walreset import wal_guard

#: The ``end_reason`` a zombie close writes: one of Hermes's automatic-cleanup stamps
#: (``_AUTOMATIC_END_REASONS``, ``is_automatic_end_reason`` in hermes_state_common.py), so a process
#: that was alive after all clears it at its next compression instead of failing with "Compression
#: parent already ended". ``idle_timeout`` is the one that says what happened (the TUI gateway's
#: reaper closes idle sessions with it) and that is neither recoverable (those make a keyed gateway
#: row resumable by stale-route recovery, which the keeper then keeps forever) nor a conversation
#: boundary (the reset reasons fence recovery and split conversations). The keeper's own mark is the
#: journal's ``zombies_closed`` line.
ZOMBIE_END_REASON = "idle_timeout"
#: Activity later than this past the plan's clock is a wrong date (clock skew, a bad import).
FUTURE_SLACK_S = 3600.0


def _live(expires_at: float | None, holder_dead: bool, now: float) -> bool:
    """Upstream's ``_stale_holder`` negated: not expired, and its holder not provably dead."""
    return expires_at is not None and expires_at > now and not holder_dead


#: What undoes a run's changes (:class:`Safeguard`): a snapshot taken before the first change; the
#: verified archive of every pruned session plus the journaled previous values of every zombie
#: close; nothing (the policy opted out, or nothing is deleted); or nothing safe: refuse.
SNAPSHOT, ARCHIVE, NONE, REFUSE = "snapshot", "archive", "none", "refuse"


def in_use(s: SessionRow, now: float) -> list[Reason]:
    """Signs that Hermes (gateway, compressor, turn, handoff, delegation) still relies on ``s``, or
    that the row is not one the keeper can address exactly."""
    checks = (
        (s.odd_id, why.ODD_ID),  # not Hermes's own: leave it as it is
        (s.nul_id, why.NUL_ID),  # likewise
        (s.routed, why.ROUTED),
        (s.maybe_routed, why.ROUTING_UNKNOWN),
        (s.gateway_recoverable, why.GATEWAY_RECOVERABLE),
        (_live(s.lease_expires_at, s.lease_holder_dead, now), why.COMPRESSION_LEASE),
        (_live(s.turn_lease_expires_at, s.turn_lease_holder_dead, now), why.TURN_LEASE),
        (s.runtime_lease, why.CHAT_SURFACE),
        (s.handoff_state in LIVE_HANDOFF_STATES, why.HANDOFF),
        (s.topic_bound, why.TOPIC_BINDING),
        (s.pending_delegation, why.PENDING_DELEGATION),
        (s.live_schedule, why.SCHEDULE),
    )
    return [reason for hit, reason in checks if hit]


def protections(s: SessionRow, policy: Policy, now: float) -> list[Reason]:
    """Why ``s`` must not be pruned regardless of its age (empty: age decides)."""
    reasons = []
    if s.is_open:
        reasons.append(why.OPEN if now - s.last_activity >= policy.zombie_after_s else why.OPEN_ACTIVE)
    reasons += in_use(s, now)
    if s.last_activity > now + FUTURE_SLACK_S:
        reasons.append(why.FUTURE)
    if s.pinned:
        reasons.append(why.PINNED)
    if s.restored_until is not None and s.restored_until > now:
        reasons.append(why.restored(s.restored_until - now))
    if s.title and policy.keep_titled:
        reasons.append(why.TITLED)
    return reasons


def pinned_tails(survey: Survey) -> set[str]:
    """Unpinned compression continuations of a pinned session (upstream's ``_PINNED_TAIL_SQL``):
    a pin covers the whole conversation."""
    sessions = survey.sessions
    tails: set[str] = set()
    for s in sessions.values():
        seen, current = {s.id}, s
        while current.parent_id in sessions and current.parent_id not in seen:
            parent = sessions[current.parent_id]
            if not continues(current, parent):
                break
            if parent.pinned:
                tails.add(s.id)
                break
            seen.add(parent.id)
            current = parent
    return tails


def heartbeat_owned(s: SessionRow, survey: Survey, now: float, staleness_s: float) -> bool:
    """A live gateway backend could own ``s`` (upstream's ``sweep_orphaned_sessions`` gate): a
    heartbeat within ``staleness_s`` from a backend started no later than ``staleness_s`` after ``s``."""
    return any(
        last >= now - staleness_s and started <= s.started_at + staleness_s
        for started, last in survey.heartbeats
    )


def zombie_blockers(
    s: SessionRow, survey: Survey, policy: Policy, now: float, tails: set[str]
) -> list[Reason]:
    """Why an idle open session must not be closed (Hermes may still write to it, or keeps it)."""
    reasons = in_use(s, now) + unreadable(survey)
    if s.source in MESSAGING_SOURCES and s.session_key:
        reasons.append(why.GATEWAY_KEY)
    if s.pinned or s.id in tails:
        reasons.append(why.PINNED if s.pinned else why.PINNED_CHAIN)
    # Upstream's default staleness: twice the idle time after which it would reap the row.
    if heartbeat_owned(s, survey, now, 2 * policy.zombie_after_s):
        reasons.append(why.HEARTBEAT)
    return reasons


def hermes_auto_prunes(s: SessionRow, survey: Survey, now: float, tails: set[str]) -> bool:
    """Hermes's own auto-prune would delete ``s`` (upstream's ``prune_sessions(...,
    exclude_active_write_guards=True)``): ended, idle past its retention, not pinned or in a pinned
    chain, no live turn lease or compression lock. It knows none of the keeper's other protections."""
    ap = survey.auto_prune
    return (
        ap is not None
        and ap.enabled
        and not s.is_open
        and now - s.last_activity > ap.retention_s
        and not (s.pinned or s.id in tails)
        and not _live(s.lease_expires_at, s.lease_holder_dead, now)
        and not _live(s.turn_lease_expires_at, s.turn_lease_holder_dead, now)
    )


def unreadable(survey: Survey) -> list[Reason]:
    """A protection that exists but could not be read keeps everything (when unsure, keep)."""
    return [why.protection_unreadable(what) for what in survey.unreadable]


@dataclass(frozen=True)
class Decision:
    session_id: str
    source: str
    action: str  # prune | keep
    reason: Reason  # made where the plan decided (run/reasons.py)
    unit: str
    messages: int
    est_bytes: int

    def to_dict(self) -> dict:
        """The ``--json -v`` row: the reason's words as ``reason``, its code beside them."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        return out | {"reason": self.reason.text, "code": self.reason.code}


@dataclass(frozen=True)
class ZombieClose:
    session_id: str
    source: str
    ended_at: float
    idle_s: float
    lease_key: str = ""  # the lineage root its turn lease would be keyed by
    end_reason: str | None = None  # before the close (ended_at was NULL): journaled, and the close's guard


@dataclass(frozen=True)
class Safeguard:
    kind: str  # SNAPSHOT | ARCHIVE | NONE | REFUSE
    why: str  # the one line the plan shows


NOTHING_DELETED = Safeguard(NONE, "nothing is deleted: no snapshot needed")


def safeguard(policy: Policy, journal_mode: str | None, holders: list[Holder], deletes: bool) -> Safeguard:
    """What makes this run undoable.

    A snapshot is ``VACUUM INTO``: one read transaction for the whole copy. In WAL mode Hermes
    writes on meanwhile; in a rollback-journal mode (newer Hermes on SQLite builds with the
    WAL-reset bug) that read lock blocks every commit until the copy ends, so while a process
    holds such a database the archive stands in: every pruned session is in it, verified, before
    its delete, and zombie closes are journaled with their previous values before they happen.
    """
    if not deletes:
        return NOTHING_DELETED
    blocking = journal_mode != "wal" and holders
    if policy.backup and not blocking:
        return Safeguard(SNAPSHOT, "a verified snapshot of state.db before the first change")
    held = (
        f"state.db is in {journal_mode} journal mode and open by {'; '.join(h.describe() for h in holders)}, "
        "where a snapshot would block its writes for the whole copy"
        if blocking
        else "backup = false"
    )
    if policy.archive:
        return Safeguard(
            ARCHIVE,
            f"no snapshot ({held}): every pruned session is archived and verified before it is deleted, "
            "and zombie closes are journaled with their previous values",
        )
    if policy.backup:
        return Safeguard(
            REFUSE,
            f"{held}, and without the archive nothing would undo the deletes; run with the archive, "
            "or while Hermes is stopped",
        )
    return Safeguard(NONE, "no snapshot and no archive (backup = false, --no-archive): deletes are final")


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
    #: transcripts kept as the only copy of their messages (set by :func:`transcripts.hold_only_copies`)
    not_in_state_db: NotInStateDb = field(default_factory=NotInStateDb)
    db_bytes: int = 0
    #: Hermes's own auto-prune settings and the sessions it will delete that this plan keeps
    hermes_auto_prune: dict | None = None
    hermes_deletes_kept: list[str] = field(default_factory=list)
    est_freed_bytes: int = 0
    compact: str = ""  # how the run's compact step gives the freed pages back ("": it does not run)
    remaining_sessions: int = 0
    remaining_messages: int = 0
    warnings: list[str] = field(default_factory=list)  # what the plan could not know
    archive_retention: RetentionPlan | None = None  # [archive] keep / max_bytes, when set
    archive: bool = True  # the policy's: False (``--no-archive``) makes every delete final

    def prune_conversations(self) -> list[list[str]]:
        """:attr:`prune` cut into its conversations: the sets prune deletes (or puts back) whole."""
        out: dict[str, list[str]] = {}
        for sid in self.prune:
            out.setdefault(self.decisions[sid].unit, []).append(sid)
        return list(out.values())

    safeguard: Safeguard = NOTHING_DELETED

    @property
    def nothing_to_do(self) -> bool:
        return not (self.zombies or self.prune or self.files)

    def steps(self) -> list[str]:
        """What a run does, in order (the executor's order), each step only when it has work."""
        out = []
        if self.prune and self.safeguard.kind == SNAPSHOT:
            out.append("backup: a verified snapshot of state.db")
        if self.zombies:
            out.append(f"close {units.plural(len(self.zombies), 'zombie session')}")
        if self.prune:
            how = "archive and verify, then delete" if self.archive else "delete with NO archive (final)"
            out.append(f"prune {units.plural(len(self.prune), 'session')}: {how}, in short transactions")
        if self.files:
            out.append(f"remove {units.plural(len(self.files), 'file')}")
        if self.compact:
            out.append(f"compact: {self.compact}")
        return out

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

    def files_by_kind(self) -> dict[str, dict]:
        """Per kind of file: how many the run removes (and their bytes), how many are kept from it."""
        out: dict[str, Counter] = defaultdict(Counter)
        for f in self.files:
            out[f.kind].update(remove=1, bytes=f.bytes)
        for f in self.kept_files:
            out[f.kind].update(kept=1)
        return {
            k: {"remove": c["remove"], "bytes": c["bytes"], "kept": c["kept"]} for k, c in sorted(out.items())
        }

    def keep_reasons(self) -> list[dict]:
        """Why sessions are kept, most common first: the code, the words, how many sessions."""
        kept = [d.reason for d in self.decisions.values() if d.action == "keep"]
        counts = Counter((r.code, r.text) for r in kept)
        return [{"code": c, "reason": r, "sessions": n} for (c, r), n in counts.most_common()]

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
            "files": {
                "remove": len(self.files),
                "bytes": sum(f.bytes for f in self.files),
                "kept": len(self.kept_files),  # symlinks, and files a safety keeps from their rule
                "by_kind": self.files_by_kind(),
                "not_in_state_db": self.not_in_state_db.to_dict(),
            },
            "by_source": self.by_source(),
            "keep_reasons": self.keep_reasons(),
            "db_bytes": self.db_bytes,
            "compact": self.compact,
            "remaining": {"sessions": self.remaining_sessions, "messages": self.remaining_messages},
            "hermes_auto_prune": self.hermes_auto_prune
            and {**self.hermes_auto_prune, "deletes_kept": len(self.hermes_deletes_kept)},
            "warnings": self.warnings,
            "safeguard": asdict(self.safeguard),
            "archive_retention": self.archive_retention and self.archive_retention.to_dict(verbose),
            "archive": self.archive,
            "steps": self.steps(),
        }
        if verbose:
            out["decisions"] = [self.decisions[k].to_dict() for k in sorted(self.decisions)]
            out["file_actions"] = [asdict(f) for f in self.files]
            out["hermes_deletes_kept"] = self.hermes_deletes_kept
            out["kept_files"] = [asdict(f) for f in self.kept_files]
        return out


def _bytes_per_content_byte(survey: Survey, db_bytes: int) -> float:
    """The database's bytes (FTS and indexes included) per byte of message text."""
    content = sum(s.content_bytes for s in survey.sessions.values())
    return db_bytes / content if content else 0.0


def _first_row(members: list[str], survey: Survey) -> int:
    """The unit's oldest message id (0 for a unit without messages)."""
    ids = [survey.sessions[m].first_message_id for m in members]
    return min((i for i in ids if i is not None), default=0)


def compact_step(auto_vacuum: str | None, live_bytes: int, stall_limit_s: float) -> str:
    """The run's compact step, announced: a full VACUUM stalls Hermes's writes while it runs."""
    if auto_vacuum == "incremental":
        return "incremental vacuum in budgeted steps"
    return (
        f"one-time VACUUM to incremental auto-vacuum (~{units.size(live_bytes)} to copy): with Hermes"
        f" stopped, or beside it if its measured stall estimate is at most {units.duration(stall_limit_s)}"
        " (a one-time wait of Hermes's writes, at a quiet moment if one comes); otherwise the"
        " freed pages stay in state.db, reclaimable"
    )


class _Unit(NamedTuple):
    """A conversation the plan prunes whole: its newest activity, its root, its members."""

    last: float
    root: str
    members: list[str]


def make_plan(survey: Survey, policy: Policy, now: float, db_bytes: int | None = None) -> Plan:
    """What a run would do with ``survey``'s home under ``policy`` at ``now`` (``db_bytes``: the
    database's size, when not the survey's), and why. Each step is its own function; they run in
    the order a later one needs an earlier one's answer."""
    db_bytes = survey.schema.db_bytes if db_bytes is None else db_bytes
    plan = Plan(profile=survey.profile.name, now=now, db_bytes=db_bytes, archive=policy.archive)
    ratio = _bytes_per_content_byte(survey, db_bytes)
    tails = pinned_tails(survey)
    plan.zombies = _zombie_closes(survey, policy, now, tails)
    convs = conversations(survey.sessions.values())
    chosen = _decide_by_age(plan, convs, survey, policy, ratio)
    chosen += _decide_by_budget(plan, convs, survey, policy, ratio, _freed(plan, chosen))
    plan.prune = _prune_order(chosen, convs, survey)
    plan.est_freed_bytes = _freed(plan, chosen)
    if policy.compact and plan.prune:
        live = db_bytes - plan.est_freed_bytes
        plan.compact = compact_step(survey.schema.auto_vacuum, live, policy.live_vacuum_stall_s)
    pruned = set(plan.prune)
    if survey.auto_prune is not None:
        plan.hermes_auto_prune = {**survey.auto_prune.to_dict(), "next_run": survey.auto_prune.next_run(now)}
        plan.hermes_deletes_kept = _hermes_deletes_kept(plan, survey, tails)
    plan.files, plan.kept_files = _file_actions(survey, policy, pruned, now)
    plan.warnings = _warnings(survey, now)
    plan.safeguard = safeguard(policy, survey.schema.journal_mode, survey.holders, bool(plan.prune))
    plan.remaining_sessions = len(survey.sessions) - len(pruned)
    plan.remaining_messages = survey.message_total - sum(survey.sessions[s].messages for s in pruned)
    return plan


def _zombie_closes(survey: Survey, policy: Policy, now: float, tails: set[str]) -> list[ZombieClose]:
    """Open sessions idle for ``zombie_after`` that nothing blocks (:func:`zombie_blockers`), by id:
    each is ended at its last activity, so closing it does not make it younger."""
    sessions = survey.sessions
    out = []
    for s in sessions.values():
        idle = now - s.last_activity
        if s.is_open and idle >= policy.zombie_after_s and not zombie_blockers(s, survey, policy, now, tails):
            ended = max(t for t in (s.started_at, s.last_message_at, s.last_activity_at) if t is not None)
            out.append(ZombieClose(s.id, s.source, ended, idle, lineage_root(s.id, sessions), s.end_reason))
    return sorted(out, key=lambda z: z.session_id)


def _decide_by_age(
    plan: Plan, convs: Conversations, survey: Survey, policy: Policy, ratio: float
) -> list[_Unit]:
    """A decision for every session, conversation by conversation (a unit is kept or pruned whole):
    kept while a member is protected or the unit is within its members' longest retention, else
    pruned by retention. Returns the units pruned."""
    chosen = []
    for root, members in convs.members.items():
        rows = [survey.sessions[m] for m in members]
        last = max(r.last_activity for r in rows)
        age = plan.now - last
        kept = _protected(rows, survey, policy, plan.now) or _within_retention(rows, policy, age)
        for r in rows:
            reason = kept[r.id] if kept else why.retention(age, policy.retention_for(r.source), r.source)
            plan.decisions[r.id] = _decision(r, "keep" if kept else "prune", reason, root, ratio)
        if not kept:
            chosen.append(_Unit(last, root, members))
    return chosen


def _protected(rows: list[SessionRow], survey: Survey, policy: Policy, now: float) -> dict[str, Reason]:
    """A unit with a protected member is kept whatever its age: that member for its first reason,
    the others for that member (empty: no member is protected, age decides)."""
    first = next(((r.id, p) for r in rows for p in unreadable(survey) + protections(r, policy, now)), None)
    if first is None:
        return {}
    sid, own = first
    member = own if len(rows) == 1 else why.conversation_member(sid, own)
    return {r.id: own if r.id == sid else member for r in rows}


def _within_retention(rows: list[SessionRow], policy: Policy, age: float) -> dict[str, Reason]:
    """A unit no older than the longest retention of its members' sources is kept: a member within
    its own retention says so, one past it (a subagent's 7d) is kept with its conversation (empty:
    the unit is old enough to prune)."""
    needed, longest = max((policy.retention_for(r.source), r.source) for r in rows)
    if age > needed:
        return {}
    own = {r.id: policy.retention_for(r.source) for r in rows}
    return {
        r.id: why.within_retention(own[r.id], r.source)
        if age <= own[r.id]
        else why.parent_kept(needed, longest)
        for r in rows
    }


def _decide_by_budget(
    plan: Plan, convs: Conversations, survey: Survey, policy: Policy, ratio: float, freed: int
) -> list[_Unit]:
    """Over ``disk.max_db_bytes`` after ``freed``, the oldest units no protection holds are pruned
    too, until the database is under the budget's low-water mark (so the next run has room).
    Returns the units it adds."""
    if policy.max_db_bytes is None or plan.db_bytes - freed <= policy.max_db_bytes:
        return []
    target = policy.max_db_bytes * policy.low_water
    chosen = []
    for unit in sorted(_budget_eligible(plan, convs, survey, policy)):
        if plan.db_bytes - freed <= target:
            break
        for m in unit.members:
            reason = why.disk_budget(plan.now - unit.last)
            plan.decisions[m] = _decision(survey.sessions[m], "prune", reason, unit.root, ratio)
            freed += plan.decisions[m].est_bytes
        chosen.append(unit)
    return chosen


def _budget_eligible(plan: Plan, convs: Conversations, survey: Survey, policy: Policy) -> list[_Unit]:
    """The units only their age keeps: not pruned already, no member protected, every protection
    readable (a budget never overrides a protection)."""
    if unreadable(survey):
        return []
    out = []
    for root, members in convs.members.items():
        if any(plan.decisions[m].action == "prune" for m in members):
            continue
        rows = [survey.sessions[m] for m in members]
        if any(protections(r, policy, plan.now) for r in rows):
            continue
        out.append(_Unit(max(r.last_activity for r in rows), root, members))
    return out


def _freed(plan: Plan, chosen: list[_Unit]) -> int:
    """The bytes pruning ``chosen`` gives back (estimated: its share of the database)."""
    return sum(plan.decisions[m].est_bytes for unit in chosen for m in unit.members)


def _prune_order(chosen: list[_Unit], convs: Conversations, survey: Survey) -> list[str]:
    """The sessions to prune, unit by unit in the order their messages were written (so each delete
    transaction's rows sit together in the b-trees and FTS segments), children before parents."""
    order = sorted((_first_row(unit.members, survey), unit.root) for unit in chosen)
    return [sid for _, root in order for sid in convs.children_first(root)]


def _hermes_deletes_kept(plan: Plan, survey: Survey, tails: set[str]) -> list[str]:
    """The sessions Hermes's own auto-prune will delete that this plan keeps (the plan says so, as
    it cannot stop it). A zombie this run closes is ended at its last activity: Hermes ages it
    from there."""
    sessions, pruned = survey.sessions, set(plan.prune)
    after_run = {z.session_id: replace(sessions[z.session_id], ended_at=z.ended_at) for z in plan.zombies}
    return sorted(
        sid
        for sid, s in sessions.items()
        if sid not in pruned and hermes_auto_prunes(after_run.get(sid, s), survey, plan.now, tails)
    )


def _file_actions(
    survey: Survey, policy: Policy, pruned: set[str], now: float
) -> tuple[list[FileAction], list[FileAction]]:
    """The files to remove and the files kept from their rule. A pruned session's transcripts,
    snapshots and request dumps go with it; orphans and request dumps older than ``files_max_age``
    go too; then the folders' own rules (:func:`plan_folders`). A file reached through a symlink is
    kept: removing it would reach outside what the keeper owns. A ``.jsonl`` transcript removed
    here may be the only copy of messages Hermes diverted from a replaced state.db: the caller has
    :func:`transcripts.hold_only_copies` read it and keep it unless they are all stored."""
    removes, kept = [], []
    too_old = days(policy.files_max_age_s)
    for f in survey.files:
        if f.kind not in ("transcript", "snapshot", "request_dump"):
            continue
        action = None
        if f.symlink:
            kept.append(FileAction(str(f.path), f.kind, f.size, SYMLINK, f.session_id))
            continue
        if f.session_id in pruned:
            action = "session pruned"
        elif f.orphan and now - f.mtime > policy.files_max_age_s:
            action = f"orphan older than {too_old}"
        elif f.kind == "request_dump" and now - f.mtime > policy.files_max_age_s:
            action = f"request dump older than {too_old}"
        if action:
            removes.append(FileAction(str(f.path), f.kind, f.size, action, f.session_id))
    folder_removes, folder_kept = plan_folders(survey.folders, policy, survey.profile.home, now)
    return removes + folder_removes, kept + folder_kept


def _warnings(survey: Survey, now: float) -> list[str]:
    """What the plan could not know, and so kept: sessions the gateway might route to while its
    routing is unreadable, sessions whose age is unknown as they are dated in the future; and
    Hermes's retired WAL generations, which need a person (never removed)."""
    out = []
    if survey.routing_problem:
        out.append(
            f"{survey.routing_problem}: routing unknown, every session the gateway could route to is kept"
        )
    future = sum(1 for s in survey.sessions.values() if s.last_activity > now + FUTURE_SLACK_S)
    if future:
        out.append(f"{units.plural(future, 'session')} dated in the future: kept, their age is unknown")
    if (retired := retired_wal_warning(survey.folders)) is not None:
        out.append(retired)
    guard = wal_guard(survey.profile.db_path, survey.schema.journal_mode, survey.holders)
    if guard.hands_off:  # what a run does differently here (sqlite/walreset.py)
        out.append(guard.note())
    return out


def _decision(r: SessionRow, action: str, reason: Reason, unit: str, ratio: float) -> Decision:
    return Decision(r.id, r.source, action, reason, unit, r.messages, int(r.content_bytes * ratio))
