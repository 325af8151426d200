"""The library's front door: a Hermes home, its profiles, and everything the keeper does to one.

``Home(path)`` finds the profiles (``$HERMES_HOME``, ``~/.hermes``, ``profiles/<name>``);
``Profile`` reports, plans, runs, backs up, restores, compacts and reads its archive, taking
the keeper lock and writing the journal where it changes something. The CLI, a scheduler or
a monitoring check drive the same methods; :func:`each` runs one action on many profiles.
Every step below takes the profile's :class:`~hermes_keeper.place.Place` (its paths) and none
imports this module: the arrows run one way, from the front door down.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from hermes_keeper.archive import query
from hermes_keeper.archive.export import write_export, write_markdown
from hermes_keeper.archive.query import ALL, Filters, resolve_id
from hermes_keeper.archive.restore import open_archive, restore_sessions
from hermes_keeper.archive.retention import (
    ArchiveSurvey,
    archive_usage,
    place_archive_usage,
    plan_archive_retention,
)
from hermes_keeper.archive.store import ArchiveDamaged, archive_exists
from hermes_keeper.backup import snapshot
from hermes_keeper.backup.restore import find_backup, restore_backup
from hermes_keeper.check import RUNAWAY_ACKED, SCHEDULED, UNSCHEDULED, check_profile
from hermes_keeper.errors import KeeperError, failure_line, warn
from hermes_keeper.facts import checked_unless_it_stalls, known_verdict
from hermes_keeper.fleet import Fleet as Fleet  # the fleet view beside Home (``fleet status``)
from hermes_keeper.fleet import send_report
from hermes_keeper.fs import HomeFS
from hermes_keeper.hermes_config import CONFIG_NAME as HERMES_CONFIG
from hermes_keeper.hermes_config import adopt_change, write_config
from hermes_keeper.history import History, record_report, record_run
from hermes_keeper.interrupt import Interrupted, stop_on_signals
from hermes_keeper.journal import Journal
from hermes_keeper.kept import keep_sessions
from hermes_keeper.lock import db_lock, keeper_lock
from hermes_keeper.model.policy import Policy, effective_policy
from hermes_keeper.offsite import copies as offsite
from hermes_keeper.place import Place
from hermes_keeper.report import build_report
from hermes_keeper.report_types import Report
from hermes_keeper.run.compact import compact
from hermes_keeper.run.context import open_run
from hermes_keeper.run.execute import apply_plan, preflight
from hermes_keeper.run.plan import REFUSE, SNAPSHOT, Plan, Safeguard, compact_step, make_plan
from hermes_keeper.run.survey import stamp_problems, survey_profile
from hermes_keeper.run.transcripts import hold_only_copies
from hermes_keeper.sqlite.holders import find_holders, missing_tokenizer, refuse_during_maintenance
from hermes_keeper.sqlite.schema import SchemaInfo, inspect

REPORTED, REPORT_FAILED = "offsite_reported", "offsite_report_failed"
PROFILE_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
DEFAULT_PROFILE = "default"


@dataclass(frozen=True)
class Profile(Place):
    """One Hermes home (its :class:`Place`) and everything the keeper does to it."""

    @contextmanager
    def _changing(self) -> Iterator[Journal]:
        """One keeper per home and per database (the locks), and every change journaled."""
        with keeper_lock(self.root), db_lock(self.db_path), Journal(self.keeper_dir, rotate=True) as journal:
            yield journal

    def _checked_db(self, actionable: bool = True) -> SchemaInfo:
        """The home and state.db checked as a command's step will check them, before the lock, the
        journal or ``keeper/`` are made: what the step refuses is left as it was."""
        self.fs.require_home()
        schema = inspect(self.db_path, check_timestamps=actionable)
        if actionable:
            schema.require_actionable()
        else:
            schema.require_readable()
        return schema

    def config(self, config_path: str | os.PathLike | None = None, overrides: dict | None = None) -> Policy:
        """The effective policy: defaults, ``keeper.toml`` (or ``config_path``), this profile's section."""
        return effective_policy(self.root, self.name, config_path, overrides)

    def report(
        self,
        zombie_after_s: float | None = None,
        top: int = 10,
        now: float | None = None,
        policy: Policy | None = None,
        record: bool = True,
    ) -> Report:
        """Where every byte goes, what the policy (default: :meth:`config`) would remove of the
        files, runaways by its ``[runaway]`` limits: a :class:`report_types.Report`, read by
        attribute; its ``to_dict()`` is the JSON of ``schemas/report.json``. Zombies by the
        policy's ``zombie_after`` unless ``zombie_after_s`` is given: the report and the run agree.
        Reads state.db only; its figures go to :attr:`history` unless ``record`` is false."""
        policy = policy or self.config()
        if zombie_after_s is None:
            zombie_after_s = policy.zombie_after_s
        rep = build_report(self, now=now, zombie_after_s=zombie_after_s, top=top, policy=policy)
        if record:
            record_report(self, rep)
        return rep

    def check(self, policy: Policy | None = None, now: float | None = None):
        """Health against the ``[check]`` thresholds (read-only): a ``check.CheckResult``."""
        return check_profile(self, policy, now)

    def ack_runaway(self, session_id: str) -> None:
        """Journal that this runaway session is known (``check --ack``): ``check`` no longer
        counts it."""
        with Journal(self.keeper_dir) as journal:
            journal.write(RUNAWAY_ACKED, session=session_id)

    def _plan(
        self, schema: SchemaInfo, policy: Policy, now: float | None, holders=None, db_check=None, cached=False
    ) -> Plan:
        now = time.time() if now is None else now
        survey = survey_profile(self, schema, now, holders, db_check, cached=cached)
        if cached:  # the preview inspected without the timestamp scan: the statistics have it
            schema.timestamp_problems = stamp_problems(survey)
        plan = make_plan(survey, policy, now)
        hold_only_copies(self, plan)  # reads the .jsonl transcripts it removes: diverted ones stay
        plan.archive_retention = plan_archive_retention(self, policy, now)
        if plan.safeguard.kind == SNAPSHOT:  # what it costs, where it goes, refused if it does not fit
            cost = snapshot.backup_cost(self, schema, snapshot.backup_dir(self, policy.backup_dest))
            plan.backup = cost.to_dict()
            if cost.refused:
                plan.safeguard = Safeguard(REFUSE, cost.refused)
        if plan.archive_retention and (loud := plan.archive_retention.warning()) is not None:
            plan.warnings.append(loud)
        return plan

    def plan(self, policy: Policy | None = None, now: float | None = None) -> Plan:
        """What a run would do and why (read-only)."""
        policy = policy or self.config()
        schema = inspect(self.db_path, check_timestamps=False)  # the survey's statistics have them
        schema.require_readable()
        holders = find_holders(self.db_path)
        # one full read (none while the file is unchanged since one passed): the malformed-copy
        # rule reuses it; run checks again before it writes
        check = checked_unless_it_stalls(self.fs, self.db_path, schema.journal_mode, holders, reuse=True)
        # message statistics as the report has them (keeper/stats.db): a run reads them fresh
        plan = self._plan(schema, policy, now, holders, lambda: check, cached=True)
        if check is not None and check.result != "ok":
            plan.warnings.append(f"state.db fails quick_check ({check.result}): a damaged page")
        if schema.timestamp_problems:
            plan.warnings.append("timestamps are not unix seconds; a run would refuse this profile")
        if missing := missing_tokenizer(schema):
            plan.warnings.append(f"{missing}; a run would refuse this profile")
        return plan

    def run(
        self,
        policy: Policy | None = None,
        dry_run: bool = False,
        progress: Callable[[str, int], None] | None = None,
        record: bool = True,
    ):
        """Backup, close zombies, archive + prune, remove stale files, compact: a ``RunResult``,
        recorded in :attr:`history` unless ``record`` is false.

        ``dry_run`` returns the :meth:`plan` instead. ``progress(kind, n)`` gets ``("plan", total)``
        once the plan is made, then ``("prune", sessions)`` as they go.
        """
        if dry_run:
            return self.plan(policy)
        t0 = time.perf_counter()
        policy = policy or self.config()
        schema = inspect(self.db_path)  # the run's one inspection: every step reuses it
        preflight(self, schema, policy)  # before the lock and the journal: a refusal changes nothing
        try:
            with (
                stop_on_signals() as stop,
                self._changing() as journal,
                open_run(self, policy, schema, journal) as ctx,
            ):
                ctx.stop = stop
                plan = self._plan(schema, policy, None, ctx.holders())
                journal.write("plan", **{k: v for k, v in plan.to_dict().items() if k != "now"})
                if progress:
                    progress("plan", len(plan.prune))
                result = apply_plan(ctx, plan, progress)
                if not result.interrupted:  # a stopped run sends nothing: the next one does
                    result.offsite = self._push(policy, journal)
                    self._report(policy, journal, result.to_dict())
        except Interrupted as exc:  # recorded as such (when it changed something), then raised on
            if exc.result is not None:
                exc.result.seconds = round(time.perf_counter() - t0, 2)
                if record:
                    record_run(self, exc.result)
            raise
        result.seconds = round(time.perf_counter() - t0, 2)
        if record:
            record_run(self, result)
        return result

    def _push(self, policy: Policy, journal: Journal) -> dict | None:
        """The run's off-host push where ``[offsite]`` names a repository. Never fails the run:
        the failure is journaled and said in the summary, and the next run catches up."""
        if not policy.offsite_repository:
            return None
        try:
            done = offsite.push(self, policy.offsite, policy.rotation, policy.backup_dest, journal)
            return done.to_dict() | {"summary": done.summary()}
        except (KeeperError, OSError) as exc:
            line = failure_line(exc, self.home)[0]
        journal.write(offsite.FAILED, error=line)
        return {"error": line, "summary": f"off-host copy failed: {line}"}

    def _report(self, policy: Policy, journal: Journal, run: dict) -> None:
        """The run's report beside its copies (``fleet status`` reads it); as the push, it never
        fails the run: a failure is journaled and the next run reports again."""
        if not policy.offsite_repository:
            return
        try:
            journal.write(REPORTED, snapshot=send_report(self, policy, run))
        except (KeeperError, OSError) as exc:
            journal.write(REPORT_FAILED, error=failure_line(exc, self.home)[0])

    def offsite_copies(self, rules: dict | None = None, prune: bool = False, dry_run: bool = False) -> dict:
        """This profile's copies in the ``[offsite]`` repository (``backups --offsite``); ``prune``:
        ``restic forget --prune`` by the rotation rules (the policy's, ``rules`` overriding), or
        with ``dry_run`` only what it would remove."""
        policy = self.config()
        restic, host = offsite.restic_for(policy.offsite), offsite.host_of(policy.offsite)
        rules = policy.rotation | (rules or {})
        removed: list[str] = []
        if prune and dry_run:
            removed = offsite.forget(restic, host, self.name, rules, dry_run=True)
        elif prune:
            with self._changing() as journal:
                removed = offsite.forget(restic, host, self.name, rules)
                journal.write("offsite_forgotten", removed=removed)
        copies = offsite.list_copies(restic, host, self.name)
        return {
            "profile": self.name,
            "repository": restic.repository,
            "host": host,
            "copies": [c.to_dict() for c in reversed(copies)],
            "removed": [] if dry_run else removed,
            "would_remove": removed if dry_run else [],
        }

    def offsite_copy(self, snapshot: str | None = None) -> offsite.OffsiteCopy:
        """The off-host copy :meth:`restore_offsite` would put back (``restore --from offsite --dry-run``)."""
        policy = self.config()
        restic, host = offsite.restic_for(policy.offsite), offsite.host_of(policy.offsite)
        return offsite.pick(offsite.list_copies(restic, host, self.name), offsite.STATE, snapshot)

    def restore_offsite(self, snapshot: str | None = None, force: bool = False):
        """Put ``state.db`` back from an off-host copy (the newest, or ``snapshot``'s id prefix)
        through :meth:`restore`'s checks (an ``offsite.OffsiteRestore``). On a new machine the
        home may be an empty folder with a keeper.toml naming the repository."""
        policy = self.config()
        offsite.restic_for(policy.offsite)  # no repository: refused before anything is made
        self.fs.private_dir("keeper")
        with self._changing() as journal:
            return offsite.restore_state(self, policy.offsite, snapshot, force, journal)

    @property
    def history(self) -> History:
        """What past reports and runs measured and did (``keeper/history.db``)."""
        return History(self)

    def backup(self, dest: str | os.PathLike | None = None, rotate: bool | dict = True) -> BackupDone:
        """A verified snapshot of state.db into ``dest`` (default: the policy's ``backups.dest``),
        then rotation: the policy's rules, overridden by ``rotate``'s (``keep_last``, ``keep_daily``,
        ``keep_weekly``, ``keep_monthly``), or none (False)."""
        policy = self.config()
        dest = dest or policy.backup_dest
        rotate = rotate if rotate is False else policy.rotation | (rotate if isinstance(rotate, dict) else {})
        schema = self._checked_db(actionable=False)
        snapshot.preflight_backup(self, schema, snapshot.backup_dir(self, dest))
        with self._changing() as journal:
            t0 = time.perf_counter()
            record = snapshot.take_backup(self, dest, journal=journal, schema=schema)
            seconds = round(time.perf_counter() - t0, 2)
            removed = (
                []
                if rotate is False
                else snapshot.apply_rotation(record.folder, self.home, journal=journal, **rotate)
            )
        return BackupDone(record, seconds, removed)

    def backup_preview(self, dest: str | os.PathLike | None = None, rotate: bool | dict = True) -> dict:
        """What :meth:`backup` would do (``backup --dry-run``): where, how big, what rotation would
        then remove, or why it would be refused. Changes nothing."""
        policy = self.config()
        folder = snapshot.backup_dir(self, dest or policy.backup_dest)
        schema = inspect(self.db_path)
        schema.require_readable()
        cost = snapshot.backup_cost(self, schema, folder)
        rules = policy.rotation | (rotate if isinstance(rotate, dict) else {})
        rows = [] if rotate is False else snapshot.rotation(folder, self.home, now=time.time(), **rules)
        return {
            "profile": self.name,
            "folder": str(folder),
            "database_bytes": schema.used_bytes,
            "refused": cost.refused,
            "cost": cost.to_dict(),
            # the rules as they stand now; the new backup may push one more out
            "would_rotate_out": [r.name for r, d, _ in rows if not d.keep],
        }

    def backups(
        self,
        dest: str | os.PathLike | None = None,
        rules: dict | None = None,
        prune: bool = False,
        remove_leftovers: bool = False,
        dry_run: bool = False,
    ) -> dict:
        """Every backup with size, verification and why it is kept; Hermes's leftover copies.

        ``dest`` and ``rules`` default to the policy's (``[backups]``), ``rules`` overriding it
        rule by rule. Changes nothing unless ``prune`` (rotate out what the rules drop) or
        ``remove_leftovers``; ``dry_run`` not even the verdicts ``check`` reuses.
        """

        policy = self.config()
        rules = policy.rotation | (rules or {})
        folder = snapshot.backup_dir(self, dest or policy.backup_dest)
        removed: list[str] = []
        leftovers = snapshot.find_malformed_copies(self)
        if prune or remove_leftovers:
            with self._changing() as journal:
                if prune:
                    removed = snapshot.apply_rotation(folder, self.home, journal=journal, **rules)
                if remove_leftovers:
                    leftovers = snapshot.remove_malformed_copies(self, journal=journal)
        verify = snapshot.verify_backup if dry_run else self._verify_backup
        rows = snapshot.rotation(folder, self.home, time.time(), verify, **rules)
        return {
            "profile": self.name,
            "folder": str(folder),
            "backups": [
                r.to_dict() | {"verified": ok, "keep": d.keep, "reasons": d.reasons} for r, d, ok in rows
            ],
            "removed": removed,
            "leftovers": [
                {"name": lo.path.name, "bytes": lo.bytes, "removed": remove_leftovers} for lo in leftovers
            ],
            "killed_backup_files": [
                {"name": lo.path.name, "bytes": lo.bytes} for lo in snapshot.killed_backup_leftovers(folder)
            ],
        }

    def _verify_backup(self, record) -> bool:
        """Its sha256 read again, and the verdict kept for ``check`` (``facts.known_verdict``)."""
        verify = partial(snapshot.verify_backup, record)
        return known_verdict(self.fs, record.path, record.sha256, verify, again=True)

    def restore(
        self,
        name: str | os.PathLike | None = None,
        dest: str | os.PathLike | None = None,
        force: bool = False,
    ):
        """Replace state.db with a verified backup (``name``: file name or path; None: the newest)."""
        dest = dest or self.config().backup_dest
        with self._changing() as journal:
            return restore_backup(self, find_backup(self, name, dest), force=force, journal=journal)

    def restore_preview(
        self, name: str | os.PathLike | None = None, dest: str | os.PathLike | None = None
    ) -> dict:
        """What :meth:`restore` would put in place (``restore --dry-run``), its sha256 checked.
        Changes nothing."""
        self.fs.require_home()
        record = find_backup(self, name, dest or self.config().backup_dest)
        return record.to_dict() | {
            "profile": self.name,
            "verified": snapshot.verify_backup(record),
            "replaces": str(self.db_path),
            "holders": [h.describe() for h in find_holders(self.db_path)],
        }

    def compact_preview(self) -> dict:
        """What :meth:`compact` would do (``compact --dry-run``): the reclaimable bytes and how they
        would go back to the disk. Changes nothing."""
        schema = inspect(self.db_path)
        schema.require_readable()
        return {
            "profile": self.name,
            "auto_vacuum": schema.auto_vacuum,
            "db_bytes": schema.db_bytes,
            "reclaimable_bytes": schema.free_bytes,
            "step": compact_step(schema.auto_vacuum, schema.used_bytes, self.config().live_vacuum_stall_s),
            "holders": [h.describe() for h in find_holders(self.db_path)],
        }

    def compact(
        self, wait_idle_s: float | None = None, allow_full_vacuum: bool = True, policy: Policy | None = None
    ):
        """Free pages back to the disk in budgeted steps (the policy's budget, rest and busy wait);
        the one-time full VACUUM when idle, or beside Hermes when its stall fits."""
        policy = policy or self.config()
        refuse_during_maintenance(self._checked_db())
        with self._changing() as journal:
            return compact(
                self,
                budget=policy.budget,
                wait_idle_s=wait_idle_s,
                allow_full_vacuum=allow_full_vacuum,
                journal=journal,
                backup_dest=policy.backup_dest,
                live_vacuum_stall_s=policy.live_vacuum_stall_s,
            )

    def adopt_change(self) -> tuple[str, str]:
        """config.yaml's text now and with Hermes's auto-prune off (equal: nothing to change)."""
        return adopt_change(self.home)

    def note_schedule(self, installed: bool, via: str, **fields) -> None:
        """Journal that a scheduler now runs the keeper here (``installed``) or no longer does:
        ``check`` reads it (Hermes's own auto-prune beside a scheduled keeper is a WARNING)."""
        with Journal(self.keeper_dir) as journal:
            journal.write(SCHEDULED if installed else UNSCHEDULED, via=via, **fields)

    def adopt(self) -> bool:
        """Turn Hermes's own auto-prune off in config.yaml (comments kept), journaled, so the keeper
        alone owns retention; False when it already was off."""
        self.fs.require_home()  # what the journal checks, before config.yaml is rewritten
        self.fs.check_keeper_tree()
        before, after = adopt_change(self.home)
        if before == after:
            return False
        write_config(self.home, after)
        with Journal(self.keeper_dir) as journal:
            journal.write("adopt", path=HERMES_CONFIG, auto_prune=False)
        return True

    @property
    def archive(self) -> ProfileArchive:
        return ProfileArchive(self)


