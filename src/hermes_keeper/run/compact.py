"""Give disk space back while Hermes keeps running.

With ``auto_vacuum = INCREMENTAL``, ``PRAGMA incremental_vacuum(N)`` frees pages in
short budgeted transactions (each row that pragma returns is one freed page, so every
row must be fetched). With ``auto_vacuum = NONE`` only a full ``VACUUM`` can switch the
mode, and VACUUM blocks every writer for the whole rewrite: we do it once, after a
backup, when no other process has the database open, or beside a running Hermes when
its estimated stall (:func:`estimate_vacuum_s`) fits well inside Hermes's ~15 s of write
retries: at a quiet moment if one comes within the wait, else anyway (an always-on gateway
never pauses, and the stall is the same); otherwise we report what is reclaimable and leave
it for the next run whose estimate fits.
FTS5 indexes get bounded ``merge`` steps, never the unbounded ``optimize``.
"""

from __future__ import annotations

import re
import shutil
import sqlite3
import tempfile
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from hermes_keeper import units
from hermes_keeper.backup.snapshot import RESERVE_BYTES, take_backup
from hermes_keeper.errors import KeeperError, TryLater
from hermes_keeper.facts import checked_unless_it_stalls
from hermes_keeper.fs import private_dir
from hermes_keeper.journal import Journal
from hermes_keeper.model.policy import Policy
from hermes_keeper.place import Place
from hermes_keeper.run.context import RunContext
from hermes_keeper.sqlite.connect import checkpoint_passive, connect_file, connect_ro, connect_rw, is_busy
from hermes_keeper.sqlite.fts import fts5_tables, merge_round, release_leftover_hold
from hermes_keeper.sqlite.holders import (
    Holder,
    find_holders,
    long_reads_stall_hermes,
    refuse_during_maintenance,
)
from hermes_keeper.sqlite.schema import SchemaInfo, inspect, quote_ident
from hermes_keeper.sqlite.walreset import WalGuard, keep_out, wal_guard
from hermes_keeper.sqlite.writer import Budget, Writer

FTS_MERGE_PAGES = 64
#: The policy's ``live_vacuum_stall`` (SETTINGS): for callers that pass none.
DEFAULT_LIVE_VACUUM_STALL_S = Policy().live_vacuum_stall_s
#: Our connection cuts the WAL back to this whenever it restarts it: moved pages pass through the
#: WAL, and a running Hermes never truncates it (only PASSIVE checkpoints until it closes).
WAL_LIMIT_BYTES = 4 << 20
#: :func:`cut_wal`: tries, the pause between two, and how long its write waits for the lock in all.
WAL_CUT_TRIES, WAL_CUT_GAP_S, WAL_CUT_BUSY_S = 20, 0.05, 5.0
#: Longest an FTS merge step may hold the write lock while Hermes runs (Hermes's busy handler
#: then still gets the lock well inside its first second).
FTS_STEP_LIMIT_MS = 120.0
#: The VACUUM beside Hermes over the same VACUUM timed on a copy: Hermes's writes add theirs
#: (measured: 0.7-1.46x, the most in a rollback journal at 2 GB).
VACUUM_MARGIN = 1.25
#: After a failed try, today's Hermes sleeps up to 150 ms before the next for its first 2 s of
#: waiting, then up to 1 s: a writer sees the lock free that much later than it was.
HERMES_RETRY_GAPS_S = ((2.0, 0.15), (float("inf"), 1.0))


def hermes_wait_s(stall_s: float) -> float:
    """How long a Hermes write that the lock held ``stall_s`` waits: the stall, then its next try."""
    return stall_s + next(gap for until, gap in HERMES_RETRY_GAPS_S if stall_s < until)


