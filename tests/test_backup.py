"""Backups, restore and compaction, checked with real Hermes."""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import subprocess
import time

import pytest
from click.testing import CliRunner

from hermes_keeper import demo
from hermes_keeper.cli import main
from tests.conftest import tree_digest

CONTENT_HASH = "SELECT id, session_id, role, content, timestamp, active FROM messages ORDER BY id"


def _state(hermes, home):
    rows, sessions = hermes.run(
        home,
        [
            {"op": "query", "sql": CONTENT_HASH},
            {"op": "call", "method": "session_count", "kwargs": {"include_archived": True}},
        ],
    )
    return sessions, len(rows), hashlib.sha256(json.dumps(rows).encode()).hexdigest()


@pytest.fixture
def home(tmp_path, hermes):
    h = tmp_path / "home"
    h.mkdir()
    spec = demo.generate(time.time(), sessions=40)
    hermes.run(h, [{"op": "build", "sessions": spec.sessions}])
    return h


@pytest.fixture
def holder(home, hermes):
    """A real Hermes process with state.db open (as a running CLI or gateway has)."""
    proc = subprocess.Popen(
        [
            str(hermes.python),
            "-c",
            "import sys, time, hermes_state; from pathlib import Path;"
            " hermes_state.SessionDB(Path(sys.argv[1])).session_count();"
            " print('ok', flush=True); time.sleep(60)",
            str(home / "state.db"),
        ],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "HERMES_HOME": str(home)},
    )
    assert proc.stdout.readline().strip() == "ok"
    yield proc
    proc.kill()
    proc.wait()


def test_backup_restore_round_trip(home, hermes):
    runner = CliRunner()
    before = _state(hermes, home)
    res = runner.invoke(main, ["backup", "--home", str(home), "--json"])
    assert res.exit_code == 0, res.output
    rec = json.loads(res.output)["profiles"][0]
    folder = home / "keeper" / "backups"
    assert (folder / rec["name"]).stat().st_mode & 0o777 == 0o600 and folder.stat().st_mode & 0o777 == 0o700
    hermes.run(
        home,
        [
            {"op": "call", "method": "create_session", "args": ["after_backup", "cli"]},
            {"op": "call", "method": "append_message", "args": ["after_backup", "user", "later"]},
        ],
    )
    assert _state(hermes, home) != before
    res = runner.invoke(main, ["restore", "--latest", "--home", str(home)])
    assert res.exit_code == 0, res.output
    assert _state(hermes, home) == before
    assert list(home.glob("state.db.keeper-before-restore-*"))


def test_corrupted_backup_is_refused_and_nothing_moves(home):
    runner = CliRunner()
    name = json.loads(runner.invoke(main, ["backup", "--home", str(home), "--json"]).output)["profiles"][0][
        "name"
    ]
    path = home / "keeper" / "backups" / name
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    before = tree_digest(home)
    res = runner.invoke(main, ["restore", name, "--home", str(home)])
    assert res.exit_code == 2 and "damaged" in res.output
    assert tree_digest(home) == before
    listing = json.loads(runner.invoke(main, ["backups", "--home", str(home), "--json"]).output)
    assert listing["profiles"][0]["backups"][0]["verified"] is False


def test_restore_refuses_while_hermes_holds_the_database(home, holder):
    runner = CliRunner()
    runner.invoke(main, ["backup", "--home", str(home)])
    res = runner.invoke(main, ["restore", "--latest", "--home", str(home)])
    assert res.exit_code == 2 and f"pid {holder.pid}" in res.output


def test_backup_on_a_full_disk_fails_cleanly_and_a_run_deletes_nothing(tmp_path):
    mnt = tmp_path / "tiny"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mnt)]).returncode != 0:
        pytest.fail("this test needs root to mount a small tmpfs")
    try:
        home = tmp_path / "home"
        demo.build_home(home, demo.generate(time.time(), sessions=120))
        (home / "keeper").mkdir(mode=0o700)
        os.symlink(mnt, home / "keeper" / "backups")
        before = tree_digest(home)
        res = CliRunner().invoke(main, ["run", "--home", str(home)])
        assert res.exit_code == 2 and "backup of default failed" in res.output
        assert "disk is full" in res.output or "No space left" in res.output
        conn = sqlite3.connect(home / "state.db")
        assert conn.execute("SELECT count(*) FROM sessions").fetchone()[0] == len(
            demo.generate(time.time(), 120).sessions
        )
        conn.close()
        assert os.listdir(mnt) == []
        after = tree_digest(home)
        for own in ("keeper/journal.jsonl", "keeper.lock"):  # the keeper's own bookkeeping
            after.pop(own, None)
        assert after == before
    finally:
        subprocess.run(["umount", str(mnt)], check=True)


def test_compact_converts_once_and_hermes_keeps_the_mode(home, hermes):
    conn = sqlite3.connect(home / "state.db")
    conn.execute("DELETE FROM messages WHERE session_id IN (SELECT id FROM sessions WHERE source = 'cron')")
    conn.commit()
    conn.close()
    runner = CliRunner()
    before = _state(hermes, home)
    res = json.loads(runner.invoke(main, ["compact", "--home", str(home), "--json"]).output)["profiles"][0]
    assert res["auto_vacuum_before"] == "none" and res["auto_vacuum_after"] == "incremental"
    assert res["vacuumed"] and res["backup"] and res["freed_bytes"] > 0
    assert _state(hermes, home) == before
    hermes.call(home, "vacuum")
    assert sqlite3.connect(home / "state.db").execute("PRAGMA auto_vacuum").fetchone()[0] == 2
    # From now on space comes back online, in short steps, even while Hermes holds the file.
    conn = sqlite3.connect(home / "state.db")
    conn.execute("DELETE FROM messages")
    conn.commit()
    conn.close()
    res = json.loads(runner.invoke(main, ["compact", "--home", str(home), "--json"]).output)["profiles"][0]
    assert res["pages_freed"] > 0 and res["free_bytes_after"] == 0 and not res["vacuumed"]


def test_compact_never_vacuums_while_held(home, holder):
    res = json.loads(CliRunner().invoke(main, ["compact", "--home", str(home), "--json"]).output)["profiles"][
        0
    ]
    assert not res["vacuumed"] and res["auto_vacuum_after"] == "none"
    assert "when no process holds the database" in res["note"] and str(holder.pid) in res["note"]


def test_leftovers_reported_and_removed_on_request(tmp_path):
    home = tmp_path / "home"
    demo.build_home(home, demo.generate(time.time(), sessions=10))
    runner = CliRunner()
    out = json.loads(runner.invoke(main, ["backups", "--home", str(home), "--json"]).output)["profiles"][0]
    assert out["leftovers"][0]["bytes"] == 2_000_000 and (home / out["leftovers"][0]["name"]).exists()
    runner.invoke(main, ["backups", "--home", str(home), "--remove-leftovers"])
    assert not list(home.glob("state.db.malformed-backup-*"))