@dataclass(frozen=True)
class BackupDone:
    """A backup just taken, how long it took, and the older backups rotation removed."""

    record: Any  # backup.snapshot.BackupRecord
    seconds: float
    rotated_out: list[str]

    def to_dict(self) -> dict:
        return self.record.to_dict() | {"seconds": self.seconds, "rotated_out": self.rotated_out}


@dataclass(frozen=True)
class ProfileArchive:
    """The sessions the keeper pruned from one profile: read, search, restore, export, verify."""

    profile: Profile

    @property
    def exists(self) -> bool:

        return archive_exists(self.profile.keeper_dir)

    @contextmanager
    def _store(self):

        with open_archive(self.profile) as store:
            yield store

    def list(self, filters: Filters | None = None) -> list:

        with self._store() as store:
            return query.list_entries(store, filters or ALL)

    def show(self, session_id: str) -> dict:
        """One archived session's payload: ``session_id`` or a unique prefix of it (its newest
        entry), or ``#N`` (archive entry N)."""
        with self._store() as store:
            entry = resolve_id(store, session_id)
            try:
                return store.get_entry(entry.entry)
            except ArchiveDamaged as exc:
                raise KeeperError(f"archive row damaged: {exc}") from None

    def search(self, text: str, filters: Filters | None = None, limit: int | None = 50):
        with self._store() as store:
            return query.search(store, text, filters or ALL, limit=limit)

    def restore(
        self,
        session_ids: Sequence[str],
        dry_run: bool = False,
        policy: Policy | None = None,
        force: bool = False,
    ):
        """Put archived sessions back (whole conversations) in the policy's budgeted writes, and
        keep them for the policy's ``restored_keep`` (keeper/kept.json); ``dry_run`` only says what would.
        Refused while Hermes's own auto-prune would delete one again (``adopt`` first), unless ``force``."""
        policy = policy or self.profile.config()
        self.profile._checked_db()
        self.profile.fs.check_keeper_tree()  # a symlinked keeper/backups said first, as it was
        open_archive(self.profile).close()  # no archive: refused, nothing created
        with self.profile._changing() as journal:
            res = restore_sessions(
                self.profile,
                list(session_ids),
                journal=journal,
                budget=policy.budget,
                dry_run=dry_run,
                force=force,
            )
            if res.restored and policy.restored_keep_s > 0:
                # after the restore: a crash in between only lets the next run archive it again
                now = time.time()
                res.kept_until = now + policy.restored_keep_s
                keep_sessions(self.profile, res.restored, res.kept_until, now)
                if journal:
                    journal.write("kept", sessions=len(res.restored), until=res.kept_until)
            return res

    def export(
        self, output: str | os.PathLike | None = None, filters: Filters | None = None, split: bool = False
    ):
        """Hermes's ``export_session`` JSONL to ``output`` (None: stdout); (result, files written)."""
        with self._store() as store:
            return write_export(store, Path(output) if output else None, filters or ALL, split=split)

    def export_markdown(self, folder: str | os.PathLike, filters: Filters | None = None):
        """One readable ``<id>.md`` per chosen session into ``folder`` (0700); (result, files written)."""
        with self._store() as store:
            return write_markdown(store, Path(folder), filters or ALL)

    def usage(self, policy: Policy | None = None, now: float | None = None):
        """The archive's bytes, files, entries, oldest conversation and budget (``archive.max_bytes``),
        and whether it is over it: an ``ArchiveUsage`` (for ``report``, and a monitoring check)."""
        now = time.time() if now is None else now
        try:
            policy = policy or self.profile.config()
        except KeeperError as exc:  # a keeper.toml that does not parse: the usage says why
            return archive_usage(ArchiveSurvey((), frozenset()), None, None, now, problem=str(exc))
        return place_archive_usage(self.profile, policy, now)

    def pull_offsite(self, snapshot: str | None = None):
        """Rebuild the archive from an off-host copy (``archive pull --from offsite``): the files
        this home lacks are added, none it has is replaced (an ``offsite.PullResult``)."""
        policy = self.profile.config()
        offsite.restic_for(policy.offsite)
        self.profile.fs.private_dir("keeper")
        with self.profile._changing() as journal:
            return offsite.pull_archive(self.profile, policy.offsite, snapshot, journal)

    def verify(self):
        """Decompress every payload and recompute its sha256; plus a quick_check of every archive file.

        Journaled (``archive_verified``): ``check`` alerts when the last one is old or failed.
        """
        with self._store() as store:
            result = query.verify(store)
        try:  # a read-only home still verifies; only `check` misses the record
            with Journal(self.profile.keeper_dir) as journal:
                journal.write(
                    "archive_verified", checked=result.checked, damaged=len(result.damaged), ok=result.ok
                )
        except (OSError, KeeperError) as exc:
            warn(f"{self.profile.name}: archive verify not journaled ({exc})")
        return result


