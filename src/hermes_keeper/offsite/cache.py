"""The fleet's archive cache: the newest archive of every host and profile, fetched from restic.

``<cache>/<repository digest>/<host>/<profile>/`` (0700 folders, 0600 files) holds that host's
archive files as its newest ``kind=archive`` snapshot has them, the archive's search index
(built at sync, so a search after it only reads) and ``sync.json``: the snapshot, each file's
content as restic recorded it (a digest of its size and its data blob ids, read from the
snapshot's tree: one ``restic cat blob`` per changed snapshot) and each local file's size,
mtime and sha256 as the sync left it.

A sync fetches only the files whose restic content changed (``restic restore --include ...
--verify``: restic checks every blob against its SHA-256 id as it decrypts, and re-reads the
restored files against them), plus any cached file whose size or mtime moved and whose sha256
no longer matches (``verify``: every file's sha256). A snapshot whose tree id is the one synced
last time costs no restic call at all. Fetched files land in a private folder first and are
renamed into place only when restic succeeded: a failed sync leaves the cache as it was.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sqlite3
import time
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

from hermes_keeper.archive.index import open_index
from hermes_keeper.archive.query import searchable_fields
from hermes_keeper.archive.store import ARCHIVE_NAME, Archive, archive_exists
from hermes_keeper.backup.snapshot import sha256_file
from hermes_keeper.errors import KeeperError, TryLater
from hermes_keeper.fs import FILE_MODE, SQLITE_SIDES, HomeFS
from hermes_keeper.lock import try_flock
from hermes_keeper.offsite.copies import ARCHIVE, TAG, OffsiteCopy
from hermes_keeper.offsite.restic import Restic

SYNC_NAME = "sync.json"
LOCK_NAME = "sync.lock"
SYNC_FORMAT = 1
#: The private folder (in a host's cache folder) restic restores into; cleared before and after.
INCOMING = ".incoming"
#: What of a snapshot is the archive: its monthly databases and their SQLite sidecars.
ARCHIVE_FILE = re.compile(r"archive(-\d{4}-\d{2})?\.db(-wal|-journal)?")


def default_root() -> Path:
    """``$XDG_CACHE_HOME/hermes-keeper/fleet`` (else ``~/.cache/...``)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "hermes-keeper" / "fleet"


@contextmanager
def sync_lock(root: Path) -> Iterator[None]:
    """One sync at a time per cache (a nightly one and a hand-run one would clear each other's
    restore folder): an flock on ``<cache>/sync.lock``. Searches take no lock: a file is only
    ever replaced whole, by a rename."""
    fd = HomeFS(root).open_private(LOCK_NAME)
    try:
        if not try_flock(fd):
            raise TryLater(f"another fleet sync is updating {root}; nothing changed, try again later")
        yield
    finally:
        os.close(fd)


def repository_key(repository: str) -> str:
    """The cache folder of a repository: a digest of its name (URLs, paths: never a path part)."""
    return hashlib.sha256(repository.encode()).hexdigest()[:16]


def folder_name(name: str) -> str:
    """A host or profile name as one plain, visible folder name (percent-quoted where it is not)."""
    quoted = urllib.parse.quote(name, safe="-_.@+=") or "%00"
    return "%2E" + quoted[1:] if quoted.startswith(".") else quoted


@dataclass(frozen=True)
class CachedArchive:
    """One host and profile's archive in the cache, as its last sync left it."""

    repository: str
    host: str
    profile: str
    folder: Path
    snapshot: str
    time: float  # when the snapshot was taken

    def open(self) -> Archive:
        """The cached archive, opened as the keeper opens its own (never created)."""
        if not archive_exists(self.folder):
            raise KeeperError(f"{self.host}/{self.profile}: no archive in the cache ({self.folder})")
        return Archive(self.folder / ARCHIVE_NAME, create=False)


@dataclass
class SyncRow:
    """What one sync did for one host and profile (or, host None, a repository it could not read)."""

    repository: str
    host: str | None
    profile: str | None
    snapshot: str | None = None
    fetched: int = 0  # files restored from restic
    fetched_bytes: int = 0
    unchanged: int = 0  # files whose restic content and local copy were already the synced ones
    repaired: int = 0  # cached files that no longer matched what the sync left: fetched again
    removed: int = 0  # cached files the newest snapshot no longer has
    error: str | None = None

    def to_dict(self) -> dict:
        return asdict(self)


def _digest(node: dict) -> str:
    """A file's content as restic recorded it: its size and its data blobs' SHA-256 ids."""
    return hashlib.sha256(json.dumps([node.get("size", 0), node.get("content") or []]).encode()).hexdigest()


