"""Consistent, page-for-page, compressed, verified snapshots of ``state.db`` while Hermes keeps writing.

The copy is SQLite's online backup (``Connection.backup``) in steps of :data:`STEP_BYTES`, with a
rest after each: page *n* of the backup is page *n* of ``state.db``, so a deduplicating store
(restic, borg) fed the decompressed backups shares every page that did not change (a ``VACUUM
INTO`` rewrites them all). In WAL mode one read transaction is held across the whole copy (WAL
readers block no writer): a consistent image that never restarts. In a rollback journal a held
read lock would block Hermes's commits, so each step takes its own and a commit restarts the
copy; such a database another process holds is refused, and after :data:`MAX_RESTARTS` restarts
(Hermes started meanwhile) the copy stops (:class:`TryLater`). The copy is
``quick_check``ed, then compressed with zstd in a stream (bounded memory, frame checksum on)
into ``state-<UTC>.db.zst``, which is fsynced, renamed into place and its folder fsynced (the
uncompressed copy is a temporary file and deliberately not synced: that flush is what made
Hermes's own commits wait). A backup is not taken again while ``state.db`` is the same file,
unwritten since the newest verified backup of it (:func:`source_mark`). One ``manifest.json``
per backup folder records, for each backup, its size, sha256, the size it expands to, the
source's schema version, profile and home; it is rewritten atomically under a lock, so one
folder can serve several profiles. Everything is owner-only. On any failure (disk full, I/O
error, bad copy) the temporary files are removed and a one-line :class:`KeeperError` says why;
nothing else changed.
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
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path

import zstandard

from hermes_keeper import units
from hermes_keeper.backup.rotation import Decision, plan_rotation
from hermes_keeper.errors import KeeperError, TryLater, os_error_line
from hermes_keeper.fs import (
    KEEPER_DIR,
    HomeFS,
    durable_rename,
    open_private,
    plain_name,
    private_file,
)
from hermes_keeper.journal import Journal
from hermes_keeper.place import Place
from hermes_keeper.sqlite.connect import connect_file, connect_ro
from hermes_keeper.sqlite.holders import find_holders
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
#: One step of the page copy: a few ms from the page cache, under the run's 50 ms write budget
#: even in a rollback journal, where the step's read lock holds Hermes's commits.
STEP_BYTES = 4 << 20
#: The rest after each step: Hermes's busy handler retries within a few ms, so a commit the step
#: held gets in here.
STEP_REST_S = 0.01
#: Rollback journal only: copies restarted by Hermes commits before the backup says "try later".
MAX_RESTARTS = 3
#: A file written this recently may be written again within the same mtime tick: no mark.
QUIET_S = 1.0


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
    source_mark: str = ""  # the source's identity and last write (source_mark); "": none taken
    folder: Path | None = field(default=None, compare=False)  # where it lives; not in the manifest
    #: not taken this time: state.db is unchanged since this (verified) backup; not in the manifest
    reused: bool = field(default=False, compare=False)

    @property
    def path(self) -> Path:
        if self.folder is None:
            raise ValueError(f"backup {self.name} has no folder")
        return HomeFS(self.folder).path(self.name)  # a name read from the manifest: one plain name

    def to_manifest(self) -> dict:
        d = asdict(self)
        del d["folder"], d["reused"]
        return d

    def to_dict(self) -> dict:
        return self.to_manifest() | {"path": str(self.path) if self.folder else None, "reused": self.reused}


_STORED = [f.name for f in fields(BackupRecord) if f.name not in ("folder", "reused")]
#: Fields a manifest written by an earlier keeper lacks, with what they then are.
_ADDED = {"source_mark": ""}


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
    "source_mark": str,
}


def _record(r: dict, folder: Path) -> BackupRecord:
    """One manifest entry, checked: the types above, and a name that is a plain file in ``folder``."""
    values = {k: r.get(k, _ADDED[k]) if k in _ADDED else r[k] for k in _STORED}
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


@dataclass(frozen=True)
class BackupCost:
    """What a backup will take and where (``plan``, ``backup --dry-run`` and the backup itself)."""

    folder: str
    db_bytes: int  # the uncompressed copy: every page of state.db, free ones too
    est_bytes: int  # the compressed backup, at the ratio of this home's newest one (else 40 %)
    free_bytes: int  # free on the folder's disk
    same_disk: bool  # the folder is on the disk Hermes writes to
    refused: str | None = None

    def to_dict(self) -> dict:
        return asdict(self)


def backup_cost(profile: Place, schema: SchemaInfo, folder: Path) -> BackupCost:
    """The copy, its compressed form and the room left for Hermes against the free space."""
    existing = next(p for p in (folder, *folder.parents) if p.exists())  # the folder may not exist yet
    same_disk = existing.stat().st_dev == profile.db_path.stat().st_dev
    try:
        newest = [r for r in list_backups(folder) if r.home == str(profile.home) and r.raw_bytes]
    except KeeperError:
        newest = []
    ratio = newest[-1].bytes / newest[-1].raw_bytes if newest else 0.4
    db = schema.db_bytes
    est = int(db * ratio)
    free = shutil.disk_usage(existing).free
    need = db + est + RESERVE_BYTES  # the copy, its compressed form, room left for Hermes
    refused = None
    # On another disk a full disk fails the backup (cleaned up), never Hermes: not refused ahead.
    if same_disk and free < need:
        refused = (
            f"backup of {profile.name} refused: it needs about {units.size(need)} on the disk Hermes "
            f"writes to and {units.size(free)} are free; free space, or back up to another disk "
            "(--dest DIR, or [backups] dest in keeper.toml)"
        )
    return BackupCost(str(folder), db, est, free, same_disk, refused)


def preflight_backup(profile: Place, schema: SchemaInfo, folder: Path) -> None:
    """Refuse a backup that would stall Hermes or fill the disk Hermes writes to.

    In a rollback journal a process holding the database refuses it: there every step's read
    lock holds Hermes's commits, and each commit restarts the copy; beside a gateway writing 20
    times a second the copy never finished and made writes wait up to 0.56 s (docs/backup.md,
    ``bench/backup_steps.py --journal-mode delete``)."""
    holders = find_holders(profile.db_path) if schema.journal_mode != "wal" else []
    if holders:
        raise KeeperError(
            f"state.db is in {schema.journal_mode} journal mode and open by "
            f"{'; '.join(h.describe() for h in holders)}: every commit of it would restart a snapshot,"
            " and each step of one holds its writes; back up while Hermes is stopped"
        )
    if refused := backup_cost(profile, schema, folder).refused:
        raise KeeperError(refused)


def source_mark(db_path: Path, now: float) -> str:
    """``state.db``'s identity and last write (device, inode, and size and mtime of it and its WAL,
    unless empty):
    equal marks, the same database unchanged. Read with ``stat`` only (plain reads of the header's
    change counter would drop this process's SQLite locks, and WAL commits do not bump it). A file
    written in the last :data:`QUIET_S` gets no mark ("") and so no skip: a commit in the same
    mtime tick would leave the mark as it was."""
    parts = []
    for p in (db_path, db_path.with_name("state.db-wal")):
        try:
            st = p.stat()
        except FileNotFoundError:
            st = None
        if st is None or (p != db_path and st.st_size == 0):  # an empty WAL (a reader made it) holds nothing
            parts.append("-")
            continue
        if st.st_mtime > now - QUIET_S:
            return ""
        parts.append(f"{st.st_dev}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}")
    return "/".join(parts)


@dataclass
class Copied:
    """How a page copy went (journaled with the backup)."""

    steps: int = 0
    restarts: int = 0
    max_step_ms: float = 0.0
    seconds: float = 0.0


def copy_pages(source: Path, dest: Path, journal_mode: str | None) -> Copied:
    """``source`` page for page into the new file ``dest``, in steps of :data:`STEP_BYTES`.

    WAL: one read transaction across the copy (consistent, never restarted, blocks no writer).
    Rollback journal: each step's own read lock; a commit of another connection restarts the copy
    (SQLite's rule), :data:`MAX_RESTARTS` times at most, then :class:`TryLater`."""
    src = connect_ro(source)
    dst = connect_file(dest)
    out, t0 = Copied(), time.perf_counter()
    last = [t0, -1]  # when the previous step ended; the pages it left

    def step(_status: int, remaining: int, _total: int) -> None:
        t = time.perf_counter()
        out.steps += 1
        out.max_step_ms = max(out.max_step_ms, (t - last[0]) * 1000)
        if last[1] >= 0 and remaining > last[1]:
            out.restarts += 1
            if out.restarts > MAX_RESTARTS:
                raise TryLater(
                    f"the backup restarted {out.restarts} times: Hermes committed during each copy of "
                    f"this {journal_mode}-journal database; try later, or while Hermes is stopped"
                )
        last[1] = remaining
        if remaining:
            time.sleep(STEP_REST_S)
        last[0] = time.perf_counter()

    try:
        # The copy is only an intermediate (the .zst is what is made durable): unsynced, its
        # 100s of MB never reach the disk in one burst that Hermes's own fsync waits behind.
        dst.execute("PRAGMA synchronous=OFF")
        dst.execute("PRAGMA journal_mode=OFF")
        if journal_mode == "wal":
            src.execute("BEGIN")
            src.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall()
        page_size = src.execute("PRAGMA page_size").fetchone()[0]
        src.backup(dst, pages=max(1, STEP_BYTES // page_size), progress=step)
    finally:
        dst.close()
        src.close()  # ends the read transaction
    out.seconds = round(time.perf_counter() - t0, 3)
    out.max_step_ms = round(out.max_step_ms, 1)
    return out


def _unchanged(profile: Place, earlier: list[BackupRecord], mark: str) -> BackupRecord | None:
    """The newest backup of this home, when it verifies and ``state.db`` is as it was then."""
    mine = [r for r in earlier if r.home == str(profile.home)]
    if mark and mine and mine[-1].source_mark == mark and verify_backup(mine[-1]):
        return replace(mine[-1], reused=True)
    return None


def _finish(snap: Path, comp: Path, pending: BackupRecord) -> BackupRecord:
    """The copy checked, compressed and renamed into place: ``pending`` with its sizes and sha256."""
    check = quick_check(snap)
    if check != "ok":
        raise KeeperError(f"backup of {pending.profile} failed: the copy fails quick_check ({check})")
    sha, size = _compress(snap, comp)
    record = replace(pending, bytes=size, raw_bytes=snap.stat().st_size, sha256=sha)
    durable_rename(comp, record.path)
    return record


def take_backup(
    profile: Place,
    dest_dir: Path | str | None = None,
    now: float | None = None,
    journal: Journal | None = None,
    *,
    schema: SchemaInfo | None = None,
) -> BackupRecord:
    """Snapshot, check, compress and record; raises KeeperError (cleaned up) on any failure.

    ``schema``: a run's, so a backup inside it does not read it again. When
    ``state.db`` is unchanged since this home's newest verified backup, that one is returned
    (``reused``) and nothing is written.
    """
    schema = schema or inspect(profile.db_path, check_timestamps=False)
    schema.require_readable()
    now = time.time() if now is None else now
    folder = backup_dir(profile, dest_dir)
    snap = comp = None
    try:
        preflight_backup(profile, schema, folder)
        profile.fs.folder(folder)  # inside the home: no symlinked keeper/ or backups/ on the way
        with _manifest_lock(folder):  # one backup at a time per folder
            for lo in _temp_files(folder):  # left by a backup that was killed
                HomeFS(folder).unlink(lo.path.name)
                if journal:
                    journal.write("backup_temp_removed", name=lo.path.name, bytes=lo.bytes)
            earlier = list_backups(folder)  # an unreadable manifest fails here, before any copying
            mark = source_mark(profile.db_path, time.time())  # before the copy: a later write changes it
            if same := _unchanged(profile, earlier, mark):
                if journal:
                    journal.write("backup_skipped", name=same.name, reason="state.db unchanged")
                return same
            stamp = _stamp(now, folder, {r.name for r in earlier})
            snap = private_file(folder / f"{TEMP_PREFIX}{stamp}.db.tmp")
            comp = private_file(folder / f"{TEMP_PREFIX}{stamp}.db.zst.tmp")
            source_bytes = sum(
                p.stat().st_size
                for p in (profile.db_path, profile.db_path.with_name("state.db-wal"))
                if p.exists()
            )
            copied = copy_pages(profile.db_path, snap, schema.journal_mode)
            record = _finish(
                snap,
                comp,
                BackupRecord(
                    name=f"state-{stamp}.db.zst",
                    profile=profile.name,
                    home=str(profile.home),
                    created_at=now,
                    bytes=0,
                    raw_bytes=0,
                    sha256="",
                    schema_version=schema.schema_version,
                    source_bytes=source_bytes,
                    source_mark=mark,
                    folder=folder,
                ),
            )
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
                for suffix in ("", "-journal", "-wal", "-shm"):  # the copy's own, quick_check's
                    HomeFS(folder).unlink(p.name + suffix)
    if journal:
        figures = {k: v for k, v in record.to_dict().items() if k not in ("home", "source_mark")}
        journal.write("backup", **figures, copy=asdict(copied))
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
    max_bytes: int | None = None,
    **rules: int,
) -> list[tuple[BackupRecord, Decision, bool]]:
    """Each backup (of ``home``, or of every home) with its decision and ``check``, newest first.

    ``rules`` are :func:`plan_rotation`'s (keep_last, keep_daily, keep_weekly, keep_monthly) and its
    defaults. ``max_bytes`` is ``[keeper] max_bytes``: what the rest of the home's ``keeper/``
    (archive, history, journal) leaves of it is each home's room for backups.

    Rules apply per home: one home's backups never push another's out of a shared folder.
    """
    records = [r for r in list_backups(folder) if home is None or of_home(r, home)]
    verified = {r.name: check(r) for r in records}
    by_name = {r.name: r for r in records}
    homes = {r.name: str(home) if home is not None else r.home for r in records}  # a moved home's: one group
    rows = []
    for h in sorted(set(homes.values())):
        group = [(r.name, r.created_at, verified[r.name], r.bytes) for r in records if homes[r.name] == h]
        room = None if max_bytes is None else max(0, max_bytes - other_keeper_bytes(Path(h), folder))
        for d in plan_rotation(group, now=now, max_bytes=room, **rules):
            rows.append((by_name[d.id], d, verified[d.id]))
    return sorted(rows, key=lambda row: row[0].created_at, reverse=True)


def tree_bytes(folder: Path) -> int:
    """The regular files under ``folder`` (never through a link; a linked folder counts nothing)."""
    total = 0
    if folder.is_symlink() or not folder.is_dir():
        return 0
    for dirpath, _dirs, names in os.walk(folder, followlinks=False):
        for n in names:
            with suppress(FileNotFoundError):
                st = os.lstat(os.path.join(dirpath, n))
                total += st.st_size if stat.S_ISREG(st.st_mode) else 0
    return total


def keeper_bytes(profile: Place, dest: Path | str | None = None) -> int:
    """The keeper's share of the home: ``keeper/``, and the backup folder where it is elsewhere
    in the home (one outside it is not the home's)."""
    folder = backup_dir(profile, dest).resolve()
    home, keeper = profile.home.resolve(), profile.keeper_dir.resolve()
    elsewhere = folder.is_relative_to(home) and not folder.is_relative_to(keeper)
    return tree_bytes(profile.keeper_dir) + (tree_bytes(folder) if elsewhere else 0)


def other_keeper_bytes(home: Path, folder: Path) -> int:
    """``<home>/keeper/`` without the backup folder ``folder`` (when it is in there)."""
    keeper = home / KEEPER_DIR
    inside = Path(folder).resolve().is_relative_to(keeper.resolve())
    return tree_bytes(keeper) - (tree_bytes(Path(folder)) if inside else 0)


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
