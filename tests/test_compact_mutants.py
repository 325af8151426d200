"""compact's edges, each where a one-token change (a mutant, ``tools/mutate.py``) would move it.

A run's compact (:func:`compact.compact_run`): its ``live`` from the run's holder scan, its
journal record, the policy's ``live_vacuum_stall``. The estimate's copy of a rollback-journal
database (:func:`compact._copy_rows`): every row, and reads sized from the time of the one
before. So that each surviving mutant of ``run/compact.py`` fails here or is explained as
equivalent in ``docs/testing.md``. Small databases, a fake clock.
"""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path
from types import SimpleNamespace

import pytest

from hermes_keeper import demo, units
from hermes_keeper.backup.snapshot import RESERVE_BYTES
from hermes_keeper.errors import KeeperError, TryLater
from hermes_keeper.facts import Check
from hermes_keeper.home import select_profiles
from hermes_keeper.journal import Journal, read_journal
from hermes_keeper.model.policy import Policy
from hermes_keeper.place import Place
from hermes_keeper.run import compact as compact_mod
from hermes_keeper.run.context import open_run
from hermes_keeper.sqlite import walreset
from hermes_keeper.sqlite import writer as writer_mod
from hermes_keeper.sqlite.holders import Holder
from hermes_keeper.sqlite.schema import inspect
from hermes_keeper.sqlite.writer import Budget, Writer

TABLES = (
    "CREATE TABLE s (id TEXT PRIMARY KEY, n INTEGER)",
    "CREATE TABLE w (a TEXT, b INTEGER, v TEXT, PRIMARY KEY (b, a)) WITHOUT ROWID",
    "CREATE UNIQUE INDEX s_n ON s (n)",
    "create unique index w_v on w (v, b)",  # SQLite keeps it as "CREATE UNIQUE INDEX w_v ..."
)


def _db(path, rows):
    conn = sqlite3.connect(path, isolation_level=None)
    for sql in TABLES:
        conn.execute(sql)
    conn.execute("BEGIN")
    conn.executemany("INSERT INTO s VALUES (?, ?)", ((f"s{i}", i) for i in range(rows)))
    conn.executemany("INSERT INTO w VALUES (?, ?, ?)", ((f"a{i % 7}", i, "x" * (i % 5)) for i in range(rows)))
    conn.execute("COMMIT")
    conn.close()


def _rows(path):
    conn = sqlite3.connect(path)
    try:
        return [sorted(conn.execute(f"SELECT * FROM {t}").fetchall()) for t in ("s", "w")]
    finally:
        conn.close()


def test_the_estimate_copy_holds_every_row_of_rowid_and_without_rowid_tables(tmp_path):
    _db(tmp_path / "state.db", 1000)  # over the first read's 200 rows: several reads a table
    compact_mod._copy_rows(tmp_path / "state.db", tmp_path / "copy.db")
    assert _rows(tmp_path / "copy.db") == _rows(tmp_path / "state.db")


def test_the_estimate_copy_has_the_indexes_none_of_them_unique(tmp_path):
    """Its rows may be of different moments and repeat a unique value: the indexes are built
    after the rows, each as a plain one."""
    _db(tmp_path / "state.db", 50)
    compact_mod._copy_rows(tmp_path / "state.db", tmp_path / "copy.db")
    conn = sqlite3.connect(tmp_path / "copy.db")
    try:
        indexes = {r[1]: r[2] for t in ("s", "w") for r in conn.execute(f"PRAGMA index_list({t})")}
    finally:
        conn.close()
    assert {name: unique for name, unique in indexes.items() if not name.startswith("sqlite_")} == {
        "s_n": 0,
        "w_v": 0,
    }


class _Reads:
    """A connection whose reads are recorded: each ``LIMIT`` the copy asked for."""

    def __init__(self, conn):
        self.conn, self.limits = conn, []

    def execute(self, sql, params=()):
        if "LIMIT ?" in sql:
            self.limits.append(params[-1])
        return self.conn.execute(sql, params)


def test_each_read_is_sized_from_the_time_of_the_one_before(tmp_path, monkeypatch):
    """At 1/32 s (31.25 ms) a read, over :data:`COPY_STEP_MS` (20 ms), each read asks for
    20/31.25 of the rows of the one before, down to 10; the clock starts far from 0."""
    _db(tmp_path / "state.db", 600)
    ticks = iter(1024 + n / 32 for n in range(10_000))
    monkeypatch.setattr(compact_mod.time, "perf_counter", lambda: next(ticks))
    src, out = sqlite3.connect(tmp_path / "state.db"), sqlite3.connect(tmp_path / "copy.db")
    out.execute(TABLES[0])
    reads = _Reads(src)
    compact_mod._copy_table(reads, out, "s")
    assert reads.limits[:7] == [200, 128, 81, 51, 32, 20, 12]
    assert set(reads.limits[7:]) == {10}
    assert out.execute("SELECT count(*) FROM s").fetchone()[0] == 600


def _run_compact(home):
    profile = select_profiles(home)[0]
    with Journal(profile.keeper_dir) as journal, open_run(profile, Policy(), journal=journal) as ctx:
        res = compact_mod.compact_run(ctx)
    return res, [r for r in read_journal(profile.keeper_dir) if r["action"] == "compact"]


def test_a_runs_compact_with_nobody_holding_the_database_converts_and_journals_it(hermes_home, tmp_path):
    home = hermes_home(tmp_path / "home", sessions=6)
    res, records = _run_compact(home)
    assert res.live is False and res.auto_vacuum_after == "incremental"
    assert [r["live"] for r in records] == [False]


def test_a_runs_compact_beside_hermes_is_live_and_converts_within_the_policys_stall(
    hermes_home, tmp_path, hold_open
):
    """The run's holder scan makes it live; the small database's VACUUM fits the default
    ``live_vacuum_stall`` (a stall limit of none would be "0s": no VACUUM beside Hermes)."""
    home = hermes_home(tmp_path / "home", sessions=6)
    hold_open(home / "state.db")
    res, records = _run_compact(home)
    assert res.live is True and res.holders
    assert res.auto_vacuum_after == "incremental", res.note
    assert [r["live"] for r in records] == [True]