#: A VACUUM never goes faster than this: a database too big to fit the stall even so is not
#: copied to find out.
MAX_VACUUM_BYTES_PER_S = 500_000_000
#: A quiet moment: no other connection committed for this long ...
QUIET_S = 1.0
#: ... looked for this long when the command gives no ``--wait-idle`` (a run's end, say).
QUIET_WAIT_S = 5.0


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
    fts_left: list[str] = field(default_factory=list)  # indexes whose merge waits for an idle run
    live: bool = False  # another process held the database: no full FTS merge, no WAL truncation
    vacuumed: bool = False
    vacuum_estimate_s: float | None = None  # the estimated stall of a VACUUM beside Hermes
    backup: str | None = None
    holders: list[str] = field(default_factory=list)
    note: str = ""
    seconds: float = 0.0

    @property
    def freed_bytes(self) -> int:
        """Bytes the disk got back; never negative (a WAL that grew while Hermes wrote is not "freed")."""
        before = self.db_bytes_before + self.wal_bytes_before
        return max(0, before - self.db_bytes_after - self.wal_bytes_after)

    def add_note(self, text: str) -> None:
        """One more thing the user should know, after those already said."""
        self.note = "; ".join(filter(None, [self.note, text]))

    @property
    def unconverted(self) -> bool:
        """Still auto_vacuum=NONE: free pages cannot go back to the disk until the one-time VACUUM runs."""
        return self.auto_vacuum_after == "none"

    def to_dict(self) -> dict:
        return asdict(self) | {"freed_bytes": self.freed_bytes}


def _merge_fts(w: Writer, schema: SchemaInfo, live: bool) -> tuple[int, list[str]]:
    """FTS5 ``merge`` steps, N pages each (sized to the budget), until no work is left.

    A delete only adds a tombstone segment; the space comes back when the big segment is
    merged with it. When idle, ``'merge', -N`` starts that full merge (what 'optimize' does
    in one go) and ``'merge', N`` continues it in bounded steps. While Hermes runs we never
    start one: every insert of Hermes continues a merge in progress, one whole term at a
    time, and a common trigram's doclist made a single gateway write wait ~0.8 s in the
    bench. Live, only the merges Hermes's own automerge would do run, each step aborted
    (and rolled back) past ``FTS_STEP_LIMIT_MS``. Returns (steps, indexes with a step aborted).
    """
    steps, left = 0, []
    for table in fts5_tables(schema):
        before = w.stats.transactions
        try:
            merge_round(
                w,
                table,
                w.batch(start=FTS_MERGE_PAGES),
                full=not live,
                limit_ms=FTS_STEP_LIMIT_MS if live else None,
            )
        except sqlite3.OperationalError as exc:
            if "interrupted" not in str(exc):
                raise
            left.append(table)
            steps += 1  # the aborted step
        steps += w.stats.transactions - before
    return steps, left


def _free_pages(conn: sqlite3.Connection, n: int) -> int:
    """Release up to ``n`` free pages to the OS in the caller's transaction; returns how many.

    Each step of ``incremental_vacuum`` frees one page, and Python's sqlite3 steps a statement
    without result columns exactly once, whatever the argument or ``fetchall()``: so one
    execute per page. The counts are exact: we hold the write lock.
    """
    before = conn.execute("PRAGMA freelist_count").fetchone()[0]
    for _ in range(min(n, before)):
        conn.execute("PRAGMA incremental_vacuum(1)")
    return before - conn.execute("PRAGMA freelist_count").fetchone()[0]


def _incremental(w: Writer) -> int:
    """Free every page on the freelist in budgeted steps; returns pages freed."""
    batch = w.batch(start=256)
    total = 0
    while True:
        n = batch.size
        freed = w.step(lambda c, n=n: _free_pages(c, n), batch, units=n)
        total += freed
        if freed < n:  # the freelist is empty (or nothing more can move)
            return total


def _rewrite_application_id(conn: sqlite3.Connection) -> None:
    """Write the header's ``application_id`` back as it is: one page changed, no row, no trigger.

    Today's Hermes stamps the file's generation there and compares it on every write (a changed
    one means the file was replaced): read under our write lock, the value cannot change.
    """
    app = int(conn.execute("PRAGMA application_id").fetchone()[0])
    conn.execute(f"PRAGMA application_id={app}")


