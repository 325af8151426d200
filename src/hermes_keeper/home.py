"""Where Hermes homes and profiles are (``$HERMES_HOME``, ``~/.hermes``, ``profiles/<name>``)."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from hermes_keeper.errors import KeeperError
from hermes_keeper.fs import HomeFS

PROFILE_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
DEFAULT_PROFILE = "default"


@dataclass(frozen=True)
class Profile:
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


def resolve_root(home: str | os.PathLike | None = None, env: Mapping[str, str] | None = None) -> Path:
    """``--home``, else ``$HERMES_HOME``, else ``~/.hermes``; must exist as a directory.

    A path that is itself ``<root>/profiles/<name>`` resolves to its root, so a
    ``HERMES_HOME`` set by ``hermes -p NAME`` still finds its siblings.
    """
    env = os.environ if env is None else env
    raw = home if home is not None else env.get("HERMES_HOME") or Path.home() / ".hermes"
    path = Path(raw).expanduser()
    if not path.is_dir():
        raise KeeperError(f"Hermes home not found: {path}")
    path = path.resolve()
    if path.parent.name == "profiles" and PROFILE_NAME.match(path.name):
        return path.parent.parent
    return path


def discover_profiles(root: Path) -> list[Profile]:
    """The default profile plus every valid ``profiles/<name>/`` directory, sorted by name."""
    profiles = [Profile(DEFAULT_PROFILE, root, root)]
    pdir = root / "profiles"
    if pdir.is_dir():
        for child in sorted(pdir.iterdir()):
            if child.is_dir() and not child.is_symlink() and PROFILE_NAME.match(child.name):
                profiles.append(Profile(child.name, child, root))
    return profiles


def active_profile_name(root: Path) -> str:
    """The sticky profile Hermes itself would use (``<root>/active_profile``)."""
    try:
        name = (root / "active_profile").read_text(encoding="utf-8").strip()
    except OSError:
        return DEFAULT_PROFILE
    return name if name and PROFILE_NAME.match(name) else DEFAULT_PROFILE


def select_profiles(
    home: str | os.PathLike | None = None,
    profile: str | None = None,
    all_profiles: bool = False,
    env: Mapping[str, str] | None = None,
) -> list[Profile]:
    """The profiles a command acts on.

    Without ``--profile``/``--all-profiles`` this is the profile Hermes itself is on:
    the one ``HERMES_HOME`` points into, else the sticky ``active_profile``.
    """
    env = os.environ if env is None else env
    raw_home = home if home is not None else env.get("HERMES_HOME")
    root = resolve_root(home, env)
    profiles = discover_profiles(root)
    if all_profiles:
        return profiles
    by_name = {p.name: p for p in profiles}
    if profile is None:
        given = Path(raw_home).expanduser().resolve() if raw_home else None
        profile = given.name if given is not None and given != root else active_profile_name(root)
    if profile not in by_name:
        known = ", ".join(sorted(by_name))
        raise KeeperError(f"profile {profile!r} not found under {root} (known: {known})")
    return [by_name[profile]]
