"""The executor: applies a plan in small, journaled, crash-safe steps while Hermes runs.

Backup, then (through one :class:`Writer`) finish what a crash interrupted, close zombies,
prune (:mod:`prune`: archive and verify first, delete in budgeted transactions), then
remove stale files and compact.
"""

from __future__ import annotations

import os
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from hermes_keeper.backup.compact import compact
from hermes_keeper.backup.snapshot import apply_rotation, backup_dir, take_backup
from hermes_keeper.errors import TryLater
from hermes_keeper.fs import is_inside
from hermes_keeper.home import Profile
from hermes_keeper.journal import Journal
from hermes_keeper.run.plan import ZOMBIE_END_REASON, FileAction, Plan
from hermes_keeper.run.policy import Policy
from hermes_keeper.run.prune import Progress, PruneResult, prune_sessions, resume_pending
from hermes_keeper.sqlite.connect import connect_ro
from hermes_keeper.sqlite.fts import MergeHold
from hermes_keeper.sqlite.schema import SchemaInfo, inspect
from hermes_keeper.sqlite.writer import Writer

#: Free pages in the file worth a word in the summary.
RECLAIMABLE_NOTE_BYTES = 1_000_000
RECLAIM_HOW = "free pages: `hermes-keeper compact --wait-idle` gives them back once Hermes stops"


@dataclass
class RunResult:
    profile: str
    zombies_closed: int = 0
    prune: PruneResult = field(default_factory=PruneResult)
    resumed: int = 0
    files_removed: int = 0
    file_bytes: int = 0
    db_bytes_before: int = 0  # pages in use (the file's pages minus its freelist)
    db_bytes_after: int = 0
    file_bytes_before: int = 0  # the database file's pages: what the disk holds
    file_bytes_after: int = 0
    reclaimable_bytes: int = 0  # free pages left in the file after the run
    remaining_sessions: int = 0
    remaining_messages: int = 0
    writer: dict = field(default_factory=dict)
    backup: str | None = None
    compact: dict | None = None

    @property
    def freed_bytes(self) -> int:
        """Bytes given back to the disk: the file's shrink and the files removed. Pages freed
        inside state.db are not: they stay in the file until a vacuum (``reclaimable_bytes``)."""
        return max(0, self.file_bytes_before - self.file_bytes_after) + self.file_bytes

    def summary(self) -> str:
        text = (
            f"{self.profile}: zombies={self.zombies_closed} pruned={len(self.prune.pruned)} "
            f"archived={len(self.prune.archived)} files={self.files_removed} "
            f"freed={self.freed_bytes / 1e6:.0f}MB "
            f"remaining={self.remaining_sessions} sessions, {self.remaining_messages} messages"
        )
        if self.reclaimable_bytes >= RECLAIMABLE_NOTE_BYTES:
            text += f"; reclaimable={self.reclaimable_bytes / 1e6:.0f}MB still in state.db ({RECLAIM_HOW})"
        return text

    def to_dict(self) -> dict:
        return {
            "profile": self.profile,
            "zombies_closed": self.zombies_closed,
            "resumed": self.resumed,
            "pruned": len(self.prune.pruned),
            "archived": len(self.prune.archived),
            "skipped": self.prune.skipped,
            "messages_deleted": self.prune.messages_deleted,
            "files_removed": self.files_removed,
            "file_bytes": self.file_bytes,
            "db_bytes_before": self.db_bytes_before,
            "db_bytes_after": self.db_bytes_after,
            "file_bytes_before": self.file_bytes_before,
            "file_bytes_after": self.file_bytes_after,
            "freed_bytes": self.freed_bytes,
            "reclaimable_bytes": self.reclaimable_bytes,
            "remaining": {"sessions": self.remaining_sessions, "messages": self.remaining_messages},
            "writer": self.writer,
            "backup": self.backup,
            "compact": self.compact,
            "summary": self.summary(),
        }


def writer_figures(w: Writer, hold: MergeHold) -> dict:
    """The run's lock use, for ``--json`` and the journal: where its time went and what it waited."""
    s = w.stats
    return {
        "transactions": s.transactions,
        "max_txn_ms": round(s.max_txn_ms, 1),
        "lock_ms": round(s.total_txn_ms, 1),
        "over_budget": s.over_budget,
        "checkpoints": s.checkpoints,
        "pause_ms": round(s.pause_ms, 1),
        "busy_retries": s.busy_retries,
        "busy_wait_ms": round(s.busy_wait_ms, 1),
        "max_busy_wait_ms": round(s.max_busy_wait_ms, 1),
        "fts_merge_steps": hold.merge_steps,
        "fts_merge_ms": round(hold.merge_ms, 1),
        "fts_max_step_ms": round(hold.max_step_ms, 1),
    }