def cut_wal(profile: Place, budget: Budget | None = None) -> bool:
    """Cut a WAL over :data:`WAL_LIMIT_BYTES` back beside a running Hermes; True if it is (or was) small.
    Its one write goes in ``budget`` (but waits :data:`WAL_CUT_BUSY_S` at most for the lock).

    Hermes checkpoints only PASSIVE while it runs (upstream holds TRUNCATE beside its writers
    unsafe, hermes-agent #45383 and #84881), and a PASSIVE checkpoint never shrinks the file: the
    WAL keeps its high-water mark (GBs after Hermes 0.19's 'optimize' or a VACUUM beside Hermes)
    until Hermes's last connection closes. SQLite itself cuts the WAL to ``journal_size_limit``
    when the connection that starts it over commits: the first writer after a checkpoint copied
    every frame back and while no reader needs them. So once our PASSIVE checkpoint has copied
    every frame, we write one page (:func:`_rewrite_application_id`) in a short transaction of
    our own. Whoever writes first starts the WAL over; a Hermes write that does leaves it big for
    the next try (:data:`WAL_CUT_TRIES`). Never where the keeper's SQLite has the WAL-reset bug
    and another process holds the database (:mod:`walreset`): False, nothing done.
    """
    if profile.wal_bytes() <= WAL_LIMIT_BYTES:
        return True
    with Writer(profile.db_path, replace(budget or Budget(), busy_wait_s=WAL_CUT_BUSY_S)) as w:
        if w.guard.hands_off:
            return False
        w.conn.execute(f"PRAGMA journal_size_limit={WAL_LIMIT_BYTES}")
        for _ in range(WAL_CUT_TRIES):
            _busy, frames, copied = checkpoint_passive(w.conn)
            if frames == copied:
                try:
                    w.step(_rewrite_application_id)
                except (TryLater, sqlite3.OperationalError):  # a long transaction of Hermes's, a full disk
                    return False
            if profile.wal_bytes() <= WAL_LIMIT_BYTES:
                return True
            time.sleep(WAL_CUT_GAP_S)
    return profile.wal_bytes() <= WAL_LIMIT_BYTES


def _wait_idle(db_path: Path, wait_s: float | None) -> list:
    holders = find_holders(db_path)
    deadline = time.monotonic() + (wait_s or 0)
    while holders and time.monotonic() < deadline:
        time.sleep(min(1.0, max(0.1, deadline - time.monotonic())))
        holders = find_holders(db_path)
    return holders


#: The scratch folder of :func:`estimate_vacuum_s` (a full copy; a killed run leaves it behind).
ESTIMATE_PREFIX = "vacuum-estimate-"
#: Longest read of one step of the estimate's copy of a rollback-journal database (a reader there
#: holds Hermes's commits), and the first step's rows (the next ones are sized from its time).
COPY_STEP_MS, COPY_FIRST_ROWS, COPY_MAX_ROWS = 20.0, 200, 100_000


def _copy_table(src: sqlite3.Connection, out: sqlite3.Connection, table: str) -> None:
    """Every row of ``table``, in key order, by reads of about :data:`COPY_STEP_MS` each."""
    t = quote_ident(table)
    info = src.execute(f"PRAGMA table_info({t})").fetchall()
    marks = ",".join("?" * len(info))
    try:  # the rows there now: what Hermes adds meanwhile is not waited for
        top = src.execute(f"SELECT max(rowid) FROM {t}").fetchall()[0][0] or 0
        keys, end = ["rowid"], f"rowid <= {int(top)}"
    except sqlite3.OperationalError:  # WITHOUT ROWID: its primary key orders it
        keys, end = [quote_ident(r[1]) for r in sorted((r for r in info if r[5]), key=lambda r: r[5])], "1"
    key, order = f"({', '.join(keys)})", ", ".join(keys)
    cols = ", ".join(quote_ident(r[1]) for r in info)
    last, rows = None, COPY_FIRST_ROWS
    while True:
        after = "" if last is None else f"AND {key} > ({','.join('?' * len(keys))})"
        t0 = time.perf_counter()
        got = src.execute(
            f"SELECT {order}, {cols} FROM {t} WHERE {end} {after} ORDER BY {order} LIMIT ?",
            (*(last or ()), rows),
        ).fetchall()  # one statement: its read lock ends with the last row
        took_ms = (time.perf_counter() - t0) * 1000
        if not got:
            return
        # Rows of different moments may repeat a unique value (a session id deleted and added
        # again): one is enough to time on.
        out.executemany(f"INSERT OR IGNORE INTO {t} VALUES ({marks})", (r[len(keys) :] for r in got))
        last = got[-1][: len(keys)]
        rows = max(10, min(rows * 4, COPY_MAX_ROWS, int(rows * COPY_STEP_MS / max(took_ms, 0.1))))


