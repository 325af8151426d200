"""Sizes, durations, ages and counts as people read and write them: one module, one base.

Sizes are decimal (SI) everywhere: ``MB`` is 10^6 bytes, as shown and as read (``500MB`` in
keeper.toml or on the command line); ``MiB`` (2^20) is read too for whoever means it. A
duration is always written with its unit (``7d``, ``12h``): Hermes reads a bare ``7`` as days, a
program as seconds, and the wrong guess prunes everything, so a bare number is refused; a size
too (``500``: bytes or megabytes?). Shown, every unit follows its number without a space
(``48ms``, ``1.8s``, ``3m``, ``37d``), every time names its zone.
"""

from __future__ import annotations

import math
import re
import time

import humanfriendly
from rich.filesize import decimal

from hermes_keeper.errors import KeeperError

_STEPS = (("d", 86400), ("h", 3600), ("m", 60), ("s", 1))
#: A number and a unit word: what a duration must look like before humanfriendly reads it.
_HAS_UNIT = re.compile(r"\s*[0-9]+(?:\.[0-9]+)?\s*[a-z]+\s*", re.IGNORECASE)


def size(n: float) -> str:
    """``44.0 MB``: decimal units, labelled as such (``rich.filesize``); never negative."""
    return decimal(max(0, int(n)))


def duration(seconds: float | None) -> str:
    """``7d``, ``12h``, ``90m``, ``36h``: the largest unit that divides it, as keeper.toml spells it."""
    if seconds is None:
        return "none"
    for unit, n in _STEPS:
        if seconds >= n and seconds % n == 0:
            return f"{seconds / n:g}{unit}"
    return f"{seconds:g}s"


def span(seconds: float, digits: int = 0) -> str:
    """``40s``, ``3m``, ``5h``, ``11d`` in its largest unit: a measured time (an age, an idle
    time, time until the disk is full). ``digits=1`` (``3.2d``) where a threshold of ``3d`` must
    read as passed; minutes and seconds are always whole (``0m``, ``1.1m`` say nothing more)."""
    d = max(0.0, seconds)
    for unit, n in (("d", 86400), ("h", 3600)):
        if d >= n:
            return f"{d / n:.{digits}f}{unit}"
    return f"{d / 60:.0f}m" if d >= 60 else f"{d:.0f}s"


def took(seconds: float) -> str:
    """``48ms``, ``1.8s``, ``12s``, ``3m``: how long a step took (or may stall), in the same
    unit letters as :func:`duration` and :func:`span`, never a space before them."""
    if seconds < 1:
        return f"{seconds * 1000:.0f}ms"
    return f"{seconds:.1f}s" if seconds < 10 else span(seconds, 1 if seconds >= 3600 else 0)


#: ``--utc`` (or a library caller) shows every time in UTC, as backup names are.
_UTC = {"on": False}


def show_utc(on: bool) -> None:
    """Every :func:`when` after this in UTC (``--utc``), else in the local zone."""
    _UTC["on"] = on


def when(ts: float, seconds: bool = False, zone: bool = True) -> str:
    """``2026-12-06 04:14 CET``: a point in time with its zone (the local one, or UTC under
    ``--utc``), beside backup names that are UTC. ``zone=False`` in a column whose header names
    it (:func:`zone`)."""
    fmt = "%Y-%m-%d %H:%M" + (":%S" if seconds else "")
    shown = time.strftime(fmt, time.gmtime(ts) if _UTC["on"] else time.localtime(ts))
    return f"{shown} {zone_of(ts)}" if zone else shown


def zone_of(ts: float | None = None) -> str:
    """The zone :func:`when` shows times in: ``UTC``, or the local one's name (``CET``)."""
    return "UTC" if _UTC["on"] else time.strftime("%Z", time.localtime(ts))


def ago(ts: float, now: float, digits: int = 0) -> str:
    """``3m ago``, ``5h ago``, ``11d ago``: the one age format (report, backups, archive, check)."""
    return f"{span(now - ts, digits)} ago"


def plural(n: int, word: str, many: str | None = None) -> str:
    """``1 session``, ``2 sessions``: every count a sentence or a title says."""
    return f"{n} {word if n == 1 else many or word + 's'}"


def parse_duration(value, where: str = "duration") -> float:
    """Seconds from ``"7d"``, ``"12h"``, ``"30m"``, ``"90s"``, ``"2w"``, ``"7 days"``.

    A bare number (TOML ``7`` or ``"7"``) is refused with the spelling to use instead.
    """
    number = _bare_number(value)
    if number is not None:
        shown = f"{number:g}" if math.isfinite(number) else "7"
        raise KeeperError(f'{where}: a duration needs a unit: write "{shown}d" (or h, m, s, w)')
    if not isinstance(value, str) or not _HAS_UNIT.fullmatch(value):
        raise KeeperError(f"{where}: not a duration: {value!r} (use e.g. 7d, 12h, 30m)")
    try:
        return float(humanfriendly.parse_timespan(value.strip()))
    except humanfriendly.InvalidTimespan:
        raise KeeperError(f"{where}: not a duration: {value!r} (use e.g. 7d, 12h, 30m)") from None


def _bare_number(value) -> float | None:
    """``7``, ``7.5`` or ``"7"``: a number written without its unit (None: not one)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str) and re.fullmatch(r"\s*[0-9]+(?:\.[0-9]+)?\s*", value):
        return float(value)
    return None


def parse_size(value, where: str = "size") -> int:
    """Bytes from ``"500MB"`` (10^6), ``"2GiB"`` (2^30), ``"500B"``.

    A bare number (``500``: bytes? megabytes?) is refused with the spelling to use instead, as a
    bare duration is: ``--keep-size 500`` meant 500 MB, not 500 bytes.
    """
    number = _bare_number(value)
    if number is not None:
        shown = f"{number:g}" if math.isfinite(number) else "500"
        raise KeeperError(f'{where}: a size needs a unit: write "{shown}MB" (or B, kB, GB, MiB, GiB)')
    if not isinstance(value, str):
        raise KeeperError(f"{where}: not a size: {value!r} (use e.g. 500MB, 2GB)")
    try:
        return int(humanfriendly.parse_size(value.strip()))
    except humanfriendly.InvalidSize:
        raise KeeperError(f"{where}: not a size: {value!r} (use e.g. 500MB, 2GB)") from None
