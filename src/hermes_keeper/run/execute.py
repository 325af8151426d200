"""The executor: applies a plan in small, journaled, crash-safe steps while Hermes runs.

The plan's safeguard first (a backup, or the refusal the plan stated), then (through one
:class:`Writer`) finish what a crash interrupted, close zombies, prune (:mod:`prune`:
archive and verify first, delete in budgeted transactions), then remove stale files and
compact.
"""

from __future__ import annotations

import signal
import sqlite3
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from hermes_keeper import units
from hermes_keeper.archive.query import refresh_index
from hermes_keeper.archive.retention import apply_retention
from hermes_keeper.archive.store import Archive, archive_exists
from hermes_keeper.backup.snapshot import apply_rotation, backup_dir, keeper_bytes, take_backup
from hermes_keeper.errors import KeeperError, TryLater
from hermes_keeper.interrupt import Interrupted
from hermes_keeper.journal import Journal
from hermes_keeper.model.policy import Policy
from hermes_keeper.place import Place
from hermes_keeper.run.compact import compact_run
from hermes_keeper.run.context import RunContext
from hermes_keeper.run.files import KINDS, remove
from hermes_keeper.run.plan import REFUSE, SNAPSHOT, ZOMBIE_END_REASON, FileAction, Plan
from hermes_keeper.run.prune import Planned, Progress, PruneResult, prune_sessions, resume_pending
from hermes_keeper.sqlite.connect import connect_ro
from hermes_keeper.sqlite.fts import MergeHold
from hermes_keeper.sqlite.holders import live_guards, refuse_during_maintenance
from hermes_keeper.sqlite.schema import SchemaInfo
from hermes_keeper.sqlite.writer import Writer

#: Free pages in the file worth a word in the summary.
RECLAIMABLE_NOTE_BYTES = 1_000_000
RECLAIM_HOW = (
    "free pages: `hermes-keeper compact --wait-idle` gives them back once Hermes stops, or beside it"
    " a larger `live_vacuum_stall` in keeper.toml (the compact note says the stall it needs)"
)


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
    file_bytes_before: int = 0  # state.db's pages and its WAL: what the disk holds
    file_bytes_after: int = 0
    reclaimable_bytes: int = 0  # free pages left in the file after the run
    remaining_sessions: int = 0
    remaining_messages: int = 0
    writer: dict = field(default_factory=dict)
    backup: str | None = None
    safeguard: str = ""
    compact: dict | None = None
    seconds: float = 0.0  # the whole run, lock wait included (set by Profile.run)
    archive_retention: dict | None = None  # what [archive] keep / max_bytes dropped
    interrupted: str = ""  # the signal that stopped the run between two steps ("SIGINT")
    keeper_bytes_before: int = 0  # keeper/ (backups, archive, history, journal): the keeper's own share
    keeper_bytes_after: int = 0
    offsite: dict | None = None  # the push to [offsite] (offsite.copies.PushResult), or its "error"

    @property
    def freed_bytes(self) -> int:
        """Bytes given back to the disk: the shrink of state.db and its WAL, and the files removed.
        Pages freed inside state.db are not: they stay in the file until a vacuum
        (``reclaimable_bytes``); nor is a WAL Hermes left at its high-water mark."""
        return max(0, self.file_bytes_before - self.file_bytes_after) + self.file_bytes

    @property
    def net_freed_bytes(self) -> int:
        """What the home got back: what Hermes's files lost less what ``keeper/`` gained (the run's
        backup, the archive's new entries); negative when the home grew."""
        return self.freed_bytes - (self.keeper_bytes_after - self.keeper_bytes_before)

    def summary(self) -> str:
        """One line; "freed" only for bytes the disk got back, pages still in the file are "reclaimable".
        It says what it finished of an interrupted run's work, and that it was interrupted itself."""
        stopped = f"interrupted ({self.interrupted}), settings put back; " if self.interrupted else ""
        resumed = (
            f"resumed {units.plural(self.resumed, 'session')} an interrupted run had archived, "
            if self.resumed
            else ""
        )
        text = (
            f"{self.profile}: {stopped}{resumed}zombies closed {self.zombies_closed}, "
            f"pruned {len(self.prune.pruned)}, "
            f"archived {len(self.prune.archived)}, files removed {self.files_removed}; "
            f"freed {units.size(self.freed_bytes)} on disk, {net_words(self)}; remaining "
            f"{units.plural(self.remaining_sessions, 'session')}, "
            f"{units.plural(self.remaining_messages, 'message')}"
        )
        if self.reclaimable_bytes >= RECLAIMABLE_NOTE_BYTES:
            text += f"; {units.size(self.reclaimable_bytes)} reclaimable still in state.db ({RECLAIM_HOW})"
        if self.interrupted:
            text += "; the next run resumes the rest"
        if self.offsite:
            text += f"; {self.offsite['summary']}"
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
            "keeper_bytes_before": self.keeper_bytes_before,
            "keeper_bytes_after": self.keeper_bytes_after,
            "net_freed_bytes": self.net_freed_bytes,
            "reclaimable_bytes": self.reclaimable_bytes,
            "remaining": {"sessions": self.remaining_sessions, "messages": self.remaining_messages},
            "writer": self.writer,
            "backup": self.backup,
            "safeguard": self.safeguard,
            "compact": self.compact,
            "seconds": self.seconds,
            "archive_retention": self.archive_retention,
            "interrupted": self.interrupted or None,
            "offsite": self.offsite,
            "summary": self.summary(),
        }


