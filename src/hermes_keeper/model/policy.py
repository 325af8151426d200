"""The retention policy: defaults, ``keeper.toml``, per-profile overrides, and where each value came from.

Every key is a row of :data:`SETTINGS` (name, the :class:`Policy` attribute it fills, kind,
default, help, range), in the style of datasette's ``SETTINGS``: the rows parse and check the
file, make Policy's fields and defaults, its ``to_dict`` (``config show --json``) and that
output's JSON Schema (:func:`policy_schema`), and ``docs/run.md``'s table
(:func:`settings_table`). A new key is one new row.
"""

from __future__ import annotations

import difflib
import math
import tomllib
import warnings
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path

from hermes_keeper.errors import KeeperError
from hermes_keeper.fs import read_regular
from hermes_keeper.sqlite.writer import DEFAULT_BUDGET_MS, DEFAULT_PAUSE_MS, Budget
from hermes_keeper.units import parse_duration, parse_size

DAY = 86400.0
MESSAGING_SOURCES = frozenset(
    {
        "telegram",
        "discord",
        "slack",
        "whatsapp",
        "signal",
        "matrix",
        "email",
        "sms",
        "imessage",
        "google_chat",
        "teams",
        "mattermost",
        "wechat",
        "line",
        "yuanbao",
        "webhook_chat",
    }
)
#: Every ``source`` Hermes writes that has no retention key of its own (hermes-storage.md): a
#: ``retention.<source>`` close to one of these but not one is a typo (``crom``), said so.
OTHER_SOURCES = frozenset({"api_server", "webhook", "import", "unknown"})
CONFIG_NAME = "keeper.toml"


class PolicyWarning(UserWarning):
    """A ``keeper.toml`` value that is valid but most likely not what was meant (``retention.crom``):
    the CLI prints it on stderr (``hermes-keeper: warning: ...``), ``config check`` lists it."""


def did_you_mean(word: str, choices) -> str:
    """`` (did you mean cron?)`` for the closest of ``choices`` (difflib), else nothing."""
    close = difflib.get_close_matches(word, sorted(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]}?)" if close else ""


def _number(value, where: str, what: str) -> float:
    """A finite TOML number; ``nan``/``inf`` would poison every comparison the plan makes."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise KeeperError(f"{where}: expected {what}, got {value!r}")
    if not math.isfinite(value):
        raise KeeperError(f"{where}: must be a finite number, got {value!r}")
    return float(value)


def _parse_path(value, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise KeeperError(f"{where}: expected a folder path, got {value!r}")
    return str(Path(value).expanduser())


def _parse_text(value, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise KeeperError(f"{where}: expected a non-empty string, got {value!r}")
    return value.strip()


def parse_count(value, where: str) -> int:
    """A whole number of things (files, folders): ``5``, never ``5.5`` or ``"5"``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise KeeperError(f"{where}: expected a whole number, got {value!r}")
    return value


def _parse_list(value, where: str) -> list:
    """A TOML array of non-empty strings (restic repositories): ``["/srv/restic", "s3:..."]``."""
    if not isinstance(value, list) or not value:
        raise KeeperError(f'{where}: expected a list of strings like ["/srv/restic"], got {value!r}')
    return [_parse_text(v, f"{where}[{i}]") for i, v in enumerate(value)]


def _parse_bool(value, where: str) -> bool:
    if not isinstance(value, bool):
        raise KeeperError(f"{where}: must be true or false")
    return value


#: kind -> (parser, what the docs call it, the type of the value the parser returns, in the
#: unit the code uses): the type is the Policy field's and, in JSON, ``config show``'s.
KINDS = {
    "duration": (parse_duration, "duration", float),
    "size": (parse_size, "size", int),
    "bool": (_parse_bool, "true/false", bool),
    "path": (_parse_path, "folder", str),
    "text": (_parse_text, "text", str),
    "list": (_parse_list, "list of text", list),
    "ms": (lambda v, where: _number(v, where, "milliseconds"), "milliseconds", float),
    "ratio": (lambda v, where: _number(v, where, "a fraction like 0.8"), "fraction", float),
    "count": (parse_count, "whole number", int),
    "number": (lambda v, where: _number(v, where, "a number"), "number", float),
}
_JSON_TYPES = {float: "number", int: "integer", bool: "boolean", str: "string", list: "array"}


