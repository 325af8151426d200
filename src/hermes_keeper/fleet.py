"""The fleet, read from restic repositories alone (issue 37): each host's runs report there.

With ``[offsite]`` set, a run sends beside its copies a ``report.json`` (restic kind
``report``, the same host and profile tags): its counts and sizes (no session ids, no
message text), the profile's ``check`` result, the time and the keeper's version.
:class:`Fleet` reads the newest report of each host and profile in every repository it is
given: a host whose newest report is older than ``[fleet] stale_after`` has stopped
reporting (CRITICAL); a repository that cannot be read is one UNKNOWN row, the others still show.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from hermes_keeper import __version__, units
from hermes_keeper.archive.export import ExportResult, write_export, write_markdown
from hermes_keeper.archive.query import ALL, Filters, SearchResult, resolve_id, search
from hermes_keeper.archive.store import ArchiveDamaged
from hermes_keeper.check import CRITICAL, STATUS, UNKNOWN, check_profile, worst
from hermes_keeper.errors import KeeperError
from hermes_keeper.fs import private_dir
from hermes_keeper.model.policy import Policy
from hermes_keeper.offsite import cache
from hermes_keeper.offsite import copies as offsite
from hermes_keeper.offsite.cache import CachedArchive, SyncRow
from hermes_keeper.offsite.restic import Restic
from hermes_keeper.place import Place

REPORT_FORMAT = 1
#: What of a run's ``RunResult.to_dict()`` a report carries: counts, sizes, durations.
RUN_KEYS = (
    "zombies_closed",
    "resumed",
    "pruned",
    "archived",
    "messages_deleted",
    "files_removed",
    "freed_bytes",
    "net_freed_bytes",
    "file_bytes_before",
    "file_bytes_after",
    "reclaimable_bytes",
    "remaining",
    "interrupted",
)


def report_doc(place: Place, policy: Policy, run: dict, now: float | None = None) -> dict:
    """What one run sends as ``report.json``: ``run`` (``RunResult.to_dict()``) cut to its counts,
    and the profile's check result with its runaways counted, not named."""
    now = time.time() if now is None else now
    check = check_profile(place, policy, now).to_dict()
    check |= {"runaways": len(check["runaways"]), "runaways_acked": len(check["runaways_acked"])}
    pushed = run.get("offsite") or {}
    summary = {k: run[k] for k in RUN_KEYS if k in run} | {"offsite_error": pushed.get("error")}
    host = offsite.host_of(policy.offsite)
    meta = {"format": REPORT_FORMAT, "keeper": __version__, "time": now}
    return meta | {"host": host, "profile": place.name, "run": summary, "check": check}


def send_report(place: Place, policy: Policy, run: dict, now: float | None = None) -> str | None:
    """Send this run's report to the ``[offsite]`` repository; its snapshot id. Raises as a push does."""
    doc = report_doc(place, policy, run, now)
    return offsite.send_report(offsite.restic_for(policy.offsite), doc["host"], place.name, doc)


@dataclass
class FleetRow:
    """One host and profile as its newest report says, or a repository that could not be read."""

    repository: str
    host: str | None
    profile: str | None
    status: int
    problem: str = ""
    reported_at: float | None = None  # the newest report's time: when that run ended
    keeper: str | None = None
    run: dict = field(default_factory=dict)
    db_bytes: float | None = None
    growth_per_day: float | None = None
    newest_copy: float | None = None  # when the newest off-host state.db was taken
    check_status: str | None = None
    check_problems: list[str] = field(default_factory=list)

    @property
    def where(self) -> str:
        """``host/profile``, or the repository for its own row."""
        return f"{self.host}/{self.profile}" if self.host else self.repository

    def to_dict(self) -> dict:
        return {
            "profile": self.profile,
            "host": self.host,
            "repository": self.repository,
            "status": STATUS[self.status],
            "code": self.status,
            "problem": self.problem,
            "reported_at": self.reported_at,
            "keeper": self.keeper,
            "run": self.run,
            "db_bytes": self.db_bytes,
            "growth_per_day": self.growth_per_day,
            "newest_copy": self.newest_copy,
            "check_status": self.check_status,
            "check_problems": self.check_problems,
        }


def _measure(check: dict, label: str) -> float | None:
    return next((m.get("value") for m in check.get("measures", []) if m.get("label") == label), None)


def _row(repo: str, snaps: list[offsite.OffsiteCopy], doc: dict | None, stale: float, now: float) -> FleetRow:
    """One host/profile from its snapshots (oldest first) and its newest report (None: none yet)."""
    first = snaps[0]
    copies = [c.time for c in snaps if c.kind == offsite.STATE]
    row = FleetRow(repo, first.host, first.profile, CRITICAL, newest_copy=max(copies, default=None))
    if doc is None:
        row.problem = "no report yet (its keeper predates fleet reports, or never ran with [offsite])"
        return row
    check = doc.get("check") or {}
    row.reported_at, row.keeper, row.run = doc.get("time"), doc.get("keeper"), doc.get("run") or {}
    row.db_bytes, row.growth_per_day = _measure(check, "db"), _measure(check, "growth_per_day")
    row.check_status, row.check_problems = check.get("status"), list(check.get("problems") or [])
    age = now - (row.reported_at or 0)
    if age > stale:
        old = f"newest report {units.span(age, 1)} old (> {units.span(stale)})"
        row.problem = f"stopped reporting: {old}; its check then: {row.check_status}"
        return row
    row.status = check.get("code", UNKNOWN) if check.get("code") in (0, 1, 2, 3) else UNKNOWN
    row.problem = "; ".join(row.check_problems)
    return row


