"""Options shared by every command that acts on Hermes homes."""

from __future__ import annotations

import functools
import json
import re
import shlex
import sys
import traceback
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import click

from hermes_keeper.errors import KeeperError
from hermes_keeper.home import Outcome, Profile, each, exit_code, select_profiles
from hermes_keeper.interrupt import Interrupted
from hermes_keeper.units import parse_size

#: ``ctx.meta`` key: the homes a command works on, for the error boundary's messages.
HOMES_KEY = "hermes_keeper.homes"


class HelpGroup(click.Group):
    """A group whose ``--help`` lists each command's whole first sentence (click cuts it at ~45
    characters), wrapped, not cut."""

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = []
        for name in self.list_commands(ctx):
            cmd = self.get_command(ctx, name)
            if cmd is not None and not cmd.hidden:
                rows.append((name, cmd.get_short_help_str(limit=1000)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


def examples(*commands: str) -> str:
    """A command's ``--help`` epilog: the commands as typed, never rewrapped (click's ``\\b``).
    Every command has one (tests/test_docs.py)."""
    return "\b\nExamples:\n" + "\n".join(f"  hermes-keeper {c}" for c in commands)


class Size(click.ParamType):
    """A size option (``--keep-size 500MB``): refused at once when it has no unit, as keeper.toml's
    sizes are; passed on as written (the policy parses it, and shows it as written)."""

    name = "size"

    def convert(self, value, param, ctx):
        try:
            parse_size(value, repr(value))
        except KeeperError as exc:
            self.fail(str(exc), param, ctx)
        return value


json_option = click.option("--json", "as_json", is_flag=True, help="Machine-readable output (docs/json.md).")
dry_run_option = click.option("--dry-run", is_flag=True, help="Only say what would happen; change nothing.")
yes_option = click.option("--yes", "-y", is_flag=True, help="Do it without asking.")
config_option = click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="Policy file (default: <home>/keeper.toml).",
)
dest_option = click.option(
    "--dest",
    type=click.Path(file_okay=False),
    default=None,
    metavar="DIR",
    help="Backup folder (default: keeper.toml's [backups] dest, else <home>/keeper/backups).",
)


def profile_options(fn, every: bool = True):
    """``--home``, ``--profile``, ``--all-profiles`` (``every``); passes ``profiles: list[Profile]``."""

    @click.option(
        "--home",
        type=click.Path(file_okay=False),
        default=None,
        help="Hermes home (default: $HERMES_HOME, else ~/.hermes).",
    )
    @click.option(
        "--profile",
        "profile_name",
        default=None,
        metavar="NAME",
        help="Profile name (default: the active one).",
    )
    @functools.wraps(fn)
    def wrapper(*args, home, profile_name, all_profiles=False, **kwargs):
        profiles: list[Profile] = select_profiles(home, profile_name, all_profiles)
        click.get_current_context().meta[HOMES_KEY] = [p.home for p in profiles]
        return fn(*args, profiles=profiles, **kwargs)

    if every:
        return click.option("--all-profiles", is_flag=True, help="Every profile under the home.")(wrapper)
    return wrapper


def one_profile_options(fn):
    """``--home`` and ``--profile`` of a command that works on one profile: no ``--all-profiles``
    in its help only to be refused."""
    return profile_options(fn, every=False)


quiet_option = click.option(
    "--quiet", "-q", is_flag=True, help="Print nothing on success; errors and warnings on stderr (for cron)."
)


textfile_option = click.option(
    "--textfile",
    type=click.Path(dir_okay=False),
    default=None,
    help="Also write Prometheus metrics to this *.prom file (node_exporter textfile collector; atomic).",
)


@contextmanager
def metrics_to(textfile: str | None) -> Iterator[Any]:
    """A ``Metrics`` to fill (None without ``--textfile``), written when the command ends, also
    when some profile failed: the others' figures still go out."""
    if textfile is None:
        yield None
        return
    from hermes_keeper.metrics import Metrics, textfile_target

    target, metrics = textfile_target(textfile), Metrics()
    try:
        yield metrics
    except (SystemExit, Interrupted):
        metrics.write(target)
        raise
    metrics.write(target)


def interactive() -> bool:
    """A person at a terminal who can answer a question."""
    return sys.stdin.isatty()


def confirm(question: str, yes: bool) -> None:
    """The one confirmation (docker prune style): ``--yes`` skips it; on a terminal ask, default
    no; without a terminal (cron, a pipe) refuse, so nothing is replaced unseen."""
    if yes:
        return
    if not interactive():
        raise KeeperError(f"{question.rstrip('?')}: not confirmed; no terminal to ask on, pass --yes")
    click.confirm(question, default=False, abort=True)


def program() -> str:
    """How the user invoked the keeper (``hermes-keeper``, ``python -m hermes_keeper``...): a
    hint that names another command must paste as it is."""
    return click.get_current_context().find_root().info_name or "hermes-keeper"


def next_command(command: str, drop: Sequence[str] = ()) -> str:
    """The exact command to run next, pasteable: this program as it was invoked (``hermes-keeper``,
    ``python -m hermes_keeper``...), ``command``, and this invocation's options except ``drop``."""
    ctx = click.get_current_context()
    words = [*shlex.split(program()), command]
    for param in ctx.command.params:
        value = ctx.params.get(param.name)
        if param.name in drop or not isinstance(param, click.Option) or value in (None, False, ()):
            continue
        for v in value if isinstance(value, tuple) else [value]:
            words += [param.opts[-1]] if param.is_flag else [param.opts[-1], str(v)]
    return shlex.join(words)


def command_name() -> str:
    """The command's words without the program (``archive list``): the ``command`` of its JSON
    and the name of its schema (``schemas/archive-list.json``)."""
    ctx, words = click.get_current_context(), []
    while ctx.parent is not None:
        words.append(ctx.info_name)
        ctx = ctx.parent
    return " ".join(reversed(words))


#: The bytes of an id (or any text) that were not UTF-8, as Python keeps them (``surrogateescape``:
#: byte 0xff is U+DCFF): JSON's ``\udcff`` escape, so the document stays UTF-8 and reads back exact.
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _escaped(m: re.Match) -> str:
    return f"\\u{ord(m.group()):04x}"


def emit_json(rows: list[dict], **overall: Any) -> None:
    """The one JSON shape of every command (docs/json.md): ``{"command": "archive list",
    "profiles": [{"profile": NAME, ...}, ...]}``, one row per profile, in the order done.
    ``overall``: keys about the whole invocation, beside ``command`` (check's Nagios status)."""
    doc = {"command": command_name(), **overall, "profiles": rows}
    click.echo(_LONE_SURROGATE.sub(_escaped, json.dumps(doc, indent=2, ensure_ascii=False)))


def outcome_row(o: Outcome, to_dict: Callable[[Any], dict] = lambda value: value.to_dict()) -> dict:
    """One profile's row of that shape: its result, or its home and ``error`` or ``skipped_because``."""
    row = {"profile": o.profile.name}
    if o.error is None and o.skipped is None:
        return row | to_dict(o.value)
    why = {"error": o.error} if o.error else {"skipped_because": o.skipped}
    return row | {"home": str(o.profile.home)} | why


def debug_traceback(o: Outcome) -> None:
    """Under ``hermes-keeper --debug``, the traceback of a profile's failure (the error boundary
    shows it for one profile; :func:`each` caught it for several)."""
    if o.exception is not None and click.get_current_context().find_root().params.get("debug"):
        traceback.print_exception(o.exception)


def for_each(
    profiles: Sequence[Profile],
    action: Callable[[Profile], Any],
    as_json: bool,
    show: Callable[[Profile, Any], None],
    to_dict: Callable[[Any], dict] = lambda value: value.to_dict(),
    needs_db: bool = True,
) -> list[Outcome]:
    """The one multi-profile policy: ``action`` per profile, each result printed as it is done.

    Text: ``show(profile, value)``, a failure one line on stderr, a new profile without
    state.db a note (none with ``--quiet``). JSON: :func:`emit_json` of every row (the result, ``error``, or
    ``skipped_because``) at the end.
    Exit 1 when some failed and others ran; 2 (or the failures' own code) when none ran.
    """
    outcomes, rows = [], []
    quiet = click.get_current_context().params.get("quiet")  # a skipped profile is no news for cron
    try:
        for o in each(profiles, action, needs_db):
            outcomes.append(o)
            rows.append(outcome_row(o, to_dict))
            if o.error is not None or o.skipped is not None:
                if o.error is not None or not quiet:
                    debug_traceback(o)
                    from hermes_keeper.cli.text import term  # only on this path: rich is not cheap to import

                    click.echo(f"hermes-keeper: {o.profile.name}: {term(o.error or o.skipped)}", err=True)
            elif not as_json:
                show(o.profile, o.value)
    except Interrupted as exc:  # the JSON of what was done, the stopped run's row last
        if as_json:
            emit_json(
                rows + ([] if exc.result is None else [{"profile": exc.result.profile} | to_dict(exc.result)])
            )
        raise
    if as_json:
        emit_json(rows)
    code = exit_code(outcomes)
    if code:
        sys.exit(code)
    return outcomes