def _copy_rows(db: Path, dst: Path) -> None:
    """A copy of a rollback-journal database made of short reads, so Hermes commits between them.

    Its tables (an FTS5 index's shadow tables as plain ones: a VACUUM copies their b-trees alike)
    filled row by row, then its indexes built: the same data for a VACUUM to rewrite. Rows of
    different moments may disagree with each other (a message and its index postings), never
    with the file format. Triggers and views hold no data and are left out.
    """
    src = connect_ro(db)
    out = connect_file(dst)
    try:
        out.execute("PRAGMA journal_mode=OFF")
        out.execute("PRAGMA synchronous=OFF")
        objects = src.execute(
            "SELECT type, name, sql FROM sqlite_master WHERE sql IS NOT NULL AND name NOT LIKE 'sqlite\\_%'"
            " ESCAPE '\\' ORDER BY rowid"
        ).fetchall()
        tables = [
            (n, sql)
            for kind, n, sql in objects
            if kind == "table" and not sql.upper().startswith("CREATE VIRTUAL")
        ]
        out.execute("BEGIN")
        for name, sql in tables:
            out.execute(sql)
            _copy_table(src, out, name)
        for kind, _, sql in objects:
            if kind == "index":  # rows of two moments may repeat a unique value: not unique here
                out.execute(re.sub(r"^CREATE\s+UNIQUE\s+INDEX", "CREATE INDEX", sql, flags=re.I))
        out.execute("COMMIT")
    finally:
        src.close()
        out.close()


def estimate_vacuum_s(db: Path, scratch: Path, journal_mode: str) -> float | None:
    """Seconds a Hermes write would wait for the one-time VACUUM of ``db``, measured: the same
    ``auto_vacuum = INCREMENTAL`` + VACUUM timed on a copy, times :data:`VACUUM_MARGIN`, and
    Hermes's next try (:func:`hermes_wait_s`).
    None when no copy could be made and vacuumed (then no VACUUM beside Hermes: when unsure, wait).

    The copy never holds Hermes: in WAL mode one ``VACUUM INTO`` (readers block no writer), in a
    rollback journal :func:`_copy_rows` (the file's bytes copied in chunks, each under its own
    read lock, did not vacuum at 2 GB: pages allocated between two chunks). Timing the VACUUM
    itself, not the copy, made the estimate right at 2 GB (a copy's time times a factor was 1.7x
    short there).
    """
    folder = Path(tempfile.mkdtemp(prefix=ESTIMATE_PREFIX, dir=private_dir(scratch)))
    copy = folder / "copy.db"
    try:
        if journal_mode == "wal":
            conn = connect_ro(db, query_only=False)
            try:
                conn.execute("VACUUM INTO ?", (str(copy),))
            finally:
                conn.close()
        else:
            _copy_rows(db, copy)
        return hermes_wait_s(_timed_vacuum(copy, journal_mode) * VACUUM_MARGIN)
    except sqlite3.DatabaseError:  # busy past the timeout, a full disk, a copy that would not vacuum
        return None  # no measure: no VACUUM beside Hermes
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _timed_vacuum(copy: Path, journal_mode: str) -> float:
    """Seconds the one-time switch takes on ``copy``, in ``journal_mode`` as the original."""
    conn = connect_file(copy)
    try:
        conn.execute(f"PRAGMA journal_mode={'wal' if journal_mode == 'wal' else 'delete'}")
        conn.execute("PRAGMA auto_vacuum=INCREMENTAL")
        t0 = time.perf_counter()
        conn.execute("VACUUM")
        return time.perf_counter() - t0
    finally:
        conn.close()


