"""``fleet status|sync|search|show|export``: every host's keeper, read from the restic repositories
it reports to, and its archive through the local cache ``fleet sync`` keeps."""

from __future__ import annotations

import functools
import sys
import time
from dataclasses import replace
from pathlib import Path

import click

from hermes_keeper import units
from hermes_keeper.archive import hermes_import
from hermes_keeper.archive.query import render_conversation
from hermes_keeper.check import STATUS
from hermes_keeper.cli.archive import _damaged_exit, echo_search, export_options, filter_options
from hermes_keeper.cli.check import NagiosCommand
from hermes_keeper.cli.options import HelpGroup, emit_json, examples, json_option, metrics_to, textfile_option
from hermes_keeper.cli.render import busy, console, print_table, table
from hermes_keeper.cli.text import term
from hermes_keeper.fleet import FleetRow, FleetSync, status_line
from hermes_keeper.home import Fleet, resolve_root
from hermes_keeper.model.policy import CONFIG_NAME, effective_policy


@click.group(
    cls=HelpGroup,
    epilog=examples(
        "fleet status", "fleet sync --config ~/fleet.toml", 'fleet search "invoice" --host alpha'
    ),
)
def fleet():
    """The hosts that push to restic repositories ([fleet] repositories): their reports, and
    their archives through a local cache (fleet sync)."""


def config_options(fn):
    """``--config`` (the file with [fleet]) and ``--cache`` (the archives' cache); passes ``fleet: Fleet``."""

    @click.option(
        "--config",
        "config_path",
        type=click.Path(dir_okay=False),
        default=None,
        help="The file with [fleet] repositories (default: <home>/keeper.toml).",
    )
    @click.option(
        "--cache",
        "cache_dir",
        type=click.Path(file_okay=False),
        default=None,
        metavar="DIR",
        help="The archives' cache (default: ~/.cache/hermes-keeper/fleet).",
    )
    @functools.wraps(fn)
    def wrapper(*args, config_path, cache_dir, **kwargs):
        path = Path(config_path) if config_path else resolve_root() / CONFIG_NAME
        fleet = Fleet(policy=effective_policy(path.parent, "", path), cache_dir=cache_dir)
        return fn(*args, fleet=fleet, **kwargs)

    return wrapper


def host_options(fn):
    """``--host`` and ``--profile``: which cached archives (default: every one)."""
    fn = click.option("--profile", default=None, metavar="NAME", help="Only this profile.")(fn)
    return click.option("--host", default=None, metavar="NAME", help="Only this host.")(fn)


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


def _show_sync(res: FleetSync) -> None:
    for r in res.rows:
        if r.error:
            click.echo(term(f"{r.host}/{r.profile}: {r.error}" if r.host else r.error), err=True)
            continue
        got = f"fetched {units.plural(r.fetched, 'file')} ({units.size(r.fetched_bytes)})"
        more = [f"{r.unchanged} unchanged"] + [
            f"{n} {w}" for n, w in ((r.repaired, "repaired"), (r.removed, "removed")) if n
        ]
        click.echo(term(f"{r.host}/{r.profile} {r.snapshot}: {got}, {', '.join(more)}"))
    t = res.totals()
    hosts = f"{units.plural(t['hosts'], 'host')}, {units.plural(t['archives'], 'archive')}"
    click.echo(
        f"{hosts}: fetched {units.plural(t['files_fetched'], 'file')}"
        f" ({units.size(t['bytes_fetched'])}), {t['files_unchanged']} unchanged"
        f" ({units.took(res.seconds)})" + (f"; {units.plural(t['errors'], 'error')}" if t["errors"] else "")
    )


@fleet.command(
    "sync",
    epilog=examples("fleet sync", "fleet sync --config ~/fleet.toml --json", "fleet sync --verify"),
)
@config_options
@click.option(
    "--verify", is_flag=True, help="Also re-hash every cached file (else: those whose size or mtime moved)."
)
@json_option
def sync_cmd(fleet, verify, as_json):
    """Bring the newest archive of every host and profile into the local cache: only the files
    whose content changed since the last sync, restored and verified by restic.

    A repository or host that fails is one line on stderr (its old cache stays); the others
    sync. Exit 1 when any failed.
    """
    with busy("syncing the fleet's archives"):
        res = fleet.sync(verify=verify)
    if as_json:
        emit_json([r.to_dict() for r in res.rows], **res.totals())
    else:
        _show_sync(res)
    sys.exit(1 if res.errors else 0)


