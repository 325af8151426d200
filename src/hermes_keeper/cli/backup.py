"""``backup``, ``backups``, ``restore``, ``compact``."""

from __future__ import annotations

import json
import time

import click
from rich.console import Console
from rich.table import Table

from ..backup import apply_rotation, backup_dir, malformed_copies, rotation, take_backup
from ..errors import KeeperError
from ..journal import Journal
from ..lock import keeper_lock
from ..policy import parse_duration
from ..reclaim import compact as compact_profile
from ..render import human_bytes
from ..restore import find_backup, restore_backup
from .options import profile_options

dest_option = click.option(
    "--dest",
    type=click.Path(file_okay=False),
    default=None,
    help="Backup folder (default: <home>/keeper/backups).",
)


def _emit(as_json: bool, rows: list[dict], line) -> None:
    if as_json:
        click.echo(json.dumps({"profiles": rows}, indent=2))
    else:
        for r in rows:
            click.echo(line(r))


@click.command()
@profile_options
@dest_option
@click.option("--no-rotate", is_flag=True, help="Keep every older backup.")
@click.option("--json", "as_json", is_flag=True)
def backup(profiles, dest, no_rotate, as_json):
    """Consistent snapshot (VACUUM INTO) of state.db, zstd-compressed, verified; Hermes keeps running."""
    rows = []
    for p in profiles:
        with keeper_lock(p.root), Journal(p.keeper_dir) as journal:
            t0 = time.perf_counter()
            rec = take_backup(p, dest, journal=journal)
            removed = [] if no_rotate else apply_rotation(backup_dir(p, dest), journal=journal)
        rows.append(rec.to_dict() | {"seconds": round(time.perf_counter() - t0, 2), "rotated_out": removed})
    _emit(
        as_json,
        rows,
        lambda r: (
            f"{r['profile']}: {r['name']} {human_bytes(r['bytes'])} "
            f"(database {human_bytes(r['raw_bytes'])}, {r['seconds']} s); rotated out {len(r['rotated_out'])}"
        ),
    )


@click.command()
@profile_options
@dest_option
@click.option("--prune", is_flag=True, help="Delete the backups rotation does not keep.")
@click.option("--remove-leftovers", is_flag=True, help="Delete Hermes's state.db.malformed-backup-* copies.")
@click.option("--json", "as_json", is_flag=True)
def backups(profiles, dest, prune, remove_leftovers, as_json):
    """List backups with size, age, verification and why each is kept; Hermes's leftover copies."""
    out = []
    for p in profiles:
        folder = backup_dir(p, dest)
        rows = rotation(folder)
        leftovers = malformed_copies(p)
        removed: list[str] = []
        if prune or remove_leftovers:
            with keeper_lock(p.root), Journal(p.keeper_dir) as journal:
                if prune:
                    removed = apply_rotation(folder, journal=journal)
                if remove_leftovers:
                    for path, size in leftovers:
                        path.unlink()
                        journal.write("leftover_removed", name=path.name, bytes=size)
        out.append(
            {
                "profile": p.name,
                "folder": str(folder),
                "backups": [
                    r.to_dict() | {"verified": ok, "keep": d.keep, "reasons": list(d.reasons)}
                    for r, d, ok in rows
                ],
                "removed": removed,
                "leftovers": [
                    {"name": path.name, "bytes": size, "removed": remove_leftovers}
                    for path, size in leftovers
                ],
            }
        )
    if as_json:
        click.echo(json.dumps({"profiles": out}, indent=2))
        return
    console, now = Console(), time.time()
    for o in out:
        t = Table(title=f"{o['profile']}: backups in {o['folder']}")
        for col in ("backup", "size", "age", "verified", "kept because"):
            t.add_column(col, overflow="fold")
        for b in o["backups"]:
            t.add_row(
                b["name"],
                human_bytes(b["bytes"]),
                f"{(now - b['created_at']) / 86400:.1f}d",
                "yes" if b["verified"] else "[red]NO[/]",
                ", ".join(b["reasons"]) or "[yellow]not kept[/]",
            )
        console.print(t)
        for name in o["removed"]:
            console.print(f"removed {name}")
        for lo in o["leftovers"]:
            verb = "removed" if lo["removed"] else "found (remove with --remove-leftovers)"
            console.print(f"Hermes leftover {lo['name']} {human_bytes(lo['bytes'])}: {verb}")


@click.command()
@profile_options
@click.argument("backup_name", required=False)
@click.option("--latest", is_flag=True, help="The newest backup.")
@dest_option
@click.option("--force", is_flag=True, help="Even while a process holds the database.")
@click.option("--json", "as_json", is_flag=True)
def restore(profiles, backup_name, latest, dest, force, as_json):
    """Replace state.db with a verified backup; the current one is kept aside as a safety copy."""
    if bool(backup_name) == bool(latest):
        raise KeeperError("name a backup or pass --latest")
    if len(profiles) != 1:
        raise KeeperError("restore one profile at a time")
    p = profiles[0]
    with keeper_lock(p.root), Journal(p.keeper_dir) as journal:
        folder, rec = find_backup(p, backup_name, dest)
        res = restore_backup(p, folder, rec, force=force, journal=journal)
    _emit(
        as_json,
        [res.to_dict() | {"profile": p.name}],
        lambda r: (
            f"{r['profile']}: restored {r['restored']} ({r['sessions']} sessions, {r['messages']} messages);"
            f" previous state.db kept as {r['safety_copy']}"
        ),
    )


@click.command()
@profile_options
@click.option("--wait-idle", default=None, help="Wait up to this long (e.g. 10m) for Hermes to stop.")
@click.option("--no-vacuum", is_flag=True, help="Never run the one-time full VACUUM.")
@click.option("--json", "as_json", is_flag=True)
def compact(profiles, wait_idle, no_vacuum, as_json):
    """Return free pages to the disk in short steps while Hermes runs."""
    wait = parse_duration(wait_idle, "--wait-idle") if wait_idle else None
    rows = []
    for p in profiles:
        with keeper_lock(p.root), Journal(p.keeper_dir) as journal:
            rows.append(
                compact_profile(
                    p, wait_idle_s=wait, allow_full_vacuum=not no_vacuum, journal=journal
                ).to_dict()
            )
    _emit(
        as_json,
        rows,
        lambda r: (
            f"{r['profile']}: freed {human_bytes(r['freed_bytes'])} "
            f"({human_bytes(r['db_bytes_before'])} -> {human_bytes(r['db_bytes_after'])}, auto_vacuum "
            f"{r['auto_vacuum_before']} -> {r['auto_vacuum_after']})"
            + (f"; {r['note']}" if r["note"] else "")
        ),
    )
