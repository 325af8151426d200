"""``fleet status``: every host's keeper, read from the restic repositories it reports to."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import click

from hermes_keeper import units
from hermes_keeper.check import STATUS
from hermes_keeper.cli.check import NagiosCommand
from hermes_keeper.cli.options import HelpGroup, emit_json, examples, json_option, metrics_to, textfile_option
from hermes_keeper.cli.render import console, print_table, table
from hermes_keeper.fleet import FleetRow, status_line
from hermes_keeper.home import Fleet, resolve_root
from hermes_keeper.model.policy import CONFIG_NAME, effective_policy


@click.group(cls=HelpGroup, epilog=examples("fleet status", "fleet status --config ~/fleet.toml --json"))
def fleet():
    """The hosts that push to restic repositories ([fleet] repositories), as their reports say."""


def _pruned(r: FleetRow) -> str:
    """What the host's last run pruned, or why it did not finish."""
    run = r.run
    if "pruned" not in run:  # no run behind the report
        return ""
    return f"stopped {run['interrupted']}" if run.get("interrupted") else str(run["pruned"])


def _show(rows: list[FleetRow], now: float) -> None:
    """The table (the row's own check status is its status unless it stopped reporting: then
    the problem line below says both), then one line per row that is not OK."""
    columns = ("host", "profile", "status", "ran", "pruned", "state.db", "growth/d", "copy")
    right = ("pruned", "state.db", "growth/d")
    t = table("", columns, whole=["host", "profile"], right=right, show_edge=False, pad_edge=False)
    for r in rows:
        t.add_row(
            r.host or "?",
            r.profile or "?",
            STATUS[r.status],
            units.ago(r.reported_at, now) if r.reported_at else "never",
            _pruned(r),
            units.size(r.db_bytes) if r.db_bytes is not None else "",
            units.size(r.growth_per_day) if r.growth_per_day is not None else "",
            units.ago(r.newest_copy, now) if r.newest_copy else "none",
        )
    out = console()
    print_table(out, t, drop=("growth/d", "pruned", "copy"))
    for r in rows:
        if r.status:
            out.print(f"{r.where}: {r.problem}", markup=False, highlight=False)


@fleet.command(
    "status",
    cls=NagiosCommand,
    epilog=examples(
        "fleet status",
        "fleet status --config ~/fleet.toml --json",
        "fleet status --textfile /var/lib/node_exporter/textfile/fleet.prom",
    ),
)
@click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="The file with [fleet] repositories (default: <home>/keeper.toml).",
)
@json_option
@textfile_option
def status(config_path, as_json, textfile):
    """One line per host and profile: its last run and result, state.db size and growth, newest
    off-host copy, its own check; CRITICAL when its newest report is older than [fleet]
    stale_after, UNKNOWN for a repository that cannot be read.

    Read-only: only restic snapshots and dump. Exit 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN
    (the worst row).
    """
    path = Path(config_path) if config_path else resolve_root() / CONFIG_NAME
    policy, now = effective_policy(path.parent, "", path), time.time()
    with metrics_to(textfile) as metrics:
        rows = Fleet(policy=policy).status(now)
        if metrics:
            metrics.fleet(rows)
    line, code = status_line(rows)
    if as_json:
        emit_json([r.to_dict() for r in rows], status=STATUS[code], code=code, line=line)
    else:
        _show(rows, now)
    sys.exit(code)
