"""Files beyond ``state.db`` that grow without bound: one model of "a file the policy may remove".

Hermes lets ``cron/output/<job>/``, ``state-snapshots/`` and its forensic
``state.db.malformed-backup-*`` copies grow; the keeper leaves its own pre-restore copies and,
when killed, temporary files. Each kind is a rule with its settings in ``policy.SETTINGS``
(``[files]``). The survey lists what is there (:func:`scan_folders`: facts only, through the
door), the plan decides (:func:`plan_folders`: pure, one stable reason per file) and the run
removes (:func:`remove`: confined, never through or of a symlink). ``checkpoints/`` is Hermes's
``/rollback`` store with its own CLI and cap (``hermes checkpoints``): reported, never touched;
so are the WAL generations Hermes sets aside (``state.db.retired-wal-*/``: :data:`RETIRED_WAL`),
which may hold committed messages that are nowhere else.
"""

from __future__ import annotations

import stat
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from hermes_keeper import units
from hermes_keeper.backup.restore import RESTORE_TMP, SAFETY_PREFIX
from hermes_keeper.backup.snapshot import TEMP_PREFIX, killed_backup_leftovers
from hermes_keeper.errors import KeeperError
from hermes_keeper.facts import CHECK_TRUSTED_S, Check, copy_checks
from hermes_keeper.fs import DB_NAME, KEEPER_DIR, SQLITE_SIDES, HomeFS
from hermes_keeper.model.policy import Policy
from hermes_keeper.run.compact import ESTIMATE_PREFIX
from hermes_keeper.sqlite.fts import HOLD_NAME

CRON_OUTPUT = "cron_output"
STATE_SNAPSHOT = "state_snapshot"
MALFORMED_COPY = "malformed_copy"
RESTORE_COPY = "restore_copy"
KEEPER_LEFTOVER = "keeper_leftover"
#: Hermes's set-aside WAL generations (``hermes_state_dbfile.capture_retired_wal_generation``):
#: found and reported as needing recovery, never decided or removed (not in :data:`KINDS`).
RETIRED_WAL = "retired_wal"
#: The kinds this module decides, in the order the plan and the report list them.
KINDS = (CRON_OUTPUT, STATE_SNAPSHOT, MALFORMED_COPY, RESTORE_COPY, KEEPER_LEFTOVER)
#: Where each kind lives, as ``report`` names it.
WHERE = {
    CRON_OUTPUT: "cron/output/<job>/",
    STATE_SNAPSHOT: "state-snapshots/",
    MALFORMED_COPY: "state.db.malformed-backup-*",
    RESTORE_COPY: "state.db.keeper-before-restore-*",
    KEEPER_LEFTOVER: "killed keeper commands' temp files",
}
#: The kinds :mod:`survey` finds under ``sessions/`` (decided in :func:`plan.make_plan`).
SESSION_KINDS = ("transcript", "snapshot", "request_dump")
MALFORMED_PREFIX = f"{DB_NAME}.malformed-backup-"
#: ``<name>.retired-wal-<utc ts>-<pid>/`` (``RETIRED_GENERATION_DIR_SUFFIX``), ``.partial`` while written.
RETIRED_WAL_PREFIX = f"{DB_NAME}.retired-wal-"
CHECKPOINTS_RULE = "never removed (`hermes checkpoints`)"
CHECKPOINTS_NOTE = (
    "checkpoints/ is Hermes's /rollback store with its own cap (checkpoints.max_total_size_mb in"
    " config.yaml): the keeper never removes anything in it; `hermes checkpoints` lists and prunes it"
)
SYMLINK = "symlink: never followed or removed"
HOLDS_SYMLINK = "holds a symlink: never followed or removed"
FTS_HOLD_TMP = Path(HOLD_NAME).with_suffix(".tmp").name
NOT_CHECKED = "not checked"


@dataclass(frozen=True)
class FileAction:
    """A file (or a folder removed whole) the plan removes or keeps, and why; ``path`` is absolute."""

    path: str
    kind: str
    bytes: int
    reason: str
    session_id: str | None = None
    #: the reason's stable code, where it has one (run/reasons.py: a transcript kept as the only copy)
    code: str | None = None


