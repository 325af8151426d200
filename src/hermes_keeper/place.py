"""A profile's place: where its files are, and the one door to them.

The ground floor of the package, as litestream's ``DB`` owns its paths: every step (survey,
prune, backup, archive, report) takes a :class:`Place` and reaches the home only through it.
:class:`hermes_keeper.home.Profile` is the front door built on it; nothing below ``home.py``
imports that.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from hermes_keeper.fs import HomeFS


@dataclass(frozen=True)
class Place:
    """One Hermes home: the root itself (``default``) or ``<root>/profiles/<name>``."""

    name: str
    home: Path
    root: Path

    @property
    def db_path(self) -> Path:
        return self.home / "state.db"

    @property
    def sessions_dir(self) -> Path:
        return self.home / "sessions"

    @property
    def keeper_dir(self) -> Path:
        """Everything the keeper writes for this profile lives here."""
        return self.home / "keeper"

    @cached_property
    def fs(self) -> HomeFS:
        """The door every keeper read, write and delete under this home goes through."""
        return HomeFS(self.home)

    def wal_bytes(self) -> int:
        """Bytes of state.db's WAL on disk (0 without one): part of what the database takes."""
        st = self.fs.lstat("state.db-wal")
        return st.st_size if st else 0
