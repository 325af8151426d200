"""One profile's health as a monitor sees it: ``hermes-keeper check`` (Nagios plugin conventions).

Every figure comes from what the keeper already knows (the report, the journal, the backup
manifest, the disk) and is compared with the policy's ``[check]`` thresholds; runaway sessions
(the policy's ``[runaway]`` limits) are CRITICAL while they matter: open, or active within
``check.runaway_recent``, and not acknowledged (``check --ack ID``, journaled). Read-only, and
cheap enough to poll every minute: a backup's sha256 is read once per file identity
(``facts.known_verdict``), not every call. :class:`CheckResult` is what the CLI prints, ``--json``
shows, ``--textfile`` exports, and a history can record (``to_dict``).
"""

from __future__ import annotations

import shutil
import time
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path

from hermes_keeper import units
from hermes_keeper.archive.store import archive_exists
from hermes_keeper.backup.snapshot import backup_dir, keeper_bytes, list_backups, of_home, verify_backup
from hermes_keeper.facts import known_verdict
from hermes_keeper.journal import JOURNAL_SEALED, Skipped, read_journal
from hermes_keeper.model.policy import Policy, effective_policy
from hermes_keeper.offsite.copies import CHECKED, newest_copy_time
from hermes_keeper.place import Place
from hermes_keeper.report import build_vitals
from hermes_keeper.report_types import Runaway, Vitals

OK, WARNING, CRITICAL, UNKNOWN = range(4)
STATUS = ("OK", "WARNING", "CRITICAL", "UNKNOWN")
#: Journal action of a finished ``run`` and of an ``archive verify``.
RUN_DONE = "summary"
ARCHIVE_VERIFIED = "archive_verified"
#: Journal actions of ``schedule install`` and ``schedule remove`` (home.Profile.note_schedule).
SCHEDULED, UNSCHEDULED = "scheduled", "unscheduled"
#: Journal action of ``check --ack ID``: that runaway session no longer alerts.
RUNAWAY_ACKED = "runaway_acked"
#: Runaways the status line names (the rest are counted).
NAMED_RUNAWAYS = 3


@dataclass(frozen=True)
class Measure:
    """One figure: its perfdata, and the problem it is when past a threshold.

    ``floor`` thresholds are lower bounds (free space, time until full): Nagios writes them
    ``N:``. ``value`` None: not measurable now (no growth, never ran): no perfdata figure.
    """

    label: str
    value: float | None
    uom: str  # "B" bytes, "s" seconds, "" a count
    warn: float | None
    crit: float | None
    status: int
    problem: str = ""  # one short phrase when status > OK
    floor: bool = False

    def perfdata(self, prefix: str = "") -> str | None:
        if self.value is None:
            return None

        def bound(x):
            return "" if x is None else f"{x:.0f}:" if self.floor else f"{x:.0f}"

        value = f"{self.value:.0f}" if self.uom != "" or float(self.value).is_integer() else f"{self.value:g}"
        return f"'{prefix}{self.label}'={value}{self.uom};{bound(self.warn)};{bound(self.crit)};0;"


def _over(label, value, uom, warn, crit, what) -> Measure:
    """``value`` above ``warn``/``crit`` is a problem (``what`` names it)."""
    status = (
        CRITICAL
        if crit is not None and value > crit
        else WARNING
        if warn is not None and value > warn
        else OK
    )
    return Measure(label, value, uom, warn, crit, status, what if status else "")


def _under(label, value, uom, warn, crit, what) -> Measure:
    status = (
        CRITICAL
        if crit is not None and value < crit
        else WARNING
        if warn is not None and value < warn
        else OK
    )
    return Measure(label, value, uom, warn, crit, status, what if status else "", floor=True)


#: What an age that never started is: (status, problem).
NEVER_RAN = (CRITICAL, "never ran")
NO_BACKUP = (CRITICAL, "no verified backup")
NEVER_VERIFIED = (WARNING, "archive never verified")
NO_OFFSITE = (CRITICAL, "no off-host copy yet")


def _age(label, since: float | None, now: float, warn, crit, what, never: tuple[int, str]) -> Measure:
    """How long ago ``since`` was; None (it never happened) is ``never``: (status, problem)."""
    if since is None:
        return Measure(label, None, "s", warn, crit, *never)
    age = max(0.0, now - since)
    return _over(label, age, "s", warn, crit, f"{what} {units.ago(since, now, 1)}")