def remote_files(restic: Restic, tree: str) -> dict[str, str]:
    """The archive files of a snapshot's tree (``restic cat blob``), each with its :func:`_digest`."""
    text = restic.run("cat", "blob", tree)
    try:
        nodes = json.loads(text).get("nodes") or []
    except (ValueError, AttributeError):
        raise KeeperError(f"restic tree {tree[:8]} is not JSON; is it restic >= 0.12?") from None
    return {
        n["name"]: _digest(n)
        for n in nodes
        if n.get("type") == "file" and ARCHIVE_FILE.fullmatch(n.get("name") or "")
    }


def _database(name: str) -> str:
    return next((name[: -len(s)] for s in SQLITE_SIDES if name.endswith(s)), name)


def newest_archives(restic: Restic) -> list[tuple[OffsiteCopy, str]]:
    """The newest archive snapshot of each host and profile with its tree id: one ``snapshots``."""
    newest: dict[tuple[str, str], tuple[OffsiteCopy, str]] = {}
    for raw in restic.json("snapshots", "--tag", TAG) or []:
        copy = OffsiteCopy.from_restic(raw)
        key = (copy.host, copy.profile)
        if copy.kind == ARCHIVE and (key not in newest or copy.time >= newest[key][0].time):
            newest[key] = (copy, raw.get("tree", ""))
    return [newest[k] for k in sorted(newest)]


