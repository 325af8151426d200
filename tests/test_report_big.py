"""``report`` on big homes: the slow facts (a full quick_check, dbstat) are reused with their age
instead of read again on every call (a passed quick_check while state.db is the same file: no read
at all); the growth windows come from the survey's one scan."""

from __future__ import annotations

import json
import os
import sqlite3
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from hermes_keeper import demo, facts, report
from hermes_keeper.cli import main
from hermes_keeper.fs import HomeFS
from hermes_keeper.home import Home
from hermes_keeper.sqlite import schema as schema_module
from hermes_keeper.sqlite.connect import interrupt_after, was_interrupted
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
    (first,) = report_json(home)  # measures the breakdown; plan's check of the same file stands
    assert checked_at == first["schema"]["quick_check_at"]
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


def delete_cron_messages(home):
    """Move the used bytes well over 10%, as a prune does."""
    conn = sqlite3.connect(home / "state.db")
    conn.execute("DELETE FROM messages WHERE session_id IN (SELECT id FROM sessions WHERE source = 'cron')")
    conn.commit()
    conn.close()


def test_breakdown_is_measured_again_once_the_used_bytes_moved(home):
    keeper_folder(home)
    (first,) = report_json(home)
    delete_cron_messages(home)
    (after,) = report_json(home)
    assert after["database"]["objects_measured_at"] == after["generated_at"] > first["generated_at"]
    assert after["database"]["groups"]["free"] > 0
    assert sum(after["database"]["groups"].values()) == after["database"]["bytes"]


def test_no_keeper_folder_nothing_written_and_an_unfinished_check_is_said(home, monkeypatch):
    before = tree_digest(home)
    monkeypatch.setattr(report, "CHECK_BUDGET_S", 0.0)
    # the read itself writes nothing without keeper/
    rep = Home(home).profile().report(record=False).to_dict()
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


def test_beside_a_holder_of_a_delete_mode_db_the_report_reads_no_whole_file(home, hold_open):
    """quick_check and dbstat each read every page in one read transaction: in DELETE mode that
    holds every commit of the process that has the database open (a gateway), so the report
    shows what is on record instead, and says so."""
    conn = sqlite3.connect(home / "state.db")
    conn.execute("PRAGMA journal_mode=DELETE")
    conn.close()
    keeper_folder(home)
    holder = hold_open(home / "state.db", via_hermes=False)  # as a gateway has it open
    try:
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
        rep = profile.report().to_dict()
        assert rep["holders"]["processes"]
        assert rep["schema"]["quick_check"] == "unknown" and rep["schema"]["quick_check_at"] is None
        assert rep["database"]["per_object"] is False and rep["database"]["objects"] == {}
        assert rep["sessions"]["total"] >= 200  # the survey's short steps still read everything else
    finally:
        holder.kill()
        holder.wait()
    rep = Home(home).profile().report().to_dict()  # nobody holds it: checked and measured, both recorded
    assert rep["schema"]["quick_check"] == "ok" and rep["database"]["per_object"]


def _malformed_copies(home) -> dict[str, Path]:
    """Hermes's copies, all older than the 30-day rule: only ``b`` (neither the newest nor the
    oldest) is a readable database (the demo's own copies removed)."""
    for demo_copy in home.glob("state.db.malformed-backup-*"):
        demo_copy.unlink()
    copies = {}
    for key, days in (("a", 300), ("b", 200), ("c", 100)):
        path = copies[key] = home / f"state.db.malformed-backup-2026010{len(copies) + 1}_000000"
        if key == "b":
            conn = sqlite3.connect(path)
            conn.execute("CREATE TABLE t (x)")
            conn.commit()
            conn.close()
        else:
            path.write_bytes(b"\x00" * 512)
        then = time.time() - days * report.DAY
        os.utime(path, (then, then))
    return copies


def _listed(copies: dict[str, Path]) -> list[tuple[str, int, float]]:
    return [(p.name, p.stat().st_size, p.stat().st_mtime) for p in copies.values()]


def _count_checks(monkeypatch) -> list[tuple[str, float | None]]:
    """Every quick_check the keeper starts: (file name, budget; None for a full one)."""
    calls = []
    real = facts.quick_check

    def counted(path, budget_s=None):
        calls.append((Path(path).name, budget_s))
        return real(path, budget_s)

    monkeypatch.setattr(facts, "quick_check", counted)
    return calls


def _copies_row(rep) -> dict:
    return next(r for r in rep["files"]["policy"] if r["kind"] == "malformed_copy")


