"""``history``: what past runs did (``keeper/history.db``)."""

from __future__ import annotations

import click

from hermes_keeper import units
from hermes_keeper.cli.options import examples, for_each, json_option, profile_options
from hermes_keeper.cli.render import console, print_table, table
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
    freed, the home's net change (what Hermes's files lost less what keeper/ gained: backups,
    archive), duration, longest write transaction.

    Read-only. Every `run` and `report` records its figures in <home>/keeper/history.db;
    rows older than 30 days are thinned to one a day, older than a year to one a week.
    """
    kinds = None if every_kind else ("run",)

    def show(profile, entries) -> None:
        figures = ("db", "pruned", "archived", "closed", "files", "freed", "home", "took", "max txn")
        title = f"{profile.name}: history ({units.plural(len(entries), 'row')}, times {units.zone_of()})"
        t = table(title, ("when", "kind", *figures), whole=["when"], right=figures, show_edge=False)
        for e in entries:
            f = e.figures
            runs = f" ({f['runs']} runs)" if f.get("runs", 1) > 1 else ""
            stopped = f" ({f['interrupted']})" if f.get("interrupted") else ""  # run (SIGINT): stopped by it
            t.add_row(
                units.when(e.ts, zone=False),
                e.kind + runs + stopped,
                "" if (db := database_bytes(f)) is None else units.size(db),
                *(str(f.get(k, "")) for k in ("pruned", "archived", "zombies_closed", "files_removed")),
                units.size(f["freed_bytes"]) if "freed_bytes" in f else "",
                units.change(-f["net_freed_bytes"]) if "net_freed_bytes" in f else "",
                units.took(f["seconds"]) if "seconds" in f else "",
                units.took(f["max_txn_ms"] / 1000) if "max_txn_ms" in f else "",
            )
        print_table(console(), t, drop=("max txn", "closed", "archived", "home"))

    for_each(
        profiles,
        lambda p: p.history.entries(kinds, limit),
        as_json,
        show,
        to_dict=lambda entries: {"entries": [e.to_dict() for e in entries]},
    )
