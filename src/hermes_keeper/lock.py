"""One keeper at a time per home: an flock on ``<root>/keeper.lock``; and one per database,
whatever path reached it: an flock on the folder that holds ``state.db`` (:func:`db_lock`).

This is the keeper's own lock file. Hermes's ``gateway.lock`` is never opened: taking
that flock would stop a gateway from starting. The lock is opened through the
filesystem door: a ``keeper.lock`` that is a symlink or a hard link is refused, never truncated.
"""

from __future__ import annotations

import errno
import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from hermes_keeper.errors import KeeperError, TryLater
from hermes_keeper.fs import HomeFS

LOCK_NAME = "keeper.lock"


def try_flock(fd: int) -> bool:
    """Take an exclusive flock on ``fd`` without waiting; False when another process holds it."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


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
        if not try_flock(fd):
            holder = os.pread(fd, 64, 0).decode("ascii", "replace").strip() or "?"
            # Not a refusal: a scheduler's next attempt will do (EX_TEMPFAIL, 75).
            raise TryLater(f"another hermes-keeper is running on {root} (pid {holder}); try later")
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        yield
    finally:
        os.close(fd)


#: flock on a folder where the filesystem cannot take one (NFS emulates flock with POSIX locks,
#: which need a file open for writing): there, ``keeper.lock`` alone guards the home.
_NO_FOLDER_LOCKS = (errno.EBADF, errno.ENOLCK, errno.EOPNOTSUPP, errno.EINVAL)


@contextmanager
def db_lock(db: Path) -> Iterator[None]:
    """Hold the lock of the database ``db`` by its identity, not by the path that named it.

    An flock on the folder that really holds it (symlinks resolved), so its device and inode
    are the key: the same profile reached as ``--home ROOT --profile work``, as
    ``--home ROOT/profiles/work`` or through a bind mount or a symlink of that folder takes the
    same lock, where ``<root>/keeper.lock`` differs by root. The folder, not ``state.db``: it
    exists before the database does (a restore into a home that lost it), it stays the same
    when a restore puts another file in place, and a descriptor of the database itself, closed,
    would drop the POSIX locks SQLite holds on it. No file is created for it. Taken after
    ``keeper_lock``: a second keeper by the same path is told the first one's pid there.
    """
    folder = Path(os.path.realpath(db)).parent
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        try:
            taken = try_flock(fd)
        except OSError as exc:
            if exc.errno not in _NO_FOLDER_LOCKS:
                raise
            taken = True  # no lock here: keeper.lock alone guards the home
        if not taken:
            raise KeeperError(
                f"another hermes-keeper is running on {db} (through another path to {folder});"
                " try again later"
            )
        yield
    finally:
        os.close(fd)
