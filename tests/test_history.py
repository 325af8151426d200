"""The history database: every report and run recorded, listed by `history`, thinned, never fatal."""

from __future__ import annotations

import json
import os
import sqlite3
import stat
import subprocess
import time

import pytest

from hermes_keeper import demo
from hermes_keeper.history import DAY, HISTORY_NAME, History
from hermes_keeper.home import Home
from tests.keeper_proc import keeper_cmd


def keeper(home, *args):
    return subprocess.run(keeper_cmd(home, *args), capture_output=True, text=True)


@pytest.fixture
def home(tmp_path):
    home = tmp_path / "home"
    demo.build_home(home, demo.generate(time.time(), sessions=60))
    return home


def test_report_and_run_are_recorded_and_listed(home):
    reported = json.loads(keeper(home, "report", "--json").stdout)["profiles"][0]
    ran = keeper(home, "run", "--json")
    assert ran.returncode == 0, ran.stderr
    done = json.loads(ran.stdout)["profiles"][0]
    assert done["pruned"] > 0 and done["seconds"] > 0
    path = home / "keeper" / HISTORY_NAME
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE((home / "keeper").stat().st_mode) == 0o700

    listed = keeper(home, "history", "--json")
    assert listed.returncode == 0, listed.stderr
    rows = json.loads(listed.stdout)["profiles"][0]["entries"]
    assert [r["kind"] for r in rows] == ["run"]  # runs only by default
    run = rows[0]
    assert run["pruned"] == done["pruned"] and run["archived"] == done["archived"]
    assert run["freed_bytes"] == done["freed_bytes"] and run["seconds"] == done["seconds"]
    assert run["max_txn_ms"] == done["writer"]["max_txn_ms"] > 0
    comps = run["components"]
    assert {"messages", "fts:messages_fts", "fts:messages_fts_trigram", "free", "wal"} <= comps.keys()
    assert comps["archive"] > 0 and comps["backups"] > 0 and comps["messages"] > 0

    every = json.loads(keeper(home, "history", "--json", "--all").stdout)["profiles"][0]["entries"]
    assert [r["kind"] for r in every] == ["report", "run"]
    report = every[0]
    assert sum(report["sessions_by_source"].values()) == report["sessions"] == reported["sessions"]["total"]
    assert report["components"]["free"] == reported["database"]["groups"]["free"]
    assert report["components"]["messages"] > comps["messages"]  # the run pruned messages

    text = keeper(home, "history")
    assert text.returncode == 0 and str(done["pruned"]) in text.stdout and "run" in text.stdout
    newest = json.loads(keeper(home, "history", "--json", "--all", "--limit", "1").stdout)
    assert [r["kind"] for r in newest["profiles"][0]["entries"]] == ["run"]


def test_history_of_a_home_never_recorded_is_empty(home):
    res = keeper(home, "history", "--json")
    assert res.returncode == 0 and json.loads(res.stdout)["profiles"][0]["entries"] == []
    assert not (home / "keeper").exists()  # listing creates nothing


def test_old_rows_are_thinned_keeping_the_totals(home):
    profile = Home(home).profile()
    hist = History(profile)
    now = 1.8e9
    fig = json.dumps({"runs": 1, "pruned": 2, "freed_bytes": 10})
    rows = [
        (now - day * DAY + hour * 3600, "run", "default", fig)
        for day in range(800, 0, -1)
        for hour in (1, 7, 13)
    ]
    assert hist.record("run", {"runs": 1, "pruned": 2, "freed_bytes": 10}, now=now - 900 * DAY)  # creates it
    conn = sqlite3.connect(home / "keeper" / HISTORY_NAME)
    with conn:  # years of nightly runs, three a day, written straight in
        conn.executemany("INSERT INTO entries (ts, kind, profile, figures) VALUES (?, ?, ?, ?)", rows)
    conn.close()
    recorded = len(rows) + 2
    assert hist.record("run", {"runs": 1, "pruned": 2, "freed_bytes": 10}, now=now)  # thins
    rows = hist.entries()
    ages = [(now - e.ts) / DAY for e in rows]
    recent = [a for a in ages if a < 30]
    daily = [a for a in ages if 30 <= a < 365]
    weekly = [a for a in ages if a >= 365]
    assert len(recent) >= 29 * 3  # the last 30 days untouched
    assert 330 <= len(daily) <= 336  # one a day
    assert 60 <= len(weekly) <= 64  # one a week
    assert len(rows) < recorded / 2
    # Nothing a run did is lost by thinning: the kept rows carry the removed rows' sums.
    assert sum(e.figures["runs"] for e in rows) == recorded
    assert sum(e.figures["pruned"] for e in rows) == 2 * recorded
    assert sum(e.figures["freed_bytes"] for e in rows) == 10 * recorded
    assert hist.entries(limit=5) == rows[-5:]
    assert hist.record("report", {}, now=now + 1) and len(hist.entries()) == len(rows) + 1  # stable


