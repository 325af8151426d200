"""``backup``, ``backups``, ``restore``, ``compact``: thin wrappers over the backup package."""

from __future__ import annotations

import functools
import sys
import time

import click
from rich.text import Text

from hermes_keeper import units
from hermes_keeper.cli.options import (
    confirm,
    dest_option,
    dry_run_option,
    examples,
    for_each,
    json_option,
    one_profile_options,
    profile_options,
    quiet_option,
    yes_option,
)
from hermes_keeper.cli.render import busy, console, print_table, table
from hermes_keeper.cli.text import cell, term
from hermes_keeper.errors import KeeperError, TryLater
from hermes_keeper.model.policy import setting
from hermes_keeper.units import parse_duration


def rotation_options(fn):
    """restic-``forget``-style rules, OR-combined; the newest verified backup is always kept.

    Each defaults to keeper.toml's ``[backups] keep_*`` (SETTINGS); a flag overrides it once.
    The command gets them as one ``rules`` dict, by the names rotation and the policy use."""
    rules = [
        ("last", "the newest N backups"),
        ("daily", "the newest backup of each of the last N UTC days"),
        ("weekly", "the newest backup of each of the last N ISO weeks"),
        ("monthly", "the newest backup of each of the last N months"),
    ]
    for name, what in reversed(rules):  # click lists the last-applied option first
        default = setting(f"backups.keep_{name}").default
        fn = click.option(
            f"--keep-{name}",
            default=None,
            metavar="N",
            type=click.IntRange(min=0),
            help=f"Keep {what} (default: keeper.toml [backups] keep_{name}, else {default}).",
        )(fn)

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        given = {key: kwargs.pop(key) for key in (f"keep_{name}" for name, _ in rules)}
        return fn(*args, rules={k: v for k, v in given.items() if v is not None}, **kwargs)

    return wrapper


@click.command(
    epilog=examples(
        "backup --dry-run", "backup --all-profiles --dest /mnt/usb/hermes-backups --keep-daily 14"
    )
)
@profile_options
@dest_option
@rotation_options
@click.option("--no-rotate", is_flag=True, help="Keep every older backup this time.")
@dry_run_option
@json_option
@quiet_option
def backup(profiles, dest, rules, no_rotate, dry_run, as_json, quiet):
    """Consistent page-for-page snapshot of state.db, checked, zstd-compressed; Hermes keeps running.

    Older backups of the same home are then rotated (see `backups` for why each is kept).
    """
    rotate = False if no_rotate else rules
    if dry_run:
        for_each(profiles, lambda p: p.backup_preview(dest, rotate), as_json, _backup_preview, to_dict=dict)
        return

    def action(p):
        with busy(f"{p.name}: backing up state.db (page copy, then zstd)", as_json):
            return p.backup(dest, rotate=rotate)

    for_each(
        profiles,
        action,
        as_json,
        lambda _p, done: (
            quiet
            or click.echo(
                f"{done.record.profile}: "
                + ("state.db unchanged since " if done.record.reused else "")
                + f"{done.record.path} {units.size(done.record.bytes)} (a copy of state.db without its"
                f" free pages: {units.size(done.record.raw_bytes)}, took {units.took(done.seconds)});"
                " rotated out:"
                f" {', '.join(done.rotated_out) or 'none'}"
            )
        ),
    )


def _backup_preview(_profile, o: dict) -> None:
    if o["refused"]:
        click.echo(term(f"{o['profile']}: would be refused: {o['refused']}"))
        return
    gone, cost = ", ".join(o["would_rotate_out"]) or "none", o["cost"]
    click.echo(
        term(
            f"{o['profile']}: would back up state.db (a copy without its free pages:"
            f" {units.size(o['database_bytes'])}) into {o['folder']}"
            f" (~{units.size(cost['est_bytes'])} compressed, {units.size(cost['db_bytes'])} more while it is"
            f" made; {units.size(cost['free_bytes'])} free there); then rotate out: {gone}"
        )
    )


