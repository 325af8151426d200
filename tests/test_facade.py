"""The library facade (``Home``/``Profile``) and the one multi-profile policy every command follows."""

from __future__ import annotations

import json
import sqlite3
import sys
import time

import pytest
from click.testing import CliRunner

from hermes_keeper import demo
from hermes_keeper.cli import main
from hermes_keeper.errors import KeeperError
from hermes_keeper.home import NEW_PROFILE, Home
from hermes_keeper.sqlite import holders as holders_mod
from hermes_keeper.sqlite import schema as schema_mod
from tests.conftest import tree_digest

JUNK = b"not a database at all" * 100


@pytest.fixture
def fleet(tmp_path):
    """default: a demo home; profiles/broken: a state.db that is not SQLite; profiles/fresh: no state.db."""
    demo.build_home(tmp_path, demo.generate(time.time(), sessions=30))
    broken = tmp_path / "profiles" / "broken"
    broken.mkdir(parents=True)
    (broken / "state.db").write_bytes(JUNK)
    (tmp_path / "profiles" / "fresh").mkdir()
    return tmp_path


def cli(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.mark.parametrize("command", [["backup"], ["compact"], ["run"], ["report"], ["plan"]])
def test_all_profiles_one_broken_the_good_one_is_done_and_printed(fleet, command):
    res = cli(*command, "--home", fleet, "--all-profiles", "--json")
    assert res.exit_code == 1, res.output
    rows = {r["profile"]: r for r in json.loads(res.stdout)["profiles"]}
    assert set(rows) == {"default", "broken", "fresh"}
    assert rows["broken"]["error"].endswith("broken/state.db: not a SQLite database")
    assert rows["fresh"] == {
        "profile": "fresh",
        "home": str(fleet / "profiles" / "fresh"),
        "skipped_because": NEW_PROFILE,
    }
    assert "error" not in rows["default"] and "skipped_because" not in rows["default"]
    assert (fleet / "profiles" / "broken" / "state.db").read_bytes() == JUNK
    assert not (fleet / "profiles" / "fresh" / "keeper").exists()
    lines = res.stderr.splitlines()
    assert f"hermes-keeper: fresh: {NEW_PROFILE}" in lines
    assert [line for line in lines if line.startswith("hermes-keeper: broken: ")] == [
        f"hermes-keeper: broken: {rows['broken']['error']}"
    ]


def test_backup_all_profiles_text_prints_the_good_profile(fleet):
    res = cli("backup", "--home", fleet, "--all-profiles")
    assert res.exit_code == 1
    [line] = res.stdout.splitlines()
    assert line.startswith("default: ") and "state-" in line and "rotated out: none" in line
    assert len(list((fleet / "keeper" / "backups").glob("state-*.db.zst"))) == 1


def test_compact_all_profiles_text_prints_the_good_profile(fleet):
    res = cli("compact", "--home", fleet, "--all-profiles")
    assert res.exit_code == 1
    [line] = res.stdout.splitlines()
    assert line.startswith("default: freed ") and "auto_vacuum none -> incremental" in line


def test_all_profiles_all_broken_is_a_refusal_and_changes_nothing(tmp_path):
    for name in ("a", "b"):
        (tmp_path / "profiles" / name).mkdir(parents=True)
        (tmp_path / "profiles" / name / "state.db").write_bytes(JUNK)
    (tmp_path / "state.db").write_bytes(JUNK)
    before = tree_digest(tmp_path)
    res = cli("report", "--home", tmp_path, "--all-profiles")
    assert res.exit_code == 2 and len(res.stderr.splitlines()) == 3
    assert tree_digest(tmp_path) == before


def test_the_facade_plans_and_runs_without_click(tmp_path):
    demo.build_home(tmp_path, demo.generate(time.time(), sessions=40))
    home = Home(tmp_path, env={})
    assert [p.name for p in home.profiles()] == ["default"]
    profile = home.profile()
    policy = profile.config()
    plan = profile.plan(policy)
    assert plan.prune and plan.warnings == []
    assert profile.run(policy, dry_run=True).prune == plan.prune
    seen = []
    result = profile.run(policy, progress=lambda kind, n: seen.append((kind, n)))
    assert seen[0] == ("plan", len(plan.prune))
    assert sum(n for kind, n in seen if kind == "prune") == len(plan.prune)
    assert sorted(result.prune.pruned) == sorted(plan.prune)
    assert {e.session_id for e in profile.archive.list()} == set(plan.prune)
    assert profile.archive.verify().ok
    assert profile.backups()["backups"][0]["verified"]
    with pytest.raises(KeeperError, match="profile 'nope' not found"):
        home.profile("nope")


def _count_calls(monkeypatch, module, name: str) -> list:
    """Wrap ``module.name`` and every keeper module's reference to it; returns the call log."""
    original, calls = getattr(module, name), []

    def counted(*args, **kwargs):
        calls.append(args)
        return original(*args, **kwargs)

    for mod in list(sys.modules.values()):
        if mod and mod.__name__.startswith("hermes_keeper") and getattr(mod, name, None) is original:
            monkeypatch.setattr(mod, name, counted)
    return calls


@pytest.mark.parametrize("auto_vacuum", ["none", "incremental"])
def test_a_run_inspects_the_schema_once_and_scans_holders_at_most_twice(tmp_path, monkeypatch, auto_vacuum):
    demo.build_home(tmp_path, demo.generate(time.time(), sessions=40))
    if auto_vacuum == "incremental":
        conn = sqlite3.connect(tmp_path / "state.db")
        conn.execute("PRAGMA auto_vacuum=INCREMENTAL")
        conn.execute("VACUUM")
        conn.close()
    import hermes_keeper.run.compact  # noqa: F401  (every step's module loaded before counting)
    import hermes_keeper.run.execute  # noqa: F401

    inspected = _count_calls(monkeypatch, schema_mod, "inspect")
    scanned = _count_calls(monkeypatch, holders_mod, "find_holders")
    res = cli("run", "--home", tmp_path, "--json")
    assert res.exit_code == 0, res.output
    [out] = json.loads(res.stdout)["profiles"]
    assert out["pruned"] > 0 and out["backup"] and out["compact"]["auto_vacuum_after"] == "incremental"
    assert out["compact"]["vacuumed"] == (auto_vacuum == "none")
    assert len(inspected) == 1
    assert 1 <= len(scanned) <= 2