@dataclass(frozen=True)
class Setting:
    """One key of ``keeper.toml`` and everything about it: how it parses and range-checks, which
    :class:`Policy` attribute it fills, how ``config show`` nests it, its row of the docs table."""

    name: str  # dotted: "retention.cron" is [retention] cron
    attr: str  # the Policy attribute it fills
    kind: str  # a key of KINDS
    default: object  # as written in keeper.toml; None: unset
    help: str
    low: float | None = None  # in the code's unit (seconds, bytes, ms)
    high: float | None = None
    low_open: bool = False  # the range excludes ``low``
    off: bool = False  # ``"off"`` is a value: the rule does not apply (None)
    #: ``attr`` is a dict of its section's keys, each under its :attr:`key` ([retention], [runaway], [check])
    table: bool = False
    #: this row's rules also stand for any other key of its section (``retention.<source>``)
    wildcard: bool = False
    #: ``config show --json`` nests ``attr`` in this object ("files", "rotation"); None: at the top
    group: str | None = None

    def parse(self, value, where: str):
        """The value in the code's unit, or a one-line refusal naming ``where``."""
        if self.off and value == "off":
            return None
        parsed = KINDS[self.kind][0](value, where)
        if self.low is not None and (parsed < self.low or (self.low_open and parsed == self.low)):
            raise KeeperError(f"{where}: must be {self._range_words()}, got {value!r}")
        if self.high is not None and parsed > self.high:
            raise KeeperError(f"{where}: must be {self._range_words()}, got {value!r}")
        return parsed

    def range_text(self) -> str:
        if self.kind in ("bool", "path", "text", "list"):
            return ""
        if self.high is None:
            text = f"> {self.low:g}" if self.low_open else f">= {self.low:g}"
        else:
            text = f"{'(' if self.low_open else '['}{self.low:g}, {self.high:g}]"
        return f"{text} or off" if self.off else text

    def _range_words(self) -> str:
        return f"in {self.range_text()}" if self.high is not None else self.range_text()

    @property
    def section(self) -> str | None:
        return self.name.split(".")[0] if "." in self.name else None

    @property
    def key(self) -> str:
        """The name within its section: a table's dict key."""
        return self.name.split(".", 1)[-1]

    @property
    def default_value(self):
        """The default in the code's unit (None: unset)."""
        return None if self.default is None else self.parse(self.default, self.name)

    @property
    def optional(self) -> bool:
        """Its value may be None: unset by default, or switched off."""
        return self.default is None or self.off

    @property
    def annotation(self) -> str:
        """The value's type as annotated: ``int | None``."""
        name = KINDS[self.kind][2].__name__
        return f"{name} | None" if self.optional else name

    def json_schema(self) -> dict:
        """Its value in ``config show --json``."""
        kind = _JSON_TYPES[KINDS[self.kind][2]]
        items = {"items": {"type": "string"}} if kind == "array" else {}
        return {
            "type": [kind, "null"] if self.optional else kind,
            **items,
            "description": f"`{self.name}`: {self.help}",
        }


def _retention(source: str, default: str, help: str, **kw) -> Setting:
    return Setting(f"retention.{source}", "retention_s", "duration", default, help, low=0, table=True, **kw)


def _runaway(key: str, kind: str, default, help: str, low: float) -> Setting:
    return Setting(f"runaway.{key}", "runaway", kind, default, help, low=low, table=True)


def _check(key: str, kind: str, default, help: str) -> Setting:
    return Setting(f"check.{key}", "check", kind, default, help, low=0, table=True)


def _files(key: str, attr: str, kind: str, default, help: str, **kw) -> Setting:
    return Setting(f"files.{key}", attr, kind, default, help, group="files", **kw)


def _rotation(rule: str, default: int, help: str) -> Setting:
    return Setting(f"backups.keep_{rule}", f"keep_{rule}", "count", default, help, low=0, group="rotation")


def _offsite(key: str, kind: str, default, help: str, low: float | None = 0) -> Setting:
    low = None if kind in ("path", "text") else low
    return Setting(f"offsite.{key}", f"offsite_{key}", kind, default, help, low=low, group="offsite")


def _fleet(key: str, kind: str, default, help: str) -> Setting:
    low = 0 if kind == "duration" else None
    return Setting(f"fleet.{key}", f"fleet_{key}", kind, default, help, low=low, group="fleet")