def net_words(res: RunResult) -> str:
    """``net 8.1 MB (keeper/ +5.7 MB)``, or ``the home grew 336.0 MB (keeper/ +485.9 MB)``."""
    net, keeper = res.net_freed_bytes, units.change(res.keeper_bytes_after - res.keeper_bytes_before)
    return (
        f"net {units.size(net)} (keeper/ {keeper})"
        if net >= 0
        else f"the home grew {units.size(-net)} (keeper/ {keeper})"
    )


def writer_figures(w: Writer, hold: MergeHold | None) -> dict:
    """The run's lock use, for ``--json`` and the journal: where its time went and what it waited."""
    s = w.stats
    return {
        "transactions": s.transactions,
        "max_txn_ms": round(s.max_txn_ms, 1),
        "lock_ms": round(s.total_txn_ms, 1),
        "over_budget": s.over_budget,
        "commit_ms": round(s.commit_ms, 1),
        "max_commit_ms": round(s.max_commit_ms, 1),
        "max_step_ms": {kind: round(ms, 1) for kind, ms in sorted(s.max_ms.items())},
        "checkpoints": s.checkpoints,
        "pause_ms": round(s.pause_ms, 1),
        "busy_retries": s.busy_retries,
        "busy_wait_ms": round(s.busy_wait_ms, 1),
        "max_busy_wait_ms": round(s.max_busy_wait_ms, 1),
        "fts_merge_steps": hold.merge_steps if hold else 0,
        "fts_merge_ms": round(hold.merge_ms, 1) if hold else 0.0,
        "fts_max_step_ms": round(hold.max_step_ms, 1) if hold else 0.0,
    }


def close_zombies(plan: Plan, writer: Writer, journal: Journal | None, schema: SchemaInfo) -> int:
    """``ended_at`` = last activity, ``end_reason`` = :data:`ZOMBIE_END_REASON` (an automatic stamp
    Hermes clears itself if the process was alive after all); skipped if the session woke up (a
    message, or a turn lease / compression lock Hermes took after the plan).

    The values each close replaces are journaled (fsynced) before any close, and a row closes only
    while it still holds them: the journal alone can undo every close. The row's stamp is one Hermes
    writes too, so the keeper's own mark is the journal: ``zombies_closed`` names each session this
    run closed, with the ``end_reason`` it wrote.
    """
    if journal and plan.zombies:
        journal.write(
            "zombies_closing",
            previous={z.session_id: {"ended_at": None, "end_reason": z.end_reason} for z in plan.zombies},
        )
    closed: list[str] = []
    todo = list(plan.zombies)
    while todo:
        chunk, todo = todo[:200], todo[200:]

        def upd(c, chunk=chunk) -> list[str]:
            done = []
            guarded = live_guards(c, schema, [k for z in chunk for k in (z.session_id, z.lease_key)])
            for z in chunk:
                if guarded & {z.session_id, z.lease_key}:
                    continue
                cur = c.execute(
                    "UPDATE sessions SET ended_at = ?, end_reason = ? WHERE id = ? AND ended_at IS NULL"
                    " AND end_reason IS ?"
                    " AND NOT EXISTS (SELECT 1 FROM messages WHERE session_id = ? AND timestamp > ?)",
                    (z.ended_at, ZOMBIE_END_REASON, z.session_id, z.end_reason, z.session_id, z.ended_at),
                )
                if cur.rowcount:
                    done.append(z.session_id)
            return done

        closed += writer.step(upd)
    if journal and plan.zombies:
        journal.write(
            "zombies_closed",
            closed=len(closed),
            planned=len(plan.zombies),
            end_reason=ZOMBIE_END_REASON,
            sessions=closed,
            kept_open=sorted({z.session_id for z in plan.zombies} - set(closed)),
        )
    return len(closed)


