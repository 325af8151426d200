"""Append-only JSONL record of what the keeper did: ``<home>/keeper/journal.jsonl``.

One line per action (never message content: ids, counts, bytes, reasons), fsynced
per line so the journal survives a crash of the run it describes (a burst of small
records, such as one per removed file, is fsynced once at its end).

Opening the journal is every writing command's first step in a home, so it is also where
the home is checked before anything is created: a folder that is not a Hermes home, or a
``keeper/`` holding a symlink, is refused in one line with nothing written.

Bounded by size: under the keeper lock, as a command opens it, a journal past
:data:`ROTATE_BYTES` becomes a zstd generation ``journal-<first record's UTC time>-<hash>.jsonl.zst``
(0600) and the oldest beyond :data:`KEEP_GENERATIONS` are removed. Only at that point, so one
command's records always sit in one file. The journal is first renamed aside
(``journal.jsonl.rotating``), so a crash mid-rotation loses nothing: the next rotation finishes
it, and :func:`read_journal` reads it meanwhile.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path

import zstandard

from hermes_keeper.fs import HomeFS

JOURNAL_NAME = "journal.jsonl"
ROTATING_NAME = JOURNAL_NAME + ".rotating"
GENERATION_PREFIX, GENERATION_SUFFIX = "journal-", ".jsonl.zst"
ROTATE_BYTES = 8 * 1024 * 1024
KEEP_GENERATIONS = 8  # ~64 MiB of records, a few MiB compressed: years of nightly runs
ZSTD_LEVEL = 9


class Journal:
    def __init__(self, keeper_dir: Path, run_id: str | None = None, rotate: bool = False):
        """``rotate`` (only holding the keeper lock): first :func:`rotate_journal`."""
        keeper_dir = Path(keeper_dir)
        fs = HomeFS(keeper_dir.parent)
        fs.require_home()
        fs.check_keeper_tree()
        if rotate:
            rotate_journal(keeper_dir)
        self.path = fs.path(keeper_dir.name, JOURNAL_NAME)
        self.run_id = run_id or time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + f"-{os.getpid()}"
        self._fd = fs.open_private(
            keeper_dir.name, JOURNAL_NAME, flags=os.O_CREAT | os.O_WRONLY | os.O_APPEND, create_dirs=True
        )

    def write(self, action: str, /, *, durable: bool = True, **fields) -> None:
        """Append one record; ``durable=False`` leaves the fsync to a later :meth:`sync`."""
        record = {"ts": round(time.time(), 3), "run": self.run_id, "action": action, **fields}
        os.write(self._fd, (json.dumps(record, sort_keys=True, default=str) + "\n").encode("utf-8"))
        if durable:
            self.sync()

    def sync(self) -> None:
        os.fsync(self._fd)

    def close(self) -> None:
        os.close(self._fd)

    def __enter__(self) -> Journal:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _generations(fs: HomeFS, folder: str) -> list[str]:
    """The rotated generations' names, oldest first (their names sort by time)."""
    try:
        names = os.listdir(fs.path(folder))
    except FileNotFoundError:
        return []
    return sorted(n for n in names if n.startswith(GENERATION_PREFIX) and n.endswith(GENERATION_SUFFIX))


def _generation_name(data: bytes) -> str:
    """``journal-<UTC time of the first record, to the ms>-<content hash>.jsonl.zst``: sorts by
    time, never names two journals alike, and is the same when a crashed rotation is finished."""
    try:
        ts = float(json.loads(data.split(b"\n", 1)[0])["ts"])
    except (ValueError, KeyError, TypeError):
        ts = time.time()
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(ts)) + f"{int(ts * 1000) % 1000:03d}Z"
    return f"{GENERATION_PREFIX}{stamp}-{hashlib.sha256(data).hexdigest()[:12]}{GENERATION_SUFFIX}"


def rotate_journal(keeper_dir: Path) -> str | None:
    """Compress a journal past :data:`ROTATE_BYTES` into a generation, finish one a crash
    interrupted, drop the oldest beyond :data:`KEEP_GENERATIONS`; the new generation's name.

    Call it holding the keeper lock, before opening the :class:`Journal`: no writer appends meanwhile.
    """
    keeper_dir = Path(keeper_dir)
    fs, folder = HomeFS(keeper_dir.parent), keeper_dir.name
    st = fs.regular(folder, JOURNAL_NAME)
    if fs.regular(folder, ROTATING_NAME) is None:
        if st is None or st.st_size < ROTATE_BYTES:
            return None
        fs.rename(folder, JOURNAL_NAME, to=ROTATING_NAME)
    data = fs.read_bytes(folder, ROTATING_NAME) or b""
    name = _generation_name(data)
    tmp = name + ".tmp"
    fd = fs.open_private(folder, tmp, flags=os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    with os.fdopen(fd, "wb") as fh:
        fh.write(zstandard.ZstdCompressor(level=ZSTD_LEVEL, write_checksum=True).compress(data))
        fh.flush()
        os.fsync(fh.fileno())
    fs.rename(folder, tmp, to=name)
    fs.unlink(folder, ROTATING_NAME)
    for old in _generations(fs, folder)[:-KEEP_GENERATIONS]:
        fs.unlink(folder, old)
    return name


def read_journal(keeper_dir: Path) -> list[dict]:
    """Every record, oldest first: the rotated generations, one being rotated, then the journal."""
    keeper_dir = Path(keeper_dir)
    fs, folder = HomeFS(keeper_dir.parent), keeper_dir.name
    chunks = [
        zstandard.ZstdDecompressor().decompress(fs.read_bytes(folder, g) or b"")
        for g in _generations(fs, folder)
    ]
    chunks += [fs.read_bytes(folder, ROTATING_NAME) or b"", fs.read_bytes(folder, JOURNAL_NAME) or b""]
    return [json.loads(line) for data in chunks for line in data.decode("utf-8").splitlines() if line.strip()]
