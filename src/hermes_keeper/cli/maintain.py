"""``run`` (and its dry-run alias ``plan``) and ``config show``."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import click
from rich.console import Console
from rich.progress import Progress
from rich.text import Text

from hermes_keeper import units
from hermes_keeper.archive.retention import RetentionPlan
from hermes_keeper.cli.options import (
    HelpGroup,
    Size,
    config_option,
    dest_option,
    examples,
    for_each,
    json_option,
    metrics_to,
    next_command,
    profile_options,
    quiet_option,
    textfile_option,
)
from hermes_keeper.cli.render import KeeperTable, auto_prune_line, console, heading, print_table, table
from hermes_keeper.cli.text import cell, term
from hermes_keeper.errors import KeeperError
from hermes_keeper.interrupt import Interrupted
from hermes_keeper.model.policy import CONFIG_NAME, config_problems
from hermes_keeper.run.plan import REFUSE, Plan


def _render_plan(plan: Plan, verbose: bool, out: Console, next_hint: str) -> None:
    """``plan``'s words (``run --dry-run`` too): what the run would do, why sessions are kept, what
    is left after; ``verbose`` adds every session and file with its reason."""
    d = plan.to_dict()
    if plan.nothing_to_do and not verbose:
        kept = ", ".join(f"{r['sessions']} {r['reason']}" for r in d["keep_reasons"][:3])
        out.print(
            cell(
                f"{plan.profile}: nothing to do; {units.plural(len(plan.decisions), 'session')} kept ({kept})"
            )
        )
        return
    heading(out, f"[bold]{plan.profile}[/] plan")
    _render_plan_work(plan, d, out)
    print_table(out, _by_source_table(d))
    print_table(out, _keep_reasons_table(d))
    if verbose:
        _render_every_session(plan, out)
    _render_plan_after(plan, d, verbose, out)
    if not plan.nothing_to_do and plan.safeguard.kind != REFUSE:
        out.print(cell(f"next: {next_hint}"))


def _render_plan_work(plan: Plan, d: dict, out: Console) -> None:
    """The run's work: how much it closes, prunes and removes, what makes it undoable (said in red
    when nothing would), and its steps in the executor's order."""
    out.print(
        f"close {units.plural(len(plan.zombies), 'zombie session')} · prune "
        f"{units.plural(d['prune']['sessions'], 'session')} "
        f"({units.plural(d['prune']['messages'], 'message')}, ~{units.size(d['prune']['est_bytes'])}) "
        f"· remove {units.plural(d['files']['remove'], 'file')} ({units.size(d['files']['bytes'])})"
        + (
            f" · keep {units.plural(d['files']['kept'], 'file')} a rule covers (-v: why)"
            if d["files"]["kept"]
            else ""
        )
    )
    only = plan.not_in_state_db
    if only.files:
        out.print(
            f"[yellow]not in state.db: {units.plural(only.files, 'transcript')} ({units.size(only.bytes)})"
            f" kept: {units.plural(only.messages, 'message')} Hermes diverted there, which nothing imports"
            " back (docs/report.md)[/]"
        )
    if only.unread_files:
        out.print(
            f"[yellow]{units.plural(only.unread_files, 'transcript')} not read whole: kept (-v: why)[/]"
        )
    if kinds := [
        f"{k} {v['remove']} ({units.size(v['bytes'])})"
        for k, v in d["files"]["by_kind"].items()
        if v["remove"]
    ]:
        out.print(f"files by kind: {', '.join(kinds)}")
    if plan.prune and not plan.archive:
        out.print(
            f"[bold red]--no-archive: {units.plural(len(plan.prune), 'pruned session')} will be deleted "
            "with NO archive copy; these deletes are final[/]"
        )
    out.print(
        f"safeguard: {plan.safeguard.why}",
        style="red" if plan.safeguard.kind == REFUSE else None,
        markup=False,
    )
    for i, step in enumerate(plan.steps(), 1):
        out.print(cell(f"  {i}. {step}"))


def _by_source_table(d: dict) -> KeeperTable:
    """Per session source: how many sessions are pruned and kept, and the pruned ones' size."""
    cols = ("source", "prune", "keep", "messages", "~size")
    t = table("By source", cols, whole=["source"], right=cols[1:])
    for src, c in d["by_source"].items():
        t.add_row(
            cell(src),
            str(c.get("prune", 0)),
            str(c.get("keep", 0)),
            str(c.get("messages", 0)),
            units.size(c.get("bytes", 0)),
        )
    return t


