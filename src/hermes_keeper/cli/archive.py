"""``archive list|show|search|restore|export|verify|pull``: the pruned sessions, readable and restorable."""

from __future__ import annotations

import functools
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, replace
from typing import Any

import click

from hermes_keeper import units
from hermes_keeper.archive import hermes_import
from hermes_keeper.archive.query import (
    Filters,
    SearchResult,
    parse_when,
    render_conversation,
    when,
)
from hermes_keeper.cli.options import (
    HelpGroup,
    debug_traceback,
    emit_json,
    examples,
    for_each,
    one_profile_options,
    outcome_row,
    profile_options,
)
from hermes_keeper.cli.render import busy, console, print_table, table
from hermes_keeper.cli.text import cell, term
from hermes_keeper.errors import KeeperError
from hermes_keeper.home import Outcome, Profile, ProfileArchive, Skipped, each, exit_code
from hermes_keeper.model.policy import did_you_mean


def _when_option(value: str | None, end_of_day: bool) -> float | None:
    if value is None:
        return None
    try:
        return parse_when(value, end_of_day=end_of_day)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


def filter_options(fn):
    """``--source`` (repeatable), ``--since``, ``--until``, ``--title``; passes ``filters: Filters``."""
    options = [
        click.option(
            "--source",
            "sources",
            multiple=True,
            metavar="SOURCE",
            help="Only this source (repeatable): cron, cli, ...",
        ),
        click.option(
            "--since",
            default=None,
            metavar="WHEN",
            help="Last activity on/after: YYYY-MM-DD, ISO time, or 30d/12h/2w ago.",
        ),
        click.option(
            "--until",
            default=None,
            metavar="WHEN",
            help="Last activity before (as --since; a date includes that whole day).",
        ),
        click.option(
            "--title", default=None, metavar="TEXT", help="Title contains this text (case-insensitive)."
        ),
    ]

    @functools.wraps(fn)
    def wrapper(*args, sources, since, until, title, **kwargs):
        filters = Filters(tuple(sources), _when_option(since, False), _when_option(until, True), title)
        return fn(*args, filters=filters, **kwargs)

    for opt in reversed(options):
        wrapper = opt(wrapper)
    return wrapper


def export_options(markdown: str, output: str):
    """``--format``, ``-o`` and ``--split`` of ``archive export`` and ``fleet export`` (``markdown`` and
    ``output`` say where each writes); ``--split`` without ``-o`` is refused before any work."""

    def decorate(fn):
        @click.option(
            "--format",
            "fmt",
            type=click.Choice(["hermes-jsonl", "markdown"]),
            default="hermes-jsonl",
            show_default=True,
            help=f"hermes-jsonl: one file Hermes imports; markdown: {markdown}",
        )
        @click.option("-o", "--output", type=click.Path(), default=None, help=output)
        @click.option(
            "--split", is_flag=True, help="With -o: FILE-001.jsonl, ... each fitting one Hermes import call."
        )
        @functools.wraps(fn)
        def wrapper(*args, split, output, **kwargs):
            if split and not output:
                raise click.UsageError("--split needs -o FILE")
            return fn(*args, split=split, output=output, **kwargs)

        return wrapper

    return decorate


def _warn_unmatched_sources(archives: list[ProfileArchive], filters: Filters, listed: list) -> None:
    """``--source crn``: a source no archived session has is said on stderr, with the one of the
    archive's sources it most likely meant (an empty list alone reads as "nothing archived")."""
    shown = {e.source for _p, entries in listed for e in entries}
    missing = [s for s in filters.sources if s not in shown]
    if not missing:
        return
    known = {e.source for a in archives for e in a.list(Filters())}
    for source in missing:
        if source not in known:
            hint = did_you_mean(source, known) or f" (the archive has: {', '.join(sorted(known)) or 'none'})"
            click.echo(
                term(f"hermes-keeper: warning: no archived session has source {source!r}{hint}"), err=True
            )


def _one(profiles: list[Profile]) -> Profile:
    if len(profiles) != 1:
        raise KeeperError("this archive command works on one profile at a time (--profile NAME)")
    return profiles[0]


NO_ARCHIVE = "no archive"


