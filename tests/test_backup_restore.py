"""Restore: real Hermes sees exactly the backed-up sessions; a bad backup or a live Hermes moves nothing."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import sqlite3
import subprocess
import sys
import time

import pytest
from click.testing import CliRunner

from hermes_keeper import demo
from hermes_keeper.backup.restore import find_backup, restore_backup
from hermes_keeper.backup.snapshot import MANIFEST, list_backups, sha256_file, take_backup
from hermes_keeper.cli import main
from hermes_keeper.errors import KeeperError
from hermes_keeper.home import select_profiles
from hermes_keeper.run.compact import compact
from tests.conftest import tree_digest
from tests.hermes_env import Hermes
from tests.kill_after import THEN_DIE, leave_hot_journal, opened_as_hermes_would

CONTENT = "SELECT id, session_id, role, content, timestamp FROM messages ORDER BY id"


def hermes_view(hermes, home):
    """What Hermes itself sees (through its own connection): sessions, messages, a hash of every message."""
    rows, sessions = hermes.run(
        home, [{"op": "query", "sql": CONTENT}, {"op": "query", "sql": "SELECT count(*) FROM sessions"}]
    )
    return sessions[0][0], len(rows), hashlib.sha256(json.dumps(rows).encode()).hexdigest()


@pytest.fixture
def home(hermes_home, tmp_path):
    return hermes_home(tmp_path / "home", sessions=40)


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def test_round_trip_real_hermes_sees_the_same_sessions_and_messages(home, hermes):
    before = hermes_view(hermes, home)
    assert invoke("backup", "--home", home).exit_code == 0
    mode = (home / "state.db").stat().st_mode & 0o777
    hermes.run(
        home,
        [
            {"op": "call", "method": "create_session", "args": ["after_backup", "cli"]},
            {"op": "call", "method": "append_message", "args": ["after_backup", "user", "later"]},
        ],
    )
    assert hermes_view(hermes, home) != before
    res = invoke("restore", "--yes", "--latest", "--home", home, "--json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)["profiles"][0]
    assert hermes_view(hermes, home) == before
    assert (out["sessions"], out["messages"]) == before[:2]
    # The previous database, with its WAL, is kept aside (private) and still holds the later session.
    safety = home / out["safety_copy"]
    assert safety.stat().st_mode & 0o777 == 0o600
    assert (home / "state.db").stat().st_mode & 0o777 == mode
    shutil.copy(safety, home / "check.db")
    if (home / f"{out['safety_copy']}-wal").exists():
        shutil.copy(home / f"{out['safety_copy']}-wal", home / "check.db-wal")
    conn = sqlite3.connect(home / "check.db")
    assert conn.execute("SELECT count(*) FROM sessions WHERE id = 'after_backup'").fetchone()[0] == 1
    conn.close()
    # Hermes keeps working on the restored file, indexes included.
    *_, count, fts = hermes.run(
        home,
        [
            {"op": "call", "method": "create_session", "args": ["after_restore", "cli"]},
            {"op": "call", "method": "append_message", "args": ["after_restore", "user", "again"]},
            {"op": "query", "sql": "SELECT count(*) FROM messages WHERE session_id = 'after_restore'"},
            {"op": "fts_integrity"},
        ],
    )
    assert count == [[1]] and fts == {"messages_fts": "ok", "messages_fts_trigram": "ok"}


def _flip_a_byte(record, rehash: bool):
    data = bytearray(record.path.read_bytes())
    data[len(data) // 2] ^= 0x01
    record.path.write_bytes(bytes(data))
    if rehash:  # damage that happened before the hash was taken: the content checks must catch it
        manifest = json.loads((record.folder / MANIFEST).read_text())
        manifest["backups"][-1]["sha256"] = sha256_file(record.path)
        (record.folder / MANIFEST).write_text(json.dumps(manifest))


@pytest.mark.parametrize("rehash", [False, True], ids=["sha256-mismatch", "bad-content"])
def test_a_corrupted_backup_is_refused_and_nothing_moves(home, rehash):
    assert invoke("backup", "--home", home).exit_code == 0
    [record] = list_backups(home / "keeper" / "backups")
    _flip_a_byte(record, rehash)
    before = tree_digest(home)
    res = invoke("restore", "--yes", record.name, "--home", home)
    assert res.exit_code == 2 and "nothing was changed" in res.output
    assert ("checksum" if rehash else "sha256 mismatch") in res.output  # zstd's frame checksum, or ours
    assert tree_digest(home) == before
    if not rehash:
        listing = json.loads(invoke("backups", "--home", home, "--json").output)["profiles"][0]
        assert listing["backups"][0]["verified"] is False


def test_refuses_while_hermes_holds_the_database_unless_forced(home, hold_open):
    assert invoke("backup", "--home", home).exit_code == 0
    proc = hold_open(home / "state.db")
    before = tree_digest(home)
    res = invoke("restore", "--yes", "--latest", "--home", home)
    assert res.exit_code == 2 and f"pid {proc.pid}" in res.output and "--force" in res.output
    assert tree_digest(home) == before
    res = invoke("restore", "--yes", "--latest", "--force", "--home", home, "--json")
    assert res.exit_code == 0 and json.loads(res.output)["profiles"][0]["safety_copy"]


def test_latest_is_this_homes_newest_even_in_a_shared_folder(tmp_path):
    dest = tmp_path / "shared"
    a_home, b_home = tmp_path / "a", tmp_path / "b"
    demo.build_home(a_home, demo.generate(time.time(), sessions=10))
    demo.build_home(b_home, demo.generate(time.time(), sessions=25, seed=3))
    a, b = select_profiles(a_home)[0], select_profiles(b_home)[0]
    mine = take_backup(a, dest)
    take_backup(b, dest, now=time.time() + 5)  # newer, but another home's
    res = invoke("restore", "--yes", "--latest", "--dest", dest, "--home", a_home, "--json")
    assert json.loads(res.output)["profiles"][0]["restored"] == mine.name
    # Restoring by path works too, and a file the manifest does not know is refused.
    assert restore_backup(a, mine.path).restored == mine.name
    loose = tmp_path / "loose" / mine.name
    loose.parent.mkdir()
    shutil.copy(mine.path, loose)
    with pytest.raises(KeeperError, match="no sha256 to verify"):
        restore_backup(a, loose)
    # A shared folder with only another home's backups has no latest of this one: said so.
    c_home = tmp_path / "c"
    demo.build_home(c_home, demo.generate(time.time(), sessions=5, seed=4))
    with pytest.raises(KeeperError, match=re.escape(f"no backups of {c_home} in {dest}")):
        find_backup(select_profiles(c_home)[0], None, dest)


def test_restore_when_state_db_is_gone(home):
    profile = select_profiles(home)[0]
    record = take_backup(profile)
    for p in home.glob("state.db*"):
        p.unlink()
    res = restore_backup(profile, record)
    assert res.safety_copy is None and res.sessions == len(demo.generate(time.time(), sessions=40).sessions)
    assert [r.name for r in list_backups(record.folder)] == [record.name]


def test_round_trip_and_compact_on_hermes_0_13(tmp_path):
    hermes13 = Hermes("0.13.0")  # schema 11: no archived/active/session_key columns
    home = tmp_path / "home"
    home.mkdir()
    now = time.time()
    specs = [
        {
            "id": f"s{i}",
            "source": "cron" if i % 2 else "cli",
            "started_at": now - 3600 + i,
            "messages": [["user", f"message {i} {j}", now - 3600 + i + j] for j in range(5)],
            "ended_at": now - 60,
            "end_reason": "user_exit",
        }
        for i in range(20)
    ]
    hermes13.run(home, [{"op": "build", "sessions": specs}])
    profile = select_profiles(home)[0]
    before = hermes_view(hermes13, home)
    record = take_backup(profile)
    assert record.schema_version == 11
    hermes13.call(home, "append_message", "s0", "user", "after the backup")
    assert restore_backup(profile, record).messages == before[1]
    assert hermes_view(hermes13, home) == before
    res = compact(profile)
    assert res.vacuumed and res.auto_vacuum_after == "incremental"
    hermes13.call(home, "vacuum")
    assert hermes_view(hermes13, home) == before
    assert hermes13.run(home, [{"op": "query", "sql": "PRAGMA auto_vacuum"}])[0] == [[2]]


def test_a_symlinked_state_db_is_not_replaced(home, tmp_path):
    record = take_backup(select_profiles(home)[0])
    elsewhere = tmp_path / "disk2" / "state.db"
    elsewhere.parent.mkdir()
    (home / "state.db").rename(elsewhere)
    (home / "state.db").symlink_to(elsewhere)
    before = tree_digest(tmp_path)
    with pytest.raises(KeeperError, match="is a symlink"):
        restore_backup(select_profiles(home)[0], record)
    assert tree_digest(tmp_path) == before and (home / "state.db").is_symlink()


_KILL_AFTER = (
    THEN_DIE
    + """