def wait_quiet(db: Path, quiet_s: float, wait_s: float) -> bool:
    """Until no other connection has committed for ``quiet_s`` (``data_version``); False after ``wait_s``."""
    conn = connect_ro(db)
    try:
        deadline = time.monotonic() + wait_s
        version, since = None, time.monotonic()
        while time.monotonic() < deadline:
            now_version = conn.execute("PRAGMA data_version").fetchone()[0]
            if now_version != version:
                version, since = now_version, time.monotonic()
            elif time.monotonic() - since >= quiet_s:
                return True
            time.sleep(0.05)
        return False
    finally:
        conn.close()


def _live_vacuum_fits(
    profile: Place, res: ReclaimResult, info: SchemaInfo, limit: float, wait_idle_s: float | None
) -> str:
    """Why the one-time VACUUM may not run beside Hermes now ("" if it may): its estimated stall
    over ``limit`` (the policy's ``live_vacuum_stall``).

    It waits for a quiet moment first (up to ``wait_idle_s``, else :data:`QUIET_WAIT_S`), and
    goes ahead without one, saying so in ``res.note``."""
    if not limit:
        return "live_vacuum_stall = 0s"
    over = f"over live_vacuum_stall, {units.duration(limit)}"
    if hermes_wait_s(info.used_bytes / MAX_VACUUM_BYTES_PER_S * VACUUM_MARGIN) > limit:
        return f"a VACUUM of {units.size(info.used_bytes)} would stall Hermes's writes {over}"
    estimate = estimate_vacuum_s(profile.db_path, profile.keeper_dir, info.journal_mode)
    if estimate is None:
        return "its stall beside Hermes could not be measured (no copy to time it on: busy, disk, or damaged)"
    # Rounded once: the note says the figure the JSON gives (0.2504 s said "0.3" beside 0.25).
    res.vacuum_estimate_s = estimate = round(estimate, 2)
    if estimate > limit:
        return f"a VACUUM would stall Hermes's writes about {units.took(estimate)} ({over})"
    if not wait_quiet(profile.db_path, QUIET_S, QUIET_WAIT_S if wait_idle_s is None else wait_idle_s):
        # An always-on gateway never pauses: the stall is bounded by the estimate all the same,
        # and Hermes's writes wait it out inside their retries, so the file shrinks tonight.
        res.note = (
            f"Hermes did not pause writing for {units.duration(QUIET_S)}; the one-time VACUUM ran beside"
            f" it, a stall of its writes of about {units.took(estimate)}"
        )
    return ""


def _wal_step(
    profile: Place, w: Writer, schema: SchemaInfo, holders: list[Holder] | None, res: ReclaimResult
) -> bool:
    """The WAL after the work: truncated when a scan made here found nobody, else cut back
    (:func:`cut_wal`), unless the keeper may not checkpoint beside whoever holds it (:mod:`walreset`):
    then left as it is and said once in ``res.note``. False only when a cut did not get it small
    (the caller says so)."""
    db = profile.db_path
    if holders is not None and not holders:
        conn = connect_rw(db)
        try:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        finally:
            conn.close()
        return True
    guard = w.guard if w.guard.hands_off else wal_guard(db, schema.journal_mode, holders)
    if not guard.hands_off:
        return cut_wal(profile, w.budget)
    _say_hands_off(res, guard)
    return True


def _say_hands_off(res: ReclaimResult, guard: WalGuard) -> None:
    if guard.note() not in res.note:
        res.add_note(guard.note())


@dataclass(frozen=True)
class CompactTerms:
    """What a compact may do beyond merges and incremental vacuum: the one-time full VACUUM.

    ``standalone``: the ``compact`` command, which takes its own backup (into ``backup_dest``)
    before a VACUUM and looks for holders once more before truncating the WAL; a run's compact
    does neither (the run took the backup and scanned for holders).
    """

    standalone: bool = False
    allow_full_vacuum: bool = True
    #: the policy's ``live_vacuum_stall``: the most a VACUUM beside Hermes may stall its writes
    stall_limit_s: float = DEFAULT_LIVE_VACUUM_STALL_S
    wait_idle_s: float | None = None  # ``--wait-idle``: how long to wait for Hermes to let go
    backup_dest: str | None = None