def newest_verified_backup(profile: Place, dest: Path | str | None = None) -> float | None:
    """``created_at`` of the newest backup of this home (in ``dest``, default keeper/backups) whose
    file checks out (sha256); older ones are only read when the newer fail. A verdict stands while
    the file keeps its identity (``facts.known_verdict``): a 2 GB backup is hashed once, not every poll;
    ``backups`` verifies them all again."""
    mine = [r for r in list_backups(backup_dir(profile, dest)) if of_home(r, profile.home)]
    for record in sorted(mine, key=lambda r: r.created_at, reverse=True):
        if known_verdict(profile.fs, record.path, record.sha256, partial(verify_backup, record)):
            return record.created_at
    return None


def alerting_runaways(runaways: list[Runaway], now: float, recent_s: float, acked: set[str]) -> list[Runaway]:
    """The runaways that matter to a monitor: still open, or active within ``recent_s``, and not
    acknowledged. One that ended weeks ago stays in the report, not in the alert."""
    return [r for r in runaways if (r.open or now - r.last_activity <= recent_s) and r.id not in acked]


@dataclass
class CheckResult:
    """Every measure of one profile; its status is the worst of them."""

    profile: str
    home: str
    checked_at: float
    measures: list[Measure] = field(default_factory=list)
    runaways: list[Runaway] = field(default_factory=list)  # the ones that alert
    runaways_acked: list[str] = field(default_factory=list)  # runaways `check --ack` silenced

    @property
    def status(self) -> int:
        return max((m.status for m in self.measures), default=OK)

    def measure(self, label: str) -> Measure:
        return next(m for m in self.measures if m.label == label)

    def problems(self) -> list[str]:
        """Worst first: what a person reads in the status line."""
        bad = sorted((m for m in self.measures if m.status), key=lambda m: -m.status)
        return [f"{STATUS[m.status]}: {m.problem}" for m in bad]

    def perfdata(self, prefix: str = "") -> list[str]:
        return [p for m in self.measures if (p := m.perfdata(prefix))]

    def to_dict(self) -> dict:
        return {
            "profile": self.profile,
            "home": self.home,
            "checked_at": self.checked_at,
            "status": STATUS[self.status],
            "code": self.status,
            "problems": self.problems(),
            "measures": [asdict(m) | {"status": STATUS[m.status]} for m in self.measures],
            "runaways": [r.to_dict() for r in self.runaways],
            "runaways_acked": self.runaways_acked,
        }


def check_profile(profile: Place, policy: Policy | None = None, now: float | None = None) -> CheckResult:
    """All checks on one profile against ``policy``'s ``[check]`` and ``[runaway]`` tables."""
    policy = policy or effective_policy(profile.root, profile.name)
    now = time.time() if now is None else now
    t = policy.check
    rep = build_vitals(profile, now, policy.zombie_after_s, policy)
    free = shutil.disk_usage(profile.home).free
    past = _JournalFacts.read(profile)
    every = rep.sessions.runaways
    runaways = alerting_runaways(every, now, t["runaway_recent"], past.acked)
    acked = sorted({r.id for r in every} & past.acked)
    result = CheckResult(profile.name, str(profile.home), now, runaways=runaways, runaways_acked=acked)
    result.measures = [
        *_disk_measures(rep, t, free),
        *_session_measures(rep.sessions.zombies.total, runaways, rep.reclaimable_bytes, t),
        _age(
            "last_run_age", past.last_run, now, t["last_run_warn"], t["last_run_crit"], "last run", NEVER_RAN
        ),
        _age(
            "backup_age",
            newest_verified_backup(profile, policy.backup_dest),
            now,
            t["backup_warn"],
            t["backup_crit"],
            "newest verified backup",
            NO_BACKUP,
        ),
        *_archive_measures(profile, rep, t, now, past),
        *_offsite_measures(policy, t, now, past),
        *_both_prune(rep, past),
        _journal_measure(past),
        *keeper_budget(profile, policy),
    ]
    return result


def keeper_budget(profile: Place, policy: Policy) -> list[Measure]:
    """``keeper/`` (backups, archive, history, journal) against ``[keeper] max_bytes``: WARNING
    above it (rotation keeps the backups under it, so only an archive past it gets there)."""
    budget = policy.keeper_max_bytes
    if budget is None:
        return []
    used = keeper_bytes(profile, policy.backup_dest)
    return [_over("keeper", used, "B", budget, None, f"keeper/ over its budget {units.size(budget)}")]


