"""Output an operator can trust unattended (issue 35): one spelling of sizes, durations, times
and counts; bare sizes refused; typos in keeper.toml named with what was meant; `config check`."""

from __future__ import annotations

import json
import re
import time

import pytest
from click.testing import CliRunner

from hermes_keeper import demo, units
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


# --- 80 columns, pipes, ASCII ----------------------------------------------------------------

TERMINAL_80 = {"COLUMNS": "80", "TTY_COMPATIBLE": "1", "TERM": "dumb"}  # rich's terminal, no colours
PIPED_80 = {"COLUMNS": "80", "TTY_COMPATIBLE": None}  # a pipe: COLUMNS must not make it wrap


@pytest.fixture(scope="module")
def ran_home(tmp_path_factory):
    """A demo home after one run: an archive and a backup to list."""
    home = tmp_path_factory.mktemp("out") / "home"
    demo.build_home(home, demo.generate(time.time(), sessions=60))
    res = CliRunner().invoke(main, ["run", "--home", str(home)])
    assert res.exit_code == 0, res.output
    return home


def _invoke(env: dict, *args) -> str:
    res = CliRunner(env=env).invoke(main, list(args))
    assert res.exit_code == 0, res.output
    return res.output


def _whole_on_a_line(output: str, names) -> None:
    lines = output.splitlines()
    for name in names:
        assert any(name in line for line in lines), f"{name} cut or split over lines"


@pytest.mark.parametrize("env", [TERMINAL_80, PIPED_80], ids=["terminal-80", "piped-COLUMNS-80"])
def test_plan_v_at_80_columns_never_cuts_an_id(tmp_path, env):
    """219 ids were cut with an ellipsis by `plan -v` at 80 columns."""
    demo.build_home(tmp_path, demo.generate(time.time(), sessions=60))
    out = _invoke(env, "plan", "-v", "--home", str(tmp_path))
    plan = json.loads(_invoke({}, "plan", "-v", "--json", "--home", str(tmp_path)))["profiles"][0]
    ids = [d["session_id"] for d in plan["decisions"]]
    assert ids and "\u2026" not in out
    _whole_on_a_line(out, ids)
    paths = [f["path"] for f in plan["file_actions"]]
    assert max(map(len, paths)) > 80  # request dumps: a path longer than the terminal stays whole
    _whole_on_a_line(out, paths)
    # a zombie idle 38 days said "idle 919h" beside "idle 37d" for a pruned session
    assert "open, idle" in out and all(int(h) < 24 for h in re.findall(r"idle (\d+)h", out))
    if env is TERMINAL_80:  # only a word longer than the terminal (a path) makes a line longer
        assert all(len(line) <= 80 or " " not in line.strip() for line in out.splitlines())


@pytest.mark.parametrize("env", [TERMINAL_80, PIPED_80], ids=["terminal-80", "piped-COLUMNS-80"])
def test_archive_list_and_backups_keep_ids_and_names_whole_at_80_columns(ran_home, env):
    """Both wrapped ids and backup names over lines, piped too, contrary to the README."""
    home = str(ran_home)
    listed = json.loads(_invoke({}, "archive", "list", "--json", "--home", home))["profiles"][0]["sessions"]
    out = _invoke(env, "archive", "list", "--home", home)
    _whole_on_a_line(out, [e["session_id"] for e in listed])
    backups = [p.name for p in (ran_home / "keeper" / "backups").glob("state-*.db.zst")]
    out = _invoke(env, "backups", "--home", home)
    _whole_on_a_line(out, [*backups, str(ran_home / "keeper" / "backups")])
    if env is TERMINAL_80:
        assert max(map(len, out.splitlines())) <= 80


@pytest.mark.parametrize("locale", [{"LANG": "C"}, {"LC_ALL": "C", "LANG": "en_US.UTF-8"}, {"LANG": None}])
def test_a_non_utf8_locale_gets_ascii_only(ran_home, locale):
    """No box characters, no ellipsis, no bullets under LANG=C / LC_ALL=C (or no locale, as cron)."""
    env = TERMINAL_80 | {"LC_ALL": None, "LC_CTYPE": None} | locale
    for args in (["report"], ["plan", "-v"], ["archive", "list"], ["backups"], ["history"]):
        out = _invoke(env, *args, "--home", str(ran_home))
        assert out.isascii(), (args, sorted({ch for ch in out if not ch.isascii()}))


def test_a_utf8_locale_keeps_its_box_drawing(ran_home):
    out = _invoke(TERMINAL_80 | {"LANG": "C.UTF-8", "LC_ALL": None}, "report", "--home", str(ran_home))
    assert "\u2501" in out and "\u00b7" in out


