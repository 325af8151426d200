"""A reader that left (``| head``), ``--debug`` after the command, options a command would refuse,
and another keeper holding state.db: each as a shell user expects."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time

import pytest

from hermes_keeper import demo
from hermes_keeper.archive.store import Archive
from tests.keeper_proc import keeper_cmd


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    home = tmp_path_factory.mktemp("pipes") / "home"
    demo.build_home(home, demo.generate(time.time(), sessions=40))
    subprocess.run(keeper_cmd(home, "run", "--quiet"), check=True)
    return home


def _archived_id(home) -> str:
    with Archive.for_home(home / "keeper") as store:
        return next(iter(store.entries())).session_id


def _to_closed_pipe(cmd: list[str]) -> subprocess.CompletedProcess:
    """``cmd`` with stdout a pipe whose reader is already gone: its first write breaks, every time."""
    read, write = os.pipe()
    os.close(read)
    try:
        proc = subprocess.run(cmd, stdout=write, stderr=subprocess.PIPE, text=True)
    finally:
        os.close(write)
    return proc


@pytest.mark.parametrize(
    "args",
    [["report"], ["archive", "export"], ["archive", "show", "ID"], ["history"]],
    ids=lambda a: " ".join(a),
)
def test_a_reader_that_left_ends_the_command_as_git_does(home, args):
    """Killed by SIGPIPE (the shell's 141, as git, cat and ls), nothing on stderr."""
    args = [_archived_id(home) if a == "ID" else a for a in args]
    out = _to_closed_pipe(keeper_cmd(home, *args))
    assert (out.returncode, out.stderr) == (-signal.SIGPIPE, "")


def test_debug_after_the_command(home):
    (home / "keeper.toml").write_text('zombie_after = "soon"\n')
    try:
        out = subprocess.run(keeper_cmd(home, "plan", "--debug"), capture_output=True, text=True)
    finally:
        (home / "keeper.toml").unlink()
    assert "No such option" not in out.stderr
    assert "Traceback" in out.stderr  # --debug's point: the whole story


@pytest.mark.parametrize(
    "command", [["archive", "show"], ["archive", "restore"], ["archive", "export"], ["restore"]]
)
def test_help_lists_no_option_the_command_refuses(command):
    out = subprocess.run(
        [sys.executable, "-m", "hermes_keeper", *command, "--help"], capture_output=True, text=True
    )
    assert out.returncode == 0 and "--profile" in out.stdout
    assert "--all-profiles" not in out.stdout


HOLD_DB = "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); c.execute('SELECT 1 FROM sessions'); "
HOLD_DB += "print('open', flush=True); sys.stdin.read()"


def test_another_keeper_is_not_hermes(home, tmp_path):
    """A process of the keeper's console script holding state.db is said as such, not as Hermes."""
    script = tmp_path / "hermes-keeper"
    script.write_text(HOLD_DB)
    holder = subprocess.Popen(
        [sys.executable, str(script), str(home / "state.db")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline() == "open\n"  # the database is open from here on
        out = subprocess.run(
            keeper_cmd(home, "report"), capture_output=True, text=True, env={**os.environ, "COLUMNS": "200"}
        )
    finally:
        holder.stdin.close()
        holder.wait()
    assert out.returncode == 0, out.stderr
    assert "Hermes is running" not in out.stdout
    assert f"another hermes-keeper holds state.db: pid {holder.pid}" in out.stdout
    assert sqlite3.connect(home / "state.db").execute("SELECT count(*) FROM sessions").fetchone()[0]