@dataclass(frozen=True)
class _JournalFacts:
    """What the journal says of past runs and archive verifies."""

    last_run: float | None  # the last finished run
    verifies: list[dict]  # every archive verify, oldest first
    verify_since: float | None  # the last that passed; never: the keeper's first record in this home
    keeper_prunes: str = ""  # why the keeper prunes this profile ("" if nothing says it does)
    torn: tuple[Skipped, ...] = ()  # lines skipped that no later ``journal_sealed`` record explains
    acked: frozenset[str] = frozenset()  # runaway sessions acknowledged (``check --ack``)
    offsite: tuple[float | None, dict | None] = (None, None)  # newest off-host copy, last restic check

    @classmethod
    def read(cls, profile: Place) -> _JournalFacts:
        skipped: list[Skipped] = []
        journal = read_journal(profile.keeper_dir, skipped)
        sealed = [i for i, r in enumerate(journal) if r.get("action") == JOURNAL_SEALED]
        torn = tuple(s for s in skipped if not any(i >= s.after for i in sealed))
        last_run = max((r["ts"] for r in journal if r.get("action") == RUN_DONE), default=None)
        verifies = [r for r in journal if r.get("action") == ARCHIVE_VERIFIED]
        first = min((r["ts"] for r in journal), default=None)
        since = max((r["ts"] for r in verifies if r.get("ok")), default=first)
        marks = [r["action"] for r in journal if r.get("action") in (SCHEDULED, UNSCHEDULED)]
        prunes = "a schedule" if marks[-1:] == [SCHEDULED] else "its runs" if last_run is not None else ""
        acked = frozenset(str(r.get("session")) for r in journal if r.get("action") == RUNAWAY_ACKED)
        checks = [r for r in journal if r.get("action") == CHECKED]
        offsite = (newest_copy_time(journal), checks[-1] if checks else None)
        return cls(last_run, verifies, since, prunes, torn, acked, offsite)


def _journal_measure(past: _JournalFacts) -> Measure:
    """Lines of the journal that are not records (a power cut tore one): skipped, and a WARNING
    until the next writing command seals the line (``journal_sealed``)."""
    n = len(past.torn)
    problem = f"{n} journal line(s) skipped: {past.torn[0]}; the next run seals it" if n else ""
    return Measure("journal_skipped", n, "", None, None, WARNING if n else OK, problem)


def _both_prune(rep: Vitals, past: _JournalFacts) -> list[Measure]:
    """A WARNING while Hermes's own auto-prune and the keeper both prune this profile: Hermes's
    deletes no archive holds, and it deletes again what `archive restore` brought back."""
    ap = rep.hermes_auto_prune
    if not (ap.enabled and past.keeper_prunes):
        return []
    problem = (
        f"Hermes's own auto-prune is on ({ap.origin}) beside the keeper's ({past.keeper_prunes}):"
        " it deletes without an archive and undoes restores; run `hermes-keeper adopt`"
    )
    return [Measure("hermes_auto_prune", None, "", None, None, WARNING, problem)]


def _disk_measures(rep: Vitals, t: dict, free: int) -> list[Measure]:
    """state.db, its growth and WAL against their limits; the home's free space and, at the
    last 7 days' rate, how soon it is gone."""
    db, wal = rep.disk.state_db, rep.disk.wal
    growth = rep.growth.last_7d.bytes_per_day
    full_in = free / growth * 86400 if growth > 0 else None
    return [
        _over("db", db, "B", t["db_warn"], t["db_crit"], f"state.db {units.size(db)}"),
        _over(
            "growth_per_day",
            growth,
            "B",
            t["growth_warn"],
            t["growth_crit"],
            f"growing {units.size(growth)}/day",
        ),
        _over("wal", wal, "B", t["wal_warn"], t["wal_crit"], f"WAL {units.size(wal)}"),
        _under(
            "free", free, "B", t["free_warn"], t["free_crit"], f"{units.size(free)} free on the home's disk"
        ),
        _under(
            "full_in",
            full_in,
            "s",
            t["full_in_warn"],
            t["full_in_crit"],
            f"disk full in {units.span(full_in, 1)}",
        )
        if full_in is not None
        else Measure("full_in", None, "s", t["full_in_warn"], t["full_in_crit"], OK, floor=True),
    ]