def test_report_never_reads_state_db_whole_for_malformed_copies_and_keeps_them_when_unsure(home, monkeypatch):
    keeper_folder(home)
    _malformed_copies(home)
    calls = _count_checks(monkeypatch)
    monkeypatch.setattr(report, "CHECK_BUDGET_S", 0.0)  # as on a file of many GB, nothing on record
    (rep,) = report_json(home)
    assert ("state.db", None) not in calls and all(b is not None and b <= 0 for _name, b in calls)
    assert rep["schema"]["quick_check"] == "unknown"
    row = _copies_row(rep)  # state.db not known good, no copy known readable: every old one stays
    assert row["entries"] == 3 and row["remove_entries"] == 0 and row["kept"] == 2
    recorded = home / "keeper" / "facts.json"
    for age, removed in ((2 * facts.CHECK_TRUSTED_S, 0), (3600.0, 2)):  # stale: unsure; fresh: it passed
        facts.record_check(HomeFS(home), "ok", time.time() - age)
        (rep,) = report_json(home)
        assert _copies_row(rep)["remove_entries"] == removed
    assert ("state.db", None) not in calls
    assert json.loads(recorded.read_text())["quick_check"]["result"] == "ok"


def test_a_copy_s_check_is_recorded_by_its_size_and_mtime(home, monkeypatch):
    keeper_folder(home)
    copies = _malformed_copies(home)
    fs = HomeFS(home)
    calls = _count_checks(monkeypatch)
    found = _listed(copies)
    assert facts.copy_checks(fs, found, None) == {p.name: key == "b" for key, p in copies.items()}
    assert len(calls) == 3
    assert facts.copy_checks(fs, found, 0.0) == facts.copy_checks(fs, found, None)  # from the record
    assert len(calls) == 3
    os.utime(copies["b"])  # touched: checked again (out of time here: unknown, not "fails")
    assert facts.copy_checks(fs, _listed(copies), 0.0)[copies["b"].name] is None
    assert len(calls) == 4


def test_a_copy_that_passes_is_kept_while_state_db_is_not_known_good(home, monkeypatch):
    keeper_folder(home)
    copies = _malformed_copies(home)
    facts.copy_checks(HomeFS(home), _listed(copies), None)
    monkeypatch.setattr(report, "CHECK_BUDGET_S", 0.0)
    (rep,) = report_json(home)  # the copies' checks on record stand in: "a" may go, "b" stays
    row = _copies_row(rep)
    assert row["remove_entries"] == 1 and row["kept"] == 1
    assert row["remove_bytes"] == copies["a"].stat().st_size


def test_plan_and_run_read_state_db_whole_once_for_the_check_and_the_copies(home, monkeypatch):
    keeper_folder(home)
    copies = _malformed_copies(home)
    calls = _count_checks(monkeypatch)
    plan = Home(home).profile().plan()
    assert calls == [("state.db", None)]  # the plan's own check, reused by the malformed-copy rule
    assert {Path(f.path).name for f in plan.files if f.kind == "malformed_copy"} == {
        copies["a"].name,
        copies["b"].name,
    }
    calls.clear()
    (home / "keeper.toml").write_text("backup = false\n")
    Home(home).profile().run()
    assert calls == [("state.db", None)] and not copies["a"].exists() and copies["c"].exists()


def test_dbstat_past_its_budget_shows_the_recorded_breakdown_scaled_as_an_estimate(home, monkeypatch):
    keeper_folder(home)
    (first,) = report_json(home)
    delete_cron_messages(home)
    monkeypatch.setattr(report, "DBSTAT_BUDGET_S", 0.0)
    (rep,) = report_json(home)
    db = rep["database"]
    assert db["objects_estimated"] and db["per_object"]
    assert db["objects_measured_at"] == first["database"]["objects_measured_at"] < rep["generated_at"]
    used = db["bytes"] - db["reclaimable_bytes"]
    assert used < 0.9 * (first["database"]["bytes"] - first["database"]["reclaimable_bytes"])
    assert used - len(db["objects"]) <= sum(db["objects"].values()) <= used  # scaled, within rounding
    assert set(db["objects"]) == set(first["database"]["objects"])
    recorded = json.loads((home / "keeper" / "facts.json").read_text())["objects"]
    assert recorded["at"] == first["database"]["objects_measured_at"]  # the estimate is not recorded
    out = CliRunner().invoke(main, ["report", "--home", str(home)], terminal_width=200).output
    assert "bytes per table estimated: measured at" in out
    monkeypatch.setattr(report, "DBSTAT_BUDGET_S", 30.0)
    (again,) = report_json(home)  # in time: measured again, no longer an estimate
    assert not again["database"]["objects_estimated"]
    assert again["database"]["objects_measured_at"] == again["generated_at"]


