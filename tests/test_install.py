"""The install path a new user takes (README "Install"): the wheel, installed with its dependencies
into a fresh virtualenv, runs ``hermes-keeper`` from any folder, and the ``next:`` hint it prints
runs as printed."""

from __future__ import annotations

import email.parser
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import jsonschema

import hermes_keeper
from hermes_keeper.cli import main

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "src" / "hermes_keeper"


def test_wheel_carries_every_module_and_data_file_and_builds_without_warnings(built):
    wheel, log = built
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        (meta_name,) = (n for n in names if n.endswith(".dist-info/METADATA"))
        meta = email.parser.Parser().parsestr(zf.read(meta_name).decode())
    shipped = {n for n in names if n.startswith("hermes_keeper/")}
    tree = {
        f"hermes_keeper/{p.relative_to(PACKAGE).as_posix()}"
        for p in PACKAGE.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }
    assert shipped == tree
    assert {"hermes_keeper/data/hermes_schema.sql", "hermes_keeper/schemas/report.json"} <= shipped
    assert "SetuptoolsDeprecationWarning" not in log and "SetuptoolsWarning" not in log
    # The version a release carries: the package's, the wheel's and the CHANGELOG's newest entry.
    newest = re.search(r"^## (\d+\.\d+\.\d+) - \d{4}-\d{2}-\d{2}$", (ROOT / "CHANGELOG.md").read_text(), re.M)
    assert meta["Version"] == hermes_keeper.__version__ == newest.group(1)
    # The README promises the Python the wheel asks for.
    minimum = re.fullmatch(r">=(\d+\.\d+)", meta["Requires-Python"]).group(1)
    assert f"Python {minimum}+" in (ROOT / "README.md").read_text()


def test_installed_keeper_runs_from_anywhere_and_its_hint_runs_as_printed(built, tmp_path):
    wheel, _ = built
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    # With its dependencies, from the index pip uses here: what `pipx install` / `pip install` do.
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", str(wheel)], check=True)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env['PATH']}"  # as pipx's ~/.local/bin is
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    assert shutil.which("hermes-keeper", path=env["PATH"]) == str(venv / "bin" / "hermes-keeper")

    def sh(*argv: str) -> str:
        res = subprocess.run(argv, cwd=elsewhere, env=env, capture_output=True, text=True, timeout=120)
        assert res.returncode == 0, (argv, res.stderr)
        return res.stdout

    installed = Path(sh("python", "-c", "import hermes_keeper; print(hermes_keeper.__file__)").strip())
    assert installed.is_relative_to(venv) and not installed.is_relative_to(ROOT)
    helped = sh("hermes-keeper", "--help")
    assert all(re.search(rf"^  {name}\b", helped, re.M) for name in main.commands)

    home = tmp_path / "my demo home"  # a space: the hint must paste as is
    demo = sh("hermes-keeper", "demo", str(home)).splitlines()
    assert demo[0] == f"demo home: {home}" and (home / "state.db").is_file()
    (hint,) = (line.removeprefix("next: ") for line in demo if line.startswith("next: "))
    assert shlex.split(hint) == ["hermes-keeper", "plan", "--home", str(home)]
    assert "after:" in sh(*shlex.split(hint))

    report = json.loads(sh("hermes-keeper", "report", "--home", str(home), "--json"))
    schema = json.loads((installed.parent / "schemas" / "report.json").read_text())
    jsonschema.validate(report, schema)
    sh("hermes-keeper", "run", "--home", str(home), "--quiet")
    archived = json.loads(sh("hermes-keeper", "archive", "list", "--home", str(home), "--json"))
    assert archived["command"] == "archive list" and archived["profiles"][0]["sessions"]
