"""A crontab line, read and written with ``crontab -l`` / ``crontab -`` (the user's own crontab).

The line ends in a shell comment that tags it with the job's key: ``install`` replaces that
line (or leaves it when equal), ``remove`` drops it, and no other line is touched.
"""

from __future__ import annotations

import shlex
import subprocess

from hermes_keeper.errors import KeeperError
from hermes_keeper.schedule import NAME, Change, Job

VIA = "cron"
TAG = f"# {NAME}:"


def line(job: Job) -> str:
    text = f"{job.when.cron()} {shlex.join(job.argv(quiet=True))} {TAG}{job.key} {job.label} {job.root}"
    if "%" in text or "\n" in text:  # cron turns % into a newline
        raise KeeperError(f"a path holds '%' or a newline, which a crontab line cannot carry: {text!r}")
    return text


def _crontab(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(["crontab", *args], input=stdin, capture_output=True, text=True, timeout=30)
    except FileNotFoundError:
        raise KeeperError("crontab not found on PATH: install cron, or use --via systemd") from None


def read(dry_run: bool = False) -> list[str]:
    """The crontab's lines; a dry run on a machine without ``crontab`` reads it as empty."""
    try:
        out = _crontab("-l")
    except KeeperError:
        if dry_run:
            return []
        raise
    if out.returncode != 0:
        if "no crontab" in out.stderr.lower():
            return []
        raise KeeperError(f"crontab -l failed: {out.stderr.strip() or out.returncode}")
    return out.stdout.splitlines()


def _write(lines: list[str]) -> None:
    out = _crontab("-", stdin="".join(f"{x}\n" for x in lines))
    if out.returncode != 0:
        raise KeeperError(f"crontab - failed: {out.stderr.strip() or out.returncode}; crontab unchanged")


def _ours(text: str, key: str | None = None) -> bool:
    tag = text.rpartition(TAG)[2]
    return TAG in text and (key is None or tag.split(" ", 1)[0] == key)


def install(job: Job, dry_run: bool = False) -> list[Change]:
    new, lines = line(job), read(dry_run)
    old = [x for x in lines if _ours(x, job.key)]
    if old == [new]:
        return [Change(VIA, "unchanged", "crontab", new)]
    if not dry_run:
        _write([x for x in lines if not _ours(x, job.key)] + [new])
    return [Change(VIA, "replaced" if old else "installed", "crontab", new)]


def remove(job: Job, dry_run: bool = False) -> list[Change]:
    lines = read(dry_run)
    old = [x for x in lines if _ours(x, job.key)]
    if old and not dry_run:
        _write([x for x in lines if not _ours(x, job.key)])
    return [Change(VIA, "removed", "crontab", x) for x in old] or [Change(VIA, "absent", "crontab", "")]


def show(job: Job) -> list[Change]:
    return [Change(VIA, "found", "crontab", x) for x in read() if _ours(x, job.key)]
