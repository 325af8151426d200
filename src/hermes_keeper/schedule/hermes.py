"""A Hermes cron job with ``no_agent: true``: Hermes runs a keeper script from ``<home>/scripts/``
on schedule and delivers its output (the run's one-line summary, or its failure) to the chat,
spending no tokens.

The job is written by Hermes's own ``cron.jobs`` in Hermes's own Python (``hermes_side.py``), so
it has the format, checks, lock (``cron/.jobs.lock``) and atomic replace of the version
installed, and is never written while Hermes writes the file. Hermes is found as the
``hermes`` command on PATH (or ``--hermes``: that command or its Python).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
from pathlib import Path

from hermes_keeper.errors import KeeperError
from hermes_keeper.fs import HomeFS, durable_rename
from hermes_keeper.schedule import NAME, Change, Job, Runs

VIA = "hermes"
SCRIPT = f"{NAME}.sh"
DELIVER = "origin"
SIDE = Path(__file__).with_name("hermes_side.py")


def hermes_python(hermes: str | os.PathLike | None = None) -> Path:
    """The Python Hermes runs on: ``hermes`` given (the command or a Python), else ``hermes`` on
    PATH; a console script names its Python on its first line."""
    given = hermes or shutil.which("hermes")
    if not given:
        raise KeeperError(
            "Hermes not found on PATH: pass --hermes /path/to/hermes (its command or its Python)"
        )
    path = Path(given).expanduser()
    if not path.is_file():
        raise KeeperError(f"--hermes {path}: not a file")
    if path.name.startswith("python"):
        return path.absolute()
    with path.open("rb") as f:
        first = f.readline(4096).decode("utf-8", "replace").strip()
    words = shlex.split(first[2:]) if first.startswith("#!") else []
    if not words or not Path(words[0]).name.startswith("python"):
        raise KeeperError(f"{path}: not a Hermes command (its first line names no Python); pass its Python")
    return Path(words[0])


def script_text(job: Job) -> str:
    return (
        "#!/bin/bash\n"
        f"# Written by `{NAME} schedule install --via hermes`; a no_agent Hermes cron job runs it\n"
        "# and delivers what it prints: the keeper's one-line summary, or its failure.\n"
        f"exec {shlex.join(job.argv(quiet=False))} 2>&1\n"
    )


def _side(job: Job, op: str, hermes, dry_run: bool, deliver: str = DELIVER) -> dict:
    req = {
        "op": op,
        "script": SCRIPT,
        "schedule": job.when.cron(),
        "name": f"{NAME} run ({job.label})",
        "deliver": deliver,
        "dry_run": dry_run,
    }
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env["HERMES_HOME"] = str(job.profile_home)
    python = hermes_python(hermes)
    try:
        out = subprocess.run(
            [str(python), "-I", str(SIDE), json.dumps(req)],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
    except OSError as exc:
        raise KeeperError(f"cannot run Hermes's Python {python}: {exc.strerror}") from None
    lines = out.stdout.strip().splitlines()
    try:
        result = json.loads(lines[-1])
    except (IndexError, ValueError):
        why = (out.stderr.strip().splitlines() or [f"exit {out.returncode}"])[-1]
        raise KeeperError(f"{python} could not reach Hermes's cron jobs: {why}") from None
    if result.get("error"):
        raise KeeperError(f"{result['hermes']}: {result['error']}")
    return result


def _write_script(job: Job, text: str) -> None:
    fs = HomeFS(job.profile_home)
    tmp = f".{SCRIPT}.tmp"
    fd = fs.open_private("scripts", tmp, flags=os.O_WRONLY | os.O_CREAT | os.O_TRUNC, create_dirs=True)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    durable_rename(fs.path("scripts", tmp), fs.path("scripts", SCRIPT))


def _jobs_file(job: Job) -> str:
    return str(job.profile_home / "cron" / "jobs.json")


def install(job: Job, dry_run: bool = False, hermes=None, deliver: str = DELIVER) -> list[Change]:
    fs = HomeFS(job.profile_home)
    fs.require_home()
    text, script = script_text(job), fs.path("scripts", SCRIPT)
    old = fs.read_bytes("scripts", SCRIPT) if fs.regular("scripts", SCRIPT) else None
    action = "unchanged" if old == text.encode() else "replaced" if old is not None else "installed"
    result = _side(job, "install", hermes, dry_run, deliver)  # before the script: Hermes may refuse
    if action != "unchanged" and not dry_run:
        _write_script(job, text)
    record = json.dumps(result["job"], indent=2, default=str)
    note = f"{result['hermes']}; {'would add' if dry_run else 'added'} by Hermes's own cron.jobs"
    return [
        Change(VIA, action, str(script), text),
        Change(VIA, result["action"], _jobs_file(job), record, note),
    ]


def remove(job: Job, dry_run: bool = False, hermes=None) -> list[Change]:
    fs = HomeFS(job.profile_home)
    result = _side(job, "remove", hermes, dry_run)
    changes = [
        Change(VIA, "removed", _jobs_file(job), json.dumps(j, indent=2, default=str), result["hermes"])
        for j in result["jobs"]
    ]
    if fs.regular("scripts", SCRIPT):
        changes.append(Change(VIA, "removed", str(fs.path("scripts", SCRIPT)), ""))
        if not dry_run:
            fs.unlink("scripts", SCRIPT)
    return changes or [Change(VIA, "absent", _jobs_file(job), "")]


def runs(record: dict) -> Runs:
    """Hermes's own word on a job (its record's ``next_run_at``, ``last_run_at``, ``last_status``)."""
    result = record.get("last_status")
    if result and record.get("last_error"):
        result += f": {record['last_error']}"
    return Runs(record.get("next_run_at"), record.get("last_run_at"), result)


def show(job: Job, hermes=None) -> list[Change]:
    result = _side(job, "show", hermes, True)
    return [
        Change(VIA, "found", _jobs_file(job), json.dumps(j, indent=2, default=str), result["hermes"], runs(j))
        for j in result["jobs"]
    ]
