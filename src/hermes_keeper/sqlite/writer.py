"""The one path for writes to a live ``state.db``: short, budgeted, polite transactions.

Hermes writers take ``BEGIN IMMEDIATE`` with a 1 s busy timeout and retry up to 15
times, so a write lock held for more than ~15 s loses a message. Every keeper write
goes through :class:`Writer`: one transaction per step, each sized by
:class:`AdaptiveBatch` to stay inside a time budget (default 50 ms), a pause after each
budget's worth of lock time so Hermes's writers get in, and PASSIVE checkpoints from a
thread of their own so the WAL Hermes checkpoints in its own write path stays small (none at
all where the keeper's SQLite has the WAL-reset bug and Hermes holds the database:
:mod:`walreset`).

The gateway goes first: a database another process keeps busy (Hermes's own FTS5
'optimize', every 1,000 of its writes, holds the lock for seconds on a big home) is waited
for with backoff, and one that stays busy past ``busy_wait_s`` stops the run cleanly
(:class:`~hermes_keeper.errors.TryLater`), with every step before it committed. The three
numbers travel together as one :class:`Budget`.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from hermes_keeper.errors import TryLater
from hermes_keeper.sqlite.connect import checkpoint_passive, connect_rw, is_busy, write_txn
from hermes_keeper.sqlite.walreset import WalGuard, keep_out, wal_guard

T = TypeVar("T")

DEFAULT_BUDGET_MS = 50.0
DEFAULT_PAUSE_MS = 25.0
#: How long a step waits for a busy database in all before the run stops (exit 75). Hermes's own
#: FTS5 'optimize' held the lock 8.7 s on a 2 GB home and 34.7 s on a 5 GB one.
DEFAULT_BUSY_WAIT_S = 120.0
#: Sleeps between two tries at a busy database (each try also waits ``BUSY_TIMEOUT_S`` in SQLite):
#: doubling from the first to the last.
BUSY_BACKOFF_S = (0.05, 1.0)
#: How often the checkpoint thread copies committed WAL frames into the database.
CHECKPOINT_INTERVAL_S = 0.1
#: While pausing, how often we look whether a waiting writer has been in (``data_version``).
PAUSE_POLL_S = 0.0005
#: SQLite's default busy handler (what ``sqlite3.connect(timeout=...)`` and so Hermes use): after
#: waiting ``sum(BUSY_DELAYS_MS[:i])`` ms a writer sleeps ``BUSY_DELAYS_MS[i]`` ms before trying again.
BUSY_DELAYS_MS = (1, 2, 5, 10, 15, 20, 25, 25, 25, 50, 50, 100)


@dataclass(frozen=True)
class Budget:
    """How a :class:`Writer` shares ``state.db`` with Hermes: the policy's ``budget_ms``,
    ``pause_ms`` and ``busy_wait`` (``Policy.budget``), the defaults here."""

    budget_ms: float = DEFAULT_BUDGET_MS  # the longest one write transaction should hold the lock
    pause_ms: float = DEFAULT_PAUSE_MS  # the longest rest after a budget's worth of lock time
    busy_wait_s: float = DEFAULT_BUSY_WAIT_S  # waiting this long for a busy database in all: TryLater


def rest_ms(held_ms: float, budget_ms: float, pause_ms: float) -> float:
    """How long to rest after holding the lock ``held_ms``: one busy-handler gap of that wait
    (so any writer that queued meanwhile tries again inside the rest), at most ``pause_ms``
    unless the hold overran the budget."""
    gap = busy_gap_ms(held_ms) + 1.0
    return gap if held_ms > budget_ms else min(pause_ms, gap)


#: ``nice`` of helper threads (archiving ahead, checkpoints) against the lock-holding thread.
BACKGROUND_NICE = 10


def background_thread() -> None:
    """Lower the calling thread's CPU priority (on Linux ``nice`` is per thread).

    For helper threads whose work can wait: on a small machine the thread that holds the
    write lock, and Hermes's own writers, get the CPU first. Elsewhere, nothing changes.
    """
    with contextlib.suppress(AttributeError, OSError):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), BACKGROUND_NICE)


def busy_gap_ms(waited_ms: float) -> float:
    """The longest a writer that has waited up to ``waited_ms`` sleeps before its next try."""
    total = 0.0
    for delay in BUSY_DELAYS_MS:
        total += delay
        if waited_ms < total:
            return delay
    return BUSY_DELAYS_MS[-1]


@dataclass
class AdaptiveBatch:
    """How many units (messages, pages, rows) fit in one transaction of ``budget_ms``.

    Starts small and sizes each step from the speed seen so far: a moving average of the
    time per unit (steps vary), except that a step over the budget counts in full, so the
    next one is at once sized for the slower speed. Grows at most 2x a step. (Halving after
    every overrun instead made sizes swing between half and full and paid for more steps.)
    """

    budget_ms: float = DEFAULT_BUDGET_MS
    size: int = 50
    minimum: int = 1
    maximum: int = 20_000
    fill: float = 0.6  # aim at this share of the budget: the next step may be slower than the last
    smoothing: float = 0.5  # weight of the newest step in the average
    ms_per_unit: float | None = None

    def record(self, units: int, elapsed_ms: float) -> None:
        if units <= 0:
            return
        rate = max(elapsed_ms, 0.01) / units
        avg = self.ms_per_unit
        avg = rate if avg is None else self.smoothing * rate + (1 - self.smoothing) * avg
        if elapsed_ms > self.budget_ms:
            avg = max(avg, rate)
        self.ms_per_unit = avg
        target = min(int(self.budget_ms * self.fill / avg), self.size * 2)
        self.size = max(self.minimum, min(self.maximum, target))


@dataclass
class WriterStats:
    transactions: int = 0
    max_txn_ms: float = 0.0
    total_txn_ms: float = 0.0
    over_budget: int = 0
    checkpoints: int = 0
    last_txn_ms: float = 0.0
    pause_ms: float = 0.0  # total time spent resting for other writers
    busy_retries: int = 0  # tries that found the database busy
    busy_wait_ms: float = 0.0  # time spent waiting for it
    max_busy_wait_ms: float = 0.0  # the longest wait of one step
    commit_ms: float = 0.0  # of the lock time, the COMMITs' (DELETE mode: journal and database fsynced)
    max_commit_ms: float = 0.0
    last_commit_ms: float = 0.0
    #: the longest transaction of each kind of step ("delete", "merge", "write"): where a stall comes from
    max_ms: dict[str, float] = field(default_factory=dict)


class _Checkpointer(threading.Thread):
    """PASSIVE checkpoints every :data:`CHECKPOINT_INTERVAL_S` on a connection of its own.

    Hermes checkpoints every 50 of its writes, inside the write call a gateway waits on:
    whatever our transactions left in the WAL since the last checkpoint is copied then. A
    thread that keeps the backlog small keeps that copy short, and our lock-holding thread
    never waits on the disk for it. PASSIVE never blocks or waits for any writer.
    """

    def __init__(self, db_path: Path, stats: WriterStats):
        super().__init__(name="keeper-checkpoint", daemon=True)
        self.db_path, self.stats = db_path, stats
        self.stop = threading.Event()

    def run(self) -> None:
        background_thread()
        conn = connect_rw(self.db_path)
        try:
            while not self.stop.wait(CHECKPOINT_INTERVAL_S):
                try:
                    checkpoint_passive(conn)
                except sqlite3.OperationalError as exc:  # busy: the next interval tries again
                    if not is_busy(exc):
                        raise
                    continue
                self.stats.checkpoints += 1
        finally:
            conn.close()


class Writer:
    """A connection to ``state.db`` that only writes in budgeted steps.

    ``synchronous="NORMAL"`` where every change can be redone from the archive or the plan
    (a prune: the deleted rows sit verified in archive.db first): commits then skip the WAL
    fsync that would otherwise be paid while holding the lock. The database stays consistent
    after a power cut; only the last commits may be undone, and the next run redoes them.

    ``guard``: whether it may checkpoint (:func:`walreset.wal_guard` on the caller's holder scan;
    None: decided here). When :attr:`WalGuard.hands_off`, it never checkpoints (no thread, none
    at close, autocheckpoint off).
    """

    def __init__(
        self,
        db_path: Path,
        budget: Budget | None = None,
        synchronous: str | None = None,
        guard: WalGuard | None = None,
    ):
        self.db_path = Path(db_path)
        self.conn: sqlite3.Connection = connect_rw(self.db_path)
        self.budget = budget or Budget()
        self.stats = WriterStats()
        self.closed = False
        self._held_ms = 0.0  # lock time since the last pause
        self._rest_due: tuple[float, int] | None = None  # (until, data_version at our commit)
        self.wal = self.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        self.guard = guard or wal_guard(self.db_path, "wal" if self.wal else "other")
        if self.guard.hands_off:
            keep_out(self.conn)
        self._txn_lock = threading.Lock()  # rollback modes: our steps and our own reads, one at a time
        if synchronous:
            self.conn.execute(f"PRAGMA synchronous={synchronous}")
        #: Called after every step (e.g. :meth:`fts.MergeHold.tick`, which merges when due).
        self.after_step: list[Callable[[], None]] = []
        self.may_checkpoint = self.wal and not self.guard.hands_off
        self._checkpointer = _Checkpointer(self.db_path, self.stats) if self.may_checkpoint else None
        if self._checkpointer:
            self._checkpointer.start()

    def batch(self, start: int = 50, fill: float = 0.6) -> AdaptiveBatch:
        return AdaptiveBatch(budget_ms=self.budget.budget_ms, size=start, fill=fill)

    def step(
        self,
        fn: Callable[[sqlite3.Connection], T],
        batch: AdaptiveBatch | None = None,
        units: int = 1,
        kind: str = "write",
    ) -> T:
        """Run ``fn`` in one ``BEGIN IMMEDIATE`` transaction; ``units`` feeds ``batch`` (with the
        whole hold, COMMIT included); ``kind`` names the step in :attr:`WriterStats.max_ms`.

        A rest the previous step left due is finished first (:meth:`_rest`). ``fn`` may run
        again after a rollback (:meth:`_transaction`): it changes nothing but the database.
        """
        self._rest()
        result, elapsed = self._transaction(fn)
        s = self.stats
        s.transactions += 1
        s.total_txn_ms += elapsed
        s.max_txn_ms = max(s.max_txn_ms, elapsed)
        s.last_txn_ms = elapsed
        s.max_ms[kind] = max(s.max_ms.get(kind, 0.0), elapsed)
        b = self.budget
        if elapsed > b.budget_ms:
            s.over_budget += 1
        if batch is not None:
            batch.record(units, elapsed)
        self._held_ms += elapsed
        # Rest before the lock would be held a budget in a row (the next step is likely as long).
        if b.pause_ms and self._held_ms + elapsed > b.budget_ms:
            ms = rest_ms(self._held_ms, b.budget_ms, b.pause_ms)
            version = self.conn.execute("PRAGMA data_version").fetchone()[0]
            self._rest_due = (time.perf_counter() + ms / 1000.0, version)
            self._held_ms = 0.0
        for hook in self.after_step:
            hook()
        return result

    def _transaction(self, fn: Callable[[sqlite3.Connection], T]) -> tuple[T, float]:
        """``fn`` in one write transaction: (its result, ms the lock was held, the wait excluded).

        Busy (the lock not had within ``BUSY_TIMEOUT_S``, or a DELETE-mode statement or commit
        that could not get it): rolled back, a backoff sleep, and again, until ``busy_wait_s``
        of waiting in all, then :class:`TryLater`.
        """
        waited, delay = 0.0, BUSY_BACKOFF_S[0]
        while True:
            tried = time.perf_counter()
            try:
                with self.reading(), write_txn(self.conn):
                    t0 = time.perf_counter()  # the lock is ours from here
                    result = fn(self.conn)
                    t1 = time.perf_counter()
                t2 = time.perf_counter()
                self._waited(waited + t0 - tried)
                self._committed((t2 - t1) * 1000.0)
                return result, (t2 - t0) * 1000.0
            except sqlite3.OperationalError as exc:
                if not is_busy(exc):
                    raise
                waited += time.perf_counter() - tried
                if waited >= self.budget.busy_wait_s:
                    self._waited(waited)
                    raise TryLater(
                        f"{self.db_path}: another process held the database's write lock for"
                        f" {waited:.0f} s; stopped where it was (the next run resumes)"
                    ) from None
            self.stats.busy_retries += 1
            sleep = min(delay, self.budget.busy_wait_s - waited)
            time.sleep(sleep)
            waited += sleep
            delay = min(delay * 2, BUSY_BACKOFF_S[1])

    @contextmanager
    def reading(self) -> Iterator[None]:
        """Around a read this process makes on another connection to the database (the archiver's).

        In a rollback-journal database our COMMIT needs the EXCLUSIVE lock, so a read of ours
        running beside a step would hold that step's commit (and Hermes, waiting behind our
        RESERVED lock) for as long as the read lasts, plus a busy-handler sleep. So there the read
        waits for the step and the step for the read. (WAL readers block no one: no wait.)
        """
        if self.wal:
            yield
            return
        with self._txn_lock:
            yield

    def _committed(self, ms: float) -> None:
        s = self.stats
        s.last_commit_ms = ms
        s.commit_ms += ms
        s.max_commit_ms = max(s.max_commit_ms, ms)

    def _waited(self, seconds: float) -> None:
        if seconds > 0.001:  # more than taking a free lock costs
            self.stats.busy_wait_ms += seconds * 1000.0
            self.stats.max_busy_wait_ms = max(self.stats.max_busy_wait_ms, seconds * 1000.0)

    def _rest(self) -> None:
        """Let a writer that waited for our lock get it before we take the lock again.

        A waiting Hermes writer sits in SQLite's busy handler, which tries again after
        :func:`busy_gap_ms` of its wait so far, and that wait is at most our hold: a rest one
        such gap long (at most ``pause_ms`` after a hold inside the budget) lets it in. The
        rest starts at our commit, so whatever the caller does between two steps (archive
        bookkeeping, journal lines, merges' structure reads) counts toward it. Nothing shows
        that a writer is waiting, but one that got in shows afterwards: ``data_version``
        changes when another connection commits, and then the rest has done its job. A run of
        tiny steps pays one rest, not one each.
        """
        if self._rest_due is None:
            return
        deadline, version = self._rest_due
        self._rest_due = None
        t0 = time.perf_counter()
        while time.perf_counter() < deadline:
            if self.conn.execute("PRAGMA data_version").fetchone()[0] != version:
                break
            time.sleep(PAUSE_POLL_S)
        self.stats.pause_ms += (time.perf_counter() - t0) * 1000.0

    def close(self) -> None:
        """Idempotent: a run's last step (compact) closes it before a VACUUM, the run's ``with`` again."""
        if self.closed:
            return
        self.closed = True
        self._rest()  # whoever writes next (another Writer of ours, say) lets a waiting writer in first
        if self._checkpointer:
            self._checkpointer.stop.set()
            self._checkpointer.join()
        if self.may_checkpoint:
            with contextlib.suppress(sqlite3.OperationalError):  # busy: Hermes checkpoints too
                checkpoint_passive(self.conn)
        self.conn.close()

    def __enter__(self) -> Writer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
