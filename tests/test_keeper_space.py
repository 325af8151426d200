"""The keeper counts itself: a run's net change, the plan's backup cost, the [keeper] budget."""

from __future__ import annotations

import os
import time
from pathlib import Path

from click.testing import CliRunner

from hermes_keeper import demo, units
from hermes_keeper.check import WARNING
from hermes_keeper.cli import main
from hermes_keeper.home import select_profiles
from hermes_keeper.report_html import run_columns
from hermes_keeper.run.plan import REFUSE, SNAPSHOT
from tests.conftest import tiny_disk


def home_bytes(home: Path) -> int:
    """Every regular file under the home, as `du --apparent-size` counts them."""
    total = 0
    for dirpath, _dirs, names in os.walk(home):
        for n in names:
            p = Path(dirpath) / n
            if p.is_file() and not p.is_symlink():
                total += p.stat().st_size
    return total


def demo_home(tmp_path: Path, sessions: int = 150) -> Path:
    home = tmp_path / "home"
    demo.build_home(home, demo.generate(time.time(), sessions=sessions, days=150))
    return home


def test_run_gives_the_homes_net_change_and_records_it(tmp_path):
    """'freed' was gross: the run's backup and archive went into keeper/ unsaid."""
    home = demo_home(tmp_path)
    [profile] = select_profiles(home)
    before = home_bytes(home)
    res = profile.run()
    after = home_bytes(home)
    grew = res.keeper_bytes_after - res.keeper_bytes_before
    assert res.backup and res.prune.pruned and grew > 0  # a backup and archive entries
    assert res.net_freed_bytes == res.freed_bytes - grew
    # What the summary says the home got back is what it did, within the history row and journal
    # line written after it was measured.
    assert abs((before - after) - res.net_freed_bytes) < 64_000
    assert "(keeper/ +" in res.summary()
    assert ("net " in res.summary()) == (res.net_freed_bytes >= 0)
    [row] = profile.history.entries(("run",))
    assert row.figures["net_freed_bytes"] == res.net_freed_bytes
    shown = CliRunner().invoke(main, ["history", "--home", str(home)], env={"COLUMNS": "200"}).output
    assert " home " in shown and units.change(-res.net_freed_bytes) in shown
    col = run_columns(row.figures)
    assert sum(col.values()) == res.freed_bytes + max(0, -res.net_freed_bytes)
    assert col["went into keeper/"] == res.freed_bytes - max(0, res.net_freed_bytes)


def test_plan_says_what_the_backup_costs_and_where_it_goes(tmp_path):
    home = demo_home(tmp_path)
    [profile] = select_profiles(home)
    plan = profile.plan()
    assert plan.safeguard.kind == SNAPSHOT and plan.prune
    cost = plan.backup
    assert cost["folder"] == str(home / "keeper" / "backups") and cost["same_disk"]
    assert 0 < cost["est_bytes"] < cost["db_bytes"] and cost["free_bytes"] > 0
    [step] = [s for s in plan.steps() if s.startswith("backup:")]
    assert "compressed into" in step and "free there" in step


def test_plan_refuses_a_backup_the_disk_hermes_writes_to_cannot_hold(tmp_path):
    with tiny_disk(tmp_path / "disk", "16m") as disk:
        home = disk / "home"
        demo.build_home(home, demo.generate(time.time(), sessions=60, days=150))
        [profile] = select_profiles(home)
        plan = profile.plan()
        assert plan.safeguard.kind == REFUSE and "on the disk Hermes writes to" in plan.safeguard.why
        assert plan.backup["refused"] == plan.safeguard.why


def test_check_warns_when_keeper_is_over_its_budget(tmp_path):
    home = demo_home(tmp_path, sessions=40)
    [profile] = select_profiles(home)
    profile.backup()
    policy = profile.config()
    assert [m for m in profile.check(policy).measures if m.label == "keeper"] == []  # no budget set
    policy.set("keeper.max_bytes", "1kB", "test")
    [m] = [m for m in profile.check(policy).measures if m.label == "keeper"]
    assert m.status == WARNING and m.value > 1000 and "over its budget" in m.problem
    policy.set("keeper.max_bytes", "1GB", "test")
    [m] = [m for m in profile.check(policy).measures if m.label == "keeper"]
    assert m.status == 0