def _convert(
    profile: Place, schema: SchemaInfo, res: ReclaimResult, journal: Journal | None, terms: CompactTerms
) -> list[Holder]:
    """The one-time full VACUUM that switches auto_vacuum to INCREMENTAL: when nobody holds the db,
    or beside Hermes when it fits (:func:`_live_vacuum_fits`); a backup first when ``standalone``.

    Returns the holders it found: the scan the VACUUM was decided on (again after a backup).
    """
    db = profile.db_path
    holders = find_holders(db)
    res.holders = [h.describe() for h in holders]
    info = schema.resized()
    reclaimable = f"{units.size(info.free_bytes)} reclaimable"
    later = (
        "the one-time switch to incremental auto_vacuum (a full VACUUM) runs "
        "when no process holds the database"
    )
    if not terms.allow_full_vacuum:
        res.note = f"{reclaimable}; full VACUUM not allowed, so {later}"
        return holders
    # The VACUUM's temporary copy; beside Hermes, first the estimate's copy and its VACUUM.
    need = 2 * info.used_bytes + RESERVE_BYTES
    if holders:
        need += info.used_bytes
    free = shutil.disk_usage(db.parent).free
    if free < need:
        res.note = (
            f"{reclaimable}; VACUUM needs about {units.size(need)} free and {units.size(free)} are; skipped"
        )
        return holders
    why_not = _live_vacuum_fits(profile, res, info, terms.stall_limit_s, terms.wait_idle_s) if holders else ""
    if why_not:
        res.note = f"{reclaimable}; {why_not}, so {later} (now held by {'; '.join(res.holders)})"
        return holders
    if terms.standalone and long_reads_stall_hermes(info.journal_mode, holders):
        # A snapshot would hold Hermes's commits for the whole copy; the VACUUM changes no row
        # and SQLite rolls it back whole on any failure, so it goes without one.
        no_backup = "no backup before it: a snapshot beside Hermes in this journal mode holds its writes"
        res.add_note(no_backup)
    elif terms.standalone:
        taken = take_backup(profile, terms.backup_dest, journal=journal, schema=info)
        res.backup = taken.name
        now = find_holders(db)  # the backup took a while: Hermes may have opened it since
        if now and not holders:
            res.note = f"{reclaimable}; Hermes opened the database just now, VACUUM skipped"
            return now
        holders = now
    guard = wal_guard(db, schema.journal_mode, holders)
    conn = connect_rw(db, busy_timeout_s=5)
    try:
        if guard.hands_off:  # the VACUUM's commit must not checkpoint beside Hermes either
            keep_out(conn)
            _say_hands_off(res, guard)
        else:
            conn.execute("PRAGMA wal_checkpoint(PASSIVE)" if holders else "PRAGMA wal_checkpoint(TRUNCATE)")
        conn.execute("PRAGMA auto_vacuum=INCREMENTAL")
        conn.execute("VACUUM")
    except sqlite3.Error as exc:
        if is_busy(exc):
            raise TryLater(f"VACUUM of {profile.name} found the database busy; nothing changed") from None
        raise KeeperError(
            f"VACUUM of {profile.name} failed ({exc}); SQLite rolled it back, no data changed"
        ) from None
    finally:
        conn.close()
    res.vacuumed = True
    return holders


