"""compact: space back in short steps while Hermes runs; the one-time VACUUM only when nobody holds the db."""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
import time

import pytest
from click.testing import CliRunner

from bench.homes import live_writer
from hermes_keeper import units
from hermes_keeper.cli import main
from hermes_keeper.home import select_profiles
from hermes_keeper.run import compact as compact_mod
from hermes_keeper.run.compact import WAL_LIMIT_BYTES, compact
from tests.conftest import tree_digest

#: The FTS5 indexes of the homes here (Hermes 0.19: no CJK index, tests/test_cjk.py has one).
FTS_TABLES = ("messages_fts", "messages_fts_trigram")
CONTENT = "SELECT id, session_id, role, content, timestamp, active FROM messages ORDER BY id"


@pytest.fixture
def home(hermes_home, tmp_path):
    return hermes_home(tmp_path / "home", sessions=150, messages_per_session=50)


def sql(home, *statements):
    conn = sqlite3.connect(home / "state.db", isolation_level=None)
    try:
        return [conn.execute(s).fetchall() for s in statements]
    finally:
        conn.close()


def delete_cron(home):
    """Free pages the way a prune would: cron sessions' messages (and their FTS rows) go."""
    sql(home, "DELETE FROM messages WHERE session_id IN (SELECT id FROM sessions WHERE source = 'cron')")


def hermes_view(hermes, home):
    rows, fts = hermes.run(home, [{"op": "query", "sql": CONTENT}, {"op": "fts_integrity"}])
    assert fts == {"messages_fts": "ok", "messages_fts_trigram": "ok"}
    return hashlib.sha256(json.dumps(rows).encode()).hexdigest()


def run_compact(home, *args, code=0):
    res = CliRunner().invoke(main, ["compact", "--home", str(home), "--json", *args])
    assert res.exit_code == code, res.output
    return json.loads(res.output)["profiles"][0]


def test_one_time_conversion_when_idle_then_hermes_vacuum_keeps_it(home, hermes):
    delete_cron(home)
    before = hermes_view(hermes, home)
    res = run_compact(home)
    assert res["auto_vacuum_before"] == "none" and res["auto_vacuum_after"] == "incremental"
    assert res["vacuumed"] and res["backup"] and (home / "keeper" / "backups" / res["backup"]).exists()
    # Freed bytes are what the file lost: page_count * page_size before and after, WAL included.
    assert res["freed_bytes"] == res["db_bytes_before"] + res["wal_bytes_before"] - res["db_bytes_after"]
    assert res["freed_bytes"] > 1_000_000 and res["wal_bytes_after"] == 0
    assert (home / "state.db").stat().st_size == res["db_bytes_after"]
    assert hermes_view(hermes, home) == before
    hermes.call(home, "vacuum")  # Hermes's own VACUUM keeps the mode
    assert sql(home, "PRAGMA auto_vacuum")[0] == [(2,)]


def test_incremental_steps_while_hermes_writes(home, hermes, monkeypatch):
    # The cut's one write races the writer's (50/s); on a loaded machine the writer can win every
    # one of the default 20 tries (a second), and the keeper then says so and leaves the WAL for
    # the next run. What this test holds is that the cut works when it gets its turn: more tries.
    monkeypatch.setattr(compact_mod, "WAL_CUT_TRIES", 400)
    sql(home, "PRAGMA auto_vacuum=INCREMENTAL", "VACUUM")
    delete_cron(home)
    free_before = sql(home, "PRAGMA freelist_count")[0][0][0]
    profile = select_profiles(home)[0]
    with live_writer(home, rate=50.0, warmup_s=0.3) as w:
        res = compact(profile)
    assert w.stats["failures"] == 0 and w.stats["max_ms"] < 1000 and res.live
    # The writer frees and reuses pages too, so "all of them" is within a few pages.
    assert res.pages_freed >= free_before * 0.95 and free_before > 300 and not res.vacuumed
    assert res.free_bytes_after <= 16 * 4096 and res.backup is None
    assert res.db_bytes_before - res.db_bytes_after >= res.pages_freed * 4096 * 0.9
    # Moved pages pass through the WAL; a live Hermes never truncates it, so ours keeps it bounded.
    assert "was not cut back" not in res.note
    assert res.wal_bytes_after <= WAL_LIMIT_BYTES + 1_000_000
    hermes_view(hermes, home)  # indexes intact after the merges