def test_a_history_that_cannot_be_written_warns_and_the_command_succeeds(home, tmp_path):
    (home / "keeper").mkdir(mode=0o700)
    outside = tmp_path / "elsewhere.db"
    (home / "keeper" / HISTORY_NAME).symlink_to(outside)
    res = keeper(home, "report", "--json")
    assert res.returncode == 0
    assert json.loads(res.stdout)["profiles"][0]["sessions"]["total"] > 0
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "warning" in lines[0] and "history not recorded" in lines[0]
    assert not outside.exists()


def test_a_read_only_keeper_folder_warns_and_the_report_succeeds(home, tmp_path):
    assert keeper(home, "report").returncode == 0  # keeper/ and history.db exist
    view = tmp_path / "ro"
    view.mkdir()
    subprocess.run(["mount", "--bind", str(home / "keeper"), str(view)], check=True)
    try:
        subprocess.run(["mount", "-o", "remount,ro,bind", str(view)], check=True)
        subprocess.run(["mount", "--bind", str(view), str(home / "keeper")], check=True)
        try:
            res = keeper(home, "report", "--json")
            assert res.returncode == 0, res.stderr
            lines = res.stderr.strip().splitlines()
            assert len(lines) == 1 and "history not recorded" in lines[0], res.stderr
            rows = json.loads(keeper(home, "history", "--all", "--json").stdout)["profiles"][0]["entries"]
            assert len(rows) == 1  # the first report only
        finally:
            subprocess.run(["umount", str(home / "keeper")], check=True)
    finally:
        subprocess.run(["umount", str(view)], check=True)
    assert os.access(home / "keeper" / HISTORY_NAME, os.W_OK)


def test_a_full_disk_under_the_keeper_folder_warns_and_the_report_succeeds(home):
    keeper_dir = home / "keeper"
    keeper_dir.mkdir(mode=0o700)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(keeper_dir)], check=True)
    try:
        with open(keeper_dir / "filler", "wb", buffering=0) as fh, pytest.raises(OSError):  # ENOSPC
            while True:
                fh.write(b"\0" * 4096)
        res = keeper(home, "report", "--json")
        assert res.returncode == 0, res.stderr
        assert json.loads(res.stdout)["profiles"][0]["sessions"]["total"] > 0
        lines = res.stderr.strip().splitlines()
        assert len(lines) == 1 and "history not recorded" in lines[0], res.stderr
    finally:
        subprocess.run(["umount", str(keeper_dir)], check=True)


def test_a_run_beside_a_holder_of_a_delete_mode_db_reads_no_whole_file_for_the_curve(home, hold_open):
    """dbstat reads every page in one read transaction, which in DELETE mode holds each Hermes
    commit: beside a holder the run's row takes the last recorded breakdown, or has none."""
    conn = sqlite3.connect(home / "state.db")
    conn.execute("PRAGMA journal_mode=DELETE")
    conn.close()
    holder = hold_open(home / "state.db", via_hermes=False)  # as a gateway has it open
    try:
        assert keeper(home, "run", "--quiet").returncode == 0
        (run,) = History(Home(home).profile()).entries(kinds=["run"])
        comps = run.figures["components"]
        assert comps["messages"] == 0 and not any(k.startswith("fts:") for k in comps)  # nothing measured
        assert comps["free"] == run.figures["reclaimable_bytes"]  # what the run knew is still there
    finally:
        holder.kill()
        holder.wait()
    assert keeper(home, "report", "--quiet").returncode == 0  # nobody holds it now: measured, recorded
    assert keeper(home, "run", "--quiet").returncode == 0
    last = History(Home(home).profile()).entries(kinds=["run"])[-1]
    assert last.figures["components"]["messages"] > 0


def test_the_library_records_as_the_cli_does(home):
    """A Python caller of Profile.report/run leaves the same history rows as the commands."""
    profile = Home(home).profile()
    profile.report()
    done = profile.run().to_dict()
    assert done["pruned"] > 0
    rows = profile.history.entries()
    assert [r.kind for r in rows] == ["report", "run"]
    assert rows[1].figures["pruned"] == done["pruned"]
    profile.report(record=False)
    assert len(profile.history.entries()) == 2
