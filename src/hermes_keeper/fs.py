"""Owner-only files and durable renames: archives and backups hold people's conversations."""

from __future__ import annotations

import os
from pathlib import Path

DIR_MODE = 0o700
FILE_MODE = 0o600


def private_dir(path: Path) -> Path:
    """Create ``path`` (and parents) as 0700; tighten an existing keeper folder to 0700."""
    path.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
    if (path.stat().st_mode & 0o777) != DIR_MODE:
        os.chmod(path, DIR_MODE)
    return path


def private_file(path: Path) -> Path:
    """Make sure ``path`` exists and is 0600 before anything private goes into it."""
    fd = os.open(path, os.O_CREAT | os.O_WRONLY, FILE_MODE)
    os.close(fd)
    os.chmod(path, FILE_MODE)
    return path


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


def is_inside(path: Path, folder: Path) -> bool:
    """True when ``path`` (symlinks resolved) stays inside ``folder``."""
    try:
        Path(os.path.realpath(path)).relative_to(os.path.realpath(folder))
    except ValueError:
        return False
    return True
