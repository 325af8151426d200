"""The ``hermes-keeper`` command: thin click wrappers over the library.

Each command group lives in its own module here and is registered below. Errors the
user can act on (:class:`KeeperError`) print one line and exit 2.
"""

from __future__ import annotations

import sys

import click

from .. import __version__
from ..errors import KeeperError, os_error_line


class KeeperGroup(click.Group):
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


from .report import demo, report  # noqa: E402

main.add_command(report)
main.add_command(demo)

from .maintain import config, plan, run  # noqa: E402

main.add_command(run)
main.add_command(plan)
main.add_command(config)

from .backup import backup, backups, compact, restore  # noqa: E402

for _command in (backup, backups, restore, compact):
    main.add_command(_command)

from .archive import archive  # noqa: E402

main.add_command(archive)
