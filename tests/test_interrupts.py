"""SIGINT and SIGTERM end a run between two steps: every setting it changed is put back, the
stop is journaled and recorded, the exit is 128 + the signal, and the next run says what it
resumed. The signal is real, sent by the keeper's process to itself at a chosen step (no sleep)."""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
import time

import pytest

from hermes_keeper import demo
from hermes_keeper.journal import read_journal
from tests.keeper_proc import keeper_cmd, planned_prune, session_ids

#: ``python -c SIGNAL_AFTER N SIGNAME ARGS...``: the keeper, sending itself SIGNAME right after its
#: deleter's Nth transaction (sessions then hidden and half deleted), as Ctrl-C or systemd would.
SIGNAL_AFTER = """
import os, signal, sys
from hermes_keeper.run import prune
n, sig, calls = int(sys.argv[1]), getattr(signal, sys.argv[2]), [0]
step = prune._Deleter._step
def then_signal(self):
    step(self)
    calls[0] += 1
    if calls[0] == n:
        os.kill(os.getpid(), sig)
prune._Deleter._step = then_signal
from hermes_keeper.cli import main
main(sys.argv[3:], prog_name="hermes-keeper")
"""


def _interrupted_run(home, signame: str, *args: str, after: int = 3) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-c", SIGNAL_AFTER, str(after), signame, "run", *args, "--home", str(home)]
    return subprocess.run(cmd, capture_output=True, text=True)


def _state(db) -> tuple[dict, dict, dict]:
    """(each FTS index's config rows, each session's archived flag, each session's message count)."""
    conn = sqlite3.connect(db)
    try:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE name LIKE '%fts%_config'")]
        fts = {t: sorted(conn.execute(f"SELECT k, v FROM {t}")) for t in tables}
        flags = dict(conn.execute("SELECT id, archived FROM sessions"))
        counts = dict(conn.execute("SELECT session_id, count(*) FROM messages GROUP BY session_id"))
        return fts, flags, counts
    finally:
        conn.close()


@pytest.fixture
def home(tmp_path):
    home = tmp_path / "home"
    demo.build_home(home, demo.generate(time.time(), sessions=160, messages_per_session=30))
    # Small transactions: many deleter steps to stop between.
    (home / "keeper.toml").write_text("budget_ms = 3\npause_ms = 0\n[backups]\nkeep_last = 1\n")
    return home


@pytest.mark.parametrize("signame", ["SIGINT", "SIGTERM"])
def test_signal_stops_the_run_cleanly(home, tmp_path, signame):
    fts, flags, counts = _state(home / "state.db")
    prom = tmp_path / "keeper.prom"
    out = _interrupted_run(home, signame, "--textfile", str(prom))
    signum = getattr(signal, signame)
    assert out.returncode == 128 + signum, out.stderr
    assert f"interrupted by {signame}" in out.stderr and "Traceback" not in out.stderr
    assert "Aborted" not in out.stderr
    # What it did before the signal is said, with the words "interrupted" and what comes next.
    assert f"interrupted ({signame})" in out.stdout and "the next run resumes the rest" in out.stdout

    fts_after, flags_after, counts_after = _state(home / "state.db")
    assert fts_after == fts  # automerge and the other FTS settings are Hermes's again
    assert not (home / "keeper" / "fts-hold.json").exists()
    gone = set(flags) - set(flags_after)
    assert gone, "interrupted before any session was pruned: weak test"
    # Every session still in state.db is as Hermes left it: flag and messages (none hidden half-deleted).
    assert flags_after == {sid: flags[sid] for sid in flags_after}
    assert counts_after == {sid: n for sid, n in counts.items() if sid in flags_after}

    actions = [e["action"] for e in read_journal(home / "keeper")]
    assert "interrupted" in actions and "summary" not in actions
    rows = [e for e in _history(home) if e["kind"] == "run"]
    assert [r.get("interrupted") for r in rows] == [signame]
    assert rows[0]["pruned"] == len(gone)
    assert 'hermes_keeper_run_interrupted{profile="default"} 1.0' in prom.read_text()


