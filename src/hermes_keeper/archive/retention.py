"""Archive retention (opt-in): ``[archive] keep`` and ``max_bytes``, oldest first.

Survey (entries without payloads, file sizes, which archived ids state.db holds) -> a pure
:func:`plan_retention` -> :func:`apply_retention`, journaled. An entry is dropped when its
conversation's last activity is older than ``keep``, then, oldest first, while the archive's
files on disk are over ``max_bytes``. An entry still ``archived`` (a prune in flight) is never
dropped. One whose session is not in state.db is the last copy of that conversation: setting
a retention is what allows dropping it, and the plan says how many go for good.

A month file whose entries all go is deleted as a file (space back at once); in another file
the rows are deleted and the file vacuumed when that is worth it. The newest file is never
deleted whole: new entries go there and it carries the entry counter.
"""

from __future__ import annotations

import contextlib
import os
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

from hermes_keeper.archive.store import ARCHIVED, Archive, Entry, archive_exists
from hermes_keeper.errors import KeeperError
from hermes_keeper.sqlite.connect import connect_ro, read_txn, write_txn

if TYPE_CHECKING:
    from hermes_keeper.journal import Journal
    from hermes_keeper.model.policy import Policy
    from hermes_keeper.place import Place

#: A file other than the newest is vacuumed after any delete (nothing else will reuse its pages);
#: the newest when at least this share of it went (new entries reuse the rest), or under a budget.
VACUUM_SHARE = 0.2


@dataclass(frozen=True)
class FileFacts:
    name: str
    bytes: int  # on disk, its -wal included
    entries: tuple[Entry, ...]
    base_bytes: int = 0  # what it holds with no entry (a page per table and index): freed only whole

    def weights(self) -> dict[int, int]:
        """Each entry's share of the file beyond its base, by its stored bytes: what deleting it
        (and vacuuming) gives back."""
        data, stored = max(0, self.bytes - self.base_bytes), sum(e.stored_bytes for e in self.entries)
        return {e.entry: round(data * e.stored_bytes / stored) if stored else 0 for e in self.entries}


@dataclass(frozen=True)
class ArchiveSurvey:
    files: tuple[FileFacts, ...]  # oldest first; the last is the one new entries go to
    in_state: frozenset[str]  # archived session ids that state.db holds (again)

    @property
    def bytes(self) -> int:
        return sum(f.bytes for f in self.files)


def _disk_bytes(path) -> int:
    total = 0
    for side in ("", "-wal"):
        with contextlib.suppress(FileNotFoundError):
            total += os.lstat(f"{path}{side}").st_size
    return total


def survey_archive(profile: Place) -> ArchiveSurvey:
    """What retention needs to know, read-only (an empty survey when there is no archive)."""
    if not archive_exists(profile.keeper_dir):
        return ArchiveSurvey((), frozenset())
    with Archive.for_home(profile.keeper_dir, create=False) as store:
        files = tuple(
            FileFacts(f.path.name, _disk_bytes(f.path), tuple(f.entries("ORDER BY entry")), f.base_bytes())
            for f in store.files
        )
    ids = sorted({e.session_id for f in files for e in f.entries})
    held: set[str] = set()
    if ids and profile.db_path.exists():
        conn = connect_ro(profile.db_path)
        try:
            with read_txn(conn):
                for i in range(0, len(ids), 500):
                    chunk = ids[i : i + 500]
                    marks = ",".join("?" * len(chunk))
                    held.update(
                        r[0] for r in conn.execute(f"SELECT id FROM sessions WHERE id IN ({marks})", chunk)
                    )
        finally:
            conn.close()
    return ArchiveSurvey(files, frozenset(held))


def age_of(e: Entry) -> float:
    """When the archived conversation was last active (the archiving time when it says nothing)."""
    return next(t for t in (e.last_activity, e.started_at, e.archived_at) if t is not None)


@dataclass(frozen=True)
class Drop:
    entry: int
    session_id: str
    file: str
    bytes: int  # its share of its file on disk
    reason: str
    gone_for_good: bool  # its session is not in state.db: this is the last copy


