"""``run`` (and its dry-run alias ``plan``) and ``config show``."""

from __future__ import annotations

import json
import sys
import time

import click
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from hermes_keeper.cli.options import profile_options
from hermes_keeper.cli.render import human_bytes
from hermes_keeper.errors import KeeperError
from hermes_keeper.journal import Journal
from hermes_keeper.lock import keeper_lock
from hermes_keeper.run.execute import apply_plan
from hermes_keeper.run.plan import Plan, make_plan
from hermes_keeper.run.policy import effective_policy
from hermes_keeper.run.survey import shown, survey_profile
from hermes_keeper.sqlite.schema import inspect


def _render_plan(plan: Plan, verbose: bool, console: Console) -> None:
    d = plan.to_dict()
    console.rule(f"[bold]{plan.profile}[/] plan")
    console.print(
        f"close {len(plan.zombies)} zombie sessions · prune {d['prune']['sessions']} sessions "
        f"({d['prune']['messages']} messages, ~{human_bytes(d['prune']['est_bytes'])}) · remove "
        f"{d['files']['remove']} files ({human_bytes(d['files']['bytes'])})"
    )
    if plan.compact:
        console.print(f"then compact: {plan.compact}")
    t = Table(title="By source")
    for col in ("source", "prune", "keep", "messages", "~bytes"):
        t.add_column(col, justify="left" if col == "source" else "right")
    for src, c in d["by_source"].items():
        t.add_row(
            src,
            str(c.get("prune", 0)),
            str(c.get("keep", 0)),
            str(c.get("messages", 0)),
            human_bytes(c.get("bytes", 0)),
        )
    console.print(t)
    t = Table(title="Why sessions are kept")
    t.add_column("reason")
    t.add_column("sessions", justify="right")
    for reason, n in d["keep_reasons"].items():
        t.add_row(reason, str(n))
    console.print(t)
    if verbose:
        t = Table(title="Every session")
        for col in ("session", "source", "action", "reason"):
            t.add_column(col)
        for z in plan.zombies:
            t.add_row(shown(z.session_id), z.source, "close", f"open, idle {z.idle_s / 86400:.1f}d")
        for sid in sorted(plan.decisions):
            x = plan.decisions[sid]
            t.add_row(shown(sid), x.source, x.action, x.reason)
        console.print(t)
        for f in plan.files:
            console.print(f"remove {f.path} ({human_bytes(f.bytes)}): {f.reason}")
    console.print(f"after: {d['remaining']['sessions']} sessions, {d['remaining']['messages']} messages")


def _run(profiles, dry_run, verbose, as_json, quiet, no_archive, config):
    console = Console(stderr=False, quiet=quiet and not as_json)
    out, failures = [], 0
    for profile in profiles:
        try:
            overrides = {"archive": False} if no_archive else None
            policy = effective_policy(profile.root, profile.name, config, overrides)
            schema = inspect(profile.db_path)
            if dry_run:
                schema.require_readable()
            else:
                schema.require_actionable()
            now = time.time()
            if dry_run:
                plan = make_plan(survey_profile(profile, schema, now), policy, now)
                out.append(plan.to_dict(verbose))
                if not as_json:
                    if schema.timestamp_problems:
                        console.print(
                            f"[red]{profile.name}: timestamps are not unix seconds; "
                            "a run would refuse this profile[/]"
                        )
                    _render_plan(plan, verbose, console)
                continue
            with keeper_lock(profile.root), Journal(profile.keeper_dir) as journal:
                plan = make_plan(survey_profile(profile, schema, now), policy, now)
                journal.write("plan", **{k: v for k, v in plan.to_dict().items() if k != "now"})
                show = sys.stdout.isatty() and not quiet and not as_json
                with Progress(console=console, disable=not show, transient=True) as bar:
                    task = bar.add_task(f"{profile.name}: pruning", total=len(plan.prune))
                    result = apply_plan(
                        profile,
                        plan,
                        policy=policy,
                        journal=journal,
                        progress=lambda _kind, n, task=task: bar.advance(task, n),
                        schema=schema,
                    )
            out.append(result.to_dict())
            if not as_json:
                click.echo(result.summary())
        except KeeperError as exc:
            if len(profiles) == 1:
                raise
            failures += 1
            out.append({"profile": profile.name, "error": str(exc)})
            click.echo(f"hermes-keeper: {profile.name}: {exc}", err=True)
    if as_json:
        click.echo(json.dumps({"profiles": out}, indent=2))
    if failures:
        # 1: some profiles failed, the others ran; 2: a refusal everywhere, nothing ran.
        sys.exit(2 if failures == len(profiles) else 1)


_run_options = [
    profile_options,
    click.option("--verbose", "-v", is_flag=True, help="Every session with its reason."),
    click.option("--json", "as_json", is_flag=True, help="Machine-readable output."),
    click.option("--quiet", "-q", is_flag=True, help="Only errors (for cron)."),
    click.option("--no-archive", is_flag=True, help="Delete without archiving first (explicit opt-out)."),
    click.option(
        "--config",
        type=click.Path(dir_okay=False),
        default=None,
        help="Policy file (default: <home>/keeper.toml).",
    ),
]


def _with_options(fn):
    for opt in reversed(_run_options):
        fn = opt(fn)
    return fn


@click.command()
@click.option("--dry-run", is_flag=True, help="Only say what would happen and why.")
@_with_options
def run(profiles, dry_run, verbose, as_json, quiet, no_archive, config):
    """Close zombies, archive and prune old sessions, remove stale files: live-safe."""
    _run(profiles, dry_run, verbose, as_json, quiet, no_archive, config)


@click.command()
@_with_options
def plan(profiles, verbose, as_json, quiet, no_archive, config):
    """What `run` would do and why (same as `run --dry-run`)."""
    _run(profiles, True, verbose, as_json, quiet, no_archive, config)


@click.group()
def config():
    """The effective policy."""


@config.command("show")
@profile_options
@click.option("--config", "config_path", type=click.Path(dir_okay=False), default=None)
@click.option("--json", "as_json", is_flag=True)
def config_show(profiles, config_path, as_json):
    """Print the effective policy per profile and where each value came from."""
    data = []
    for p in profiles:
        pol = effective_policy(p.root, p.name, config_path)
        d = pol.to_dict()
        d["profile"] = p.name
        data.append(d)
    if as_json:
        click.echo(json.dumps({"profiles": data}, indent=2))
        return
    for d in data:
        t = Table(title=f"policy for {d['profile']}")
        for col in ("key", "value", "from"):
            t.add_column(col, overflow="fold")
        origin = d["origin"]
        flat = {k: v for k, v in d.items() if k not in ("origin", "retention_s", "profile")}
        for k, v in flat.items():
            key = {
                "zombie_after_s": "zombie_after",
                "files_max_age_s": "files.max_age",
                "max_db_bytes": "disk.max_db_bytes",
                "low_water": "disk.low_water",
            }.get(k, k)
            t.add_row(key, str(v), origin.get(key, "default"))
        for src, v in sorted(d["retention_s"].items()):
            t.add_row(f"retention.{src}", f"{v / 86400:g}d", origin.get(f"retention.{src}", "default"))
        Console().print(t)