def close_zombies(plan: Plan, writer: Writer, journal: Journal | None) -> int:
    """``ended_at`` = last activity, ``end_reason = keeper_zombie``; skipped if the session woke up."""
    closed = 0
    todo = list(plan.zombies)
    while todo:
        chunk, todo = todo[:200], todo[200:]

        def upd(c, chunk=chunk):
            n = 0
            for z in chunk:
                cur = c.execute(
                    "UPDATE sessions SET ended_at = ?, end_reason = ? WHERE id = ? AND ended_at IS NULL"
                    " AND NOT EXISTS (SELECT 1 FROM messages WHERE session_id = ? AND timestamp > ?)",
                    (z.ended_at, ZOMBIE_END_REASON, z.session_id, z.session_id, z.ended_at),
                )
                n += cur.rowcount
            return n

        closed += writer.step(upd)
    if journal and plan.zombies:
        journal.write(
            "zombies_closed",
            closed=closed,
            planned=len(plan.zombies),
            sessions=[z.session_id for z in plan.zombies],
        )
    return closed


def remove_files(profile: Profile, files: list[FileAction], journal: Journal | None) -> tuple[int, int]:
    """Delete these planned files, only inside ``sessions/``, never through a symlink."""
    removed = size = 0
    base = profile.sessions_dir
    for f in files:
        path = Path(f.path)
        if path.is_symlink() or not is_inside(path, base):
            continue
        try:
            st = path.lstat()
            os.unlink(path)
        except FileNotFoundError:
            continue
        removed += 1
        size += st.st_size
        if journal:
            journal.write(
                "file_removed",
                durable=False,
                path=str(path.relative_to(profile.home)),
                bytes=st.st_size,
                reason=f.reason,
            )
    if journal:
        journal.sync()
    return removed, size


def apply_plan(
    profile: Profile,
    plan: Plan,
    *,
    policy: Policy,
    journal: Journal | None,
    progress: Progress | None = None,
    schema: SchemaInfo | None = None,
) -> RunResult:
    """Backup, resume, close zombies, archive+prune, remove files, compact. The caller holds the lock.

    A run that will delete takes a backup first; if that fails nothing is changed.
    ``schema``: the :func:`inspect` the plan was made from, so state.db is not scanned twice.
    """
    schema = schema or inspect(profile.db_path)
    schema.require_actionable()
    res = RunResult(profile.name, db_bytes_before=schema.used_bytes, file_bytes_before=schema.db_bytes)
    if policy.backup and plan.prune:
        res.backup = take_backup(profile, journal=journal).name
        apply_rotation(backup_dir(profile), profile.home, journal=journal)  # or backups pile up
    # Files go on a thread of their own: orphans now, a pruned session's as soon as it is gone
    # (never those of a session that woke up and was put back).
    pruning = set(plan.prune)
    by_session: dict[str | None, list[FileAction]] = {}
    for f in plan.files:
        by_session.setdefault(f.session_id if f.session_id in pruning else None, []).append(f)
    removals: list[Future] = []
    # NORMAL: every change of a run can be redone (deleted rows sit verified in the archive).
    w = Writer(
        profile.db_path,
        budget_ms=policy.budget_ms,
        pause_ms=policy.pause_ms,
        synchronous="NORMAL",
        busy_wait_s=policy.busy_wait_s,
    )
    hold = MergeHold(w, schema, profile.keeper_dir, journal)
    try:
        with ThreadPoolExecutor(1, thread_name_prefix="keeper-files") as files, w, hold:

            def remove(group: list[FileAction]) -> None:
                if group:
                    removals.append(files.submit(remove_files, profile, group, journal))

            remove(by_session.pop(None, []))
            res.resumed = resume_pending(profile, schema, w, journal, hold) if policy.archive else 0
            res.zombies_closed = close_zombies(plan, w, journal)
            counts = {sid: plan.decisions[sid].messages for sid in plan.prune}
            res.prune = prune_sessions(
                profile,
                plan.prune,
                archive=policy.archive,
                journal=journal,
                message_counts=counts,
                progress=progress,
                writer=w,
                schema=schema,
                hold=hold,
                on_pruned=lambda ids: remove([f for sid in ids for f in by_session.get(sid, [])]),
            )
    except TryLater as exc:
        if journal:
            journal.write("stopped", reason=str(exc), writer=writer_figures(w, hold))
        raise
    for r in removals:
        n, size = r.result()
        res.files_removed += n
        res.file_bytes += size
    res.writer = writer_figures(w, hold)
    if policy.compact and res.prune.pruned:
        res.compact = compact(
            profile,
            budget_ms=policy.budget_ms,
            pause_ms=policy.pause_ms,
            busy_wait_s=policy.busy_wait_s,
            backup=False,
            journal=journal,
        ).to_dict()
    after = inspect(profile.db_path, check_timestamps=False)
    res.db_bytes_after = after.used_bytes
    res.file_bytes_after, res.reclaimable_bytes = after.db_bytes, after.free_bytes
    conn = connect_ro(profile.db_path)
    try:
        res.remaining_sessions = conn.execute("SELECT count(*) FROM sessions").fetchone()[0]
        res.remaining_messages = conn.execute("SELECT count(*) FROM messages").fetchone()[0]
    finally:
        conn.close()
    if journal:
        journal.write("summary", **{k: v for k, v in res.to_dict().items() if k != "skipped"})
    return res