def resolve_root(home: str | os.PathLike | None = None, env: Mapping[str, str] | None = None) -> Path:
    """``--home``, else ``$HERMES_HOME``, else ``~/.hermes``; must exist as a directory.

    A path that is itself ``<root>/profiles/<name>`` resolves to its root, so a
    ``HERMES_HOME`` set by ``hermes -p NAME`` still finds its siblings.
    """
    env = os.environ if env is None else env
    raw = home if home is not None else env.get("HERMES_HOME") or Path.home() / ".hermes"
    path = Path(raw).expanduser()
    if not path.is_dir():
        raise KeeperError(f"Hermes home not found: {path}")
    root = path.resolve()
    for named in (Path(os.path.abspath(path)), root):  # a symlinked profile: by its link
        if named.parent.name == "profiles" and PROFILE_NAME.match(named.name):
            root = named.parent.parent.resolve()
            break
    HomeFS(root).require_owner()  # root on a user's home: refused before a byte is read or made
    return root


def discover_profiles(root: Path) -> list[Profile]:
    """The default profile plus every valid ``profiles/<name>/`` directory, sorted by name; a
    symlinked one too (a profile moved to another disk), which :func:`link_problem` confines."""
    profiles = [Profile(DEFAULT_PROFILE, root, root)]
    pdir = root / "profiles"
    if pdir.is_dir():
        for child in sorted(pdir.iterdir()):
            if (child.is_dir() or child.is_symlink()) and PROFILE_NAME.match(child.name):
                profiles.append(Profile(child.name, child, root))
    return profiles


