"""Errors a user sees as one line and an exit code: nothing was changed, or it stopped cleanly."""

import errno
import os
import shutil
import sqlite3
import sys
from pathlib import Path

from hermes_keeper.interrupt import Interrupted
from hermes_keeper.sqlite.connect import is_busy

#: sysexits.h EX_TEMPFAIL: a scheduler or monitor should simply try again later.
EXIT_TRY_LATER = getattr(os, "EX_TEMPFAIL", 75)


class KeeperError(Exception):
    """A clear refusal: the message is one line for the user, the home is untouched."""

    exit_code = 2


class TryLater(KeeperError):
    """Not now: Hermes is busy (its maintenance, an FTS rebuild, a database that stays locked).

    Whatever was done before is journaled and the next run resumes it.
    """

    exit_code = EXIT_TRY_LATER


def os_error_line(exc: OSError) -> str:
    """An OSError (read-only home, full disk, permissions) as one line: reason and file."""
    where = f": {exc.filename}" if exc.filename else ""
    return f"{exc.strerror or exc}{where}"


#: A command whose reader went away (``run | head``): the exit status of a process SIGPIPE ended,
#: never 2's "refused, nothing changed" (the run before its summary line changed what it changed).


#: Below this many free bytes an SQLite I/O error is taken for what it almost surely is. Not 1 MiB:
#: by the time the error is read the run's own file removals (orphans first, on their own thread)
#: may have given back a few MB (2.6 MB in tests/test_error_boundary.py's full disk).
NEARLY_FULL_BYTES = 16 << 20


def _mount_of(path: Path) -> Path:
    path = path.absolute()
    while not os.path.ismount(path) and path != path.parent:
        path = path.parent
    return path


def _disk_full(exc: BaseException, where: Path | None) -> bool:
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    if isinstance(exc, KeeperError):  # a refusal read from SQLite's "disk I/O error" on a full disk
        if not any(w in str(exc) for w in ("disk I/O error", "disk is full")):
            return False
    elif not isinstance(exc, sqlite3.Error):
        return False
    elif getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL or "disk is full" in str(exc):
        return True
    try:  # SQLite reports some full-disk writes as I/O errors or even as a malformed database
        return where is not None and shutil.disk_usage(where).free < NEARLY_FULL_BYTES
    except OSError:
        return False


def failure_line(exc: BaseException, where: Path | None = None) -> tuple[str, int]:
    """Any failure as (one line saying what to do next, exit code); ``where``: the home it was on.

    A full disk is named as such, with the filesystem, whatever layer noticed it (the
    keeper's own writes are journaled and each SQLite transaction is whole, so a rerun
    finishes the work). Anything unexpected says so and points at ``--debug``.
    """
    if isinstance(exc, Interrupted):
        done = "nothing changed" if exc.result is None else "settings put back; the next run resumes the rest"
        return f"{exc}: stopped between two steps, {done}", exc.exit_code
    if _disk_full(exc, where if where is None else Path(where)):
        filename = getattr(exc, "filename", None)
        fs = _mount_of(Path(filename or where or "."))
        return (
            f"disk full on {fs}: {os_error_line(exc) if isinstance(exc, OSError) else exc}; nothing lost, "
            "run again when there is space",
            EXIT_TRY_LATER,
        )
    if isinstance(exc, KeeperError):
        return str(exc), exc.exit_code
    if isinstance(exc, OSError):  # read-only home, permissions: refused, nothing changed
        return os_error_line(exc), KeeperError.exit_code
    if is_busy(exc):  # another process kept the database locked past every wait
        return f"{exc}: Hermes is busy; nothing lost, try again later", EXIT_TRY_LATER
    if isinstance(exc, sqlite3.Error):
        return f"SQLite: {exc} (run with --debug for details)", 1
    return f"unexpected error: {type(exc).__name__}: {exc} (run with --debug for details)", 1


def warn(line: str) -> None:
    """One warning line on stderr, for bookkeeping that must never fail the command."""
    print(f"hermes-keeper: warning: {line}", file=sys.stderr)
