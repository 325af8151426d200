"""``hermes-keeper check``: Nagios plugin conventions on the demo home.

Exit 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN; one line with valid perfdata; a runaway is
CRITICAL while it matters (open, or active within ``check.runaway_recent``; the fixture makes
that 60 days, so the demo's 10-50 day old runaways alert) until a run prunes it or ``--ack``
silences it, named by its session id; -w/-c/--timeout as Nagios plugins take them; a backup's
sha256 read once per file identity, not every poll.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import threading
import time

import jsonschema
import pytest

from hermes_keeper import check as check_module
from hermes_keeper import demo, facts
from hermes_keeper import report as report_module
from hermes_keeper.backup.snapshot import verify_backup
from hermes_keeper.check import CRITICAL, OK, check_profile
from hermes_keeper.cli.check import within
from hermes_keeper.errors import KeeperError
from hermes_keeper.home import Home
from hermes_keeper.run import survey as survey_module
from tests.keeper_proc import keeper_cmd
from tests.test_json import schema

#: Nagios perfdata: 'label'=value[UOM];[warn];[crit];[min];[max]
PERF = re.compile(r"'[^'=]+'=-?[0-9.]+(s|B|%|c)?;[0-9.:@~-]*;[0-9.:@~-]*;[0-9.]*;[0-9.]*")
#: free space and time until full depend on the machine's disk: out of this test's way
MACHINE_FREE = '[check]\nfree_warn = "0B"\nfree_crit = "0B"\nfull_in_warn = "0s"\nfull_in_crit = "0s"\n'
#: the demo's runaways ended 10-50 days ago: counted as recent here, as in the tests before
OLD_RUNAWAYS_ALERT = 'runaway_recent = "60d"\n'


@pytest.fixture
def home(tmp_path):
    home = tmp_path / "home"
    demo.build_home(home, demo.generate(time.time(), sessions=40))
    # the demo's runaways are closed cli sessions 10-50 days old: a 5-day cli retention prunes them
    (home / "keeper.toml").write_text(
        '[retention]\ncli = "5d"\ntui = "5d"\n' + MACHINE_FREE + OLD_RUNAWAYS_ALERT
    )
    return home


def check(home, *args):
    out = subprocess.run(keeper_cmd(home, "check", *args), capture_output=True, text=True)
    return out.returncode, out.stdout, out.stderr


def assert_nagios_line(stdout: str, status: str) -> None:
    lines = stdout.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"HERMES-KEEPER {status} - ")
    text, _, perf = lines[0].partition(" | ")
    assert perf and all(PERF.fullmatch(p) for p in perf.split(" ")), perf


def test_runaway_is_critical_until_a_run_prunes_it(home):
    code, out, _ = check(home)
    assert code == 2
    assert_nagios_line(out, "CRITICAL")
    assert "2 runaway sessions: " in out and "'runaways'=2;;0;0;" in out

    subprocess.run(keeper_cmd(home, "run", "--quiet"), check=True)
    code, out, err = check(home)
    assert (code, err) == (0, ""), out
    assert_nagios_line(out, "OK")
    assert "'runaways'=0;;0;0;" in out and "'zombies'=0;" in out


def test_open_runaway_is_reported_not_pruned(home):
    """A runaway still open is never pruned: it stays CRITICAL after a run."""
    import sqlite3

    conn = sqlite3.connect(home / "state.db")
    with conn:
        sid = conn.execute(
            "SELECT session_id FROM messages GROUP BY session_id ORDER BY count(*) DESC LIMIT 1"
        ).fetchone()[0]
        last = conn.execute("SELECT max(timestamp) FROM messages WHERE session_id = ?", (sid,)).fetchone()[0]
        conn.execute("UPDATE sessions SET ended_at = NULL, end_reason = NULL WHERE id = ?", (sid,))
        conn.execute(
            "UPDATE messages SET timestamp = timestamp + ? WHERE session_id = ?", (time.time() - last, sid)
        )
    conn.close()
    subprocess.run(keeper_cmd(home, "run", "--quiet"), check=True)
    code, out, _ = check(home, "--json")
    doc = json.loads(out)
    assert code == 2 and doc["status"] == "CRITICAL"
    assert [r["open"] for r in doc["profiles"][0]["runaways"]] == [True]


def test_thresholds_from_flags_and_policy(home):
    subprocess.run(keeper_cmd(home, "run", "--quiet"), check=True)
    code, out, _ = check(home, "-t", "db_warn=1KB")
    assert code == 1 and "WARNING: state.db" in out
    code, out, _ = check(home, "--threshold", "db_crit=1KB")
    assert code == 2
    with (home / "keeper.toml").open("a") as f:
        f.write('last_run_warn = "0s"\n')  # appended to the [check] table
    code, out, _ = check(home)
    assert code == 1 and "WARNING: last run" in out


def test_quiet_ok_prints_nothing_and_problems_go_to_stderr(home):
    code, out, err = check(home, "--quiet")
    assert code == 2 and out == "" and err.startswith("HERMES-KEEPER CRITICAL")
    subprocess.run(keeper_cmd(home, "run", "--quiet"), check=True)
    assert check(home, "--quiet") == (0, "", "")


@pytest.mark.parametrize(
    "args",
    [["--threshold", "nonsense"], ["-t", "db_warn=lots"], ["--no-such-flag"], ["--profile", "ghost"]],
)
def test_any_failure_of_the_check_is_unknown(home, args):
    code, out, err = check(home, *args)
    assert code == 3 and out.startswith("HERMES-KEEPER UNKNOWN - ") and len(out.splitlines()) == 1
    code, doc, _ = check(home, *args, "--json")  # JSON still, the line inside
    jsonschema.validate(json.loads(doc), schema("check"))
    assert code == 3 and json.loads(doc) == {
        "command": "check",
        "status": "UNKNOWN",
        "code": 3,
        "line": out.strip(),
        "profiles": [],
    }


def test_unreadable_home_is_unknown(tmp_path):
    code, out, _ = check(tmp_path / "missing")
    assert code == 3 and "not found" in out


def test_library_result_to_dict(home):
    """The dataclass other code records (history): every measure, worst status."""
    profile = Home(home).profile()
    result = check_profile(profile)
    d = result.to_dict()
    assert result.status == CRITICAL and d["status"] == "CRITICAL" and d["code"] == 2
    by = {m["label"]: m for m in d["measures"]}
    assert by["runaways"]["value"] == 2 and by["runaways"]["status"] == "CRITICAL"
    assert by["db"]["value"] == (home / "state.db").stat().st_size and by["db"]["status"] == "OK"
    assert by["last_run_age"]["value"] is None  # never ran
    profile.run()
    assert profile.check().status == OK


def test_archive_verify_is_journaled_and_its_age_checked(home):
    subprocess.run(keeper_cmd(home, "run", "--quiet"), check=True)
    subprocess.run(keeper_cmd(home, "archive", "verify"), check=True, capture_output=True)
    records = [json.loads(x) for x in (home / "keeper" / "journal.jsonl").read_text().splitlines()]
    [verified] = [r for r in records if r["action"] == "archive_verified"]
    assert verified["ok"] is True and verified["checked"] > 0 and verified["damaged"] == 0
    code, out, _ = check(home, "-t", "verify_warn=0s")
    assert code == 1 and "WARNING: archive verified" in out
    with (home / "keeper" / "journal.jsonl").open("a") as f:  # as a verify that found damage records it
        f.write(
            json.dumps({"ts": time.time(), "action": "archive_verified", "ok": False, "damaged": 2}) + "\n"
        )
    code, out, _ = check(home)
    assert code == 2 and "CRITICAL: the last archive verify failed (2 damaged rows)" in out


def test_all_profiles_one_line_worst_status(home):
    work = home / "profiles" / "work"
    demo.build_home(work, demo.generate(time.time(), sessions=10, seed=3))
    (home / "profiles" / "broken").mkdir()
    (home / "profiles" / "broken" / "state.db").write_bytes(b"not a database" * 100)
    code, out, _ = check(home, "--all-profiles")
    assert code == 2  # CRITICAL outranks UNKNOWN (a profile that could not be checked)
    line = out.splitlines()
    assert len(line) == 1 and line[0].startswith("HERMES-KEEPER CRITICAL - ")
    assert "default: CRITICAL: 2 runaway" in out and "broken: " in out and "'work_db'=" in out
    subprocess.run(keeper_cmd(home, "run", "--all-profiles", "--quiet"), capture_output=True)
    code, out, _ = check(home, "--all-profiles")
    assert code == 3 and out.startswith("HERMES-KEEPER UNKNOWN - broken: ")  # now the worst left

    (home / "profiles" / "fresh").mkdir()  # no state.db yet: a note, not part of the status
    code, doc, _ = check(home, "--all-profiles", "--json")
    doc = json.loads(doc)
    assert (code, doc["command"], doc["status"], doc["code"]) == (3, "check", "UNKNOWN", 3)
    # the status line itself, as printed without --json (its perfdata: free space and ages move)
    assert doc["line"].partition(" | ")[0] == out.partition(" | ")[0]
    rows = {r["profile"]: r for r in doc["profiles"]}
    assert rows["default"]["status"] == rows["work"]["status"] == "OK"
    assert {m["label"] for m in rows["work"]["measures"]} >= {"db", "runaways", "last_run_age"}
    assert rows["broken"]["error"] and rows["broken"]["home"] == str(home / "profiles" / "broken")
    assert rows["fresh"]["skipped_because"]


def test_archive_over_its_budget_is_a_warning(home):
    subprocess.run(keeper_cmd(home, "run", "--quiet"), check=True)
    assert check(home)[0] == 0
    with (home / "keeper.toml").open("a") as f:  # a budget the archive the run made is already over
        f.write('[archive]\nmax_bytes = "1KB"\n')
    code, out, _ = check(home)
    assert code == 1 and "WARNING: archive " in out and "over its budget of" in out
    assert "'archive'=" in out


def runaway_ids(home) -> list[str]:
    """The demo's runaways, most messages first (as the report and check order them)."""
    return [r.id for r in Home(home).profile().report(record=False).sessions.runaways]


