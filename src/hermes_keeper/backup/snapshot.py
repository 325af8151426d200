"""Consistent, compressed, verified snapshots of ``state.db`` while Hermes keeps writing.

``VACUUM INTO`` copies the database inside one read transaction (WAL readers never
block writers), the copy is given the source's journal mode (``VACUUM INTO`` always
writes a rollback-journal file) and ``quick_check``ed, then compressed with zstd in a stream
(bounded memory, frame checksum on) into ``state-<UTC>.db.zst``, which is fsynced,
renamed into place and its folder fsynced (the uncompressed copy is a temporary file
and deliberately not synced: that flush is what made Hermes's own commits wait). One
``manifest.json`` per backup folder records, for each backup, its size, sha256, the
size it expands to, the source's schema version, profile and home; it is rewritten
atomically under a lock, so one folder can serve several profiles. Everything is
owner-only. On any failure (disk full, I/O error, bad copy) the temporary files are
removed and a one-line :class:`KeeperError` says why; nothing else changed.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import sqlite3
import stat
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import zstandard

from hermes_keeper import units
from hermes_keeper.backup.rotation import Decision, plan_rotation
from hermes_keeper.errors import KeeperError, os_error_line
from hermes_keeper.fs import HomeFS, durable_rename, open_private, plain_name, private_file
from hermes_keeper.journal import Journal
from hermes_keeper.place import Place
from hermes_keeper.sqlite.connect import connect_file, connect_ro
from hermes_keeper.sqlite.holders import Holder, find_holders
from hermes_keeper.sqlite.schema import AUTO_VACUUM, SchemaInfo, inspect, quick_check

MANIFEST = "manifest.json"
LOCK = ".manifest.lock"
#: A backup's temporary files (the uncompressed copy, the compressed one before its rename).
TEMP_PREFIX = ".state-"
MANIFEST_FORMAT = 1
ZSTD_LEVEL = 3
CHUNK = 1 << 20
SYNC_EVERY = 8 << 20
#: Free space a backup must leave on the disk Hermes writes to (a full disk loses Hermes's writes).
RESERVE_BYTES = 64 << 20


@dataclass
class BackupRecord:
    name: str  # state-<UTC>.db.zst
    profile: str
    home: str  # the Hermes home it was taken from (one folder may hold several)
    created_at: float
    bytes: int  # compressed file
    raw_bytes: int  # the database it expands to
    sha256: str  # of the compressed file
    schema_version: int | None
    source_bytes: int  # state.db + -wal at backup time
    folder: Path | None = field(default=None, compare=False)  # where it lives; not in the manifest

    @property
    def path(self) -> Path:
        if self.folder is None:
            raise ValueError(f"backup {self.name} has no folder")
        return HomeFS(self.folder).path(self.name)  # a name read from the manifest: one plain name

    def to_manifest(self) -> dict:
        d = asdict(self)
        del d["folder"]
        return d

    def to_dict(self) -> dict:
        return self.to_manifest() | {"path": str(self.path) if self.folder else None}


_STORED = [f.name for f in fields(BackupRecord) if f.name != "folder"]


def backup_dir(profile: Place, dest: Path | str | None = None) -> Path:
    return Path(dest) if dest else profile.keeper_dir / "backups"


def of_home(r: BackupRecord, home: Path | str) -> bool:
    """Whether ``r`` is a backup of ``home``: the home it recorded, or, in the home's own
    ``keeper/backups`` (which moved with it), a recorded home that holds no state.db any more:
    the home was moved or renamed since (was: its backups vanished, ``check`` CRITICAL "no
    verified backup"). A recorded home that is still there keeps its backups."""
    if r.home == str(home):
        return True
    own = Path(home) / "keeper" / "backups"
    return (
        r.folder is not None
        and Path(r.folder).resolve() == own.resolve()
        and not (Path(r.home) / "state.db").exists()
    )


#: What each manifest field must be (bool is an int to Python: refused apart).
_FIELD_TYPES = {
    "name": str,
    "profile": str,
    "home": str,
    "created_at": (int, float),
    "bytes": int,
    "raw_bytes": int,
    "sha256": str,
    "schema_version": (int, type(None)),
    "source_bytes": int,
}


def _record(r: dict, folder: Path) -> BackupRecord:
    """One manifest entry, checked: the types above, and a name that is a plain file in ``folder``."""
    values = {k: r[k] for k in _STORED}
    wrong = [k for k, v in values.items() if isinstance(v, bool) or not isinstance(v, _FIELD_TYPES[k])]
    if wrong:
        raise TypeError(f"{', '.join(wrong)} of the wrong type")
    if not plain_name(values["name"]):  # a name that would leave the folder
        raise ValueError(f"{values['name']!r} is not one plain name")
    return BackupRecord(**values, folder=folder)


def list_backups(dest_dir: Path) -> list[BackupRecord]:
    """Every backup the folder's manifest records, oldest first (files may be missing: verify)."""
    folder = Path(dest_dir)
    try:
        raw = HomeFS(folder).read_bytes(MANIFEST)  # a symlinked manifest is refused, not read
        if raw is None:
            return []
        data = json.loads(raw)
        return sorted(
            (_record(r, folder) for r in data["backups"]),
            key=lambda r: r.created_at,  # stable: same-second backups stay in the order they were taken
        )
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise KeeperError(f"{folder / MANIFEST}: unreadable backup manifest ({exc!r})") from None


def _write_manifest(folder: Path, records: list[BackupRecord]) -> None:
    tmp = folder / f".{MANIFEST}.tmp"
    try:
        body = {"format": MANIFEST_FORMAT, "backups": [r.to_manifest() for r in records]}
        with os.fdopen(open_private(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), "w", encoding="utf-8") as fh:
            fh.write(json.dumps(body, indent=2))
        durable_rename(tmp, folder / MANIFEST)
    finally:
        HomeFS(folder).unlink(tmp.name)


@contextmanager
def _manifest_lock(folder: Path) -> Iterator[None]:
    """Serialise read-modify-write of one folder's manifest (several homes may share a folder)."""
    fd = open_private(folder / LOCK)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(CHUNK), b""):
            h.update(block)
    return h.hexdigest()


