"""The CLI's conventions, each kept by a test: pipe-safe names, units, help, exit codes."""

from __future__ import annotations

import json
import time

import pytest
from click.testing import CliRunner

from hermes_keeper import demo
from hermes_keeper.cli import main
from tests.conftest import tree_digest

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
    res = runner.invoke(main, ["report", "--home", home, "--top", "12"])
    assert res.exit_code == 0, res.output
    _whole(res.output, home)
    assert res.output.splitlines()[-1] == f"next: hermes-keeper plan --home {home}"


def test_backup_folder_and_rotation_come_from_keeper_toml(tmp_path):
    """One policy: [backups] dest and keep_* serve `backup`, `backups` and a run's backup alike."""
    home, dest = tmp_path / "home", tmp_path / "elsewhere"
    demo.build_home(home, demo.generate(time.time(), sessions=20))
    (home / "keeper.toml").write_text(f'[backups]\ndest = "{dest}"\nkeep_last = 1\nkeep_daily = 0\n')
    runner = CliRunner()
    for _ in range(2):
        res = runner.invoke(main, ["backup", "--home", str(home), "--keep-weekly=0", "--keep-monthly=0"])
        assert res.exit_code == 0, res.output
    assert len(list(dest.glob("state-*.db.zst"))) == 1  # keep_last = 1 from the file, the rest from flags
    assert not (home / "keeper" / "backups").exists()
    res = runner.invoke(main, ["backups", "--home", str(home), "--json"])
    assert json.loads(res.output)["profiles"][0]["folder"] == str(dest)
    other = tmp_path / "run-dest"
    res = runner.invoke(main, ["run", "--home", str(home), "--dest", str(other), "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["profiles"][0]["backup"] in {p.name for p in other.glob("*.zst")}
    res = runner.invoke(main, ["config", "show", "--home", str(home), "--json"])
    rows = {r["key"]: r for r in json.loads(res.output)["profiles"][0]["settings"]}
    assert rows["backups.keep_last"]["value"] == "1" and rows["backups.keep_weekly"]["value"] == "4"


def test_plan_text_steps_next_hint_no_archive_and_nothing_to_do(tmp_path):
    home = tmp_path / "home"
    demo.build_home(home, demo.generate(time.time(), sessions=30))
    runner = CliRunner()
    res = runner.invoke(main, ["plan", "--home", str(home), "--no-archive"])
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert any("NO archive copy; these deletes are final" in line for line in lines)
    assert any(line.startswith("  1. backup: a verified snapshot of state.db (~") for line in lines)
    assert lines[-1] == f"next: hermes-keeper run --home {home} --no-archive"
    for _ in range(2):  # the second prunes the zombies the first closed
        assert runner.invoke(main, ["run", "--home", str(home)]).exit_code == 0
    res = runner.invoke(main, ["plan", "--home", str(home)])
    [line] = res.output.splitlines()  # nothing to do: one line, no zero tables, no next step
    assert line.startswith("default: nothing to do; ") and " sessions kept (" in line


def test_restore_asks_and_dry_runs_change_nothing(tmp_path):
    """restore replaces state.db: asked on a terminal, refused without one unless --yes; every
    --dry-run (restore, compact, backup, backups --prune) leaves the home as it was."""
    home = tmp_path / "home"
    demo.build_home(home, demo.generate(time.time(), sessions=20))
    runner = CliRunner()
    for _ in range(2):
        assert (
            runner.invoke(main, ["backup", "--home", str(home), "--keep-last=1", "--no-rotate"]).exit_code
            == 0
        )
    before = tree_digest(home)
    for args in (
        ["restore", "--latest", "--dry-run"],
        ["compact", "--dry-run"],
        ["backup", "--dry-run", "--keep-last=1", "--keep-daily=0"],
        ["backups", "--prune", "--dry-run", "--keep-last=1", "--keep-daily=0"],
    ):
        res = runner.invoke(main, [*args, "--home", str(home)])
        assert res.exit_code == 0 and "would" in res.output, (args, res.output)
        assert tree_digest(home) == before, args
    res = runner.invoke(
        main, ["backups", "--prune", "--dry-run", "--keep-last=1", "--keep-daily=0", "--home", str(home)]
    )
    assert sum(line.startswith("would remove state-") for line in res.output.splitlines()) == 1
    res = runner.invoke(main, ["restore", "--latest", "--home", str(home)])  # CliRunner: no terminal
    assert res.exit_code == 2 and "pass --yes" in res.output and tree_digest(home) == before
    res = runner.invoke(main, ["restore", "--latest", "--home", str(home)], input="n\n")
    assert tree_digest(home) == before
    res = runner.invoke(main, ["restore", "--latest", "--yes", "--home", str(home)])
    assert res.exit_code == 0 and "restored state-" in res.output, res.output
    assert any(p.name.startswith("state.db.keeper-before-restore-") for p in home.iterdir())


def test_restore_asks_on_a_terminal(tmp_path, monkeypatch):
    home = tmp_path / "home"
    demo.build_home(home, demo.generate(time.time(), sessions=20))
    runner = CliRunner()
    assert runner.invoke(main, ["backup", "--home", str(home)]).exit_code == 0
    monkeypatch.setattr("hermes_keeper.cli.options.interactive", lambda: True)
    before = tree_digest(home)
    res = runner.invoke(main, ["restore", "--latest", "--home", str(home)], input="n\n")
    assert res.exit_code == 1 and f"Replace {home / 'state.db'} with state-" in res.output
    assert tree_digest(home) == before
    res = runner.invoke(main, ["restore", "--latest", "--home", str(home)], input="y\n")
    assert res.exit_code == 0 and "restored state-" in res.output, res.output


def test_keep_within_overrides_the_policy_for_one_run_only(tmp_path):
    home = tmp_path / "home"
    demo.build_home(home, demo.generate(time.time(), sessions=60))
    runner = CliRunner()

    def pruned(*args):
        res = runner.invoke(main, ["plan", "--json", "-v", "--home", str(home), *args])
        assert res.exit_code == 0, res.output
        return {
            d["session_id"]
            for d in json.loads(res.output)["profiles"][0]["decisions"]
            if d["action"] == "prune"
        }

    default, everything = pruned(), pruned("--keep-within", "1000d")
    assert default and not everything
    only_cron = pruned("--keep-within", "1000d", "--keep-within", "cron=1h")
    assert only_cron and all(sid.startswith("cron_") for sid in only_cron)
    res = runner.invoke(main, ["plan", "--home", str(home), "--keep-within", "cron=7"])
    assert res.exit_code == 2 and 'write "7d"' in res.output
    assert pruned() == default  # nothing was written
