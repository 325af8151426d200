"""Policy files: defaults, overrides per profile, provenance, clear errors."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from hermes_keeper.cli import main
from hermes_keeper.errors import KeeperError
from hermes_keeper.run.policy import DAY, effective_policy, parse_duration, parse_size


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
    assert w.max_db_bytes == 1024**3 and w.zombie_after_s == 12 * 3600
    assert w.origin["retention.cron"].endswith("[profiles.work]")
    assert d.origin["retention.cron"].endswith("keeper.toml")
    assert (
        effective_policy(tmp_path, "work", overrides={"archive": False}).origin["archive"] == "command line"
    )


@pytest.mark.parametrize(
    "text, fragment",
    [
        ('zombie_after = "soon"', "not a duration"),
        ("[retention]\ncron = -1", "negative"),
        ("keep_titled = 1", "true or false"),
        ("colour = 3", "unknown key"),
        ("[disk]\nlow_water = 2", "fraction"),
        ('[disk]\nmax_db_bytes = "lots"', "not a size"),
        ("this is = = not toml", "invalid TOML"),
    ],
)
def test_invalid(tmp_path, text, fragment):
    (tmp_path / "keeper.toml").write_text(text)
    with pytest.raises(KeeperError, match=fragment):
        effective_policy(tmp_path, "default")


def test_units():
    assert parse_duration("90s") == 90 and parse_duration("2w") == 14 * DAY and parse_duration(5) == 5
    assert parse_size("500MB") == 500 * 1024**2 and parse_size(10) == 10


def test_config_show_names_the_source(tmp_path):
    (tmp_path / "keeper.toml").write_text('[retention]\ncron = "3d"\n')
    res = CliRunner().invoke(main, ["config", "show", "--home", str(tmp_path), "--json"])
    assert res.exit_code == 0, res.output
    prof = json.loads(res.output)["profiles"][0]
    assert prof["retention_s"]["cron"] == 3 * DAY
    assert prof["origin"]["retention.cron"] == str(tmp_path / "keeper.toml")
    res = CliRunner().invoke(main, ["config", "show", "--home", str(tmp_path)])
    assert "retention.cron" in res.output and "3d" in res.output
    res = CliRunner().invoke(
        main, ["config", "show", "--home", str(tmp_path), "--config", str(tmp_path / "no")]
    )
    assert res.exit_code == 2