def _read_archives(profiles: list[Profile], read: Callable[[ProfileArchive], Any]) -> list[Outcome]:
    """``read`` of each selected profile's archive through :func:`each`: one damaged archive is
    its line on stderr and the others are still read; with several profiles, one without an
    archive is left out unsaid."""

    def action(p: Profile):
        if len(profiles) > 1 and not p.archive.exists:
            raise Skipped(NO_ARCHIVE)
        return read(p.archive)

    outcomes = [o for o in each(profiles, action, needs_db=False) if o.skipped != NO_ARCHIVE]
    for o in outcomes:
        if o.error is not None or o.skipped is not None:
            debug_traceback(o)
            click.echo(term(f"hermes-keeper: {o.profile.name}: {o.error or o.skipped}"), err=True)
    return outcomes


def _exit_if_failed(outcomes: list[Outcome]) -> None:
    if code := exit_code(outcomes):
        sys.exit(code)


@click.group(cls=HelpGroup, epilog=examples("archive list", "archive show ID", "archive restore ID"))
def archive():
    """Sessions the keeper pruned: list, read, search, restore, export, verify."""


@archive.command(
    "list",
    epilog=examples("archive list --source cron --since 30d", "archive list --until 2026-01-31 --json"),
)
@profile_options
@filter_options
@click.option("--json", "as_json", is_flag=True)
def list_cmd(profiles, filters, as_json):
    """Archived sessions with source, dates, title, message count and size."""
    outcomes = _read_archives(profiles, lambda a: a.list(filters))
    listed = [(o.profile, o.value) for o in outcomes if o.error is None and o.skipped is None]
    _warn_unmatched_sources([p.archive for p, _ in listed], filters, listed)
    if as_json:
        rows = [outcome_row(o, lambda entries: {"sessions": [asdict(e) for e in entries]}) for o in outcomes]
        emit_json(rows)
        _exit_if_failed(outcomes)
        return
    rows = [(p, e) for p, entries in listed for e in entries]
    cols = ("id", "source", "started", "last activity", "title", "msgs", "size", "state")
    if len(profiles) > 1:
        cols = ("profile", *cols)
    title = f"{units.plural(len(rows), 'archived session')} (times {units.zone_of()})"
    t = table(title, cols, whole=["profile", "id", "source"], right=["msgs", "size"], title_justify="left")
    repeated = {k for k, n in Counter((p.name, e.session_id) for p, e in rows).items() if n > 1}
    for p, e in rows:
        address = f"{e.session_id} #{e.entry}" if (p.name, e.session_id) in repeated else e.session_id
        cells = [cell(address), cell(e.source), when(e.started_at, False), when(e.last_activity, False)]
        cells += [cell(e.title)]
        cells += [str(e.message_count), units.size(e.raw_bytes), e.state]
        t.add_row(*([cell(p.name)] if len(profiles) > 1 else []), *cells)
    print_table(console(), t, drop=("started", "title", "state"))
    _exit_if_failed(outcomes)


@archive.command(
    epilog=examples("archive show 20260105_093000_ab12cd", "archive show 20260105 --inactive --full")
)
@one_profile_options
@click.argument("session_id", metavar="ID")
@click.option("--json", "as_json", is_flag=True, help="The raw archived payload.")
@click.option("--full", is_flag=True, help="Unfold tool calls, tool results and long messages.")
@click.option("--inactive", "show_all", is_flag=True, help="Also rewound/compacted (inactive) messages.")
def show(profiles, session_id, as_json, full, show_all):
    """One archived conversation, for reading (ID or a unique prefix of it: its newest entry; #N: entry N)."""
    profile = _one(profiles)
    payload = profile.archive.show(session_id)
    if as_json:
        emit_json([{"profile": profile.name, "archived": payload}])
        return
    for line in render_conversation(payload, full=full, inactive=show_all):
        click.echo(term(line))


def echo_search(r: SearchResult, text: str, prefix: str = "") -> None:
    """One archive's search result: a line and a snippet a hit, then how many matched (the fleet's
    search prints each host's so too)."""
    out = console()
    for h in r.hits:
        more = f" (+{h.matches - 1} more)" if h.matches > 1 else ""
        inactive = " inactive" if h.inactive else ""
        head = f"{prefix}{h.entry.session_id} [{h.entry.source}] {when(h.timestamp)}"
        click.echo(term(f"{head} {h.role}{inactive}{more}"))
        snippet = cell(f"    {h.snippet}")
        snippet.highlight_words([text], style="bold yellow", case_sensitive=False)  # a terminal only
        out.print(snippet)
    scanned = units.plural(r.scanned, "archived session")
    if r.complete:
        click.echo(f"{prefix}{r.total} of {scanned} match ({units.took(r.seconds)})")
    else:  # it stopped at the first match past --limit
        shown = f"showing the newest {len(r.hits)} (--limit N shows more)"
        click.echo(f"{prefix}more than {len(r.hits)} of {scanned} match, {shown} ({units.took(r.seconds)})")
    if r.damaged:
        damaged = units.plural(len(r.damaged), "damaged row")
        click.echo(f"{prefix}{damaged} not searched (see `archive verify`)", err=True)


