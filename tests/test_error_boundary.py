"""One error boundary for the CLI: one line, the right exit code, a traceback only with --debug."""

from __future__ import annotations

import json
import os
import sqlite3
import time

import pytest
from click.testing import CliRunner

from hermes_keeper import demo
from hermes_keeper.cli import main
from hermes_keeper.errors import EXIT_TRY_LATER, KeeperError, failure_line
from hermes_keeper.run import survey
from tests.conftest import tiny_disk

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
    """A real 32 MiB filesystem of its own (tmpfs), unmounted at teardown."""
    with tiny_disk(tmp_path / "tiny", "32m") as mnt:
        yield mnt


def _fill(mnt, leave: int) -> None:
    """Fill the filesystem, then free ``leave`` bytes."""
    filler = mnt / "filler"
    with open(filler, "wb", buffering=0) as fh:  # unbuffered: the last write fails here, not at close
        try:
            while True:
                fh.write(b"\0" * 65536)
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
    # What SQLite says on a full disk besides SQLITE_FULL is read as what it is, there.
    _fill(tiny_fs, leave=64 * 1024)  # full again, whatever the run gave back
    for said in (
        KeeperError(f"{home}/state.db: database is malformed: disk I/O error"),
        sqlite3.OperationalError("disk I/O error"),
    ):
        text, code = failure_line(said, home)
        assert text.startswith(f"disk full on {tiny_fs}") and code == EXIT_TRY_LATER
    (tiny_fs / "filler").unlink()
    assert failure_line(sqlite3.OperationalError("disk I/O error"), home)[1] == 1  # space again: not full
    gone = before - _ids(home / "state.db")
    again = CliRunner().invoke(main, ["run", "--home", str(home), "--quiet"])
    assert again.exit_code == 0, again.output
    listed = CliRunner().invoke(main, ["archive", "list", "--home", str(home), "--json"])
    archived = {r["session_id"] for r in json.loads(listed.stdout)["profiles"][0]["sessions"]}
    assert gone <= archived and before - _ids(home / "state.db") <= archived


def test_control_characters_never_reach_the_terminal_raw(tmp_path):
    """An id and a title with ESC sequences, a bell and a bidi override: escaped in every human
    output (report, plan, run, archive list/show/search), exact in --json."""
    from hermes_keeper.cli.text import term

    evil_id, evil_title = "x\x1b]0;pwned\x07\x1b[2J", "t\x1b[31mred\u202eevil"
    home = tmp_path / "home"
    start = NOW - 400 * 86400
    spec = {
        "id": evil_id,
        "source": "cli\x1b[5m",
        "started_at": start,
        "ended_at": start + 60,
        "title": evil_title,
        "messages": [["user", "walrus \x1b[1mbold\x1b[0m", start + 10] for _ in range(30)],
    }
    demo.build_home(home, demo.DemoSpec(NOW, sessions=[spec]))
    (home / "keeper.toml").write_text("keep_titled = false\n")
    runner = CliRunner()
    outputs = [runner.invoke(main, ["report", "--home", str(home)]).output]
    outputs.append(runner.invoke(main, ["plan", "-v", "--home", str(home)]).output)
    outputs.append(runner.invoke(main, ["run", "--home", str(home)]).output)
    for args in (["list"], ["show", evil_id], ["search", "walrus"]):
        res = runner.invoke(main, ["archive", *args, "--home", str(home)])
        assert res.exit_code == 0, res.output
        outputs.append(res.output)
    for out in outputs:
        assert "\x1b" not in out and "\x07" not in out and "\u202e" not in out
    assert any("\\x1b" in out for out in outputs)
    listed = runner.invoke(main, ["archive", "list", "--json", "--home", str(home)])
    (row,) = json.loads(listed.stdout)["profiles"][0]["sessions"]
    assert (row["session_id"], row["title"]) == (evil_id, evil_title)
    assert term(evil_id) == "x\\x1b]0;pwned\\x07\\x1b[2J"
