"""Errors a user sees as one line and exit code 2: nothing was changed."""


class KeeperError(Exception):
    """A clear refusal: the message is one line for the user, the home is untouched."""

    exit_code = 2


def os_error_line(exc: OSError) -> str:
    """An OSError (read-only home, full disk, permissions) as one line: reason and file."""
    where = f": {exc.filename}" if exc.filename else ""
    return f"{exc.strerror or exc}{where}"