@click.command(
    epilog=examples(
        "backups",
        "backups --prune --keep-last 2 --dry-run",
        "backups --remove-leftovers",
        "backups --offsite",
    )
)
@profile_options
@dest_option
@rotation_options
@click.option("--prune", is_flag=True, help="Delete the backups the rotation rules do not keep.")
@click.option(
    "--offsite",
    is_flag=True,
    help="The copies in keeper.toml's [offsite] restic repository instead (--prune: restic forget).",
)
@click.option(
    "--remove-leftovers",
    is_flag=True,
    help="Delete Hermes's never-cleaned state.db.malformed-backup-* copies.",
)
@dry_run_option
@json_option
def backups(profiles, dest, rules, prune, offsite, remove_leftovers, dry_run, as_json):
    """List backups with size, age, verification and why each is kept; Hermes's leftover copies.

    Changes nothing unless --prune or --remove-leftovers is given (and not --dry-run).
    """
    if offsite:
        action = functools.partial(_offsite_copies, rules=rules, prune=prune, dry_run=dry_run)
        for_each(profiles, action, as_json, _show_offsite, to_dict=lambda o: o, needs_db=False)
        return

    def show(_profile, o: dict) -> None:
        out, now = console(), time.time()
        cols = ("backup", "size", "db copy", "age", "verified", "kept because")
        t = table(Text(f"{o['profile']}: backups in {term(o['folder'])}"), cols, whole=["backup"])
        for b in o["backups"]:
            t.add_row(
                cell(b["name"]),
                units.size(b["bytes"]),
                units.size(b["raw_bytes"]),
                units.ago(b["created_at"], now),
                "yes" if b["verified"] else "[red]NO (missing or damaged)[/]",
                ", ".join(b["reasons"]) or "[yellow]not kept: removed by --prune or the next backup[/]",
            )
        print_table(out, t, drop=("db copy",))
        for name in o["removed"]:
            out.print(cell(f"removed {name}"))
        if dry_run and prune:
            for b in o["backups"]:
                if not b["keep"]:
                    out.print(cell(f"would remove {b['name']}"))
        for lo in o["leftovers"]:
            verb = "removed" if lo["removed"] else "can be removed with --remove-leftovers"
            out.print(cell(f"Hermes leftover {lo['name']} ({units.size(lo['bytes'])}): {verb}"))
        for lo in o["killed_backup_files"]:
            size = units.size(lo["bytes"])
            out.print(cell(f"left by a killed backup: {lo['name']} ({size}); the next backup removes it"))

    for_each(
        profiles,
        lambda p: p.backups(
            dest,
            rules,
            prune=prune and not dry_run,
            remove_leftovers=remove_leftovers and not dry_run,
            dry_run=dry_run,
        ),
        as_json,
        show,
        to_dict=lambda o: o,
    )


def _offsite_copies(profile, rules, prune, dry_run) -> dict:
    return profile.offsite_copies(rules, prune=prune, dry_run=dry_run)


def _show_offsite(_profile, o: dict) -> None:
    out, now = console(), time.time()
    title = Text(f"{o['profile']}: off-host copies of {o['host']} in {term(o['repository'])}")
    t = table(title, ("snapshot", "kind", "taken", "age"), whole=["snapshot"])
    for c in o["copies"]:
        taken = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(c["time"]))
        t.add_row(c["short_id"], c["kind"], taken, units.ago(c["time"], now))
    print_table(out, t)
    for short_id in o["removed"]:
        out.print(cell(f"forgotten {short_id} (restic forget --prune)"))
    for short_id in o["would_remove"]:
        out.print(cell(f"would forget {short_id}"))


@click.command(
    epilog=examples(
        "restore --latest --dry-run",
        "restore state-20261203T040000Z.db.zst --yes",
        "restore --from offsite --yes",
    )
)
@one_profile_options
@click.argument("backup_name", required=False, metavar="[BACKUP]")
@click.option("--latest", is_flag=True, help="The newest backup of this home.")
@click.option(
    "--from",
    "source",
    type=click.Choice(["local", "offsite"]),
    default="local",
    show_default=True,
    help="offsite: a copy in keeper.toml's [offsite] restic repository (BACKUP: its snapshot id).",
)
@dest_option
@click.option(
    "--force", is_flag=True, help="Even while a process holds the database (it keeps the old file)."
)
@dry_run_option
@yes_option
@json_option
def restore(profiles, backup_name, latest, source, dest, force, dry_run, yes, as_json):
    """Replace state.db with a verified backup (a file name, a path, or --latest).

    The current state.db, -wal and -shm are kept as state.db.keeper-before-restore-<UTC>.
    Asks first on a terminal; without one, only with --yes. With --from offsite, the newest
    off-host copy (or the snapshot named) is fetched and restored the same way.
    """
    if len(profiles) != 1:
        raise KeeperError("restore one profile at a time")
    if source == "offsite":
        _restore_offsite(profiles, backup_name, force, dry_run, yes, as_json)
        return
    if bool(backup_name) == bool(latest):
        raise KeeperError("name a backup (file name or path) or pass --latest")
    profile = profiles[0]
    preview = profile.restore_preview(backup_name, dest)
    if dry_run:
        for_each(profiles, lambda _p: preview, as_json, _restore_preview, to_dict=dict)
        return
    if not as_json:
        _restore_preview(profile, preview)
    confirm(f"Replace {profile.db_path} with {preview['name']}?", yes)
    for_each(
        profiles,
        lambda p: p.restore(preview["path"], force=force),
        as_json,
        lambda p, r: click.echo(
            f"{p.name}: restored {r.restored} ({units.plural(r.sessions, 'session')}, "
            f"{units.plural(r.messages, 'message')}); previous state.db kept as "
            f"{r.safety_copy or '(there was none)'}"
        ),
    )


