"""Bad homes get one line on stderr, exit 2, and not a byte changed."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
from importlib.resources import files

import jsonschema
import pytest

from hermes_keeper import demo
from tests.conftest import tree_digest

SCHEMA = json.loads(files("hermes_keeper").joinpath("schemas/report.json").read_text())


def keeper(*args):
    return subprocess.run([sys.executable, "-m", "hermes_keeper", *args], capture_output=True, text=True)


def _not_sqlite(home):
    (home / "state.db").write_bytes(b"this is a text file, not a database\n" * 50)


def _truncated(home):
    demo.build_home(home, demo.generate(1.79e9, sessions=40))
    data = (home / "state.db").read_bytes()
    (home / "state.db").write_bytes(data[: len(data) // 3])


def _foreign(home):
    conn = sqlite3.connect(home / "state.db")
    conn.execute("CREATE TABLE notes (body TEXT)")
    conn.commit()
    conn.close()


@pytest.mark.parametrize("make", [_not_sqlite, _truncated, _foreign])
@pytest.mark.parametrize("command", [["report"], ["run"], ["plan"]])
def test_bad_database(tmp_path, make, command):
    home = tmp_path / "home"
    home.mkdir()
    make(home)
    before = tree_digest(home)
    res = keeper(*command, "--home", str(home))
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("hermes-keeper: ")
    assert tree_digest(home) == before


def test_missing_home_and_profile(tmp_path):
    res = keeper("report", "--home", str(tmp_path / "nope"))
    assert res.returncode == 2 and "Hermes home not found" in res.stderr
    res = keeper("report", "--home", str(tmp_path), "--profile", "ghost")
    assert res.returncode == 2 and "profile 'ghost' not found" in res.stderr


def test_home_without_state_db(tmp_path):
    res = keeper("report", "--home", str(tmp_path))
    assert res.returncode == 2 and "state.db not found" in res.stderr


def test_read_only_home_reports_and_refuses_to_change(tmp_path):
    home, view = tmp_path / "home", tmp_path / "ro"
    demo.build_home(home, demo.generate(1.79e9, sessions=30))
    for side in ("state.db-wal", "state.db-shm"):
        (home / side).unlink(missing_ok=True)
    view.mkdir()
    subprocess.run(["mount", "--bind", str(home), str(view)], check=True)
    try:
        subprocess.run(["mount", "-o", "remount,ro,bind", str(view)], check=True)
        before = tree_digest(home)
        rep = keeper("report", "--json", "--home", str(view))
        assert rep.returncode == 0, rep.stderr
        for command in (["run"], ["backup"], ["compact"]):
            res = keeper(*command, "--home", str(view))
            assert res.returncode == 2, (command, res.stderr)
            assert len(res.stderr.strip().splitlines()) == 1 and "read-only" in res.stderr.lower()
        assert tree_digest(home) == before
    finally:
        subprocess.run(["umount", str(view)], check=True)


def _millis(conn):
    conn.execute("UPDATE sessions SET started_at = started_at * 1000 WHERE rowid % 3 = 0")
    conn.execute("UPDATE messages SET timestamp = timestamp * 1000 WHERE id % 4 = 0")
    return ["sessions.started_at", "messages.timestamp"], "milliseconds"


def _iso(conn):
    iso = "strftime('%Y-%m-%dT%H:%M:%S', {}, 'unixepoch')"
    conn.execute(f"UPDATE messages SET timestamp = {iso.format('timestamp')} WHERE id % 4 = 0")
    conn.execute(f"UPDATE sessions SET ended_at = {iso.format('ended_at')} || 'Z'")
    return ["sessions.ended_at", "messages.timestamp"], "text"


@pytest.mark.parametrize("spoil", [_millis, _iso])
def test_odd_timestamps_are_reported_and_refused(tmp_path, spoil):
    home = tmp_path / "home"
    spec = demo.generate(1.79e9, sessions=40)
    demo.build_home(home, spec)
    conn = sqlite3.connect(home / "state.db")
    columns, word = spoil(conn)
    conn.commit()
    conn.close()
    before = tree_digest(home)
    rep = keeper("report", "--json", "--home", str(home))
    assert rep.returncode == 0, rep.stderr
    data = json.loads(rep.stdout)
    jsonschema.validate(data, SCHEMA)
    (profile,) = data["profiles"]
    problems = profile["schema"]["timestamp_problems"]
    assert [p.split(":")[0] for p in problems] == columns and all(word in p for p in problems)
    assert profile["sessions"]["total"] == len(spec.sessions)
    human = keeper("report", "--home", str(home))
    assert human.returncode == 0 and "unreliable" in human.stdout
    res = keeper("run", "--home", str(home))
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1
    assert "not unix seconds" in res.stderr
    after = tree_digest(home)
    for own in ("keeper/history.db", "keeper/facts.json", "keeper/stats.db"):  # the reports' own bookkeeping
        after.pop(own, None)
    assert after == before


def _corrupt_a_page(db) -> None:
    """Scribble over the header of a page of the full-text index (what the keeper's own reads
    do not touch, but compact's FTS merges would)."""
    conn = sqlite3.connect(db)
    page_size = conn.execute("PRAGMA page_size").fetchone()[0]
    (page,) = conn.execute(
        "SELECT pageno FROM dbstat WHERE name = 'messages_fts_data' AND pagetype = 'leaf'"
        " ORDER BY pageno LIMIT 1 OFFSET 3"
    ).fetchone()
    conn.close()
    with open(db, "r+b") as fh:
        fh.seek((page - 1) * page_size)
        fh.write(b"\xff" * 64)


def test_a_corrupt_page_is_reported_and_compact_writes_nothing(tmp_path):
    home = tmp_path / "home"
    demo.build_home(home, demo.generate(1.79e9, sessions=80))
    _corrupt_a_page(home / "state.db")
    db_before = tree_digest(home)["state.db"]
    res = keeper("compact", "--home", str(home))
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert "quick_check" in res.stderr and "Traceback" not in res.stderr
    assert tree_digest(home)["state.db"] == db_before
    rep = keeper("report", "--json", "--home", str(home))
    assert rep.returncode == 0, rep.stderr
    (profile,) = json.loads(rep.stdout)["profiles"]
    jsonschema.validate(json.loads(rep.stdout), SCHEMA)
    assert profile["schema"]["quick_check"] != "ok"
    assert "fails quick_check" in keeper("report", "--home", str(home)).stdout
    plan = keeper("plan", "--json", "--home", str(home))
    assert any("quick_check" in w for w in json.loads(plan.stdout)["profiles"][0]["warnings"])
    assert "fails quick_check" in keeper("plan", "--home", str(home)).stdout
    assert tree_digest(home)["state.db"] == db_before


@pytest.mark.parametrize(("make", "said"), [("folder", "is a folder"), ("fifo", "is a FIFO (named pipe)")])
def test_a_state_db_that_is_no_file_is_said_as_it_is(tmp_path, make, said):
    """Not "not found": the name is there, as something else (issue 34); one line, nothing made."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "state.db").mkdir() if make == "folder" else os.mkfifo(home / "state.db")
    for command in ("report", "plan", "run"):
        res = keeper(command, "--home", str(home))
        assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1, res.stderr
        assert f"state.db {said}" in res.stderr and "not found" not in res.stderr
    assert sorted(p.name for p in home.iterdir()) == ["state.db"]


def test_an_entry_number_past_sqlite_integers_is_not_in_the_archive(tmp_path):
    """``#99999999999999999999`` names no entry: one line, exit 2, not an OverflowError (issue 34)."""
    home = tmp_path / "home"
    demo.build_home(home, demo.generate(time.time(), sessions=30))
    assert keeper("run", "--home", str(home), "--quiet").returncode == 0
    res = keeper("archive", "show", "#99999999999999999999", "--home", str(home))
    assert res.returncode == 2 and "is not in the archive" in res.stderr and "Overflow" not in res.stderr
