"""``history``: what past runs did (``keeper/history.db``)."""

from __future__ import annotations

import click
from rich.table import Table

from hermes_keeper import units
from hermes_keeper.cli.options import examples, for_each, json_option, profile_options
from hermes_keeper.cli.render import console, local_time
from hermes_keeper.history import database_bytes


@click.command(epilog=examples("history", "history --all --limit 50", "history --all-profiles --json"))
@profile_options
@json_option
@click.option(
    "--limit",
    default=20,
    show_default=True,
    type=click.IntRange(min=1),
    metavar="N",
    help="The newest N rows.",
)
@click.option("--all", "every_kind", is_flag=True, help="Reports (and checks) too, not only runs.")
def history(profiles, as_json, limit, every_kind):
    """What each run did: when, db size after, pruned, archived, zombies closed, files removed,
    freed, duration, longest write transaction.

    Read-only. Every `run` and `report` records its figures in <home>/keeper/history.db;
    rows older than 30 days are thinned to one a day, older than a year to one a week.
    """
    kinds = None if every_kind else ("run",)

    def show(profile, entries) -> None:
        t = Table(title=f"{profile.name}: history ({len(entries)} rows)", show_edge=False)
        t.add_column("when", no_wrap=True)
        t.add_column("kind")
        for col in ("db", "pruned", "archived", "closed", "files", "freed", "took", "max txn"):
            t.add_column(col, justify="right")
        for e in entries:
            f = e.figures
            runs = f" ({f['runs']} runs)" if f.get("runs", 1) > 1 else ""
            stopped = f" (interrupted: {f['interrupted']})" if f.get("interrupted") else ""
            t.add_row(
                local_time(e.ts),
                e.kind + runs + stopped,
                units.size(database_bytes(f["components"])) if "components" in f else "",
                *(str(f.get(k, "")) for k in ("pruned", "archived", "zombies_closed", "files_removed")),
                units.size(f["freed_bytes"]) if "freed_bytes" in f else "",
                units.duration(round(f["seconds"], 1)) if "seconds" in f else "",
                f"{f['max_txn_ms']:.0f} ms" if "max_txn_ms" in f else "",
            )
        console().print(t)

    for_each(
        profiles,
        lambda p: p.history.entries(kinds, limit),
        as_json,
        show,
        to_dict=lambda entries: {"entries": [e.to_dict() for e in entries]},
    )