def _keep_reasons_table(d: dict) -> KeeperTable:
    """Why sessions are kept, most common first, each reason's words beside its stable code."""
    t = table("Why sessions are kept", ("reason", "code", "sessions"), whole=["code"], right=["sessions"])
    for r in d["keep_reasons"]:
        t.add_row(cell(r["reason"]), r["code"], str(r["sessions"]))
    return t


def _render_every_session(plan: Plan, out: Console) -> None:
    """``-v``: every zombie close and session decision with its reason, then every file action."""
    t = table("Every session", ("session", "source", "action", "reason"), whole=["session", "source"])
    for z in plan.zombies:
        t.add_row(
            cell(z.session_id),
            cell(z.source),
            "close",
            f"open, idle {units.span(z.idle_s)}",
        )
    for sid in sorted(plan.decisions):
        x = plan.decisions[sid]
        t.add_row(cell(sid), cell(x.source), x.action, cell(x.reason.text))
    print_table(out, t)
    for f in plan.files:
        out.print(cell(f"remove {f.path} ({units.size(f.bytes)}): {f.reason}"))
    for f in plan.kept_files:
        out.print(cell(f"keep {f.path} ({units.size(f.bytes)}): {f.reason}"))


def _render_plan_after(plan: Plan, d: dict, verbose: bool, out: Console) -> None:
    """What is left after the run, what Hermes's own auto-prune and the archive's retention will
    do beside it, and what the plan could not know."""
    out.print(
        f"after: {units.plural(d['remaining']['sessions'], 'session')}, "
        f"{units.plural(d['remaining']['messages'], 'message')}"
    )
    if d["hermes_auto_prune"]:
        what = f"{units.plural(d['hermes_auto_prune']['deletes_kept'], 'session')} this plan keeps"
        out.print(auto_prune_line(d["hermes_auto_prune"], plan.now, what))
    if plan.archive_retention is not None:
        _render_archive_retention(plan.archive_retention, verbose, out)
    for w in plan.warnings:
        out.print(Text(f"warning: {term(w)}", style="yellow"))


def _render_archive_retention(r: RetentionPlan, verbose: bool, out: Console) -> None:
    """What ``[archive] keep`` / ``max_bytes`` drops from the archive (the gone-for-good warning follows)."""
    files = f", {len(r.delete_files)} month files deleted whole" if r.delete_files else ""
    out.print(
        f"archive: {units.plural(r.entries, 'entry', 'entries')} in {units.size(r.bytes)}; drop "
        f"{units.plural(len(r.drops), 'entry', 'entries')} "
        f"(~{units.size(r.freed_bytes)}{files})",
        markup=False,
    )
    if verbose:
        for d in r.drops:
            last = " (last copy: not in state.db)" if d.gone_for_good else ""
            out.print(cell(f"drop {d.session_id} #{d.entry} in {d.file}: {d.reason}{last}"))


@dataclass(frozen=True)
class RunOptions:
    """The options ``run`` and ``plan`` share (:data:`_run_options`), by click's names."""

    verbose: bool
    as_json: bool
    quiet: bool
    no_archive: bool
    config_path: str | None
    dest: str | None
    keep_within: tuple[str, ...]
    keep_size: str | None

    def overrides(self) -> dict:
        """What they change of keeper.toml for this run, as its tables would."""
        overrides = {"archive": False} if self.no_archive else {}
        if self.dest:
            overrides["backups"] = {"dest": self.dest}
        if self.keep_size:
            overrides["disk"] = {"max_db_bytes": self.keep_size}
        return overrides


