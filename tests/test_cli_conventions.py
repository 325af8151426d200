"""The CLI's conventions, each kept by a test: pipe-safe names, units, help, exit codes."""

from __future__ import annotations

import time

import pytest
from click.testing import CliRunner

from hermes_keeper import demo
from hermes_keeper.cli import main

DAY = 86400.0
#: Ids and a folder longer than any terminal: rich would fold them at 80 columns when piped.
LONG_OLD = "cron_" + "o" * 140
LONG_NEW = "20261201_" + "n" * 140


def _session(sid: str, source: str, start: float) -> dict:
    msgs = [["user", "hello there", start], ["assistant", "hi", start + 5]]
    return {
        "id": sid,
        "source": source,
        "started_at": start,
        "messages": msgs,
        "ended_at": start + 10,
        "end_reason": "user_exit",
    }


@pytest.fixture
def long_home(tmp_path):
    """A demo home under a long path, with an old cron session and a fresh one of long ids."""
    now = time.time()
    spec = demo.generate(now, sessions=20)
    spec.sessions += [_session(LONG_OLD, "cron", now - 60 * DAY), _session(LONG_NEW, "cli", now - 3600)]
    home = tmp_path / ("h" * 120) / "home"
    demo.build_home(home, spec)
    return home


def _whole(output: str, *names: str) -> None:
    lines = output.splitlines()
    for name in names:
        assert any(name in line for line in lines), f"{name[:20]}... split over lines"


def test_piped_output_never_splits_an_id_or_a_file_name(long_home):
    """CliRunner is not a terminal: every id and path a user copies is whole on one line."""
    runner, home = CliRunner(env={"COLUMNS": None}), str(long_home)  # as cron and a pipe have it
    res = runner.invoke(main, ["plan", "-v", "--home", home])
    assert res.exit_code == 0, res.output
    _whole(res.output, LONG_OLD, LONG_NEW, home)
    assert "=" * 200 not in res.output and "─" * 200 not in res.output  # no rule as wide as the pipe
    res = runner.invoke(main, ["run", "--home", home])
    assert res.exit_code == 0, res.output
    res = runner.invoke(main, ["archive", "list", "--home", home])
    assert res.exit_code == 0, res.output
    _whole(res.output, LONG_OLD)
    res = runner.invoke(main, ["backups", "--home", home])
    assert res.exit_code == 0, res.output
    [backup] = (long_home / "keeper" / "backups").glob("state-*.db.zst")
    _whole(res.output, str(backup.parent), backup.name)
    res = runner.invoke(main, ["report", "--home", home])
    assert res.exit_code == 0, res.output
    _whole(res.output, home)
