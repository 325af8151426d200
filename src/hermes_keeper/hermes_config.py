"""Hermes's own session auto-prune (``sessions.auto_prune`` in ``config.yaml``), read and handed over.

Hermes deletes ended sessions idle longer than ``sessions.retention_days`` at startup, at
most once per ``min_interval_hours``, without an archive and without the keeper's
protections (titled, routed, recoverable, handoffs, delegations). It is off by default up to
hermes-agent 0.19.0 (schema 22) and on by default after (upstream #101316, 90 days). The
keeper says what that will delete that it would keep, and ``adopt`` turns it off, changing
one line of the file (the others byte for byte; ruamel.yaml's round trip only for a flow-style
``sessions: {...}``).
"""

from __future__ import annotations

import io
import os
import re
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap
from ruamel.yaml.constructor import SafeConstructor
from ruamel.yaml.error import YAMLError

from hermes_keeper.errors import KeeperError
from hermes_keeper.fs import HomeFS

CONFIG_NAME = "config.yaml"
#: First schema_version written by a Hermes whose auto-prune is on by default (0.19.0 is 22).
ON_BY_DEFAULT_FROM_SCHEMA = 23
DEFAULT_RETENTION_DAYS = 90.0
DEFAULT_INTERVAL_HOURS = 24.0
ADOPT_COMMENT = "hermes-keeper owns retention (archives before deleting): hermes-keeper adopt"


@dataclass(frozen=True)
class AutoPrune:
    """What Hermes's startup auto-prune will do on this profile."""

    enabled: bool
    retention_days: float
    min_interval_hours: float
    origin: str  # where ``enabled`` comes from: config.yaml, or the version's default
    last_run: float | None = None  # state_meta ``last_auto_prune``

    @property
    def retention_s(self) -> float:
        return self.retention_days * 86400

    def next_run(self, now: float) -> float | None:
        """Earliest time its next pass may run (any Hermes start after it); ``None`` when off."""
        if not self.enabled:
            return None
        if self.last_run is None:
            return now
        return max(now, self.last_run + self.min_interval_hours * 3600)

    def to_dict(self) -> dict:
        return asdict(self)


def _yaml() -> YAML:
    yaml = YAML()  # round trip: comments, order and quoting survive
    yaml.preserve_quotes = True
    return yaml


class _LastKeyWins(SafeConstructor):
    """A key given twice takes its last value, as PyYAML's ``safe_load`` does (ruamel keeps the first)."""

    def check_mapping_key(self, node, key_node, mapping, key, value) -> bool:
        return True


def _hermes_yaml() -> YAML:
    """YAML as Hermes reads its config: YAML 1.1 (``on``/``off``/``yes``/``no`` are booleans), and
    a key given twice takes its last value (PyYAML's ``safe_load``, Hermes up to 0.19)."""
    yaml = YAML(typ="safe", pure=True)
    yaml.version = (1, 1)
    yaml.Constructor = _LastKeyWins
    return yaml


def _text(path: Path) -> str | None:
    """``config.yaml``'s text (a BOM dropped, as Hermes does), ``None`` when absent; never blocks
    on a FIFO or a device (refused in one line); :class:`KeeperError` when unreadable."""
    try:
        raw = HomeFS(path.parent).read_hermes(path.name, follow=True)  # a dotfiles link is read
    except OSError as exc:
        raise KeeperError(f"{path}: cannot read ({exc.strerror})") from exc
    try:
        return None if raw is None else raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise KeeperError(f"{path}: not UTF-8 text") from None


def _parse(path: Path, text: str, yaml: YAML):
    try:
        return yaml.load(text)
    except YAMLError as exc:
        raise KeeperError(f"{path}: not valid YAML ({str(exc).strip().splitlines()[0]})") from exc


def _load(path: Path):
    """The parsed ``config.yaml`` for a comment-keeping edit, ``None`` when absent; :class:`KeeperError`
    when unreadable."""
    text = _text(path)
    if text is None:
        return None, ""
    return _parse(path, text, _yaml()), text


def hermes_view(path: Path):
    """``config.yaml`` as Hermes reads it (:func:`_hermes_yaml`), ``None`` when absent."""
    text = _text(path)
    return None if text is None else _parse(path, text, _hermes_yaml())


def _number(value, default: float) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return default


def read_auto_prune(home: Path, schema_version: int | None, last_run: float | None = None) -> AutoPrune:
    """Hermes's auto-prune settings for ``home``: ``config.yaml`` over the version's defaults.

    An unreadable ``config.yaml`` is taken as the defaults (as Hermes's own loader falls back),
    and said so in ``origin``.
    """
    default_on = (schema_version or 0) >= ON_BY_DEFAULT_FROM_SCHEMA
    default_origin = f"Hermes's default for schema {schema_version}"
    try:
        data = hermes_view(home / CONFIG_NAME)
    except KeeperError as exc:
        data, default_origin = None, f"config.yaml unreadable ({exc}); {default_origin}"
    sessions = data.get("sessions") if isinstance(data, dict) else None
    sessions = sessions if isinstance(sessions, dict) else {}
    enabled, origin = default_on, default_origin
    if "auto_prune" in sessions:
        enabled, origin = bool(sessions["auto_prune"]), "config.yaml sessions.auto_prune"
    return AutoPrune(
        enabled=enabled,
        retention_days=_number(sessions.get("retention_days"), DEFAULT_RETENTION_DAYS),
        min_interval_hours=_number(sessions.get("min_interval_hours"), DEFAULT_INTERVAL_HOURS),
        origin=origin,
        last_run=last_run,
    )


