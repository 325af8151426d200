"""Put a backup back as ``state.db`` in a way that cannot make things worse.

Refuse while any process holds the database (unless forced); verify the sha256 the
manifest recorded; decompress next to ``state.db``; ``integrity_check`` and
schema-check the result; give it the journal mode (WAL or rollback) and auto_vacuum of the
database it replaces, as Hermes and the keeper's compact left them; only then keep the
current ``state.db`` aside as a safety copy (0600) and rename the restored file into place.
A bad backup is refused before anything moves.

The swap is safe against SIGKILL at every step (:func:`_swap`): a hot ``-journal`` (a write
killed before its commit) is rolled back and the current ``-wal`` checkpointed into
``state.db`` first, so ``state.db`` alone holds every commit, and the old file is kept by a
hard link while the restored one replaces it in one rename. Every sidecar SQLite may replay
(``-journal``, ``-wal``, ``-shm``) goes aside with the safety copy, named to match, also when
``state.db`` itself is gone: there is never a moment without a complete ``state.db``, nor one
with a sidecar beside a file it does not belong to.
"""

from __future__ import annotations

import os
import sqlite3
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import zstandard

from hermes_keeper.backup.snapshot import (
    BackupRecord,
    backup_dir,
    decompress_to,
    list_backups,
    match_modes,
    of_home,
    verify_backup,
)
from hermes_keeper.errors import KeeperError, os_error_line
from hermes_keeper.fs import DB_FILES, DB_NAME, FILE_MODE, HomeFS, fsync_file
from hermes_keeper.journal import Journal
from hermes_keeper.place import Place
from hermes_keeper.sqlite.connect import connect_ro, connect_rw
from hermes_keeper.sqlite.holders import find_holders
from hermes_keeper.sqlite.schema import check_line, inspect

SAFETY_PREFIX = "state.db.keeper-before-restore-"
RESTORE_TMP = ".state.db.keeper-restore.tmp"
#: The files SQLite reads beside a database and may replay into it (a hot rollback journal, a WAL).
SIDECARS = ("-journal", "-wal", "-shm")


@dataclass
class RestoreResult:
    restored: str
    safety_copy: str | None  # file name in the home, None when there was no state.db
    sessions: int
    messages: int
    schema_version: int | None
    journal_mode: str | None = None  # of the restored file
    auto_vacuum: str | None = None

    def to_dict(self) -> dict:
        return asdict(self)


def find_backup(profile: Place, name: str | Path | None, dest_dir: Path | str | None = None) -> BackupRecord:
    """A backup by file name (in the folder) or path, or the newest of this home when ``name`` is None."""
    folder = backup_dir(profile, dest_dir)
    if name is not None:  # a path's folder, if it has one, and its file name as the manifest has it
        folder, name = (folder if Path(name).parent == Path(".") else Path(name).parent), Path(name).name
    records = list_backups(folder)
    if name is None:
        mine = [r for r in records if of_home(r, profile.home)]
        if not mine:
            raise KeeperError(f"no backups of {profile.home} in {folder}")
        return mine[-1]
    for r in records:
        if r.name == name:
            return r
    raise KeeperError(
        f"backup {name!r} is not in {folder / 'manifest.json'} (no sha256 to verify it against)"
    )


def _refuse_if_held(profile: Place) -> None:
    holders = find_holders(profile.db_path)
    if holders:
        who = "; ".join(h.describe() for h in holders)
        raise KeeperError(
            f"refusing to restore while the database is open by {who}; stop Hermes or use --force"
        )


def restore_backup(
    profile: Place,
    record_or_path: BackupRecord | Path | str,
    force: bool = False,
    journal: Journal | None = None,
) -> RestoreResult:
    """Replace ``state.db`` with a verified backup; the current files are kept aside, nothing is deleted."""
    record = (
        record_or_path if isinstance(record_or_path, BackupRecord) else find_backup(profile, record_or_path)
    )
    for name in DB_FILES:  # renamed aside and chmod-ed below: never a link to a file elsewhere
        profile.fs.regular(name)
    if not force:
        _refuse_if_held(profile)
    if not verify_backup(record):
        raise KeeperError(
            f"backup {record.path} is damaged or missing (size/sha256 mismatch); nothing was changed"
        )
    fs, tmp = profile.fs, profile.home / RESTORE_TMP
    try:
        for suffix in ("", *SIDECARS):  # left by a restore that was killed (we hold the keeper lock)
            fs.unlink(RESTORE_TMP + suffix)
        fs.private_file(RESTORE_TMP)
        decompress_to(record, tmp)
        conn = connect_ro(tmp)
        try:
            check = conn.execute("PRAGMA integrity_check").fetchone()[0]
        finally:
            conn.close()
        if check != "ok":
            raise KeeperError(
                f"backup {record.name} expands to a damaged database ({check}); nothing was changed"
            )
        info = inspect(tmp, check_timestamps=False)
        info.require_readable()
        _roll_back(profile)  # a hot -journal: its modes cannot be read before
        current = inspect(profile.db_path, check_timestamps=False)  # gone or unreadable: the backup's own
        match_modes(tmp, current.journal_mode, current.auto_vacuum)
        _check_restored(fs, tmp, record)
        if not force:
            _refuse_if_held(profile)  # Hermes may have started while we decompressed
        _same_owner_and_mode(fs)
        fsync_file(tmp)
        safety = _swap(profile)
    except OSError as exc:
        raise KeeperError(
            f"restore of {record.name} failed: {os_error_line(exc)}; nothing was changed"
        ) from None
    except (sqlite3.Error, zstandard.ZstdError) as exc:
        raise KeeperError(f"backup {record.name} cannot be read ({exc}); nothing was changed") from None
    finally:
        for suffix in ("", *SIDECARS):
            fs.unlink(RESTORE_TMP + suffix)
    conn = connect_ro(profile.db_path)
    try:
        sessions = conn.execute("SELECT count(*) FROM sessions").fetchone()[0]
        messages = conn.execute("SELECT count(*) FROM messages").fetchone()[0]
    finally:
        conn.close()
    after = inspect(profile.db_path, check_timestamps=False)
    result = RestoreResult(
        record.name, safety, sessions, messages, info.schema_version, after.journal_mode, after.auto_vacuum
    )
    if journal:
        journal.write("restored", forced=force, **result.to_dict())
    return result