def test_held_database_is_not_vacuumed_when_the_stall_would_not_fit(home, hold_open):
    (home / "keeper.toml").write_text('live_vacuum_stall = "10ms"\n')  # as for a database of many GB
    proc = hold_open(home / "state.db")
    delete_cron(home)  # with Hermes holding the file, the delete's pages stay in the WAL
    res = run_compact(home, code=75)  # not converted because Hermes held it: try later
    assert not res["vacuumed"] and res["auto_vacuum_after"] == "none" and res["backup"] is None
    assert res["free_bytes_after"] > 1_000_000 and res["wal_bytes_after"] > 0  # the WAL is not truncated
    assert f"{units.size(res['free_bytes_after'])} reclaimable" in res["note"]
    assert "over live_vacuum_stall, 0.01s" in res["note"]
    assert "when no process holds the database" in res["note"] and f"pid {proc.pid}" in res["note"]
    assert res["live"] and "Hermes's own FTS optimize" in res["note"]
    assert not (home / "keeper" / "backups").exists()


def test_index_space_of_deleted_messages_comes_back_once_hermes_stops(home, hermes, hold_open):
    sql(home, "PRAGMA auto_vacuum=INCREMENTAL", "VACUUM")
    delete_cron(home)
    expected = hermes_view(hermes, home)
    proc = hold_open(home / "state.db")
    live = run_compact(home)  # FTS5 deletes only add tombstones: little comes back while Hermes runs
    proc.kill()
    proc.wait()
    idle = run_compact(home)  # now one full merge, in bounded steps
    assert live["live"] and not idle["live"] and idle["fts_merge_steps"] > live["fts_merge_steps"]
    assert idle["db_bytes_before"] - idle["db_bytes_after"] > live["db_bytes_before"] - live["db_bytes_after"]
    assert idle["free_bytes_after"] == 0 and idle["wal_bytes_after"] == 0
    assert hermes_view(hermes, home) == expected  # same messages, indexes intact


def test_wait_idle_converts_once_hermes_stops(home, hold_open):
    delete_cron(home)
    proc = hold_open(home / "state.db")
    threading.Timer(1.5, proc.kill).start()  # Hermes stops a moment later
    t0 = time.monotonic()
    res = run_compact(home, "--wait-idle", "30s")
    assert res["vacuumed"] and res["auto_vacuum_after"] == "incremental"
    assert 1.0 < time.monotonic() - t0 < 20


def test_rollback_journal_mode_is_kept(home):
    sql(home, "PRAGMA journal_mode=DELETE")  # what Hermes uses on network filesystems
    delete_cron(home)
    res = run_compact(home)
    assert res["vacuumed"] and sql(home, "PRAGMA journal_mode")[0] == [("delete",)]
    assert not (home / "state.db-wal").exists()


def test_not_understood_timestamps_are_refused(home):
    sql(home, "UPDATE messages SET timestamp = timestamp * 1000 WHERE id % 7 = 0")
    before = tree_digest(home)
    res = CliRunner().invoke(main, ["compact", "--home", str(home)])
    assert res.exit_code == 2 and "milliseconds" in res.output
    after = tree_digest(home)
    for own in ("keeper/journal.jsonl", "keeper.lock"):
        after.pop(own, None)
    assert after == before


