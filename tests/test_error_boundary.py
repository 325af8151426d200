"""One error boundary for the CLI: one line, the right exit code, a traceback only with --debug."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import time

import pytest
from click.testing import CliRunner

from hermes_keeper import demo
from hermes_keeper.cli import main
from hermes_keeper.errors import EXIT_TRY_LATER
from hermes_keeper.run import survey

NOW = time.time()


@pytest.mark.parametrize(
    ("exc", "code", "words"),
    [
        (RuntimeError("boom"), 1, "unexpected error: RuntimeError: boom (run with --debug for details)"),
        (sqlite3.DatabaseError("database disk image is malformed"), 1, "SQLite: database disk image"),
        (PermissionError(13, "Permission denied", "/x/state.db"), 2, "Permission denied: /x/state.db"),
    ],
)
def test_failures_are_one_line_and_debug_shows_the_traceback(tmp_path, monkeypatch, exc, code, words):
    demo.build_home(tmp_path / "home", demo.generate(NOW, sessions=10))

    def fail(*args, **kwargs):
        raise exc

    monkeypatch.setattr(survey, "scan_files", fail)
    res = CliRunner().invoke(main, ["plan", "--home", str(tmp_path / "home")])
    assert res.exit_code == code
    assert res.output.splitlines() == [f"hermes-keeper: {res.output.split(': ', 1)[1].strip()}"]
    assert words in res.output and "Traceback" not in res.output
    debug = CliRunner().invoke(main, ["--debug", "plan", "--home", str(tmp_path / "home")])
    assert debug.exception is exc


@pytest.fixture
def tiny_fs(tmp_path):
    """A real 12 MiB filesystem of its own (tmpfs), unmounted at teardown."""
    mnt = tmp_path / "tiny"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=12m", "tmpfs", str(mnt)], check=True)
    yield mnt
    subprocess.run(["umount", str(mnt)], check=True)


def _fill(mnt, leave: int) -> None:
    """Fill the filesystem, then free ``leave`` bytes."""
    filler = mnt / "filler"
    with open(filler, "wb") as fh:
        try:
            while True:
                fh.write(b"\0" * 65536)
                fh.flush()
        except OSError:
            pass
    os.truncate(filler, max(0, filler.stat().st_size - leave))


def _ids(db) -> set[str]:
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("PRAGMA quick_check").fetchone() == ("ok",)
        return {r[0] for r in conn.execute("SELECT id FROM sessions")}
    finally:
        conn.close()


def test_disk_full_is_one_clear_line_and_nothing_is_lost(tiny_fs):
    home = tiny_fs / "home"
    demo.build_home(home, demo.generate(NOW, sessions=150))
    (home / "keeper.toml").write_text("backup = false\ncompact = false\n")
    before = _ids(home / "state.db")
    _fill(tiny_fs, leave=96 * 1024)
    res = CliRunner().invoke(main, ["run", "--home", str(home)])
    assert res.exit_code == EXIT_TRY_LATER, res.output
    (line,) = res.output.strip().splitlines()
    assert line.startswith(f"hermes-keeper: disk full on {tiny_fs}") and "nothing lost" in line
    assert "Traceback" not in res.output and "no transaction is active" not in line
    (tiny_fs / "filler").unlink()
    gone = before - _ids(home / "state.db")
    again = CliRunner().invoke(main, ["run", "--home", str(home), "--quiet"])
    assert again.exit_code == 0, again.output
    listed = CliRunner().invoke(main, ["archive", "list", "--home", str(home), "--json"])
    archived = {r["session_id"] for r in json.loads(listed.stdout)["sessions"]}
    assert gone <= archived and before - _ids(home / "state.db") <= archived
