"""``report`` on big homes: the slow facts (a full quick_check, dbstat) are reused with their age
instead of read again on every call; the growth windows come from the survey's one scan."""

from __future__ import annotations

import json
import sqlite3
import stat
import subprocess
import sys
import time

import pytest
from click.testing import CliRunner

from hermes_keeper import demo, report
from hermes_keeper.cli import main
from hermes_keeper.home import Home
from tests.conftest import tree_digest
from tests.test_report import report_json


@pytest.fixture
def home(tmp_path):
    home = tmp_path / "home"
    demo.build_home(home, demo.generate(time.time(), sessions=200))
    return home


def keeper_folder(home):
    (home / "keeper").mkdir(mode=0o700, exist_ok=True)
    return home / "keeper" / "facts.json"


def test_out_of_time_report_shows_the_last_full_check_and_reuses_the_breakdown(home, monkeypatch):
    facts = keeper_folder(home)
    assert CliRunner().invoke(main, ["plan", "--home", str(home)]).exit_code == 0  # a full check
    checked_at = json.loads(facts.read_text())["quick_check"]["at"]
    assert stat.S_IMODE(facts.stat().st_mode) == 0o600
    (first,) = report_json(home)  # measures the breakdown, checks in full: both recorded
    assert checked_at < first["schema"]["quick_check_at"]
    db = first["database"]
    assert db["objects_measured_at"] == first["generated_at"]
    monkeypatch.setattr(report, "CHECK_BUDGET_S", 0.0)  # as on a file of many GB
    (again,) = report_json(home)
    assert (
        again["schema"]["quick_check"] == "ok"
        and again["schema"]["quick_check_at"] == first["schema"]["quick_check_at"]
    )
    assert again["database"]["objects_measured_at"] == db["objects_measured_at"] < again["generated_at"]
    assert again["database"]["objects"] == db["objects"]  # the same used bytes: scaled by 1
    assert sum(again["database"]["groups"].values()) == again["database"]["bytes"]
    data = json.loads(facts.read_text())  # both an hour old: the text says when they were taken
    facts.write_text(json.dumps({k: v | {"at": v["at"] - 3600} for k, v in data.items()}))
    out = CliRunner().invoke(main, ["report", "--home", str(home)], terminal_width=200).output
    assert "(last full check)" in out and "bytes per table as measured at" in out


def test_breakdown_is_measured_again_once_the_used_bytes_moved(home):
    keeper_folder(home)
    (first,) = report_json(home)
    conn = sqlite3.connect(home / "state.db")
    conn.execute("DELETE FROM messages WHERE session_id IN (SELECT id FROM sessions WHERE source = 'cron')")
    conn.commit()
    conn.close()
    (after,) = report_json(home)
    assert after["database"]["objects_measured_at"] == after["generated_at"] > first["generated_at"]
    assert after["database"]["groups"]["free"] > 0
    assert sum(after["database"]["groups"].values()) == after["database"]["bytes"]


def test_no_keeper_folder_nothing_written_and_an_unfinished_check_is_said(home, monkeypatch):
    before = tree_digest(home)
    monkeypatch.setattr(report, "CHECK_BUDGET_S", 0.0)
    rep = Home(home).profile().report()  # the library's report writes nothing without keeper/
    assert rep["schema"]["quick_check"] == "unknown" and rep["schema"]["quick_check_at"] is None
    assert tree_digest(home) == before
    out = CliRunner().invoke(main, ["report", "--home", str(home)], terminal_width=200).output
    assert "not finished within report's time" in out and "fails quick_check" not in out
    after = tree_digest(home)  # the command records its figures in the history (docs/history.md)
    assert (
        set(after) - set(before) <= {"keeper/history.db", "keeper/facts.json"}
        and "keeper/history.db" in after
    )
    assert {k: v for k, v in after.items() if k in before} == before


def test_growth_windows_count_what_a_direct_query_counts(home):
    (rep,) = report_json(home)
    now = rep["generated_at"]
    conn = sqlite3.connect(home / "state.db")
    for days in report.GROWTH_WINDOWS:
        n, size = conn.execute(
            "SELECT count(*), sum(coalesce(length(CAST(content AS BLOB)), 0)"
            " + coalesce(length(CAST(tool_calls AS BLOB)), 0) + coalesce(length(CAST(reasoning AS BLOB)), 0))"
            " FROM messages WHERE timestamp >= ?",
            (now - days * report.DAY,),
        ).fetchone()
        assert rep["growth"][f"last_{days}d"]["messages"] == n > 0
        assert rep["growth"][f"last_{days}d"]["bytes_per_day"] > 0
    conn.close()


def test_beside_a_holder_of_a_delete_mode_db_the_report_reads_no_whole_file(home):
    """quick_check and dbstat each read every page in one read transaction: in DELETE mode that
    holds every commit of the process that has the database open (a gateway), so the report
    shows what is on record instead, and says so."""
    conn = sqlite3.connect(home / "state.db")
    conn.execute("PRAGMA journal_mode=DELETE")
    conn.close()
    keeper_folder(home)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import sqlite3,time; c=sqlite3.connect({str(home / 'state.db')!r}); time.sleep(120)",
        ]
    )
    try:
        time.sleep(0.5)
        profile = Home(home).profile()
        facts = home / "keeper" / "facts.json"
        assert "quick_check" not in " ".join(profile.plan().warnings)
        # plan checked nothing: a full read would have held the holder's commits
        assert not facts.exists() or "quick_check" not in json.loads(facts.read_text())
        compact = subprocess.run(
            [sys.executable, "-m", "hermes_keeper", "compact", "--home", str(home)],
            capture_output=True,
            text=True,
        )
        assert compact.returncode == 75 and "no quick_check on record" in compact.stderr
        rep = profile.report()
        assert rep["holders"]["processes"]
        assert rep["schema"]["quick_check"] == "unknown" and rep["schema"]["quick_check_at"] is None
        assert rep["database"]["per_object"] is False and rep["database"]["objects"] == {}
        assert rep["sessions"]["total"] >= 200  # the survey's short steps still read everything else
    finally:
        holder.kill()
        holder.wait()
    rep = Home(home).profile().report()  # nobody holds it: checked and measured, both recorded
    assert rep["schema"]["quick_check"] == "ok" and rep["database"]["per_object"]
