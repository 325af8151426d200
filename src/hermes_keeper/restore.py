"""Put a backup back as ``state.db`` in a way that cannot make things worse.

Refuse while any process holds the database (unless forced); verify the sha256;
decompress next to ``state.db``; ``integrity_check`` and schema-check the result; only
then move the current ``state.db`` with its ``-wal``/``-shm`` aside as a safety copy and
rename the restored file into place. A bad backup is refused before anything moves.
"""

from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

import zstandard

from .backup import CHUNK, BackupRecord, backup_dir, read_manifest, verify_backup
from .discovery import Profile
from .errors import KeeperError
from .fsutil import durable_rename, fsync_dir, fsync_file, private_file
from .holders import find_holders
from .journal import Journal
from .schema import inspect

SAFETY_PREFIX = "state.db.keeper-before-restore-"


@dataclass
class RestoreResult:
    restored: str
    safety_copy: str | None
    sessions: int
    messages: int

    def to_dict(self) -> dict:
        return self.__dict__.copy()


def find_backup(
    profile: Profile, name: str | None, dest_dir: Path | None = None
) -> tuple[Path, BackupRecord]:
    """The named backup (file name or path), or the newest when ``name`` is None."""
    folder = backup_dir(profile, dest_dir)
    if name is not None and Path(name).parent != Path("."):
        folder, name = Path(name).parent, Path(name).name
    records = read_manifest(folder)
    if not records:
        raise KeeperError(f"no backups in {folder}")
    if name is None:
        return folder, max(records, key=lambda r: r.created_at)
    for r in records:
        if r.name == name:
            return folder, r
    raise KeeperError(f"backup {name!r} not found in {folder}/manifest.json")


def restore_backup(
    profile: Profile, folder: Path, record: BackupRecord, force: bool = False, journal: Journal | None = None
) -> RestoreResult:
    holders = find_holders(profile.db_path)
    if holders and not force:
        who = "; ".join(h.describe() for h in holders)
        raise KeeperError(
            f"refusing to restore while the database is open by {who} (stop Hermes or use --force)"
        )
    if not verify_backup(folder, record):
        raise KeeperError(
            f"backup {record.name} is damaged (sha256 mismatch or missing); nothing was changed"
        )
    tmp = private_file(profile.home / ".state.db.keeper-restore.tmp")
    try:
        with open(record.path(folder), "rb") as src, open(tmp, "wb") as dst:
            reader = zstandard.ZstdDecompressor().stream_reader(src)
            for block in iter(lambda: reader.read(CHUNK), b""):
                dst.write(block)
        fsync_file(tmp)
        conn = sqlite3.connect(f"file:{tmp}?mode=ro", uri=True)
        try:
            check = conn.execute("PRAGMA integrity_check").fetchone()[0]
        finally:
            conn.close()
        if check != "ok":
            raise KeeperError(
                f"backup {record.name} decompresses to a damaged database ({check}); nothing was changed"
            )
        info = inspect(tmp)
        info.require_readable()
        safety = None
        if profile.db_path.exists():
            stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
            safety = profile.home / f"{SAFETY_PREFIX}{stamp}"
            for suffix in ("", "-wal", "-shm"):
                src_path = profile.db_path.with_name(profile.db_path.name + suffix)
                if src_path.exists():
                    src_path.rename(safety.with_name(safety.name + suffix))
            fsync_dir(profile.home)
        durable_rename(tmp, profile.db_path)
    except (OSError, zstandard.ZstdError) as exc:
        raise KeeperError(f"restore of {record.name} failed: {exc}; nothing was changed") from None
    finally:
        tmp.unlink(missing_ok=True)
    conn = sqlite3.connect(f"file:{profile.db_path}?mode=ro", uri=True)
    try:
        sessions = conn.execute("SELECT count(*) FROM sessions").fetchone()[0]
        messages = conn.execute("SELECT count(*) FROM messages").fetchone()[0]
    finally:
        conn.close()
    result = RestoreResult(record.name, safety.name if safety else None, sessions, messages)
    if journal:
        journal.write("restored", **result.to_dict())
    return result