SETTINGS: tuple[Setting, ...] = (
    Setting(
        "zombie_after", "zombie_after_s", "duration", "1d", "an open session idle this long is closed", low=0
    ),
    Setting("keep_titled", "keep_titled", "bool", True, "titled sessions are kept (pinned ones always are)"),
    Setting(
        "archive",
        "archive",
        "bool",
        True,
        "archive every session before deleting it; `--no-archive` opts out",
    ),
    Setting(
        "backup",
        "backup",
        "bool",
        True,
        "snapshot `state.db` before a run that deletes; no delete if it fails",
    ),
    Setting("compact", "compact", "bool", True, "give space back after a run that deleted something"),
    Setting(
        "budget_ms",
        "budget_ms",
        "ms",
        DEFAULT_BUDGET_MS,
        "longest write transaction (Hermes's writers give up waiting after 1 s)",
        low=1,
        high=1000,
    ),
    Setting(
        "pause_ms",
        "pause_ms",
        "ms",
        DEFAULT_PAUSE_MS,
        "longest rest after each budget of lock time; it ends once a waiting writer got in",
        low=0,
        high=1000,
    ),
    Setting(
        "live_vacuum_stall",
        "live_vacuum_stall_s",
        "duration",
        "5s",
        "the one-time VACUUM runs beside Hermes only if its measured stall of Hermes's writes is at"
        " most this (`0s`: only while Hermes is stopped); at most 15s, inside Hermes's write retries",
        low=0,
        high=15,
    ),
    Setting(
        "busy_wait",
        "busy_wait_s",
        "duration",
        "2m",
        "a database kept busy this long in all stops the run cleanly (exit 75; the next run resumes)",
        low=1,
    ),
    _retention("cron", "7d", "from last activity"),
    _retention("subagent", "7d", "from last activity"),
    _retention("cli", "90d", "from last activity"),
    _retention("tui", "90d", "from last activity"),
    _retention("acp", "90d", "from last activity"),
    _retention(
        "messaging",
        "180d",
        "telegram, discord, slack, whatsapp, signal, matrix, email, sms, ... (`policy.MESSAGING_SOURCES`)",
    ),
    _retention(
        "default", "90d", "any other source; `retention.<source>` sets one source exactly", wildcard=True
    ),
    Setting(
        "restored_keep",
        "restored_keep_s",
        "duration",
        "30d",
        "a session `archive restore` brought back is kept this long (reason `restored`), then ages as any",
        low=0,
    ),
    Setting("disk.max_db_bytes", "max_db_bytes", "size", None, "optional budget for `state.db`", low=0),
    Setting(
        "disk.low_water",
        "low_water",
        "ratio",
        0.8,
        "over budget, prune until the estimate is under `max_db_bytes * low_water`",
        low=0,
        high=1,
        low_open=True,
    ),
    Setting(
        "files.max_age",
        "files_max_age_s",
        "duration",
        "7d",
        "orphan transcripts and request dumps older than this are removed",
        low=0,
    ),
    _runaway("min_messages", "count", 200, "a runaway: at least this many messages ...", 1),
    _runaway("min_rate", "number", 1.0, "... at this many messages per second on average", 0),
    _runaway("max_messages", "count", 2000, "any session with more messages is a runaway", 1),
    _runaway("max_bytes", "size", "20MB", "any session with more message text is a runaway", 1),
    _runaway("max_tokens", "count", 5_000_000, "input + output tokens (where Hermes counts them)", 1),
    _runaway("max_cost_usd", "number", 25.0, "cost in USD (where Hermes records it)", 0),
    _check("db_warn", "size", "2GB", "`check`: WARNING when `state.db` is larger"),
    _check("db_crit", "size", "8GB", "`check`: CRITICAL when `state.db` is larger"),
    _check("growth_warn", "size", "100MB", "`check`: WARNING above this growth per day (7-day rate)"),
    _check("growth_crit", "size", "500MB", "`check`: CRITICAL above this growth per day"),
    _check("wal_warn", "size", "256MB", "`check`: WARNING when `state.db-wal` is larger"),
    _check("wal_crit", "size", "1GB", "`check`: CRITICAL when `state.db-wal` is larger"),
    _check("free_warn", "size", "2GB", "`check`: WARNING below this free space on the home's disk"),
    _check("free_crit", "size", "500MB", "`check`: CRITICAL below this free space"),
    _check("full_in_warn", "duration", "30d", "`check`: WARNING when the disk fills sooner at this growth"),
    _check("full_in_crit", "duration", "7d", "`check`: CRITICAL when the disk fills sooner"),
    _check("zombies_warn", "count", 20, "`check`: WARNING above this many zombie sessions"),
    _check("runaways_crit", "count", 0, "`check`: CRITICAL above this many runaway sessions"),
    _check(
        "runaway_recent",
        "duration",
        "2d",
        "`check`: a runaway counts while open or active this recently (`check --ack ID` silences one)",
    ),
    _check("last_run_warn", "duration", "3d", "`check`: WARNING when the last successful `run` is older"),
    _check("last_run_crit", "duration", "8d", "`check`: CRITICAL when it is older (or never ran)"),
    _check("backup_warn", "duration", "8d", "`check`: WARNING when the newest verified backup is older"),
    _check("backup_crit", "duration", "35d", "`check`: CRITICAL when it is older (or there is none)"),
    _check("reclaimable_warn", "size", "1GB", "`check`: WARNING above this many free pages in `state.db`"),
    _check("verify_warn", "duration", "35d", "`check`: WARNING when `archive verify` last ran longer ago"),
    _check("offsite_warn", "duration", "3d", "`check`: WARNING when the newest off-host copy is older"),
    _check("offsite_crit", "duration", "8d", "`check`: CRITICAL when it is older (or there is none)"),
    _files(
        "cron_output_age",
        "cron_output_age_s",
        "duration",
        "30d",
        "`cron/output/<job>/*.md` older than this are removed; the newest of each job is kept",
        low=0,
        off=True,
    ),
    _files(
        "cron_output_keep",
        "cron_output_keep",
        "count",
        "off",
        "per job, only the newest this many `cron/output/<job>/*.md` are kept",
        low=1,
        off=True,
    ),
    _files(
        "state_snapshots_keep",
        "state_snapshots_keep",
        "count",
        20,
        "only the newest this many `state-snapshots/` folders are kept (Hermes's own default cap)",
        low=1,
        off=True,
    ),
    _files(
        "malformed_copies_age",
        "malformed_copies_age_s",
        "duration",
        "30d",
        "Hermes's `state.db.malformed-backup-*` older than this are removed: never the newest, never"
        " the only copy that passes quick_check while state.db fails it",
        low=0,
        off=True,
    ),
    _files(
        "restore_copies_keep",
        "restore_copies_keep",
        "count",
        1,
        "only the newest this many `state.db.keeper-before-restore-*` copies are kept",
        low=1,
        off=True,
    ),
    _files(
        "keeper_leftovers",
        "keeper_leftovers",
        "bool",
        True,
        "temporary files of killed keeper commands (backup, restore, FTS hold, VACUUM estimate) are removed",
    ),
    Setting(
        "archive.keep",
        "archive_keep_s",
        "duration",
        None,
        "optional: archived conversations last active longer ago are deleted from the archive for good",
        low=0,
    ),
    Setting(
        "archive.max_bytes",
        "archive_max_bytes",
        "size",
        None,
        "optional budget for the archive's files; over it, the oldest conversations go first",
        low=0,
    ),
    Setting(
        "backups.dest",
        "backup_dest",
        "path",
        None,
        "backup folder (default `<home>/keeper/backups`; may be shared by several profiles); `--dest`",
    ),
    _rotation("last", 3, "rotation keeps the newest N backups; `--keep-last`"),
    _rotation("daily", 7, "... and the newest of each of the last N UTC days"),
    _rotation("weekly", 4, "... of each of the last N ISO weeks"),
    _rotation("monthly", 0, "... of each of the last N months (0: a bounded home, docs/backup.md)"),
    Setting(
        "keeper.max_bytes",
        "keeper_max_bytes",
        "size",
        None,
        "optional budget for `keeper/` (backups and archive): rotation drops the oldest backups over it"
        " (never the newest verified); `check` warns above it",
        low=0,
    ),
    _offsite(
        "repository",
        "text",
        None,
        "restic repository (`-r`: a path, `s3:`, `b2:`, `sftp:`, `rest:`); unset: nothing leaves the host",
    ),
    _offsite(
        "password_file",
        "text",
        None,
        "restic `--password-file` (a path, never the password); else restic's own `RESTIC_PASSWORD*`",
    ),
    _offsite("password_command", "text", None, "restic `--password-command` (a command, never the password)"),
    _offsite("host", "text", None, "restic `--host` of this machine's copies (default: its hostname)"),
    _offsite("check_every", "duration", "7d", "a run verifies the repository (`restic check`) this often"),
    _offsite("check_subset", "text", "5%", "the share of its data that check reads (`--read-data-subset`)"),
    _offsite("timeout", "duration", "1h", "one restic command stopped after this long (exit 75)", low=1),
    _fleet(
        "repositories",
        "list",
        None,
        "`fleet status` reads these restic repositories (default: `[offsite] repository`)",
    ),
    _fleet("stale_after", "duration", "2d", "`fleet status`: a host whose newest report is older: CRITICAL"),
    _fleet(
        "password_file",
        "text",
        None,
        "restic `--password-file` for every fleet repository (default: `[offsite]`'s; else restic's env)",
    ),
    _fleet("password_command", "text", None, "restic `--password-command` for every fleet repository"),
)
_BY_NAME = {s.name: s for s in SETTINGS}
_SECTIONS = {s.section for s in SETTINGS if s.section}