def link_problem(profile: Profile, profiles: Sequence[Profile]) -> str | None:
    """Why a symlinked profile folder is not followed, else None (followed like Hermes follows it:
    its target is the profile's home, whose own files the door still never follows out of).

    Not followed: a link to no folder, to the home or a folder holding it (a loop), or to a folder
    another profile already is (one state.db kept twice over)."""
    if not profile.home.is_symlink():
        return None
    target = profile.home.resolve()
    said = f"profiles/{profile.name} is a symlink to {target}"
    if not target.is_dir():
        return f"{said}, not a folder"
    if target == profile.root or target in profile.root.parents:
        return f"{said}, which holds the home itself"
    mine = profiles.index(profile)
    for i, other in enumerate(profiles):  # the real folder, else the first link to it, is kept
        if i != mine and (i < mine or not other.home.is_symlink()) and other.home.resolve() == target:
            return f"{said}, the folder of profile {other.name!r} (kept once, as {other.name!r})"
    return None


def active_profile_name(root: Path) -> str:
    """The sticky profile Hermes itself would use (``<root>/active_profile``)."""
    try:
        raw = HomeFS(root).read_hermes("active_profile", follow=True)  # a FIFO, a device: refused
    except OSError:
        return DEFAULT_PROFILE
    name = "" if raw is None else raw.decode("utf-8", "replace").strip()
    return name if name and PROFILE_NAME.match(name) else DEFAULT_PROFILE