from hermes_keeper.backup import restore as r
from hermes_keeper.home import select_profiles

os.rename, os.link = then_die(os.rename), then_die(os.link)
r._roll_back, r._checkpoint = then_die(r._roll_back), then_die(r._checkpoint)
r.restore_backup(select_profiles(sys.argv[2])[0], sys.argv[3])
"""
)

_COMMIT_THEN_DIE = """
import os, signal, sqlite3, sys
c = sqlite3.connect(sys.argv[1], isolation_level=None)
c.execute("PRAGMA wal_autocheckpoint=0")
c.execute("INSERT INTO sessions (id, source, started_at) VALUES ('only_in_wal', 'cli', 1.7e9)")
os.kill(os.getpid(), signal.SIGKILL)
"""


def _sessions_of(db) -> set[str]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        assert conn.execute("PRAGMA quick_check").fetchone() == ("ok",)
        return {r[0] for r in conn.execute("SELECT id FROM sessions")}
    finally:
        conn.close()


def _set_modes(db, journal_mode: str, auto_vacuum: str) -> None:
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("PRAGMA journal_mode=delete")
    conn.execute(f"PRAGMA auto_vacuum={auto_vacuum}")
    conn.execute("VACUUM")
    conn.execute(f"PRAGMA journal_mode={journal_mode}")
    conn.close()


def _modes(db) -> tuple[str, int]:
    conn = sqlite3.connect(db)
    try:
        return conn.execute("PRAGMA journal_mode").fetchone()[0], conn.execute(
            "PRAGMA auto_vacuum"
        ).fetchone()[0]
    finally:
        conn.close()


@pytest.mark.parametrize("mode", ["wal", "delete"])
def test_sigkill_at_every_step_of_the_swap_leaves_a_whole_state_db(tmp_path, mode):
    """Killed after each step, state.db is whole: the old one with every commit (its -wal's too),
    or the backup. In DELETE mode the old one has a hot journal (Hermes killed mid-write): state.db,
    opened as Hermes opens it, is whole with what it has beside it, and so is the safety copy."""
    src = tmp_path / "src"
    demo.build_home(src, demo.generate(time.time(), sessions=20))
    _set_modes(src / "state.db", mode, "none")
    record = take_backup(select_profiles(src)[0])
    backup_ids = _sessions_of(src / "state.db")
    conn = sqlite3.connect(src / "state.db")  # after the backup: the two differ
    conn.execute("INSERT INTO sessions (id, source, started_at) VALUES ('after_backup', 'cli', 1.7e9)")
    conn.commit()
    conn.close()
    old_ids = backup_ids | {"after_backup"}
    for n in range(1, 20):
        home = tmp_path / f"home{n}"
        shutil.copytree(src, home)
        if mode == "wal":
            subprocess.run([sys.executable, "-c", _COMMIT_THEN_DIE, str(home / "state.db")])
            assert (home / "state.db-wal").stat().st_size > 0  # a commit that lives only in the -wal
            old_ids = backup_ids | {"after_backup", "only_in_wal"}
        else:
            leave_hot_journal(home / "state.db")
        done = subprocess.run([sys.executable, "-c", _KILL_AFTER, str(n), str(home), str(record.path)])
        now = opened_as_hermes_would(home, "state.db", tmp_path)
        assert now in (old_ids, backup_ids), f"killed after step {n}: state.db holds neither"
        if now == backup_ids:  # swapped: the old one, commits and all, is the safety copy
            (safety,) = [
                p.name
                for p in home.iterdir()
                if p.name.startswith("state.db.keeper-before-restore-")
                and not p.name.endswith(("-wal", "-shm", "-journal"))
            ]
            assert opened_as_hermes_would(home, safety, tmp_path) == old_ids, f"killed after step {n}"
        if done.returncode == 0:
            break
    else:
        raise AssertionError("the restore never finished")
    assert n >= 4  # roll back, checkpoint, link, the sidecars aside, the rename were each a kill point


def _delete_mode_home(tmp_path):
    """A DELETE-mode home with a backup, a commit after it, and then a hot journal."""
    home = tmp_path / "home"
    demo.build_home(home, demo.generate(time.time(), sessions=20))
    _set_modes(home / "state.db", "delete", "none")
    take_backup(select_profiles(home)[0])
    backup_ids = _sessions_of(home / "state.db")
    conn = sqlite3.connect(home / "state.db")
    conn.execute("INSERT INTO sessions (id, source, started_at) VALUES ('after_backup', 'cli', 1.7e9)")
    conn.commit()
    conn.close()
    leave_hot_journal(home / "state.db")
    return home, backup_ids


@pytest.mark.parametrize("command", ["report", "plan", "run", "backup"])
def test_a_hot_journal_is_an_interrupted_write_not_damage(tmp_path, command):
    home, _ = _delete_mode_home(tmp_path)
    journal = (home / "state.db-journal").read_bytes()
    done = subprocess.run(
        [sys.executable, "-m", "hermes_keeper", command, "--home", str(home)], capture_output=True, text=True
    )
    assert done.returncode == 75, done.stderr
    (line,) = done.stderr.splitlines()
    assert "malformed" not in line and "readonly" not in line
    assert "state.db-journal" in line and "interrupted" in line and "Hermes's next open" in line
    assert (home / "state.db-journal").read_bytes() == journal  # left for SQLite to roll back


def test_restore_beside_a_hot_journal_leaves_both_files_whole(tmp_path):
    home, backup_ids = _delete_mode_home(tmp_path)
    res = invoke("restore", "--yes", "--latest", "--home", home, "--json")
    assert res.exit_code == 0, res.output
    safety = json.loads(res.output)["profiles"][0]["safety_copy"]
    assert not [p.name for p in home.glob("state.db-*")]  # nothing of the old file beside the new
    assert opened_as_hermes_would(home, "state.db", tmp_path) == backup_ids
    assert opened_as_hermes_would(home, safety, tmp_path) == backup_ids | {"after_backup"}


def test_a_stale_wal_beside_a_moved_state_db_is_not_replayed(tmp_path):
    home = tmp_path / "home"
    demo.build_home(home, demo.generate(time.time(), sessions=20))
    take_backup(select_profiles(home)[0])
    backup_ids = _sessions_of(home / "state.db")
    subprocess.run([sys.executable, "-c", _COMMIT_THEN_DIE, str(home / "state.db")])
    wal = (home / "state.db-wal").read_bytes()
    assert wal
    (home / "state.db").rename(tmp_path / "moved.db")  # the user moved it away; its -wal stayed
    res = invoke("restore", "--yes", "--latest", "--home", home, "--json")
    assert res.exit_code == 0, res.output
    assert opened_as_hermes_would(home, "state.db", tmp_path) == backup_ids
    assert not (home / "state.db-wal").exists() or not (home / "state.db-wal").stat().st_size
    (aside,) = home.glob("state.db.keeper-before-restore-*-wal")  # set aside, not deleted
    assert aside.read_bytes() == wal


@pytest.mark.parametrize(
    ("at_backup", "at_restore"),
    [
        (("wal", "none"), ("wal", "none")),  # `restore --latest` of a WAL home stays WAL
        (("delete", "none"), ("delete", "none")),  # newer Hermes on SQLite < 3.51.3 stays DELETE
        (("wal", "none"), ("delete", "incremental")),  # switched since the backup: as it is now
        (("delete", "none"), ("wal", "incremental")),
        (("wal", "incremental"), None),  # no state.db to replace: the backup's own modes
    ],
)
def test_restore_keeps_the_journal_mode_and_auto_vacuum_it_replaces(tmp_path, at_backup, at_restore):
    home = tmp_path / "home"
    spec = demo.generate(time.time(), sessions=30)
    demo.build_home(home, spec)
    db, profile = home / "state.db", select_profiles(home)[0]
    _set_modes(db, *at_backup)
    take_backup(profile)
    if at_restore is None:
        for p in home.glob("state.db*"):
            p.unlink()
    else:
        _set_modes(db, *at_restore)
    res = invoke("restore", "--yes", "--latest", "--home", home, "--json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)["profiles"][0]
    journal_mode, auto_vacuum = at_restore or at_backup
    assert (out["journal_mode"], out["auto_vacuum"]) == (journal_mode, auto_vacuum)
    assert _modes(db) == (journal_mode, {"none": 0, "incremental": 2}[auto_vacuum])
    assert out["sessions"] == len(spec.sessions) and not list(home.glob(".state.db.keeper-restore*"))
    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    conn.close()