def test_runaway_that_ended_weeks_ago_does_not_alert(home):
    """Issue 35: two runaways that ended 10-50 days ago kept check CRITICAL for weeks; the report
    still lists them, check counts only the open or recent ones."""
    code, out, _ = check(home, "-t", "runaway_recent=2d")
    assert "'runaways'=0;;0;0;" in out and "runaway" not in out.partition(" | ")[0], out
    assert code == 2 and "CRITICAL: never ran" in out  # the home's other problem, not the runaways
    assert len(runaway_ids(home)) == 2


def test_runaways_named_by_session_id_and_acknowledged(home):
    first, second = runaway_ids(home)
    code, out, _ = check(home)
    assert code == 2 and f"2 runaway sessions: {first} (" in out and f", {second} (" in out
    assert "`check --ack ID`" in out

    code, out, _ = check(home, "--ack", first, "--json")  # journaled, so it lasts
    doc = json.loads(out)
    jsonschema.validate(doc, schema("check"))
    [row] = doc["profiles"]
    assert [r["id"] for r in row["runaways"]] == [second] and row["runaways_acked"] == [first]
    assert code == 2 and "1 runaway sessions: " in doc["line"] and first not in doc["line"]
    records = [json.loads(x) for x in (home / "keeper" / "journal.jsonl").read_text().splitlines()]
    assert {"action": "runaway_acked", "session": first}.items() <= records[-1].items()

    code, out, _ = check(home, "--ack", second)
    assert "'runaways'=0;;0;0;" in out and "runaway" not in out.partition(" | ")[0], out