@dataclass(frozen=True)
class Found:
    """One entry of a growing folder, as the survey saw it (facts, no decision)."""

    kind: str
    parts: tuple[str, ...]  # under the home
    bytes: int  # with a copy's -wal/-shm/-journal, or a folder's files
    mtime: float
    files: int = 1
    group: str = ""  # the cron job
    link: str = ""  # why it is never removed: it is a symlink (or behind one), or holds one
    readable: bool | None = None  # a malformed copy passes quick_check (None: unchecked or not in time)
    what: str = ""  # the keeper command that left a leftover


@dataclass
class Folders:
    """What the survey found, and ``state.db``'s quick_check as the malformed-copy rule reads it
    (only where Hermes's copies exist)."""

    found: list[Found]
    db_check: str | None = None
    retired_wal: list[Found] = field(default_factory=list)  # reported, never removed


@dataclass
class NotInStateDb:
    """``sessions/*.jsonl`` transcripts a run keeps because their messages may be nowhere else
    (:mod:`run.transcripts`): those read and found holding messages in neither state.db nor the
    archive, and those not read whole (over the read cap, a line that is not JSON, an error)."""

    files: int = 0
    bytes: int = 0
    messages: int = 0  # in neither state.db nor the archive
    unread_files: int = 0
    unread_bytes: int = 0

    def to_dict(self) -> dict:
        return asdict(self)


def _copies(entries, prefix: str, kind: str) -> list[Found]:
    """``state.db`` copies named ``prefix*`` at the home's top, each with its SQLite side files."""
    names = {n: st for n, st in entries}
    out = []
    for name, st in entries:
        if not name.startswith(prefix) or name.endswith(SQLITE_SIDES) or ".incomplete" in name:
            continue  # a side file goes with its copy; Hermes sweeps its own .incomplete staging
        sides = [names[name + s] for s in SQLITE_SIDES if name + s in names]
        odd = not stat.S_ISREG(st.st_mode) or any(not stat.S_ISREG(s.st_mode) for s in sides)
        size = st.st_size + sum(s.st_size for s in sides)
        out.append(Found(kind, (name,), size, st.st_mtime, 1 + len(sides), link=SYMLINK if odd else ""))
    return out


def _tree(fs: HomeFS, *parts: str) -> tuple[int, int, str]:
    """(bytes, files, :attr:`Found.link`) of a folder, walked without following a symlink."""
    entries = fs.entries(*parts)
    if entries is None:
        return 0, 0, SYMLINK
    size = files = 0
    odd = False
    for name, st in entries:
        if stat.S_ISDIR(st.st_mode):
            b, f, o = _tree(fs, *parts, name)
            size, files, odd = size + b, files + f, odd or bool(o)
        elif stat.S_ISREG(st.st_mode):
            size, files = size + st.st_size, files + 1
        else:
            odd = True
    return size, files, HOLDS_SYMLINK if odd else ""


def _cron_output(fs: HomeFS) -> list[Found]:
    jobs = fs.entries("cron", "output")
    if jobs is None:  # cron/output is a symlink (or behind one): kept whole
        return [Found(CRON_OUTPUT, ("cron", "output"), 0, 0.0, 0, link=SYMLINK)]
    out = []
    for job, st in jobs:
        if not stat.S_ISDIR(st.st_mode):
            if stat.S_ISLNK(st.st_mode):
                out.append(Found(CRON_OUTPUT, ("cron", "output", job), 0, st.st_mtime, 0, job, SYMLINK))
            continue
        for name, fst in fs.entries("cron", "output", job) or []:
            if name.endswith(".md") and not name.startswith("."):  # Hermes's own temp is .output_*
                parts = ("cron", "output", job, name)
                out.append(Found(CRON_OUTPUT, parts, fst.st_size, fst.st_mtime, 1, job, _link(fst)))
    return out


