"""SIGKILL ``backup`` and ``compact`` after each step they take: state.db stays whole, every
backup the manifest lists verifies, and the command run again finishes. The same for ``restore``
of a DELETE-mode home that Hermes left with a hot journal.

Steps are the calls that change something on disk (renames, fsyncs, unlinks, the keeper's
budgeted write transactions, compression, the manifest write); the kill lands right after
the Nth one, for every N until the command completes.
"""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
import sys
import time

import pytest

from hermes_keeper import demo
from hermes_keeper.backup.snapshot import backup_dir, list_backups, take_backup, verify_backup
from hermes_keeper.home import select_profiles
from hermes_keeper.sqlite.schema import quick_check
from tests.kill_after import THEN_DIE, leave_hot_journal, opened_as_hermes_would

_KILL_AFTER = (
    THEN_DIE
    + """
from hermes_keeper.backup import restore, snapshot
from hermes_keeper.run import compact
from hermes_keeper.cli import main
from hermes_keeper.sqlite.writer import Writer

for name in ("rename", "replace", "fsync", "unlink"):
    setattr(os, name, then_die(getattr(os, name)))
for name in ("quick_check", "_compress", "_write_manifest"):
    setattr(snapshot, name, then_die(getattr(snapshot, name)))
compact._convert = then_die(compact._convert)
restore._roll_back, restore._checkpoint = then_die(restore._roll_back), then_die(restore._checkpoint)
Writer.step = then_die(Writer.step)
main(sys.argv[2:])
"""
)

FTS = ("messages_fts", "messages_fts_trigram")


def _state(db) -> tuple[int, int]:
    """(sessions, messages) of a database that passes quick_check and both FTS integrity checks."""
    assert quick_check(db) == "ok"
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        for t in FTS:
            conn.execute(f"INSERT INTO {t}({t}) VALUES('integrity-check')")
        return tuple(
            conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in ("sessions", "messages")
        )
    finally:
        conn.close()


def _home(tmp_path):
    home = tmp_path / "src"
    demo.build_home(home, demo.generate(time.time(), sessions=60))
    conn = sqlite3.connect(home / "state.db")  # free pages and FTS tombstones for compact to work on
    conn.execute("DELETE FROM messages WHERE id % 3 = 0")
    conn.commit()
    conn.close()
    return home


@pytest.mark.parametrize("command", [["backup"], ["compact"]])
def test_sigkill_after_each_step(tmp_path, command):
    src = _home(tmp_path)
    before = _state(src / "state.db")
    for n in range(1, 200):
        home = tmp_path / f"home{n}"
        shutil.copytree(src, home)
        done = subprocess.run(
            [sys.executable, "-c", _KILL_AFTER, str(n), *command, "--home", str(home)], capture_output=True
        )
        assert _state(home / "state.db") == before, f"killed after step {n}"
        folder = backup_dir(select_profiles(str(home))[0])
        assert all(verify_backup(r) for r in list_backups(folder)), f"killed after step {n}"
        again = subprocess.run(
            [sys.executable, "-m", "hermes_keeper", *command, "--home", str(home)],
            capture_output=True,
            text=True,
        )
        assert again.returncode == 0, (n, again.stderr)
        assert _state(home / "state.db") == before
        assert not (home / "keeper" / "fts-hold.json").exists()
        shutil.rmtree(home)
        if done.returncode == 0:
            break
    else:
        raise AssertionError("the command never finished")
    assert n > 3


def _restored_names(home) -> list[str]:
    return sorted(
        p.name
        for p in home.iterdir()
        if p.name.startswith("state.db.keeper-before-restore-")
        and not p.name.endswith(("-journal", "-wal", "-shm"))
    )


def test_sigkill_restore_after_each_step_beside_a_hot_journal(tmp_path):
    """``restore`` of a DELETE-mode home whose Hermes was killed mid-write, killed after
    each step: state.db, opened as Hermes opens it, is whole (the old one with every commit, or
    the backup), so is every safety copy with what it has beside it, nothing of the old file is
    left beside the restored one, and ``restore`` run again finishes."""
    src = _home(tmp_path)
    conn = sqlite3.connect(src / "state.db", isolation_level=None)
    conn.execute("PRAGMA journal_mode=delete")
    conn.close()
    record = take_backup(select_profiles(str(src))[0])
    backup_ids = opened_as_hermes_would(src, "state.db", tmp_path)
    conn = sqlite3.connect(src / "state.db", isolation_level=None)
    conn.execute("INSERT INTO sessions (id, source, started_at) VALUES ('after_backup', 'cli', 1.7e9)")
    conn.close()
    old_ids = backup_ids | {"after_backup"}
    command = ["restore", record.name, "--yes"]  # by name: --latest matches the home's path
    for n in range(1, 200):
        home = tmp_path / f"home{n}"
        shutil.copytree(src, home)
        leave_hot_journal(home / "state.db")
        done = subprocess.run(
            [sys.executable, "-c", _KILL_AFTER, str(n), *command, "--home", str(home)], capture_output=True
        )
        assert opened_as_hermes_would(home, "state.db", tmp_path) in (old_ids, backup_ids), n
        for safety in _restored_names(home):
            assert opened_as_hermes_would(home, safety, tmp_path) == old_ids, (n, safety)
        again = subprocess.run(
            [sys.executable, "-m", "hermes_keeper", *command, "--home", str(home)],
            capture_output=True,
            text=True,
        )
        assert again.returncode == 0, (n, again.stderr)
        assert opened_as_hermes_would(home, "state.db", tmp_path) == backup_ids
        assert not (home / "state.db-journal").exists()
        kept = [opened_as_hermes_would(home, s, tmp_path) for s in _restored_names(home)]
        assert old_ids in kept, n  # the old file, every commit, is one of the safety copies
        shutil.rmtree(home)
        if done.returncode == 0:
            break
    else:
        raise AssertionError("the command never finished")
    assert n > 3