def _run(profiles, dry_run: bool, o: RunOptions, metrics=None):
    verbose, as_json, quiet = o.verbose, o.as_json, o.quiet
    out = console(quiet=quiet and not as_json)
    overrides = o.overrides()

    def action(profile):
        policy = profile.config(o.config_path, overrides)
        for spec in o.keep_within:
            policy.keep_within(spec)
        if dry_run:
            return profile.plan(policy)
        show = sys.stdout.isatty() and not quiet and not as_json
        with Progress(console=out, disable=not show, transient=True) as bar:
            task = bar.add_task(f"{profile.name}: pruning", total=None)

            def progress(kind: str, n: int) -> None:
                bar.update(task, total=n) if kind == "plan" else bar.advance(task, n)

            try:
                result = profile.run(policy, progress=progress)
            except Interrupted as exc:  # what it did before the signal, said and measured
                bar.stop()  # the summary on lines of its own, not inside the progress line
                if exc.result is not None:
                    if not as_json:  # (--json: its row, for_each); --quiet: on stderr, as cron mails it
                        (console(stderr=True) if quiet else out).print(cell(exc.result.summary()))
                    if metrics:
                        metrics.run(exc.result)
                raise
        if metrics:
            metrics.run(result)
        return result

    def show(_profile, value) -> None:
        if not dry_run:
            if not quiet:
                out.print(cell(value.summary()))
            return
        _render_plan(value, verbose, out, next_hint)

    next_hint = next_command("run", drop=("dry_run", "verbose", "as_json", "quiet"))
    for_each(profiles, action, as_json, show, lambda v: v.to_dict(verbose) if dry_run else v.to_dict())


_run_options = [
    profile_options,
    click.option("--verbose", "-v", is_flag=True, help="Every session with its reason."),
    json_option,
    quiet_option,
    click.option("--no-archive", is_flag=True, help="Delete without archiving first (explicit opt-out)."),
    config_option,
    dest_option,
    click.option(
        "--keep-within",
        multiple=True,
        metavar="[SOURCE=]DURATION",
        help="This run only: keep sessions active within DURATION (every source, or SOURCE=; repeatable).",
    ),
    click.option(
        "--keep-size",
        type=Size(),
        default=None,
        metavar="SIZE",
        help="This run only: prune the oldest eligible until state.db is under SIZE (disk.max_db_bytes).",
    ),
]


def _with_options(fn):
    for opt in reversed(_run_options):
        fn = opt(fn)
    return fn


@click.command(
    epilog=examples("run", "run --all-profiles --quiet", "run --keep-within cron=3d --dest /mnt/backups")
)
@click.option("--dry-run", is_flag=True, help="Only say what would happen and why.")
@_with_options
@textfile_option
def run(profiles, dry_run, textfile, **opts):
    """Close zombies, archive and prune old sessions, remove stale files: live-safe."""
    with metrics_to(None if dry_run else textfile) as metrics:
        _run(profiles, dry_run, RunOptions(**opts), metrics)


@click.command(epilog=examples("plan", "plan -v --profile work", "plan --keep-within 30d --json"))
@_with_options
def plan(profiles, **opts):
    """What `run` would do and why (same as `run --dry-run`)."""
    _run(profiles, True, RunOptions(**opts))


@click.group(cls=HelpGroup, epilog=examples("config show", "config check"))
def config():
    """The effective policy, and whether keeper.toml says what was meant."""


@config.command("check", epilog=examples("config check", "config check --config /etc/keeper.toml"))
@profile_options
@config_option
def config_check(profiles, config_path):
    """Check keeper.toml: every wrong key, value or profile section on its own line, with the
    spelling it most likely meant. Exit 0 when it is valid (warnings printed), 2 when not."""
    paths = dict.fromkeys(Path(config_path) if config_path else p.root / CONFIG_NAME for p in profiles)
    bad = False
    for path in paths:
        if config_path and not path.exists():
            raise KeeperError(f"config file not found: {path}")
        errors, warns = config_problems(path)
        for line in errors:
            click.echo(term(f"error: {line}"))
        for line in warns:
            click.echo(term(f"warning: {line}"))
        summary = "valid" if path.exists() else "absent: every default applies"
        summary += f", {units.plural(len(warns), 'warning')}" if warns else ""
        click.echo(term(f"{path}: {units.plural(len(errors), 'error')}" if errors else f"{path}: {summary}"))
        bad = bad or bool(errors)
    if bad:
        sys.exit(2)


@config.command("show", epilog=examples("config show", "config show --all-profiles --json"))
@profile_options
@config_option
@json_option
def config_show(profiles, config_path, as_json):
    """Print the effective policy per profile and where each value came from."""

    def show(profile, policy) -> None:
        t = table(f"policy for {profile.name}", ("key", "value", "from"), whole=["key"])
        for row in policy.settings():
            t.add_row(cell(row["key"]), cell(row["value"]), cell(row["from"]))
        print_table(console(), t)

    for_each(profiles, lambda p: p.config(config_path), as_json, show)
