"""The keeper's one door to the filesystem: confined paths, no symlink followed, owner-only files.

Homes hold people's conversations, and symlinked folders are common (dotfile managers, a
``sessions/`` moved to a bigger disk). So every path the keeper writes or deletes is built
from a home and a relative path of known parts, and walked one component at a time with
``O_NOFOLLOW`` from the home's folder descriptor (``openat``-style): a keeper folder or file
that is a symlink, or not what it should be, is refused in one line before anything is
written through it; a file to delete that sits behind a symlink is kept. A keeper file with a
second name (a hard link, maybe to a file outside the home) is refused the same way. What the
keeper creates is 0600 in 0700 folders, and its own files and folders (``keeper/``) found looser
are tightened (through the descriptor, never through a link); a folder it did not make keeps
its mode.
"""

from __future__ import annotations

import contextlib
import errno
import os
import pwd
import stat
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from hermes_keeper.errors import KeeperError

DIR_MODE = 0o700
FILE_MODE = 0o600
KEEPER_DIR = "keeper"
DB_NAME = "state.db"
#: state.db and the files SQLite keeps beside it: an export must never land on one of these.
DB_FILES = frozenset({DB_NAME, f"{DB_NAME}-wal", f"{DB_NAME}-shm", f"{DB_NAME}-journal"})
#: Files at a home's top that belong to the keeper or to Hermes's processes.
HOME_FILES = DB_FILES | {"keeper.lock", "gateway.lock", "gateway.pid"}
SQLITE_SIDES = ("-wal", "-shm", "-journal")

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def what_it_is(path: Path, st: os.stat_result) -> str:
    """What ``path`` is (``st`` its stat), said as the end of a sentence that starts with it."""
    if stat.S_ISLNK(st.st_mode):
        return f"is a symlink (to {os.path.realpath(path)})"
    if stat.S_ISDIR(st.st_mode):
        return "is a folder"
    if stat.S_ISREG(st.st_mode):
        return "is a file, not a folder"
    if stat.S_ISFIFO(st.st_mode):
        return "is a FIFO (named pipe), not a regular file"
    if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode):
        return "is a device, not a regular file"
    return "is not a regular file"


def _refuse(path: Path, st: os.stat_result) -> KeeperError:
    """The one line for a keeper path that is not what the keeper made."""
    return KeeperError(
        f"{path} {what_it_is(path, st)}; the keeper does not follow or replace it, nothing changed"
    )


def _chmod_at(dfd: int, name: str, mode: int, path: Path) -> None:
    """chmod ``name`` in the folder ``dfd``, never through a symlink.

    Python says fchmodat's ``EOPNOTSUPP`` with a ValueError (``cannot use dir_fd and
    follow_symlinks together``). It means a symlink (swapped in after the check: Linux cannot
    chmod one), or a C library without ``AT_SYMLINK_NOFOLLOW`` (glibc before 2.32: Debian 10,
    Ubuntu 20.04, RHEL 8), for every file. Then, as newer glibc does itself, the file is named
    by an ``O_PATH`` descriptor that did not follow (closing one drops none of this process's
    SQLite locks on it, as closing an opened one would) and chmod-ed through ``/proc``.
    """
    with contextlib.suppress(ValueError):  # a symlink, or that C library (Linux: never NotImplementedError)
        os.chmod(name, mode, dir_fd=dfd, follow_symlinks=False)
        return
    fd = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dfd)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _refuse(path, st)
        try:
            os.chmod(f"/proc/self/fd/{fd}", mode)
        except FileNotFoundError:
            raise KeeperError(
                f"cannot set the mode of {path} without following a symlink: this C library has no "
                "AT_SYMLINK_NOFOLLOW and /proc is not mounted; nothing changed"
            ) from None
    finally:
        os.close(fd)