def _state_snapshots(fs: HomeFS) -> list[Found]:
    entries = fs.entries("state-snapshots")
    if entries is None:
        return [Found(STATE_SNAPSHOT, ("state-snapshots",), 0, 0.0, 0, link=SYMLINK)]
    out = []
    for name, st in entries:
        if name.startswith(".") or name.endswith(".partial"):
            continue  # Hermes's staging folder, maybe in use
        if stat.S_ISDIR(st.st_mode):
            size, files, odd = _tree(fs, "state-snapshots", name)
            out.append(Found(STATE_SNAPSHOT, ("state-snapshots", name), size, st.st_mtime, files, link=odd))
        elif stat.S_ISLNK(st.st_mode):
            out.append(Found(STATE_SNAPSHOT, ("state-snapshots", name), 0, st.st_mtime, 0, link=SYMLINK))
    return out


def leftover_of(parts: tuple[str, ...]) -> str:
    """Which keeper command leaves ``parts`` behind when it is killed ("" for none of them)."""
    if len(parts) == 1 and parts[0] in {RESTORE_TMP, *(RESTORE_TMP + s for s in SQLITE_SIDES)}:
        return "restore"
    if len(parts) == 2 and parts[0] == KEEPER_DIR:
        if parts[1] == FTS_HOLD_TMP:
            return "run (FTS hold)"
        if parts[1].startswith(ESTIMATE_PREFIX):
            return "compact (VACUUM estimate)"
    if len(parts) == 3 and parts[:2] == (KEEPER_DIR, "backups") and parts[2].startswith(TEMP_PREFIX):
        return "backup"
    return ""


def _leftovers(fs: HomeFS, top) -> list[Found]:
    out = []
    for name, st in top:
        if leftover_of((name,)):
            out.append(
                Found(KEEPER_LEFTOVER, (name,), st.st_size, st.st_mtime, link=_link(st), what="restore")
            )
    for name, st in fs.entries(KEEPER_DIR) or []:
        what = leftover_of((KEEPER_DIR, name))
        if not what:
            continue
        size, files, odd = (
            _tree(fs, KEEPER_DIR, name) if stat.S_ISDIR(st.st_mode) else (st.st_size, 1, _link(st))
        )
        out.append(Found(KEEPER_LEFTOVER, (KEEPER_DIR, name), size, st.st_mtime, files, link=odd, what=what))
    backups = fs.path(KEEPER_DIR, "backups")
    if fs.plain_dir(KEEPER_DIR, "backups"):  # not while a backup runs there (it holds the manifest lock)
        for lo in killed_backup_leftovers(backups):
            st = fs.lstat(KEEPER_DIR, "backups", lo.path.name)
            if st is not None and stat.S_ISREG(st.st_mode):
                parts = (KEEPER_DIR, "backups", lo.path.name)
                out.append(Found(KEEPER_LEFTOVER, parts, st.st_size, st.st_mtime, what="backup"))
    return out


def _link(st) -> str:
    return "" if stat.S_ISREG(st.st_mode) else SYMLINK


def retired_wal_warning(folders: Folders) -> str | None:
    """What a person must know of the retired WAL generations found (None: there are none)."""
    if not folders.retired_wal:
        return None
    n, names = len(folders.retired_wal), ", ".join(f"{f.parts[0]}/" for f in folders.retired_wal)
    return (
        f"{units.plural(n, 'retired WAL generation')} of state.db {'needs' if n == 1 else 'need'} recovery"
        f" ({names}): Hermes set each aside when the live state.db-wal was replaced or lost under it;"
        " it may hold committed messages that are not in state.db. The keeper never removes them:"
        " inspect one with `hermes sessions recover --source <folder>/state.db --inspect-only`"
        " (its manifest.json says why it was captured)"
    )


def _retired_wal(fs: HomeFS, top) -> list[Found]:
    """Hermes's set-aside WAL generations at the home's top, each a folder (``.partial`` while
    Hermes writes it): found to be reported, never removed."""
    out = []
    for name, st in top:
        if name.startswith(RETIRED_WAL_PREFIX):
            size, files, odd = _tree(fs, name) if stat.S_ISDIR(st.st_mode) else (st.st_size, 1, _link(st))
            out.append(Found(RETIRED_WAL, (name,), size, st.st_mtime, files, link=odd))
    return out