def test_nagios_warning_critical_and_timeout_flags(home):
    subprocess.run(keeper_cmd(home, "run", "--quiet"), check=True)
    code, out, _ = check(home, "-w", "1KB")
    assert code == 1 and "WARNING: state.db" in out and "'db'=" in out and ";1000;" in out
    code, out, _ = check(home, "-c", "1KB", "-w", "1KB")
    assert code == 2 and "CRITICAL: state.db" in out
    code, out, _ = check(home, "--timeout", "60", "-t", "db_warn=1KB")  # -t stays --threshold
    assert code == 1 and "WARNING: state.db" in out
    code, out, _ = check(home, "--timeout", "0")
    assert code == 3 and out.startswith("HERMES-KEEPER UNKNOWN - ")


def test_timeout_is_unknown_while_the_work_goes_on():
    """A check past --timeout: an error (UNKNOWN, exit 3), not a hang; the work left behind."""
    release = threading.Event()
    try:
        with pytest.raises(KeeperError, match=r"timed out after 0.05 s"):
            within(0.05, release.wait)
    finally:
        release.set()
    assert within(5, lambda: 7) == 7 and within(None, lambda: 8) == 8
    with pytest.raises(ZeroDivisionError):
        within(5, lambda: 1 / 0)


def test_backup_sha256_read_once_per_file_identity(home, monkeypatch):
    """Issue 35: every check re-hashed the newest backup in full (GBs per poll). Now once per file
    identity (dev, inode, size, mtime): ``backups`` verifies again on its own schedule."""
    profile = Home(home).profile()
    record = profile.backup().record
    reads = []

    def counting(rec):
        reads.append(rec.name)
        return verify_backup(rec)

    monkeypatch.setattr(check_module, "verify_backup", counting)
    ages = [check_profile(profile).measure("backup_age") for _ in range(3)]
    assert reads == [record.name] and all(m.status == OK for m in ages)

    path = record.path
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 1_000_000))
    assert check_profile(profile).measure("backup_age").status == OK and len(reads) == 2

    # damage with the same size and mtime: the identity hides it from check until `backups`
    # reads every backup again, and check then trusts no backup
    st = path.stat()
    with path.open("r+b") as fh:
        fh.seek(st.st_size // 2)
        byte = fh.read(1)
        fh.seek(st.st_size // 2)
        fh.write(bytes([byte[0] ^ 0xFF]))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert check_profile(profile).measure("backup_age").status == OK
    assert [b["verified"] for b in profile.backups()["backups"]] == [False]
    assert check_profile(profile).measure("backup_age").problem == "no verified backup"


def test_check_reads_nothing_beside_the_database_and_agrees_with_the_report(home, monkeypatch):
    """Issue 35: check took 2.5 s at 5 GB, a whole report: every transcript stat-ed, the plan's
    only copies, the holders, quick_check, dbstat. It measures the report's own figures without
    them."""
    profile = Home(home).profile()
    (home / "keeper").mkdir(mode=0o700, exist_ok=True)
    rep = profile.report(record=False)

    def refuse(*args, **kwargs):
        raise AssertionError("check read it")

    for module, name in (
        (survey_module, "scan_files"),
        (survey_module, "find_holders"),
        (report_module, "find_holders"),
        (report_module, "object_sizes"),
        (report_module, "make_plan"),
        (facts, "quick_check"),
    ):
        monkeypatch.setattr(module, name, refuse)
    result = check_profile(profile, now=rep.generated_at)
    by = {m.label: m.value for m in result.measures}
    assert by["db"] == rep.disk.state_db and by["wal"] == rep.disk.wal
    assert by["growth_per_day"] == rep.growth.last_7d.bytes_per_day > 0
    assert by["zombies"] == rep.sessions.zombies.total > 0
    assert by["reclaimable"] == rep.database.reclaimable_bytes
    assert [r.id for r in result.runaways] == [r.id for r in rep.sessions.runaways]