def select_profiles(
    home: str | os.PathLike | None = None,
    profile: str | None = None,
    all_profiles: bool = False,
    env: Mapping[str, str] | None = None,
) -> list[Profile]:
    """The profiles a command acts on.

    Without ``--profile``/``--all-profiles`` this is the profile Hermes itself is on:
    the one ``HERMES_HOME`` points into, else the sticky ``active_profile``.
    """
    env = os.environ if env is None else env
    raw_home = home if home is not None else env.get("HERMES_HOME")
    root = resolve_root(home, env)
    profiles = discover_profiles(root)
    if all_profiles:
        return profiles
    by_name = {p.name: p for p in profiles}
    if profile is None:
        given = Path(os.path.abspath(Path(raw_home).expanduser())) if raw_home else None  # a link's own name
        profile = given.name if given is not None and given.resolve() != root else active_profile_name(root)
    if profile not in by_name:
        known = ", ".join(sorted(by_name))
        raise KeeperError(f"profile {profile!r} not found under {root} (known: {known})")
    if why := link_problem(by_name[profile], profiles):
        raise KeeperError(f"{why}: not followed")
    return [by_name[profile]]


class Home:
    """A Hermes home (``path``, else ``$HERMES_HOME``, else ``~/.hermes``) and its profiles."""

    def __init__(self, path: str | os.PathLike | None = None, env: Mapping[str, str] | None = None):
        self.env = os.environ if env is None else env
        self.path = path
        self.root = resolve_root(path, self.env)

    def profiles(self) -> list[Profile]:
        return discover_profiles(self.root)

    def profile(self, name: str | None = None) -> Profile:
        """``name``, else the profile Hermes itself is on."""
        return select_profiles(self.path, name, env=self.env)[0]