def test_a_merge_step_that_runs_long_while_hermes_runs_is_rolled_back(home, hermes, hold_open, monkeypatch):
    monkeypatch.setattr(compact_mod, "FTS_STEP_LIMIT_MS", 0.001)  # every step is "too long"
    delete_cron(home)
    # A full merge already in progress (a compact that was stopped): the live steps have work to do.
    sql(home, *(f"INSERT INTO {t}({t}, rank) VALUES('merge', -16)" for t in FTS_TABLES))
    expected = hermes_view(hermes, home)
    hold_open(home / "state.db")
    res = compact(select_profiles(home)[0])
    assert res.live and "messages_fts_trigram" in res.fts_left
    assert "only the merges Hermes itself would do" in res.note
    assert hermes_view(hermes, home) == expected  # nothing half-merged


def test_run_beside_hermes_says_reclaimable_not_freed_for_pages_left_in_the_file(home, hold_open):
    """auto_vacuum none, Hermes holding a database too big to VACUUM beside it: the file cannot
    shrink, and the summary says so."""
    policy = (
        'backup = false\nlive_vacuum_stall = "0s"\n[retention]\ndefault = "1d"\ncron = "1d"\ncli = "1d"\n'
    )
    (home / "keeper.toml").write_text(policy)
    hold_open(home / "state.db")
    out = CliRunner().invoke(main, ["run", "--json", "--home", str(home)])
    assert out.exit_code == 0, out.output
    res = json.loads(out.output)["profiles"][0]
    assert res["pruned"] > 0 and res["compact"]["auto_vacuum_after"] == "none"
    # nothing came back from state.db; its WAL (counted too) grew with the run's writes
    assert res["file_bytes_after"] >= res["file_bytes_before"]
    assert res["freed_bytes"] == res["file_bytes"]  # only the removed session files
    assert res["reclaimable_bytes"] > 1_000_000
    assert f"{units.size(res['reclaimable_bytes'])} reclaimable still in state.db" in res["summary"]
    assert f"freed {units.size(res['freed_bytes'])} on disk" in res["summary"]
    assert "compact --wait-idle" in res["summary"]
    # the run's hold merged what its deletes left: no word of merges left to Hermes
    assert "Hermes itself would do" not in (res["compact"]["note"] or "")


def test_small_database_is_converted_beside_a_quiet_hermes(home, hermes, hold_open):
    """The one-time VACUUM while Hermes holds the database: its estimated stall fits, Hermes is quiet."""
    delete_cron(home)
    expected = hermes_view(hermes, home)
    hold_open(home / "state.db")
    res = run_compact(home)
    assert res["live"] and res["holders"] and res["vacuumed"]
    assert res["auto_vacuum_after"] == "incremental" and res["free_bytes_after"] == 0
    assert 0 < res["vacuum_estimate_s"] <= compact_mod.DEFAULT_LIVE_VACUUM_STALL_S
    assert not list((home / "keeper").glob("vacuum-estimate-*"))  # the timed copy is gone
    assert hermes_view(hermes, home) == expected


def test_the_note_gives_the_estimate_the_json_gives(home, hold_open, monkeypatch):
    """One rounding for both: an estimate of 0.2504 s is 0.25 in --json and "about 250ms" in the
    note (which once said 0.3 beside it)."""
    monkeypatch.setattr(compact_mod, "estimate_vacuum_s", lambda *a: 0.2504)
    monkeypatch.setattr(compact_mod, "wait_quiet", lambda *a: False)  # a gateway that never pauses
    delete_cron(home)
    hold_open(home / "state.db")
    res = run_compact(home)
    assert res["vacuumed"] and res["vacuum_estimate_s"] == 0.25
    assert "a stall of its writes of about 250ms" in res["note"]


def test_converted_beside_a_gateway_that_never_pauses(home, monkeypatch):
    """An always-on gateway (Hermes's own append_message 20 times a second) never gives a quiet
    second: the VACUUM runs anyway once its estimate fits, says so, and no write is lost."""
    monkeypatch.setattr(compact_mod, "QUIET_WAIT_S", 0.5)
    delete_cron(home)
    before = (home / "state.db").stat().st_size
    with live_writer(home, rate=20.0, warmup_s=0.3) as w:
        res = compact(select_profiles(home)[0])
    assert res.live and res.vacuumed and res.auto_vacuum_after == "incremental"
    assert "did not pause" in res.note and f"about {units.took(res.vacuum_estimate_s)}" in res.note
    assert w.stats["failures"] == 0 and w.stats["writes"] > 0
    assert res.db_bytes_after < before - 1_000_000


