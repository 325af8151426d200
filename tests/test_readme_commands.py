"""The commands the README and the docs show are commands that run, as a user would type them.

Every ``hermes-keeper ...`` line of a ``sh`` block is parsed by the CLI itself (options, choices,
arguments; a synopsis line with ``[...]`` is left out), so a renamed option or command cannot
stay in the docs. The README's own first block is then run for real on a demo home, with only
its paths moved into the test's folder.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import click
import pytest

from hermes_keeper.cli import main

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def sh_lines(path: Path) -> list[str]:
    """The ``hermes-keeper`` lines of the file's ``sh`` blocks, comments dropped."""
    out = []
    for block in re.findall(r"^```sh\n(.*?)^```", path.read_text(), re.S | re.M):
        for line in block.splitlines():
            words = shlex.split(line, comments=True)
            if words[:1] == ["hermes-keeper"]:
                out.append(shlex.join(words))
    return out


def parse(words: list[str]) -> click.Context:
    """What the CLI makes of ``words`` (after ``hermes-keeper``) without running it."""
    ctx = main.make_context("hermes-keeper", list(words))
    cmd: click.Command = main
    while isinstance(cmd, click.Group):
        name, cmd, rest = cmd.resolve_command(ctx, ctx._protected_args + ctx.args)
        ctx = cmd.make_context(name, rest, parent=ctx)
    return ctx


DOCUMENTED = [(p.name, line) for p in DOCS for line in sh_lines(p) if "[" not in line]


def test_the_docs_show_commands():
    assert len(DOCUMENTED) >= 30
    assert {name for name, _ in DOCUMENTED} >= {"README.md", "archive.md", "schedule.md", "monitoring.md"}


@pytest.mark.parametrize(("doc", "line"), DOCUMENTED, ids=[f"{d}: {c}" for d, c in DOCUMENTED])
def test_every_documented_command_parses(doc, line):
    ctx = parse(shlex.split(line)[1:])
    assert ctx.command.callback is not None, line


def test_the_readme_first_block_runs_on_a_demo_home(tmp_path, hermes):
    """`hermes-keeper demo`, then every command the README's Install and Unattended blocks show,
    as typed, on that home (paths moved into tmp_path; a scheduler is only shown, --dry-run),
    with a real Hermes on PATH as a Hermes user has it (`schedule install` asks it for the job)."""
    env = {**os.environ, "PATH": f"{hermes.python.parent}{os.pathsep}{os.environ['PATH']}"}
    home = tmp_path / "demo"
    textfile = tmp_path / "hermes_keeper.prom"
    lines = [
        line.replace("/tmp/demo", str(home)).replace(
            "/var/lib/node_exporter/textfile_collector/hermes_keeper.prom", str(textfile)
        )
        for line in sh_lines(ROOT / "README.md")
    ]
    assert lines[0] == f"hermes-keeper demo {home}" and len(lines) >= 5
    env_home = ["--home", str(home)]
    for line in lines:
        words = shlex.split(line)[1:]
        if words[0] == "schedule":
            words.append("--dry-run")  # shown, not installed into this machine's scheduler
        args = [sys.executable, "-m", "hermes_keeper", *words] + ([] if words[0] == "demo" else env_home)
        res = subprocess.run(args, capture_output=True, text=True, timeout=300, env=env)
        # check is a Nagios plugin: the demo home's runaways are CRITICAL (2) until a run prunes them
        assert res.returncode in ((0, 1, 2) if words[0] == "check" else (0,)), (line, res.stderr)
        assert "Traceback" not in res.stderr, line
    assert textfile.stat().st_size > 0 and (home / "keeper" / "journal.jsonl").is_file()


@pytest.mark.parametrize("after_a_run", [False, True], ids=["never run", "after a run"])
def test_the_readme_python_example_runs_as_written(tmp_path, after_a_run):
    """The README's Python block, on a demo home (never run, and after a run): only the home moved."""
    home = tmp_path / "demo"
    subprocess.run(
        [sys.executable, "-m", "hermes_keeper", "demo", str(home)], check=True, capture_output=True
    )
    if after_a_run:
        subprocess.run(
            [sys.executable, "-m", "hermes_keeper", "run", "--home", str(home), "--quiet"], check=True
        )
    (block,) = re.findall(r"^```python\n(.*?)^```", (ROOT / "README.md").read_text(), re.S | re.M)
    assert 'Home("~/.hermes")' in block and "Home()" in block
    code = block.replace('Home("~/.hermes")', "Home(HOME)").replace("Home()", "Home(HOME)")
    res = subprocess.run(
        [sys.executable, "-c", f"HOME = {str(home)!r}\n{code}"], capture_output=True, text=True
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("default ")  # the loop's line: the profile and its backup
