"""``--quiet`` means quiet: nothing on stdout or stderr on success (cron mails any output),
one line on stderr for a failure."""

from __future__ import annotations

import subprocess
import time

import pytest

from hermes_keeper import demo
from hermes_keeper.journal import read_journal
from tests.keeper_proc import keeper_cmd, planned_prune, session_ids


@pytest.fixture
def home(tmp_path):
    home = tmp_path / "home"
    demo.build_home(home, demo.generate(time.time(), sessions=40))
    return home


@pytest.mark.parametrize(
    "args",
    [["run", "--quiet"], ["backup", "--quiet"], ["compact", "--quiet"], ["report", "--quiet"]],
    ids=lambda a: a[0],
)
def test_quiet_prints_nothing_on_success(home, args):
    out = subprocess.run(keeper_cmd(home, *args), capture_output=True, text=True)
    assert (out.returncode, out.stdout, out.stderr) == (0, "", "")


def test_quiet_run_did_its_work(home):
    """Quiet is about output, not effect: the run pruned and journaled as a loud one would."""
    planned = planned_prune(home)
    assert planned
    subprocess.run(keeper_cmd(home, "run", "-q"), check=True, capture_output=True)
    assert not session_ids(home / "state.db") & planned  # every planned session pruned
    (summary,) = [e for e in read_journal(home / "keeper") if e["action"] == "summary"]
    assert summary["pruned"] == len(planned)


def test_quiet_failure_is_one_line_on_stderr(home):
    (home / "keeper.toml").write_text('zombie_after = "soon"\n')
    out = subprocess.run(keeper_cmd(home, "run", "--quiet"), capture_output=True, text=True)
    assert out.returncode == 2 and out.stdout == ""
    assert len(out.stderr.splitlines()) == 1 and "zombie_after" in out.stderr


def test_quiet_says_nothing_of_a_new_profile(home):
    """A profile Hermes just made (no state.db yet) is skipped: a note without --quiet, nothing
    with it (cron would mail the note every night)."""
    (home / "profiles" / "fresh").mkdir(parents=True)
    loud = subprocess.run(keeper_cmd(home, "run", "--all-profiles"), capture_output=True, text=True)
    assert loud.returncode == 0 and "fresh: no state.db yet" in loud.stderr
    out = subprocess.run(keeper_cmd(home, "run", "--all-profiles", "--quiet"), capture_output=True, text=True)
    assert (out.returncode, out.stdout, out.stderr) == (0, "", "")