def _wal_salts(home) -> bytes:
    """The WAL header's two salts: SQLite draws new ones each time the WAL starts over."""
    with open(home / "state.db-wal", "rb") as fh:
        return fh.read(32)[16:24]


def test_a_wal_hermes_left_big_is_cut_back_while_it_writes(home, hermes, fixed_sqlite):
    """Hermes checkpoints only PASSIVE while it runs, so a WAL one big transaction grew (its 0.19
    'optimize', a VACUUM beside it) keeps that size until Hermes closes. The keeper's one-page
    commit after a checkpoint that copied every frame starts the WAL over, cut to the limit,
    while Hermes goes on writing: no write lost, the header's application_id (today's Hermes
    stamps the file's generation there) as it was. On a SQLite without the WAL-reset bug
    (tests/test_walreset.py: with it, no cut)."""
    profile = select_profiles(home)[0]
    sql(home, "PRAGMA application_id=1234567")
    with live_writer(home, rate=20.0, warmup_s=0.3) as w:
        rebuild = "INSERT INTO {0}({0}) VALUES('rebuild')"  # one transaction of every index page
        sql(home, *(rebuild.format(t) for t in FTS_TABLES))
        assert profile.wal_bytes() > WAL_LIMIT_BYTES
        salts = _wal_salts(home)
        assert compact_mod.cut_wal(profile)
        # The WAL started over (new salts), cut to the limit at that moment; its size read again
        # here would count the frames Hermes's writer appended since (a flaky measure under load).
        assert _wal_salts(home) != salts
    assert w.stats["failures"] == 0 and w.stats["writes"] > 0
    assert sql(home, "PRAGMA application_id", "PRAGMA quick_check") == [[(1234567,)], [("ok",)]]
    hermes_view(hermes, home)  # Hermes reads it, both indexes whole


def test_a_wal_left_big_is_said_so(home, hold_open, monkeypatch, fixed_sqlite):
    """A WAL the cut could not start over (Hermes wrote first every time, a full disk) is named
    in the note, with its size."""
    monkeypatch.setattr(compact_mod, "cut_wal", lambda *args: False)
    hold_open(home / "state.db")
    res = compact(select_profiles(home)[0], allow_full_vacuum=False)
    assert f"the WAL ({units.size(res.wal_bytes_after)}) was not cut back beside Hermes" in res.note


def test_rollback_journal_estimate_lets_hermes_commit_between_its_reads(home, monkeypatch, tmp_path):
    """In DELETE mode a reader holds every commit: the estimate's copy is made of short reads
    (each one statement under its own read lock), another process commits between any two of
    them, and the VACUUM timed on that copy gives the estimate."""
    sql(home, "PRAGMA journal_mode=DELETE", "CREATE TABLE probe(x)")
    delete_cron(home)
    other = sqlite3.connect(home / "state.db", timeout=0, isolation_level=None)
    outcomes = []

    def commit() -> str:
        try:
            other.execute("INSERT INTO probe VALUES (1)")
            return "committed"
        except sqlite3.OperationalError as exc:
            return str(exc)

    class Reads:
        """The copy's source connection: tries a commit while each read runs, and after it."""

        def __init__(self, conn):
            self.conn = conn

        def execute(self, *args):
            cursor = self.conn.execute(*args)  # a SELECT has stepped to its first row: locked
            during = commit()
            rows = cursor.fetchall()
            if rows:
                outcomes.append((during, commit()))
            return rows_cursor(rows)

        def close(self):
            self.conn.close()

    def rows_cursor(rows):
        return type("Rows", (), {"fetchall": lambda self: rows})()

    connect_ro = compact_mod.connect_ro
    monkeypatch.setattr(compact_mod, "connect_ro", lambda db, **kw: Reads(connect_ro(db, **kw)))
    try:
        estimate = compact_mod.estimate_vacuum_s(home / "state.db", tmp_path, "delete")
    finally:
        other.close()
    assert estimate is not None and estimate > 0
    assert len(outcomes) > 20 and set(outcomes) == {("database is locked", "committed")}
    assert not list(tmp_path.glob("vacuum-estimate-*"))