@dataclass
class Outcome:
    """What one action did to one profile: its ``value``, or the one-line ``error``, or ``skipped``."""

    profile: Profile
    value: Any = None
    error: str | None = None
    exit_code: int = 0
    skipped: str | None = None
    exception: BaseException | None = None  # what ``error`` says, for a traceback under ``--debug``


NEW_PROFILE = "no state.db yet (a new profile), skipped"


class Skipped(Exception):
    """Raised by an action of :func:`each`: nothing to do in this profile (a note, not a failure)."""


def each(
    profiles: Sequence[Profile], action: Callable[[Profile], Any], needs_db: bool = True
) -> Iterator[Outcome]:
    """``action`` on every profile, each on its own: no failure in one (a refusal, a damaged
    page, a bug) stops the others.

    With one profile the error is raised as it is (one line, its exit code); with several,
    each becomes an :class:`Outcome` (:func:`errors.failure_line`: the line and code the error
    boundary would give), and a profile folder without ``state.db`` is skipped
    (unless the action does not need one: ``archive verify`` checks an archive whatever
    became of the database).
    """
    if len(profiles) == 1:
        yield Outcome(profiles[0], action(profiles[0]))
        return
    for p in profiles:
        if why := link_problem(p, profiles):
            yield Outcome(p, skipped=f"{why}: not followed, skipped")
            continue
        if needs_db and not p.db_path.exists():
            yield Outcome(p, skipped=NEW_PROFILE)
            continue
        try:
            yield Outcome(p, action(p))
        except Skipped as note:
            yield Outcome(p, skipped=str(note))
        except (BrokenPipeError, Interrupted):  # stdout's reader left, a signal: the command ends
            raise
        except Exception as exc:  # a refusal, a read-only home, a damaged page: this profile only
            line, code = failure_line(exc, p.home)
            yield Outcome(p, error=line, exit_code=code, exception=exc)


def exit_code(outcomes: Sequence[Outcome]) -> int:
    """0 all done; 1 some failed and others ran; else (nothing ran) the failures' own code (2, or 75)."""
    failed = [o for o in outcomes if o.error is not None]
    if not failed:
        return 0
    if any(o.error is None and o.skipped is None for o in outcomes):
        return 1
    codes = {o.exit_code for o in failed}
    return codes.pop() if len(codes) == 1 else KeeperError.exit_code
