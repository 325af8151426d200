"""Give disk space back while Hermes keeps running.

With ``auto_vacuum = INCREMENTAL``, ``PRAGMA incremental_vacuum(N)`` frees pages in
short budgeted transactions (each row that pragma returns is one freed page, so every
row must be fetched). With ``auto_vacuum = NONE`` only a full ``VACUUM`` can switch the
mode, and VACUUM blocks every writer for the whole rewrite: we do it once, after a
backup, and only when no other process has the database open; otherwise we report
what is reclaimable and wait (``wait_idle_s``) or leave it for the next idle moment.
FTS5 indexes get bounded ``merge`` steps, never the unbounded ``optimize``.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .backup import take_backup
from .db import connect_rw
from .discovery import Profile
from .errors import KeeperError
from .holders import find_holders
from .journal import Journal
from .schema import SchemaInfo, inspect
from .writer import Writer

FTS_TABLES = ("messages_fts", "messages_fts_trigram")
FTS_MERGE_PAGES = 64
FTS_MAX_STEPS = 500


@dataclass
class ReclaimResult:
    profile: str
    auto_vacuum_before: str
    auto_vacuum_after: str
    db_bytes_before: int
    db_bytes_after: int
    wal_bytes_before: int
    wal_bytes_after: int
    free_bytes_after: int
    pages_freed: int = 0
    fts_merge_steps: int = 0
    vacuumed: bool = False
    backup: str | None = None
    holders: list[str] = field(default_factory=list)
    note: str = ""

    @property
    def freed_bytes(self) -> int:
        return (self.db_bytes_before + self.wal_bytes_before) - (self.db_bytes_after + self.wal_bytes_after)

    def to_dict(self) -> dict:
        return asdict(self) | {"freed_bytes": self.freed_bytes}


def _wal(path: Path) -> int:
    wal = path.with_name(path.name + "-wal")
    return wal.stat().st_size if wal.exists() else 0


def _merge_fts(w: Writer, schema: SchemaInfo) -> int:
    """Bounded incremental merges until each index reports no more work (or a step cap)."""
    steps = 0
    for table in FTS_TABLES:
        if not schema.has(table):
            continue
        for _ in range(FTS_MAX_STEPS):

            def merge(c, table=table):
                before = c.total_changes
                c.execute(f"INSERT INTO {table}({table}, rank) VALUES('merge', ?)", (FTS_MERGE_PAGES,))
                return c.total_changes - before

            steps += 1
            if w.step(merge) < 2:  # fts5: fewer than 2 changes means nothing was left to merge
                break
    return steps


def _incremental(w: Writer) -> int:
    """Free every page on the freelist in budgeted steps; returns pages freed."""
    batch = w.batch(start=256)

    def free_pages() -> int:
        return w.conn.execute("PRAGMA freelist_count").fetchone()[0]

    start = left = free_pages()
    while left:
        n = min(batch.size, left)
        # Each row of the pragma is one page freed: fetch them all or the work is not done.
        w.step(lambda c, n=n: c.execute(f"PRAGMA incremental_vacuum({n})").fetchall(), batch, units=n)
        now = free_pages()
        if now >= left:
            break
        left = now
    return start - left


def _wait_idle(db_path: Path, wait_s: float | None) -> list:
    holders = find_holders(db_path)
    deadline = time.monotonic() + (wait_s or 0)
    while holders and time.monotonic() < deadline:
        time.sleep(min(5.0, max(0.1, deadline - time.monotonic())))
        holders = find_holders(db_path)
    return holders


def compact(
    profile: Profile,
    *,
    budget_ms: float = 50.0,
    pause_ms: float = 20.0,
    wait_idle_s: float | None = None,
    allow_full_vacuum: bool = True,
    backup: bool = True,
    journal: Journal | None = None,
) -> ReclaimResult:
    schema = inspect(profile.db_path)
    schema.require_actionable()
    db = profile.db_path
    res = ReclaimResult(
        profile.name,
        schema.auto_vacuum,
        schema.auto_vacuum,
        schema.page_count * schema.page_size,
        0,
        _wal(db),
        0,
        0,
    )
    with Writer(db, budget_ms=budget_ms, pause_ms=pause_ms) as w:
        res.fts_merge_steps = _merge_fts(w, schema)
        if schema.auto_vacuum == "incremental":
            res.pages_freed = _incremental(w)
    if schema.auto_vacuum == "none":
        holders = _wait_idle(db, wait_idle_s)
        res.holders = [h.describe() for h in holders]
        after = inspect(db, check_timestamps=False)
        if holders or not allow_full_vacuum:
            res.note = (
                f"{after.freelist_count * after.page_size} bytes reclaimable; the one-time switch to "
                "incremental auto_vacuum needs a full VACUUM, done when no process holds the database"
                + (f" (held by {'; '.join(res.holders)})" if holders else "")
            )
        else:
            if backup:
                res.backup = take_backup(profile, journal=journal).name
            conn = connect_rw(db, busy_timeout_s=5)
            try:
                if find_holders(db):
                    raise KeeperError("Hermes opened the database just now; VACUUM skipped, nothing changed")
                conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                conn.execute("PRAGMA auto_vacuum=INCREMENTAL")
                conn.execute("VACUUM")
            finally:
                conn.close()
            res.vacuumed = True
    holders = find_holders(db)
    conn = connect_rw(db)
    try:
        conn.execute("PRAGMA wal_checkpoint(PASSIVE)" if holders else "PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
    after = inspect(db, check_timestamps=False)
    res.auto_vacuum_after = after.auto_vacuum
    res.db_bytes_after = after.page_count * after.page_size
    res.free_bytes_after = after.freelist_count * after.page_size
    res.wal_bytes_after = _wal(db)
    if journal:
        journal.write("compact", **res.to_dict())
    return res
