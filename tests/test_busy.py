"""A database another process keeps locked: the keeper waits, then stops cleanly (exit 75), no traceback."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import threading
import time

import pytest

from hermes_keeper import demo
from hermes_keeper.archive.store import Archive
from hermes_keeper.errors import EXIT_TRY_LATER, TryLater
from hermes_keeper.journal import JOURNAL_NAME, read_journal
from hermes_keeper.sqlite.connect import BUSY_TIMEOUT_S
from hermes_keeper.sqlite.writer import Budget, Writer
from tests.keeper_proc import keeper_cmd, planned_prune, session_ids

#: Takes the write lock (waiting as long as it must), says so on stdout, keeps it until stdin closes.
HOLDER = (
    "import sqlite3, sys; c = sqlite3.connect(sys.argv[1], timeout=60, isolation_level=None);"
    " c.execute('BEGIN IMMEDIATE'); print('locked', flush=True); sys.stdin.read(); c.execute('ROLLBACK')"
)


def _hold_lock(db) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(db)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout.readline().strip() == "locked"
    return proc


def _release(proc: subprocess.Popen) -> None:
    proc.stdin.close()
    assert proc.wait(timeout=30) == 0


@pytest.fixture
def home(tmp_path):
    home = tmp_path / "home"
    demo.build_home(home, demo.generate(time.time(), sessions=160, messages_per_session=30))
    return home


def test_writer_waits_for_a_busy_database_then_writes(home):
    holder = _hold_lock(home / "state.db")
    # Held past SQLite's own busy timeout, so the writer's first try fails and it tries again.
    released = threading.Timer(BUSY_TIMEOUT_S + 0.5, _release, (holder,))
    released.start()
    with Writer(home / "state.db", Budget(busy_wait_s=60)) as w:
        w.step(lambda c: c.execute("UPDATE sessions SET title = 'after the wait' WHERE rowid = 1"))
        assert w.stats.busy_retries >= 1
        # The wait is not lock time: the batch sizing and the budget figures see only the step.
        assert w.stats.busy_wait_ms > w.stats.total_txn_ms
    released.join()
    conn = sqlite3.connect(home / "state.db")
    assert conn.execute("SELECT title FROM sessions WHERE rowid = 1").fetchone()[0] == "after the wait"
    conn.close()


def test_writer_stops_with_try_later_and_changes_nothing(home):
    holder = _hold_lock(home / "state.db")
    try:
        with Writer(home / "state.db", Budget(busy_wait_s=0.5)) as w:
            with pytest.raises(TryLater):
                w.step(lambda c: c.execute("DELETE FROM messages"))
            assert not w.conn.in_transaction and w.stats.transactions == 0
    finally:
        _release(holder)
    conn = sqlite3.connect(home / "state.db")
    assert conn.execute("SELECT count(*) FROM messages").fetchone()[0] > 0
    conn.close()


def test_run_stops_cleanly_on_a_busy_database_and_the_next_run_finishes(home):
    # Small steps, so the run is still pruning when the lock is taken; a short wait for the test.
    (home / "keeper.toml").write_text('budget_ms = 3\npause_ms = 3\nbusy_wait = "1s"\n')
    to_prune = planned_prune(home)
    original = session_ids(home / "state.db")
    assert len(to_prune) > 50

    run = subprocess.Popen(keeper_cmd(home, "run", "--quiet"), stderr=subprocess.PIPE, text=True)
    journal = home / "keeper" / JOURNAL_NAME
    deadline = time.monotonic() + 120
    while '"action": "pruned"' not in (journal.read_text() if journal.exists() else ""):
        assert run.poll() is None, "the run ended before it pruned anything"
        assert time.monotonic() < deadline, "the run pruned nothing in 120 s"
        time.sleep(0.002)
    holder = _hold_lock(home / "state.db")  # mid-prune: the run's next step finds the database busy
    try:
        assert run.wait(timeout=120) == EXIT_TRY_LATER
        err = run.stderr.read()
    finally:
        _release(holder)
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert "next run resumes" in err
    entries = list(read_journal(home / "keeper"))
    stopped = [e for e in entries if e["action"] == "stopped"]
    assert stopped and stopped[0]["writer"]["max_busy_wait_ms"] > 0
    assert any(e["action"] == "fts_hold_kept" for e in entries)  # Hermes's settings: the next run
    assert (home / "keeper" / "fts-hold.json").exists()

    # Stopped where it was: some sessions gone, each of them verified in the archive, none unplanned.
    conn = sqlite3.connect(home / "state.db")
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    conn.close()
    missing = original - session_ids(home / "state.db")
    assert missing and missing < to_prune
    with Archive.for_home(home / "keeper") as store:
        assert all(store.verify(store.entry(sid).entry) for sid in missing)

    # The lock released, the next run finishes the plan: nothing lost, Hermes's FTS settings back.
    subprocess.run(keeper_cmd(home, "run", "--quiet"), check=True)
    after = session_ids(home / "state.db")
    assert not (after & to_prune)
    assert not (home / "keeper" / "fts-hold.json").exists()
    with Archive.for_home(home / "keeper") as store:
        assert all(store.verify(store.entry(sid).entry) for sid in original - after)
        assert {e.session_id for e in store.entries()} >= to_prune
    conn = sqlite3.connect(home / "state.db")
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    for table in ("messages_fts", "messages_fts_trigram"):
        assert conn.execute(f"SELECT count(*) FROM {table}_config WHERE k = 'automerge'").fetchone()[0] == 0
    conn.close()
