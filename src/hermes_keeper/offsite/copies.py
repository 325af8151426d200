"""Off-host copies in a restic repository: push, list, rotate, verify, restore, pull.

Each push sends two restic snapshots, tagged ``hermes-keeper``, ``profile=<name>`` and
``kind=state`` or ``kind=archive``, under ``--host`` (``[offsite] host``, else the hostname):
the newest local backup of ``state.db`` as the folder ``state.sql.d`` (:mod:`backup.dump`: SQL
files of its rows laid out so that a night changes few of them, and restic's chunking finds the
rest; ``state.db``, the page copy, where the dump cannot carry an index or the disk has no room
to make it), dated by restic
``--time`` as the backup was taken, and the archive files as they are (the run holds the
keeper lock: nobody writes them).
A backup already in the repository is not sent again, so a push that failed is caught
up by the next. Rotation is ``restic forget`` with the local rules, grouped by tags (state and
archive apart); ``restic check --read-data-subset`` runs every ``[offsite] check_every``.

A restore fetches ``state.sql.d`` (loaded into a new database) or ``state.db`` into a private
folder, takes an ordinary verified backup of it there and hands that to
:func:`backup.restore.restore_backup`: the same checks, the same safety copy. A pull adds
the archive files this home lacks and never overwrites one it has.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import socket
import stat
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO

import zstandard

from hermes_keeper import units
from hermes_keeper.archive.store import ARCHIVE_NAME, archive_paths
from hermes_keeper.backup import dump
from hermes_keeper.backup.restore import RestoreResult, restore_backup
from hermes_keeper.backup.snapshot import (
    BackupRecord,
    backup_dir,
    decompress_to,
    list_backups,
    sha256_file,
    take_backup,
    verify_backup,
)
from hermes_keeper.errors import KeeperError
from hermes_keeper.fs import FILE_MODE, SQLITE_SIDES, HomeFS, plain_name
from hermes_keeper.journal import Journal, read_journal
from hermes_keeper.offsite.restic import Restic
from hermes_keeper.place import Place

TAG = "hermes-keeper"
STATE, ARCHIVE, REPORT = "state", "archive", "report"
STATE_NAME, DUMP_NAME, REPORT_NAME = "state.db", "state.sql.d", "report.json"
#: Reports kept per host and profile (``restic forget --keep-last``): the fleet reads the newest.
REPORTS_KEPT = 30
#: The private folder (under ``keeper/``) a restore or pull fetches into; removed afterwards.
WORK = ".offsite-work"
PUSHED, FAILED, CHECKED = "offsite_push", "offsite_failed", "offsite_checked"
CHUNK = 1 << 20
#: Free space left after opening a backup and dumping it (else the page copy goes instead).
DUMP_ROOM = 256 << 20


@dataclass(frozen=True)
class OffsiteCopy:
    """One restic snapshot the keeper made."""

    id: str
    short_id: str
    kind: str  # state | archive
    time: float
    host: str
    profile: str

    @classmethod
    def from_restic(cls, s: dict) -> OffsiteCopy:
        tags = dict(t.split("=", 1) for t in s.get("tags") or [] if "=" in t)
        return cls(
            s["id"],
            s["short_id"],
            tags.get("kind", "?"),
            _ts(s["time"]),
            s["hostname"],
            tags.get("profile", "?"),
        )

    def to_dict(self) -> dict:
        return asdict(self)


def _ts(text: str) -> float:
    """restic's RFC 3339 time (nanoseconds, ``Z`` or an offset) as unix seconds."""
    head, frac, zone = text, "", "+00:00"
    if text.endswith("Z"):
        head = text[:-1]
    elif len(text) > 6 and text[-6] in "+-":
        head, zone = text[:-6], text[-6:]
    head, _, frac = head.partition(".")
    return dt.datetime.fromisoformat(f"{head}.{(frac + '000000')[:6]}{zone}").timestamp()


def host_of(offsite: dict) -> str:
    return offsite.get("host") or socket.gethostname()


def _tags(profile: str, kind: str | None = None) -> list[str]:
    tags = f"{TAG},profile={profile}" + (f",kind={kind}" if kind else "")
    return ["--tag", tags]


def list_copies(restic: Restic, host: str, profile: str) -> list[OffsiteCopy]:
    """This host's copies of ``profile``, oldest first (its run reports are no copies)."""
    rows = restic.json("snapshots", "--host", host, *_tags(profile))
    copies = (OffsiteCopy.from_restic(s) for s in rows or [])
    return sorted((c for c in copies if c.kind != REPORT), key=lambda c: c.time)


