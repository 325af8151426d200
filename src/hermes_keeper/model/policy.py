"""The retention policy: defaults, ``keeper.toml``, per-profile overrides, and where each value came from.

Every key is a row of :data:`SETTINGS` (name, kind, default, range, help): it parses and
checks the file, ``config show`` prints from it and ``docs/run.md`` shows it as a table.
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path

from hermes_keeper.errors import KeeperError
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
CONFIG_NAME = "keeper.toml"


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


def parse_count(value, where: str) -> int:
    """A whole number of things (files, folders): ``5``, never ``5.5`` or ``"5"``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise KeeperError(f"{where}: expected a whole number, got {value!r}")
    return value


def _parse_bool(value, where: str) -> bool:
    if not isinstance(value, bool):
        raise KeeperError(f"{where}: must be true or false")
    return value


#: kind -> (parser, what the docs call it). Each parser returns the value in the unit the code uses.
KINDS = {
    "duration": (parse_duration, "duration"),
    "size": (parse_size, "size"),
    "bool": (_parse_bool, "true/false"),
    "path": (_parse_path, "folder"),
    "ms": (lambda v, where: _number(v, where, "milliseconds"), "milliseconds"),
    "ratio": (lambda v, where: _number(v, where, "a fraction like 0.8"), "fraction"),
    "count": (parse_count, "whole number"),
    "number": (lambda v, where: _number(v, where, "a number"), "number"),
}


@dataclass(frozen=True)
class Setting:
    """One key of ``keeper.toml``: it drives parsing, range checks, ``config show`` and the docs."""

    name: str  # dotted: "retention.cron" is [retention] cron
    kind: str  # a key of KINDS
    default: object  # as written in keeper.toml; None: unset
    help: str
    low: float | None = None  # in the code's unit (seconds, bytes, ms)
    high: float | None = None
    low_open: bool = False  # the range excludes ``low``
    off: bool = False  # ``"off"`` is a value: the rule does not apply (None)

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
        if self.kind in ("bool", "path"):
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


def _retention(source: str, default: str, help: str) -> Setting:
    return Setting(f"retention.{source}", "duration", default, help, low=0)