def setting(name: str) -> Setting | None:
    """The row for ``name``; a key its section has no row for takes the section's wildcard row's
    rules (any ``retention.<source>``: ``retention.default``'s)."""
    if name in _BY_NAME:
        return _BY_NAME[name]
    section, _, key = name.partition(".")
    wild = next((s for s in SETTINGS if s.wildcard and s.section == section), None)
    return replace(wild, name=name, help="", wildcard=False) if wild and key else None


def shown(value) -> str:
    """A value as keeper.toml spells it: ``7d``, ``2GB``, ``true``, ``none``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ", ".join(value)
    return "none" if value is None else f"{value:g}" if isinstance(value, float) else str(value)


def _table_defaults(attr: str) -> dict:
    return {s.key: s.default_value for s in SETTINGS if s.table and s.attr == attr}


def _fields_from_settings(cls):
    """``cls`` as a dataclass whose fields are SETTINGS' attributes, in SETTINGS' order and with
    their defaults (a table's: a dict of its keys), then the fields ``cls`` declares itself."""
    fields: dict[str, str] = {}
    for s in SETTINGS:
        if s.attr in fields:
            continue
        if hasattr(cls, s.attr):
            raise TypeError(f"setting {s.name}: Policy already has an attribute {s.attr}")
        fields[s.attr] = "dict[str, float]" if s.table else s.annotation
        default = field(default_factory=partial(_table_defaults, s.attr)) if s.table else s.default_value
        setattr(cls, s.attr, default)
    cls.__annotations__ = fields | cls.__dict__.get("__annotations__", {})
    return dataclass(cls)


@_fields_from_settings
class Policy:
    """One profile's effective policy: a field for each attribute of :data:`SETTINGS`, in the
    code's units (``zombie_after_s``, ``retention_s`` {source: seconds}, ``runaway`` and ``check``
    {key: limit}, ``keep_daily``, ...), each with its default; then where each value came from."""

    #: key -> where its value came from: "<file>", "<file> [profiles.X]", "command line"
    origin: dict[str, str] = field(default_factory=dict)
    #: key -> the value as it was written (``"7d"``, ``"2GB"``), for ``config show``
    written: dict[str, object] = field(default_factory=dict)

    @property
    def budget(self) -> Budget:
        """How the keeper's writes share ``state.db``: ``budget_ms``, ``pause_ms``, ``busy_wait``."""
        return Budget(self.budget_ms, self.pause_ms, self.busy_wait_s)

    @property
    def rotation(self) -> dict[str, int]:
        """The rotation rules (``keep_last``, ``keep_daily``, ...) and ``[keeper] max_bytes``, as
        ``backup.rotation`` takes them."""
        rules = {s.attr: getattr(self, s.attr) for s in SETTINGS if s.group == "rotation"}
        return rules | {"max_bytes": self.keeper_max_bytes}

    @property
    def offsite(self) -> dict:
        """The ``[offsite]`` settings by key (``repository``, ``password_file``, ``host``, ...)."""
        return {s.key: getattr(self, s.attr) for s in SETTINGS if s.group == "offsite"}

    @property
    def fleet(self) -> dict:
        """The ``[fleet]`` settings by key (``repositories``, ``stale_after``, ``password_file``, ...)."""
        return {s.key: getattr(self, s.attr) for s in SETTINGS if s.group == "fleet"}

    def retention_for(self, source: str) -> float:
        if source in self.retention_s:
            return self.retention_s[source]
        if source in MESSAGING_SOURCES:
            return self.retention_s["messaging"]
        return self.retention_s["default"]

    def set(self, name: str, value, label: str) -> None:
        """Parse and range-check one dotted key as written in ``label``; remember how it was written."""
        s = setting(name)
        if s is None:
            raise KeeperError(f"{label}: unknown key {name}{did_you_mean(name, _BY_NAME)}")
        parsed = s.parse(value, f"{label}: {name}")
        if s.section == "retention" and name not in _BY_NAME:
            _warn_unknown_source(s.key, label)
        if s.table:
            getattr(self, s.attr)[s.key] = parsed
        else:
            setattr(self, s.attr, parsed)
        self.origin[name] = label
        self.written[name] = value

    def keep_within(self, spec: str, label: str = "--keep-within") -> None:
        """One-off retention, restic's ``--keep-within``: ``30d`` for every source, ``cron=3d`` for one."""
        source, _, value = spec.rpartition("=")
        for key in [source.strip()] if source else list(self.retention_s):
            self.set(f"retention.{key}", value, label)

    def settings(self) -> list[dict]:
        """Every key with its value as written (else the default) and where it came from."""
        names = [s.name for s in SETTINGS]
        names += sorted(k for k in self.written if k not in _BY_NAME)
        return [
            {
                "key": n,
                "value": shown(self.written.get(n, _BY_NAME[n].default if n in _BY_NAME else None)),
                "from": self.origin.get(n, "default"),
            }
            for n in names
        ]

    def to_dict(self) -> dict:
        """Every attribute in SETTINGS' order (a table's as a dict, a group's nested under the
        group's name: ``files``, ``rotation``), then ``origin`` and :meth:`settings`."""
        out: dict = {}
        for s in SETTINGS:
            value = getattr(self, s.attr)
            (out.setdefault(s.group, {}) if s.group else out)[s.attr] = dict(value) if s.table else value
        return out | {"origin": dict(self.origin), "settings": self.settings()}


def _warn_unknown_source(source: str, label: str) -> None:
    """``retention.crom``: a source no Hermes writes but one letter from one that does. A source
    near none (``retention.mybot``) is taken as meant: ``source`` is free text."""
    known = MESSAGING_SOURCES | OTHER_SOURCES | {s.key for s in SETTINGS if s.section == "retention"}
    if source not in known and (hint := did_you_mean(source, known)):
        warnings.warn(
            f"{label}: retention.{source}: no Hermes source is called {source!r}{hint}; "
            "it applies only to sessions of that exact source",
            PolicyWarning,
            stacklevel=2,
        )


def _object(properties: dict, more: dict | bool = False) -> dict:
    return {
        "type": "object",
        "required": list(properties),
        "additionalProperties": more,
        "properties": properties,
    }


def _properties(rows: list[Setting]) -> dict:
    """Each row's value under its attribute; a table's rows as one object under theirs."""
    props: dict = {}
    for s in rows:
        if not s.table:
            props[s.attr] = s.json_schema()
        elif s.attr not in props:
            table = [t for t in rows if t.attr == s.attr]
            more = next(({"type": t.json_schema()["type"]} for t in table if t.wildcard), False)
            props[s.attr] = _object({t.key: t.json_schema() for t in table}, more)
    return props


def policy_schema() -> dict:
    """The JSON Schema of a ``config show --json`` row (its ``profile``, then :meth:`Policy.to_dict`),
    from SETTINGS. ``schemas/config-show.json`` holds it as ``$defs.result0``: ``tools/config_schema.py``
    writes it there, ``tests/test_json.py`` keeps the two equal."""
    slots: dict[str, list[Setting]] = {}  # a group, or a top-level attribute: its rows, in SETTINGS' order
    for s in SETTINGS:
        slots.setdefault(s.group or s.attr, []).append(s)
    props: dict = {"profile": {"type": "string"}}
    for slot, rows in slots.items():
        if rows[0].group:
            props[slot] = _object(_properties(rows))
        else:
            props |= _properties(rows)
    text = {"type": "string"}
    props["origin"] = {
        "type": "object",
        "additionalProperties": text,
        "description": 'key -> where its value came from (a file, "<file> [profiles.X]", "command line");'
        " a key not here has its default",
    }
    row = _object({"key": text, "value": text, "from": text})
    props["settings"] = {
        "type": "array",
        "items": row,
        "description": "every key with its value as keeper.toml spells it (else its default) and where"
        ' it came from ("default")',
    }
    return _object(props)


def _apply(policy: Policy, data: dict, label: str) -> None:
    """Apply one TOML table (top level or a profile's) onto ``policy``, key by key through SETTINGS."""
    for key, value in data.items():
        # ``archive = false`` is a key, ``[archive]`` a table: the one name is both.
        if key in _SECTIONS and (isinstance(value, dict) or key not in _BY_NAME):
            if not isinstance(value, dict):
                raise KeeperError(f"{label}: [{key}] must be a table")
            for sub, v in value.items():
                policy.set(f"{key}.{sub}", v, label)
        else:
            policy.set(key, value, label)


def settings_table() -> str:
    """The Markdown table of every key, as ``docs/run.md`` shows it (a test keeps them equal)."""
    rows = ["| key | type | default | range | meaning |", "|---|---|---|---|---|"]
    for s in SETTINGS:
        rng = s.range_text()
        rows.append(
            f"| `{s.name}` | {KINDS[s.kind][1]} | `{shown(s.default)}` | {rng and f'`{rng}`'} | {s.help} |"
        )
    return "\n".join(rows) + "\n"


def load_config(path: Path) -> dict:
    try:
        return tomllib.loads(read_regular(path).decode("utf-8"))  # a FIFO or a device: refused
    except FileNotFoundError:
        return {}
    except tomllib.TOMLDecodeError as exc:
        raise KeeperError(f"{path}: invalid TOML: {exc}") from None
    except UnicodeDecodeError:
        raise KeeperError(f"{path}: invalid TOML: not UTF-8 text") from None
    except OSError as exc:
        raise KeeperError(f"{path}: cannot read: {exc.strerror}") from None


def _one_key_tables(data: dict):
    """``data`` as one-key tables (``{"disk": {"low_water": 2}}``): each key checked on its own."""
    for key, value in data.items():
        if key in _SECTIONS and isinstance(value, dict):
            yield from ({key: {sub: v}} for sub, v in value.items())
        else:
            yield {key: value}


def config_problems(path: Path) -> tuple[list[str], list[str]]:
    """Every error and every warning of the policy file ``path`` (``config check``): each key on
    its own, so one wrong key hides no other; each ``[profiles.X]`` too. ``([], [])``: all good."""
    try:
        data = load_config(path)
    except KeeperError as exc:
        return [str(exc)], []
    profiles = data.get("profiles", {})
    tables = [({k: v for k, v in data.items() if k != "profiles"}, str(path))]
    if not isinstance(profiles, dict):
        return [f"{path}: [profiles] must be a table of tables"], []
    for name, section in profiles.items():
        if not isinstance(section, dict) or "profiles" in section:
            return [f"{path}: [profiles.{name}] must be a table"], []
        tables.append((section, f"{path} [profiles.{name}]"))
    errors: list[str] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", PolicyWarning)
        for table, label in tables:
            for one in _one_key_tables(table):
                try:
                    _apply(Policy(), one, label)
                except KeeperError as exc:
                    errors.append(str(exc))
    return errors, [str(w.message) for w in caught if issubclass(w.category, PolicyWarning)]


def effective_policy(
    root: Path, profile: str, config_path: Path | None = None, overrides: dict | None = None
) -> Policy:
    """Defaults, then the file's top level, then ``[profiles.<profile>]``, then CLI overrides."""
    path = Path(config_path) if config_path else Path(root) / CONFIG_NAME
    if config_path and not path.exists():
        raise KeeperError(f"config file not found: {path}")
    data = load_config(path)
    policy = Policy()
    top = {k: v for k, v in data.items() if k != "profiles"}
    _apply(policy, top, str(path))
    profiles = data.get("profiles", {})
    if not isinstance(profiles, dict):
        raise KeeperError(f"{path}: [profiles] must be a table of tables")
    if profile in profiles:
        section = profiles[profile]
        if not isinstance(section, dict) or "profiles" in section:
            raise KeeperError(f"{path}: [profiles.{profile}] must be a table")
        _apply(policy, section, f"{path} [profiles.{profile}]")
    if overrides:
        _apply(policy, overrides, "command line")
    return policy