def _same_owner_and_mode(fs: HomeFS) -> None:
    """The restored file gets the current file's owner and mode: Hermes may run as another user."""
    st = fs.regular(DB_NAME)
    if st is None:
        return
    owner = (st.st_uid, st.st_gid) if os.geteuid() == 0 else None
    fs.chmod(RESTORE_TMP, mode=st.st_mode & 0o777, owner=owner)


def _checkpoint(db: Path) -> None:
    """Every commit of the ``-wal`` into ``state.db`` and the ``-wal`` emptied (TRUNCATE).

    A checkpoint that cannot finish (a reader or writer got in) is a refusal: the swap must
    not start while the ``-wal`` still holds commits.
    """
    side = db.with_name(db.name + "-wal")
    if not side.exists():
        return
    conn = connect_rw(db, busy_timeout_s=5)
    try:
        busy, _log, _done = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
    finally:
        conn.close()
    if busy or (side.exists() and side.stat().st_size):
        raise KeeperError(f"{db}: its -wal could not be checkpointed (in use?); nothing was changed")


def _roll_back(profile: Place) -> None:
    """A hot ``state.db-journal`` (Hermes killed in the middle of a write) rolled back into
    ``state.db``, as Hermes's next open would: a read-write open does it, and SQLite's rollback
    is itself safe against a crash. Afterwards ``state.db`` alone is whole, a safety copy of it
    too. Nothing happens without a ``-journal``; one that is not hot is left as it is.
    """
    if profile.fs.lstat(DB_NAME) is None or profile.fs.lstat(DB_NAME + "-journal") is None:
        return
    try:
        conn = connect_rw(profile.db_path, busy_timeout_s=5)
        try:
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        finally:
            conn.close()
    except sqlite3.Error as exc:
        raise KeeperError(
            f"{profile.db_path}: its -journal (a write Hermes did not finish) could not be rolled back "
            f"({exc}); start Hermes once, then restore; nothing was changed"
        ) from None


def _check_restored(fs: HomeFS, tmp: Path, record: BackupRecord) -> None:
    """The restored file as it will be put in place, opened and checked once more: whole, and with
    no sidecar of its own left (its modes were just set; a ``-wal`` would hold commits)."""
    conn = connect_ro(tmp)
    try:
        check = check_line(conn.execute("PRAGMA quick_check(5)").fetchall())
    finally:
        conn.close()
    sizes = {RESTORE_TMP + side: fs.lstat(RESTORE_TMP + side) for side in ("-journal", "-wal")}
    left = [name for name, st in sizes.items() if st is not None and st.st_size]
    if check != "ok" or left:
        why = check if check != "ok" else f"{', '.join(left)} left beside it"
        raise KeeperError(f"backup {record.name} did not come out whole ({why}); nothing was changed")


def _set_aside(fs: HomeFS, safety: str) -> None:
    """Every sidecar of ``state.db`` renamed to the safety name's, so nothing of the old file stays
    beside the restored one and the safety copy keeps what it needs."""
    for suffix in SIDECARS:
        if fs.lstat(DB_NAME + suffix) is not None:
            fs.rename(DB_NAME + suffix, to=f"{safety}{suffix}", sync=False)


def _safety_name(fs: HomeFS) -> str:
    """``state.db.keeper-before-restore-<UTC time>``, numbered where it or a sidecar of it exists."""
    base = f"{SAFETY_PREFIX}{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}"
    safety, n = base, 1
    while any(fs.lstat(f"{safety}{s}") is not None for s in ("", *SIDECARS)):
        n += 1
        safety = f"{base}-{n}"
    return safety


def _swap(profile: Place) -> str | None:
    """Put the restored file in place of state.db, keeping the current one as a safety copy (0600).

    Each step leaves a consistent home if the process dies right after it:
    roll back a hot -journal and checkpoint (state.db alone holds every commit, no sidecar holds
    anything it needs) -> hard link state.db to the safety name (the same file under two names)
    -> rename its sidecars (-journal, -wal, -shm) aside, named to match -> rename the restored
    file over state.db (atomic). With no state.db, sidecars left beside the name (a stale -wal
    would be replayed into the restored file) are set aside the same way. Returns the safety
    name (None when there was no state.db).
    """
    fs = profile.fs
    if fs.lstat(DB_NAME) is None:
        if any(fs.lstat(DB_NAME + s) is not None for s in SIDECARS):
            _set_aside(fs, _safety_name(fs))
            fs.sync()
        fs.rename(RESTORE_TMP, to=DB_NAME)
        return None
    _roll_back(profile)
    _checkpoint(profile.db_path)
    safety = _safety_name(fs)
    fs.link(DB_NAME, to=safety, sync=False)
    fs.chmod(safety, mode=FILE_MODE)
    fs.sync()
    _set_aside(fs, safety)
    fs.rename(RESTORE_TMP, to=DB_NAME)
    return safety
