"""``report`` and ``demo``."""

from __future__ import annotations

import os
import shlex
import tempfile
import time
from pathlib import Path

import click

from hermes_keeper import demo as demo_home
from hermes_keeper.cli.options import (
    examples,
    for_each,
    metrics_to,
    next_command,
    profile_options,
    program,
    quiet_option,
    textfile_option,
)
from hermes_keeper.cli.render import render_report
from hermes_keeper.errors import KeeperError
from hermes_keeper.home import select_profiles
from hermes_keeper.report import build_report
from hermes_keeper.report_html import ProfilePage, html_target, render_html, write_html
from hermes_keeper.units import parse_duration


@click.command(epilog=examples("report", "report --all-profiles --top 20", "report --json > report.json"))
@profile_options
@click.option("--json", "as_json", is_flag=True, help="Machine-readable (schemas/report.json).")
@click.option(
    "--zombie-after",
    default=None,
    metavar="DURATION",
    help="Open and idle this long = zombie (default: the policy's zombie_after, keeper.toml).",
)
@click.option(
    "--top",
    default=10,
    show_default=True,
    type=click.IntRange(min=0),
    metavar="N",
    help="How many largest sessions to list.",
)
@click.option(
    "--html",
    "html_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="Also write one self-contained HTML page of charts (0600, works offline).",
)
@quiet_option
@textfile_option
def report(profiles, as_json, zombie_after, top, html_path, quiet, textfile):
    """Where every byte goes: database, full-text indexes, files, sessions, growth.

    Reads state.db only; its figures go to the history (keeper/history.db, `history`).
    One profile that cannot be read: one line, exit 2. With --all-profiles a
    broken profile is reported as an error entry, the others still report, exit 1; a new
    profile without state.db is skipped with a note.
    """
    zombie_after_s = parse_duration(zombie_after, "--zombie-after") if zombie_after else None
    if html_path:
        html_target(html_path)
    pages = []
    with metrics_to(textfile) as metrics:

        def action(profile):
            rep = profile.report(zombie_after_s, top)
            if metrics:
                metrics.report(rep)
            if html_path:
                policy = profile.config()
                pages.append(
                    ProfilePage.of(rep, policy, profile.plan(policy).to_dict(), profile.history.entries())
                )
            return rep

        try:
            for_each(
                profiles,
                action,
                as_json,
                lambda _p, rep: quiet or render_report(rep),
            )
        finally:  # also when some profile failed: the page shows the others
            if pages:
                written = write_html(html_path, render_html(pages))
                if not (as_json or quiet):
                    click.echo(f"html: {written}")
    if not (as_json or quiet):
        hint = next_command("plan", drop=("as_json", "zombie_after", "top", "html_path", "textfile"))
        click.echo(f"next: {hint}")


@click.command(epilog=examples("demo", "demo /tmp/hermes-demo --sessions 1000"))
@click.argument("directory", required=False, type=click.Path(file_okay=False))
@click.option(
    "--sessions", default=300, show_default=True, metavar="N", help="How many sessions to generate."
)
def demo(directory, sessions):
    """Build a realistic demo Hermes home (73% cron, zombies, orphans, runaways) and report on it.

    DIRECTORY (default: a new temporary folder) must be new or empty: never a Hermes home, even
    one without a state.db yet (the demo's sessions would become that home's).
    """
    home = Path(directory) if directory else Path(tempfile.mkdtemp(prefix="hermes-demo-"))
    held = sorted(os.listdir(home)) if home.is_dir() else []
    if held:
        shown = ", ".join(held[:3]) + (", ..." if len(held) > 3 else "")
        raise KeeperError(f"{home} is not empty ({shown}); the demo builds only into a new or empty folder")
    demo_home.build_home(home, demo_home.generate(time.time(), sessions=sessions, folders=True))
    click.echo(f"demo home: {home}")
    for p in select_profiles(home, env={}):
        render_report(build_report(p))
    click.echo(f"next: {program()} plan --home {shlex.quote(str(home))}")  # pastes as is