@fleet.command(
    "search",
    epilog=examples('fleet search "invoice"', "fleet search walrus --host alpha --since 90d --json"),
)
@config_options
@host_options
@click.argument("text")
@filter_options
@click.option("--limit", default=50, show_default=True, metavar="N", help="Sessions to show per archive.")
@json_option
def search_cmd(fleet, host, profile, text, filters, limit, as_json):
    """Cached archived sessions whose messages contain TEXT (case-insensitive), on every host
    (as `archive search`; `fleet sync` first)."""
    found = fleet.search(text, host, profile, limit=limit, filters=filters)
    if as_json:
        emit_json([f.to_dict() for f in found])
        sys.exit(1 if any(f.error for f in found) else 0)
    for f in found:
        if f.result is None:
            click.echo(term(f"hermes-keeper: {f.archive.host}/{f.archive.profile}: {f.error}"), err=True)
        else:
            echo_search(f.result, text, f"{f.archive.host}/{f.archive.profile}: ")
    if not found:
        click.echo("no cached archive (run `fleet sync`)", err=True)
    sys.exit(1 if any(f.error for f in found) else 0)


@fleet.command(
    "show",
    epilog=examples(
        "fleet show alpha 20260105_093000_ab12cd", "fleet show alpha 20260105 --profile work --full"
    ),
)
@config_options
@click.argument("host", metavar="HOST")
@click.argument("session_id", metavar="ID")
@click.option("--profile", default=None, metavar="NAME", help="The host's profile (when it has several).")
@click.option("--json", "as_json", is_flag=True, help="The raw archived payload.")
@click.option("--full", is_flag=True, help="Unfold tool calls, tool results and long messages.")
@click.option("--inactive", "show_all", is_flag=True, help="Also rewound/compacted (inactive) messages.")
def show_cmd(fleet, host, session_id, profile, as_json, full, show_all):
    """One cached archived conversation of HOST, as `archive show` (ID, a unique prefix, #N)."""
    a, payload = fleet.show(host, session_id, profile)
    if as_json:
        emit_json([{"profile": a.profile, "host": a.host, "archived": payload}])
        return
    for line in render_conversation(payload, full=full, inactive=show_all):
        click.echo(term(line))


@fleet.command(
    "export",
    epilog=examples(
        "fleet export --host alpha --since 30d -o alpha.jsonl",
        "fleet export --format markdown --since 90d -o ~/fleet-conversations",
    ),
)
# first, so that its usage errors come before the config is read
@export_options(markdown="DIR/<host>/<profile>/<id>.md.", output="File (one archive), or folder.")
@config_options
@host_options
@click.argument("session_ids", nargs=-1, metavar="[ID]...")
@filter_options
def export_cmd(fleet, host, profile, session_ids, filters, fmt, output, split):
    """Cached archived sessions as `archive export` writes them: every host's to stdout, one
    host's to -o FILE (--host/--profile), or --format markdown into -o DIR by host and profile."""
    if fmt == "markdown" and (not output or split):
        raise click.UsageError("--format markdown writes one file per session: give -o DIR (no --split)")
    filters = filters.addressed(tuple(session_ids)) if session_ids else replace(filters, newest=True)
    with busy("exporting cached archived sessions"):
        done = fleet.export(output, filters, host, profile, fmt, split)
    damaged = []
    for a, res, paths in done:
        where = ", ".join(map(str, paths)) if paths else "stdout"
        n, m = units.plural(res.sessions, "session"), units.plural(res.messages, "message")
        click.echo(
            term(f"{a.host}/{a.profile}: exported {n} ({m}) to {output if fmt == 'markdown' else where}"),
            err=True,
        )
        damaged += res.damaged
    if fmt != "markdown":
        click.echo(
            f"import into Hermes: HERMES_HOME=... <hermes python> {hermes_import.__file__} FILE", err=True
        )
    _damaged_exit(damaged)