@dataclass
class FleetSync:
    """What ``fleet sync`` did: a row per host and profile, and one per repository it could not read."""

    rows: list[SyncRow]
    seconds: float = 0.0

    @property
    def errors(self) -> list[str]:
        return [f"{r.host}/{r.profile}: {r.error}" if r.host else r.error for r in self.rows if r.error]

    def totals(self) -> dict:
        """The counts over the fleet (``--json`` has them beside the rows)."""
        ok = [r for r in self.rows if not r.error]
        return {
            "hosts": len({(r.repository, r.host) for r in self.rows if r.host}),
            "archives": len(ok),
            "files_fetched": sum(r.fetched for r in ok),
            "bytes_fetched": sum(r.fetched_bytes for r in ok),
            "files_unchanged": sum(r.unchanged for r in ok),
            "files_repaired": sum(r.repaired for r in ok),
            "files_removed": sum(r.removed for r in ok),
            "errors": len(self.rows) - len(ok),
            "seconds": round(self.seconds, 3),
        }


@dataclass
class FleetSearch:
    """One cached archive's answer to a search: ``archive search``'s, with its host and profile;
    or, ``result`` None, why that archive could not be searched (the others still are)."""

    archive: CachedArchive
    result: SearchResult | None
    error: str | None = None

    def to_dict(self) -> dict:
        where = {"host": self.archive.host, "profile": self.archive.profile}
        head = where | {"repository": self.archive.repository, "snapshot": self.archive.snapshot}
        if self.result is None:
            return head | {"error": self.error}
        doc = self.result.to_dict()
        doc["hits"] = [h | where for h in doc["hits"]]
        return head | doc


