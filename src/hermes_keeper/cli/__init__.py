"""The ``hermes-keeper`` command: thin click wrappers over the library.

Each command group lives in its own module here and is registered below by name, and
imported only when used: ``run`` from cron should not pay for the report's renderer.
Errors the user can act on (:class:`KeeperError`) print one line and exit 2.
"""

from __future__ import annotations

import importlib
import sys

import click

from hermes_keeper import __version__
from hermes_keeper.errors import KeeperError, os_error_line

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
        except OSError as exc:  # read-only home, full disk, permissions: one line, not a traceback
            click.echo(f"hermes-keeper: {os_error_line(exc)}", err=True)
            sys.exit(KeeperError.exit_code)


@click.group(cls=KeeperGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="hermes-keeper")
def main() -> None:
    """Keep Hermes Agent's session store healthy and bounded: nothing lost, Hermes never stalled."""
    sys.setswitchinterval(SWITCH_INTERVAL_S)