def _home_path(profile: Place, f: FileAction) -> str:
    """The journal's name of a file :func:`remove` reached (so one inside the home)."""
    return "/".join(Path(f.path).relative_to(profile.home).parts)


def remove_files(profile: Place, files: list[FileAction], journal: Journal | None) -> tuple[int, int]:
    """Delete these planned files, each only inside its kind's folder, through the door (never via
    a symlink); each one journaled with its name, bytes, kind and reason."""
    removed = size = 0
    for f in files:
        try:
            n = remove(profile.fs, f)
        except OSError as exc:  # not ours to remove (another owner, a read-only mount): said, kept
            if journal:
                path = _home_path(profile, f)
                journal.write("file_not_removed", durable=False, path=path, kind=f.kind, error=exc.strerror)
            continue
        if n is None:
            continue  # gone, a symlink, behind one, or outside its kind's folder: kept
        removed += 1
        size += n
        if journal:
            path = _home_path(profile, f)
            journal.write("file_removed", durable=False, path=path, bytes=n, kind=f.kind, reason=f.reason)
    if journal:
        journal.sync()
    return removed, size


def preflight(profile: Place, schema: SchemaInfo, policy: Policy) -> None:
    """What must hold before a run changes anything (no zombie closed, no file removed, no
    backup taken): state.db is one the keeper may change, and the archive it will write to
    opens and is of a layout it knows (a :class:`KeeperError` otherwise)."""
    schema.require_actionable()
    refuse_during_maintenance(schema)
    # A link (dangling too) is refused by the door, a file that is not SQLite or of a newer
    # layout by the archive; one without tables (a first run killed before them) is set up.
    if policy.archive and archive_exists(profile.keeper_dir):
        Archive.for_home(profile.keeper_dir).close()


def planned_facts(plan: Plan, policy: Policy) -> Planned:
    """What the plan decided each pruned session from, for the deleter to look at again: its
    conversation's newest activity (the plan's clock less the idle time its reason states; the
    clock itself where a reason has none) and the policy's ``keep_titled``."""
    last = {}
    for sid in plan.prune:
        idle = plan.decisions[sid].reason.details.get("idle_s")
        last[sid] = plan.now - idle if isinstance(idle, int | float) else plan.now
    return Planned(last, policy.keep_titled)


def apply_plan(ctx: RunContext, plan: Plan, progress: Progress | None = None) -> RunResult:
    """Safeguard, resume, close zombies, archive+prune, remove files, compact. The caller holds the lock.

    The plan's safeguard comes first: a backup (if that fails nothing is changed) or its refusal.
    A signal (:mod:`interrupt`) ends the run at the next step boundary: what was done is
    journaled (``interrupted``) and carried by the :class:`Interrupted` raised (``result``).
    """
    profile, policy, journal = ctx.profile, ctx.policy, ctx.journal
    # Again under the lock, right before the first change: Hermes may have started its own
    # maintenance while the plan was made (Profile.run checked before taking the lock).
    preflight(profile, ctx.schema, policy)
    res = RunResult(
        profile.name,
        keeper_bytes_before=keeper_bytes(profile, policy.backup_dest),
        db_bytes_before=ctx.schema.used_bytes,
        file_bytes_before=ctx.schema.db_bytes + profile.wal_bytes(),
        safeguard=plan.safeguard.kind,
    )
    if plan.safeguard.kind == REFUSE:
        raise KeeperError(plan.safeguard.why)
    try:
        ctx.stop.defer()
        _apply_steps(ctx, plan, res, progress)
    except Interrupted as exc:
        res.interrupted = signal.Signals(exc.signum).name
        res.writer = res.writer or writer_figures(ctx.writer, None)
        _measure_after(profile, ctx.schema, res, policy.backup_dest)
        if journal:
            journal.write("interrupted", **{k: v for k, v in res.to_dict().items() if k != "skipped"})
        exc.result = res
        raise
    _measure_after(profile, ctx.schema, res, policy.backup_dest)
    if journal:
        journal.write("summary", **{k: v for k, v in res.to_dict().items() if k != "skipped"})
    return res