def every_snapshot(restic: Restic) -> list[OffsiteCopy]:
    """Every snapshot the keeper made in the repository, of every host and profile, oldest first."""
    rows = restic.json("snapshots", "--tag", TAG)
    return sorted((OffsiteCopy.from_restic(s) for s in rows or []), key=lambda c: c.time)


def send_report(restic: Restic, host: str, profile: str, doc: dict) -> str | None:
    """``doc`` as ``report.json``, a snapshot of kind ``report`` dated by its ``time``; then the
    reports past :data:`REPORTS_KEPT` forgotten. The new snapshot's id."""
    data = json.dumps(doc, sort_keys=True).encode()
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(doc["time"]))
    args = ("--stdin", "--stdin-filename", REPORT_NAME, "--time", stamp)
    out = _backup(restic, host, profile, REPORT, *args, feed=lambda stdin: stdin.write(data))
    keep = ["--group-by", "host,tags", "--keep-last", str(REPORTS_KEPT), "--prune"]
    restic.json("forget", "--host", host, *_tags(profile, REPORT), *keep)
    return out.get("snapshot_id")


def read_report(restic: Restic, copy: OffsiteCopy) -> dict:
    """The ``report.json`` of a report snapshot."""
    text = restic.run("dump", copy.id, f"/{REPORT_NAME}")
    try:
        doc = json.loads(text)
    except ValueError:
        raise KeeperError(f"report {copy.short_id} of {copy.host}/{copy.profile} is not JSON") from None
    if not isinstance(doc, dict):
        raise KeeperError(f"report {copy.short_id} of {copy.host}/{copy.profile} is not a JSON object")
    return doc


@dataclass
class PushResult:
    """What one push sent: the snapshots made (None: nothing new), bytes added, snapshots forgotten."""

    state: str | None = None
    backup: str | None = None  # the local backup it sent
    state_file: str | None = None  # as state.sql.d (the dump) or state.db (the page copy)
    archive: str | None = None
    added_bytes: int = 0  # what restic stored that the repository did not hold (both kinds)
    state_added_bytes: int = 0
    state_bytes: int = 0  # the state copy sent (the dump's size): what one full snapshot is
    processed_bytes: int = 0
    forgotten: list[str] = field(default_factory=list)
    checked: bool | None = None  # None: no check was due (or it could not run now)
    newest: float | None = None  # when the newest off-host state.db was taken (`check` reads it)
    seconds: float = 0.0

    def to_dict(self) -> dict:
        return asdict(self)

    def summary(self) -> str:
        sent = [f"state.db {self.state} ({self.backup})" if self.state else "state.db already there"]
        if self.archive:
            sent.append(f"archive {self.archive}")
        return f"off-host: {', '.join(sent)}; repository grew by {units.size(self.added_bytes)}"


def newest_backup(place: Place, dest: str | None) -> BackupRecord | None:
    mine = [r for r in list_backups(backup_dir(place, dest)) if r.home == str(place.home)]
    return next((r for r in reversed(mine) if verify_backup(r)), None)


def _feed(record: BackupRecord):
    """Write the backup's database, decompressed, to restic's stdin."""

    def feed(stdin: IO[bytes]) -> None:
        with open(record.path, "rb") as src:
            reader = zstandard.ZstdDecompressor().stream_reader(src)
            for block in iter(lambda: reader.read(CHUNK), b""):
                stdin.write(block)

    return feed


def _send_state(place: Place, restic: Restic, host: str, record: BackupRecord, res: PushResult) -> dict:
    """The backup as the folder ``state.sql.d`` where it can go so (:mod:`backup.dump`, made from
    a copy in ``keeper/``), else as ``state.db``; restic's summary."""
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(record.created_at))
    with workspace(place) as work:
        name, args, feed = STATE_NAME, ("--stdin", "--stdin-filename", STATE_NAME), _feed(record)
        if shutil.disk_usage(work).free > 2 * record.raw_bytes + DUMP_ROOM:
            decompress_to(record, work / STATE_NAME)
            if dump.dumpable(work / STATE_NAME):
                dump.write_dump(work / STATE_NAME, work / DUMP_NAME)
                name, args, feed = DUMP_NAME, (DUMP_NAME,), None
        out = _backup(restic, host, place.name, STATE, *args, "--time", stamp, feed=feed, cwd=work)
    res.state, res.backup, res.state_file = out.get("snapshot_id"), record.name, name
    res.newest = max(res.newest or 0, int(record.created_at))
    return out