@archive.command(
    "search",
    epilog=examples('archive search "walrus" --since 90d', "archive search invoice --source telegram --json"),
)
@profile_options
@click.argument("text")
@filter_options
@click.option("--limit", default=50, show_default=True, metavar="N", help="Sessions to show (newest first).")
@click.option("--json", "as_json", is_flag=True)
def search_cmd(profiles, text, filters, limit, as_json):
    """Archived sessions whose messages contain TEXT (case-insensitive), with a snippet."""
    outcomes = _read_archives(profiles, lambda a: a.search(text, filters, limit))
    results = [(o.profile, o.value) for o in outcomes if o.error is None and o.skipped is None]
    if as_json:
        emit_json([outcome_row(o) for o in outcomes])
        _exit_if_failed(outcomes)
        return
    for p, r in results:
        echo_search(r, text, f"{p.name}: " if len(profiles) > 1 else "")
    _exit_if_failed(outcomes)


@archive.command(
    "restore",
    epilog=examples(
        "archive restore 20260105_093000_ab12cd --dry-run", "archive restore 20260105_093000_ab12cd"
    ),
)
@one_profile_options
@click.argument("session_ids", nargs=-1, required=True, metavar="ID...")
@click.option("--dry-run", is_flag=True, help="Show what would come back; change nothing.")
@click.option(
    "--force",
    is_flag=True,
    help="Restore even while Hermes's own auto-prune would delete them again (run `adopt` instead).",
)
@click.option("--json", "as_json", is_flag=True)
def restore_cmd(profiles, session_ids, dry_run, force, as_json):
    """Put archived sessions back into state.db exactly as they were (whole conversations).

    Exit 1 when a session was refused (damaged, already in state.db, not archived); exit 2, nothing
    restored, while Hermes's own auto-prune would delete one again (`adopt` first, or --force).
    """
    profile = _one(profiles)
    res = profile.archive.restore(session_ids, dry_run=dry_run, force=force)
    if as_json:
        emit_json([{"profile": profile.name, **res.to_dict()}])
    else:
        verb = "would restore" if dry_run else "restored"
        ids = [m["session_id"] for m in res.members] if dry_run else res.restored
        n = units.plural(len(ids), "session")
        click.echo(f"{verb} {n}" + ("" if dry_run else f" ({units.plural(res.messages, 'message')})"))
        asked = set(session_ids)
        for m in res.members:
            if m["session_id"] in ids:
                why = "" if m["session_id"] in asked else f" ({m['why']})"
                resume = ", finishing an interrupted restore" if m["resume"] else ""
                n = m["messages"]
                click.echo(term(f"  {m['session_id']}{why}: {n} message{'' if n == 1 else 's'}{resume}"))
        for sid, title in res.retitled.items():
            click.echo(term(f"  {sid}: title already taken, restored as {title!r}"))
        if res.kept_until:
            until = time.strftime("%Y-%m-%d", time.localtime(res.kept_until))
            click.echo(f"kept until {until} (restored_keep in keeper.toml): runs will not prune them")
    for w in res.warnings:
        click.echo(f"hermes-keeper: warning: {term(w)}", err=True)
    for sid, why in res.refused.items():
        click.echo(term(f"hermes-keeper: {sid}: not restored: {why}"), err=True)
    if res.refused:
        sys.exit(1)


