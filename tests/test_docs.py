"""The README's policy example is a real keeper.toml, and its values are the defaults it claims."""

from __future__ import annotations

import re
from dataclasses import asdict
from pathlib import Path

from hermes_keeper.model.policy import Policy, effective_policy, settings_table
from hermes_keeper.run import reasons as why

ROOT = Path(__file__).resolve().parent.parent


def _readme_policy_block() -> str:
    text = (ROOT / "README.md").read_text()
    section = text[text.index("### Policy") :]
    return re.search(r"```toml\n(.*?)```", section, re.S).group(1)


def test_readme_policy_example_loads_and_shows_the_defaults(tmp_path):
    (tmp_path / "keeper.toml").write_text(_readme_policy_block())
    shown = effective_policy(tmp_path, "default")
    work = effective_policy(tmp_path, "work")
    defaults = asdict(Policy())
    for key in ("zombie_after_s", "keep_titled", "archive", "backup", "compact", "budget_ms", "pause_ms"):
        assert getattr(shown, key) == defaults[key], key
    assert shown.retention_s == defaults["retention_s"]
    assert shown.files_max_age_s == defaults["files_max_age_s"]
    for key in ("cron_output_age_s", "cron_output_keep", "state_snapshots_keep", "malformed_copies_age_s"):
        assert getattr(shown, key) == defaults[key], key
    assert (
        (shown.restore_copies_keep, shown.keeper_leftovers)
        == (1, True)
        == (
            defaults["restore_copies_keep"],
            defaults["keeper_leftovers"],
        )
    )
    assert shown.restored_keep_s == defaults["restored_keep_s"] and shown.rotation == Policy().rotation
    # The optional disk budget is an example, and the profile override applies to that profile only.
    assert shown.max_db_bytes == 2 * 10**9 and defaults["max_db_bytes"] is None
    assert work.retention_s["cron"] == 3 * 86400 != shown.retention_s["cron"]


def test_reliability_matrix_names_real_tests():
    """Every ``tests/x.py::name`` in docs/reliability.md is a test function in that file."""
    refs = re.findall(r"`(tests/\w+\.py)::(\w+)`", (ROOT / "docs" / "reliability.md").read_text())
    assert len(refs) >= 20
    missing = [f"{f}::{n}" for f, n in refs if f"def {n}(" not in (ROOT / f).read_text()]
    assert not missing


def test_every_decision_code_is_explained_in_docs_run_md():
    """run/reasons.py is the list of codes (docs/json.md); docs/run.md explains each a decision carries."""
    source = (ROOT / "src" / "hermes_keeper" / "run" / "reasons.py").read_text()
    zombie_only = {why.GATEWAY_KEY.code, why.PINNED_CHAIN.code, why.HEARTBEAT.code}
    codes = set(re.findall(r'Reason\(\s*"(\w+)"', source)) - zombie_only
    assert len(codes) > 15
    text = (ROOT / "docs" / "run.md").read_text()
    assert [c for c in sorted(codes) if f"`{c}`" not in text] == []


def test_docs_policy_table_is_the_settings_table():
    """docs/run.md shows SETTINGS itself: a key added, renamed or re-ranged there must show here."""
    text = (ROOT / "docs" / "run.md").read_text()
    start = text.index("| key | type | default | range | meaning |")
    assert text[start : text.index("\n\n", start) + 1] == settings_table()


def _commands(group=None, path=()):
    """Every command the CLI has, groups' subcommands included, as (words, command)."""
    import click

    from hermes_keeper.cli import main

    group = group or main
    ctx = click.Context(group)
    for name in group.list_commands(ctx):
        cmd = group.get_command(ctx, name)
        yield (*path, name), cmd
        if isinstance(cmd, click.Group):
            yield from _commands(cmd, (*path, name))


def test_every_command_help_has_an_example_and_typed_metavars():
    """`--help` of every command ends with Examples: that run the command itself, and no
    option shows click's TEXT/INTEGER where a DURATION, SIZE, ID, N or NAME is meant."""
    from click.testing import CliRunner

    from hermes_keeper.cli import main

    commands = list(_commands())
    assert len(commands) >= 17
    for words, _cmd in commands:
        text = CliRunner().invoke(main, [*words, "--help"]).output
        examples = text[text.index("Examples:") :] if "Examples:" in text else ""
        assert f"hermes-keeper {' '.join(words)}" in examples, words
        options = text[text.index("Options:") :].split("\n\n")[0]
        if "Commands:" in text:  # no cut-off command summary
            assert not re.search(r"\.\.\.$", text.split("Commands:")[1].split("Examples:")[0], re.M), words
        assert "INTEGER" not in options and "TEXT" not in options.replace("--title TEXT", ""), words
