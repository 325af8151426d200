"""A systemd user timer and service in ``$XDG_CONFIG_HOME/systemd/user`` (``~/.config``).

The service is a oneshot at low CPU and idle I/O priority; the timer is ``Persistent=`` (a run
missed while the machine was off happens at the next boot) with a randomized delay. After
writing them, ``systemctl --user daemon-reload`` and ``enable --now`` the timer where systemctl
is there; otherwise the note says the command to type.

Values are written so they cannot break the unit's format (systemd.syntax(7), systemd.unit(5)):
systemd ends a line at CR as at LF, so every control character (:data:`CONTROL`) in an
``ExecStart=`` word is a C-style escape (``\\x0d``, ``\\u2028``) that systemd turns back into
the character, inside double quotes with ``\\``, ``"``, ``%`` and ``$`` escaped too;
``Description=`` takes no escapes, so it shows them as the same ``\\x0d`` text. A unit file is
UTF-8: a path that is not is refused.
"""

from __future__ import annotations

import getpass
import os
import shutil
import subprocess
import tempfile
from dataclasses import replace
from pathlib import Path

from hermes_keeper.errors import KeeperError
from hermes_keeper.fs import durable_rename
from hermes_keeper.schedule import NAME, Change, Job, Runs, escaped

VIA = "systemd"
RANDOM_DELAY = "15min"
NICE = 10


def unit_dir(env=None) -> Path:
    env = os.environ if env is None else env
    base = env.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "systemd" / "user"


def unit_name(job: Job) -> str:
    return f"{NAME}-{job.label}-{job.key}"


