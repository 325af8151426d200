"""A home whose path holds ``?``, ``#`` and ``%`` works like any other.

SQLite reads ``file:`` URIs: an unquoted ``?`` starts the query and ``#`` the fragment, so such
a path opened by URI names another file (and SQLite creates it beside the home). Every keeper
connection goes through sqlite/connect.py, which quotes the path.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import time

from hermes_keeper import demo
from tests.keeper_proc import keeper_cmd, session_ids

_COMMIT_THEN_DIE = """
import os, signal, sqlite3, sys
c = sqlite3.connect(sys.argv[1], isolation_level=None)
c.execute("PRAGMA wal_autocheckpoint=0")
c.execute("INSERT INTO sessions (id, source, started_at) VALUES ('only_in_wal', 'cli', 1.7e9)")
os.kill(os.getpid(), signal.SIGKILL)
"""


def keeper(home, *args):
    res = subprocess.run(keeper_cmd(home, *args), capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    return res


def test_a_home_with_question_mark_hash_and_percent_in_its_path(tmp_path):
    home = tmp_path / "we?ird#home%41"
    demo.build_home(home, demo.generate(time.time(), sessions=30))
    before = session_ids(home / "state.db")

    report = json.loads(keeper(home, "report", "--json").stdout)["profiles"][0]
    assert report["sessions"]["total"] == len(before)
    listed = json.loads(keeper(home, "history", "--json", "--all").stdout)["profiles"][0]["entries"]
    assert [r["kind"] for r in listed] == ["report"]

    keeper(home, "backup", "--json")
    (backup,) = (home / "keeper" / "backups").glob("state-*.db.zst")
    subprocess.run([sys.executable, "-c", _COMMIT_THEN_DIE, str(home / "state.db")])
    assert (home / "state.db-wal").stat().st_size > 0  # a commit only in the -wal: restore checkpoints it

    restored = json.loads(keeper(home, "restore", backup.name, "--yes", "--json").stdout)["profiles"][0]
    assert session_ids(home / "state.db") == before
    safety = home / restored["safety_copy"]
    conn = sqlite3.connect(safety)  # a plain path (no URI): taken as it is
    try:
        assert {r[0] for r in conn.execute("SELECT id FROM sessions")} == before | {"only_in_wal"}
    finally:
        conn.close()
    assert [p.name for p in tmp_path.iterdir()] == [home.name]  # nothing opened or created beside it