def scan_folders(fs: HomeFS, db_check: Callable[[], Check | None], budget_s: float | None = None) -> Folders:
    """Every entry the rules decide, read through the door (changes nothing).

    Only where Hermes's malformed-db copies exist: ``db_check()`` gives state.db's quick_check
    (a check taken now, or the one on record), which counts when it passed within
    :data:`facts.CHECK_TRUSTED_S`; else, or when it fails, each copy's own check
    (:func:`facts.copy_checks`, within ``budget_s``) says which copies are readable. The plan
    may remove one only while another readable copy stays.
    """
    top = fs.entries() or []
    found = _cron_output(fs) + _state_snapshots(fs)
    malformed = _copies(top, MALFORMED_PREFIX, MALFORMED_COPY)
    found += _copies(top, SAFETY_PREFIX, RESTORE_COPY) + _leftovers(fs, top)
    state = None
    if malformed:
        st = fs.lstat(DB_NAME)
        missing = not (st and stat.S_ISREG(st.st_mode))
        state = f"{NOT_CHECKED}: state.db missing" if missing else _trusted(db_check())
        if state != "ok":
            real = [(f.parts[0], f.bytes, f.mtime) for f in malformed if not f.link]
            readable = copy_checks(fs, real, budget_s)
            malformed = [f if f.link else replace(f, readable=readable[f.parts[0]]) for f in malformed]
    return Folders(found + malformed, state, _retired_wal(fs, top))


def _trusted(check: Check | None) -> str:
    """state.db's quick_check as the malformed-copy rule reads it ("not checked: ..." if unsure)."""
    if check is None:
        return f"{NOT_CHECKED}: no full check on record (state.db could not be read whole now)"
    if time.time() - check.at > CHECK_TRUSTED_S:
        return f"{NOT_CHECKED}: the last full check is older than {_days(CHECK_TRUSTED_S)}"
    return check.result


def _days(seconds: float) -> str:
    return f"{seconds / 86400:g}d" if seconds >= 86400 else f"{seconds / 3600:g}h"


def rule(kind: str, policy: Policy) -> str:
    """What the policy does with ``kind``, in a few words (``report``)."""
    if kind == CRON_OUTPUT:
        keep, age = policy.cron_output_keep, policy.cron_output_age_s
        rules = ([f"newest {keep} per job kept"] if keep is not None else []) + (
            [f"> {_days(age)} removed"] if age is not None else []
        )
        return "; ".join(rules) + " (newest per job kept)" if rules else "off"
    if kind == MALFORMED_COPY:
        age = policy.malformed_copies_age_s
        return "off" if age is None else f"> {_days(age)} removed (newest, last readable kept)"
    if kind in (STATE_SNAPSHOT, RESTORE_COPY):
        n = policy.state_snapshots_keep if kind == STATE_SNAPSHOT else policy.restore_copies_keep
        return "off" if n is None else f"newest {n} kept"
    return "removed" if policy.keeper_leftovers else "off"


def _newest_first(found: list[Found]) -> list[Found]:
    """Newest first by name, as Hermes's own pruning orders them: every kind is named by its time
    (a folder's mtime is not: it changes whenever a file in it does)."""
    return sorted(found, key=lambda f: (f.parts[-1], f.mtime), reverse=True)