def test_fast_reads_grow_fourfold_up_to_the_most_rows_a_read(tmp_path, monkeypatch):
    """Reads that take no time: each asks for four times the rows of the one before, up to
    :data:`COPY_MAX_ROWS` (made 1000 here)."""
    _db(tmp_path / "state.db", 3000)
    monkeypatch.setattr(compact_mod.time, "perf_counter", lambda: 1024.0)
    monkeypatch.setattr(compact_mod, "COPY_MAX_ROWS", 1000)
    src, out = sqlite3.connect(tmp_path / "state.db"), sqlite3.connect(tmp_path / "copy.db")
    out.execute(TABLES[0])
    reads = _Reads(src)
    compact_mod._copy_table(reads, out, "s")
    assert reads.limits == [200, 800, 1000, 1000, 1000]
    assert out.execute("SELECT count(*) FROM s").fetchone()[0] == 3000


def test_incremental_vacuum_frees_and_counts_every_free_page(tmp_path):
    db = tmp_path / "state.db"
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("PRAGMA auto_vacuum=INCREMENTAL")
    conn.execute("CREATE TABLE t (x)")
    conn.execute("BEGIN")  # one transaction: a commit each would fsync each
    conn.executemany("INSERT INTO t VALUES (?)", (("x" * 1000,) for _ in range(300)))
    conn.execute("COMMIT")
    conn.execute("DELETE FROM t")
    free = conn.execute("PRAGMA freelist_count").fetchone()[0]
    conn.close()
    with Writer(db, Budget(pause_ms=0)) as w:
        assert compact_mod._incremental(w) == free > 0
    assert _count_free(db) == 0


def _count_free(db):
    conn = sqlite3.connect(db)
    try:
        return conn.execute("PRAGMA freelist_count").fetchone()[0]
    finally:
        conn.close()


# --- The WAL cut-back (cut_wal), in-process: a held connection stands for Hermes -----------------


class Clock:
    """A module's ``time``: it moves only when the code under test sleeps (or ``tick`` says)."""

    def __init__(self, start=1000.0, tick=0.0, on_sleep=None, step=None):
        self.now, self.tick, self.slept, self.on_sleep, self.step = start, tick, [], on_sleep, step

    def perf_counter(self):
        self.now += self.tick
        return self.now

    monotonic = perf_counter

    def sleep(self, s):
        self.slept.append(s)
        self.now += s if self.step is None else self.step  # step: a coarse clock
        if self.on_sleep:
            self.on_sleep(self.now)


