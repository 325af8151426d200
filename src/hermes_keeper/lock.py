"""One keeper at a time per home: an flock on ``<root>/keeper.lock``.

This is the keeper's own lock file. Hermes's ``gateway.lock`` is never opened: taking
that flock would stop a gateway from starting.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from hermes_keeper.errors import KeeperError

LOCK_NAME = "keeper.lock"


@contextmanager
def keeper_lock(root: Path) -> Iterator[None]:
    path = Path(root) / LOCK_NAME
    try:
        fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o600)
    except OSError as exc:
        raise KeeperError(
            f"cannot create {path}: {exc.strerror} (is the home read-only?); nothing changed"
        ) from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode("ascii", "replace").strip() or "?"
            raise KeeperError(
                f"another hermes-keeper is running on {root} (pid {holder}); try again later"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        yield
    finally:
        os.close(fd)