@dataclass
class RetentionPlan:
    keep_s: float | None
    max_bytes: int | None
    bytes: int = 0  # the archive's files on disk now
    after_bytes: int = 0  # estimated, once the plan is done
    entries: int = 0
    drops: list[Drop] = field(default_factory=list)
    delete_files: list[str] = field(default_factory=list)  # dropped whole
    vacuum_files: list[str] = field(default_factory=list)  # rows deleted, then vacuumed

    @property
    def freed_bytes(self) -> int:
        return self.bytes - self.after_bytes

    @property
    def gone_for_good(self) -> list[str]:
        return sorted({d.session_id for d in self.drops if d.gone_for_good})

    def warning(self) -> str | None:
        """Said loudly in the plan: conversations that exist nowhere else after the run."""
        gone = self.gone_for_good
        if not gone:
            return None
        why = ", ".join(
            f"{n} {r}" for r, n in Counter(d.reason for d in self.drops if d.gone_for_good).items()
        )
        return (
            f"archive retention deletes {len(gone)} archived sessions that are not in state.db: "
            f"they will be gone for good ({why})"
        )

    def to_dict(self, verbose: bool = False) -> dict:
        out = {
            "keep_s": self.keep_s,
            "max_bytes": self.max_bytes,
            "bytes": self.bytes,
            "entries": self.entries,
            "drop_entries": len(self.drops),
            "drop_sessions": len({d.session_id for d in self.drops}),
            "gone_for_good": len(self.gone_for_good),
            "est_freed_bytes": self.freed_bytes,
            "est_after_bytes": self.after_bytes,
            "delete_files": self.delete_files,
            "vacuum_files": self.vacuum_files,
            "reasons": dict(Counter(d.reason for d in self.drops)),
        }
        if verbose:
            out["drops"] = [asdict(d) for d in self.drops]
        return out


def _days(seconds: float) -> str:
    return f"{seconds / 86400:g}d"


def plan_retention(
    survey: ArchiveSurvey, keep_s: float | None, max_bytes: int | None, now: float
) -> RetentionPlan:
    """What goes, oldest first, and why: pure (no file, no clock)."""
    plan = RetentionPlan(keep_s, max_bytes, survey.bytes, sum(len(f.entries) for f in survey.files))
    weight: dict[int, int] = {}
    home: dict[int, FileFacts] = {}
    for f in survey.files:
        weight |= f.weights()
        home.update((e.entry, f) for e in f.entries)
    newest = survey.files[-1].name if survey.files else None
    left_in = Counter(f.name for f in survey.files for _ in f.entries)

    def freed(e: Entry) -> int:
        """Its share; the last entry of a file that goes whole (not the newest) also frees the base."""
        f = home[e.entry]
        left_in[f.name] -= 1
        return weight[e.entry] + (f.base_bytes if left_in[f.name] == 0 and f.name != newest else 0)

    candidates = sorted(
        (e for f in survey.files for e in f.entries if e.state != ARCHIVED),
        key=lambda e: (age_of(e), e.entry),
    )
    chosen: dict[int, str] = {}
    left = survey.bytes
    if keep_s is not None:
        for e in candidates:
            if age_of(e) < now - keep_s:
                chosen[e.entry] = f"older than archive.keep {_days(keep_s)}"
                left -= freed(e)
    if max_bytes is not None:
        for e in candidates:
            if left <= max_bytes:
                break
            if e.entry not in chosen:
                chosen[e.entry] = "archive over archive.max_bytes"
                left -= freed(e)
    by_entry = {e.entry: e for f in survey.files for e in f.entries}
    plan.drops = [
        Drop(
            n,
            by_entry[n].session_id,
            home[n].name,
            weight[n],
            why,
            by_entry[n].session_id not in survey.in_state,
        )
        for n, why in sorted(chosen.items(), key=lambda kv: (age_of(by_entry[kv[0]]), kv[0]))
    ]
    plan.after_bytes = left
    for f in survey.files:
        gone = [e.entry for e in f.entries if e.entry in chosen]
        if f.name != newest and len(gone) == len(f.entries):
            plan.delete_files.append(f.name)
        elif gone and (
            f.name != newest  # nothing else will reuse its free pages
            or max_bytes is not None  # the budget is what the disk holds
            or sum(weight[n] for n in gone) >= VACUUM_SHARE * f.bytes
        ):
            plan.vacuum_files.append(f.name)
    return plan


