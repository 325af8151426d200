"""Policy files: defaults, overrides per profile, provenance, clear errors."""

from __future__ import annotations

import json
import time

import pytest
from click.testing import CliRunner

from hermes_keeper import demo, units
from hermes_keeper.cli import main
from hermes_keeper.errors import KeeperError
from hermes_keeper.model.policy import DAY, effective_policy
from hermes_keeper.units import parse_duration, parse_size


def test_defaults_from_the_issue(tmp_path):
    p = effective_policy(tmp_path, "default")
    assert p.zombie_after_s == DAY
    assert [
        p.retention_for(s) / DAY for s in ("cron", "subagent", "cli", "tui", "acp", "telegram", "email", "x")
    ] == [7, 7, 90, 90, 90, 180, 180, 90]
    assert p.keep_titled and p.archive and p.budget_ms == 50 and p.max_db_bytes is None
    assert p.origin == {}


def test_file_and_profile_overrides_with_provenance(tmp_path):
    (tmp_path / "keeper.toml").write_text(
        'zombie_after = "12h"\n[retention]\ncron = "3d"\n[disk]\nmax_db_bytes = "1GB"\n'
        '[profiles.work.retention]\ncron = "1d"\n[profiles.work]\nkeep_titled = false\n'
    )
    d = effective_policy(tmp_path, "default")
    w = effective_policy(tmp_path, "work")
    assert d.retention_for("cron") == 3 * DAY and w.retention_for("cron") == DAY
    assert d.keep_titled and not w.keep_titled
    assert w.max_db_bytes == 10**9 and w.zombie_after_s == 12 * 3600
    assert w.origin["retention.cron"].endswith("[profiles.work]")
    assert d.origin["retention.cron"].endswith("keeper.toml")
    assert (
        effective_policy(tmp_path, "work", overrides={"archive": False}).origin["archive"] == "command line"
    )


@pytest.mark.parametrize(
    "text, fragment",
    [
        ('zombie_after = "soon"', "zombie_after: not a duration"),
        ('[retention]\ncron = "-1d"', "retention.cron: not a duration"),
        ("[retention]\ncron = 7", 'retention.cron: a duration needs a unit: write "7d"'),
        ("[retention]\ncron = nan", "retention.cron: a duration needs a unit"),
        ("zombie_after = 1.5", 'zombie_after: a duration needs a unit: write "1.5d"'),
        ("keep_titled = 1", "keep_titled: must be true or false"),
        ("colour = 3", "unknown key colour"),
        ("retention = 3", r"\[retention\] must be a table"),
        ("[disk]\nlow_water = 2", r"disk.low_water: must be in \(0, 1\]"),
        ("[disk]\nlow_water = 0", r"disk.low_water: must be in \(0, 1\]"),
        ("[disk]\nlow_water = nan", "disk.low_water: must be a finite number"),
        ('[disk]\nmax_db_bytes = "lots"', "disk.max_db_bytes: not a size"),
        ("[disk]\nmax_db_bytes = inf", "disk.max_db_bytes: a size needs a unit"),
        ("[disk]\nmax_db_bytes = nan", "disk.max_db_bytes: a size needs a unit"),
        ('[disk]\nmax_db_bytes = "-5MB"', "disk.max_db_bytes: not a size"),
        # 500 bytes or 500 MB? A bare size is refused as a bare duration is (issue 35).
        ("[disk]\nmax_db_bytes = 500", 'disk.max_db_bytes: a size needs a unit: write "500MB"'),
        ('[check]\ndb_warn = "5"', 'check.db_warn: a size needs a unit: write "5MB"'),
        ("budget_ms = nan", "budget_ms: must be a finite number"),
        ("budget_ms = inf", "budget_ms: must be a finite number"),
        ("budget_ms = 0.5", r"budget_ms: must be in \[1, 1000\]"),
        ("budget_ms = 5000", r"budget_ms: must be in \[1, 1000\]"),
        ("pause_ms = -1", r"pause_ms: must be in \[0, 1000\]"),
        ('[files]\nmax_age = "7"', 'files.max_age: a duration needs a unit: write "7d"'),
        ('[files]\nmax_age = "7 fortnights"', "files.max_age: not a duration"),
        ('[files]\nkeep = "7d"', "unknown key files.keep"),
        ("[profiles.default]\nbudget_ms = nan", r"\[profiles.default\]: budget_ms: must be a finite"),
        ("this is = = not toml", "invalid TOML"),
    ],
)
def test_invalid(tmp_path, text, fragment):
    (tmp_path / "keeper.toml").write_text(text)
    with pytest.raises(KeeperError, match=fragment):
        effective_policy(tmp_path, "default")


def test_invalid_value_is_one_line_exit_2_and_nothing_changed(tmp_path):
    """A bad keeper.toml stops `run` before it touches anything: same bytes, no keeper/ folder."""
    demo_home = tmp_path / "home"
    demo.build_home(demo_home, demo.generate(time.time(), sessions=20))
    (demo_home / "keeper.toml").write_text("[retention]\ncron = nan\n")
    before = (demo_home / "state.db").read_bytes()
    res = CliRunner().invoke(main, ["run", "--home", str(demo_home)])
    assert res.exit_code == 2
    assert res.output.strip().splitlines() == [
        f'hermes-keeper: {demo_home / "keeper.toml"}: retention.cron: a duration needs a unit: write "7d"'
        " (or h, m, s, w)"
    ]
    assert (demo_home / "state.db").read_bytes() == before and not (demo_home / "keeper").exists()