SETTINGS: tuple[Setting, ...] = (
    Setting("zombie_after", "duration", "1d", "an open session idle this long is closed", low=0),
    Setting("keep_titled", "bool", True, "titled sessions are kept (pinned ones always are)"),
    Setting("archive", "bool", True, "archive every session before deleting it; `--no-archive` opts out"),
    Setting("backup", "bool", True, "snapshot `state.db` before a run that deletes; no delete if it fails"),
    Setting("compact", "bool", True, "give space back after a run that deleted something"),
    Setting(
        "budget_ms",
        "ms",
        DEFAULT_BUDGET_MS,
        "longest write transaction (Hermes's writers give up waiting after 1 s)",
        low=1,
        high=1000,
    ),
    Setting(
        "pause_ms",
        "ms",
        DEFAULT_PAUSE_MS,
        "longest rest after each budget of lock time; it ends once a waiting writer got in",
        low=0,
        high=1000,
    ),
    Setting(
        "live_vacuum_stall",
        "duration",
        "5s",
        "the one-time VACUUM runs beside Hermes only if its measured stall of Hermes's writes is at"
        " most this (`0s`: only while Hermes is stopped); at most 15s, inside Hermes's write retries",
        low=0,
        high=15,
    ),
    Setting(
        "busy_wait",
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
    _retention("default", "90d", "any other source; `retention.<source>` sets one source exactly"),
    Setting(
        "restored_keep",
        "duration",
        "30d",
        "a session `archive restore` brought back is kept this long (reason `restored`), then ages as any",
        low=0,
    ),
    Setting("disk.max_db_bytes", "size", None, "optional budget for `state.db`", low=0),
    Setting(
        "disk.low_water",
        "ratio",
        0.8,
        "over budget, prune until the estimate is under `max_db_bytes * low_water`",
        low=0,
        high=1,
        low_open=True,
    ),
    Setting(
        "files.max_age",
        "duration",
        "7d",
        "orphan transcripts and request dumps older than this are removed",
        low=0,
    ),
    Setting("runaway.min_messages", "count", 200, "a runaway: at least this many messages ...", low=1),
    Setting("runaway.min_rate", "number", 1.0, "... at this many messages per second on average", low=0),
    Setting("runaway.max_messages", "count", 2000, "any session with more messages is a runaway", low=1),
    Setting("runaway.max_bytes", "size", "20MB", "any session with more message text is a runaway", low=1),
    Setting(
        "runaway.max_tokens", "count", 5_000_000, "input + output tokens (where Hermes counts them)", low=1
    ),
    Setting("runaway.max_cost_usd", "number", 25.0, "cost in USD (where Hermes records it)", low=0),
    Setting("check.db_warn", "size", "2GB", "`check`: WARNING when `state.db` is larger", low=0),
    Setting("check.db_crit", "size", "8GB", "`check`: CRITICAL when `state.db` is larger", low=0),
    Setting(
        "check.growth_warn", "size", "100MB", "`check`: WARNING above this growth per day (7-day rate)", low=0
    ),
    Setting("check.growth_crit", "size", "500MB", "`check`: CRITICAL above this growth per day", low=0),
    Setting("check.wal_warn", "size", "256MB", "`check`: WARNING when `state.db-wal` is larger", low=0),
    Setting("check.wal_crit", "size", "1GB", "`check`: CRITICAL when `state.db-wal` is larger", low=0),
    Setting(
        "check.free_warn", "size", "2GB", "`check`: WARNING below this free space on the home's disk", low=0
    ),
    Setting("check.free_crit", "size", "500MB", "`check`: CRITICAL below this free space", low=0),
    Setting(
        "check.full_in_warn",
        "duration",
        "30d",
        "`check`: WARNING when the disk fills sooner at this growth",
        low=0,
    ),
    Setting("check.full_in_crit", "duration", "7d", "`check`: CRITICAL when the disk fills sooner", low=0),
    Setting("check.zombies_warn", "count", 20, "`check`: WARNING above this many zombie sessions", low=0),
    Setting("check.runaways_crit", "count", 0, "`check`: CRITICAL above this many runaway sessions", low=0),
    Setting(
        "check.last_run_warn",
        "duration",
        "3d",
        "`check`: WARNING when the last successful `run` is older",
        low=0,
    ),
    Setting(
        "check.last_run_crit", "duration", "8d", "`check`: CRITICAL when it is older (or never ran)", low=0
    ),
    Setting(
        "check.backup_warn",
        "duration",
        "8d",
        "`check`: WARNING when the newest verified backup is older",
        low=0,
    ),
    Setting(
        "check.backup_crit", "duration", "35d", "`check`: CRITICAL when it is older (or there is none)", low=0
    ),
    Setting(
        "check.reclaimable_warn",
        "size",
        "1GB",
        "`check`: WARNING above this many free pages in `state.db`",
        low=0,
    ),
    Setting(
        "check.verify_warn",
        "duration",
        "35d",
        "`check`: WARNING when `archive verify` last ran longer ago",
        low=0,
    ),
    Setting(
        "files.cron_output_age",
        "duration",
        "30d",
        "`cron/output/<job>/*.md` older than this are removed; the newest of each job is kept",
        low=0,
        off=True,
    ),
    Setting(
        "files.cron_output_keep",
        "count",
        "off",
        "per job, only the newest this many `cron/output/<job>/*.md` are kept",
        low=1,
        off=True,
    ),
    Setting(
        "files.state_snapshots_keep",
        "count",
        20,
        "only the newest this many `state-snapshots/` folders are kept (Hermes's own default cap)",
        low=1,
        off=True,
    ),
    Setting(
        "files.malformed_copies_age",
        "duration",
        "30d",
        "Hermes's `state.db.malformed-backup-*` older than this are removed: never the newest, never"
        " the only copy that passes quick_check while state.db fails it",
        low=0,
        off=True,
    ),
    Setting(
        "files.restore_copies_keep",
        "count",
        1,
        "only the newest this many `state.db.keeper-before-restore-*` copies are kept",
        low=1,
        off=True,
    ),
    Setting(
        "files.keeper_leftovers",
        "bool",
        True,
        "temporary files of killed keeper commands (backup, restore, FTS hold, VACUUM estimate) are removed",
    ),
    Setting(
        "archive.keep",
        "duration",
        None,
        "optional: archived conversations last active longer ago are deleted from the archive for good",
        low=0,
    ),
    Setting(
        "archive.max_bytes",
        "size",
        None,
        "optional budget for the archive's files; over it, the oldest conversations go first",
        low=0,
    ),
    Setting(
        "backups.dest",
        "path",
        None,
        "backup folder (default `<home>/keeper/backups`; may be shared by several profiles); `--dest`",
    ),
    Setting("backups.keep_last", "count", 3, "rotation keeps the newest N backups; `--keep-last`", low=0),
    Setting("backups.keep_daily", "count", 7, "... and the newest of each of the last N UTC days", low=0),
    Setting("backups.keep_weekly", "count", 4, "... of each of the last N ISO weeks", low=0),
    Setting("backups.keep_monthly", "count", 12, "... of each of the last N months", low=0),
)
_BY_NAME = {s.name: s for s in SETTINGS}


def setting(name: str) -> Setting | None:
    """The row for ``name``; any ``retention.<source>`` takes ``retention.default``'s rules."""
    if name in _BY_NAME:
        return _BY_NAME[name]
    if name.startswith("retention.") and len(name) > len("retention."):
        return replace(_BY_NAME["retention.default"], name=name, help="")
    return None


def _default(name: str):
    s = _BY_NAME[name]
    return None if s.default is None else s.parse(s.default, name)


def shown(value) -> str:
    """A value as keeper.toml spells it: ``7d``, ``2GB``, ``true``, ``none``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return "none" if value is None else f"{value:g}" if isinstance(value, float) else str(value)


#: Policy attribute of each key outside [retention] (which fills ``retention_s``).
_ATTR = {
    "zombie_after": "zombie_after_s",
    "busy_wait": "busy_wait_s",
    "live_vacuum_stall": "live_vacuum_stall_s",
    "disk.max_db_bytes": "max_db_bytes",
    "disk.low_water": "low_water",
}
_ATTR["files.max_age"] = "files_max_age_s"
#: Sections whose keys fill one dict attribute of :class:`Policy`, by the key after the dot.
_TABLES = {"retention": "retention_s", "runaway": "runaway", "check": "check"}


def _table_defaults(section: str) -> dict:
    return {s.name.split(".", 1)[1]: _default(s.name) for s in SETTINGS if s.section == section}


_ATTR |= {
    "files.cron_output_age": "cron_output_age_s",
    "files.cron_output_keep": "cron_output_keep",
    "files.state_snapshots_keep": "state_snapshots_keep",
    "files.malformed_copies_age": "malformed_copies_age_s",
    "files.restore_copies_keep": "restore_copies_keep",
    "files.keeper_leftovers": "keeper_leftovers",
}
_ATTR |= {"archive.keep": "archive_keep_s", "archive.max_bytes": "archive_max_bytes"}
_ATTR["restored_keep"] = "restored_keep_s"
_ATTR["backups.dest"] = "backup_dest"
DEFAULT_RETENTION = _table_defaults("retention")


@dataclass
class Policy:
    zombie_after_s: float = _default("zombie_after")
    keep_titled: bool = _default("keep_titled")
    archive: bool = _default("archive")
    backup: bool = _default("backup")
    compact: bool = _default("compact")
    budget_ms: float = _default("budget_ms")
    pause_ms: float = _default("pause_ms")
    busy_wait_s: float = _default("busy_wait")
    live_vacuum_stall_s: float = _default("live_vacuum_stall")
    retention_s: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_RETENTION))
    restored_keep_s: float = _default("restored_keep")
    max_db_bytes: int | None = _default("disk.max_db_bytes")
    low_water: float = _default("disk.low_water")
    files_max_age_s: float = _default("files.max_age")
    #: what makes a session a runaway (``report``, ``check``): [runaway] keys, in bytes/seconds/USD
    runaway: dict[str, float] = field(default_factory=lambda: _table_defaults("runaway"))
    #: ``check``'s WARNING and CRITICAL thresholds: [check] keys
    check: dict[str, float] = field(default_factory=lambda: _table_defaults("check"))
    cron_output_age_s: float | None = _default("files.cron_output_age")
    cron_output_keep: int | None = _default("files.cron_output_keep")
    state_snapshots_keep: int | None = _default("files.state_snapshots_keep")
    malformed_copies_age_s: float | None = _default("files.malformed_copies_age")
    restore_copies_keep: int | None = _default("files.restore_copies_keep")
    keeper_leftovers: bool = _default("files.keeper_leftovers")
    archive_keep_s: float | None = _default("archive.keep")
    archive_max_bytes: int | None = _default("archive.max_bytes")
    backup_dest: str | None = _default("backups.dest")
    keep_last: int = _default("backups.keep_last")
    keep_daily: int = _default("backups.keep_daily")
    keep_weekly: int = _default("backups.keep_weekly")
    keep_monthly: int = _default("backups.keep_monthly")
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
        """The backup rotation rules, as ``backup.rotation`` takes them."""
        return {
            "keep_last": self.keep_last,
            "keep_daily": self.keep_daily,
            "keep_weekly": self.keep_weekly,
            "keep_monthly": self.keep_monthly,
        }

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
            raise KeeperError(f"{label}: unknown key {name}")
        parsed = s.parse(value, f"{label}: {name}")
        if s.section in _TABLES:
            getattr(self, _TABLES[s.section])[name.split(".", 1)[1]] = parsed
        else:
            setattr(self, _ATTR.get(name, name.split(".")[-1]), parsed)
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
        return {
            "zombie_after_s": self.zombie_after_s,
            "keep_titled": self.keep_titled,
            "archive": self.archive,
            "backup": self.backup,
            "compact": self.compact,
            "budget_ms": self.budget_ms,
            "pause_ms": self.pause_ms,
            "busy_wait_s": self.busy_wait_s,
            "live_vacuum_stall_s": self.live_vacuum_stall_s,
            "retention_s": dict(self.retention_s),
            "restored_keep_s": self.restored_keep_s,
            "max_db_bytes": self.max_db_bytes,
            "low_water": self.low_water,
            "files_max_age_s": self.files_max_age_s,
            "runaway": dict(self.runaway),
            "check": dict(self.check),
            "files": {
                "cron_output_age_s": self.cron_output_age_s,
                "cron_output_keep": self.cron_output_keep,
                "state_snapshots_keep": self.state_snapshots_keep,
                "malformed_copies_age_s": self.malformed_copies_age_s,
                "restore_copies_keep": self.restore_copies_keep,
                "keeper_leftovers": self.keeper_leftovers,
            },
            "archive_keep_s": self.archive_keep_s,
            "archive_max_bytes": self.archive_max_bytes,
            "backup_dest": self.backup_dest,
            "rotation": self.rotation,
            "origin": dict(self.origin),
            "settings": self.settings(),
        }


_SECTIONS = {s.section for s in SETTINGS if s.section}


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
        with open(path, "rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        return {}
    except tomllib.TOMLDecodeError as exc:
        raise KeeperError(f"{path}: invalid TOML: {exc}") from None
    except UnicodeDecodeError:
        raise KeeperError(f"{path}: invalid TOML: not UTF-8 text") from None
    except OSError as exc:
        raise KeeperError(f"{path}: cannot read: {exc.strerror}") from None


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