def _apply_steps(ctx: RunContext, plan: Plan, res: RunResult, progress: Progress | None) -> None:
    """:func:`apply_plan`'s steps, a step boundary (``ctx.stop.check()``) between each two."""
    profile, policy, journal, w = ctx.profile, ctx.policy, ctx.journal, ctx.writer
    if plan.safeguard.kind == SNAPSHOT:
        dest = policy.backup_dest
        record = take_backup(profile, dest, journal=journal, schema=ctx.schema)
        res.backup = record.name
        # or backups pile up
        apply_rotation(backup_dir(profile, dest), profile.home, journal=journal, **policy.rotation)
        ctx.stop.check()
    # Files under sessions/ go on a thread of their own: orphans now, a pruned session's as soon
    # as it is gone (never those of a session that woke up and was put back). The other folders'
    # files wait for the database work: copies of state.db among them stay until it is done.
    pruning = set(plan.prune)
    by_session: dict[str | None, list[FileAction]] = {}
    folders = [f for f in plan.files if f.kind in KINDS]
    for f in plan.files:
        if f.kind not in KINDS:
            by_session.setdefault(f.session_id if f.session_id in pruning else None, []).append(f)
    removals: list[Future] = []
    hold = None
    try:
        with ThreadPoolExecutor(1, thread_name_prefix="keeper-files") as files, ctx.holding() as hold:

            def remove(group: list[FileAction]) -> None:
                if group:
                    removals.append(files.submit(remove_files, profile, group, journal))

            remove(by_session.pop(None, []))
            res.resumed = resume_pending(ctx) if policy.archive else 0
            ctx.stop.check()
            res.zombies_closed = close_zombies(plan, w, journal, ctx.schema)
            ctx.stop.check()
            res.prune = prune_sessions(
                ctx,
                plan.prune_conversations(),
                message_counts={sid: plan.decisions[sid].messages for sid in plan.prune},
                progress=progress,
                on_pruned=lambda ids: remove([f for sid in ids for f in by_session.get(sid, [])]),
                planned=planned_facts(plan, policy),
                result=res.prune,
            )
    except TryLater as exc:
        if journal:
            journal.write("stopped", reason=str(exc), writer=writer_figures(w, hold))
        raise
    except Interrupted:
        res.writer = writer_figures(w, hold)
        _count_removed(res, [r.result() for r in removals])
        raise
    _count_removed(res, [r.result() for r in removals])
    res.writer = writer_figures(w, hold)
    ctx.stop.check()
    _count_removed(res, [remove_files(profile, folders, journal)])
    if plan.archive_retention is not None:  # after the prune: its new entries are not touched
        res.archive_retention = apply_retention(profile, plan.archive_retention, journal)
    ctx.stop.check()
    _index_archive(profile, journal)
    ctx.stop.check()
    if policy.compact and res.prune.pruned:
        res.compact = compact_run(ctx).to_dict()


def _index_archive(profile: Place, journal: Journal | None) -> None:
    """The archive's search index brought up to date (journaled); a failure only says so: the
    index is a cache, and the next search builds what it lacks."""
    if not archive_exists(profile.keeper_dir):
        return
    t0 = time.perf_counter()
    try:
        store = Archive.for_home(profile.keeper_dir)
        try:
            added = refresh_index(store)
        finally:
            store.close()
    except (sqlite3.Error, OSError) as exc:
        if journal:
            journal.write("archive_index_failed", error=str(exc))
        return
    if journal and added:
        journal.write("archive_indexed", entries=added, seconds=round(time.perf_counter() - t0, 2))


def _count_removed(res: RunResult, done: list[tuple[int, int]]) -> None:
    for n, size in done:
        res.files_removed += n
        res.file_bytes += size


def _measure_after(profile: Place, schema: SchemaInfo, res: RunResult, dest: Path | str | None) -> None:
    """state.db's size and rows, and keeper/'s, after the run (an interrupted one too)."""
    conn = connect_ro(profile.db_path)
    try:
        after = schema.resized(conn)
        res.db_bytes_after = after.used_bytes
        res.file_bytes_after, res.reclaimable_bytes = after.db_bytes + profile.wal_bytes(), after.free_bytes
        res.remaining_sessions = conn.execute("SELECT count(*) FROM sessions").fetchone()[0]
        res.remaining_messages = conn.execute("SELECT count(*) FROM messages").fetchone()[0]
    finally:
        conn.close()
    res.keeper_bytes_after = keeper_bytes(profile, dest)