def _utf8(value: str) -> str:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        shown = escaped(value.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace"))
        raise KeeperError(
            f"{shown}: not UTF-8, which a unit file cannot carry (use --via cron or hermes); nothing changed"
        ) from None
    return value


def _exec_arg(arg: str) -> str:
    """One ``ExecStart=`` word: quoted; ``\\`` and ``"``, ``%`` specifiers, ``$`` expansion and
    every control character escaped."""
    arg = _utf8(arg).replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%").replace("$", "$$")
    return f'"{escaped(arg)}"'


def _description(text: str) -> str:
    """A ``Description=`` value: no escapes are read there, so controls are shown as ``\\xNN``
    text, and ``%`` is ``%%`` (specifiers are)."""
    return escaped(_utf8(text)).replace("%", "%%")


def units(job: Job) -> dict[str, str]:
    """File name -> text of the service and the timer."""
    name, what = unit_name(job), _description(f"hermes-keeper run: {job.root} ({job.label})")
    service = (
        f"[Unit]\nDescription={what}\n\n"
        "[Service]\nType=oneshot\n"
        f"ExecStart={' '.join(_exec_arg(a) for a in job.argv(quiet=True))}\n"
        f"Nice={NICE}\nIOSchedulingClass=idle\n"
    )
    timer = (
        f"[Unit]\nDescription={what}, {job.when.every} at {job.when.at}\n\n"
        f"[Timer]\nOnCalendar={job.when.on_calendar()}\nPersistent=true\nRandomizedDelaySec={RANDOM_DELAY}\n"
        f"Unit={name}.service\n\n"
        "[Install]\nWantedBy=timers.target\n"
    )
    return {f"{name}.service": service, f"{name}.timer": timer}


def _systemctl(*args: str) -> str | None:
    """Run ``systemctl --user ...``; the failure as one line, None when it worked."""
    if shutil.which("systemctl") is None:
        return "systemctl not found"
    out = subprocess.run(["systemctl", "--user", *args], capture_output=True, text=True, timeout=60)
    return (
        None if out.returncode == 0 else (out.stderr.strip().splitlines() or [f"exit {out.returncode}"])[-1]
    )


def _write(path: Path, text: str) -> None:
    # Not through HomeFS: a unit lives in the user's ~/.config/systemd/user, outside any Hermes home.
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, 0o644)
        durable_rename(Path(tmp), path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _read(path: Path) -> str | None:
    """A unit file as text; bytes that are not UTF-8 (not the keeper's writing) as ``\\xNN``."""
    try:
        return path.read_bytes().decode("utf-8", "backslashreplace")
    except FileNotFoundError:
        return None


def install(job: Job, dry_run: bool = False) -> list[Change]:
    folder, changes = unit_dir(), []
    for fname, text in units(job).items():
        path = folder / fname
        old = _read(path)
        action = "unchanged" if old == text else "replaced" if old is not None else "installed"
        if action != "unchanged" and not dry_run:
            _write(path, text)
        changes.append(Change(VIA, action, str(path), text))
    timer = f"{unit_name(job)}.timer"
    if not dry_run:
        problem = _systemctl("daemon-reload") or _systemctl("enable", "--now", timer)
        if problem:  # written but not scheduled: a failure, never "installed"
            how = f"systemctl --user daemon-reload && systemctl --user enable --now {timer}"
            raise KeeperError(
                f"systemctl --user refused the timer ({problem}): nothing is scheduled; the units are in "
                f"{folder}; enable them with: {how}"
            )
        changes[-1] = Change(VIA, changes[-1].action, changes[-1].where, changes[-1].text, linger())
    return changes


def linger() -> str:
    """Whether the user's timers run while they are logged out (``loginctl show-user``), said."""
    user = getpass.getuser()
    try:
        out = subprocess.run(
            ["loginctl", "show-user", user, "--property=Linger", "--value"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        said, code = out.stdout.strip(), out.returncode
        why = (out.stderr.strip().splitlines() or [f"exit {code}"])[-1]
    except OSError as exc:
        said, code, why = "", 1, f"loginctl: {exc.strerror}"
    if code == 0 and said == "yes":
        return f"linger on: the timer runs while {user} is logged out too"
    state = "off" if code == 0 else f"not known ({why})"
    return (
        f"linger {state}: the timer runs only while {user} is logged in; "
        f"to run it always: loginctl enable-linger {user}"
    )


def remove(job: Job, dry_run: bool = False) -> list[Change]:
    folder, changes = unit_dir(), []
    timer = f"{unit_name(job)}.timer"
    present = [folder / f for f in units(job) if (folder / f).exists()]
    if present and not dry_run:
        _systemctl("disable", "--now", timer)  # best effort: the files go either way
    for path in present:
        changes.append(Change(VIA, "removed", str(path), _read(path) or ""))
        if not dry_run:
            path.unlink()  # our unit in ~/.config/systemd/user: outside any home, so not through HomeFS
    if present and not dry_run:
        _systemctl("daemon-reload")
    return changes or [Change(VIA, "absent", str(folder / timer), "")]


def _properties(unit: str, *names: str) -> dict[str, str]:
    """``systemctl --user show UNIT`` of these properties ({} where systemctl cannot say)."""
    if shutil.which("systemctl") is None:
        return {}
    out = subprocess.run(
        ["systemctl", "--user", "show", unit, *(f"--property={n}" for n in names)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    lines = out.stdout.splitlines() if out.returncode == 0 else []
    return {k: v for k, _, v in (x.partition("=") for x in lines) if v and v != "n/a"}


def runs(job: Job) -> Runs:
    """The timer's next and last trigger and its service's last result, as systemd says them."""
    name = unit_name(job)
    timer = _properties(f"{name}.timer", "NextElapseUSecRealtime", "LastTriggerUSec")
    service = _properties(f"{name}.service", "Result", "ExecMainStatus")
    result = service.get("Result")
    if result and service.get("ExecMainStatus", "0") != "0":
        result += f", exit {service['ExecMainStatus']}"
    return Runs(timer.get("NextElapseUSecRealtime"), timer.get("LastTriggerUSec"), result)


def show(job: Job) -> list[Change]:
    folder = unit_dir()
    found = [
        Change(VIA, "found", str(folder / f), text)
        for f in units(job)
        if (text := _read(folder / f)) is not None
    ]
    if found:
        found[-1] = replace(found[-1], runs=runs(job))
    return found