def verify_backup(record: BackupRecord) -> bool:
    """The file is there, has the recorded size and the recorded sha256."""
    try:
        path = record.path
        return path.stat().st_size == record.bytes and sha256_file(path) == record.sha256
    except OSError:
        return False


def backup_present(record: BackupRecord) -> bool:
    """The file is there with the recorded size: what rotation trusts, so a new backup does not
    re-read every earlier one (their sha256 was checked when written; restore and `backups`
    verify it again)."""
    try:
        return record.path.stat().st_size == record.bytes
    except OSError:
        return False


def _stamp(now: float, folder: Path, recorded: set[str]) -> str:
    """The UTC timestamp for a new backup's name, unique among files and manifest entries."""
    base = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))
    stamp, n = base, 1
    while (folder / f"state-{stamp}.db.zst").exists() or f"state-{stamp}.db.zst" in recorded:
        n += 1
        stamp = f"{base}-{n}"
    return stamp


def match_modes(path: Path, journal_mode: str | None, auto_vacuum: str | None) -> None:
    """Give a database file nobody else has open (a fresh copy) this journal mode and auto_vacuum.

    Only WAL is recorded in the file (every other mode is a rollback journal, read back as
    ``delete``); switching auto_vacuum between NONE and FULL/INCREMENTAL takes a VACUUM,
    done before WAL is set. ``None`` leaves that setting as it is.
    """
    conn = connect_file(path)
    try:
        now = AUTO_VACUUM.get(conn.execute("PRAGMA auto_vacuum").fetchone()[0])
        if auto_vacuum in AUTO_VACUUM.values() and now != auto_vacuum:
            conn.execute("PRAGMA journal_mode=delete")
            conn.execute(f"PRAGMA auto_vacuum={auto_vacuum}")
            conn.execute("VACUUM")
        if journal_mode is not None:
            conn.execute(f"PRAGMA journal_mode={'wal' if journal_mode == 'wal' else 'delete'}")
    finally:
        conn.close()


def preflight_backup(profile: Place, schema: SchemaInfo, folder: Path, holders: list[Holder] | None) -> None:
    """Refuse a backup that would stall Hermes or fill the disk Hermes writes to."""
    holders = find_holders(profile.db_path) if holders is None else holders
    if schema.journal_mode != "wal" and holders:
        raise KeeperError(
            f"state.db is in {schema.journal_mode} journal mode and open by "
            f"{'; '.join(h.describe() for h in holders)}: a snapshot would block its writes for the "
            "whole copy; back up while Hermes is stopped"
        )
    existing = next(p for p in (folder, *folder.parents) if p.exists())  # the folder may not exist yet
    if existing.stat().st_dev != profile.db_path.stat().st_dev:
        return  # another disk: a full disk there fails the backup, never Hermes (handled below)
    live = schema.used_bytes
    need = live + live // 2 + RESERVE_BYTES  # the copy, its compressed form, room left for Hermes
    free = shutil.disk_usage(existing).free
    if free < need:
        raise KeeperError(
            f"backup of {profile.name} refused: it needs about {units.size(need)} on the disk Hermes "
            f"writes to and {units.size(free)} are free; free space, or back "
            "up to another disk (--dest DIR, or [backups] dest in keeper.toml)"
        )


