"""One keeper at a time per home: an flock on ``<root>/keeper.lock``.

This is the keeper's own lock file. Hermes's ``gateway.lock`` is never opened: taking
that flock would stop a gateway from starting. The lock is opened through the
filesystem door: a ``keeper.lock`` that is a symlink is refused, never truncated.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from hermes_keeper.errors import KeeperError, TryLater
from hermes_keeper.fs import HomeFS

LOCK_NAME = "keeper.lock"


@contextmanager
def keeper_lock(root: Path) -> Iterator[None]:
    """Hold the home's keeper lock; a folder that is not a Hermes home gets no lock file."""
    fs = HomeFS(root)
    fs.require_home()
    try:
        fd = fs.open_private(LOCK_NAME)
    except OSError as exc:
        raise KeeperError(
            f"cannot create {fs.path(LOCK_NAME)}: {exc.strerror} (is the home read-only?); nothing changed"
        ) from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode("ascii", "replace").strip() or "?"
            # Not a refusal: a scheduler's next attempt will do (EX_TEMPFAIL, 75).
            raise TryLater(f"another hermes-keeper is running on {root} (pid {holder}); try later") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        yield
    finally:
        os.close(fd)
