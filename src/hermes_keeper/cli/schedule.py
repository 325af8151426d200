"""``schedule install|show|remove``: run the keeper unattended (Hermes cron, systemd or cron)."""

from __future__ import annotations

import json

import click

from hermes_keeper.cli.options import profile_options
from hermes_keeper.cli.text import term
from hermes_keeper.errors import KeeperError
from hermes_keeper.schedule import DEFAULT_AT, EVERY, VIAS, Change, Job, When, backend, keeper_executable

via_option = click.option(
    "--via",
    type=click.Choice(VIAS),
    default=None,
    help="hermes: a no-agent Hermes cron job; systemd: a user timer; cron: a crontab line.",
)
hermes_option = click.option(
    "--hermes",
    type=click.Path(dir_okay=False),
    default=None,
    help="--via hermes: the hermes command (or its Python); default: hermes on PATH.",
)
json_option = click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")


def _jobs(profiles, via: str, when: When) -> list[Job]:
    """Hermes keeps cron jobs per profile folder: one job each; the others run all at once."""
    keeper = tuple(keeper_executable())
    if len(profiles) == 1 or via == "hermes":
        return [Job(p.root, p.name, when, keeper, p.home) for p in profiles]
    return [Job(profiles[0].root, None, when, keeper)]


def _print(changes: list[Change], as_json: bool, dry_run: bool) -> None:
    if as_json:
        click.echo(json.dumps({"dry_run": dry_run, "changes": [c.to_dict() for c in changes]}, indent=2))
        return
    for c in changes:
        verb = (
            f"would be {c.action}"
            if dry_run and c.action in ("installed", "replaced", "removed")
            else c.action
        )
        click.echo(term(f"{c.via}: {verb}: {c.where}") + (f" ({term(c.note)})" if c.note else ""))
        if dry_run and c.text:
            click.echo(c.text.rstrip("\n"))


@click.group()
def schedule():
    """Run `hermes-keeper run` unattended: a Hermes cron job (no agent, no tokens), a systemd
    user timer, or a crontab line; by the keeper's absolute path, home and profile explicit."""


@schedule.command("install")
@profile_options
@click.option("--every", type=click.Choice(EVERY), default="daily", show_default=True)
@click.option("--at", "at", default=DEFAULT_AT, show_default=True, help="HH:MM, the scheduler's local time.")
@via_option
@click.option("--dry-run", is_flag=True, help="Print exactly what would be written; change nothing.")
@hermes_option
@click.option(
    "--deliver",
    default="origin",
    show_default=True,
    help="--via hermes: where Hermes sends the summary (origin, local, telegram:CHAT, ...).",
)
@json_option
def install(profiles, every, at, via, dry_run, hermes, deliver, as_json):
    """Schedule `run` (default --via hermes). Idempotent: the same install twice changes nothing,
    another --every/--at replaces the earlier one."""
    via = via or "hermes"
    when, changes = When(every, at), []
    for job in _jobs(profiles, via, when):
        if via == "hermes":
            changes += backend(via).install(job, dry_run, hermes=hermes, deliver=deliver)
        else:
            changes += backend(via).install(job, dry_run)
    _print(changes, as_json, dry_run)


def _each_via(profiles, via, hermes, act) -> list[Change]:
    """``act(module, job, extra)`` for ``via``, or for every way when not given; a way that
    cannot be reached (no Hermes, no crontab) is a note then, not a failure."""
    changes = []
    for v in [via] if via else VIAS:
        extra = {"hermes": hermes} if v == "hermes" else {}
        for job in _jobs(profiles, v, When()):
            try:
                changes += act(backend(v), job, extra)
            except KeeperError as exc:
                if via:
                    raise
                changes.append(Change(v, "unknown", "", "", str(exc)))
    return changes


@schedule.command("show")
@profile_options
@via_option
@hermes_option
@json_option
def show(profiles, via, hermes, as_json):
    """What each scheduler holds for this home and profile, with its text."""
    changes = _each_via(profiles, via, hermes, lambda m, job, extra: m.show(job, **extra))
    if as_json:
        _print(changes, True, False)
        return
    for c in changes:
        click.echo(term(f"{c.via}: {c.action}: {c.where}") + (f" ({term(c.note)})" if c.note else ""))
        if c.text:
            click.echo(c.text.rstrip("\n"))
    if not any(c.action == "found" for c in changes):
        click.echo("nothing scheduled for this home and profile")


@schedule.command("remove")
@profile_options
@via_option
@click.option("--dry-run", is_flag=True, help="Only say what would be removed.")
@hermes_option
@json_option
def remove(profiles, via, dry_run, hermes, as_json):
    """Remove what `install` made for this home and profile (every way, or --via)."""
    changes = _each_via(profiles, via, hermes, lambda m, job, extra: m.remove(job, dry_run, **extra))
    _print(changes, as_json, dry_run)
