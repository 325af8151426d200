"""compact's edges, each where a one-token change (a mutant, ``tools/mutate.py``) would move it.

A run's compact (:func:`compact.compact_run`): its ``live`` from the run's holder scan, its
journal record, the policy's ``live_vacuum_stall``. The estimate's copy of a rollback-journal
database (:func:`compact._copy_rows`): every row, and reads sized from the time of the one
before. So that each surviving mutant of ``run/compact.py`` fails here or is explained as
equivalent in ``docs/testing.md``. Small databases, a fake clock.
"""

from __future__ import annotations

import sqlite3
from types import SimpleNamespace

import pytest

from hermes_keeper.home import select_profiles
from hermes_keeper.journal import Journal, read_journal
from hermes_keeper.model.policy import Policy
from hermes_keeper.place import Place
from hermes_keeper.run import compact as compact_mod
from hermes_keeper.run.context import open_run
from hermes_keeper.sqlite import walreset
from hermes_keeper.sqlite import writer as writer_mod
from hermes_keeper.sqlite.holders import Holder
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
    conn.executemany("INSERT INTO t VALUES (?)", (("x" * 1000,) for _ in range(300)))
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

    def __init__(self, start=1000.0, tick=0.0, on_sleep=None):
        self.now, self.tick, self.slept, self.on_sleep = start, tick, [], on_sleep

    def perf_counter(self):
        self.now += self.tick
        return self.now

    monotonic = perf_counter

    def sleep(self, s):
        self.slept.append(s)
        self.now += s
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


def test_no_cut_where_the_keepers_sqlite_has_the_wal_reset_bug_and_hermes_holds_it(
    wal_home, writers, monkeypatch, vulnerable_sqlite
):
    place, _ = wal_home
    size, salts = place.wal_bytes(), _salts(place)
    monkeypatch.setattr(walreset, "find_holders", lambda db: [Holder(4242, "hermes", "hermes gateway")])
    assert compact_mod.cut_wal(place) is False
    assert place.wal_bytes() == size and _salts(place) == salts
    assert writers.made[0].stats.transactions == 0
