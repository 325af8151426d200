"""Consistent, compressed, verified snapshots of ``state.db`` while Hermes keeps writing.

``VACUUM INTO`` copies the database inside one read transaction (WAL readers never
block writers), the copy is fsynced and ``quick_check``ed, then compressed with zstd in
a stream (bounded memory) into ``state-<UTC>.db.zst``. ``manifest.json`` records size,
sha256 and the source's schema version for each backup and is rewritten atomically.
Everything is owner-only. On any failure (disk full, I/O error, bad copy) the temporary
files are removed and a one-line :class:`KeeperError` says why; nothing else changed.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import zstandard

from .db import connect_ro
from .discovery import Profile
from .errors import KeeperError
from .fsutil import durable_rename, fsync_file, private_dir, private_file
from .journal import Journal
from .rotation import Candidate, Decision, plan_rotation
from .schema import inspect

MANIFEST = "manifest.json"
ZSTD_LEVEL = 3
CHUNK = 1 << 20


@dataclass
class BackupRecord:
    name: str
    profile: str
    created_at: float
    bytes: int  # compressed file
    raw_bytes: int  # the database it expands to
    sha256: str  # of the compressed file
    schema_version: int | None
    source_bytes: int  # state.db + -wal at backup time

    def path(self, folder: Path) -> Path:
        return folder / self.name

    def to_dict(self) -> dict:
        return asdict(self)


def backup_dir(profile: Profile, dest: Path | None = None) -> Path:
    return Path(dest) if dest else profile.keeper_dir / "backups"


def read_manifest(folder: Path) -> list[BackupRecord]:
    try:
        data = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return []
    except (OSError, ValueError) as exc:
        raise KeeperError(f"{folder / MANIFEST}: unreadable backup manifest ({exc})") from None
    return [BackupRecord(**r) for r in data.get("backups", [])]


def write_manifest(folder: Path, records: list[BackupRecord]) -> None:
    tmp = private_file(folder / f".{MANIFEST}.tmp")
    records = sorted(records, key=lambda r: r.created_at)
    tmp.write_text(
        json.dumps({"format": 1, "backups": [r.to_dict() for r in records]}, indent=2), encoding="utf-8"
    )
    durable_rename(tmp, folder / MANIFEST)


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(CHUNK), b""):
            h.update(block)
    return h.hexdigest()


def _stamp(now: float, folder: Path) -> str:
    base = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))
    stamp, n = base, 1
    while (folder / f"state-{stamp}.db.zst").exists():
        n += 1
        stamp = f"{base}-{n}"
    return stamp


def _quick_check(path: Path) -> str:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return conn.execute("PRAGMA quick_check").fetchone()[0]
    finally:
        conn.close()


def take_backup(
    profile: Profile, dest_dir: Path | None = None, now: float | None = None, journal: Journal | None = None
) -> BackupRecord:
    """Snapshot, check, compress and record; raises KeeperError (cleaned up) on any failure."""
    schema = inspect(profile.db_path, check_timestamps=False)
    schema.require_readable()
    now = time.time() if now is None else now
    folder = backup_dir(profile, dest_dir)
    snap = comp = None
    try:
        private_dir(folder)
        for stale in folder.glob(".state-*"):  # left by a backup that was killed (we hold the lock)
            stale.unlink(missing_ok=True)
        stamp = _stamp(now, folder)
        name = f"state-{stamp}.db.zst"
        snap = private_file(folder / f".state-{stamp}.db.tmp")
        comp = private_file(folder / f".state-{stamp}.db.zst.tmp")
        source_bytes = sum(
            p.stat().st_size
            for p in (profile.db_path, profile.db_path.with_name(profile.db_path.name + "-wal"))
            if p.exists()
        )
        conn = connect_ro(profile.db_path, query_only=False)
        try:
            conn.execute("VACUUM INTO ?", (str(snap),))
        finally:
            conn.close()
        fsync_file(snap)
        check = _quick_check(snap)
        if check != "ok":
            raise KeeperError(f"backup copy failed quick_check: {check}")
        h = hashlib.sha256()
        with open(snap, "rb") as src, open(comp, "wb") as dst:
            writer = zstandard.ZstdCompressor(level=ZSTD_LEVEL).stream_writer(_Hashing(dst, h), closefd=False)
            for block in iter(lambda: src.read(CHUNK), b""):
                writer.write(block)
            writer.flush(zstandard.FLUSH_FRAME)
            dst.flush()
            os.fsync(dst.fileno())
        record = BackupRecord(
            name,
            profile.name,
            now,
            comp.stat().st_size,
            snap.stat().st_size,
            h.hexdigest(),
            schema.schema_version,
            source_bytes,
        )
        durable_rename(comp, folder / name)
        comp = None
        write_manifest(folder, [*read_manifest(folder), record])
    except OSError as exc:
        raise KeeperError(f"backup of {profile.name} failed: {exc.strerror or exc} ({folder})") from None
    except sqlite3.Error as exc:
        raise KeeperError(f"backup of {profile.name} failed: {exc}") from None
    finally:
        for p in (snap, comp):
            if p is not None:
                p.unlink(missing_ok=True)
                p.with_name(p.name + "-journal").unlink(missing_ok=True)  # VACUUM INTO's own
    if journal:
        journal.write(
            "backup", name=record.name, bytes=record.bytes, raw_bytes=record.raw_bytes, sha256=record.sha256
        )
    return record


class _Hashing:
    """A file wrapper that hashes what is written through it."""

    def __init__(self, fh, h):
        self.fh, self.h = fh, h

    def write(self, data) -> int:
        self.h.update(data)
        return self.fh.write(data)

    def flush(self) -> None:
        self.fh.flush()


def verify_backup(folder: Path, record: BackupRecord) -> bool:
    path = record.path(folder)
    return path.exists() and path.stat().st_size == record.bytes and sha256_file(path) == record.sha256


def rotation(
    folder: Path, keep_last: int = 3, daily: int = 7, weekly: int = 4, monthly: int = 12, verify: bool = True
) -> list[tuple[BackupRecord, Decision, bool]]:
    """Each backup with its rotation decision and verification state, newest first."""
    records = {r.name: r for r in read_manifest(folder)}
    verified = {n: (verify_backup(folder, r) if verify else True) for n, r in records.items()}
    decisions = plan_rotation(
        [Candidate(n, r.created_at, verified[n]) for n, r in records.items()],
        keep_last,
        daily,
        weekly,
        monthly,
    )
    return [(records[d.id], d, verified[d.id]) for d in decisions]


def apply_rotation(folder: Path, journal: Journal | None = None, **rules) -> list[str]:
    """Delete the backups rotation does not keep; returns their names."""
    rows = rotation(folder, **rules)
    drop = [r for r, d, _ in rows if not d.keep]
    for r in drop:
        r.path(folder).unlink(missing_ok=True)
    if drop:
        write_manifest(folder, [r for r, d, _ in rows if d.keep])
        if journal:
            journal.write("backups_rotated", removed=[r.name for r in drop])
    return [r.name for r in drop]


def malformed_copies(profile: Profile) -> list[tuple[Path, int]]:
    """Hermes's ``state.db.malformed-backup-*`` copies: made on repair, never deleted upstream."""
    return [
        (p, p.lstat().st_size)
        for p in sorted(profile.home.glob("state.db.malformed-backup-*"))
        if p.is_file() and not p.is_symlink()
    ]