def _runaways_named(runaways: list[Runaway]) -> str:
    """The runaways of the status line: each by its session id and why (the first few), and how to
    silence one."""
    named = ", ".join(f"{r.id} ({'; '.join(r.why)})" for r in runaways[:NAMED_RUNAWAYS])
    more = f" and {len(runaways) - NAMED_RUNAWAYS} more" if len(runaways) > NAMED_RUNAWAYS else ""
    return f"{len(runaways)} runaway sessions: {named}{more}; `check --ack ID` acknowledges one"


def _session_measures(zombies: int, runaways: list[Runaway], reclaimable: int, t: dict) -> list[Measure]:
    """Zombies, runaways (CRITICAL: the policy's ``[runaway]`` limits, those that alert) and free
    pages in state.db."""
    return [
        _over("zombies", zombies, "", t["zombies_warn"], None, f"{zombies} zombie sessions"),
        _over("runaways", len(runaways), "", None, t["runaways_crit"], _runaways_named(runaways)),
        _over(
            "reclaimable",
            reclaimable,
            "B",
            t["reclaimable_warn"],
            None,
            f"{units.size(reclaimable)} reclaimable in state.db",
        ),
    ]


def _archive_measures(profile: Place, rep: Vitals, t: dict, now: float, past: _JournalFacts) -> list[Measure]:
    """The archive against its budget (over it: a WARNING, the run trims it) and, where there is
    one, how long since it was verified and whether the last verify failed."""
    out = []
    archive = rep.archive
    if archive.budget is not None:  # [archive] max_bytes
        out.append(
            _over(
                "archive",
                archive.bytes,
                "B",
                archive.budget,
                None,
                f"archive {units.size(archive.bytes)} over its budget of {units.size(archive.budget)}",
            )
        )
    if archive_exists(profile.keeper_dir):
        out.append(
            _age(
                "archive_verify_age",
                past.verify_since,
                now,
                t["verify_warn"],
                None,
                "archive verified",
                NEVER_VERIFIED,
            )
        )
        if past.verifies and not past.verifies[-1].get("ok"):
            damaged = past.verifies[-1].get("damaged", 0)
            out.append(
                Measure(
                    "archive_damaged",
                    damaged,
                    "",
                    None,
                    0,
                    CRITICAL,
                    f"the last archive verify failed ({damaged} damaged rows)",
                )
            )
    return out


def _offsite_measures(policy: Policy, t: dict, now: float, past: _JournalFacts) -> list[Measure]:
    """Where ``[offsite]`` names a restic repository: the age of the newest off-host copy of
    state.db (as the runs' pushes journaled it: no network), and a failed ``restic check``."""
    if not policy.offsite_repository:
        return []
    newest, checked = past.offsite
    out = [
        _age(
            "offsite_age",
            newest,
            now,
            t["offsite_warn"],
            t["offsite_crit"],
            "newest off-host copy",
            NO_OFFSITE,
        )
    ]
    if checked is not None and not checked.get("ok"):
        why = f"the last restic check failed: {checked.get('problem')}"
        out.append(Measure("offsite_check", 1, "", None, 0, CRITICAL, why))
    return out


#: Severity for combining statuses (the monitoring-plugins rule): CRITICAL over UNKNOWN over WARNING.
_SEVERITY = {OK: 0, WARNING: 1, UNKNOWN: 2, CRITICAL: 3}


def worst(codes: list[int]) -> int:
    """The status of several: the most severe; none at all is UNKNOWN."""
    return max(codes, key=_SEVERITY.__getitem__, default=UNKNOWN)


def status_line(results: list[CheckResult], failures: list[str] = ()) -> tuple[str, int]:
    """The one Nagios line for all ``results`` (a profile that could not be checked: UNKNOWN)."""
    code = worst([r.status for r in results] + [UNKNOWN] * bool(failures))
    several = len(results) + len(failures) > 1
    problems = [f"{r.profile}: {p}" if several else p for r in results for p in r.problems()]
    problems += list(failures)
    if problems:
        text = "; ".join(problems)
    else:
        text = ", ".join(
            f"{r.profile + ': ' if several else ''}state.db {units.size(r.measure('db').value)}, "
            f"{units.size(r.measure('growth_per_day').value)}/day, last run {_ago(r)}"
            for r in results
        )
    perf = [p for r in results for p in r.perfdata(f"{r.profile}_" if several else "")]
    return f"HERMES-KEEPER {STATUS[code]} - {text}" + (f" | {' '.join(perf)}" if perf else ""), code


def _ago(r: CheckResult) -> str:
    m = r.measure("last_run_age")
    return "never" if m.value is None else f"{units.span(m.value, 1)} ago"
