"""``adopt``: hand session retention from Hermes's own auto-prune to the keeper."""

from __future__ import annotations

import difflib
import sys

import click

from hermes_keeper.cli.options import debug_traceback, examples, profile_options
from hermes_keeper.cli.text import term
from hermes_keeper.hermes_config import CONFIG_NAME
from hermes_keeper.home import each, exit_code


@click.command(epilog=examples("adopt --dry-run", "adopt --yes --all-profiles"))
@profile_options
@click.option("--yes", "-y", is_flag=True, help="Make the change without asking.")
@click.option("--dry-run", is_flag=True, help="Only show the change (the diff).")
def adopt(profiles, yes, dry_run):
    """Turn Hermes's own auto-prune off so the keeper alone owns retention.

    Hermes's auto-prune (on by default after hermes-agent 0.19) deletes sessions with no
    archive and without the keeper's protections. This shows the exact config.yaml change
    (sessions.auto_prune: false, comments kept) and makes it only with --yes or when you
    confirm. Nothing else in config.yaml changes.
    """
    # Each profile's config.yaml read on its own: one that cannot be edited never stops the others.
    outcomes = list(each(profiles, lambda p: p.adopt_change(), needs_db=False))
    for o in outcomes:
        profile = o.profile
        if o.error is not None or o.skipped is not None:
            debug_traceback(o)
            click.echo(term(f"hermes-keeper: {profile.name}: {o.error or o.skipped}"), err=True)
            continue
        before, after = o.value
        path = profile.home / CONFIG_NAME
        if before == after:
            click.echo(f"{profile.name}: {path} already has sessions.auto_prune: false; nothing to change")
            continue
        click.echo(
            "".join(
                difflib.unified_diff(
                    before.splitlines(keepends=True), after.splitlines(keepends=True), str(path), str(path)
                )
            ),
            nl=False,
        )
        if dry_run:
            continue
        if not yes:
            if not sys.stdin.isatty():
                click.echo(f"{profile.name}: nothing changed (run with --yes to make this change)")
                continue
            if not click.confirm(f"Change {path}?", default=False):
                click.echo(f"{profile.name}: nothing changed")
                continue
        profile.adopt()
        click.echo(f"{profile.name}: Hermes's auto-prune is off; keeper.toml's policy owns retention")
    if code := exit_code(outcomes):
        sys.exit(code)
