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
from dataclasses import dataclass
from pathlib import Path

import zstandard

from hermes_keeper.fs import HomeFS

JOURNAL_NAME = "journal.jsonl"
ROTATING_NAME = JOURNAL_NAME + ".rotating"
GENERATION_PREFIX, GENERATION_SUFFIX = "journal-", ".jsonl.zst"
ROTATE_BYTES = 8 * 1024 * 1024
KEEP_GENERATIONS = 8  # ~64 MiB of records, a few MiB compressed: years of nightly runs
ZSTD_LEVEL = 9
#: The record a :class:`Journal` writes after ending a line a power cut tore.
JOURNAL_SEALED = "journal_sealed"


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
            keeper_dir.name, JOURNAL_NAME, flags=os.O_CREAT | os.O_RDWR | os.O_APPEND, create_dirs=True
        )
        self._seal()

    def _seal(self) -> None:
        """End a line a power cut tore (no newline at the end), so the next record is a line of its
        own; said in a ``journal_sealed`` record (:func:`read_journal` skips the torn line)."""
        size = os.fstat(self._fd).st_size
        if size and os.pread(self._fd, 1, size - 1) != b"\n":
            os.write(self._fd, b"\n")
            self.write(JOURNAL_SEALED, reason="the last line was torn (no newline): skipped when read")

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


@dataclass(frozen=True)
class Skipped:
    """A journal line that is not a record (a power cut tore it), left out by :func:`read_journal`."""

    where: str  # the file, relative to the home
    line: int  # 1-based
    after: int  # how many records came before it
    reason: str

    def __str__(self) -> str:
        return f"{self.where} line {self.line} skipped ({self.reason})"


def _record(line: bytes) -> dict | str:
    """The record ``line`` holds, or why it holds none."""
    try:
        record = json.loads(line)
    except ValueError:
        return "not JSON"
    if not isinstance(record, dict) or not isinstance(record.get("action"), str):
        return "not a record"
    if not isinstance(record.get("ts"), (int, float)) or isinstance(record.get("ts"), bool):
        return "no time"
    return record


def _records(data: bytes, where: str, records: list[dict], skipped: list[Skipped]) -> None:
    lines = data.split(b"\n")
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        got = _record(line)
        if isinstance(got, dict):
            records.append(got)
            continue
        torn = i == len(lines)  # no newline after it: cut off mid-write
        skipped.append(Skipped(where, i, len(records), f"torn: {got}, no newline" if torn else got))


def read_journal(keeper_dir: Path, skipped: list[Skipped] | None = None) -> list[dict]:
    """Every record, oldest first: the rotated generations, one being rotated, then the journal.

    A line that is not a record (a power cut tore the last one) is left out, and added to
    ``skipped`` when given: one torn line never makes the rest unreadable.
    """
    keeper_dir = Path(keeper_dir)
    fs, folder = HomeFS(keeper_dir.parent), keeper_dir.name
    chunks = [
        (f"{folder}/{g}", zstandard.ZstdDecompressor().decompress(fs.read_bytes(folder, g) or b""))
        for g in _generations(fs, folder)
    ]
    for name in (ROTATING_NAME, JOURNAL_NAME):
        chunks.append((f"{folder}/{name}", fs.read_bytes(folder, name) or b""))
    records: list[dict] = []
    found: list[Skipped] = []
    for where, data in chunks:
        _records(data, where, records, found)
    if skipped is not None:
        skipped.extend(found)
    return records