def _history(home) -> list[dict]:
    out = subprocess.run(
        [sys.executable, "-m", "hermes_keeper", "history", "--json", "--home", str(home)],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout)["profiles"][0]["entries"]


def test_json_has_the_interrupted_runs_row(home):
    out = _interrupted_run(home, "SIGTERM", "--json")
    assert out.returncode == 143
    [row] = json.loads(out.stdout)["profiles"]
    assert row["interrupted"] == "SIGTERM" and row["archived"] > 0


def test_next_run_says_what_it_resumed(home):
    planned = planned_prune(home)
    out = _interrupted_run(home, "SIGINT")
    assert out.returncode == 130
    shown = [e for e in read_journal(home / "keeper") if e["action"] == "shown_again"]
    assert shown and shown[0]["sessions"], "no session was hidden when the signal came: weak test"
    out = subprocess.run(
        [sys.executable, "-m", "hermes_keeper", "run", "--home", str(home)], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    (summary,) = [e for e in read_journal(home / "keeper") if e["action"] == "summary"]
    assert summary["resumed"] > 0
    assert f"resumed {summary['resumed']} sessions an interrupted run had archived" in out.stdout
    assert not session_ids(home / "state.db") & planned  # all done in the end


#: ``python -c CTRL_C_IN_REPORT ARGS...``: the keeper with Ctrl-C arriving as its report starts.
CTRL_C_IN_REPORT = """
import os, signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)  # as on a terminal, even if started by `cmd &`
from hermes_keeper import home
build = home.build_report
def interrupted(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGINT)
    return build(*args, **kwargs)
home.build_report = interrupted
from hermes_keeper.cli import main
main(sys.argv[1:], prog_name="hermes-keeper")
"""


def test_ctrl_c_in_any_command_is_130_not_aborted(home):
    """Outside a run's steps Ctrl-C ends the command at once: the shell's 130 and one line, not
    click's 'Aborted!' and exit 1."""
    cmd = [sys.executable, "-c", CTRL_C_IN_REPORT, "report", "--home", str(home)]
    out = subprocess.run(cmd, capture_output=True, text=True)
    assert (out.returncode, out.stderr) == (130, "hermes-keeper: interrupted\n")


def test_a_killed_runs_hidden_sessions_are_not_called_hermess_own_soft_hide(home):
    """A SIGKILL (no step boundary, nothing put back) leaves sessions archived, verified and hidden
    (``archived = 1``) until the next run finishes them. ``report`` says so, apart from the
    sessions Hermes itself hid (was: all of them counted as "Hermes's own soft hide")."""
    _interrupted_run(home, "SIGKILL")
    flags = _state(home / "state.db")[1]
    hidden = {sid for sid, flag in flags.items() if flag}
    assert hidden, "the kill came before any session was hidden: weak test"
    doc = json.loads(
        subprocess.run(
            keeper_cmd(home, "report", "--json"), capture_output=True, text=True, check=True
        ).stdout
    )
    sessions = doc["profiles"][0]["sessions"]
    assert sessions["archived"] == sessions["keeper_hidden"] == len(hidden)
    text = subprocess.run(keeper_cmd(home, "report"), capture_output=True, text=True, check=True).stdout
    flat = " ".join(text.split())
    assert "hidden (archived flag) 0," in flat
    assert f"{len(hidden)} sessions hidden by a keeper run that was stopped" in flat
    # The next run finishes them; then nothing is the keeper's any more.
    subprocess.run(keeper_cmd(home, "run", "--quiet"), check=True)
    doc = json.loads(
        subprocess.run(
            keeper_cmd(home, "report", "--json"), capture_output=True, text=True, check=True
        ).stdout
    )
    assert doc["profiles"][0]["sessions"]["keeper_hidden"] == 0
