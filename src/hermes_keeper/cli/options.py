"""Options shared by every command that acts on Hermes homes."""

from __future__ import annotations

import functools

import click

from ..discovery import Profile, select_profiles


def profile_options(fn):
    """``--home``, ``--profile``, ``--all-profiles``; passes ``profiles: list[Profile]``."""

    @click.option(
        "--home",
        type=click.Path(file_okay=False),
        default=None,
        help="Hermes home (default: $HERMES_HOME, else ~/.hermes).",
    )
    @click.option("--profile", "profile_name", default=None, help="Profile name (default: the active one).")
    @click.option("--all-profiles", is_flag=True, help="Every profile under the home.")
    @functools.wraps(fn)
    def wrapper(*args, home, profile_name, all_profiles, **kwargs):
        profiles: list[Profile] = select_profiles(home, profile_name, all_profiles)
        return fn(*args, profiles=profiles, **kwargs)

    return wrapper


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_duration(text: str | int | float) -> float:
    """``"7d"``, ``"12h"``, ``"30m"``, ``"90s"`` or a number of seconds."""
    if isinstance(text, (int, float)):
        return float(text)
    raw = text.strip().lower()
    try:
        if raw and raw[-1] in _UNITS:
            return float(raw[:-1]) * _UNITS[raw[-1]]
        return float(raw)
    except ValueError:
        raise click.BadParameter(f"not a duration: {text!r} (use e.g. 7d, 12h, 30m)") from None