def test_plan_run_and_check_read_the_policy_file_given_with_config(tmp_path):
    """``--config FILE`` is the policy of plan, run and check, in place of <home>/keeper.toml."""
    home = tmp_path / "home"
    demo.build_home(home, demo.generate(time.time(), sessions=20))
    keep_all = tmp_path / "keep-all.toml"
    keep_all.write_text(
        "[retention]\n" + "".join(f'{k} = "3650d"\n' for k in ("cron", "subagent", "default", "messaging"))
    )

    def pruned(*extra):
        res = CliRunner().invoke(main, [*extra, "--home", str(home), "--json"])
        assert res.exit_code == 0, res.output
        return json.loads(res.output)["profiles"][0]["prune"]["sessions"]

    assert pruned("plan") > 0
    assert pruned("plan", "--config", str(keep_all)) == 0
    assert pruned("run", "--dry-run", "--config", str(keep_all)) == 0
    loud = tmp_path / "loud.toml"
    loud.write_text('[check]\ndb_warn = "1B"\n')

    def db_measure(*extra):
        res = CliRunner().invoke(main, ["check", "--home", str(home), "--json", *extra])
        (db,) = [m for m in json.loads(res.output)["profiles"][0]["measures"] if m["label"] == "db"]
        return db["warn"], db["status"]

    assert db_measure() == (2 * 10**9, "OK")
    assert db_measure("--config", str(loud)) == (1, "WARNING")


def test_units():
    assert (
        parse_duration("90s") == 90 and parse_duration("2w") == 14 * DAY and parse_duration(" 12h ") == 43200
    )
    assert (
        parse_size("500MB") == 500 * 10**6 and parse_size("2GiB") == 2 * 1024**3 and parse_size("10B") == 10
    )
    with pytest.raises(KeeperError, match="--wait-idle: a duration needs a unit"):
        parse_duration(600, "--wait-idle")


def test_one_formatter_for_sizes_durations_ages_and_counts():
    """Decimal sizes labelled as such, durations as keeper.toml spells them, one age format."""
    assert units.size(44_000_000) == "44.0 MB" and units.size(-5) == "0 bytes" and units.size(1) == "1 byte"
    assert units.size(parse_size("500MB")) == "500.0 MB"  # what is read is what is shown
    assert [units.duration(s) for s in (7 * DAY, 43200, 1.5 * DAY, 600, 90, None)] == [
        "7d",
        "12h",
        "36h",
        "10m",
        "90s",
        "none",
    ]
    assert all(parse_duration(units.duration(s)) == s for s in (7 * DAY, 43200, 1.5 * DAY, 600, 90))
    assert units.ago(1000 - 11 * DAY, 1000) == "11d ago" and units.ago(1000 - 7200, 1000) == "2h ago"
    assert units.ago(0, 3.24 * DAY, 1) == "3.2d ago" and units.span(90 * 60, 1) == "1.5h"  # check's line
    assert units.plural(1, "session") == "1 session" and units.plural(2, "session") == "2 sessions"


def test_report_refuses_a_negative_top(tmp_path):
    res = CliRunner().invoke(main, ["report", "--home", str(tmp_path), "--top", "-5"])
    assert res.exit_code == 2 and "-5 is not in the range x>=0" in res.output


def test_config_show_names_the_source(tmp_path):
    (tmp_path / "keeper.toml").write_text('[retention]\ncron = "3d"\n')
    res = CliRunner().invoke(main, ["config", "show", "--home", str(tmp_path), "--json"])
    assert res.exit_code == 0, res.output
    prof = json.loads(res.output)["profiles"][0]
    assert prof["retention_s"]["cron"] == 3 * DAY
    assert prof["origin"]["retention.cron"] == str(tmp_path / "keeper.toml")
    rows = {r["key"]: r for r in prof["settings"]}
    assert rows["retention.cron"] == {
        "key": "retention.cron",
        "value": "3d",
        "from": str(tmp_path / "keeper.toml"),
    }
    assert rows["zombie_after"] == {"key": "zombie_after", "value": "1d", "from": "default"}
    assert rows["disk.max_db_bytes"]["value"] == "none" and rows["keep_titled"]["value"] == "true"
    res = CliRunner().invoke(main, ["config", "show", "--home", str(tmp_path)])
    lines = {line.split("│")[1].strip(): line for line in res.output.splitlines() if line.count("│") == 4}
    assert "3d" in lines["retention.cron"] and "7d" in lines["retention.subagent"]
    assert "none" in lines["disk.max_db_bytes"] and "true" in lines["keep_titled"]
    assert "604800" not in res.output and "None" not in res.output and "True" not in res.output
    res = CliRunner().invoke(
        main, ["config", "show", "--home", str(tmp_path), "--config", str(tmp_path / "no")]
    )
    assert res.exit_code == 2
