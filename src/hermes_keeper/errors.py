"""Errors a user sees as one line and an exit code: nothing was changed, or it stopped cleanly."""

import os

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
