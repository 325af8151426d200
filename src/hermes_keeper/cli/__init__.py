"""The ``hermes-keeper`` command: thin click wrappers over the library.

Each command group lives in its own module here and is registered below by name, and
imported only when used: ``run`` from cron should not pay for the report's renderer.
Errors the user can act on (:class:`KeeperError`) print one line and exit 2; a database
another process keeps locked (a read that waited past its timeout) is "try later", exit 75.
"""

from __future__ import annotations

import importlib
import sqlite3
import sys

import click

from hermes_keeper import __version__
from hermes_keeper.errors import EXIT_TRY_LATER, KeeperError, os_error_line
from hermes_keeper.sqlite.connect import is_busy

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
}


class KeeperGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in COMMANDS:
            return None
        module, attr = COMMANDS[name].split(":")
        return getattr(importlib.import_module(f"{__name__}.{module}"), attr)

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except KeeperError as exc:
            click.echo(f"hermes-keeper: {exc}", err=True)
            sys.exit(exc.exit_code)
        except sqlite3.OperationalError as exc:
            if not is_busy(exc):
                raise
            click.echo(f"hermes-keeper: {exc}: Hermes is busy; try again later", err=True)
            sys.exit(EXIT_TRY_LATER)
        except OSError as exc:  # read-only home, full disk, permissions: one line, not a traceback
            click.echo(f"hermes-keeper: {os_error_line(exc)}", err=True)
            sys.exit(KeeperError.exit_code)


@click.group(cls=KeeperGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="hermes-keeper")
def main() -> None:
    """Keep Hermes Agent's session store healthy and bounded: nothing lost, Hermes never stalled."""
