"""``archive list|show|search|restore|export|verify``."""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from ..archive import ARCHIVE_NAME, Archive, ArchiveDamaged
from ..archive_query import Filters, list_entries, render_conversation, search
from ..errors import KeeperError
from ..export import write_export
from ..journal import Journal
from ..lock import keeper_lock
from ..render import human_bytes
from ..unarchive import restore_sessions
from .options import profile_options


def _date(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        d = datetime.fromisoformat(value)
    except ValueError:
        raise click.BadParameter(f"not a date: {value!r} (use YYYY-MM-DD)") from None
    return (d if d.tzinfo else d.replace(tzinfo=timezone.utc)).timestamp()


def filter_options(fn):
    for opt in reversed(
        [
            click.option("--source", default=None, help="Only this source (cron, cli, telegram, ...)."),
            click.option("--since", default=None, help="Last activity on or after this date (YYYY-MM-DD)."),
            click.option("--until", default=None, help="Started before this date (YYYY-MM-DD)."),
            click.option("--title", default=None, help="Title contains this text."),
        ]
    ):
        fn = opt(fn)
    return fn


def _filters(source, since, until, title) -> Filters:
    return Filters(source, _date(since), _date(until), title)


def _open(profiles) -> tuple:
    if len(profiles) != 1:
        raise KeeperError("archive commands work on one profile at a time (--profile NAME)")
    p = profiles[0]
    path = p.keeper_dir / ARCHIVE_NAME
    if not path.exists():
        raise KeeperError(f"no archive yet for profile {p.name} ({path})")
    return p, Archive(path, create=False)


@click.group()
def archive():
    """Sessions the keeper pruned: list, read, search, restore, export, verify."""


@archive.command("list")
@profile_options
@filter_options
@click.option("--json", "as_json", is_flag=True)
def list_cmd(profiles, source, since, until, title, as_json):
    """Archived sessions with source, dates, title, messages and size."""
    _, store = _open(profiles)
    with store:
        entries = list_entries(store, _filters(source, since, until, title))
    if as_json:
        click.echo(json.dumps({"sessions": [asdict(e) for e in entries]}, indent=2))
        return
    t = Table(title=f"{len(entries)} archived sessions")
    for col in ("id", "source", "last activity", "title", "messages", "size", "state"):
        t.add_column(col, overflow="fold")
    for e in entries:
        when = datetime.fromtimestamp(e.last_activity or 0).strftime("%Y-%m-%d")
        t.add_row(
            e.session_id,
            e.source,
            when,
            e.title or "",
            str(e.message_count),
            human_bytes(e.stored_bytes),
            e.state,
        )
    Console().print(t)


@archive.command()
@profile_options
@click.argument("session_id")
@click.option("--json", "as_json", is_flag=True, help="The raw archived payload.")
def show(profiles, session_id, as_json):
    """One archived conversation, for reading."""
    _, store = _open(profiles)
    with store:
        try:
            payload = store.get(session_id)
        except KeyError:
            raise KeeperError(f"{session_id} is not in the archive") from None
        except ArchiveDamaged as exc:
            raise KeeperError(f"archive row damaged: {exc}") from None
    if as_json:
        click.echo(json.dumps(payload, indent=2, ensure_ascii=False))
    else:
        for line in render_conversation(payload):
            click.echo(line)


@archive.command("search")
@profile_options
@click.argument("text")
@filter_options
@click.option("--limit", default=50, show_default=True)
@click.option("--json", "as_json", is_flag=True)
def search_cmd(profiles, text, source, since, until, title, limit, as_json):
    """Archived sessions whose messages contain TEXT (case-insensitive), with a snippet."""
    _, store = _open(profiles)
    with store:
        hits = list(search(store, text, _filters(source, since, until, title), limit=limit))
    if as_json:
        click.echo(json.dumps({"hits": [h.to_dict() for h in hits]}, indent=2, ensure_ascii=False))
        return
    for h in hits:
        click.echo(f"{h.entry.session_id} [{h.entry.source}] {h.role}: {h.snippet}")
    click.echo(f"{len(hits)} sessions")


@archive.command("restore")
@profile_options
@click.argument("session_ids", nargs=-1, required=True)
@click.option("--json", "as_json", is_flag=True)
def restore_cmd(profiles, session_ids, as_json):
    """Put archived sessions back into state.db exactly as they were (whole conversations)."""
    p, store = _open(profiles)
    store.close()
    with keeper_lock(p.root), Journal(p.keeper_dir) as journal:
        res = restore_sessions(p, list(session_ids), journal=journal)
    if as_json:
        click.echo(json.dumps(res.to_dict(), indent=2))
    else:
        click.echo(
            f"restored {len(res.restored)} sessions ({res.messages} messages): {', '.join(res.restored)}"
        )
        for sid, title in res.retitled.items():
            click.echo(f"  {sid}: title was taken, now {title!r}")
        if res.dropped_columns:
            click.echo(f"  columns this Hermes does not have were dropped: {', '.join(res.dropped_columns)}")
    for sid in res.damaged:
        click.echo(
            f"hermes-keeper: {sid}: archive row damaged, not restored (see `archive verify`)", err=True
        )
    if res.damaged:
        sys.exit(1)


@archive.command("export")
@profile_options
@filter_options
@click.option(
    "--format", "fmt", type=click.Choice(["hermes-jsonl"]), default="hermes-jsonl", show_default=True
)
@click.option("-o", "--output", type=click.Path(dir_okay=False), required=True)
def export_cmd(profiles, source, since, until, title, fmt, output):
    """One session per line, as Hermes's export_session writes it (importable by import_sessions)."""
    _, store = _open(profiles)
    with store:
        n = write_export(store, Path(output), _filters(source, since, until, title))
    click.echo(f"exported {n} sessions to {output}")


@archive.command()
@profile_options
@click.option("--json", "as_json", is_flag=True)
def verify(profiles, as_json):
    """Recompute every payload's sha256; exit 1 if any row is damaged."""
    _, store = _open(profiles)
    with store:
        damaged = [e.session_id for e, raw in store.payloads() if raw is None]
        total = sum(1 for _ in store.entries())
    if as_json:
        click.echo(json.dumps({"checked": total, "damaged": damaged}, indent=2))
    else:
        click.echo(f"checked {total} archived sessions: {len(damaged)} damaged")
        for sid in damaged:
            click.echo(f"  damaged: {sid}")
    if damaged:
        sys.exit(1)
