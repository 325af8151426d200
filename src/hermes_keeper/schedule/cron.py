"""A crontab line, read and written with ``crontab -l`` / ``crontab -`` (the user's own crontab).

The line ends in a shell comment that tags it with the job's key: ``install`` replaces that
line (or leaves it when equal), ``remove`` drops it, and no other line is touched.

The crontab is handled as bytes and split at ``\\n`` only, as cron reads it: the user's lines
go back byte for byte (carriage returns, form feeds, text that is not UTF-8 included), and a
line an older keeper wrote with a carriage return in it is still one line, found and removed
whole. The keeper's own line never holds a control character (:data:`CONTROL`) or ``%``: a
value with one is refused before anything is read or written.
"""

from __future__ import annotations

import datetime
import shlex
import subprocess

from hermes_keeper.errors import KeeperError
from hermes_keeper.schedule import CONTROL, NAME, Change, Job, Runs, escaped

VIA = "cron"
TAG = f"# {NAME}:"
_TAG = TAG.encode()


def line(job: Job) -> str:
    for value in job.argv(quiet=True):
        if "%" in value:  # cron turns % into a newline
            raise KeeperError(
                f"{escaped(value)}: holds '%', which a crontab line cannot carry; nothing changed"
            )
        if found := CONTROL.search(value):
            raise KeeperError(
                f"{escaped(value)}: holds the control character {escaped(found[0])}, which a crontab "
                "line cannot carry (use --via hermes, or a home path without it); nothing changed"
            )
    return f"{job.when.cron()} {shlex.join(job.argv(quiet=True))} {TAG}{job.key} {job.label} {job.root}"


def _bytes(text: str) -> bytes:
    """The line as cron gets it: a path that is not UTF-8 as its own bytes."""
    return text.encode("utf-8", "surrogateescape") + b"\n"


def _text(raw: bytes) -> str:
    """A crontab line as text to show: bytes that are not UTF-8 as ``\\xNN``."""
    return raw.rstrip(b"\n").decode("utf-8", "backslashreplace")


def _crontab(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(["crontab", *args], input=stdin, capture_output=True, timeout=30)
    except FileNotFoundError:
        raise KeeperError("crontab not found on PATH: install cron, or use --via systemd") from None


def _said(out: subprocess.CompletedProcess) -> str:
    return escaped(out.stderr.decode("utf-8", "replace").strip()) or str(out.returncode)


def read(dry_run: bool = False) -> list[bytes]:
    """The crontab's lines, each with its ``\\n`` (the last may have none); a dry run on a machine
    without ``crontab`` reads it as empty."""
    try:
        out = _crontab("-l")
    except KeeperError:
        if dry_run:
            return []
        raise
    if out.returncode != 0:
        if b"no crontab" in out.stderr.lower():
            return []
        raise KeeperError(f"crontab -l failed: {_said(out)}")
    *whole, last = out.stdout.split(b"\n")
    return [x + b"\n" for x in whole] + ([last] if last else [])


def _write(lines: list[bytes]) -> None:
    # a last line without its newline gets one: another line may follow it now, and cron
    # needs it to read the line at all
    out = _crontab("-", stdin=b"".join(x if x.endswith(b"\n") else x + b"\n" for x in lines))
    if out.returncode != 0:
        raise KeeperError(f"crontab - failed: {_said(out)}; crontab unchanged")


def _ours(raw: bytes, key: str | None = None) -> bool:
    tag = raw.rstrip(b"\n").rpartition(_TAG)[2]
    return _TAG in raw and (key is None or tag.split(b" ", 1)[0] == key.encode())


def install(job: Job, dry_run: bool = False) -> list[Change]:
    new = _bytes(line(job))
    lines = read(dry_run)
    old = [x for x in lines if _ours(x, job.key)]
    if old == [new]:
        return [Change(VIA, "unchanged", "crontab", _text(new))]
    if not dry_run:
        _write([x for x in lines if not _ours(x, job.key)] + [new])
    return [Change(VIA, "replaced" if old else "installed", "crontab", _text(new))]


def remove(job: Job, dry_run: bool = False) -> list[Change]:
    lines = read(dry_run)
    old = [x for x in lines if _ours(x, job.key)]
    if old and not dry_run:
        _write([x for x in lines if not _ours(x, job.key)])
    return [Change(VIA, "removed", "crontab", _text(x)) for x in old] or [
        Change(VIA, "absent", "crontab", "")
    ]


def next_run(fields: list[str], now: datetime.datetime) -> str | None:
    """When cron runs a line of these five fields next (local time), for the forms ``install``
    writes (minute, hour, day of month ``*`` or N, any month, weekday ``*`` or N); None for others."""
    try:
        minute, hour, day, month, weekday = fields
        at = now.replace(hour=int(hour), minute=int(minute), second=0, microsecond=0)
    except ValueError:
        return None
    if month != "*" or not all(f == "*" or f.isdigit() for f in (day, weekday)):
        return None
    for n in range(32 * 7):  # a monthly line's next 1st, whatever its weekday asks, is within it
        t = at + datetime.timedelta(days=n)
        if t > now and day in ("*", str(t.day)) and weekday in ("*", str(t.isoweekday() % 7)):
            return t.strftime("%Y-%m-%d %H:%M")
    return None


def show(job: Job) -> list[Change]:
    now = datetime.datetime.now()
    return [
        Change(VIA, "found", "crontab", _text(x), runs=Runs(next=next_run(_text(x).split()[:5], now)))
        for x in read()
        if _ours(x, job.key)
    ]