@pytest.fixture
def wal_home(tmp_path):
    """A WAL database whose WAL one big transaction grew to about 6 MB, and the connection that
    grew it (Hermes's, say) kept open, so the WAL stays when ours close. Its application_id set."""
    home = tmp_path / "home"
    home.mkdir()
    conn = sqlite3.connect(home / "state.db", isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA wal_autocheckpoint=0")
    conn.execute("PRAGMA application_id=1234567")
    conn.execute("CREATE TABLE t (x BLOB)")
    conn.execute("BEGIN")
    conn.executemany("INSERT INTO t VALUES (?)", ((b"x" * 3000,) for _ in range(1500)))
    conn.execute("COMMIT")
    yield Place("default", home, home), conn
    conn.close()


def _salts(place):
    with open(place.db_path.with_name("state.db-wal"), "rb") as fh:
        return fh.read(32)[16:24]  # new ones each time the WAL starts over


@pytest.fixture
def writers(monkeypatch):
    """Every Writer cut_wal opens, kept; their SQLite busy handler off, so a held lock shows at
    once and the writer's own backoff (on the fake clock ``writers.clock``) is what waits."""
    made = []

    class Recorded(Writer):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.conn.execute("PRAGMA busy_timeout=0")
            made.append(self)

    monkeypatch.setattr(compact_mod, "Writer", Recorded)
    clock = Clock()
    monkeypatch.setattr(writer_mod, "time", clock)
    monkeypatch.setattr(compact_mod, "time", clock)
    return SimpleNamespace(made=made, clock=clock)


def test_a_wal_at_the_limit_is_left_alone(wal_home, writers, monkeypatch):
    place, _ = wal_home
    size = place.wal_bytes()
    monkeypatch.setattr(compact_mod, "WAL_LIMIT_BYTES", size)
    salts = _salts(place)
    assert compact_mod.cut_wal(place) is True
    assert writers.made == [] and place.wal_bytes() == size and _salts(place) == salts


def test_a_big_wal_is_started_over_and_cut_to_the_limit_at_the_first_try(wal_home, writers, fixed_sqlite):
    """One checkpoint that copies every frame, one page rewritten: the WAL starts over (new salts),
    cut to exactly :data:`WAL_LIMIT_BYTES`, the data and the application_id as they were; no pause,
    its writer waiting at most :data:`WAL_CUT_BUSY_S` for the lock, the caller's budget otherwise."""
    place, conn = wal_home
    assert place.wal_bytes() > 4 << 20
    salts = _salts(place)
    assert compact_mod.cut_wal(place, Budget(budget_ms=33.0, pause_ms=0)) is True
    assert place.wal_bytes() == 4 << 20 and _salts(place) != salts
    assert [w.budget for w in writers.made] == [Budget(budget_ms=33.0, pause_ms=0, busy_wait_s=5.0)]
    assert writers.made[0].stats.transactions == 1 and writers.clock.slept == []
    assert conn.execute("SELECT count(*), sum(length(x)) FROM t").fetchone() == (1500, 4_500_000)
    assert conn.execute("PRAGMA application_id").fetchone() == (1234567,)


def test_without_a_budget_the_cut_waits_five_seconds_for_the_lock_then_gives_up(wal_home, writers):
    """Hermes holds the write lock (a long transaction of its own): the one-page write backs off
    0.05, 0.1, ... s up to 5 s of waiting in all, then the cut says False; the WAL untouched."""
    place, conn = wal_home
    salts, size = _salts(place), place.wal_bytes()
    conn.execute("BEGIN IMMEDIATE")
    try:
        assert compact_mod.cut_wal(place) is False
    finally:
        conn.execute("ROLLBACK")
    assert [w.budget for w in writers.made] == [Budget(busy_wait_s=5.0)]
    assert writers.clock.slept == [0.05, 0.1, 0.2, 0.4, 0.8, 1.0, 1.0, 1.0, pytest.approx(0.45)]
    assert place.wal_bytes() == size and _salts(place) == salts


def test_a_write_that_fails_leaves_the_wal_and_says_false(wal_home, writers, monkeypatch):
    place, _ = wal_home
    size = place.wal_bytes()

    def full(conn):
        raise sqlite3.OperationalError("database or disk is full")

    monkeypatch.setattr(compact_mod, "_rewrite_application_id", full)
    assert compact_mod.cut_wal(place) is False
    assert place.wal_bytes() == size and writers.clock.slept == []


def test_a_reader_behind_the_last_frames_gets_twenty_tries_then_false(wal_home, writers):
    """A reader whose snapshot misses the last frames keeps the checkpoint from copying them all:
    no write (it would not start the WAL over), 20 tries :data:`WAL_CUT_GAP_S` apart, then False."""
    place, conn = wal_home
    reader = sqlite3.connect(place.db_path, isolation_level=None)
    reader.execute("BEGIN")
    reader.execute("SELECT count(*) FROM t").fetchone()
    conn.execute("INSERT INTO t VALUES (x'00')")
    salts = _salts(place)
    try:
        assert compact_mod.cut_wal(place) is False
    finally:
        reader.close()
    assert writers.clock.slept == [0.05] * 20
    assert writers.made[0].stats.transactions == 0 and _salts(place) == salts


def test_a_wal_that_gets_small_between_tries_is_done(wal_home, writers):
    """A reader holds the first try back; it ends during the pause, and the second try cuts."""
    place, conn = wal_home
    reader = sqlite3.connect(place.db_path, isolation_level=None, check_same_thread=False)
    reader.execute("BEGIN")
    reader.execute("SELECT count(*) FROM t").fetchone()
    conn.execute("INSERT INTO t VALUES (x'00')")
    writers.clock.on_sleep = lambda now: reader.execute("COMMIT") if reader.in_transaction else None
    try:
        assert compact_mod.cut_wal(place) is True
    finally:
        reader.close()
    assert writers.clock.slept == [0.05] and place.wal_bytes() == 4 << 20


def test_a_wal_hermes_cuts_to_the_limit_during_the_last_pause_is_small(wal_home, writers):
    """After the last try the WAL is looked at once more: at the limit (Hermes started it over
    during the pause, cut to the same limit) it counts as small."""
    place, conn = wal_home
    reader = sqlite3.connect(place.db_path, isolation_level=None, check_same_thread=False)
    reader.execute("BEGIN")
    reader.execute("SELECT count(*) FROM t").fetchone()
    conn.execute("INSERT INTO t VALUES (x'00')")

    def hermes_cuts(now):
        if len(writers.clock.slept) == 20:
            reader.execute("COMMIT")
            conn.execute(f"PRAGMA journal_size_limit={4 << 20}")
            conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
            conn.execute("INSERT INTO t VALUES (x'01')")

    writers.clock.on_sleep = hermes_cuts
    try:
        assert compact_mod.cut_wal(place) is True
    finally:
        reader.close()
    assert writers.clock.slept == [0.05] * 20 and place.wal_bytes() == 4 << 20
    assert writers.made[0].stats.transactions == 0


def test_no_cut_where_the_keepers_sqlite_has_the_wal_reset_bug_and_hermes_holds_it(
    wal_home, writers, monkeypatch, vulnerable_sqlite
):
    place, _ = wal_home
    size, salts = place.wal_bytes(), _salts(place)
    monkeypatch.setattr(walreset, "find_holders", lambda db: [Holder(4242, "hermes", "hermes gateway")])
    assert compact_mod.cut_wal(place) is False
    assert place.wal_bytes() == size and _salts(place) == salts
    assert writers.made[0].stats.transactions == 0


# --- The stall's arithmetic and the result's own sums (pure) ----------------------------------------


def test_a_stall_is_waited_out_to_hermess_next_try():
    """Up to 2 s of waiting Hermes tries again every 150 ms at most, past that every second."""
    assert [compact_mod.hermes_wait_s(s) for s in (0.0, 1.5, 2.0, 3.0)] == [0.15, 1.65, 3.0, 4.0]


def _result(**kw):
    sizes = dict(
        db_bytes_before=0, db_bytes_after=0, wal_bytes_before=0, wal_bytes_after=0, free_bytes_after=0
    )
    return compact_mod.ReclaimResult("default", "none", "incremental", **(sizes | kw))


def test_freed_bytes_counts_the_file_and_its_wal_and_is_never_negative():
    res = _result(db_bytes_before=1000, wal_bytes_before=300, db_bytes_after=600, wal_bytes_after=100)
    assert res.freed_bytes == 600 and res.to_dict()["freed_bytes"] == 600
    assert _result(db_bytes_before=1000, db_bytes_after=900, wal_bytes_after=200).freed_bytes == 0


def test_notes_are_joined_in_order_and_unconverted_means_still_none():
    res = _result()
    res.add_note("one")
    res.add_note("")
    res.add_note("two")
    assert res.note == "one; two" and res.unconverted is False
    assert compact_mod.ReclaimResult("p", "none", "none", 0, 0, 0, 0, 0).unconverted is True


# --- Waiting: for Hermes to let go, for a quiet moment (fake clocks) --------------------------------


def _holders_then(monkeypatch, counts):
    """find_holders gives one holder ``counts[i]`` times in a row ... then none; the scans made."""
    seq = iter(counts)
    scans = []

    def find(db):
        scans.append(db)
        return [Holder(7, "hermes", "hermes")] if next(seq, 0) else []

    monkeypatch.setattr(compact_mod, "find_holders", find)
    return scans


def test_wait_idle_scans_once_without_a_wait(monkeypatch, tmp_path):
    clock = Clock()
    monkeypatch.setattr(compact_mod, "time", clock)
    scans = _holders_then(monkeypatch, [1, 1])
    assert [h.pid for h in compact_mod._wait_idle(tmp_path / "state.db", None)] == [7]
    assert scans == [tmp_path / "state.db"] and clock.slept == []


def test_wait_idle_looks_every_second_to_the_deadline_the_last_pause_at_least_100ms(monkeypatch, tmp_path):
    clock = Clock()
    monkeypatch.setattr(compact_mod, "time", clock)
    scans = _holders_then(monkeypatch, [1] * 10)
    assert len(compact_mod._wait_idle(tmp_path / "state.db", 2.05)) == 1
    assert clock.slept == [1.0, 1.0, 0.1] and scans == [tmp_path / "state.db"] * 4


def test_wait_idle_stops_when_hermes_lets_go(monkeypatch, tmp_path):
    clock = Clock()
    monkeypatch.setattr(compact_mod, "time", clock)
    scans = _holders_then(monkeypatch, [1, 1, 0])
    assert compact_mod._wait_idle(tmp_path / "state.db", 30) == []
    assert clock.slept == [1.0, 1.0] and scans == [tmp_path / "state.db"] * 3


@pytest.fixture(scope="module")
def demo_built(tmp_path_factory):
    home = tmp_path_factory.mktemp("demo") / "home"
    demo.build_home(home, demo.generate(1_700_000_000.0, sessions=4))
    return home


@pytest.fixture
def demo_home(demo_built, tmp_path):
    """A small WAL home written by ``demo`` (Hermes's schema, both FTS5 indexes; no Hermes),
    built once and copied: closed cleanly, it has no WAL to carry over."""
    shutil.copytree(demo_built, tmp_path / "home", symlinks=True)
    return select_profiles(tmp_path / "home")[0]


def _commit_on(db, times):
    """An ``on_sleep`` that commits on another connection when the clock reaches each of ``times``."""
    conn = sqlite3.connect(db, isolation_level=None)
    due = list(times)

    def on_sleep(now):
        while due and now >= due[0] - 1e-9:
            due.pop(0)
            conn.execute("PRAGMA user_version=7")

    return on_sleep


def test_wait_quiet_returns_after_a_quiet_second(demo_home, monkeypatch):
    """Looked at every 50 ms (on a clock that moves 0.25 s a look): quiet at exactly 1 s."""
    clock = Clock(start=0.0, step=0.25)
    monkeypatch.setattr(compact_mod, "time", clock)
    assert compact_mod.wait_quiet(demo_home.db_path, 1.0, 5.0) is True
    assert clock.slept == [0.05] * 4 and clock.now == 1.0


def test_wait_quiet_counts_the_second_from_the_last_commit(demo_home, monkeypatch):
    clock = Clock(start=0.0, on_sleep=_commit_on(demo_home.db_path, [0.5]))
    monkeypatch.setattr(compact_mod, "time", clock)
    assert compact_mod.wait_quiet(demo_home.db_path, 1.0, 5.0) is True
    assert clock.now == pytest.approx(1.5, abs=0.051)


def test_wait_quiet_gives_up_at_its_deadline_beside_a_steady_writer(demo_home, monkeypatch):
    clock = Clock(start=0.0, on_sleep=_commit_on(demo_home.db_path, [n * 0.5 for n in range(1, 20)]))
    monkeypatch.setattr(compact_mod, "time", clock)
    assert compact_mod.wait_quiet(demo_home.db_path, 1.0, 3.0) is False
    assert clock.now == pytest.approx(3.0, abs=0.051)


def test_wait_quiet_without_time_to_wait_does_not_look(demo_home, monkeypatch):
    clock = Clock(start=0.0)
    monkeypatch.setattr(compact_mod, "time", clock)
    assert compact_mod.wait_quiet(demo_home.db_path, 1.0, 0.0) is False
    assert clock.slept == []


# --- The estimate: a VACUUM timed on a copy --------------------------------------------------------


def test_timed_vacuum_switches_the_copy_in_the_originals_journal_mode(tmp_path, monkeypatch):
    monkeypatch.setattr(compact_mod, "time", Clock(tick=0.25))
    for mode in ("wal", "delete"):
        _db(tmp_path / f"{mode}.db", 100)
        conn = sqlite3.connect(tmp_path / f"{mode}.db")
        conn.execute(f"PRAGMA journal_mode={'delete' if mode == 'wal' else 'wal'}")  # the other one
        conn.close()
        assert compact_mod._timed_vacuum(tmp_path / f"{mode}.db", mode) == 0.25
        conn = sqlite3.connect(tmp_path / f"{mode}.db")
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == mode
        assert conn.execute("PRAGMA auto_vacuum").fetchone()[0] == 2  # incremental
        conn.close()


@pytest.mark.parametrize("mode", ["wal", "delete"])
def test_the_estimate_is_the_copys_vacuum_with_the_margin_and_hermess_next_try(demo_home, monkeypatch, mode):
    """0.4 s on the copy: 0.5 s with the 1.25 margin, 0.65 s with Hermes's next try; the copy,
    in the scratch folder, holds the database's rows, and is gone after."""
    seen = []

    def timed(copy, journal_mode):
        folder = copy.parent
        seen.append((folder.parent, folder.name[:16], copy.name, journal_mode, _count(copy, "messages")))
        return 0.4

    real_copy, row_copies = compact_mod._copy_rows, []
    monkeypatch.setattr(compact_mod, "_copy_rows", lambda db, d: row_copies.append(db) or real_copy(db, d))
    monkeypatch.setattr(compact_mod, "_timed_vacuum", timed)
    scratch = demo_home.keeper_dir
    assert compact_mod.estimate_vacuum_s(demo_home.db_path, scratch, mode) == pytest.approx(0.65)
    count = _count(demo_home.db_path, "messages")
    assert seen == [(scratch, "vacuum-estimate-", "copy.db", mode, count)]
    assert row_copies == ([] if mode == "wal" else [demo_home.db_path])  # WAL: one VACUUM INTO
    assert [p.name for p in scratch.iterdir()] == []


def test_an_estimate_whose_scratch_folder_went_meanwhile_still_counts(demo_home, monkeypatch):
    """Another keeper's clean-up of leftover ``vacuum-estimate-*`` folders got there first."""

    def timed(copy, journal_mode):
        shutil.rmtree(copy.parent)
        return 0.4

    monkeypatch.setattr(compact_mod, "_timed_vacuum", timed)
    estimate = compact_mod.estimate_vacuum_s(demo_home.db_path, demo_home.keeper_dir, "wal")
    assert estimate == pytest.approx(0.65)


def test_no_estimate_when_the_copy_will_not_vacuum(demo_home, monkeypatch):
    def busy(copy, journal_mode):
        raise sqlite3.OperationalError("database is locked")

    monkeypatch.setattr(compact_mod, "_timed_vacuum", busy)
    assert compact_mod.estimate_vacuum_s(demo_home.db_path, demo_home.keeper_dir, "wal") is None
    assert list(demo_home.keeper_dir.iterdir()) == []


def _count(db, table):
    conn = sqlite3.connect(db)
    try:
        return conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
    finally:
        conn.close()


# --- Whether the one-time VACUUM may run beside Hermes ---------------------------------------------


def _fits(monkeypatch, used, limit, estimate=0.5, quiet=True, wait_idle_s=None):
    """``_live_vacuum_fits`` on a database of ``used`` bytes: (why not, the result, the calls made)."""
    calls = []

    def estimate_vacuum_s(db, scratch, mode):
        calls.append(("estimate", db.name, scratch.name, mode))
        return estimate

    def wait_quiet(db, quiet_s, wait_s):
        calls.append(("quiet", db.name, quiet_s, wait_s))
        return quiet

    monkeypatch.setattr(compact_mod, "estimate_vacuum_s", estimate_vacuum_s)
    monkeypatch.setattr(compact_mod, "wait_quiet", wait_quiet)
    place = Place("default", Path("/h"), Path("/h"))
    res = _result()
    info = SimpleNamespace(used_bytes=used, journal_mode="wal")
    return compact_mod._live_vacuum_fits(place, res, info, limit, wait_idle_s), res, calls


def test_no_vacuum_beside_hermes_with_a_stall_limit_of_none(monkeypatch):
    assert _fits(monkeypatch, 1000, 0.0)[0] == "live_vacuum_stall = 0s"


def test_a_database_too_big_for_the_stall_at_the_fastest_is_not_copied(monkeypatch):
    """1 GB at 500 MB/s is 2 s, 2.5 s with the margin, 3.5 s with Hermes's next try."""
    why, res, calls = _fits(monkeypatch, 1_000_000_000, 3.4)
    assert why == "a VACUUM of 1.0 GB would stall Hermes's writes over live_vacuum_stall, 3.4s"
    assert calls == [] and res.vacuum_estimate_s is None
    assert _fits(monkeypatch, 1_000_000_000, 3.5)[0] == ""


def test_a_stall_that_cannot_be_measured_is_no_vacuum(monkeypatch):
    why, res, _ = _fits(monkeypatch, 1000, 10.0, estimate=None)
    assert (
        why == "its stall beside Hermes could not be measured (no copy to time it on: busy, disk, or damaged)"
    )


def test_the_estimate_is_rounded_once_and_compared_with_the_limit(monkeypatch):
    why, res, calls = _fits(monkeypatch, 1000, 10.0, estimate=10.004)
    assert why == "" and res.vacuum_estimate_s == 10.0 and res.note == ""
    assert calls == [("estimate", "state.db", "keeper", "wal"), ("quiet", "state.db", 1.0, 5.0)]
    why, res, calls = _fits(monkeypatch, 1000, 10.0, estimate=10.006)
    assert why == "a VACUUM would stall Hermes's writes about 10s (over live_vacuum_stall, 10s)"
    assert res.vacuum_estimate_s == 10.01 and [c[0] for c in calls] == ["estimate"]


def test_the_quiet_moment_is_waited_for_as_long_as_wait_idle_even_zero(monkeypatch):
    assert _fits(monkeypatch, 1000, 10.0, wait_idle_s=0)[2][-1] == ("quiet", "state.db", 1.0, 0)
    assert _fits(monkeypatch, 1000, 10.0, wait_idle_s=42)[2][-1] == ("quiet", "state.db", 1.0, 42)


def test_without_a_quiet_moment_it_goes_ahead_and_says_so(monkeypatch):
    why, res, _ = _fits(monkeypatch, 1000, 10.0, estimate=0.25, quiet=False)
    assert why == "" and res.note == (
        "Hermes did not pause writing for 1s; the one-time VACUUM ran beside it, a stall of its writes"
        " of about 250ms"
    )


# --- The WAL after the work ------------------------------------------------------------------------


def _guard(hands_off, holders=("pid 9 (hermes)",)):
    return walreset.WalGuard("3.40.1", hands_off, True, holders if hands_off else ())


def _wal_step(monkeypatch, place, holders, guard=None, cut=True):
    cuts = []
    monkeypatch.setattr(compact_mod, "cut_wal", lambda p, b: cuts.append((p, b)) or cut)
    w = SimpleNamespace(guard=guard or _guard(False), budget=Budget(pause_ms=3))
    res = _result()
    return compact_mod._wal_step(place, w, SimpleNamespace(journal_mode="wal"), holders, res), res, cuts


def test_the_wal_is_truncated_when_a_scan_found_nobody(wal_home, monkeypatch):
    place, _ = wal_home
    assert _wal_step(monkeypatch, place, [])[::2] == (True, [])
    assert place.wal_bytes() == 0


def test_beside_a_holder_or_without_a_scan_the_wal_is_cut_back_in_the_writers_budget(
    wal_home, monkeypatch, fixed_sqlite
):
    place, _ = wal_home
    size = place.wal_bytes()
    for holders in (None, [Holder(9, "hermes", "hermes")]):
        ok, res, cuts = _wal_step(monkeypatch, place, holders, cut=False)
        assert (ok, res.note, cuts) == (False, "", [(place, Budget(pause_ms=3))])
    assert place.wal_bytes() == size


def test_hands_off_the_wal_is_left_and_said_once(wal_home, monkeypatch, vulnerable_sqlite):
    place, _ = wal_home
    ok, res, cuts = _wal_step(monkeypatch, place, None, guard=_guard(True))
    assert (ok, cuts) == (True, []) and res.note == _guard(True).note()
    compact_mod._say_hands_off(res, _guard(True))
    assert res.note == _guard(True).note()
    ok, res, cuts = _wal_step(monkeypatch, place, [Holder(9, "hermes", "hermes")])
    assert (ok, cuts) == (True, []) and "pid 9 (hermes) holds state.db" in res.note
    scanned = []
    monkeypatch.setattr(walreset, "find_holders", lambda db: scanned.append(db) or [Holder(8, "h", "hermes")])
    ok, res, cuts = _wal_step(monkeypatch, place, None)  # no scan yet: the guard makes one
    assert (ok, cuts, scanned) == (True, [], [place.db_path]) and "pid 8 (hermes) holds" in res.note


# --- FTS merges and the incremental vacuum ----------------------------------------------------------


def _merges(monkeypatch, fail=None):
    """merge_round faked: two steps an index, or ``fail`` raised after the second index's first."""
    calls = []

    def merge_round(w, table, batch, full, limit_ms):
        calls.append((table, batch.size, full, limit_ms))
        w.step(lambda c: None)
        if fail is not None and len(calls) == 2:
            raise fail
        w.step(lambda c: None)

    monkeypatch.setattr(compact_mod, "merge_round", merge_round)
    return calls


def test_idle_merges_run_whole_and_unbounded_live_ones_hermes_style_and_bounded(demo_home, monkeypatch):
    schema = inspect(demo_home.db_path)
    calls = _merges(monkeypatch)
    with Writer(demo_home.db_path, Budget(pause_ms=0)) as w:
        assert compact_mod._merge_fts(w, schema, False) == (4, [])
        assert compact_mod._merge_fts(w, schema, True) == (4, [])
    assert calls == [
        ("messages_fts", 64, True, None),
        ("messages_fts_trigram", 64, True, None),
        ("messages_fts", 64, False, 120.0),
        ("messages_fts_trigram", 64, False, 120.0),
    ]


def test_a_merge_step_aborted_past_its_limit_counts_and_leaves_its_index_for_later(demo_home, monkeypatch):
    schema = inspect(demo_home.db_path)
    _merges(monkeypatch, fail=sqlite3.OperationalError("interrupted"))
    with Writer(demo_home.db_path, Budget(pause_ms=0)) as w:
        assert compact_mod._merge_fts(w, schema, True) == (4, ["messages_fts_trigram"])
    _merges(monkeypatch, fail=sqlite3.OperationalError("disk I/O error"))
    with (
        Writer(demo_home.db_path, Budget(pause_ms=0)) as w,
        pytest.raises(sqlite3.OperationalError, match="I/O"),
    ):
        compact_mod._merge_fts(w, schema, True)


def test_incremental_vacuum_steps_are_sized_by_the_writers_batch_from_256_pages(tmp_path, monkeypatch):
    """Each page freed costs 10 µs on the writer's clock: steps start at 256 pages and double
    while well inside the 50 ms budget, to 3000 pages (60% of it); the last one finds the rest."""
    db = tmp_path / "state.db"
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("PRAGMA page_size=512")
    conn.execute("PRAGMA auto_vacuum=INCREMENTAL")
    conn.execute("CREATE TABLE t (x)")
    conn.execute("BEGIN")
    conn.executemany("INSERT INTO t VALUES (?)", ((b"x" * 400,) for _ in range(1000)))
    conn.execute("COMMIT")
    conn.execute("DELETE FROM t")
    free = conn.execute("PRAGMA freelist_count").fetchone()[0]
    conn.close()
    clock = Clock()
    monkeypatch.setattr(writer_mod, "time", clock)
    real, asked = compact_mod._free_pages, []

    def timed(c, n):
        asked.append(n)
        freed = real(c, n)
        clock.now += freed * 1e-5
        return freed

    monkeypatch.setattr(compact_mod, "_free_pages", timed)
    with Writer(db, Budget(pause_ms=0)) as w:
        assert compact_mod._incremental(w) == free
    assert asked == [256, 512, 1024] and free == 1018
    assert _count_free(db) == 0


# --- The one-time VACUUM (_convert) -----------------------------------------------------------------

HERMES, CRON = Holder(7, "hermes", "hermes gateway"), Holder(8, "hermes", "hermes cron")
LATER = (
    "the one-time switch to incremental auto_vacuum (a full VACUUM) runs when no process holds the database"
)


class _Statements:
    """A connection whose statements are recorded (``fail``: raised by its VACUUM)."""

    def __init__(self, conn, fail=None):
        self.conn, self.sql, self.fail = conn, [], fail

    def execute(self, sql, *args):
        self.sql.append(sql)
        if sql == "VACUUM" and self.fail is not None:
            raise self.fail
        return self.conn.execute(sql, *args)

    def __getattr__(self, name):
        return getattr(self.conn, name)


@pytest.fixture
def convert(monkeypatch):
    """``convert(profile, scans, **terms)``: _convert with find_holders giving ``scans`` in turn
    (one list of holders each), beside Hermes at once fitting; (result, holders returned, the
    VACUUM connection's statements and options)."""
    seen = SimpleNamespace(opened=[], fits=[], fail=None)
    real_rw = compact_mod.connect_rw

    def connect_rw(db, **kw):
        seen.opened.append(kw)
        seen.conn = _Statements(real_rw(db, **kw), seen.fail)
        return seen.conn

    def fits(profile, res, info, limit, wait_idle_s):
        seen.fits.append((limit, wait_idle_s))
        return seen.why_not

    monkeypatch.setattr(compact_mod, "connect_rw", connect_rw)
    monkeypatch.setattr(compact_mod, "_live_vacuum_fits", fits)
    seen.why_not = ""

    def run(profile, scans, journal=None, fail=None, **terms):
        seen.fail, scans = fail, iter(scans)
        monkeypatch.setattr(compact_mod, "find_holders", lambda db: next(scans))
        schema = inspect(profile.db_path)
        res = _result()
        got = compact_mod._convert(profile, schema, res, journal, compact_mod.CompactTerms(**terms))
        seen.sql = seen.conn.sql if seen.opened else None
        return res, got, seen

    return run


def _auto_vacuum(db):
    conn = sqlite3.connect(db)
    try:
        return conn.execute("PRAGMA auto_vacuum").fetchone()[0]
    finally:
        conn.close()


def _reclaimable(profile):
    return f"{units.size(inspect(profile.db_path).resized().free_bytes)} reclaimable"


def test_a_vacuum_not_allowed_is_said_and_not_run(demo_home, convert):
    res, got, seen = convert(demo_home, [[]], allow_full_vacuum=False)
    assert res.note == f"{_reclaimable(demo_home)}; full VACUUM not allowed, so {LATER}"
    assert (got, res.holders, seen.opened, _auto_vacuum(demo_home.db_path)) == ([], [], [], 0)


def _disk_free(monkeypatch, free):
    monkeypatch.setattr(
        compact_mod, "shutil", SimpleNamespace(disk_usage=lambda p: SimpleNamespace(free=free))
    )


def test_without_room_for_its_copies_the_vacuum_is_skipped(demo_home, convert, monkeypatch, fixed_sqlite):
    """Idle it needs two copies' room and the reserve; beside Hermes a third, the estimate's."""
    used = inspect(demo_home.db_path).resized().used_bytes
    for holders, need in (([], 2 * used + RESERVE_BYTES), ([HERMES], 3 * used + RESERVE_BYTES)):
        _disk_free(monkeypatch, need - 1)
        res, got, seen = convert(demo_home, [holders])
        assert res.note == (
            f"{_reclaimable(demo_home)}; VACUUM needs about {units.size(need)} free and"
            f" {units.size(need - 1)} are; skipped"
        )
        assert got == holders and seen.opened == [] and _auto_vacuum(demo_home.db_path) == 0
    _disk_free(monkeypatch, need)
    res, got, seen = convert(demo_home, [[HERMES]])
    assert res.vacuumed and _auto_vacuum(demo_home.db_path) == 2


def test_beside_hermes_the_stall_is_asked_of_the_policy_and_a_no_is_said(demo_home, convert):
    res, got, seen = convert(demo_home, [[HERMES]], stall_limit_s=3.0, wait_idle_s=9.0)
    assert seen.fits == [(3.0, 9.0)] and res.vacuumed
    seen.why_not = "it would not fit"
    res, got, seen = convert(demo_home, [[HERMES, CRON]], stall_limit_s=3.0, wait_idle_s=9.0)
    held = "(now held by pid 7 (hermes gateway); pid 8 (hermes cron))"
    assert res.note == f"{_reclaimable(demo_home)}; it would not fit, so {LATER} {held}"
    assert got == [HERMES, CRON] and not res.vacuumed
    assert res.holders == ["pid 7 (hermes gateway)", "pid 8 (hermes cron)"]


def test_idle_the_command_backs_up_truncates_the_wal_and_vacuums(demo_home, convert, tmp_path):
    """Its backup goes to ``--dest`` and into the journal; no stall asked, nobody to stall."""
    dest = str(tmp_path / "b")
    with Journal(demo_home.keeper_dir) as journal:
        res, got, seen = convert(demo_home, [[], []], journal, standalone=True, backup_dest=dest)
    assert res.backup and any(res.backup in p.name for p in (tmp_path / "b").iterdir())
    backups = [r["name"] for r in read_journal(demo_home.keeper_dir) if r["action"] == "backup"]
    assert backups == [res.backup] and seen.fits == []
    assert seen.sql == ["PRAGMA wal_checkpoint(TRUNCATE)", "PRAGMA auto_vacuum=INCREMENTAL", "VACUUM"]
    assert seen.opened == [{"busy_timeout_s": 5}] and got == [] and res.note == ""
    assert res.vacuumed and _auto_vacuum(demo_home.db_path) == 2


def test_a_runs_vacuum_takes_no_backup_of_its_own(demo_home, convert):
    res, got, seen = convert(demo_home, [[]])
    assert res.backup is None and not (demo_home.keeper_dir / "backups").exists()
    assert res.vacuumed


def test_hermes_opening_the_database_during_the_backup_skips_the_vacuum(demo_home, convert):
    res, got, seen = convert(demo_home, [[], [HERMES]], standalone=True)
    assert res.backup and got == [HERMES] and seen.opened == []
    assert res.note == f"{_reclaimable(demo_home)}; Hermes opened the database just now, VACUUM skipped"
    assert _auto_vacuum(demo_home.db_path) == 0


def test_beside_hermes_the_wal_is_only_checkpointed_passive(demo_home, convert, fixed_sqlite):
    res, got, seen = convert(demo_home, [[HERMES], [HERMES]], standalone=True)
    assert res.backup and got == [HERMES]
    assert seen.sql == ["PRAGMA wal_checkpoint(PASSIVE)", "PRAGMA auto_vacuum=INCREMENTAL", "VACUUM"]


def test_in_a_rollback_journal_beside_hermes_the_command_vacuums_without_a_snapshot(demo_home, convert):
    conn = sqlite3.connect(demo_home.db_path)
    conn.execute("PRAGMA journal_mode=DELETE")
    conn.close()
    res, got, seen = convert(demo_home, [[HERMES]], standalone=True)
    assert res.backup is None and res.vacuumed and got == [HERMES]
    assert res.note == "no backup before it: a snapshot beside Hermes in this journal mode holds its writes"


def test_with_the_wal_reset_bug_beside_hermes_the_vacuum_never_checkpoints(
    demo_home, convert, vulnerable_sqlite
):
    res, got, seen = convert(demo_home, [[HERMES]])
    assert seen.sql == ["PRAGMA wal_autocheckpoint=0", "PRAGMA auto_vacuum=INCREMENTAL", "VACUUM"]
    guard = walreset.WalGuard(walreset.version_text(), True, True, ("pid 7 (hermes gateway)",))
    assert res.note == guard.note() and res.vacuumed


def test_a_vacuum_that_fails_says_why_and_that_nothing_changed(demo_home, convert):
    busy = sqlite3.OperationalError("database is locked")
    with pytest.raises(TryLater) as err:
        convert(demo_home, [[]], fail=busy)
    assert str(err.value) == "VACUUM of default found the database busy; nothing changed"
    with pytest.raises(KeeperError) as err:
        convert(demo_home, [[]], fail=sqlite3.DatabaseError("disk full"))
    assert type(err.value) is KeeperError
    assert str(err.value) == "VACUUM of default failed (disk full); SQLite rolled it back, no data changed"
    assert _auto_vacuum(demo_home.db_path) == 0


# --- The command (compact) and what both ways share (_compact) ------------------------------------


def test_no_check_on_record_beside_hermes_in_a_rollback_journal_is_try_later(demo_home, monkeypatch):
    asked = []

    def checked(fs, db, mode, holders):
        asked.append((db, mode, holders))

    monkeypatch.setattr(compact_mod, "checked_unless_it_stalls", checked)
    monkeypatch.setattr(compact_mod, "find_holders", lambda db: [HERMES])
    with pytest.raises(TryLater) as err:
        compact_mod.compact(demo_home)
    assert asked == [(demo_home.db_path, "wal", [HERMES])]
    assert str(err.value) == (
        f"{demo_home.db_path} has no quick_check on record, and a process holds it in wal journal mode,"
        " where reading every page would hold its writes; compact changed nothing: run it when Hermes"
        " is stopped (or after a `plan` then)"
    )


def test_a_database_that_fails_its_check_is_refused(demo_home, monkeypatch):
    bad = Check("*** in database main *** Page 3: btreeInitPage() returns error code 11", 0.0)
    monkeypatch.setattr(compact_mod, "checked_unless_it_stalls", lambda *args: bad)
    with pytest.raises(KeeperError) as err:
        compact_mod.compact(demo_home)
    assert type(err.value) is KeeperError and str(err.value) == (
        f"{demo_home.db_path} fails quick_check ({bad.result}); compact changed nothing. Restore a "
        "backup (hermes-keeper restore --latest) or let Hermes repair it"
    )


def test_the_command_hands_its_options_to_the_work(demo_home, monkeypatch, vulnerable_sqlite):
    """... its start (the time it took counts the check and the wait) and the guard of a WAL
    database held by Hermes, which a keeper's SQLite with the WAL-reset bug keeps its hands off."""
    seen = []

    def work(profile, w, schema, live, journal, terms, t0):
        guard = (w.guard.holders, w.guard.hands_off)
        seen.append((profile, w.budget, guard, schema.journal_mode, live, journal, terms, t0))
        return "done"

    monkeypatch.setattr(compact_mod, "time", Clock(start=52.5))

    waits = []
    monkeypatch.setattr(compact_mod, "_compact", work)
    monkeypatch.setattr(compact_mod, "_wait_idle", lambda db, s: waits.append((db, s)) or [HERMES])
    got = compact_mod.compact(
        demo_home,
        budget=Budget(pause_ms=1),
        wait_idle_s=3.0,
        allow_full_vacuum=False,
        journal="J",
        backup_dest="/b",
        live_vacuum_stall_s=7.0,
    )
    terms = compact_mod.CompactTerms(True, False, 7.0, 3.0, "/b")
    assert got == "done" and waits == [(demo_home.db_path, 3.0)]
    guard = (("pid 7 (hermes gateway)",), True)
    assert seen == [(demo_home, Budget(pause_ms=1), guard, "wal", True, "J", terms, 52.5)]


def test_the_command_on_an_idle_home_converts_backs_up_truncates_and_journals(demo_home):
    """The whole way, nobody holding the database: every figure as the file shows it after."""
    before = inspect(demo_home.db_path)
    with Journal(demo_home.keeper_dir) as journal:
        res = compact_mod.compact(demo_home, journal=journal)
    after = inspect(demo_home.db_path)
    assert (res.auto_vacuum_before, res.auto_vacuum_after, res.vacuumed, res.live) == (
        "none",
        "incremental",
        True,
        False,
    )
    assert (res.db_bytes_before, res.wal_bytes_before) == (before.db_bytes, 0)
    assert (res.db_bytes_after, res.free_bytes_after, res.wal_bytes_after) == (after.db_bytes, 0, 0)
    assert res.backup and res.note == "" and res.holders == [] and res.fts_merge_steps > 0
    assert res.pages_freed == 0 and res.fts_left == [] and res.profile == "default"
    records = [r for r in read_journal(demo_home.keeper_dir) if r["action"] == "compact"]
    assert [{k: r[k] for k in res.to_dict()} for r in records] == [res.to_dict()]
    backups = [r["name"] for r in read_journal(demo_home.keeper_dir) if r["action"] == "backup"]
    assert backups == [res.backup]  # the backup before the VACUUM is journaled too


def _work(profile, monkeypatch, live, standalone, scans=(), cut=True, journal=None):
    """_compact on ``profile`` (its merges faked), find_holders giving ``scans``; (result, calls)."""
    calls = []
    scans = iter(scans)
    monkeypatch.setattr(compact_mod, "find_holders", lambda d: calls.append(("scan", d.name)) or next(scans))
    monkeypatch.setattr(
        compact_mod, "_merge_fts", lambda w, schema, live: (calls.append(("merge", live)), (3, ["x"]))[1]
    )
    monkeypatch.setattr(compact_mod, "cut_wal", lambda p, b: calls.append("cut") or cut)
    schema = inspect(profile.db_path)
    w = Writer(profile.db_path, Budget(pause_ms=0))
    terms = compact_mod.CompactTerms(standalone=standalone, allow_full_vacuum=False)
    clock = Clock(start=52.3456789)
    monkeypatch.setattr(compact_mod, "time", clock)
    res = compact_mod._compact(profile, w, schema, live, journal, terms, 10.0)
    assert w.closed
    return res, calls


def _incremental_home(profile):
    conn = sqlite3.connect(profile.db_path, isolation_level=None)
    conn.execute("PRAGMA auto_vacuum=INCREMENTAL")
    conn.execute("VACUUM")
    conn.execute("DELETE FROM messages")
    conn.close()
    return inspect(profile.db_path).freelist_count


def test_an_incremental_database_gives_back_its_free_pages_and_is_not_vacuumed(demo_home, monkeypatch):
    free = _incremental_home(demo_home)
    res, calls = _work(demo_home, monkeypatch, live=False, standalone=True, scans=[[]])
    assert calls == [("merge", False), ("scan", "state.db")] and free > 0
    assert (res.pages_freed, res.fts_merge_steps, res.fts_left) == (free, 3, ["x"])
    assert (res.auto_vacuum_after, res.vacuumed, res.note, res.wal_bytes_after) == (
        "incremental",
        False,
        "",
        0,
    )
    assert res.seconds == 42.346  # from the t0 it was given, on the fake clock, to the ms


def test_a_hold_a_killed_run_left_is_put_back_first_and_journaled(demo_home, monkeypatch):
    """Its file unreadable (a power cut): Hermes's settings taken from the database, said so."""
    demo_home.keeper_dir.mkdir(mode=0o700)
    (demo_home.keeper_dir / "fts-hold.json").write_bytes(b"")
    with Journal(demo_home.keeper_dir) as journal:
        _work(demo_home, monkeypatch, live=False, standalone=True, scans=[[]], journal=journal)
    actions = [r["action"] for r in read_journal(demo_home.keeper_dir)]
    assert actions[:2] == ["fts_hold_recovered", "fts_hold_found"] and actions[-1] == "compact"
    assert not (demo_home.keeper_dir / "fts-hold.json").exists()


def test_a_run_beside_hermes_merges_live_scans_nothing_and_cuts_the_wal(demo_home, monkeypatch, fixed_sqlite):
    _incremental_home(demo_home)
    res, calls = _work(demo_home, monkeypatch, live=True, standalone=False)
    assert calls == [("merge", True), "cut"] and res.note == "" and res.live


def test_the_command_beside_hermes_says_what_the_merges_left_and_a_wal_left_big(
    demo_home, monkeypatch, fixed_sqlite
):
    _incremental_home(demo_home)
    with Journal(demo_home.keeper_dir) as journal:
        res, calls = _work(
            demo_home, monkeypatch, live=True, standalone=True, scans=[[HERMES]], cut=False, journal=journal
        )
    assert calls == [("merge", True), ("scan", "state.db"), "cut"]
    assert res.note == (
        "Hermes was running, so compact gave the FTS indexes only the merges Hermes itself would do;"
        " the index space of deleted messages comes back with the full merge a run does after its"
        " deletes, Hermes's own FTS optimize (every 1000 writes), or a compact while Hermes is stopped;"
        f" the WAL ({units.size(res.wal_bytes_after)}) was not cut back beside Hermes; it shrinks at"
        " the next run's compact or when Hermes closes"
    )
    assert [r["note"] for r in read_journal(demo_home.keeper_dir) if r["action"] == "compact"] == [res.note]


def test_a_none_database_converts_on_the_holders_of_its_own_scan(demo_home, monkeypatch, fixed_sqlite):
    """_convert's scan decides the WAL step: no second scan, a holder there means a cut."""
    res, calls = _work(demo_home, monkeypatch, live=False, standalone=True, scans=[[HERMES]])
    assert calls == [("merge", False), ("scan", "state.db"), "cut"]
    assert res.holders == ["pid 7 (hermes gateway)"] and res.auto_vacuum_after == "none"