def _decide(kind: str, real: list[Found], folders: Folders, policy: Policy, now: float):
    """(entry, reason to remove it | None, reason it is kept though the rule would remove it | None)."""
    if kind == CRON_OUTPUT:
        keep, age = policy.cron_output_keep, policy.cron_output_age_s
        jobs: dict[str, list[Found]] = {}
        for f in real:
            jobs.setdefault(f.group, []).append(f)
        for files in jobs.values():
            for i, f in enumerate(_newest_first(files)[1:], 1):
                if keep is not None and i >= keep:
                    yield f, f"cron output beyond the newest {keep} of its job", None
                elif age is not None and now - f.mtime > age:
                    yield f, f"cron output older than {_days(age)}", None
    elif kind in (STATE_SNAPSHOT, RESTORE_COPY):
        n = policy.state_snapshots_keep if kind == STATE_SNAPSHOT else policy.restore_copies_keep
        what = "state snapshot" if kind == STATE_SNAPSHOT else "pre-restore copy"
        for f in _newest_first(real)[n:] if n is not None else ():
            yield f, f"{what} beyond the newest {n}", None
    elif kind == MALFORMED_COPY:
        age = policy.malformed_copies_age_s
        ordered = _newest_first(real)
        old = [f for f in ordered[1:] if age is not None and now - f.mtime > age]
        anchor = next((f for f in ordered if f.readable), None)
        doubt = "is not known to pass" if (folders.db_check or "").startswith(NOT_CHECKED) else "fails"
        for f in old:
            why = f"Hermes's malformed-db copy older than {_days(age)}"
            if folders.db_check == "ok":
                yield f, f"{why} (state.db passes quick_check)", None
            elif anchor is None:
                yield f, None, f"state.db {doubt} quick_check and no copy passes it: kept for recovery"
            elif f is anchor:
                yield f, None, f"the only copy that passes quick_check while state.db {doubt} it"
            else:
                yield f, f"{why} (another copy passes quick_check)", None
    elif kind == KEEPER_LEFTOVER and policy.keeper_leftovers:
        for f in real:
            yield f, f"left by a killed keeper {f.what}", None


def plan_folders(
    folders: Folders, policy: Policy, home: Path, now: float
) -> tuple[list[FileAction], list[FileAction]]:
    """(files to remove, files a rule would remove but a safety keeps, and every symlink); pure."""
    remove: list[FileAction] = []
    kept: list[FileAction] = []
    for kind in KINDS:
        found = [f for f in folders.found if f.kind == kind]
        kept += [_action(f, home, f.link) for f in found if f.link]
        real = [f for f in found if not f.link]
        for f, why, kept_why in _decide(kind, real, folders, policy, now):
            (remove if why else kept).append(_action(f, home, why or kept_why))
    return remove, kept


def _action(f: Found, home: Path, reason: str) -> FileAction:
    return FileAction(str(home.joinpath(*f.parts)), f.kind, f.bytes, reason)


def _allowed(kind: str, parts: tuple[str, ...]) -> bool:
    """The path fits its kind (a plan is data: a removal never strays outside what its rule covers)."""
    name = parts[-1] if parts else ""
    return {
        CRON_OUTPUT: len(parts) == 4 and parts[:2] == ("cron", "output") and name.endswith(".md"),
        STATE_SNAPSHOT: len(parts) == 2 and parts[0] == "state-snapshots",
        MALFORMED_COPY: len(parts) == 1 and name.startswith(MALFORMED_PREFIX),
        RESTORE_COPY: len(parts) == 1 and name.startswith(SAFETY_PREFIX),
        KEEPER_LEFTOVER: bool(leftover_of(parts)),
    }.get(kind, kind in SESSION_KINDS and len(parts) >= 2 and parts[0] == "sessions")


def remove(fs: HomeFS, action: FileAction) -> int | None:
    """Remove one planned entry through the door; its bytes, or None when nothing was removed
    (gone, a symlink or behind one, or not of its kind's folder: kept)."""
    try:
        parts = Path(action.path).relative_to(fs.home).parts
    except ValueError:
        return None
    if not _allowed(action.kind, parts):
        return None
    try:
        st = fs.lstat(*parts)
    except KeeperError:  # a folder on the way became a symlink since the plan: kept
        return None
    if st is None:
        return None
    if stat.S_ISDIR(st.st_mode) and action.kind in (STATE_SNAPSHOT, KEEPER_LEFTOVER):
        return fs.remove_tree(*parts)
    if action.kind == "transcript" and st.st_size != action.bytes:
        return None  # written to since the plan read it (Hermes appends diverted messages): kept
    size = fs.unlink(*parts)
    if size is not None and action.kind in (MALFORMED_COPY, RESTORE_COPY):
        size += sum(fs.unlink(*parts[:-1], parts[-1] + s) or 0 for s in SQLITE_SIDES)
    return size
