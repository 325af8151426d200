"""``adopt`` and the config.yaml reader: the change is exact, comments survive, bad files refused."""

from __future__ import annotations

import os
import time

from click.testing import CliRunner

from hermes_keeper import demo
from hermes_keeper.cli import main
from hermes_keeper.hermes_config import read_auto_prune


def _home(tmp_path):
    demo.build_home(tmp_path, demo.generate(time.time(), sessions=20))
    return tmp_path


def test_defaults_follow_the_schema_generation(tmp_path):
    assert not read_auto_prune(tmp_path, 22).enabled  # hermes-agent 0.19.0: opt-in
    on = read_auto_prune(tmp_path, 31)
    assert on.enabled and on.retention_days == 90 and on.origin == "Hermes's default for schema 31"
    (tmp_path / "config.yaml").write_text("sessions: {auto_prune: true, retention_days: 14}\n")
    conf = read_auto_prune(tmp_path, 22, last_run=1000.0)
    assert conf.enabled and conf.retention_days == 14 and conf.next_run(now=2000.0) == 1000.0 + 86400
    (tmp_path / "config.yaml").write_text("sessions: [unclosed\n")
    assert read_auto_prune(tmp_path, 31).origin.startswith("config.yaml unreadable")


def test_adopt_creates_a_private_config_when_there_is_none(tmp_path):
    home = _home(tmp_path)
    res = CliRunner().invoke(main, ["adopt", "--home", str(home), "--yes"])
    assert res.exit_code == 0, res.output
    assert (home / "config.yaml").read_text().startswith("sessions:\n  auto_prune: false  #")
    assert os.stat(home / "config.yaml").st_mode & 0o777 == 0o600


def test_adopt_without_yes_and_without_a_terminal_changes_nothing(tmp_path):
    home = _home(tmp_path)
    (home / "config.yaml").write_text("sessions:\n  auto_prune: true\n")
    os.chmod(home / "config.yaml", 0o640)
    res = CliRunner().invoke(main, ["adopt", "--home", str(home)])
    assert res.exit_code == 0 and "-  auto_prune: true" in res.output and "nothing changed" in res.output
    assert (home / "config.yaml").read_text() == "sessions:\n  auto_prune: true\n"
    CliRunner().invoke(main, ["adopt", "--home", str(home), "--yes"])
    assert os.stat(home / "config.yaml").st_mode & 0o777 == 0o640  # its mode kept


def test_adopt_refuses_a_config_it_cannot_edit_safely(tmp_path):
    home = _home(tmp_path)
    for text in ("sessions: [unclosed\n", "- a list\n", "sessions: 3\n"):
        (home / "config.yaml").write_text(text)
        res = CliRunner().invoke(main, ["adopt", "--home", str(home), "--yes"])
        assert res.exit_code == 2 and len(res.output.strip().splitlines()) == 1, res.output
        assert (home / "config.yaml").read_text() == text
    (home / "config.yaml").unlink()
    (tmp_path / "dotfiles.yaml").write_text("sessions:\n  auto_prune: true\n")
    (home / "config.yaml").symlink_to(tmp_path / "dotfiles.yaml")
    res = CliRunner().invoke(main, ["adopt", "--home", str(home), "--yes"])
    assert res.exit_code == 2 and "symlink" in res.output
    assert (home / "config.yaml").is_symlink() and "true" in (tmp_path / "dotfiles.yaml").read_text()