def _linked(path: Path, st: os.stat_result) -> KeeperError | None:
    """The refusal of a keeper file with more than one name (a hard link: its other name may be
    outside the home, and writing, truncating or chmod-ing it would change that file too)."""
    if st.st_nlink <= 1:
        return None
    return KeeperError(
        f"{path} is a hard link ({st.st_nlink} names for one file, another may be outside the home); "
        "the keeper does not write through it, nothing changed (give it a name of its own: copy it and "
        "move the copy over it)"
    )


def _missing(path: Path) -> FileNotFoundError:
    return FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), str(path))


def _loose(st: os.stat_result, mode: int) -> bool:
    """To be made owner-only: looser than ``mode`` and the keeper's own (another user's is theirs).

    Only done when the keeper opens a file to write: reading changes nothing (and works on a
    read-only home).
    """
    return stat.S_IMODE(st.st_mode) != mode and st.st_uid == os.geteuid()


def plain_name(name: object) -> bool:
    """One file name: no ``/``, ``.``, ``..`` or NUL, so joined to a folder it stays in it."""
    return isinstance(name, str) and name not in ("", ".", "..") and "/" not in name and "\0" not in name


def read_regular(path: Path | str, follow: bool = True) -> bytes:
    """The bytes of the regular file ``path`` (a file Hermes or the user owns), never blocking.

    Opened with ``O_NONBLOCK`` (and ``O_NOFOLLOW`` unless ``follow``): a FIFO, a device, a folder
    or (not following) a symlink there is refused in one line naming it, before a byte is read
    (a FIFO opened without it waits for a writer forever). ``FileNotFoundError`` when absent.
    """
    path = Path(path)
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if exc.errno not in (errno.ELOOP, errno.EISDIR):
            raise
        raise KeeperError(f"{path} {what_it_is(path, os.lstat(path))}; the keeper does not read it") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise KeeperError(f"{path} {what_it_is(path, st)}; the keeper does not read it")
        os.set_blocking(fd, True)
        with os.fdopen(os.dup(fd), "rb") as fh:
            return fh.read()
    finally:
        os.close(fd)