class Fleet:
    """Many hosts' keepers, seen through the restic repositories they push to (``fleet status``),
    and their archives through a local cache of them (``fleet sync``, ``search``, ``show``, ``export``).

    ``repositories``: restic repository strings (default: ``[fleet] repositories``, else
    ``[offsite] repository``); ``policy`` gives those, ``stale_after`` and the password the
    repositories open with (``[fleet]``'s, else ``[offsite]``'s, else restic's environment);
    ``cache_dir``: where the archives are kept (default ``~/.cache/hermes-keeper/fleet``)."""

    def __init__(
        self,
        repositories: Sequence[str] | None = None,
        policy: Policy | None = None,
        cache_dir: str | os.PathLike | None = None,
    ):
        self.cache_dir = Path(cache_dir).expanduser() if cache_dir else cache.default_root()
        self.policy = policy or Policy()
        fleet, off = self.policy.fleet, self.policy.offsite
        if repositories is None:
            repositories = fleet["repositories"] or ([off["repository"]] if off["repository"] else [])
        if not repositories:
            raise KeeperError("no repositories: set [fleet] repositories = [...] (docs/fleet.md)")
        pw_file, pw_cmd = fleet["password_file"], fleet["password_command"]
        if not (pw_file or pw_cmd):
            pw_file, pw_cmd = off["password_file"], off["password_command"]
        self.stale_after_s = fleet["stale_after"]
        how = {"password_file": pw_file, "password_command": pw_cmd, "timeout": off["timeout"]}
        self.repositories = [Restic.from_settings(how | {"repository": r}) for r in repositories]

    def status(self, now: float | None = None) -> list[FleetRow]:
        """A row per host and profile of every repository (sorted by host, profile), and one
        UNKNOWN row per repository that could not be read."""
        now = time.time() if now is None else now
        rows: list[FleetRow] = []
        for restic in self.repositories:
            try:
                rows += self._read(restic, now)
            except KeeperError as exc:
                rows.append(FleetRow(restic.repository, None, None, UNKNOWN, str(exc)))
        return rows

    def _read(self, restic: Restic, now: float) -> list[FleetRow]:
        groups: dict[tuple[str, str], list[offsite.OffsiteCopy]] = {}
        for snap in offsite.every_snapshot(restic):
            groups.setdefault((snap.host, snap.profile), []).append(snap)
        rows = []
        for key in sorted(groups):
            reports = [s for s in groups[key] if s.kind == offsite.REPORT]
            try:
                doc = offsite.read_report(restic, reports[-1]) if reports else None
            except KeeperError as exc:
                rows.append(FleetRow(restic.repository, *key, UNKNOWN, f"report unreadable: {exc}"))
                continue
            rows.append(_row(restic.repository, groups[key], doc, self.stale_after_s, now))
        return rows

    def sync(self, cache_dir: str | os.PathLike | None = None, verify: bool = False) -> FleetSync:
        """Bring the newest archive of every host and profile into the cache, only the files that
        changed since the last sync (``verify``: also re-hash every cached file); ``cache_dir``
        is then this fleet's cache. A repository that cannot be read is its row's error; its old
        cache stays, the others sync."""
        t0 = time.perf_counter()
        if cache_dir:
            self.cache_dir = Path(cache_dir).expanduser()
        root = self.cache_dir
        root.parent.mkdir(parents=True, exist_ok=True)
        private_dir(root)
        rows: list[SyncRow] = []
        with cache.sync_lock(root):
            for restic in self.repositories:
                try:
                    rows += cache.sync_repository(restic, root, verify)
                except KeeperError as exc:
                    rows.append(SyncRow(restic.repository, None, None, error=str(exc)))
        return FleetSync(rows, time.perf_counter() - t0)

    def archives(self, host: str | None = None, profile: str | None = None) -> list[CachedArchive]:
        """The cached archives (as the last sync left them) of ``host`` and ``profile`` (None: all)."""
        found = [a for r in self.repositories for a in cache.cached(self.cache_dir, r.repository)]
        return [a for a in found if host in (None, a.host) and profile in (None, a.profile)]

    def _one(self, host: str, profile: str | None) -> CachedArchive:
        """The one cached archive ``host`` (and ``profile``) names, or a one-line refusal."""
        found, known = self.archives(host, profile), ", ".join(a.profile for a in self.archives(host))
        if len(found) == 1:
            return found[0]
        if found:
            raise KeeperError(
                f"host {host} has {len(found)} cached profiles ({known}): name one with --profile"
            )
        had = f"its cached profiles: {known}" if known else "none cached: run `fleet sync`"
        raise KeeperError(f"no cached archive of {host}{'/' + profile if profile else ''} ({had})")

    def search(
        self,
        text: str,
        host: str | None = None,
        profile: str | None = None,
        source: str | None = None,
        since: float | None = None,
        limit: int | None = 50,
        filters: Filters | None = None,
    ) -> list[FleetSearch]:
        """``archive search`` of every cached archive (by host, profile), each with its index;
        ``filters`` as ``archive search``'s (``source`` and ``since`` narrow them)."""
        filters = filters or ALL
        if source is not None or since is not None:
            sources = (source,) if source is not None else filters.sources
            filters = replace(filters, sources=sources, since=since if since is not None else filters.since)
        if not text.strip():
            raise KeeperError("search text is empty")
        found = []
        for a in self.archives(host, profile):
            try:
                with a.open() as store:
                    found.append(FleetSearch(a, search(store, text, filters, limit=limit)))
            except KeeperError as exc:  # a cached file gone bad: `fleet sync --verify` fetches it again
                found.append(FleetSearch(a, None, str(exc)))
        return found

    def show(self, host: str, session_id: str, profile: str | None = None) -> tuple[CachedArchive, dict]:
        """One cached session's payload (``archive show``): ID, a unique prefix of it, or ``#N``."""
        a = self._one(host, profile)
        with a.open() as store:
            entry = resolve_id(store, session_id)
            try:
                return a, store.get_entry(entry.entry)
            except ArchiveDamaged as exc:
                raise KeeperError(f"archive row damaged: {exc}") from None

    def export(
        self,
        output: str | os.PathLike | None = None,
        filters: Filters | None = None,
        host: str | None = None,
        profile: str | None = None,
        fmt: str = "hermes-jsonl",
        split: bool = False,
    ) -> list[tuple[CachedArchive, ExportResult, list[Path]]]:
        """``archive export`` of the cached archives: Hermes's JSONL to stdout (each archive in turn)
        or to ``output`` (one archive), or ``fmt="markdown"``: ``output/<host>/<profile>/<id>.md``."""
        chosen = self.archives(host, profile)
        if not chosen:
            raise KeeperError("no cached archive matches (run `fleet sync`; see `fleet search`)")
        if fmt != "markdown" and output and len(chosen) > 1:
            raise KeeperError(
                f"{len(chosen)} cached archives match: name one with --host/--profile, or export to stdout"
            )
        done = []
        for a in chosen:
            with a.open() as store:
                if fmt == "markdown":
                    folder = Path(output) / cache.folder_name(a.host) / cache.folder_name(a.profile)
                    folder.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
                    res, paths = write_markdown(store, folder, filters or ALL)
                else:
                    res, paths = write_export(store, Path(output) if output else None, filters or ALL, split)
            done.append((a, res, paths))
        return done


def overall(rows: list[FleetRow]) -> int:
    """The Nagios code of the fleet: its worst row (none at all: UNKNOWN)."""
    return worst([r.status for r in rows])


def status_line(rows: list[FleetRow]) -> tuple[str, int]:
    """``HERMES-KEEPER FLEET CRITICAL - b/default: stopped reporting ...``, and its exit code."""
    code = overall(rows)
    bad = [f"{r.where}: {r.problem}" for r in rows if r.status]
    hosts = len({(r.repository, r.host) for r in rows if r.host})
    text = "; ".join(bad) or f"{units.plural(hosts, 'host')}, {units.plural(len(rows), 'profile')} reporting"
    return f"HERMES-KEEPER FLEET {STATUS[code]} - {text}", code