@archive.command(
    "export",
    epilog=examples(
        "archive export --since 30d -o recent.jsonl",
        "archive export 20260105_093000_ab12cd > one.jsonl",
        "archive export --format markdown --since 90d -o ~/hermes-conversations",
    ),
)
@one_profile_options
@click.argument("session_ids", nargs=-1, metavar="[ID]...")
@filter_options
@export_options(
    markdown="one readable .md per session into -o DIR.",
    output="File (0600; default stdout), or with --format markdown the folder (made 0700).",
)
def export_cmd(profiles, session_ids, filters, fmt, output, split):
    """One session per line, as Hermes's export_session returns it (importable by import_sessions),
    or --format markdown: one readable file per session into -o DIR.

    Import with Hermes's own code: HERMES_HOME=... <hermes python> hermes_import.py FILE
    (the path is printed after the export), or a --split file on the dashboard's Sessions page.
    """
    filters = filters.addressed(tuple(session_ids)) if session_ids else replace(filters, newest=True)
    if fmt == "markdown":
        _export_markdown(_one(profiles), output, filters, split)
        return
    with busy("exporting archived sessions"):
        res, paths = _one(profiles).archive.export(output, filters, split=split)
    where = ", ".join(map(str, paths)) if paths else "stdout"
    n, m = units.plural(res.sessions, "session"), units.plural(res.messages, "message")
    click.echo(f"exported {n} ({m}) to {where}", err=True)
    click.echo(f"import into Hermes: HERMES_HOME=... <hermes python> {hermes_import.__file__} FILE", err=True)
    for sid, why in res.too_big.items():
        click.echo(
            term(f"hermes-keeper: warning: {sid}: {why}; Hermes's import refuses it (use `archive restore`)"),
            err=True,
        )
    _damaged_exit(res.damaged)


def _damaged_exit(damaged: list[str]) -> None:
    """Name each damaged row left out of an export; exit 1 if any."""
    for sid in damaged:
        click.echo(
            term(f"hermes-keeper: {sid}: archive row damaged, not exported (see `archive verify`)"), err=True
        )
    if damaged:
        sys.exit(1)


def _export_markdown(profile: Profile, output: str | None, filters: Filters, split: bool) -> None:
    if not output or split:
        raise click.UsageError("--format markdown writes one file per session: give -o DIR (no --split)")
    with busy("exporting archived sessions as Markdown"):
        res, paths = profile.archive.export_markdown(output, filters)
    click.echo(
        f"exported {units.plural(res.sessions, 'session')} ({units.plural(res.messages, 'message')})"
        f" as Markdown to {output}",
        err=True,
    )
    _damaged_exit(res.damaged)


@archive.command("verify", epilog=examples("archive verify", "archive verify --all-profiles --json"))
@profile_options
@click.option("--json", "as_json", is_flag=True)
def verify_cmd(profiles, as_json):
    """Decompress every payload and recompute its sha256; exit 1 if anything is damaged."""

    def action(p: Profile):
        if len(profiles) > 1 and not p.archive.exists:
            raise Skipped("no archive yet")
        return p.archive.verify()

    def show(p: Profile, r) -> None:
        db = "" if r.database == "ok" else f"; archive files quick_check: {r.database}"
        bad = len(r.damaged) or db
        click.secho(
            f"{p.name}: checked {units.plural(r.checked, 'archived session')}, {len(r.damaged)} damaged{db}",
            fg="red" if bad else None,
        )
        for why in r.damaged.values():
            click.secho(term(f"  damaged: {why}"), fg="red")

    outcomes = for_each(
        profiles,
        action,
        as_json,
        show,
        needs_db=False,
    )
    if not all(o.value.ok for o in outcomes if o.value is not None):
        sys.exit(1)


@archive.command(
    "pull", epilog=examples("archive pull --from offsite", "archive pull --from offsite 1a2b3c4d")
)
@profile_options
@click.argument("snapshot", required=False)
@click.option(
    "--from",
    "source",
    type=click.Choice(["offsite"]),
    required=True,
    help="offsite: keeper.toml's [offsite] restic repository.",
)
@click.option("--json", "as_json", is_flag=True)
def pull_cmd(profiles, snapshot, source, as_json):
    """Rebuild the archive on a new machine from an off-host copy (the newest, or SNAPSHOT).

    Adds the archive files this home lacks; never replaces one it has.
    """

    def show(p: Profile, r) -> None:
        click.echo(
            term(
                f"{p.name}: from off-host copy {r.snapshot}: added {', '.join(r.added) or 'nothing'}"
                + (f"; already here: {', '.join(r.same)}" if r.same else "")
                + (f"; kept the local {', '.join(r.kept)} (it differs)" if r.kept else "")
            )
        )

    for_each(profiles, lambda p: p.archive.pull_offsite(snapshot), as_json, show, needs_db=False)