class HomeFS:
    """Every keeper read, write and delete of a path under one home goes through here."""

    def __init__(self, home: Path | str):
        self.home = Path(home)

    def path(self, *parts: str) -> Path:
        """The path of ``parts`` under the home; each part one plain name (no ``/``, ``..``, NUL)."""
        for p in parts:
            if not plain_name(p):
                raise KeeperError(f"refusing the path {p!r} under {self.home}: not one plain name")
        return self.home.joinpath(*parts)

    def _split(self, parts: tuple[str, ...]) -> tuple[tuple[str, ...], str]:
        """The checked parts of a file's path: its folder's and its own name."""
        self.path(*parts)
        return parts[:-1], parts[-1]

    @contextmanager
    def _folder(self, parts: tuple[str, ...], create: bool = False, tighten: bool = True) -> Iterator[int]:
        """A descriptor of the folder ``parts``, walked without following a symlink.

        ``create`` makes missing folders 0700 and (``tighten``) tightens to 0700 each one walked
        of the keeper's own tree (``keeper/`` and below): a folder it did not make (a ``--dest``
        the user shares, ``/tmp``, Hermes's ``sessions/``) keeps its mode.
        """
        self.path(*parts)
        fd = os.open(self.home, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)  # the user's choice
        try:
            for i, name in enumerate(parts):
                try:
                    child = os.open(name, _DIR_FLAGS, dir_fd=fd)
                except FileNotFoundError:
                    if not create:
                        raise _missing(self.path(*parts[: i + 1])) from None
                    os.mkdir(name, DIR_MODE, dir_fd=fd)
                    child = os.open(name, _DIR_FLAGS, dir_fd=fd)
                except OSError as exc:
                    if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                        raise
                    raise _refuse(self.path(*parts[: i + 1]), os.lstat(name, dir_fd=fd)) from None
                os.close(fd)
                fd = child
                own = tighten and parts[0] == KEEPER_DIR
                if create and own and _loose(os.fstat(fd), DIR_MODE):
                    os.fchmod(fd, DIR_MODE)
            yield fd
        finally:
            os.close(fd)

    def lstat(self, *parts: str) -> os.stat_result | None:
        """``lstat`` of ``parts`` reached without a symlink on the way; None when absent."""
        folder, name = self._split(parts)
        try:
            with self._folder(folder) as dfd:
                return os.lstat(name, dir_fd=dfd)
        except FileNotFoundError:
            return None

    def regular(self, *parts: str) -> os.stat_result | None:
        """The ``lstat`` of the regular file ``parts``, None when absent; refused when it is a
        symlink or anything else (checked before a command changes anything)."""
        st = self.lstat(*parts)
        if st is not None and not stat.S_ISREG(st.st_mode):
            raise _refuse(self.path(*parts), st)
        return st

    def plain_dir(self, *parts: str) -> bool:
        """True when ``parts`` is a real folder reached without any symlink on the way."""
        try:
            with self._folder(parts):
                return True
        except (FileNotFoundError, KeeperError):
            return False

    def private_dir(self, *parts: str, tighten: bool = True) -> Path:
        """Create the folders ``parts`` (0700), tightening the keeper's own (``tighten``); refuse a
        symlink or a file on the way."""
        with self._folder(parts, create=True, tighten=tighten):
            return self.path(*parts)

    def open_private(
        self, *parts: str, flags: int = os.O_RDWR | os.O_CREAT, create_dirs: bool = False
    ) -> int:
        """A descriptor of the keeper's own file ``parts`` (0600 when created or opened to write).

        Refused in one line when the file or a folder on the way is a symlink, or when the
        file is not a regular file (a FIFO, a device, a folder). The caller closes it.
        """
        folder, name = self._split(parts)
        with self._folder(folder, create=create_dirs) as dfd:
            try:
                st = os.lstat(name, dir_fd=dfd)
            except FileNotFoundError:
                st = None
            if st is not None and not stat.S_ISREG(st.st_mode):
                raise _refuse(self.path(*parts), st)
            if st is not None and (linked := _linked(self.path(*parts), st)):
                raise linked  # before O_TRUNC could cut the other name's file
            try:
                fd = os.open(name, flags | os.O_NOFOLLOW | os.O_CLOEXEC, FILE_MODE, dir_fd=dfd)
            except OSError as exc:
                if exc.errno != errno.ELOOP:
                    raise
                raise _refuse(self.path(*parts), os.lstat(name, dir_fd=dfd)) from None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise _refuse(self.path(*parts), st)
            if linked := _linked(self.path(*parts), st):  # linked between the lstat and the open
                raise linked
            if flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT) and _loose(st, FILE_MODE):
                os.fchmod(fd, FILE_MODE)
        except BaseException:
            os.close(fd)
            raise
        return fd

    def private_file(self, *parts: str, create_dirs: bool = False) -> Path:
        """Make sure the keeper's file ``parts`` exists as a 0600 regular file; its path."""
        os.close(self.open_private(*parts, flags=os.O_RDONLY | os.O_CREAT, create_dirs=create_dirs))
        return self.path(*parts)

    def read_bytes(self, *parts: str) -> bytes | None:
        """The content of the keeper's file ``parts``, or None when it is not there."""
        try:
            fd = self.open_private(*parts, flags=os.O_RDONLY)
        except FileNotFoundError:
            return None
        with os.fdopen(fd, "rb") as fh:
            return fh.read()

    def read_hermes(self, *parts: str, follow: bool = False) -> bytes | None:
        """The content of a file Hermes owns under the home (``config.yaml``, ``sessions/sessions.json``),
        None when absent: :func:`read_regular`, never blocking on a FIFO or a device. Folders on
        the way may be links (a ``sessions/`` moved to a bigger disk); the file itself only with
        ``follow`` (a ``config.yaml`` from a dotfiles folder)."""
        try:
            return read_regular(self.path(*parts), follow=follow)
        except FileNotFoundError:
            return None

    def sqlite_file(self, *parts: str, create: bool = False) -> Path:
        """The path of the keeper's SQLite file ``parts``, safe to hand to SQLite (which follows links).

        The file and its ``-wal``/``-shm``/``-journal`` must be regular files reached without a
        symlink; ``create`` (to write) makes the folders and an empty 0600 file first and
        tightens looser modes. Checked with ``lstat`` and tightened by name, never opened:
        closing a descriptor of a database file would drop the POSIX locks SQLite holds on it
        in this process.
        """
        folder, name = self._split(parts)
        if create:
            self.private_dir(*folder)
        with self._folder(folder) as dfd:
            if create:
                with suppress(FileExistsError):  # O_EXCL: also fails on a (dangling) symlink
                    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
                    os.close(os.open(name, flags, FILE_MODE, dir_fd=dfd))
            for side in ("", *SQLITE_SIDES):
                try:
                    st = os.lstat(name + side, dir_fd=dfd)
                except FileNotFoundError:
                    if side:
                        continue
                    raise _missing(self.path(*parts)) from None
                if not stat.S_ISREG(st.st_mode):
                    raise _refuse(self.path(*folder, name + side), st)
                if linked := _linked(self.path(*folder, name + side), st):
                    raise linked
                if create and _loose(st, FILE_MODE):
                    _chmod_at(dfd, name + side, FILE_MODE, self.path(*folder, name + side))
        return self.path(*parts)

    def rename(self, *parts: str, to: str, sync: bool = True) -> None:
        """Rename the keeper's regular file ``parts`` to ``to`` in the same folder (replacing a
        regular file of that name), then fsync the folder (``sync``); refused when either is
        anything else."""
        folder, name = self._split(parts)
        self.regular(*parts)
        self.regular(*folder, to)
        with self._folder(folder) as dfd:
            os.rename(name, to, src_dir_fd=dfd, dst_dir_fd=dfd)
            if sync:
                os.fsync(dfd)

    def link(self, *parts: str, to: str, sync: bool = True) -> None:
        """A second name ``to``, in the same folder, for the regular file ``parts`` (a hard link:
        the same file, not a copy), then fsync the folder (``sync``). Refused when ``parts`` is a
        symlink or anything else; ``to`` must not exist (``FileExistsError``), not even as a link."""
        folder, name = self._split(parts)
        self.path(*folder, to)
        if self.regular(*parts) is None:
            raise _missing(self.path(*parts))
        with self._folder(folder) as dfd:
            os.link(name, to, src_dir_fd=dfd, dst_dir_fd=dfd, follow_symlinks=False)
            if sync:
                os.fsync(dfd)

    def chmod(self, *parts: str, mode: int, owner: tuple[int, int] | None = None) -> None:
        """Set the mode (and with ``owner``, ``(uid, gid)``, first the owner) of the regular file
        ``parts``: by name through its folder's descriptor, never through a symlink, never opened
        (a descriptor closed on a database file drops this process's SQLite locks on it).

        For a file the keeper made or is about to put in place; refused when it is anything else.
        """
        folder, name = self._split(parts)
        if self.regular(*parts) is None:
            raise _missing(self.path(*parts))
        with self._folder(folder) as dfd:
            if owner is not None:
                os.chown(name, *owner, dir_fd=dfd, follow_symlinks=False)
            _chmod_at(dfd, name, mode, self.path(*parts))

    def sync(self, *parts: str) -> None:
        """fsync the folder ``parts`` (the home when none): its renames and links survive a power cut."""
        with self._folder(parts) as dfd:
            os.fsync(dfd)

    def unlink(self, *parts: str) -> int | None:
        """Delete the regular file ``parts`` through its folder's descriptor; its size.

        None, and nothing deleted, when it is gone, is a symlink or not a regular file, or
        sits behind a symlinked folder, or the path is not plain names: when unsure, keep.
        """
        try:
            folder, name = self._split(parts)
            with self._folder(folder) as dfd:
                st = os.lstat(name, dir_fd=dfd)
                if not stat.S_ISREG(st.st_mode):
                    return None
                os.unlink(name, dir_fd=dfd)
                return st.st_size
        except (FileNotFoundError, KeeperError):
            return None

    def entries(self, *parts: str) -> list[tuple[str, os.stat_result]] | None:
        """Names and ``lstat`` of what the folder ``parts`` holds, sorted by name; ``[]`` when it is
        absent, None when it is a symlink, is behind one or is not a folder (never listed through)."""
        try:
            with self._folder(parts) as dfd, os.scandir(dfd) as it:
                return sorted((e.name, e.stat(follow_symlinks=False)) for e in it)
        except FileNotFoundError:
            return [] if self.lstat(*parts) is None else None
        except (KeeperError, NotADirectoryError):
            return None

    def remove_tree(self, *parts: str) -> int | None:
        """Delete the folder ``parts`` with its regular files and folders; the bytes removed.

        Walked by descriptors, never through a symlink: a symlink (or a FIFO, a device) inside
        is left as it is, and so are the folders that hold it. None, and nothing deleted, when
        ``parts`` is not a real folder reached without a symlink.
        """
        try:
            folder, name = self._split(parts)
            with self._folder(folder) as dfd:
                if not stat.S_ISDIR(os.lstat(name, dir_fd=dfd).st_mode):
                    return None
                return _clear_folder(dfd, name)[0]
        except (FileNotFoundError, KeeperError):
            return None

    def folder(self, path: Path | str) -> Path:
        """A folder the user named (``--dest``), created 0700: walked from the home when inside it.

        Outside the home its parents are the user's choice, but the folder itself must not be
        a symlink; inside it (also when named through another name for the home), no folder
        on the way may be one (a symlinked ``keeper/``).
        """
        path = Path(os.path.abspath(path))
        home = os.path.realpath(self.home)
        for above in (path, *path.parents):
            if os.path.realpath(above) == home:
                return self.private_dir(*path.relative_to(above).parts)
        path.parent.mkdir(parents=True, exist_ok=True)
        return HomeFS(path.parent).private_dir(path.name, tighten=False)

    def require_home(self) -> None:
        """Refuse (before anything is created) a folder that is not a Hermes home.

        A home has a ``state.db``, or at least the keeper's folder (a home whose database
        was lost, about to get a backup back) or, for a root, its ``profiles/``.
        """
        if (self.home / DB_NAME).is_file() or self.plain_dir(KEEPER_DIR) or self.plain_dir("profiles"):
            return self.require_owner()
        raise KeeperError(f"{self.home} is not a Hermes home ({DB_NAME} not found); nothing changed")

    def require_owner(self) -> None:
        """Refuse to work, as root, on a home another user owns, or whose ``state.db`` they own
        (``sudo hermes-keeper run --home ~ann/.hermes``): what root makes or rewrites there
        (``keeper/``, a ``config.yaml`` 0600) that user, and Hermes running as them, can no
        longer open. Refused rather than switched to that user mid-process: a Python installed
        where they cannot read (root's pyenv or pipx) would then fail at its next import, with
        the command half done."""
        if os.geteuid() != 0:
            return
        owners = [os.stat(self.home).st_uid]
        with suppress(FileNotFoundError):  # a root-owned folder (a volume) with Hermes's state.db in it
            owners.append(os.lstat(self.home / DB_NAME).st_uid)
        uid = next((u for u in owners if u != 0), 0)
        if uid == 0:
            return
        try:
            user = pwd.getpwuid(uid).pw_name
        except KeyError:  # a uid without a name (a container's, a restored disk's)
            user = f"#{uid}"
        raise KeeperError(
            f"{self.home} belongs to {user}: as root the keeper would leave files {user} cannot open;"
            f" run it as {user} (sudo -u {user} hermes-keeper ...), nothing changed"
        )

    def check_keeper_tree(self) -> None:
        """Refuse a ``keeper/`` with a symlink or a special file in it (the keeper makes neither).

        Run before a command's first change, so nothing is written through a link later.
        """
        if self.lstat(KEEPER_DIR) is None:
            return
        for parts in ((KEEPER_DIR,), (KEEPER_DIR, "backups")):
            try:
                with self._folder(parts) as dfd, os.scandir(dfd) as entries:
                    for entry in entries:
                        st = entry.stat(follow_symlinks=False)
                        if stat.S_ISREG(st.st_mode) or (stat.S_ISDIR(st.st_mode) and len(parts) == 1):
                            continue
                        raise _refuse(self.path(*parts, entry.name), st)
            except FileNotFoundError:
                continue


