"""Facts about a big ``state.db`` that take seconds to measure, kept in ``keeper/facts.json``.

A full ``quick_check`` and ``dbstat`` each read every page: 10-25 s on a 2 GB file with a cold
cache, more at 5 GB. ``run``, ``compact`` and ``plan`` check in full (they must, before writing
or advising); ``report`` shows the last full result with its age when its own bounded check runs
out of time, and reuses the byte breakdown while the used pages changed little (past that, and
past its time for ``dbstat``, the last breakdown scaled, as an estimate). Hermes's malformed
copies of state.db are checked once each (they are never written again). A full check that
passed stands for ``report`` and ``plan`` while state.db and its WAL are the very files it read
(device, inode, size, mtime: :func:`file_identity`); ``run`` and ``compact`` check again before
they write. Backups verified by sha256 are remembered the same way (:func:`known_verdicts`), so
``check`` does not re-hash gigabytes every poll. Only recorded where the keeper folder exists
already: a report on a home the keeper never ran on creates nothing.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from hermes_keeper.errors import KeeperError
from hermes_keeper.fs import KEEPER_DIR, HomeFS
from hermes_keeper.sqlite.holders import long_reads_stall_hermes
from hermes_keeper.sqlite.schema import quick_check

FACTS_NAME = "facts.json"
#: The byte breakdown is reused while the used bytes moved less than this share, and for at most
#: :data:`OBJECTS_MAX_AGE_S`; it is scaled to today's used bytes (the groups still add up).
OBJECTS_DRIFT = 0.10
OBJECTS_MAX_AGE_S = 7 * 86400.0
#: How long a full quick_check on record vouches for state.db where none is taken now (report
#: past its time, beside a holder of a rollback-journal db): Hermes's malformed copies are
#: decided on it; older or none, state.db counts as unchecked and the copies stay.
CHECK_TRUSTED_S = 86400.0


@dataclass(frozen=True)
class Check:
    result: str  # 'ok' or the first problems
    at: float  # when that full check finished (unix seconds)


@dataclass(frozen=True)
class Breakdown:
    """Bytes per table and index, scaled to today's used bytes, and when ``dbstat`` measured them.

    ``estimate``: measured before the used bytes moved more than :data:`OBJECTS_DRIFT` (or over
    :data:`OBJECTS_MAX_AGE_S` ago), shown only where ``dbstat`` could not be read again in time.
    """

    sizes: dict[str, int]
    at: float
    estimate: bool = False


def _read(fs: HomeFS) -> dict:
    try:
        data = json.loads(fs.read_bytes(KEEPER_DIR, FACTS_NAME) or b"{}")
    except (OSError, ValueError, KeeperError):  # unreadable, damaged, a link: measured again
        return {}
    return data if isinstance(data, dict) else {}


def _update(fs: HomeFS, key: str, value: dict) -> None:
    """Replace one fact, atomically; skipped where there is no keeper folder or it cannot be written."""
    if not fs.plain_dir(KEEPER_DIR):
        return
    data = _read(fs) | {key: value}
    tmp = f".{FACTS_NAME}.tmp"  # one name: a process killed mid-write leaves at most this file
    try:
        fd = fs.open_private(KEEPER_DIR, tmp, flags=os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(data, fh)
        fs.rename(KEEPER_DIR, tmp, to=FACTS_NAME, sync=False)  # a cache: not worth an fsync
    except (OSError, KeeperError):  # a cache: the next command measures again
        fs.unlink(KEEPER_DIR, tmp)


def file_identity(path: Path) -> list[int] | None:
    """What says a file is the one read before: device, inode, size, mtime (ns); None: no such file."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns]


def db_identity(db: Path) -> list:
    """state.db's identity and its WAL's (a WAL write leaves state.db as it was)."""
    return [file_identity(db), file_identity(db.with_name(db.name + "-wal"))]


def record_check(
    fs: HomeFS,
    result: str,
    at: float | None = None,
    took_s: float | None = None,
    identity: list | None = None,
) -> None:
    """``identity``: :func:`db_identity` taken before the check read the file."""
    rec = {"result": result, "at": time.time() if at is None else at}
    rec |= {} if took_s is None else {"took_s": took_s}
    _update(fs, "quick_check", rec | ({} if identity is None else {"identity": identity}))


def unchanged_check(fs: HomeFS, db: Path) -> Check | None:
    """The last check on record where it passed and state.db and its WAL are still the files it
    read (:func:`db_identity`): nothing was written since, so reading every page again would find
    what it found (3.7 s at 5 GB). None: no such check."""
    rec = _read(fs).get("quick_check")
    check = last_check(fs)
    if check is None or check.result != "ok" or rec.get("identity") != db_identity(db):
        return None
    return check


def last_check(fs: HomeFS) -> Check | None:
    rec = _read(fs).get("quick_check")
    try:
        return Check(str(rec["result"]), float(rec["at"]))
    except (TypeError, KeyError, ValueError):
        return None


def ran_out_before(fs: HomeFS, what: str, db: Path, budget_s: float) -> bool:
    """A read of every page (``what``: ``dbstat``) ran out of as much time or more on this very
    file (same :func:`db_identity`) last time: it would again, so it is not tried (1 s of every
    report at 5 GB, for nothing)."""
    rec = _read(fs).get(f"{what}_ran_out")
    try:
        return rec["identity"] == db_identity(db) and budget_s <= float(rec["budget_s"])
    except (TypeError, KeyError, ValueError):
        return False