def compact(
    profile: Place,
    *,
    budget: Budget | None = None,
    wait_idle_s: float | None = None,
    allow_full_vacuum: bool = True,
    journal: Journal | None = None,
    backup_dest: str | None = None,
    live_vacuum_stall_s: float = DEFAULT_LIVE_VACUUM_STALL_S,
) -> ReclaimResult:
    """FTS merges and incremental vacuum in budgeted steps; the one-time conversion when idle, or
    beside Hermes when its estimated stall fits ``live_vacuum_stall_s``, at a quiet moment.

    What runs depends on whether another process holds the database (after waiting up to
    ``wait_idle_s`` for it to let go): live, only Hermes-style FTS merges, no VACUUM, no WAL
    truncation; idle, a full FTS merge in steps, the VACUUM (after a backup) if still needed,
    WAL truncated. Its writes go in ``budget`` (the policy's).
    """
    t0 = time.perf_counter()
    schema = inspect(profile.db_path)
    schema.require_actionable()
    refuse_during_maintenance(schema)
    check = checked_unless_it_stalls(
        profile.fs, profile.db_path, schema.journal_mode, find_holders(profile.db_path)
    )
    if check is None:
        raise TryLater(
            f"{profile.db_path} has no quick_check on record, and a process holds it in"
            f" {schema.journal_mode} journal mode, where reading every page would hold its writes;"
            " compact changed nothing: run it when Hermes is stopped (or after a `plan` then)"
        )
    problem = check.result
    if problem != "ok":  # FTS merges and vacuum would write into damaged pages
        raise KeeperError(
            f"{profile.db_path} fails quick_check ({problem}); compact changed nothing. Restore a "
            "backup (hermes-keeper restore --latest) or let Hermes repair it"
        )
    # --wait-idle: give Hermes up to that long to stop, so the full work (VACUUM, FTS merge) can run.
    holders = _wait_idle(profile.db_path, wait_idle_s)
    live = bool(holders)
    terms = CompactTerms(
        standalone=True,
        allow_full_vacuum=allow_full_vacuum,
        stall_limit_s=live_vacuum_stall_s,
        wait_idle_s=wait_idle_s,
        backup_dest=backup_dest,
    )
    with Writer(profile.db_path, budget, guard=wal_guard(profile.db_path, schema.journal_mode, holders)) as w:
        return _compact(profile, w, schema, live, journal, terms, t0)


def compact_run(ctx: RunContext) -> ReclaimResult:
    """A run's last step, on the run's writer, schema and holder scan; its backup is the run's."""
    w = ctx.writer
    terms = CompactTerms(stall_limit_s=ctx.policy.live_vacuum_stall_s)
    return _compact(ctx.profile, w, ctx.schema.resized(w.conn), bool(ctx.holders()), ctx.journal, terms)


def _compact(
    profile: Place,
    w: Writer,
    schema: SchemaInfo,
    live: bool,
    journal: Journal | None,
    terms: CompactTerms,
    t0: float | None = None,
) -> ReclaimResult:
    """Merges and incremental vacuum through ``w``, which it then closes: a VACUUM must be the
    only connection of ours; then the one-time VACUUM on ``terms``. The WAL is truncated only
    when a scan made here found nobody.
    """
    t0 = time.perf_counter() if t0 is None else t0
    db = profile.db_path
    res = ReclaimResult(
        profile=profile.name,
        auto_vacuum_before=schema.auto_vacuum,
        auto_vacuum_after=schema.auto_vacuum,
        db_bytes_before=schema.db_bytes,
        db_bytes_after=0,
        wal_bytes_before=profile.wal_bytes(),
        wal_bytes_after=0,
        free_bytes_after=0,
        live=live,
    )
    w.conn.execute(f"PRAGMA journal_size_limit={WAL_LIMIT_BYTES}")
    release_leftover_hold(w, schema, profile.keeper_dir, journal)  # a killed run's, if any
    res.fts_merge_steps, res.fts_left = _merge_fts(w, schema, res.live)
    if schema.auto_vacuum == "incremental":
        res.pages_freed = _incremental(w)
    w.close()
    holders = None
    if schema.auto_vacuum == "none":
        holders = _convert(profile, schema, res, journal, terms)
    if res.live and terms.standalone:  # a run's hold just merged what its deletes left (MergeHold._release)
        res.add_note(
            "Hermes was running, so compact gave the FTS indexes only the merges Hermes itself "
            "would do; the index space of deleted messages comes back with the full merge a "
            "run does after its deletes, Hermes's own FTS optimize (every 1000 writes), or a "
            "compact while Hermes is stopped"
        )
    if holders is None and terms.standalone:
        holders = find_holders(db)
    cut = _wal_step(profile, w, schema, holders, res)
    after = schema.resized()
    res.auto_vacuum_after = after.auto_vacuum
    res.db_bytes_after = after.db_bytes
    res.free_bytes_after = after.free_bytes
    res.wal_bytes_after = profile.wal_bytes()
    if not cut:
        res.add_note(
            f"the WAL ({units.size(res.wal_bytes_after)}) was not cut back beside Hermes; it shrinks at"
            " the next run's compact or when Hermes closes"
        )
    res.seconds = round(time.perf_counter() - t0, 3)
    if journal:
        journal.write("compact", **res.to_dict())
    return res