def _clear_folder(parent_fd: int, name: str) -> tuple[int, bool]:
    """Delete the folder ``name`` of ``parent_fd`` as :meth:`HomeFS.remove_tree` does: (bytes, whole)."""
    try:
        fd = os.open(name, _DIR_FLAGS, dir_fd=parent_fd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            return 0, False
        raise
    removed, whole = 0, True
    try:
        with os.scandir(fd) as it:
            children = [(e.name, e.stat(follow_symlinks=False)) for e in it]
        for child, st in children:
            if stat.S_ISREG(st.st_mode):
                os.unlink(child, dir_fd=fd)
                removed += st.st_size
            elif stat.S_ISDIR(st.st_mode):
                n, done = _clear_folder(fd, child)
                removed, whole = removed + n, whole and done
            else:
                whole = False  # a symlink or special file: kept, and its folder with it
    finally:
        os.close(fd)
    if whole:
        try:
            os.rmdir(name, dir_fd=parent_fd)
        except OSError as exc:
            if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):  # something arrived meanwhile: kept
                raise
            whole = False
    return removed, whole


def private_dir(path: Path) -> Path:
    """``path`` created (0700) or tightened; refused when it is a symlink (its parents are trusted)."""
    return HomeFS(path.parent).private_dir(path.name)


