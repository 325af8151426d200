"""Errors a user sees as one line and exit code 2: nothing was changed."""


class KeeperError(Exception):
    """A clear refusal: the message is one line for the user, the home is untouched."""

    exit_code = 2
