"""``contrib/ansible``: the role run for real by ``ansible-core`` (``-c local``) on this machine,
with a temporary HOME, pipx home and Hermes home: pipx installs the keeper's wheel, keeper.toml is
written and checked, Hermes's auto-prune is turned off, the nightly run is scheduled (cron, through a
fake ``crontab`` that keeps the table in a file); a second play changes nothing."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from hermes_keeper import demo
from tests.test_schedule import FAKE_CRONTAB

ROLE = Path(__file__).resolve().parent.parent / "contrib" / "ansible"
BIN = Path(sys.executable).parent


@pytest.fixture
def host(tmp_path, built):
    """A user's machine: HOME, a Hermes home with two profiles, pipx and a crontab of its own."""
    home = tmp_path / "user"
    hermes = home / ".hermes"
    demo.build_home(hermes, demo.generate(time.time(), sessions=30))
    demo.build_home(hermes / "profiles" / "work", demo.generate(time.time(), sessions=10, seed=3))
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    (fake_bin / "crontab").write_text(FAKE_CRONTAB)
    (fake_bin / "crontab").chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV", "PIPX_"))}
    env |= {
        "HOME": str(home),
        "PATH": f"{fake_bin}:{BIN}:{env['PATH']}",  # ansible-playbook and pipx from our venv
        "PIPX_HOME": str(tmp_path / "pipx"),
        "PIPX_BIN_DIR": str(home / ".local" / "bin"),
        "FAKE_CRONTAB": str(tmp_path / "crontab.txt"),
        "ANSIBLE_LOCAL_TEMP": str(tmp_path / "ansible-tmp"),
        "ANSIBLE_HOME": str(tmp_path / "ansible"),
    }
    playbook = tmp_path / "play.yml"
    variables = {
        "hermes_keeper_package": str(built[0]),
        "hermes_keeper_python": sys.executable,
        "hermes_keeper_home": str(hermes),
        "hermes_keeper_schedule_via": "cron",
        "hermes_keeper_schedule_at": "04:15",
        "hermes_keeper_config": {
            "retention": {"default": "30d", "cron": "3d"},
            "disk": {"max_db_bytes": "2GB"},
        },
    }
    play = [{"hosts": "localhost", "gather_facts": True, "vars": variables, "roles": ["hermes_keeper"]}]
    with playbook.open("w") as f:
        YAML().dump(play, f)
    return {"env": env, "hermes": hermes, "home": home, "playbook": playbook, "tmp": tmp_path}


def play(host) -> dict:
    """One ``ansible-playbook`` run; the per-host recap (ok, changed, failed...)."""
    done = subprocess.run(
        ["ansible-playbook", "-c", "local", "-i", "localhost,", str(host["playbook"])],
        env=host["env"]
        | {
            "ANSIBLE_ROLES_PATH": str(ROLE / "roles"),
            "ANSIBLE_NOCOLOR": "1",
            "ANSIBLE_PYTHON_INTERPRETER": sys.executable,
        },
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    (recap,) = re.findall(r"^localhost\s*:\s*(.*)$", done.stdout, re.M)
    return {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", recap)}


def test_the_role_installs_configures_adopts_and_schedules_and_a_second_play_changes_nothing(host):
    first = play(host)
    assert first["failed"] == 0 and first["changed"] >= 4  # install, keeper.toml, adopt, schedule

    keeper = host["home"] / ".local" / "bin" / "hermes-keeper"
    assert keeper.is_file()
    toml = host["hermes"] / "keeper.toml"
    assert toml.stat().st_mode & 0o777 == 0o600
    shown = subprocess.run(
        [str(keeper), "config", "show", "--home", str(host["hermes"]), "--json"],
        env=host["env"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert '"30d"' in shown.stdout or "2592000" in shown.stdout
    for config in (host["hermes"] / "config.yaml", host["hermes"] / "profiles" / "work" / "config.yaml"):
        assert re.search(r"^\s*auto_prune: false", config.read_text(), re.M), config

    (line,) = [x for x in Path(host["env"]["FAKE_CRONTAB"]).read_text().splitlines() if "hermes-keeper" in x]
    fields = shlex.split(line.split(" #", 1)[0])
    # The full path pipx installed (cron starts with a short PATH), every profile, at 04:15.
    assert fields[:5] == ["15", "4", "*", "*", "*"] and fields[5] == str(keeper)
    assert fields[6] == "run" and "--all-profiles" in fields

    # What cron would run works, with the installed keeper.
    ran = subprocess.run(fields[5:], env=host["env"], capture_output=True, text=True, timeout=300)
    assert ran.returncode == 0, ran.stderr

    second = play(host)
    assert second["failed"] == 0 and second["changed"] == 0