def apply_retention(profile: Place, plan: RetentionPlan, journal: Journal | None = None) -> dict:
    """Drop what the plan says, file by file, one journal line each; what was done.

    Rechecked here: an entry that became ``archived`` meanwhile stays, and a file is deleted
    whole only while it holds exactly the planned entries.
    """
    done = {"entries": 0, "sessions": 0, "files_deleted": 0, "freed_bytes": 0, "gone_for_good": 0}
    if not plan.drops and not plan.delete_files:
        return done
    by_file: dict[str, list[Drop]] = {}
    for d in plan.drops:
        by_file.setdefault(d.file, []).append(d)
    with Archive.for_home(profile.keeper_dir, create=False) as store:
        for f in list(store.files):
            drops = by_file.get(f.path.name, [])
            if not drops and f.path.name not in plan.delete_files:
                continue
            before = _disk_bytes(f.path)
            planned = {d.entry for d in drops}
            rows = dict(f.conn.execute("SELECT entry, state FROM archived_sessions"))
            whole = (
                f.path.name in plan.delete_files and set(rows) == planned and ARCHIVED not in rows.values()
            )
            if whole:
                store.drop_file(f)
                gone = drops
            else:
                gone = [d for d in drops if d.entry in rows and rows[d.entry] != ARCHIVED]
                with write_txn(f.conn):
                    f.delete([d.entry for d in gone])
                if f.path.name in plan.vacuum_files:
                    f.conn.execute("VACUUM")
                f.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            freed = before - (0 if whole else _disk_bytes(f.path))
            done["entries"] += len(gone)
            done["files_deleted"] += whole
            done["freed_bytes"] += max(0, freed)
            done["gone_for_good"] += sum(d.gone_for_good for d in gone)
            if journal:
                journal.write(
                    "archive_retention",
                    file=f.path.name,
                    file_deleted=whole,
                    entries=[d.entry for d in gone],
                    sessions=sorted({d.session_id for d in gone}),
                    gone_for_good=sorted({d.session_id for d in gone if d.gone_for_good}),
                    reasons=dict(Counter(d.reason for d in gone)),
                    bytes=max(0, freed),
                )
    done["sessions"] = len({d.session_id for d in plan.drops})
    return done


@dataclass(frozen=True)
class ArchiveUsage:
    """The archive's size against its budget: what ``report`` shows and a ``check`` can test."""

    bytes: int
    files: int
    entries: int
    sessions: int
    oldest: float | None  # last activity of the oldest archived conversation
    budget: int | None  # archive.max_bytes
    keep_s: float | None  # archive.keep
    over_budget: bool
    expired: int  # entries older than archive.keep (a run drops them)
    problem: str | None = None  # why the archive or its policy could not be read (figures are zeros)

    def to_dict(self) -> dict:
        return asdict(self)


def archive_usage(
    survey: ArchiveSurvey, keep_s: float | None, max_bytes: int | None, now: float, problem: str | None = None
) -> ArchiveUsage:
    entries = [e for f in survey.files for e in f.entries]
    return ArchiveUsage(
        bytes=survey.bytes,
        files=len(survey.files),
        entries=len(entries),
        sessions=len({e.session_id for e in entries}),
        oldest=min((age_of(e) for e in entries), default=None),
        budget=max_bytes,
        keep_s=keep_s,
        over_budget=max_bytes is not None and survey.bytes > max_bytes,
        expired=0
        if keep_s is None
        else sum(1 for e in entries if e.state != ARCHIVED and age_of(e) < now - keep_s),
        problem=problem,
    )


def plan_archive_retention(profile: Place, policy: Policy, now: float) -> RetentionPlan | None:
    """The archive's retention for a run (None when the policy sets none); its
    :meth:`RetentionPlan.warning` is loud when it deletes conversations that exist nowhere else."""
    if policy.archive_keep_s is None and policy.archive_max_bytes is None:
        return None
    return plan_retention(survey_archive(profile), policy.archive_keep_s, policy.archive_max_bytes, now)


def place_archive_usage(
    profile: Place, policy: Policy, now: float, survey: ArchiveSurvey | None = None
) -> ArchiveUsage:
    """The archive's bytes, files, entries, oldest conversation and budget, against ``policy``'s
    ``[archive]``; a usage that says why (``problem``) where the archive cannot be read.
    ``survey``: the archive as already read (:func:`survey_archive`)."""
    try:
        survey = survey or survey_archive(profile)
    except KeeperError as exc:  # a report still shows everything else, and says why not this
        return archive_usage(ArchiveSurvey((), frozenset()), None, None, now, problem=str(exc))
    return archive_usage(survey, policy.archive_keep_s, policy.archive_max_bytes, now)