def test_a_read_of_every_page_stops_at_its_budget():
    conn = sqlite3.connect(":memory:")
    endless = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c"
    with pytest.raises(sqlite3.OperationalError) as exc, interrupt_after(conn, 0.05):
        conn.execute(endless).fetchall()
    assert was_interrupted(exc.value)
    with interrupt_after(conn, 30.0):  # a statement that ends in time is not touched
        assert conn.execute("SELECT 1").fetchone() == (1,)


def test_a_check_that_took_far_longer_than_the_budget_is_not_tried_again_for_a_day(home, monkeypatch):
    """At 5 GB a full quick_check takes a minute: a report would spend its whole 1 s budget on a
    check that cannot finish. A full check on record that took over twice the budget stands in
    for a day, untried; after that the report tries again."""
    facts_file = keeper_folder(home)
    fs = Home(home).profile().fs
    tried = []
    real = facts.quick_check
    monkeypatch.setattr(
        facts, "quick_check", lambda db, budget=None: tried.append(budget) or real(db, budget)
    )
    facts.record_check(fs, "ok", time.time() - 60, took_s=90.0)
    check = facts.bounded_check(fs, home / "state.db", 1.0)
    assert tried == [] and check.result == "ok" and time.time() - check.at >= 60
    rec = json.loads(facts_file.read_text())["quick_check"]
    facts_file.write_text(json.dumps({"quick_check": rec | {"at": rec["at"] - facts.CHECK_TRUSTED_S}}))
    check = facts.bounded_check(fs, home / "state.db", 1.0)  # a day old: tried, and it finishes here
    assert tried == [1.0] and check.result == "ok" and time.time() - check.at < 60
    assert json.loads(facts_file.read_text())["quick_check"]["took_s"] < 1.0


def test_unchanged_state_db_is_not_read_again_by_report_or_plan(home, monkeypatch):
    """Issue 35: a full quick_check on every plan (3.7 s at 5 GB), one within 1 s on every report.
    A check that passed stands while state.db and its WAL keep their identity (device, inode,
    size, mtime); a write makes the next one read again, and compact (as run) always does."""
    keeper_folder(home)
    reads = []
    real = facts.quick_check

    def counting(db, budget_s=None):
        reads.append(budget_s)
        return real(db, budget_s)

    monkeypatch.setattr(facts, "quick_check", counting)
    profile = Home(home).profile()
    profile.plan()
    assert reads == [None]  # the full one
    profile.plan()
    first = profile.report(record=False).schema
    assert reads == [None] and first.quick_check == "ok"
    delete_cron_messages(home)  # a write: another file now
    again = profile.report(record=False).schema
    assert reads == [None, report.CHECK_BUDGET_S] and again.quick_check_at > first.quick_check_at
    assert "quick_check" not in " ".join(profile.plan().warnings) and len(reads) == 2
    profile.compact()  # writes: reads every page first, whatever is on record
    assert reads[2:] == [None]


def test_dbstat_that_ran_out_of_time_is_not_tried_again_on_the_same_file(home, monkeypatch):
    """Issue 35: 1.0 s of every report at 5 GB went on a ``dbstat`` that never finished within
    its time on that file. Once out of time it is not tried again until state.db changes."""
    keeper_folder(home)
    tries = []
    real = report._object_sizes

    def counting(conn, budget_s):
        tries.append(budget_s)
        return real(conn, budget_s)

    monkeypatch.setattr(report, "_object_sizes", counting)
    monkeypatch.setattr(report, "DBSTAT_BUDGET_S", 0.0)  # as on a file of many GB
    profile = Home(home).profile()
    first = profile.report(record=False)
    assert len(tries) == 1 and first.database.per_object is False
    profile.report(record=False)
    assert len(tries) == 1
    delete_cron_messages(home)  # another file now: tried again
    profile.report(record=False)
    assert len(tries) == 2
    monkeypatch.setattr(report, "DBSTAT_BUDGET_S", 60.0)  # more time than ran out: tried, recorded
    again = profile.report(record=False)
    assert len(tries) == 3 and again.database.per_object is True


def test_plan_takes_the_messages_timestamps_from_the_statistics(home, monkeypatch):
    """Issue 35: every plan scanned ``messages.timestamp`` for odd values (1.8 s at 5 GB) that the
    statistics it reads count already; ``run`` still scans before it writes."""
    keeper_folder(home)
    scans = []
    real = schema_module.timestamp_problems

    def counting(conn, tables, messages=None, stepped=False):
        scans.append(messages)
        return real(conn, tables, messages, stepped)

    monkeypatch.setattr(schema_module, "timestamp_problems", counting)
    profile = Home(home).profile()
    assert "timestamps" not in " ".join(profile.plan().warnings)
    assert None not in scans
    profile.run()
    assert None in scans