def take_backup(
    profile: Place,
    dest_dir: Path | str | None = None,
    now: float | None = None,
    journal: Journal | None = None,
    *,
    schema: SchemaInfo | None = None,
    holders: list[Holder] | None = None,
) -> BackupRecord:
    """Snapshot, check, compress and record; raises KeeperError (cleaned up) on any failure.

    ``schema`` and ``holders``: a run's, so a backup inside it reads neither again.
    """
    schema = schema or inspect(profile.db_path, check_timestamps=False)
    schema.require_readable()
    now = time.time() if now is None else now
    folder = backup_dir(profile, dest_dir)
    snap = comp = None
    try:
        preflight_backup(profile, schema, folder, holders)
        profile.fs.folder(folder)  # inside the home: no symlinked keeper/ or backups/ on the way
        with _manifest_lock(folder):  # one backup at a time per folder
            for lo in _temp_files(folder):  # left by a backup that was killed
                HomeFS(folder).unlink(lo.path.name)
                if journal:
                    journal.write("backup_temp_removed", name=lo.path.name, bytes=lo.bytes)
            earlier = list_backups(folder)  # an unreadable manifest fails here, before any copying
            stamp = _stamp(now, folder, {r.name for r in earlier})
            snap = private_file(folder / f"{TEMP_PREFIX}{stamp}.db.tmp")
            comp = private_file(folder / f"{TEMP_PREFIX}{stamp}.db.zst.tmp")
            source_bytes = sum(
                p.stat().st_size
                for p in (profile.db_path, profile.db_path.with_name("state.db-wal"))
                if p.exists()
            )
            conn = connect_ro(profile.db_path, query_only=False)
            try:
                # The copy is only an intermediate (the .zst is what is made durable): unsynced, its
                # 100s of MB never reach the disk in one burst that Hermes's own fsync waits behind.
                conn.execute("PRAGMA synchronous=OFF")
                conn.execute("VACUUM INTO ?", (str(snap),))
            finally:
                conn.close()
            match_modes(snap, schema.journal_mode, None)  # auto_vacuum: VACUUM INTO keeps it
            check = quick_check(snap)
            if check != "ok":
                raise KeeperError(f"backup of {profile.name} failed: the copy fails quick_check ({check})")
            sha, size = _compress(snap, comp)
            record = BackupRecord(
                name=f"state-{stamp}.db.zst",
                profile=profile.name,
                home=str(profile.home),
                created_at=now,
                bytes=size,
                raw_bytes=snap.stat().st_size,
                sha256=sha,
                schema_version=schema.schema_version,
                source_bytes=source_bytes,
                folder=folder,
            )
            durable_rename(comp, record.path)
            try:
                _write_manifest(folder, [*earlier, record])
            except BaseException:
                HomeFS(folder).unlink(record.name)  # no backup the manifest does not know
                raise
    except OSError as exc:
        raise KeeperError(f"backup of {profile.name} failed: {os_error_line(exc)}") from None
    except sqlite3.Error as exc:
        raise KeeperError(f"backup of {profile.name} failed: {exc} ({folder})") from None
    finally:
        for p in (snap, comp):
            if p is not None:
                for suffix in ("", "-journal", "-wal", "-shm"):  # VACUUM INTO's own, match_modes's
                    HomeFS(folder).unlink(p.name + suffix)
    if journal:
        journal.write("backup", **{k: v for k, v in record.to_dict().items() if k != "home"})
    return record


class _HashingSink:
    """Where the compressor writes: hashes and counts the bytes on their way to the file.

    Synced every ``SYNC_EVERY`` bytes, so the disk gets the backup in small pieces and a
    Hermes commit's fsync never waits behind one large flush.
    """

    def __init__(self, fh):
        self.fh, self.sha, self.size, self.unsynced = fh, hashlib.sha256(), 0, 0

    def write(self, data) -> int:
        self.sha.update(data)
        self.size += len(data)
        self.unsynced += len(data)
        n = self.fh.write(data)
        if self.unsynced >= SYNC_EVERY:
            self.fh.flush()
            os.fdatasync(self.fh.fileno())
            self.unsynced = 0
        return n

    def flush(self) -> None:
        self.fh.flush()


def _compress(src_path: Path, dst_path: Path) -> tuple[str, int]:
    """Stream ``src_path`` through zstd into ``dst_path`` (fsynced); sha256 and size of the output."""
    with open(src_path, "rb") as src, open(dst_path, "wb") as dst:
        sink = _HashingSink(dst)
        cctx = zstandard.ZstdCompressor(level=ZSTD_LEVEL, write_checksum=True)
        with cctx.stream_writer(sink, closefd=False) as writer:
            for block in iter(lambda: src.read(CHUNK), b""):
                writer.write(block)
        dst.flush()
        os.fsync(dst.fileno())
    return sink.sha.hexdigest(), sink.size