def record_ran_out(fs: HomeFS, what: str, identity: list, budget_s: float) -> None:
    """``identity``: :func:`db_identity` taken before the read that ran out of ``budget_s``."""
    _update(fs, f"{what}_ran_out", {"identity": identity, "budget_s": budget_s, "at": time.time()})


def record_objects(fs: HomeFS, sizes: dict[str, int], used_bytes: int, at: float | None = None) -> None:
    _update(
        fs, "objects", {"sizes": sizes, "used_bytes": used_bytes, "at": time.time() if at is None else at}
    )


def recorded_objects(fs: HomeFS, used_bytes: int, now: float) -> Breakdown | None:
    """The recorded bytes per object scaled to ``used_bytes`` (an estimate when too old or too far
    from today's size to stand in); None when there is no record."""
    rec = _read(fs).get("objects")
    try:
        sizes, then, at = (
            {str(k): int(v) for k, v in rec["sizes"].items()},
            int(rec["used_bytes"]),
            float(rec["at"]),
        )
    except (TypeError, KeyError, ValueError, AttributeError):
        return None
    if then <= 0:
        return None
    close = abs(used_bytes - then) <= OBJECTS_DRIFT * then and 0 <= now - at <= OBJECTS_MAX_AGE_S
    return Breakdown({k: v * used_bytes // then for k, v in sizes.items()}, at, not close)


def copy_checks(
    fs: HomeFS, copies: list[tuple[str, int, float]], budget_s: float | None
) -> dict[str, bool | None]:
    """Whether each copy of state.db at the home's top (name, bytes, mtime) passes quick_check.

    Hermes writes such a copy once and never again, so a result recorded for the same name, bytes
    and mtime stands; the others are checked now within what is left of ``budget_s`` (None: in
    full), None for one not checked in time. Only the copies passed in are kept on record.
    """
    rec = _read(fs).get("copies")
    rec = rec if isinstance(rec, dict) else {}
    deadline = None if budget_s is None else time.monotonic() + budget_s
    out: dict[str, bool | None] = {}
    keep = {}
    for name, size, mtime in copies:
        was = rec.get(name)
        if isinstance(was, dict) and was.get("bytes") == size and was.get("mtime") == mtime:
            out[name] = bool(was.get("ok"))
        else:
            left = None if deadline is None else deadline - time.monotonic()
            result = quick_check(fs.path(name), left)
            out[name] = None if result is None else result == "ok"
        if out[name] is not None:
            keep[name] = {"bytes": size, "mtime": mtime, "ok": out[name]}
    if keep != rec:
        _update(fs, "copies", keep)
    return out


def known_verdict(
    fs: HomeFS, path: Path, digest: str, verify: Callable[[], bool], again: bool = False
) -> bool:
    """``verify()`` of the file at ``path`` that should hash to ``digest`` (a backup), kept in
    facts.json while the file keeps its identity (:func:`file_identity`, taken before the read) and
    reused, unless ``again``: a full verification on its own schedule (``backups``). A file gone is
    forgotten."""
    seen = _read(fs).get("verified")
    seen = seen if isinstance(seen, dict) else {}
    identity, key = file_identity(path), str(path)
    was = seen.get(key)
    if (
        not again
        and isinstance(was, dict)
        and was.get("identity") == identity
        and was.get("sha256") == digest
    ):
        return bool(was.get("ok"))
    ok = verify()
    kept = {k: v for k, v in seen.items() if k != key and file_identity(Path(k)) is not None}
    if identity is not None:
        kept[key] = {"identity": identity, "sha256": digest, "ok": ok, "at": time.time()}
    _update(fs, "verified", kept)
    return ok


def full_check(fs: HomeFS, db: Path) -> str:
    """A full ``quick_check`` of ``db``, recorded for later reports."""
    identity, t0 = db_identity(db), time.perf_counter()
    result = quick_check(db) or "ok"
    record_check(fs, result, took_s=time.perf_counter() - t0, identity=identity)
    return result


def checked_unless_it_stalls(
    fs: HomeFS, db: Path, journal_mode: str, holders, reuse: bool = False
) -> Check | None:
    """A full check now, or, where reading every page would hold a holder's commits (a
    rollback-journal database another process has open), the last one on record (None: none).
    ``reuse`` (read-only callers: ``plan``): a passed check of the unchanged file stands."""
    if reuse and (same := unchanged_check(fs, db)) is not None:
        return same
    if long_reads_stall_hermes(journal_mode, holders):
        return last_check(fs)
    return Check(full_check(fs, db), time.time())


def bounded_check(fs: HomeFS, db: Path, budget_s: float) -> Check | None:
    """``quick_check`` within ``budget_s`` (recorded when it finished), else the last full one on
    record; None when there is none. A passed check of the unchanged file stands without a read.

    Not even tried while a full check on record from the last :data:`CHECK_TRUSTED_S` took over
    twice the budget: it would not finish now either (1 s of every report at 5 GB).
    """
    rec = _read(fs).get("quick_check")
    try:
        hopeless = (
            float(rec["took_s"]) > 2 * budget_s and 0 <= time.time() - float(rec["at"]) <= CHECK_TRUSTED_S
        )
    except (TypeError, KeyError, ValueError):
        hopeless = False
    if (same := unchanged_check(fs, db)) is not None:
        return same
    identity, t0 = db_identity(db), time.perf_counter()
    result = None if hopeless else quick_check(db, budget_s)
    if result is None:
        return last_check(fs)
    check = Check(result, time.time())
    record_check(fs, check.result, check.at, took_s=time.perf_counter() - t0, identity=identity)
    return check
