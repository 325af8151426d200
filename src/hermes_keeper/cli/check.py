"""``check``: a Nagios/Icinga plugin. Exit 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN; one line."""

from __future__ import annotations

import sys

import click

from hermes_keeper.check import STATUS, UNKNOWN, status_line
from hermes_keeper.cli.options import (
    config_option,
    debug_traceback,
    emit_json,
    examples,
    json_option,
    metrics_to,
    outcome_row,
    profile_options,
    quiet_option,
    textfile_option,
)
from hermes_keeper.errors import KeeperError, failure_line
from hermes_keeper.home import each


def _unknown(line: str, as_json: bool) -> None:
    """The check could not run: the UNKNOWN line, or with ``--json`` the usual document around it
    (no profile rows), so a script reading JSON still reads JSON."""
    line = f"HERMES-KEEPER UNKNOWN - {line}"
    if as_json:
        emit_json([], status=STATUS[UNKNOWN], code=UNKNOWN, line=line)
    else:
        click.echo(line)
    sys.exit(UNKNOWN)


class NagiosCommand(click.Command):
    """Every failure of the check itself, bad flags included, is UNKNOWN (exit 3), not exit 2:
    to a monitor, 2 means CRITICAL."""

    def parse_args(self, ctx, args):
        try:
            return super().parse_args(ctx, args)
        except click.UsageError as exc:
            _unknown(exc.format_message(), "--json" in args)

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except (click.exceptions.Exit, click.exceptions.Abort, SystemExit):
            raise
        except Exception as exc:
            if ctx.find_root().params.get("debug"):
                raise
            _unknown(failure_line(exc)[0], bool(ctx.params.get("as_json")))


def overrides(pairs: tuple[str, ...]) -> dict:
    """``--threshold db_warn=3GB`` (a [check] key) or ``runaway.max_tokens=1000000``, as keeper.toml
    tables; numbers stay numbers."""
    out: dict = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise KeeperError(f"--threshold {pair!r}: expected KEY=VALUE, e.g. db_warn=3GB")
        section, _, name = key.strip().rpartition(".")
        for kind in (int, float):
            try:
                value = kind(value)
                break
            except ValueError:
                pass
        out.setdefault(section or "check", {})[name] = value
    return out


@click.command(
    cls=NagiosCommand,
    epilog=examples(
        "check",
        "check --all-profiles -t db_warn=3GB -t last_run_crit=2d",
        "check --quiet --textfile /var/lib/node_exporter/textfile/hermes.prom",
        "check --json",
    ),
)
@profile_options
@click.option(
    "--threshold",
    "-t",
    "thresholds",
    multiple=True,
    metavar="KEY=VALUE",
    help="Override a [check] key (db_warn=3GB, last_run_crit=2d) or a runaway.* key; repeatable.",
)
@config_option
@json_option
@quiet_option
@textfile_option
def check(profiles, thresholds, config_path, as_json, quiet, textfile):
    """Monitoring check (Nagios plugin): state.db size, growth, WAL, free disk and days until full,
    zombies, runaways, last run, newest verified backup, reclaimable space, archive verify.

    Thresholds: the [check] and [runaway] tables of keeper.toml, or --threshold. Exit 0 OK,
    1 WARNING, 2 CRITICAL, 3 UNKNOWN; any failure of the check itself (an unreadable home, a bad
    flag) is UNKNOWN, exit 3, not the usual 2. One line on stdout with perfdata; --quiet prints
    nothing when OK and the line on stderr otherwise.
    """
    extra = overrides(thresholds)
    results, failures, rows = [], [], []
    with metrics_to(textfile) as metrics:
        for o in each(profiles, lambda p: p.check(p.config(config_path, extra))):
            rows.append(outcome_row(o))
            if o.error is not None:
                debug_traceback(o)
                failures.append(f"{o.profile.name}: {o.error}")
                if metrics:
                    metrics.set(
                        "check_status",
                        "0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN.",
                        UNKNOWN,
                        profile=o.profile.name,
                    )
            elif o.skipped is None:
                results.append(o.value)
                o.profile.history.record("check", o.value.to_dict())
                if metrics:
                    metrics.check(o.value)
    line, code = status_line(results, failures)
    if as_json:
        emit_json(rows, status=STATUS[code], code=code, line=line)
    elif not quiet:
        click.echo(line)
    elif code:
        click.echo(line, err=True)
    sys.exit(code)
