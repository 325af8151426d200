"""Sizes, durations, ages and counts as people read and write them: one module, one base.

Sizes are decimal (SI) everywhere: ``MB`` is 10^6 bytes, as shown and as read (``500MB`` in
keeper.toml or on the command line); ``MiB`` (2^20) is read too for whoever means it. A
duration is always written with its unit (``7d``, ``12h``): Hermes reads a bare ``7`` as days, a
program as seconds, and the wrong guess prunes everything, so a bare number is refused.
"""

from __future__ import annotations

import math
import re

import humanfriendly
from rich.filesize import decimal

from hermes_keeper.errors import KeeperError

_STEPS = (("d", 86400), ("h", 3600), ("m", 60), ("s", 1))
#: A number and a unit word: what a duration must look like before humanfriendly reads it.
_HAS_UNIT = re.compile(r"\s*[0-9]+(?:\.[0-9]+)?\s*[a-z]+\s*", re.IGNORECASE)


def size(n: float) -> str:
    """``44.0 MB``: decimal units, labelled as such (``rich.filesize``); never negative."""
    return decimal(max(0, int(n)))


def change(n: float) -> str:
    """``+5.7 MB`` / ``-8.1 MB``: a size that went up or down (``0 bytes`` is neither)."""
    return f"{'+' if n > 0 else '-' if n < 0 else ''}{size(abs(n))}"


def duration(seconds: float | None) -> str:
    """``7d``, ``12h``, ``90m``, ``36h``: the largest unit that divides it, as keeper.toml spells it."""
    if seconds is None:
        return "none"
    for unit, n in _STEPS:
        if seconds >= n and seconds % n == 0:
            return f"{seconds / n:g}{unit}"
    return f"{seconds:g}s"


def span(seconds: float, digits: int = 0) -> str:
    """``3m``, ``5h``, ``11d`` in its largest unit: a measured time (an age, time until the disk is
    full). ``digits=1`` (``3.2d``) where a threshold of ``3d`` must read as passed."""
    d = max(0.0, seconds)
    for unit, n in (("d", 86400), ("h", 3600)):
        if d >= n:
            return f"{d / n:.{digits}f}{unit}"
    return f"{d / 60:.{digits}f}m"


def ago(ts: float, now: float, digits: int = 0) -> str:
    """``3m ago``, ``5h ago``, ``11d ago``: the one age format (report, backups, archive, check)."""
    return f"{span(now - ts, digits)} ago"


def plural(n: int, word: str, many: str | None = None) -> str:
    """``1 session``, ``2 sessions``."""
    return f"{n} {word if n == 1 else many or word + 's'}"


def parse_duration(value, where: str = "duration") -> float:
    """Seconds from ``"7d"``, ``"12h"``, ``"30m"``, ``"90s"``, ``"2w"``, ``"7 days"``.

    A bare number (TOML ``7`` or ``"7"``) is refused with the spelling to use instead.
    """
    if (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        or (isinstance(value, str) and re.fullmatch(r"\s*[0-9]+(?:\.[0-9]+)?\s*", value))
    ):
        number = float(value)
        shown = f"{number:g}" if math.isfinite(number) else "7"
        raise KeeperError(f'{where}: a duration needs a unit: write "{shown}d" (or h, m, s, w)')
    if not isinstance(value, str) or not _HAS_UNIT.fullmatch(value):
        raise KeeperError(f"{where}: not a duration: {value!r} (use e.g. 7d, 12h, 30m)")
    try:
        return float(humanfriendly.parse_timespan(value.strip()))
    except humanfriendly.InvalidTimespan:
        raise KeeperError(f"{where}: not a duration: {value!r} (use e.g. 7d, 12h, 30m)") from None


def parse_size(value, where: str = "size") -> int:
    """Bytes from ``"500MB"`` (10^6), ``"2GiB"`` (2^30), or a whole number of bytes."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise KeeperError(f"{where}: not a size: {value!r} (use e.g. 500MB, 2GB)")
    if isinstance(value, (int, float)):
        if not math.isfinite(value):
            raise KeeperError(f"{where}: must be a finite number, got {value!r}")
        return int(value)
    try:
        return int(humanfriendly.parse_size(value.strip()))
    except humanfriendly.InvalidSize:
        raise KeeperError(f"{where}: not a size: {value!r} (use e.g. 500MB, 2GB)") from None
