"""``hermes-keeper schedule``: run the keeper unattended, by Hermes's own cron, systemd or cron.

One :class:`Job` says what runs (the keeper by its absolute path, ``run`` on one home and
profile made explicit) and when (:class:`When`); each way of scheduling it (``hermes``,
``systemd``, ``cron``) turns the job into its own text, finds its earlier install by a tag
derived from the home and profile (so ``install`` is idempotent and ``remove`` exact), and
says each :class:`Change` it made or, with ``dry_run``, would make, with the exact text.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from hermes_keeper.errors import KeeperError

VIAS = ("hermes", "systemd", "cron")
EVERY = ("daily", "weekly", "monthly")
DEFAULT_AT = "03:30"
#: What scheduled jobs, units and lines are called and tagged with.
NAME = "hermes-keeper"
#: What no crontab line or unit file carries raw: the C0 controls (CR ends a line in a unit file;
#: CR, form feed, vertical tab and more end one for Python's ``splitlines``), DEL, and the
#: Unicode line ends U+0085, U+2028 and U+2029 (``splitlines`` again, and some editors).
CONTROL = re.compile("[\x00-\x1f\x7f\x85\u2028\u2029]")


def escaped(text: str) -> str:
    """``text`` with each :data:`CONTROL` character as ``\\xNN`` (ASCII) or ``\\uNNNN``: the
    C-style escapes systemd's ``ExecStart=`` reads back, and a one-line, readable message."""
    return CONTROL.sub(lambda m: f"\\x{ord(m[0]):02x}" if ord(m[0]) < 0x80 else f"\\u{ord(m[0]):04x}", text)


@dataclass(frozen=True)
class When:
    """Daily at ``at``; weekly on Sundays; monthly on the 1st (local time of the scheduler)."""

    every: str = "daily"
    at: str = DEFAULT_AT

    def __post_init__(self) -> None:
        if self.every not in EVERY:
            raise KeeperError(f"--every {self.every!r}: choose one of {', '.join(EVERY)}")
        m = re.fullmatch(r"([01]?[0-9]|2[0-3]):([0-5][0-9])", self.at)
        if not m:
            raise KeeperError(f"--at {self.at!r}: expected HH:MM, 24-hour clock (e.g. 03:30)")
        object.__setattr__(self, "at", f"{int(m.group(1)):02d}:{m.group(2)}")

    @property
    def hour(self) -> int:
        return int(self.at[:2])

    @property
    def minute(self) -> int:
        return int(self.at[3:])

    def cron(self) -> str:
        """The five cron fields (crontab and Hermes's cron jobs alike)."""
        day, weekday = {"daily": ("*", "*"), "weekly": ("*", "0"), "monthly": ("1", "*")}[self.every]
        return f"{self.minute} {self.hour} {day} * {weekday}"

    def on_calendar(self) -> str:
        """systemd's ``OnCalendar=``."""
        day = {"daily": "*-*-*", "weekly": "Sun *-*-*", "monthly": "*-*-01"}[self.every]
        return f"{day} {self.at}:00"


def keeper_executable() -> list[str]:
    """The keeper by absolute path, as a scheduler with a short PATH must call it: the path it was
    started by (pipx's ~/.local/bin link, not the venv it points into: a `pipx reinstall` keeps it).

    The console script that is running (``sys.argv[0]``), else the one beside this Python
    (its virtualenv or pipx venv), else the one on PATH, else ``python -m hermes_keeper``.
    """
    argv0 = Path(sys.argv[0])
    if argv0.name == NAME and argv0.is_file():
        return [str(argv0.absolute())]
    beside = Path(sys.executable).parent / NAME
    if beside.is_file():
        return [str(beside.absolute())]
    found = shutil.which(NAME)
    if found:
        return [str(Path(found).resolve())]
    return [str(Path(sys.executable).absolute()), "-m", "hermes_keeper"]


@dataclass(frozen=True)
class Job:
    """``run`` of one profile (or ``--all-profiles``) of the home ``root``, at ``when``."""

    root: Path
    profile: str | None  # None: every profile
    when: When
    keeper: tuple[str, ...]
    home: Path | None = None  # the profile's own folder (Hermes's cron lives there); None: root

    @property
    def profile_home(self) -> Path:
        return self.home or self.root

    @property
    def label(self) -> str:
        return self.profile or "all-profiles"

    @property
    def key(self) -> str:
        """Names this home and profile in every scheduler (unit names, tags): stable across installs."""
        # surrogateescape: a home whose name is not UTF-8 has a key too (the same key as before
        # for every other home)
        text = f"{self.root}\0{self.label}".encode("utf-8", "surrogateescape")
        return hashlib.sha256(text).hexdigest()[:10]

    def argv(self, quiet: bool) -> list[str]:
        who = ["--profile", self.profile] if self.profile else ["--all-profiles"]
        return [*self.keeper, "run", *(["--quiet"] if quiet else []), "--home", str(self.root), *who]


@dataclass(frozen=True)
class Change:
    """One thing a scheduler holds for the keeper: what became of it, where, and its text."""

    via: str
    action: str  # installed, replaced, unchanged, removed, absent, found (show)
    where: str
    text: str
    note: str = ""
    runs: Runs | None = None  # show: when the scheduler runs it next and ran it last

    def to_dict(self) -> dict:
        d = asdict(self)
        if self.runs is None:
            del d["runs"]
        return d


@dataclass(frozen=True)
class Runs:
    """What the scheduler itself says of a job: its next run, its last one and that one's result
    (None: it does not say, or never ran it), local time ``YYYY-MM-DD HH:MM`` where the keeper
    computes it, the scheduler's own words otherwise."""

    next: str | None = None
    last: str | None = None
    result: str | None = None

    def line(self) -> str:
        last = f"{self.last} ({self.result})" if self.last and self.result else self.last
        return f"next run: {self.next or 'not known'}; last run: {last or 'none recorded by the scheduler'}"


def backend(via: str):
    """The module that schedules ``via``: ``install(job, dry_run)``, ``remove(job, dry_run)``,
    ``show(root)``, each returning :class:`Change` s."""
    if via not in VIAS:
        raise KeeperError(f"--via {via!r}: choose one of {', '.join(VIAS)}")
    from importlib import import_module

    return import_module(f"{__name__}.{via}")