class HostCache:
    """One host and profile's cache folder, through the filesystem door."""

    def __init__(self, root: Path, repository: str, host: str, profile: str):
        self.fs = HomeFS(root)
        self.parts = (repository_key(repository), folder_name(host), folder_name(profile))
        self.folder = self.fs.path(*self.parts)

    def state(self) -> dict:
        return self.read(self.fs, self.parts)

    @staticmethod
    def read(fs: HomeFS, parts: tuple[str, ...]) -> dict:
        """A folder's ``sync.json``; ``{}`` when there is none or it cannot be read."""
        raw = fs.read_bytes(*parts, SYNC_NAME) if fs.plain_dir(*parts) else None
        try:
            doc = json.loads(raw) if raw else {}
        except ValueError:  # a state file cut short: everything is checked again
            return {}
        return doc if isinstance(doc, dict) and doc.get("format") == SYNC_FORMAT else {}

    def write_state(self, doc: dict) -> None:
        """``sync.json``, complete or not at all (a 0600 file renamed over it)."""
        tmp = f".{SYNC_NAME}.{os.getpid()}.tmp"
        fd = self.fs.open_private(*self.parts, tmp, flags=os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        with os.fdopen(fd, "w") as fh:
            json.dump(doc | {"format": SYNC_FORMAT}, fh, sort_keys=True)
            fh.flush()
            os.fsync(fh.fileno())
        self.fs.rename(*self.parts, tmp, to=SYNC_NAME)

    def stamp(self, name: str) -> list:
        """What a cached file is now: [size, mtime_ns, sha256]."""
        st = self.fs.regular(*self.parts, name)
        return [st.st_size, st.st_mtime_ns, sha256_file(self.fs.path(*self.parts, name))]

    def restamp(self, name: str, recorded: list | None) -> list:
        """``recorded`` while the file's size and mtime are still the recorded ones, else :meth:`stamp`."""
        st = self.fs.regular(*self.parts, name)
        same = recorded and st is not None and [st.st_size, st.st_mtime_ns] == recorded[:2]
        return recorded if same else self.stamp(name)

    def intact(self, name: str, recorded: list | None, verify: bool) -> bool:
        """The cached file is the one the last sync left: same size and mtime (``verify``: or
        not, its sha256 is read either way when they moved)."""
        st = self.fs.regular(*self.parts, name)
        if st is None or not recorded:
            return False
        if not verify and [st.st_size, st.st_mtime_ns] == recorded[:2]:
            return True
        return sha256_file(self.fs.path(*self.parts, name)) == recorded[2]

    def databases(self) -> list[str]:
        return [
            n
            for n, _ in self.fs.entries(*self.parts) or []
            if ARCHIVE_FILE.fullmatch(n) and n == _database(n)
        ]

    def fetch(self, restic: Restic, snapshot: str, names: list[str]) -> int:
        """Restore ``names`` of ``snapshot`` (verified by restic) and put them in place, each
        database's old sidecars removed first; the bytes fetched. Nothing is replaced unless
        restic restored every one."""
        self.fs.remove_tree(*self.parts, INCOMING)
        work = self.fs.private_dir(*self.parts, INCOMING)
        try:
            includes = [a for n in names for a in ("--include", f"/{n}")]
            restic.run("restore", snapshot, "--target", str(work), "--verify", *includes)
            got = 0
            for n in names:
                st = self.fs.regular(*self.parts, INCOMING, n)
                if st is None:
                    raise KeeperError(f"restic restored no {n} from snapshot {snapshot[:8]}")
                self.fs.chmod(*self.parts, INCOMING, n, mode=FILE_MODE)
                got += st.st_size
            for db in {_database(n) for n in names}:
                for side in SQLITE_SIDES:
                    self.fs.unlink(*self.parts, db + side)
            for n in names:
                os.rename(work / n, self.folder / n)
            self.fs.sync(*self.parts)
            return got
        finally:
            self.fs.remove_tree(*self.parts, INCOMING)

    def settle(self) -> None:
        """Open the archive once (a fetched WAL is checkpointed into its database) and bring its
        search index up to date: a search after the sync only reads."""
        if not archive_exists(self.folder):
            return
        with Archive(self.folder / ARCHIVE_NAME, create=False) as store:
            index = open_index(store, searchable_fields)
            if index is not None:
                try:
                    index.refresh(store)
                except sqlite3.OperationalError:  # a full disk: the index is a cache, a search builds it
                    pass
                finally:
                    index.close()


def sync_archive(restic: Restic, root: Path, copy: OffsiteCopy, tree: str, verify: bool = False) -> SyncRow:
    """Bring one host and profile's cached archive to ``copy`` (its newest archive snapshot)."""
    cache = HostCache(root, restic.repository, copy.host, copy.profile)
    row = SyncRow(restic.repository, copy.host, copy.profile, copy.short_id)
    cache.fs.private_dir(*cache.parts)
    state = cache.state()
    before, local = state.get("remote") or {}, state.get("local") or {}
    remote = before if tree and state.get("tree") == tree else remote_files(restic, tree)
    groups: dict[str, list[str]] = {}
    for name in sorted(remote):
        groups.setdefault(_database(name), []).append(name)
    fetch = []
    for db, names in groups.items():
        changed = any(before.get(n) != remote[n] for n in names)
        if not changed and cache.intact(db, local.get(db), verify):
            row.unchanged += len(names)
            continue
        row.repaired += not changed
        fetch += names
    if fetch:
        row.fetched_bytes = cache.fetch(restic, copy.id, fetch)
        row.fetched = len(fetch)
    for db in (d for d in cache.databases() if d not in groups):
        row.removed += sum(cache.fs.unlink(*cache.parts, db + s) is not None for s in ("", *SQLITE_SIDES))
    if fetch or row.removed or not state:
        cache.settle()
    fetched = {_database(n) for n in fetch}
    doc = {"repository": restic.repository, "host": copy.host, "profile": copy.profile, "tree": tree}
    doc |= {"snapshot": copy.id, "time": copy.time, "remote": remote, "synced": time.time()}
    doc["local"] = {db: cache.restamp(db, None if db in fetched else local[db]) for db in groups}
    cache.write_state(doc)
    return row


def sync_repository(restic: Restic, root: Path, verify: bool = False) -> list[SyncRow]:
    """Every host and profile of one repository; a host that fails is its row's error, the
    others still sync. Raises :class:`KeeperError` when the repository cannot be listed."""
    rows = []
    for copy, tree in newest_archives(restic):
        try:
            rows.append(sync_archive(restic, root, copy, tree, verify))
        except (KeeperError, OSError) as exc:  # OSError: the cache's disk (full, read-only)
            why = str(exc) if isinstance(exc, KeeperError) else f"cache: {exc}"
            rows.append(SyncRow(restic.repository, copy.host, copy.profile, copy.short_id, error=why))
    return rows


def cached(root: Path, repository: str) -> list[CachedArchive]:
    """The archives a sync left in the cache for ``repository``, by host and profile."""
    fs, key, out = HomeFS(root), repository_key(repository), []
    for host, _ in fs.entries(key) or []:
        for profile, _ in fs.entries(key, host) or [] if fs.plain_dir(key, host) else []:
            doc = HostCache.read(fs, (key, host, profile))
            folder = fs.path(key, host, profile)
            if doc.get("repository") == repository and archive_exists(folder):
                out.append(
                    CachedArchive(
                        repository, doc["host"], doc["profile"], folder, doc["snapshot"], doc["time"]
                    )
                )
    return sorted(out, key=lambda c: (c.host, c.profile))