def decompress_to(record: BackupRecord, dst_path: Path) -> None:
    """Stream the backup's database into ``dst_path`` (fsynced); zstd checks its frame checksum.

    ``dst_path`` is the keeper's file, opened as :func:`open_private` does (never through a symlink)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
    with open(record.path, "rb") as src, os.fdopen(open_private(dst_path, flags), "wb") as dst:
        reader = zstandard.ZstdDecompressor().stream_reader(src)
        for block in iter(lambda: reader.read(CHUNK), b""):
            dst.write(block)
        dst.flush()
        os.fsync(dst.fileno())


def rotation(
    folder: Path,
    home: Path | str | None = None,
    now: float | None = None,
    check: Callable[[BackupRecord], bool] = verify_backup,
    **rules: int,
) -> list[tuple[BackupRecord, Decision, bool]]:
    """Each backup (of ``home``, or of every home) with its decision and ``check``, newest first.

    ``rules`` are :func:`plan_rotation`'s (keep_last, keep_daily, keep_weekly, keep_monthly) and its
    defaults.

    Rules apply per home: one home's backups never push another's out of a shared folder.
    """
    records = [r for r in list_backups(folder) if home is None or of_home(r, home)]
    verified = {r.name: check(r) for r in records}
    by_name = {r.name: r for r in records}
    homes = {r.name: str(home) if home is not None else r.home for r in records}  # a moved home's: one group
    rows = []
    for h in sorted(set(homes.values())):
        group = [(r.name, r.created_at, verified[r.name]) for r in records if homes[r.name] == h]
        for d in plan_rotation(group, now=now, **rules):
            rows.append((by_name[d.id], d, verified[d.id]))
    return sorted(rows, key=lambda row: row[0].created_at, reverse=True)


def apply_rotation(
    folder: Path, home: Path | str | None = None, journal: Journal | None = None, **rules
) -> list[str]:
    """Delete the backups rotation does not keep (of ``home``, or of every home); their names."""
    folder = Path(folder)
    if not (folder / MANIFEST).exists():
        return []
    HomeFS(folder.parent).private_dir(folder.name, tighten=False)  # never through a symlinked folder
    with _manifest_lock(folder):
        drop = {
            r.name: r
            for r, d, _ in rotation(folder, home, time.time(), backup_present, **rules)
            if not d.keep
        }
        if not drop:
            return []
        for name in drop:
            HomeFS(folder).unlink(name)
        # Files first: a crash in between leaves a visible entry that fails verification (and is
        # rotated out next time), never an invisible file.
        _write_manifest(folder, [r for r in list_backups(folder) if r.name not in drop])
    if journal:
        journal.write("backups_rotated", removed=sorted(drop))
    return sorted(drop)


@dataclass(frozen=True)
class Leftover:
    path: Path
    bytes: int


def find_malformed_copies(profile: Place) -> list[Leftover]:
    """Hermes's ``state.db.malformed-backup-*`` copies: made on repair, never deleted upstream."""
    return [
        Leftover(p, p.lstat().st_size)
        for p in sorted(profile.home.glob("state.db.malformed-backup-*"))
        if p.is_file() and not p.is_symlink()
    ]


def remove_malformed_copies(profile: Place, journal: Journal | None = None) -> list[Leftover]:
    """Delete those copies (each one journaled with its size); returns what was removed."""
    removed = []
    for lo in find_malformed_copies(profile):
        if profile.fs.unlink(lo.path.name) is None:
            continue  # became a link or went away meanwhile: kept
        removed.append(lo)
        if journal:
            journal.write("leftover_removed", name=lo.path.name, bytes=lo.bytes)
    return removed


def _temp_files(folder: Path) -> list[Leftover]:
    """A backup's temporary files in ``folder`` (regular files only; a link is not ours)."""
    try:
        names = sorted(n for n in os.listdir(folder) if n.startswith(TEMP_PREFIX))
    except FileNotFoundError:
        return []
    out = []
    for name in names:
        with suppress(FileNotFoundError):
            st = os.lstat(folder / name)
            if stat.S_ISREG(st.st_mode):
                out.append(Leftover(folder / name, st.st_size))
    return out


def killed_backup_leftovers(folder: Path | str) -> list[Leftover]:
    """Temporary copies (full size, uncompressed) a killed backup left; the next backup removes them.

    While a backup is running in the folder (it holds the manifest lock) its files are its
    own, not leftovers.
    """
    folder = Path(folder)
    try:
        fd = os.open(folder / LOCK, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return []  # no backup ever ran here (or not one of ours)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return []
    finally:
        os.close(fd)
    return _temp_files(folder)