def test_ascii_keeps_json_exact(ran_home):
    """--json is data: under LANG=C it stays valid JSON with the text exactly as stored."""
    out = _invoke({"LANG": "C", "LC_ALL": None}, "plan", "--json", "--home", str(ran_home))
    assert json.loads(out)["command"] == "plan"


# --- the report's words and numbers ------------------------------------------------------------


def test_the_files_table_does_not_call_removable_copies_never_removed(tmp_path):
    """It said malformed copies are "never removed" while the next table removes them."""
    demo.build_home(tmp_path, demo.generate(time.time(), sessions=40))
    out = _invoke({}, "report", "--home", str(tmp_path))
    assert "malformed-backup-* (never removed)" not in out
    assert "state.db.malformed-backup-*" in out


def test_orphans_are_not_shown_as_part_of_the_transcripts_row(tmp_path):
    """Orphans (2.5 MB) read as a part of the transcripts (2.1 MB): they are of every sessions/ kind."""
    demo.build_home(tmp_path, demo.generate(time.time(), sessions=40))
    out = _invoke({}, "report", "--home", str(tmp_path))
    assert "of these: orphans" not in out and "of all sessions/ files above: orphans" in out


def test_counts_in_sentences_agree_with_their_number(tmp_path):
    """``1 rows``, ``1 files``, ``exported 1 sessions``."""
    demo.build_home(tmp_path, demo.generate(time.time(), sessions=40))
    home = str(tmp_path)
    _invoke({}, "run", "--home", home)
    assert "(1 row," in _invoke({}, "history", "--home", home)
    listed = json.loads(_invoke({}, "archive", "list", "--json", "--home", home))["profiles"][0]["sessions"]
    one = listed[0]["session_id"]
    out = str(tmp_path / "x.jsonl")
    res = CliRunner().invoke(main, ["archive", "export", one, "--home", home, "-o", out])
    assert res.exit_code == 0, res.output
    assert "exported 1 session (" in res.output


def test_archive_list_names_the_source_a_typo_meant(ran_home):
    """``archive list --source crn`` listed nothing and said nothing."""
    res = CliRunner().invoke(main, ["archive", "list", "--source", "crn", "--home", str(ran_home)])
    assert res.exit_code == 0
    assert "warning: no archived session has source 'crn' (did you mean cron?)" in res.output
    res = CliRunner().invoke(main, ["archive", "list", "--source", "cron", "--home", str(ran_home)])
    assert "warning" not in res.output


def test_growth_per_day_does_not_drop_after_a_prune(tmp_path):
    """Pruned sessions left the 30-day window, so a run made the home look as if it grew slower."""
    demo.build_home(tmp_path, demo.generate(time.time(), sessions=120))

    def growth() -> dict:
        out = _invoke({}, "report", "--json", "--home", str(tmp_path))
        return json.loads(out)["profiles"][0]["growth"]["last_30d"]

    before = growth()
    _invoke({}, "run", "--home", str(tmp_path))
    after = growth()
    assert after["sessions"] == before["sessions"] and after["messages"] == before["messages"]
    assert after["bytes_per_day"] >= 0.8 * before["bytes_per_day"]


def test_utc_shows_every_time_in_utc_and_local_times_name_their_zone(ran_home, monkeypatch):
    """Local times without a zone sat next to UTC backup names."""
    monkeypatch.setenv("TZ", "Europe/Paris")
    time.tzset()
    try:
        local = _invoke({}, "history", "--home", str(ran_home))
        utc = _invoke({}, "--utc", "history", "--home", str(ran_home))
    finally:
        monkeypatch.undo()
        time.tzset()
        units.show_utc(False)
    assert "times CET" in local or "times CEST" in local
    assert "times UTC" in utc


def test_the_database_is_one_size_in_report_history_and_backup(tmp_path):
    """The same state.db was 11.8 MB (report), 11.4 (backup --dry-run: its used pages, called "a
    database") and another figure in history after a run (a scaled estimate of its tables)."""
    demo.build_home(tmp_path, demo.generate(time.time(), sessions=60))
    home = str(tmp_path)
    out = _invoke({}, "backup", "--dry-run", "--home", home)
    assert "a copy without its free pages" in out and "would back up a " not in out
    _invoke({}, "run", "--home", home)
    rep = json.loads(_invoke({}, "report", "--json", "--home", home))["profiles"][0]
    run_row = _invoke({}, "history", "--home", home).splitlines()[-1]
    assert " run " in run_row and f" {units.size(rep['database']['bytes'])} " in run_row
