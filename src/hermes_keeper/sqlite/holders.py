"""Which processes have a Hermes database open: the only reliable sign Hermes is running.

CLI, TUI and dashboard write no pid file, so we look for processes holding
``state.db`` or its ``-wal``/``-shm`` open (psutil), plus the gateway's ``gateway.pid``.
We never touch ``gateway.lock``: taking that flock would stop a gateway from starting.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

import psutil

#: Above any pid a kernel hands out (Linux's pid_max is at most 2**22): a number read from a
#: file is checked against it before it reaches psutil, which overflows on larger ones.
PID_LIMIT = 1 << 31


@dataclass(frozen=True)
class Holder:
    pid: int
    name: str
    cmdline: str
    files: tuple[str, ...] = field(default_factory=tuple)

    def describe(self) -> str:
        return f"pid {self.pid} ({self.cmdline or self.name})"

    def to_dict(self) -> dict:
        return asdict(self)


def _targets(db_path: Path) -> set[str]:
    base = os.path.realpath(db_path)
    return {base, base + "-wal", base + "-shm"}


def find_holders(db_path: Path, exclude_self: bool = True) -> list[Holder]:
    """Processes (other than this one) with the database or its WAL/SHM open."""
    targets = _targets(db_path)
    me = os.getpid()
    found = []
    for proc in psutil.process_iter(["pid", "name", "cmdline"]):
        if exclude_self and proc.info["pid"] == me:
            continue
        try:
            hits = sorted({f.path for f in proc.open_files() if f.path in targets})
        except (psutil.AccessDenied, psutil.NoSuchProcess, psutil.ZombieProcess, OSError):
            continue
        if hits:
            cmd = " ".join(proc.info.get("cmdline") or [])[:200]
            found.append(Holder(proc.info["pid"], proc.info.get("name") or "", cmd, tuple(hits)))
    return found


def gateway_pid(home: Path) -> int | None:
    """The pid in ``gateway.pid`` (JSON ``{"pid": N}`` or a bare number) if that process is alive.

    Hermes wrote the file: anything else in it (not UTF-8, not a number, out of range) is None.
    """
    try:
        raw = (home / "gateway.pid").read_text(encoding="utf-8").strip()
        data = json.loads(raw)
        pid = int(data["pid"] if isinstance(data, dict) else data)
    except (OSError, ValueError, KeyError, TypeError, OverflowError):  # UnicodeDecodeError is a ValueError
        return None
    return pid if 0 < pid < PID_LIMIT and psutil.pid_exists(pid) else None
