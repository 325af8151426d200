"""Output an operator can trust unattended (issue 35): one spelling of sizes, durations, times
and counts; bare sizes refused; typos in keeper.toml named with what was meant; `config check`."""

from __future__ import annotations

import time

import pytest
from click.testing import CliRunner

from hermes_keeper import units
from hermes_keeper.cli import main
from hermes_keeper.errors import KeeperError
from hermes_keeper.model.policy import PolicyWarning, effective_policy
from hermes_keeper.run import reasons


@pytest.mark.parametrize("bare", [500, "500", 1.5, 0])
def test_a_bare_size_is_refused_with_the_spelling_to_use(bare):
    with pytest.raises(KeeperError, match='a size needs a unit: write "[0-9.]+MB"'):
        units.parse_size(bare, "disk.max_db_bytes")


def test_keep_size_without_a_unit_is_refused_before_anything_runs(tmp_path):
    res = CliRunner().invoke(main, ["plan", "--home", str(tmp_path), "--keep-size", "500"])
    assert res.exit_code == 2 and 'a size needs a unit: write "500MB"' in res.output


def test_check_threshold_without_a_unit_is_refused(tmp_path):
    res = CliRunner().invoke(main, ["check", "--home", str(tmp_path), "-t", "db_warn=5"])
    assert res.exit_code != 0 and 'check.db_warn: a size needs a unit: write "5MB"' in res.output


@pytest.mark.parametrize(
    "seconds, text",
    [(0.048, "48ms"), (1.83, "1.8s"), (12.4, "12s"), (200, "3m"), (7200, "2.0h")],
)
def test_how_long_a_step_took_has_one_spelling(seconds, text):
    assert units.took(seconds) == text


@pytest.mark.parametrize(
    "seconds, text", [(0, "0s ago"), (30, "30s ago"), (66, "1m ago"), (3 * 86400, "3d ago")]
)
def test_an_age_is_never_0m_or_a_fraction_of_a_minute(seconds, text):
    assert units.ago(0, seconds, digits=1 if seconds < 3600 else 0) == text


def test_idle_times_are_in_days_beyond_a_day_everywhere():
    """The plan said ``idle 919h`` for a zombie beside ``idle 37d`` for a pruned session."""
    assert units.span(919 * 3600) == "38d" == reasons.days(919 * 3600)


def test_every_time_names_its_zone():
    assert units.when(0).endswith(time.strftime(" %Z", time.localtime(0)))
    units.show_utc(True)
    try:
        assert units.when(0) == "1970-01-01 00:00 UTC"
    finally:
        units.show_utc(False)


def test_an_unknown_key_is_refused_with_the_key_meant(tmp_path):
    (tmp_path / "keeper.toml").write_text('[disk]\nmax_db_byte = "1GB"\n')
    meant = r"unknown key disk.max_db_byte \(did you mean disk.max_db_bytes\?\)"
    with pytest.raises(KeeperError, match=meant):
        effective_policy(tmp_path, "default")


def test_a_retention_source_one_letter_off_is_warned_about(tmp_path):
    (tmp_path / "keeper.toml").write_text('[retention]\ncrom = "1d"\nmybot = "2d"\n')
    with pytest.warns(PolicyWarning, match=r"retention.crom: .*\(did you mean cron\?\)") as caught:
        effective_policy(tmp_path, "default")
    assert len(caught) == 1  # mybot is near no Hermes source: taken as meant


def test_config_check_lists_every_problem_and_exits_2(tmp_path):
    (tmp_path / "keeper.toml").write_text(
        '[retention]\ncrom = "1d"\n[disk]\nmax_db_byte = "1GB"\nlow_water = 2\n'
        "[profiles.work]\nzombie_aftr = 3\n[check]\ndb_warn = 5\n"
    )
    res = CliRunner().invoke(main, ["config", "check", "--home", str(tmp_path)])
    assert res.exit_code == 2
    for fragment in (
        "unknown key disk.max_db_byte (did you mean disk.max_db_bytes?)",
        "disk.low_water: must be in (0, 1]",
        'check.db_warn: a size needs a unit: write "5MB"',
        "[profiles.work]: unknown key zombie_aftr (did you mean zombie_after?)",
        "warning: ",
        "(did you mean cron?)",
        "4 errors",
    ):
        assert fragment in res.output


def test_config_check_of_a_good_file_or_none_exits_0(tmp_path):
    res = CliRunner().invoke(main, ["config", "check", "--home", str(tmp_path)])
    assert res.exit_code == 0 and "absent: every default applies" in res.output
    (tmp_path / "keeper.toml").write_text('[retention]\ncron = "3d"\n')
    res = CliRunner().invoke(main, ["config", "check", "--home", str(tmp_path)])
    assert res.exit_code == 0 and res.output.strip().endswith("keeper.toml: valid")
