"""The ``hermes-keeper`` command: thin click wrappers over the library.

Each command group lives in its own module here and is registered below by name, and
imported only when used: ``run`` from cron should not pay for the report's renderer.
Every failure prints one line and exits with its code (:func:`errors.failure_line`); a
database another process keeps locked is "try later", exit 75.
"""

from __future__ import annotations

import importlib
import os
import signal
import sys
import warnings

import click

from hermes_keeper import __version__, units
from hermes_keeper.cli.options import HOMES_KEY, HelpGroup, examples
from hermes_keeper.errors import failure_line

#: The keeper's deleter holds SQLite's write lock while its archiver thread runs Python: hand
#: the interpreter lock over this often (seconds), not every 5 ms, so no transaction waits
#: for it. Set for the command's process only; a library user chooses for their own.
SWITCH_INTERVAL_S = 0.0005

#: command name -> "module:attribute" under this package.
COMMANDS = {
    "report": "report:report",
    "demo": "report:demo",
    "run": "maintain:run",
    "plan": "maintain:plan",
    "config": "maintain:config",
    "backup": "backup:backup",
    "backups": "backup:backups",
    "restore": "backup:restore",
    "compact": "backup:compact",
    "archive": "archive:archive",
    "adopt": "adopt:adopt",
    "history": "history:history",
    "check": "check:check",
    "schedule": "schedule:schedule",
    "fleet": "fleet:fleet",
}


def _end_of_pipe() -> None:
    """stdout's reader is gone (``report | head -2``): end as git, cat and ls do, killed by
    SIGPIPE (the shell's status 141; ``head`` gets what it wanted), with nothing on stderr.
    stdout is pointed at /dev/null first, so no flush at exit complains."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGPIPE)


class KeeperGroup(HelpGroup):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in COMMANDS:
            return None
        module, attr = COMMANDS[name].split(":")
        return getattr(importlib.import_module(f"{__name__}.{module}"), attr)

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        """``--debug`` anywhere before ``--`` (after the command too) counts as the group's."""
        end = args.index("--") if "--" in args else len(args)
        if "--debug" in args[:end]:
            args = ["--debug", *(a for a in args[:end] if a != "--debug"), *args[end:]]
        return super().parse_args(ctx, args)

    def main(self, *args, **kwargs):
        """Also what is still buffered for stdout at the end goes out here, where a reader that
        left (``| head``) is handled as below, not in the interpreter's exit."""
        try:
            try:
                return super().main(*args, **kwargs)
            finally:
                sys.stdout.flush()
        except BrokenPipeError:
            _end_of_pipe()

    def invoke(self, ctx: click.Context):
        """The one error boundary: every failure is one line and an exit code, no traceback
        unless ``--debug`` (click's own usage errors keep their handling). Ctrl-C is exit 130,
        a signal that stopped a run 128 + its number; a reader that left: :func:`_end_of_pipe`."""
        try:
            return super().invoke(ctx)
        except (click.exceptions.ClickException, click.exceptions.Abort, click.exceptions.Exit):
            raise
        except BrokenPipeError:
            _end_of_pipe()
        except KeyboardInterrupt:
            if ctx.params.get("debug"):
                raise
            click.echo("hermes-keeper: interrupted", err=True)
            sys.exit(128 + signal.SIGINT)
        except Exception as exc:
            if ctx.params.get("debug"):
                raise
            homes = ctx.meta.get(HOMES_KEY) or [None]
            line, code = failure_line(exc, homes[0])
            from hermes_keeper.cli.text import term  # only on this path: rich is not cheap to import

            click.echo(f"hermes-keeper: {term(line)}", err=True)
            sys.exit(code)


@click.group(
    "hermes-keeper",
    cls=KeeperGroup,
    context_settings={"help_option_names": ["-h", "--help"]},
    epilog=examples("demo", "report", "plan", "run --all-profiles --quiet"),
)
@click.version_option(__version__, prog_name="hermes-keeper")
@click.option("--debug", is_flag=True, help="Show the traceback of a failure.")
@click.option("--utc", is_flag=True, help="Show every time in UTC (as backup names are), not the local zone.")
def main(debug: bool, utc: bool) -> None:
    """Keep Hermes Agent's session store healthy and bounded: nothing lost, Hermes never stalled."""
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    units.show_utc(utc)
    warnings.showwarning = _warning_line


def _warning_line(message, category, filename, lineno, file=None, line=None) -> None:
    """A warning (keeper.toml's ``retention.crom``) as one line on stderr, as a failure is."""
    click.echo(f"hermes-keeper: warning: {message}", err=True)
