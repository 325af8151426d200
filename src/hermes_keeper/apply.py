"""The executor: applies a plan in small, journaled, crash-safe steps while Hermes runs.

For each batch of sessions to prune: read their payloads (one read snapshot), write them
to the archive, commit, read back and verify sha256, *then* mark them (``archived = 1``
where the column exists) and delete their messages by id ranges in budgeted write
transactions (every message costs two FTS5 deletes through Hermes's triggers), then the
dependent rows and the session row. Only message ids present in the verified payload
are deleted: a message that arrived after archiving stops that session's prune and the
session is put back as it was. A crash at any moment leaves every session either whole
in state.db, or whole in the archive with state ``archived``; the next run finishes
those first (:func:`resume_pending`).
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from . import archive as arch
from .backup import apply_rotation, backup_dir, take_backup
from .db import connect_ro, read_txn
from .discovery import Profile
from .fsutil import is_inside
from .journal import Journal
from .plan import ZOMBIE_END_REASON, Plan
from .policy import Policy
from .reclaim import compact
from .schema import SchemaInfo, inspect
from .writer import Writer

#: Sessions archived per archive transaction (bounded by message volume too).
ARCHIVE_BATCH_SESSIONS = 50
ARCHIVE_BATCH_MESSAGES = 5000
#: Hermes's two FTS5 indexes, merged by :meth:`_Pruner.merge_fts` between deletes.
FTS_TABLES = ("messages_fts", "messages_fts_trigram")
FTS_MERGE_START_PAGES = 64
#: A safety stop for one round of merges; each step is bounded by the budget.
FTS_MERGE_MAX_STEPS = 1000

Progress = Callable[[str, int], None]


@dataclass
class PruneResult:
    pruned: list[str] = field(default_factory=list)
    archived: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)  # id -> why it was left in place
    messages_deleted: int = 0


@dataclass
class RunResult:
    profile: str
    zombies_closed: int = 0
    prune: PruneResult = field(default_factory=PruneResult)
    resumed: int = 0
    files_removed: int = 0
    file_bytes: int = 0
    db_bytes_before: int = 0
    db_bytes_after: int = 0
    remaining_sessions: int = 0
    remaining_messages: int = 0
    writer: dict = field(default_factory=dict)
    backup: str | None = None
    compact: dict | None = None

    def summary(self) -> str:
        freed = max(0, self.db_bytes_before - self.db_bytes_after) + self.file_bytes
        return (
            f"{self.profile}: zombies={self.zombies_closed} pruned={len(self.prune.pruned)} "
            f"archived={len(self.prune.archived)} files={self.files_removed} freed={freed / 1e6:.0f}MB "
            f"remaining={self.remaining_sessions} sessions, {self.remaining_messages} messages"
        )

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
            "remaining": {"sessions": self.remaining_sessions, "messages": self.remaining_messages},
            "writer": self.writer,
            "backup": self.backup,
            "compact": self.compact,
            "summary": self.summary(),
        }


def _marks(n: int) -> str:
    return ",".join("?" * n)


class _Pruner:
    """Deletes verified-archived sessions through one :class:`Writer`."""

    def __init__(self, writer: Writer, schema: SchemaInfo, journal: Journal | None):
        self.w = writer
        self.schema = schema
        self.journal = journal
        self.batch = writer.batch(start=200)
        self.fts = {t: writer.batch(start=FTS_MERGE_START_PAGES) for t in FTS_TABLES if schema.has(t)}

    def _log(self, action: str, **fields) -> None:
        if self.journal:
            self.journal.write(action, **fields)

    def mark(self, ids: list[str]) -> None:
        if ids and self.schema.has("sessions", "archived"):
            self.w.step(
                lambda c: c.execute(f"UPDATE sessions SET archived = 1 WHERE id IN ({_marks(len(ids))})", ids)
            )

    def unmark(self, sid: str, was_archived: int) -> None:
        if self.schema.has("sessions", "archived"):
            self.w.step(
                lambda c: c.execute("UPDATE sessions SET archived = ? WHERE id = ?", (was_archived, sid))
            )

    def delete(self, payloads: list[dict]) -> dict[str, bool]:
        """Delete verified-archived sessions; id -> False for one that gained messages meanwhile.

        Work is cut into transactions of about ``batch.size`` units (a message, or a finished
        session): many small sessions share one transaction, a large one spans several, each
        deleting a contiguous id range of its archived messages.
        """
        queue = [(p["session"]["id"], [m["id"] for m in p["messages"]]) for p in payloads]
        outcome: dict[str, bool] = {}
        qi = done = 0  # next session in queue, messages of it already deleted
        while qi < len(queue):
            room = self.batch.size
            ranges, finish = [], []
            while qi < len(queue) and room > 0:
                sid, ids = queue[qi]
                chunk = ids[done : done + room]
                if chunk:
                    ranges.append((sid, chunk[0], chunk[-1]))
                    room -= len(chunk)
                    done += len(chunk)
                if done >= len(ids):
                    finish.append(sid)
                    room -= 1
                    qi, done = qi + 1, 0
            units = self.batch.size - room

            def work(c, ranges=ranges, finish=finish):
                for sid, lo, hi in ranges:
                    c.execute(
                        "DELETE FROM messages WHERE session_id = ? AND id BETWEEN ? AND ?", (sid, lo, hi)
                    )
                return {sid: self._finish(c, sid) for sid in finish}

            outcome.update(self.w.step(work, self.batch, units=units))
            self.merge_fts()
        return outcome

    def merge_fts(self) -> None:
        """Do FTS5's segment merges now, in budgeted steps, before a write stumbles on them.

        Each delete transaction leaves a tombstone segment per index. Once four pile up on a
        level, FTS5's automerge merges them inside whichever write comes next, our delete or
        Hermes's append, and on a Hermes home that merge is unbounded: its page quota scales
        with the number of levels, which Hermes's periodic 'optimize' keeps raising (158 on
        the bench home; 0.5-0.9 s transactions measured). ``'merge', N`` does that work at
        most N pages at a time, N sized to the budget from the rows each step changed.
        """
        for table, batch in self.fts.items():
            for _ in range(FTS_MERGE_MAX_STEPS):

                def merge(c, table=table, pages=batch.size):
                    before = c.total_changes
                    c.execute(f"INSERT INTO {table}({table}, rank) VALUES('merge', ?)", (pages,))
                    return c.total_changes - before

                changed = self.w.step(merge)
                if changed < 2:  # fts5: fewer than 2 changes means no level had work left
                    break
                batch.record(changed, self.w.stats.last_txn_ms)

    def _finish(self, c: sqlite3.Connection, sid: str) -> bool:
        if c.execute("SELECT 1 FROM messages WHERE session_id = ? LIMIT 1", (sid,)).fetchone():
            return False
        s = self.schema
        if s.has("session_model_usage"):
            c.execute("DELETE FROM session_model_usage WHERE session_id = ?", (sid,))
        if s.has("state_meta"):
            c.execute("DELETE FROM state_meta WHERE key = ?", (f"goal:{sid}",))
        if s.has("compression_locks"):
            c.execute(
                "DELETE FROM compression_locks WHERE session_id = ? AND expires_at <= ?", (sid, time.time())
            )
        c.execute("UPDATE sessions SET parent_session_id = NULL WHERE parent_session_id = ?", (sid,))
        c.execute("DELETE FROM sessions WHERE id = ?", (sid,))
        return True


def _read_payloads(db_path: Path, schema: SchemaInfo, ids: list[str]) -> list[dict]:
    conn = connect_ro(db_path)
    try:
        with read_txn(conn):
            return [p for p in (arch.read_payload(conn, schema, sid) for sid in ids) if p is not None]
    finally:
        conn.close()


def _batches(ids: list[str], sizes: dict[str, int]) -> list[list[str]]:
    out, cur, msgs = [], [], 0
    for sid in ids:
        if cur and (len(cur) >= ARCHIVE_BATCH_SESSIONS or msgs + sizes.get(sid, 0) > ARCHIVE_BATCH_MESSAGES):
            out.append(cur)
            cur, msgs = [], 0
        cur.append(sid)
        msgs += sizes.get(sid, 0)
    if cur:
        out.append(cur)
    return out


def prune_sessions(
    profile: Profile,
    session_ids: list[str],
    *,
    archive: bool = True,
    journal: Journal | None = None,
    budget_ms: float = 50.0,
    pause_ms: float = 20.0,
    message_counts: dict[str, int] | None = None,
    progress: Progress | None = None,
    writer: Writer | None = None,
    schema: SchemaInfo | None = None,
) -> PruneResult:
    """Archive (unless ``archive=False``), verify, then delete these sessions from state.db.

    ``schema``: the caller's fresh :func:`inspect` of this database, to skip reading it again.
    """
    schema = schema or inspect(profile.db_path)
    schema.require_actionable()
    result = PruneResult()
    own_writer = writer is None
    w = writer or Writer(profile.db_path, budget_ms=budget_ms, pause_ms=pause_ms)
    store = arch.Archive.for_home(profile.keeper_dir) if archive else None
    pruner = _Pruner(w, schema, journal)
    try:
        for batch in _batches(list(session_ids), message_counts or {}):
            payloads = _read_payloads(profile.db_path, schema, batch)
            if store is not None:
                store.put(payloads, reason="retention")
                bad = [p["session"]["id"] for p in payloads if not store.verify(p["session"]["id"])]
                if bad:  # never delete what we could not read back
                    raise arch.ArchiveDamaged(f"archive read-back failed for {len(bad)} sessions")
                result.archived.extend(p["session"]["id"] for p in payloads)
                if journal:
                    journal.write(
                        "archived",
                        sessions=[p["session"]["id"] for p in payloads],
                        messages=sum(len(p["messages"]) for p in payloads),
                    )
            pruner.mark([p["session"]["id"] for p in payloads])
            _settle(pruner, store, payloads, result, journal)
            if progress:
                progress("prune", len(payloads))
    finally:
        if store is not None:
            store.close()
        if own_writer:
            w.close()
    return result


def _settle(
    pruner: _Pruner,
    store: arch.Archive | None,
    payloads: list[dict],
    result: PruneResult,
    journal: Journal | None,
) -> None:
    """Delete the batch, then record each session as pruned, or put it back if it woke up."""
    outcome = pruner.delete(payloads)
    gone = [p for p in payloads if outcome[p["session"]["id"]]]
    if store is not None:
        store.set_state([p["session"]["id"] for p in gone], arch.PRUNED)
    for p in gone:
        result.pruned.append(p["session"]["id"])
        result.messages_deleted += len(p["messages"])
    if journal and gone:
        journal.write(
            "pruned",
            sessions=[p["session"]["id"] for p in gone],
            messages=sum(len(p["messages"]) for p in gone),
        )
    for p in payloads:
        if outcome[p["session"]["id"]]:
            continue
        # New messages arrived after archiving: the conversation is alive. Put it back as it was.
        sid = p["session"]["id"]
        if p["messages"]:
            _reinsert_messages(pruner, p)
        pruner.unmark(sid, int(p["session"].get("archived") or 0))
        if store is not None:
            store.set_state([sid], arch.RESTORED)
        result.skipped[sid] = "new activity during prune"
        if journal:
            journal.write("skipped", session=sid, reason="new activity during prune")


def _reinsert_messages(pruner: _Pruner, payload: dict) -> None:
    """Put back the archived messages of a session that turned out to be alive."""
    schema = pruner.schema
    cols = [c for c in payload["messages"][0] if schema.has("messages", c)]
    rows = [[arch.decode_value(m.get(c)) for c in cols] for m in payload["messages"]]
    done = 0
    while done < len(rows):
        chunk = rows[done : done + pruner.batch.size]

        def ins(c, chunk=chunk):
            for r in chunk:
                ph = ",".join(arch.sql_placeholder(v) for v in r)
                c.execute(f"INSERT OR IGNORE INTO messages ({','.join(cols)}) VALUES ({ph})", r)

        pruner.w.step(ins, pruner.batch, units=len(chunk))
        done += len(chunk)


def resume_pending(profile: Profile, schema: SchemaInfo, writer: Writer, journal: Journal | None) -> int:
    """Finish prunes a crash interrupted: archived (verified) rows whose session is still in state.db."""
    path = profile.keeper_dir / arch.ARCHIVE_NAME
    if not path.exists():
        return 0
    store = arch.Archive(path)
    try:
        pending = [e.session_id for e in store.entries("WHERE state = ?", (arch.ARCHIVED,))]
        if not pending:
            return 0
        conn = connect_ro(profile.db_path)
        try:
            present = {
                r[0]
                for r in conn.execute(
                    f"SELECT id FROM sessions WHERE id IN ({_marks(len(pending))})", pending
                )
            }
        finally:
            conn.close()
        pruner = _Pruner(writer, schema, journal)
        result = PruneResult()
        payloads = []
        for sid in pending:
            if sid not in present:
                store.set_state([sid], arch.PRUNED)
                continue
            try:
                payloads.append(store.get(sid))
            except arch.ArchiveDamaged:
                # The archive copy is bad: the session must stay in state.db, visible again.
                pruner.unmark(sid, 0)
                store.set_state([sid], arch.RESTORED)
        _settle(pruner, store, payloads, result, journal)
        if journal and pending:
            journal.write("resumed", sessions=len(result.pruned), skipped=len(result.skipped))
        return len(result.pruned)
    finally:
        store.close()


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


def remove_files(profile: Profile, plan: Plan, journal: Journal | None) -> tuple[int, int]:
    """Delete planned files, only inside ``sessions/``, never through a symlink."""
    removed = size = 0
    base = profile.sessions_dir
    for f in plan.files:
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
                "file_removed", path=str(path.relative_to(profile.home)), bytes=st.st_size, reason=f.reason
            )
    return removed, size


def apply_plan(
    profile: Profile, plan: Plan, *, policy: Policy, journal: Journal | None, progress: Progress | None = None
) -> RunResult:
    """Backup, resume, close zombies, archive+prune, remove files, compact. The caller holds the lock.

    A run that will delete takes a backup first; if that fails nothing is changed.
    """
    schema = inspect(profile.db_path)
    schema.require_actionable()
    res = RunResult(profile.name, db_bytes_before=schema.used_bytes)
    if policy.backup and plan.prune:
        res.backup = take_backup(profile, journal=journal).name
        apply_rotation(backup_dir(profile), profile.home, journal=journal)  # or backups pile up
    with Writer(profile.db_path, budget_ms=policy.budget_ms, pause_ms=policy.pause_ms) as w:
        res.resumed = resume_pending(profile, schema, w, journal) if policy.archive else 0
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
        )
        s = w.stats
        res.writer = {
            "transactions": s.transactions,
            "max_txn_ms": round(s.max_txn_ms, 1),
            "over_budget": s.over_budget,
            "checkpoints": s.checkpoints,
        }
    res.files_removed, res.file_bytes = remove_files(profile, plan, journal)
    if policy.compact and res.prune.pruned:
        res.compact = compact(
            profile, budget_ms=policy.budget_ms, pause_ms=policy.pause_ms, backup=False, journal=journal
        ).to_dict()
    after = inspect(profile.db_path, check_timestamps=False)
    res.db_bytes_after = after.used_bytes
    conn = connect_ro(profile.db_path)
    try:
        res.remaining_sessions = conn.execute("SELECT count(*) FROM sessions").fetchone()[0]
        res.remaining_messages = conn.execute("SELECT count(*) FROM messages").fetchone()[0]
    finally:
        conn.close()
    if journal:
        journal.write("summary", **{k: v for k, v in res.to_dict().items() if k != "skipped"})
    return res
