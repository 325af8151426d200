"""Which processes have a Hermes database open: the only reliable sign Hermes is running.

CLI, TUI and dashboard write no pid file, so we look for processes holding
``state.db`` or its ``-wal``/``-shm`` open (psutil), plus the gateway's ``gateway.pid``.
We never touch ``gateway.lock``: taking that flock would stop a gateway from starting.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import psutil

from hermes_keeper.errors import KeeperError, TryLater
from hermes_keeper.fs import read_regular
from hermes_keeper.sqlite.connect import cjk_library, tokenizer_problem
from hermes_keeper.sqlite.schema import CJK_INDEX, SchemaInfo

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

    @property
    def is_keeper(self) -> bool:
        """Another hermes-keeper (its console script, or ``python -m hermes_keeper``), not Hermes:
        still a holder to be careful of, never a sign that Hermes runs."""
        words = self.cmdline.split()
        return self.name == "hermes-keeper" or any(
            os.path.basename(w) == "hermes-keeper" or (w == "hermes_keeper" and words[i - 1] == "-m")
            for i, w in enumerate(words)
        )

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
    try:  # never blocking: a FIFO there is refused, not waited on
        raw = read_regular(home / "gateway.pid").decode("utf-8").strip()
        data = json.loads(raw)
        pid = int(data["pid"] if isinstance(data, dict) else data)
    except (
        OSError,
        ValueError,
        KeyError,
        TypeError,
        OverflowError,
        KeeperError,
    ):  # UnicodeDecodeError: a ValueError
        return None
    return pid if 0 < pid < PID_LIMIT and psutil.pid_exists(pid) else None


_PID_TOKEN = re.compile(r"(?:^|:)pid=(\d+)(?::|$)")
_PIDNS_TOKEN = re.compile(r"(?:^|:)pidns=(\d+)(?::|$)")


def _own_pid_namespace() -> str | None:
    try:
        link = os.readlink("/proc/self/ns/pid")
    except OSError:
        return None
    match = re.search(r"\[(\d+)\]", link)
    return match.group(1) if match else None


def lease_holder_dead(holder: str | None) -> bool:
    """Hermes's rule for a turn-lease / compression-lock holder (``pid=<n>:pidns=<id>:...``):
    dead only on proof, i.e. a pid stamped with our own PID namespace that no longer exists.

    Unstamped or foreign-namespace holders and our own pid count as alive (they expire by
    their TTL instead): wrongly keeping a lease self-heals, wrongly dropping one ends a live turn.
    """
    pid_match = _PID_TOKEN.search(holder or "")
    pid = int(pid_match.group(1)) if pid_match else 0
    if pid <= 0 or pid == os.getpid():
        return False
    ns = _PIDNS_TOKEN.search(holder or "")
    if sys.platform == "linux" and (ns is None or ns.group(1) != _own_pid_namespace()):
        return False
    return not psutil.pid_exists(pid)


def live_guards(c: sqlite3.Connection, schema: SchemaInfo, ids: list[str]) -> set[str]:
    """Of ``ids``, those a live compression lock (by session) or turn lease (by conversation root)
    names now: upstream's ``exclude_active_write_guards``, for a check inside the keeper's own write
    transaction that catches a lease Hermes took after the plan."""
    now = time.time()
    found: set[str] = set()
    for table, col in (("compression_locks", "session_id"), ("session_turn_leases", "conversation_id")):
        if schema.has(table, "holder") and schema.has(table, "expires_at"):
            rows = c.execute(
                f"SELECT {col}, holder, expires_at FROM {table}"
                f" WHERE {col} IN (SELECT value FROM json_each(?))",
                (json.dumps(ids),),
            )
            found |= {sid for sid, holder, exp in rows if exp > now and not lease_holder_dead(holder)}
    return found


def process_gone(pid: object) -> bool:
    """A registry entry's pid that provably no longer runs (an unparseable pid proves nothing)."""
    try:
        pid = int(pid)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return False
    return pid > 0 and not psutil.pid_exists(pid)


#: Hermes's own cross-process locks beside ``state.db`` (flock; the files stay after release).
MAINTENANCE_LOCKS = {
    ".fts_rebuild.lock": "an FTS rebuild",
    ".repair.lock": "a schema repair",
    ".auto-maintenance.lock": "its auto-maintenance (prune + VACUUM)",
}


def _flocked(path: Path) -> bool:
    """Another process holds a flock on ``path``, read from ``/proc/locks``: the keeper never takes
    Hermes's locks itself (a probe could make Hermes skip its own maintenance).

    ``/proc/locks`` names the file by device and inode of the filesystem that holds it; on an
    overlay that device is not the one ``stat`` reports, so an inode match on another device
    counts when that process has ``path`` open (or cannot be looked at: when unsure, wait).
    """
    try:
        st = path.stat()
        table = Path("/proc/locks").read_text()
    except OSError:
        return False
    dev = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}"
    for line in table.splitlines():
        fields = line.split()
        if len(fields) < 6 or "->" in fields or fields[1] != "FLOCK":
            continue
        lock_dev, _, ino = fields[5].rpartition(":")
        if ino != str(st.st_ino):
            continue
        if lock_dev == dev or _has_open(int(fields[4]), path):
            return True
    return False


def _has_open(pid: int, path: Path) -> bool:
    try:
        return any(os.path.samefile(f.path, path) for f in psutil.Process(pid).open_files())
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return False
    except (psutil.AccessDenied, OSError):
        return True


def hermes_maintenance(schema: SchemaInfo) -> str | None:
    """What Hermes is doing to the database that the keeper must not run beside, or ``None``."""
    db_path = Path(schema.path)
    for suffix, what in MAINTENANCE_LOCKS.items():
        if _flocked(db_path.with_name(db_path.name + suffix)):
            return f"Hermes is running {what} ({db_path.name}{suffix} is held)"
    if schema.fts_rebuild_pending:
        return "Hermes is rebuilding its search index (deferred FTS rebuild in state_meta)"
    if schema.fts_cjk_rebuild_pending:
        return (
            "Hermes is rebuilding its CJK search index (deferred backfill, fts_cjk_rebuild_* in state_meta,"
            " which `hermes sessions optimize-storage` finishes)"
        )
    return None


def missing_tokenizer(schema: SchemaInfo) -> str | None:
    """Why the keeper cannot write this database's ``messages`` (the triggers of Hermes's CJK index
    need its tokenizer, which this process cannot load), in one sentence; None when it can."""
    if not schema.cjk_live:
        return None
    problem = tokenizer_problem(Path(schema.path))
    if problem is None:
        return None
    return (
        f"{schema.path}: Hermes's CJK search index ({CJK_INDEX}) needs its tokenizer"
        f" {cjk_library(Path(schema.path))}, which {problem}"
    )


def refuse_during_maintenance(schema: SchemaInfo) -> None:
    """Raise :class:`TryLater` (one line, exit 75, nothing changed) while Hermes maintains the
    database, or where the keeper cannot load the tokenizer its writes need."""
    busy = hermes_maintenance(schema)
    if busy:
        raise TryLater(f"{busy}; nothing changed, run again later")
    missing = missing_tokenizer(schema)
    if missing:
        raise TryLater(f"{missing}; nothing changed")


def long_reads_stall_hermes(journal_mode: str, holders) -> bool:
    """Whether a read of the whole file (``quick_check``, ``dbstat``) would stall Hermes: in a
    rollback-journal database a reader holds every other process's commit for as long as it
    reads (seconds on a big home); WAL readers block no one."""
    return journal_mode != "wal" and bool(holders)