def _archive_names(place: Place) -> list[str]:
    """The archive's files in ``keeper/`` (its monthly databases and their SQLite sidecars)."""
    names = []
    for p in archive_paths(place.keeper_dir / ARCHIVE_NAME):
        names += [p.name + side for side in ("", *SQLITE_SIDES) if (p.parent / (p.name + side)).is_file()]
    return [n for n in names if not n.endswith("-shm")]


def _backup(restic: Restic, host: str, profile: str, kind: str, *args: str, **kw) -> dict:
    out = restic.json("backup", "--host", host, *_tags(profile, kind), *args, **kw)
    return out if isinstance(out, dict) else {}


def push(
    place: Place, offsite: dict, rotation: dict, dest: str | None, journal: Journal | None
) -> PushResult:
    """Send the newest local backup (unless it is there already) and the archive, then rotate
    and, when due, check. Raises :class:`KeeperError` (one line) on the first failure."""
    t0 = time.perf_counter()
    restic = restic_for(offsite)
    host, res = host_of(offsite), PushResult()
    record = newest_backup(place, dest)
    there = {int(c.time) for c in list_copies(restic, host, place.name) if c.kind == STATE}
    res.newest = max(there, default=None)
    sums = []
    if record is not None and int(record.created_at) not in there:
        sums.append(_send_state(place, restic, host, record, res))
    names = _archive_names(place)
    if names:
        sums.append(_backup(restic, host, place.name, ARCHIVE, *names, cwd=place.keeper_dir))
        res.archive = sums[-1].get("snapshot_id")
    res.state_added_bytes = sums[0].get("data_added", 0) if res.state else 0
    res.state_bytes = sums[0].get("total_bytes_processed", 0) if res.state else 0
    res.added_bytes = sum(s.get("data_added", 0) for s in sums)
    res.processed_bytes = sum(s.get("total_bytes_processed", 0) for s in sums)
    res.forgotten = forget(restic, host, place.name, rotation)
    if check_due(place, offsite["check_every"]):
        res.checked = check(place, restic, offsite["check_subset"], journal)
    res.seconds = round(time.perf_counter() - t0, 2)
    if journal:
        journal.write(PUSHED, **res.to_dict())
    return res


def forget(restic: Restic, host: str, profile: str, rotation: dict, dry_run: bool = False) -> list[str]:
    """``restic forget --prune`` by the local rotation rules (``keep_last``, ...), state and archive
    each on their own; the short ids removed (``dry_run``: that would be)."""
    keep = [a for k, n in rotation.items() if n for a in (f"--{k.replace('_', '-')}", str(n))]
    if not keep:  # restic refuses a forget without rules; so do we, keeping everything
        return []
    kinds = [a for kind in (STATE, ARCHIVE) for a in _tags(profile, kind)]  # reports: send_report's
    args = ["forget", "--host", host, *kinds, "--group-by", "host,tags", *keep]
    groups = restic.json(*args, "--dry-run" if dry_run else "--prune")
    return [s["short_id"] for g in groups or [] for s in g.get("remove") or []]


def check_due(place: Place, every_s: float, now: float | None = None) -> bool:
    now = time.time() if now is None else now
    last = max((r["ts"] for r in read_journal(place.keeper_dir) if r.get("action") == CHECKED), default=None)
    return last is None or now - last >= every_s


def check(place: Place, restic: Restic, subset: str, journal: Journal | None) -> bool | None:
    """``restic check --read-data-subset``: journaled (``check`` reads it), whether it passed;
    None when it could not run now (locked, unreachable: it is due again next time)."""
    try:
        restic.run("check", "--read-data-subset", subset)
        ok, why = True, ""
    except KeeperError as exc:
        if exc.exit_code != 2:  # not a verdict on the data
            return None
        ok, why = False, str(exc)
    if journal:
        journal.write(CHECKED, ok=ok, subset=subset, problem=why)
    return ok


def pick(copies: list[OffsiteCopy], kind: str, snapshot: str | None) -> OffsiteCopy:
    """The newest copy of ``kind``, or the one whose id starts with ``snapshot``."""
    mine = [c for c in copies if c.kind == kind]
    if snapshot:
        mine = [c for c in mine if c.id.startswith(snapshot)]
        if len(mine) != 1:
            raise KeeperError(
                f"{snapshot!r} names {len(mine)} off-host {kind} copies (see `backups --offsite`)"
            )
    if not mine:
        raise KeeperError(
            f"no off-host {kind} copy of this profile in the repository (see `backups --offsite`)"
        )
    return mine[-1]


