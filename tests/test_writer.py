"""The budgeted writer: busy-handler gaps, batch sizing, polite pauses, checkpoints, hooks."""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable

import pytest

from hermes_keeper import demo
from hermes_keeper.errors import TryLater
from hermes_keeper.sqlite import walreset, writer
from hermes_keeper.sqlite.holders import Holder
from hermes_keeper.sqlite.writer import AdaptiveBatch, Budget, Writer, busy_gap_ms, rest_ms

NOW = time.time()
CHECKPOINT_THREAD = "keeper-checkpoint"
HERMES = Holder(4242, "hermes", "hermes gateway run")


def _demo_db(tmp_path, sessions: int = 10):
    home = tmp_path / "home"
    demo.build_home(home, demo.generate(NOW, sessions=sessions))
    return home / "state.db"


def _insert(c: sqlite3.Connection, text: str = "writer test") -> None:
    sid = c.execute("SELECT id FROM sessions ORDER BY id LIMIT 1").fetchone()[0]
    c.execute(
        "INSERT INTO messages (session_id, role, content, timestamp) VALUES (?, 'user', ?, ?)",
        (sid, text, NOW),
    )


class Clock:
    """The writer's clock (``writer.time``), moved only by the writer's own sleeps and the steps'
    holds, and running what is due at each instant it reaches: the rest's arithmetic is checked to
    the poll, with no wall-clock window and no real wait."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.due: list[tuple[float, Callable[[], None]]] = []
        self.slept: list[float] = []  # the writer's sleeps (busy backoff, the caller's own work)

    def perf_counter(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds
        assert self.now < 1000.0 + 60, "the clock ran a minute: a wait that never ends"
        ready = [fn for at, fn in self.due if at <= self.now]
        self.due = [(at, fn) for at, fn in self.due if at > self.now]
        for fn in ready:
            fn()

    def at(self, ms_from_now: float, fn: Callable[[], None]) -> None:
        self.due.append((self.now + ms_from_now / 1000.0, fn))


@pytest.fixture
def clock(monkeypatch) -> Clock:
    c = Clock()
    monkeypatch.setattr(writer, "time", c)
    return c


def _hold(ms: float, clock: Clock | None = None):
    """A step that keeps the write lock ``ms`` milliseconds of ``clock``."""

    def fn(c: sqlite3.Connection) -> None:
        _insert(c)
        if ms:
            clock.now += ms / 1000.0

    return fn


def _commit_another(db) -> None:
    """Another connection writes, as a waiting Hermes writer would once it gets the lock."""
    c = sqlite3.connect(db, timeout=5, isolation_level=None)
    c.execute("BEGIN IMMEDIATE")
    _insert(c, "another writer")
    c.execute("COMMIT")
    c.close()


def _checkpoint_threads() -> int:
    return sum(1 for t in threading.enumerate() if t.name == CHECKPOINT_THREAD)


# --- busy_gap_ms: SQLite's default busy handler ---------------------------------------------------

# Delays 1,2,5,10,15,20,25,25,25,50,50,100 ms start after 0,1,3,8,18,33,53,78,103,128,178,228 ms
# of waiting; a writer that has waited t ms sleeps the delay whose start is the last one <= t.
BUSY = [
    (0, 1),
    (0.5, 1),
    (1, 2),
    (2.9, 2),
    (3, 5),
    (7.99, 5),
    (8, 10),
    (17, 10),
    (18, 15),
    (32, 15),
    (33, 20),
    (40, 20),
    (52.9, 20),
    (53, 25),
    (78, 25),
    (103, 25),
    (127, 25),
    (128, 50),
    (177, 50),
    (178, 50),
    (227.9, 50),
    (228, 100),
    (1000, 100),
    (5000, 100),
]


@pytest.mark.parametrize("waited, gap", BUSY)
def test_busy_gap_follows_sqlites_default_busy_handler(waited, gap):
    assert busy_gap_ms(waited) == gap


# --- AdaptiveBatch --------------------------------------------------------------------------------

# budget 64 ms x fill 0.5 = 32 ms aimed at; times chosen so every division is exact in binary.
BATCH = [
    # (description, AdaptiveBatch kwargs, units, elapsed ms, new size)
    ("fast step grows at most 2x", {}, 128, 1.0, 256),
    ("instant step grows at most 2x", {}, 128, 0.0, 256),
    ("a step at exactly the aim keeps its size", {}, 128, 32.0, 128),
    ("a step under the aim grows to the aim", {}, 128, 24.0, 170),  # 32 / (24/128) = 170.67
    ("a step over the aim but inside the budget shrinks to the aim", {}, 128, 48.0, 85),
    ("over budget: sized for that speed", {}, 128, 65.0, 63),
    ("barely over budget: no forced halving", {"fill": 1.0}, 128, 64.5, 127),
    ("far over budget: shrink to the aim", {}, 128, 512.0, 8),
    ("never below minimum", {"minimum": 10}, 128, 10_000.0, 10),
    ("never above maximum", {"maximum": 200}, 128, 1.0, 200),
    ("nothing recorded for zero units", {}, 0, 1.0, 128),
    ("partial step measured per unit", {}, 64, 32.0, 64),  # 0.5 ms/unit -> 64 units fill 32 ms
]


@pytest.mark.parametrize("desc, kw, units, elapsed, size", BATCH, ids=[b[0] for b in BATCH])
def test_adaptive_batch(desc, kw, units, elapsed, size):
    b = AdaptiveBatch(**({"budget_ms": 64.0, "size": 128, "fill": 0.5} | kw))
    b.record(units, elapsed)
    assert b.size == size


SEQUENCES = [
    # (description, [(units, elapsed ms)], sizes after each step); budget 64, fill 0.5 (aim 32 ms)
    ("a slower step inside the budget moves half way", [(128, 32.0), (128, 64.0)], [128, 85]),
    # 0.25 then 0.5 ms/unit: average 0.375 -> 32 / 0.375 = 85.3
    ("a step over the budget counts in full", [(128, 32.0), (128, 128.0)], [128, 32]),
    # 1 ms/unit over budget beats the average 0.625 -> 32 units
    ("one fast step after a slow one is averaged", [(64, 32.0), (128, 16.0)], [64, 102]),
    # 0.5 then 0.125 ms/unit: average 0.3125 -> 102, where the fast step alone would say 256
]


@pytest.mark.parametrize("desc, steps, sizes", SEQUENCES, ids=[q[0] for q in SEQUENCES])
def test_adaptive_batch_sequences(desc, steps, sizes):
    b = AdaptiveBatch(budget_ms=64.0, size=128, fill=0.5)
    seen = []
    for units, elapsed in steps:
        b.record(units, elapsed)
        seen.append(b.size)
    assert seen == sizes


def test_adaptive_batch_converges_on_the_aim_at_a_steady_speed():
    b = AdaptiveBatch(budget_ms=50.0, size=1, fill=0.6)
    sizes = []
    for _ in range(20):
        b.record(b.size, b.size * 0.01)  # 0.01 ms per unit
        sizes.append(b.size)
    assert sizes[:4] == [2, 4, 8, 16]  # doubling, never faster
    assert sizes[-1] == 3000 == int(50.0 * 0.6 / 0.01)


# --- the pause ------------------------------------------------------------------------------------


# A 240 ms hold is over the 1 ms budget: the rest after it is one full busy-handler gap after such a
# wait (100 ms) + 1 ms, counted from our commit and taken before our next transaction.
POLL_MS = writer.PAUSE_POLL_S * 1000.0


def test_rest_ends_soon_after_another_connection_commits(tmp_path, clock):
    db = _demo_db(tmp_path)
    others: list[float] = []

    def another_writer_in() -> None:
        _commit_another(db)
        others.append(clock.now)

    with Writer(db, Budget(budget_ms=1, pause_ms=200)) as w:
        w.step(_hold(240, clock))
        assert w.stats.last_txn_ms == pytest.approx(240) and busy_gap_ms(240) + 1 == 101
        clock.at(20, another_writer_in)  # 20 ms into the rest
        began: list[float] = []
        w.step(lambda c: began.append(clock.now))  # waits for the rest first
        assert others, "the other writer never committed"
        assert 20 <= w.stats.pause_ms <= 20 + POLL_MS, w.stats.pause_ms  # cut short, not 101 ms
        assert began[0] - others[0] <= POLL_MS / 1000.0  # the next step ran at the next poll


def test_rest_counts_from_the_commit(tmp_path, clock):
    """What the caller does between two steps counts toward the rest; nobody else writing, the
    rest lasts the whole gap."""
    db = _demo_db(tmp_path)
    with Writer(db, Budget(budget_ms=1, pause_ms=200)) as w:
        w.step(_hold(240, clock))
        w.step(_insert)
        assert 101 <= w.stats.pause_ms <= 101 + POLL_MS  # the whole gap
    with Writer(db, Budget(budget_ms=1, pause_ms=200)) as w:
        w.step(_hold(240, clock))
        clock.sleep(0.06045)  # the caller's own work after the commit (a poll lands 0.05 ms before the end)
        w.step(_insert)
        assert 101 - 60.45 <= w.stats.pause_ms <= 101 - 60.45 + POLL_MS, w.stats.pause_ms
    with Writer(db, Budget(budget_ms=1, pause_ms=200)) as w:
        w.step(_hold(240, clock))
        t0 = clock.now
    assert clock.now - t0 >= 0.101  # close() finishes the rest: the next writer waits


REST = [
    # (held ms, budget ms, pause_ms, rest ms): one busy gap of the hold + 1, at most pause_ms
    # while the hold stayed inside the budget, the whole gap when it overran.
    (60, 100, 30, 26),
    (11, 20, 30, 11),
    (60, 100, 5, 5),
    (40, 50, 25, 21),
    (0.5, 50, 25, 2),
    (140, 50, 25, 51),
    (300, 50, 25, 101),
    (60, 60, 5, 5),  # exactly the budget is inside it
]


@pytest.mark.parametrize("held, budget, pause, expected", REST)
def test_rest_after_a_hold(held, budget, pause, expected):
    assert rest_ms(held, budget, pause) == expected


def test_short_steps_share_one_rest(tmp_path, clock):
    db = _demo_db(tmp_path)
    with Writer(db, Budget(budget_ms=1000, pause_ms=30)) as w:
        for _ in range(5):
            w.step(_insert)
        assert w.stats.transactions == 5
        assert w.stats.pause_ms == 0  # far inside the budget: no rest at all


def test_no_pause_with_pause_ms_zero(tmp_path, clock):
    db = _demo_db(tmp_path)
    with Writer(db, Budget(budget_ms=1, pause_ms=0)) as w:
        w.step(_hold(20, clock))
        assert w.stats.over_budget == 1 and w.stats.pause_ms == 0


# --- connection settings, checkpoints, hooks -------------------------------------------------------


def test_synchronous_setting(tmp_path):
    db = _demo_db(tmp_path)
    plain = sqlite3.connect(db)
    default = plain.execute("PRAGMA synchronous").fetchone()[0]
    plain.close()
    assert default == 2  # FULL: SQLite's compiled-in default here
    with Writer(db) as w:
        assert w.conn.execute("PRAGMA synchronous").fetchone()[0] == default
    with Writer(db, synchronous="NORMAL") as w:
        assert w.conn.execute("PRAGMA synchronous").fetchone()[0] == 1
        w.step(_insert)
        assert w.conn.execute("PRAGMA synchronous").fetchone()[0] == 1  # not reset by a step


def test_checkpoint_thread_runs_on_wal_and_stops_on_close(tmp_path, monkeypatch):
    db = _demo_db(tmp_path)
    threads = _checkpoint_threads()
    stepped, checkpointed = threading.Event(), threading.Event()

    passive = writer.checkpoint_passive

    def checkpoint(
        conn: sqlite3.Connection,
    ):  # the thread's checkpoint, and a handshake once the steps are in
        done = passive(conn)
        if stepped.is_set():
            checkpointed.set()
        return done

    monkeypatch.setattr(writer, "checkpoint_passive", checkpoint)
    w = Writer(db, Budget(pause_ms=0))
    try:
        assert w.wal and _checkpoint_threads() == threads + 1
        # a daemon: a run that dies without closing its writer does not hang on it
        assert all(t.daemon for t in threading.enumerate() if t.name == CHECKPOINT_THREAD)
        for i in range(20):
            w.step(lambda c, i=i: _insert(c, f"checkpoint me {i}"))
        stepped.set()
        assert checkpointed.wait(10), "no checkpoint after the steps"
        # The checkpoints did their job: every committed frame is in the database file.
        c = sqlite3.connect(db)
        busy, log, done = c.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        c.close()
        assert busy == 0 and log == done
    finally:
        w.close()
    assert w.stats.checkpoints > 0
    assert _checkpoint_threads() == threads
    w.close()  # idempotent: nothing runs again on the closed connection


def test_delete_journal_database_gets_no_checkpoint_thread(tmp_path):
    db = _demo_db(tmp_path)
    c = sqlite3.connect(db)
    assert c.execute("PRAGMA journal_mode=DELETE").fetchone()[0] == "delete"
    c.close()
    threads = _checkpoint_threads()
    with Writer(db, Budget(pause_ms=0)) as w:
        assert not w.wal
        assert _checkpoint_threads() == threads
        for _ in range(5):
            w.step(_insert)
    assert w.stats.checkpoints == 0  # no thread, and none at close
    assert not (db.parent / "state.db-wal").exists()


def test_after_step_hooks_run_once_per_step_after_the_commit(tmp_path, clock):
    db = _demo_db(tmp_path)
    calls = []
    with Writer(db, Budget(budget_ms=1, pause_ms=2)) as w:
        reader = sqlite3.connect(db)
        start = reader.execute("SELECT count(*) FROM messages").fetchone()[0]

        def hook():
            # The step's transaction is committed and visible to others when the hook runs.
            assert not w.conn.in_transaction
            calls.append(reader.execute("SELECT count(*) FROM messages").fetchone()[0])

        w.after_step.append(hook)
        for ms in (0, 3, 0, 5, 0):  # some steps pause, some do not
            w.step(_hold(ms, clock))
        assert calls == [start + 1, start + 2, start + 3, start + 4, start + 5]
        assert w.stats.transactions == 5

        def boom(c):
            _insert(c)
            raise RuntimeError("step fails")

        with pytest.raises(RuntimeError):
            w.step(boom)
        assert len(calls) == 5 and w.stats.transactions == 5  # a failed step is no step
        assert reader.execute("SELECT count(*) FROM messages").fetchone()[0] == start + 5  # rolled back
        reader.close()


def test_step_returns_the_functions_result_and_feeds_the_batch(tmp_path):
    db = _demo_db(tmp_path)
    with Writer(db, Budget(budget_ms=50, pause_ms=0)) as w:
        b = w.batch(start=10)
        assert w.step(lambda c: c.execute("SELECT 42").fetchone()[0], b, units=10) == 42
        assert b.size == 20  # a fast step: doubled
        assert w.stats.transactions == 1 and w.stats.max_txn_ms == w.stats.last_txn_ms


def test_stats_split_the_commit_from_the_statements_and_keep_the_longest_step_of_each_kind(tmp_path, clock):
    """In DELETE mode a COMMIT waits for readers (it needs the EXCLUSIVE lock): that wait is lock time
    Hermes pays for, counted as commit time; each kind of step keeps its own longest transaction.

    The reader holds its SHARED lock until the step has read its clock before the COMMIT, moves the
    clock 200 ms and only then lets go: the COMMIT cannot end before that, so it counts the 200 ms."""
    db = _demo_db(tmp_path)
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA journal_mode=DELETE")
    conn.close()
    with Writer(db, Budget(budget_ms=50, pause_ms=0)) as w:
        w.step(_hold(0), kind="delete")
        w.step(_hold(0), kind="merge")
        reading, statements_done, committing, releasing = (threading.Event() for _ in range(4))
        read_clock = clock.perf_counter

        def perf_counter() -> float:  # the first read after the statements is the COMMIT's start
            if statements_done.is_set():
                committing.set()
            return read_clock()

        clock.perf_counter = perf_counter

        def reader() -> None:
            r = sqlite3.connect(db, isolation_level=None)
            r.execute("BEGIN")
            r.execute("SELECT count(*) FROM messages").fetchone()  # SHARED lock held from here
            reading.set()
            assert committing.wait(10)
            clock.now += 0.2  # the writer waits in its COMMIT, and reads the clock only after it
            releasing.set()
            r.execute("COMMIT")
            r.close()

        def step(c: sqlite3.Connection) -> None:
            _insert(c)
            statements_done.set()

        t = threading.Thread(target=reader)
        t.start()
        assert reading.wait(10)
        w.step(step, kind="delete")  # its COMMIT waits for the reader's lock to go
        assert releasing.is_set()  # the commit could only finish once the reader let go
        t.join()
        s = w.stats
        assert s.last_commit_ms == pytest.approx(200) and s.max_commit_ms == s.last_commit_ms
        assert s.last_txn_ms >= s.last_commit_ms
        assert s.max_ms["delete"] == s.last_txn_ms and s.max_ms["merge"] < s.max_ms["delete"]
        assert set(s.max_ms) == {"delete", "merge"}
        assert s.commit_ms == pytest.approx(200) and s.commit_ms <= s.total_txn_ms


@pytest.mark.parametrize("mode", ["delete", "wal"])
def test_a_read_of_ours_waits_for_a_step_only_in_rollback_mode(tmp_path, mode):
    """In DELETE mode a read of ours beside a step would hold the step's COMMIT (which needs the
    EXCLUSIVE lock) while Hermes waits behind it: ``reading()`` waits for the step. WAL: no wait."""
    db = _demo_db(tmp_path)
    conn = sqlite3.connect(db)
    conn.execute(f"PRAGMA journal_mode={mode}")
    start = conn.execute("SELECT count(*) FROM messages").fetchone()[0]
    conn.close()
    with Writer(db, Budget(budget_ms=50, pause_ms=0)) as w:
        inside, read, seen = threading.Event(), threading.Event(), []
        w._txn_lock = _SaysWhenWaitedFor(w._txn_lock)

        def reader() -> None:
            assert inside.wait(10)
            with w.reading():
                r = sqlite3.connect(db)
                seen.append(r.execute("SELECT count(*) FROM messages").fetchone()[0])
                r.close()
            read.set()

        def step(c: sqlite3.Connection) -> None:
            _insert(c)
            inside.set()
            # The step stays open until the read either went by (WAL) or waits for it (DELETE).
            assert (w._txn_lock.waited if mode == "delete" else read).wait(10)

        t = threading.Thread(target=reader)
        t.start()
        w.step(step)
        t.join()
    assert seen == [start + 1 if mode == "delete" else start]  # DELETE: only after the step committed


class _SaysWhenWaitedFor:
    """A lock that says when a thread other than the one that made it asks for it."""

    def __init__(self, lock) -> None:
        self.lock, self.owner, self.waited = lock, threading.get_ident(), threading.Event()

    def __enter__(self):
        if threading.get_ident() != self.owner:
            self.waited.set()
        return self.lock.__enter__()

    def __exit__(self, *exc):
        return self.lock.__exit__(*exc)


# --- the busy path, lock time across steps, defaults: on the injected clock ----------------------

H_MS = 1000 / 1024  # a hold of 1/1024 s: sums of these on the clock are exact in binary


def _busy(clock: Clock, tries: int, ms: float):
    """A step whose statements find the database busy ``tries`` times, ``ms`` into each try (as a
    DELETE-mode statement or commit that cannot get its lock does), then inserts."""
    left = [tries]

    def fn(c: sqlite3.Connection) -> None:
        if left[0]:
            left[0] -= 1
            clock.now += ms / 1000.0
            raise sqlite3.OperationalError("database is locked")
        _insert(c)

    return fn


def test_a_busy_database_is_tried_again_after_a_doubling_backoff(tmp_path, clock):
    db = _demo_db(tmp_path)
    with Writer(db, Budget(pause_ms=0)) as w:
        w.step(_busy(clock, 3, 10))
        assert clock.slept == pytest.approx([0.05, 0.1, 0.2])
        s = w.stats
        assert s.busy_retries == 3 and s.transactions == 1
        # the tries' own 10 ms each and the sleeps between them
        assert s.busy_wait_ms == pytest.approx(380) and s.max_busy_wait_ms == pytest.approx(380)
        w.step(_busy(clock, 1, 0))
        assert s.busy_retries == 4 and s.busy_wait_ms == pytest.approx(430)
        assert s.max_busy_wait_ms == pytest.approx(380)


def test_a_database_busy_past_busy_wait_stops_the_run(tmp_path, clock):
    db = _demo_db(tmp_path)
    with Writer(db, Budget(pause_ms=0, busy_wait_s=2.0)) as w:
        with pytest.raises(
            TryLater, match=r"write lock for 2 s; stopped where it was \(the next run resumes\)"
        ):
            w.step(_busy(clock, 1000, 0))
        assert clock.slept[:6] == pytest.approx([0.05, 0.1, 0.2, 0.4, 0.8, 0.45])  # the last one to 2 s
        assert sum(clock.slept) == pytest.approx(2.0) and w.stats.busy_wait_ms == pytest.approx(2000)
        assert w.stats.transactions == 0


def test_lock_time_adds_up_across_steps_to_one_rest(tmp_path, clock):
    """The rest comes once the lock was held more than a budget in a row, counted from the last rest."""
    db = _demo_db(tmp_path)
    with Writer(db, Budget(budget_ms=3 * H_MS, pause_ms=5)) as w:
        for _ in range(3):
            w.step(_hold(H_MS, clock))
        assert w.stats.pause_ms == 0  # two holds and the next: exactly the budget, not over it
        w.step(_hold(H_MS, clock))
        # three holds (2.9 ms) then one busy gap of such a wait (2 ms) + 1
        assert 3 <= w.stats.pause_ms <= 3 + POLL_MS, w.stats.pause_ms
        for _ in range(3):
            w.step(_hold(H_MS, clock))
        assert 6 <= w.stats.pause_ms <= 6 + 2 * POLL_MS, w.stats.pause_ms  # the second rest adds up


def test_step_defaults_and_the_longest_step_of_a_kind(tmp_path, clock):
    db = _demo_db(tmp_path)
    with Writer(db, Budget(budget_ms=16 * H_MS, pause_ms=0)) as w:
        assert w.batch() == AdaptiveBatch(budget_ms=16 * H_MS, size=50, fill=0.6)
        assert w.batch(fill=0.5).fill == 0.5
        b = w.batch(start=10)
        w.step(_hold(0, clock))
        assert w.stats.max_ms == {"write": 0.0}
        w.step(_hold(20 * H_MS, clock), b)  # one unit unless told
        assert b.ms_per_unit == pytest.approx(20 * H_MS)
        w.step(_hold(16 * H_MS, clock))  # exactly the budget: not over it
        w.step(_hold(17 * H_MS, clock))
        assert w.stats.max_ms == {"write": pytest.approx(20 * H_MS)} and w.stats.over_budget == 2


def test_the_checkpoint_thread_outlives_a_busy_checkpoint_and_counts_each_one(tmp_path, monkeypatch):
    db = _demo_db(tmp_path)
    passive, calls, more = writer.checkpoint_passive, [], threading.Event()

    def checkpoint(conn: sqlite3.Connection):
        if threading.current_thread().name != CHECKPOINT_THREAD:  # close()'s own: Hermes checkpoints too
            raise sqlite3.OperationalError("database is locked")
        calls.append(conn)
        if len(calls) == 1:
            raise sqlite3.OperationalError("database is locked")
        done = passive(conn)
        if len(calls) >= 3:
            more.set()
        return done

    monkeypatch.setattr(writer, "checkpoint_passive", checkpoint)
    w = Writer(db, Budget(pause_ms=0))
    try:
        w.step(_insert)
        assert more.wait(10), "the thread stopped at a busy checkpoint"
    finally:
        w.close()  # its own checkpoint found busy: closed all the same
    assert w.stats.checkpoints == len(calls) - 1  # each one that went through, once


def test_a_held_rollback_journal_database_is_not_taken_for_a_wal_one(tmp_path, hold_open, vulnerable_sqlite):
    """The WAL-reset guard is for WAL databases: beside a holder of a DELETE-mode one (and a SQLite
    with the bug) the writer does not say it keeps its hands off (``archive restore`` would warn)."""
    db = _demo_db(tmp_path)
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA journal_mode=DELETE")
    conn.close()
    hold_open(db, via_hermes=False)
    with Writer(db, Budget(pause_ms=0)) as w:
        assert not w.wal and not w.guard.hands_off


def test_lock_and_commit_time_add_up_over_steps(tmp_path, clock):
    """Each step's COMMIT takes 3 ms of the clock here (it moves once the step has read the clock
    after its statements): the totals are sums, the maxima and last values per step."""
    db = _demo_db(tmp_path)
    statements_done = threading.Event()
    read_clock = clock.perf_counter

    def perf_counter() -> float:
        now = read_clock()
        if statements_done.is_set():  # the step's clock before its COMMIT: the COMMIT takes 3 ms
            statements_done.clear()
            clock.now += 0.003
        return now

    clock.perf_counter = perf_counter

    def step(c: sqlite3.Connection) -> None:
        _insert(c)
        clock.now += 0.002
        statements_done.set()

    with Writer(db, Budget(budget_ms=50, pause_ms=0)) as w:
        w.step(step)
        w.step(step)
    s = w.stats
    assert (s.commit_ms, s.max_commit_ms, s.last_commit_ms) == pytest.approx((6, 3, 3))
    assert (s.total_txn_ms, s.max_txn_ms, s.last_txn_ms) == pytest.approx((10, 5, 5))


def test_beside_a_holder_on_a_vulnerable_sqlite_a_wal_writer_keeps_out_of_checkpoints(
    tmp_path, monkeypatch, vulnerable_sqlite
):
    """The holder scan faked (no process started): the WAL database is named to the guard as WAL,
    and the writer then neither starts its checkpoint thread nor checkpoints at commit or close."""
    db = _demo_db(tmp_path)
    asked = []
    monkeypatch.setattr(walreset, "find_holders", lambda path: asked.append(path) or [HERMES])
    threads = _checkpoint_threads()
    with Writer(db, Budget(pause_ms=0)) as w:
        assert asked == [db] and w.wal and w.guard.hands_off and w.guard.holders == (HERMES.describe(),)
        assert not w.may_checkpoint and _checkpoint_threads() == threads
        assert w.conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 0
        w.step(_insert)
    assert w.stats.checkpoints == 0


@pytest.mark.parametrize("lowering", ["missing", "refused"])
def test_a_helper_thread_runs_at_its_priority_where_it_cannot_lower_it(monkeypatch, lowering):
    """Elsewhere than Linux ``os.setpriority`` may be missing, or refuse a thread: nothing changes,
    no error reaches the thread (its checkpoints or its archiving go on)."""
    if lowering == "missing":
        monkeypatch.delattr(writer.os, "setpriority")
    else:

        def refused(*_):
            raise PermissionError(1, "Operation not permitted")

        monkeypatch.setattr(writer.os, "setpriority", refused)
    assert writer.background_thread() is None