def adopt_change(home: Path) -> tuple[str, str]:
    """``config.yaml`` before and after turning Hermes's auto-prune off (comments kept)."""
    path = home / CONFIG_NAME
    if path.is_symlink():  # a dotfiles link: replacing it would cut it off from its target
        raise KeeperError(f"{path} is a symlink; set sessions.auto_prune: false in its target by hand")
    data, before = _load(path)
    if data is None:  # no config.yaml, or an empty one
        data = CommentedMap()
    if not isinstance(data, dict):
        raise KeeperError(
            f"{path}: top level is not a mapping; change it by hand (sessions.auto_prune: false)"
        )
    sessions, named = data.get("sessions"), "sessions" in data
    if sessions is None:
        data["sessions"] = sessions = CommentedMap()
    if not isinstance(sessions, dict):
        raise KeeperError(
            f"{path}: sessions is not a mapping; change it by hand (sessions.auto_prune: false)"
        )
    seen = hermes_view(path)
    seen = seen.get("sessions") if isinstance(seen, dict) else None
    if isinstance(seen, dict) and "auto_prune" in seen and not seen["auto_prune"]:
        return before, before  # already off as Hermes reads it (``off``, ``no``, ``false``)
    edited = _line_edit(before, data, sessions if named else None)
    if edited is not None and _reads(path, edited) == _off(_reads(path, before)):
        return before, edited
    sessions["auto_prune"] = False  # a layout a line edit cannot take (flow style): ruamel writes it
    sessions.yaml_add_eol_comment(ADOPT_COMMENT, "auto_prune")
    out = io.StringIO()
    _yaml().dump(data, out)
    return before, out.getvalue()


#: A line of YAML with its break (YAML's breaks: CRLF, CR, LF, NEL, U+2028, U+2029), as ruamel counts lines.
_LINE = re.compile(r".*?(?:\r\n|[\r\n\x85\u2028\u2029]|\Z)", re.S)


def _line_edit(text: str, data, sessions) -> str | None:
    """``text`` with only the ``auto_prune`` line changed, or added, so every other line stays byte
    for byte (ruamel's dump re-indents lists and 4-space blocks); None where the layout is not a
    block a line edit can take. ``sessions``: None when the file does not name it.
    :func:`adopt_change` checks that the result reads as it should."""
    lines = [line for line in _LINE.findall(text) if line]
    setting, nl = f"auto_prune: false  # {ADOPT_COMMENT}", "\r\n" if "\r\n" in text else "\n"
    if sessions is None:  # a new block at the end
        ends = "" if not lines or lines[-1][-1] in "\r\n\x85\u2028\u2029" else nl
        return f"{text}{ends}sessions:{nl}  {setting}{nl}"
    if data.lc.value("sessions")[0] == data.lc.key("sessions")[0] and sessions:  # flow: {auto_prune: ...}
        return None
    if "auto_prune" in sessions:
        (row, col), (value_row, _) = sessions.lc.key("auto_prune"), sessions.lc.value("auto_prune")
        if value_row != row:
            return None
        line = lines[row]
        lines[row] = line[:col] + setting + line[len(line.rstrip("\r\n\x85\u2028\u2029")) :]
    elif sessions:
        row, col = sessions.lc.key(next(iter(sessions)))
        lines.insert(row, " " * col + setting + nl)
    else:  # ``sessions:`` with nothing under it
        row, col = data.lc.key("sessions")
        lines.insert(row + 1, " " * (col + 2) + setting + nl)
    return "".join(lines)


def _reads(path: Path, text: str):
    """``text`` as Hermes would read it, None when it would not."""
    try:
        return _parse(path, text, _hermes_yaml())
    except KeeperError:
        return None


def _off(view):
    """Hermes's view of a config with ``sessions.auto_prune`` turned off, all else as it was."""
    view = dict(view or {})
    sessions = view.get("sessions")
    view["sessions"] = (dict(sessions) if isinstance(sessions, dict) else {}) | {"auto_prune": False}
    return view


def write_config(home: Path, text: str) -> None:
    """Replace ``config.yaml`` durably, keeping its mode (0600 for a new one: it may hold keys) and,
    as root, its owner and group (Hermes, running as its user, must still read it).

    Through the door: a symlinked ``config.yaml`` is refused (:func:`adopt_change` said so first),
    never replaced or read through.
    """
    fs = HomeFS(home)
    st = fs.regular(CONFIG_NAME)
    mode = 0o600 if st is None else st.st_mode & 0o777
    fd, tmp = tempfile.mkstemp(prefix=".config.yaml.", dir=home)
    name = Path(tmp).name
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            if st is not None and os.geteuid() == 0:
                os.fchown(f.fileno(), st.st_uid, st.st_gid)
            os.fchmod(f.fileno(), mode)  # the file mkstemp just made, by its descriptor
            os.fsync(f.fileno())
        fs.rename(name, to=CONFIG_NAME)
    except BaseException:
        fs.unlink(name)
        raise
