"""``schedule install|show|remove``: run the keeper unattended (Hermes cron, systemd or cron)."""

from __future__ import annotations

import click

from hermes_keeper import units
from hermes_keeper.cli.options import (
    HelpGroup,
    dry_run_option,
    emit_json,
    examples,
    json_option,
    profile_options,
)
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
#: Each job with what became of it in each scheduler.
Done = list[tuple[Job, list[Change]]]


def _jobs(profiles, via: str, when: When) -> list[Job]:
    """Hermes keeps cron jobs per profile folder: one job each; the others run all at once."""
    keeper = tuple(keeper_executable())
    if len(profiles) == 1 or via == "hermes":
        return [Job(p.root, p.name, when, keeper, p.home) for p in profiles]
    return [Job(profiles[0].root, None, when, keeper)]


def _rows(done: Done, **extra) -> list[dict]:
    """The JSON rows (docs/json.md): one per profile a job runs, ``all-profiles`` for the one
    timer or crontab line that runs every profile."""
    rows: dict[str, dict] = {}
    for job, changes in done:
        row = rows.setdefault(job.label, {"profile": job.label, **extra, "changes": []})
        row["changes"] += [c.to_dict() for c in changes]
    return list(rows.values())


def _journal(profiles, done: Done, actions: tuple[str, ...], installed: bool) -> None:
    """Each profile whose job a change of ``actions`` touched says so in its journal (``check``
    reads it): a job without a profile runs them all."""
    touched = {
        (p.name, c.via): (p, c.via, job.when)
        for job, changes in done
        for c in changes
        if c.action in actions
        for p in profiles
        if job.profile in (None, p.name)
    }
    for p, via, when in touched.values():
        p.note_schedule(installed, via, **({"every": when.every, "at": when.at} if installed else {}))


def _print(done: Done, as_json: bool, texts: bool, **extra) -> None:
    """Each change on a line (``would be`` on a dry run), with its text when ``texts``."""
    if as_json:
        emit_json(_rows(done, **extra))
        return
    for c in (c for _, changes in done for c in changes):
        would = extra.get("dry_run") and c.action in ("installed", "replaced", "removed")
        verb = f"would be {c.action}" if would else c.action
        click.echo(term(f"{c.via}: {verb}: {c.where}") + (f" ({term(c.note)})" if c.note else ""))
        if texts and c.text:  # a crontab line or unit another program wrote: no raw controls
            click.echo("\n".join(term(x) for x in c.text.rstrip("\n").split("\n")))


@click.group(
    cls=HelpGroup,
    epilog=examples("schedule install", "schedule show", "schedule remove --dry-run"),
)
def schedule():
    """Run `hermes-keeper run` unattended: a Hermes cron job (no agent, no tokens), a systemd
    user timer, or a crontab line; by the keeper's absolute path, home and profile explicit."""


@schedule.command(
    "install",
    epilog=examples(
        "schedule install",
        "schedule install --via systemd --every weekly --at 04:15",
        "schedule install --via cron --all-profiles --dry-run",
        "schedule install --deliver telegram:123456789",
    ),
)
@profile_options
@click.option(
    "--every",
    type=click.Choice(EVERY),
    default="daily",
    show_default=True,
    help="Weekly: on Sundays; monthly: on the 1st.",
)
@click.option(
    "--at", "at", default=DEFAULT_AT, show_default=True, metavar="HH:MM", help="The scheduler's local time."
)
@via_option
@dry_run_option
@hermes_option
@click.option(
    "--deliver",
    default="origin",
    show_default=True,
    metavar="TARGET",
    help="--via hermes: where Hermes sends the summary (origin, local, telegram:CHAT, ...).",
)
@json_option
def install(profiles, every, at, via, dry_run, hermes, deliver, as_json):
    """Schedule `run` (default --via hermes). Idempotent: the same install twice changes nothing,
    another --every/--at replaces the earlier one. --dry-run prints the exact text."""
    via = via or "hermes"
    extra = {"hermes": hermes, "deliver": deliver} if via == "hermes" else {}
    done = [
        (job, backend(via).install(job, dry_run, **extra)) for job in _jobs(profiles, via, When(every, at))
    ]
    if not dry_run:
        _journal(profiles, done, ("installed", "replaced"), installed=True)
    _print(done, as_json, texts=dry_run, dry_run=dry_run)


def _each_via(profiles, via, hermes, act) -> Done:
    """``act(module, job, extra)`` for ``via``, or for every way when not given; a way that
    cannot be reached (no Hermes, no crontab) is a note then, not a failure."""
    done = []
    for v in [via] if via else VIAS:
        extra = {"hermes": hermes} if v == "hermes" else {}
        for job in _jobs(profiles, v, When()):
            try:
                done.append((job, act(backend(v), job, extra)))
            except KeeperError as exc:
                if via:
                    raise
                done.append((job, [Change(v, "unknown", "", "", str(exc))]))
    return done


@schedule.command("show", epilog=examples("schedule show", "schedule show --via cron --json"))
@profile_options
@via_option
@hermes_option
@json_option
def show(profiles, via, hermes, as_json):
    """What each scheduler holds for this home and profile: its next and last run and that run's
    result (as the scheduler says), and the keeper's own last recorded run. --json: the texts too."""
    done = _each_via(profiles, via, hermes, lambda m, job, extra: m.show(job, **extra))
    last = {p.name: _last_run(p) for p in profiles}
    if as_json:
        emit_json([row | {"last_recorded_run": last.get(row["profile"])} for row in _rows(done)])
        return
    _print(done, as_json, texts=False)
    for c in (c for _, changes in done for c in changes if c.runs):
        click.echo(term(f"  {c.via}: {c.runs.line()}"))
    if not any(c.action == "found" for _, changes in done for c in changes):
        click.echo("nothing scheduled for this home and profile")
    for name, entry in last.items():
        click.echo(term(f"{name}: the keeper's last recorded run: {_run_words(entry)}"))


def _last_run(profile) -> dict | None:
    """The newest ``run`` row of the profile's history (``history``), None before the first."""
    entries = profile.history.entries(("run",), 1)
    return entries[0].to_dict() if entries else None


def _run_words(entry: dict | None) -> str:
    if entry is None:
        return "none yet"
    how = f"interrupted ({entry['interrupted']})" if entry.get("interrupted") else "finished"
    took = units.duration(round(entry.get("seconds", 0)))
    return f"{units.when(entry['ts'])}, {how}: pruned {entry.get('pruned', 0)}, took {took}"


@schedule.command(
    "remove", epilog=examples("schedule remove", "schedule remove --via systemd --dry-run --json")
)
@profile_options
@via_option
@dry_run_option
@hermes_option
@json_option
def remove(profiles, via, dry_run, hermes, as_json):
    """Remove what `install` made for this home and profile (every way, or --via)."""
    done = _each_via(profiles, via, hermes, lambda m, job, extra: m.remove(job, dry_run, **extra))
    if not dry_run:
        _journal(profiles, done, ("removed",), installed=False)
    _print(done, as_json, texts=dry_run, dry_run=dry_run)