def test_a_copy_that_stays_busy_gives_no_estimate(home, monkeypatch, tmp_path):
    """Hermes holding the lock past the copy's busy timeout (its own FTS5 work can take seconds):
    no measure, so no VACUUM beside it, and the scratch copy is gone."""

    def busy(db, dst):
        dst.write_bytes(b"partial")
        raise sqlite3.OperationalError("database is locked")

    monkeypatch.setattr(compact_mod, "_copy_rows", busy)
    assert compact_mod.estimate_vacuum_s(home / "state.db", tmp_path, "delete") is None
    assert not list(tmp_path.glob("vacuum-estimate-*"))


def held_rollback_journal_home(home, hold_open):
    """``home`` in DELETE mode with pages to free, a check on record (a plan's), and held open."""
    sql(home, "PRAGMA journal_mode=DELETE")
    delete_cron(home)
    (home / "keeper").mkdir(mode=0o700)  # as a first run leaves it: where the check is recorded
    planned = CliRunner().invoke(main, ["plan", "--home", str(home)])
    assert planned.exit_code == 0, planned.output
    hold_open(home / "state.db", via_hermes=False)
    return select_profiles(home)[0]


def test_no_vacuum_beside_hermes_when_its_stall_cannot_be_measured(home, hold_open, monkeypatch):
    monkeypatch.setattr(compact_mod, "estimate_vacuum_s", lambda *a: None)
    res = compact(held_rollback_journal_home(home, hold_open))
    assert res.live and not res.vacuumed and res.auto_vacuum_after == "none"
    assert "could not be measured" in res.note and "reclaimable" in res.note


def test_rollback_journal_vacuum_beside_hermes_goes_without_a_snapshot(home, hermes, hold_open):
    """compact's backup before the VACUUM would hold Hermes for the whole copy in DELETE mode:
    the VACUUM (all or nothing, no row changed) runs without it, and says so."""
    profile = held_rollback_journal_home(home, hold_open)
    expected = sql(home, CONTENT)  # not through Hermes: its SessionDB would switch the file to WAL
    res = compact(profile)
    assert res.live and res.vacuumed and res.backup is None and res.auto_vacuum_after == "incremental"
    assert (
        "no backup before it" in res.note
        and 0 < res.vacuum_estimate_s <= compact_mod.DEFAULT_LIVE_VACUUM_STALL_S
    )
    assert not list((home / "keeper").glob("backups/*.zst"))
    assert sql(home, CONTENT) == expected
    hermes_view(hermes, home)  # Hermes opens it, both FTS indexes pass its integrity check


def test_plan_announces_the_one_time_vacuum(home):
    (home / "keeper.toml").write_text('[retention]\ndefault = "1d"\ncron = "1d"\ncli = "1d"\n')
    out = CliRunner().invoke(main, ["plan", "--json", "--home", str(home)])
    plan = json.loads(out.output)["profiles"][0]
    assert plan["prune"]["sessions"] > 0
    announced = plan["compact"]
    assert announced.startswith("one-time VACUUM") and "stall estimate is at most 5s" in announced
    text = CliRunner().invoke(main, ["plan", "--home", str(home)]).output
    assert ". compact: one-time VACUUM" in text


@pytest.mark.parametrize(("stall", "wait"), [(0.4, 0.55), (1.9, 2.05), (2.0, 3.0), (2.4, 3.4)])
def test_a_stall_is_waited_out_to_hermes_next_try(stall, wait):
    """Today's Hermes retries a locked write within 150 ms for 2 s, then within 1 s."""
    assert compact_mod.hermes_wait_s(stall) == pytest.approx(wait)
