"""Options shared by every command that acts on Hermes homes."""

from __future__ import annotations

import functools

import click

from hermes_keeper.home import Profile, select_profiles

#: ``ctx.meta`` key: the homes a command works on, for the error boundary's messages.
HOMES_KEY = "hermes_keeper.homes"


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
        click.get_current_context().meta[HOMES_KEY] = [p.home for p in profiles]
        return fn(*args, profiles=profiles, **kwargs)

    return wrapper