def _restore_offsite(profiles, snapshot, force, dry_run, yes, as_json) -> None:
    profile = profiles[0]
    if dry_run:
        for_each(profiles, lambda p: p.offsite_copy(snapshot), as_json, _offsite_preview, needs_db=False)
        return
    confirm(f"Replace {profile.db_path} with the off-host copy {snapshot or '(the newest)'}?", yes)
    for_each(
        profiles,
        lambda p: p.restore_offsite(snapshot, force=force),
        as_json,
        lambda p, r: click.echo(
            f"{p.name}: restored the off-host copy {r.copy.short_id} (taken "
            f"{units.ago(r.copy.time, time.time())}; {units.plural(r.result.sessions, 'session')}, "
            f"{units.plural(r.result.messages, 'message')}); previous state.db kept as "
            f"{r.result.safety_copy or '(there was none)'}"
        ),
        needs_db=False,
    )


def _offsite_preview(_profile, c) -> None:
    click.echo(
        term(
            f"{c.profile}: would restore the off-host copy {c.short_id} of {c.host} (taken "
            f"{units.ago(c.time, time.time())}) over state.db"
        )
    )


def _restore_preview(_profile, o: dict) -> None:
    held = f"; held by {'; '.join(o['holders'])} (restore refuses unless --force)" if o["holders"] else ""
    click.echo(
        term(
            f"{o['profile']}: would replace {o['replaces']} with {o['path']} (taken "
            f"{units.ago(o['created_at'], time.time())}, database {units.size(o['raw_bytes'])}, sha256 "
            f"{'verified' if o['verified'] else 'DOES NOT MATCH: restore refuses it'}){held}"
        )
    )


@click.command(epilog=examples("compact --dry-run", "compact --wait-idle 10m"))
@profile_options
@click.option(
    "--wait-idle",
    default=None,
    metavar="DURATION",
    help="Wait up to this long (e.g. 600s, 10m) for Hermes to stop.",
)
@click.option("--no-vacuum", is_flag=True, help="Never run the one-time full VACUUM.")
@dry_run_option
@json_option
@quiet_option
def compact(profiles, wait_idle, no_vacuum, dry_run, as_json, quiet):
    """Return free pages to the disk in short steps while Hermes runs.

    A database still in auto_vacuum=NONE is switched to INCREMENTAL once, by a full VACUUM after a
    backup, and only when no process holds it. Exit 75 when that switch could not run because
    Hermes held the database (try later, or --wait-idle), 1 when it could not for another reason;
    --no-vacuum makes it a choice (exit 0).
    """
    wait = parse_duration(wait_idle, "--wait-idle") if wait_idle else None
    if dry_run:
        for_each(profiles, lambda p: p.compact_preview(), as_json, _compact_preview, to_dict=dict)
        return

    def action(p):
        with busy(f"{p.name}: compacting state.db", as_json):
            return p.compact(wait, allow_full_vacuum=not no_vacuum)

    def show(_p, res) -> None:
        failed = res.unconverted and not no_vacuum  # the command's failure: stderr, also with --quiet
        if failed or not quiet:
            _compact_line(res.to_dict(), failed)

    outcomes = for_each(profiles, action, as_json, show)
    stuck = [o.value for o in outcomes if o.value is not None and o.value.unconverted]
    if stuck and not no_vacuum:
        sys.exit(TryLater.exit_code if all(r.holders for r in stuck) else 1)


def _compact_preview(_profile, o: dict) -> None:
    held = f"; now held by {'; '.join(o['holders'])}" if o["holders"] else ""
    click.echo(
        term(
            f"{o['profile']}: {units.size(o['reclaimable_bytes'])} reclaimable in a "
            f"{units.size(o['db_bytes'])} state.db (auto_vacuum {o['auto_vacuum']}); "
            f"would run: {o['step']}{held}"
        )
    )


def _compact_line(r: dict, failed: bool = False) -> None:
    click.echo(
        ("hermes-keeper: " if failed else "")
        + term(
            f"{r['profile']}: freed {units.size(r['freed_bytes'])} on disk (state.db "
            f"{units.size(r['db_bytes_before'])} -> {units.size(r['db_bytes_after'])}, WAL "
            f"{units.size(r['wal_bytes_before'])} -> {units.size(r['wal_bytes_after'])}); "
            f"{units.size(r['free_bytes_after'])} reclaimable still in state.db; auto_vacuum "
            f"{r['auto_vacuum_before']} -> {r['auto_vacuum_after']}"
            + (
                f"; backed up first: {r['backup']} (in the backup folder, kept by rotation)"
                if r["backup"]
                else ""
            )
            + (f"; {r['note']}" if r["note"] else "")
        ),
        err=failed,
    )
