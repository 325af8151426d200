"""SIGKILL a run at random moments: nothing is lost, nothing is half-deleted, a rerun finishes."""

from __future__ import annotations

import random
import shutil
import signal
import sqlite3
import subprocess
import time

from hermes_keeper import demo
from hermes_keeper.archive.store import ARCHIVED, PRUNED, Archive
from hermes_keeper.journal import JOURNAL_NAME, read_journal
from tests.keeper_proc import keeper_cmd, planned_prune, session_ids

KILLS = 22


def _wait_for_pruned(proc: subprocess.Popen, home, batches: int) -> None:
    """Until the run's journal shows ``batches`` pruned batches (or the run ended)."""
    journal = home / "keeper" / JOURNAL_NAME
    while proc.poll() is None:
        if journal.exists() and journal.read_text().count('"action": "pruned"') >= batches:
            return
        time.sleep(0.002)


def test_sigkill_anywhere(tmp_path):
    base = tmp_path / "base"
    demo.build_home(base, demo.generate(time.time(), sessions=160, messages_per_session=30))
    # Small transactions so a run lasts long enough to be cut at many different points.
    (base / "keeper.toml").write_text("budget_ms = 3\npause_ms = 3\n")
    to_prune = planned_prune(base)
    original = session_ids(base / "state.db")
    assert len(to_prune) > 50
    conn = sqlite3.connect(base / "state.db")
    counts = dict(conn.execute("SELECT session_id, count(*) FROM messages GROUP BY session_id"))
    conn.close()

    timing = shutil.copytree(base, tmp_path / "timing")
    t0 = time.time()
    subprocess.run(keeper_cmd(timing, "run", "--quiet"), check=True)
    duration = time.time() - t0
    # When sessions leave state.db within a run: from the first archived batch to the last pruned.
    actions = [(r["action"], r["ts"] - t0) for r in read_journal(timing / "keeper")]
    pruned = [ts for a, ts in actions if a == "pruned"]
    prune_window = (min(ts for a, ts in actions if a == "archived"), max(pruned))
    assert len(pruned) >= 3, "too few batches to kill between: weak test"

    rng = random.Random(1234)
    cut_mid_prune = 0
    for i in range(KILLS):
        home = shutil.copytree(base, tmp_path / f"k{i}")
        proc = subprocess.Popen(keeper_cmd(home, "run", "--quiet"))
        # A kill in three anywhere in the run, one while sessions are being deleted by the
        # clock, one by the run's own progress: once a random batch is gone, some way into the
        # next (the clock alone depends on this run being as fast as the timing run).
        if i % 3 == 0:
            time.sleep(rng.uniform(0.15, duration))
        elif i % 3 == 1:
            time.sleep(rng.uniform(*prune_window))
        else:
            k = rng.randint(1, len(pruned) - 1)
            _wait_for_pruned(proc, home, k)
            time.sleep(rng.uniform(0, pruned[k] - pruned[k - 1]))
        proc.send_signal(signal.SIGKILL)
        proc.wait()

        conn = sqlite3.connect(home / "state.db")
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        conn.close()
        missing = original - session_ids(home / "state.db")
        assert missing <= to_prune
        cut_mid_prune += 0 < len(missing) < len(to_prune)
        if missing:
            with Archive.for_home(home / "keeper") as store:
                for sid in missing:
                    assert store.verify(store.entry(sid).entry), (
                        f"kill {i}: {sid} gone from state.db but not verifiable"
                    )

        subprocess.run(keeper_cmd(home, "run", "--quiet"), check=True)
        after = session_ids(home / "state.db")
        assert not (after & to_prune), f"kill {i}: rerun left planned sessions behind"
        with Archive.for_home(home / "keeper") as store:
            assert all(store.verify(store.entry(sid).entry) for sid in original - after)
            assert {e.session_id for e in store.entries()} >= to_prune
            # The crash resume finished what the kill cut: each session's newest entry holds all
            # its messages and is pruned; no copy of a part of it stands in front of the whole.
            for sid in original - after:
                newest = store.entry(sid)
                assert (newest.message_count, newest.state) == (counts.get(sid, 0), PRUNED), (
                    f"kill {i}: {sid}"
                )
            assert not list(store.entries("WHERE state = ?", (ARCHIVED,))), f"kill {i}: left archived"
        shutil.rmtree(home)
    assert cut_mid_prune >= KILLS // 3, f"only {cut_mid_prune} kills landed mid-prune"