def private_file(path: Path) -> Path:
    """``path`` exists as a 0600 regular file; refused when it is a symlink or not a regular file."""
    return HomeFS(path.parent).private_file(path.name)


def open_private(path: Path, flags: int = os.O_RDWR | os.O_CREAT) -> int:
    """:meth:`HomeFS.open_private` of one file in a folder the caller has already checked."""
    return HomeFS(path.parent).open_private(path.name, flags=flags)


def check_export_target(path: Path | str) -> Path:
    """The file an export may write, or a one-line refusal.

    Never a Hermes or keeper file of any home (``state.db`` and its sides, the locks,
    anything under ``keeper/``; a folder holding a ``state.db`` is a home), and never an
    existing file that is not a regular file (a symlink, a FIFO, a device).
    """
    out = Path(os.path.abspath(path))
    try:
        st = os.lstat(out)
    except FileNotFoundError:
        st = None
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise KeeperError(f"export target {out} {what_it_is(out, st)}; choose another file, nothing changed")
    real = Path(os.path.realpath(out.parent)) / out.name
    for home in real.parents:
        if not (home / DB_NAME).exists():
            continue
        rel = real.relative_to(home).parts
        if rel[0] == KEEPER_DIR or (len(rel) == 1 and rel[0] in HOME_FILES):
            raise KeeperError(
                f"export target {out} is a file of the Hermes home {home}; "
                "choose another file, nothing changed"
            )
    return out


def fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def durable_rename(src: Path, dst: Path) -> None:
    """fsync the file, rename it into place, fsync the folder: survives a power cut."""
    fsync_file(src)
    os.replace(src, dst)
    fsync_dir(dst.parent)