@contextmanager
def workspace(place: Place) -> Iterator[Path]:
    """A private folder under ``keeper/`` to fetch into, removed afterwards (also when killed:
    the next restore or pull clears it first)."""
    place.fs.remove_tree("keeper", WORK)
    path = place.fs.private_dir("keeper", WORK)
    try:
        yield path
    finally:
        place.fs.remove_tree("keeper", WORK)


@dataclass(frozen=True)
class OffsiteRestore:
    copy: OffsiteCopy
    result: RestoreResult

    def to_dict(self) -> dict:
        return self.result.to_dict() | {"snapshot": self.copy.to_dict()}


def restore_state(
    place: Place, offsite: dict, snapshot: str | None, force: bool, journal: Journal | None
) -> OffsiteRestore:
    """Put an off-host ``state.db`` back through the safe restore path."""
    restic = restic_for(offsite)
    copy = pick(list_copies(restic, host_of(offsite), place.name), STATE, snapshot)
    with workspace(place) as work:
        restic.run("restore", copy.id, "--target", str(work / "fetched"))
        fetched = Place(place.name, work / "fetched", work / "fetched")
        if (st := fetched.fs.lstat(DUMP_NAME)) is not None and stat.S_ISDIR(st.st_mode):
            fetched = Place(place.name, work / "loaded", work / "loaded")
            HomeFS(work).private_dir("loaded")
            dump.load_dump(work / "fetched" / DUMP_NAME, fetched.home / STATE_NAME)
        HomeFS(fetched.home).chmod(STATE_NAME, mode=FILE_MODE)
        record = take_backup(fetched, work / "backup")  # sha256 and quick_check, as any backup
        result = restore_backup(place, record, force=force, journal=journal)
    if journal:
        journal.write("offsite_restored", snapshot=copy.id, time=copy.time)
    return OffsiteRestore(copy, result)


@dataclass
class PullResult:
    snapshot: str
    added: list[str] = field(default_factory=list)  # files this home lacked
    same: list[str] = field(default_factory=list)  # already here, byte for byte
    kept: list[str] = field(default_factory=list)  # here with other content: the local one stays

    def to_dict(self) -> dict:
        return asdict(self)


def pull_archive(place: Place, offsite: dict, snapshot: str | None, journal: Journal | None) -> PullResult:
    """The archive files of an off-host copy this home lacks, put in ``keeper/``; none replaced.

    A database and its sidecars move together, and only where none of them is here."""
    restic = restic_for(offsite)
    copy = pick(list_copies(restic, host_of(offsite), place.name), ARCHIVE, snapshot)
    res = PullResult(copy.short_id)
    keeper = HomeFS(place.keeper_dir)
    with workspace(place) as work:
        restic.run("restore", copy.id, "--target", str(work))
        got = HomeFS(work)
        names = sorted(n for n, st in got.entries() or [] if plain_name(n) and n.startswith("archive"))
        for db in (n for n in names if n.endswith(".db")):
            group = [n for n in names if n == db or (n.startswith(db) and n[len(db) :] in SQLITE_SIDES)]
            here = [n for n in group if keeper.lstat(n) is not None]
            if not here:
                for n in group:
                    got.chmod(n, mode=FILE_MODE)
                    os.rename(work / n, place.keeper_dir / n)
                keeper.sync()
                res.added.append(db)
            elif keeper.regular(db) and sha256_file(work / db) == sha256_file(place.keeper_dir / db):
                res.same.append(db)
            else:
                res.kept.append(db)
    if journal:
        journal.write("offsite_pulled", **res.to_dict())
    return res


def restic_for(offsite: dict) -> Restic:
    restic = Restic.from_settings(offsite)
    if restic is None:
        raise KeeperError('no [offsite] repository in keeper.toml (`repository = "..."`); see docs/backup.md')
    return restic


def newest_copy_time(journal: list[dict]) -> float | None:
    """When the newest off-host ``state.db`` was taken, as the pushes journaled it (``check``
    asks no network); None when no push ever succeeded."""
    return max((r["newest"] for r in journal if r.get("action") == PUSHED and r.get("newest")), default=None)
