"""The one path for writes to a live ``state.db``: short, budgeted, polite transactions.

Hermes writers take ``BEGIN IMMEDIATE`` with a 1 s busy timeout and retry up to 15
times, so a write lock held for more than ~15 s loses a message. Every keeper write
goes through :class:`Writer`: one transaction per step, each sized by
:class:`AdaptiveBatch` to stay inside a time budget (default 50 ms), a pause between
steps so Hermes's writers get the lock, and a PASSIVE checkpoint every few steps so
the WAL stays small.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from .db import checkpoint_passive, connect_rw, write_txn

T = TypeVar("T")

DEFAULT_BUDGET_MS = 50.0
DEFAULT_PAUSE_MS = 20.0
CHECKPOINT_EVERY = 8


@dataclass
class AdaptiveBatch:
    """How many units (messages, pages, rows) fit in one transaction of ``budget_ms``.

    Starts small, grows while steps finish well inside the budget, shrinks hard when
    one runs over: the next transaction is sized from the last one's measured speed.
    """

    budget_ms: float = DEFAULT_BUDGET_MS
    size: int = 50
    minimum: int = 1
    maximum: int = 20_000

    def record(self, units: int, elapsed_ms: float) -> None:
        if units <= 0:
            return
        per_unit = max(elapsed_ms, 0.01) / units
        target = int((self.budget_ms * 0.6) / per_unit)
        # Grow at most 2x after a step inside the budget; at least halve after one over it.
        cap = self.size // 2 if elapsed_ms > self.budget_ms else self.size * 2
        target = min(target, cap)
        self.size = max(self.minimum, min(self.maximum, target))


@dataclass
class WriterStats:
    transactions: int = 0
    max_txn_ms: float = 0.0
    total_txn_ms: float = 0.0
    over_budget: int = 0
    checkpoints: int = 0
    last_txn_ms: float = 0.0


class Writer:
    """A connection to ``state.db`` that only writes in budgeted steps."""

    def __init__(
        self,
        db_path: Path,
        budget_ms: float = DEFAULT_BUDGET_MS,
        pause_ms: float = DEFAULT_PAUSE_MS,
        checkpoint_every: int = CHECKPOINT_EVERY,
    ):
        self.db_path = Path(db_path)
        self.conn: sqlite3.Connection = connect_rw(self.db_path)
        self.budget_ms = budget_ms
        self.pause_ms = pause_ms
        self.checkpoint_every = checkpoint_every
        self.stats = WriterStats()
        self._held_ms = 0.0  # lock time since the last pause
        self.wal = self.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"

    def batch(self, start: int = 50) -> AdaptiveBatch:
        return AdaptiveBatch(budget_ms=self.budget_ms, size=start)

    def step(
        self, fn: Callable[[sqlite3.Connection], T], batch: AdaptiveBatch | None = None, units: int = 1
    ) -> T:
        """Run ``fn`` in one ``BEGIN IMMEDIATE`` transaction, then pause; ``units`` feeds ``batch``."""
        t0 = time.perf_counter()
        with write_txn(self.conn):
            result = fn(self.conn)
        elapsed = (time.perf_counter() - t0) * 1000.0
        s = self.stats
        s.transactions += 1
        s.total_txn_ms += elapsed
        s.max_txn_ms = max(s.max_txn_ms, elapsed)
        s.last_txn_ms = elapsed
        if elapsed > self.budget_ms:
            s.over_budget += 1
        if batch is not None:
            batch.record(units, elapsed)
        if self.wal and s.transactions % self.checkpoint_every == 0:
            checkpoint_passive(self.conn)
            s.checkpoints += 1
        self._held_ms += elapsed
        if self.pause_ms and self._held_ms >= self.budget_ms:
            # Rest once the lock has been held about a budget since the last rest. A waiting
            # Hermes writer (SQLite's busy handler) polls at most 25 ms apart during its first
            # 128 ms, so a window of ~pause_ms after each budget's worth of holding lets it in
            # within a cycle or two; a run of tiny steps pays one pause, not one each.
            time.sleep(self.pause_ms / 1000.0)
            self._held_ms = 0.0
        return result

    def close(self) -> None:
        if self.wal:
            checkpoint_passive(self.conn)
        self.conn.close()

    def __enter__(self) -> Writer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
