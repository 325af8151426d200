"""The retention policy: defaults, ``keeper.toml``, per-profile overrides, and where each value came from.

```toml
zombie_after = "1d"        # close open sessions idle this long
keep_titled = true
archive = true             # archive every session before it is deleted
backup = true              # snapshot state.db before a run that deletes (no delete if it fails)
compact = true             # give space back after the run (incremental; VACUUM once when idle)
budget_ms = 50             # longest write transaction
pause_ms = 25              # longest rest after each budget of lock time (ends once a writer got in)
busy_wait = "2m"           # a database busy this long in all stops the run (exit 75, resumed next run)

[retention]                # by source, measured from last activity
cron = "7d"
messaging = "180d"         # telegram, discord, slack, whatsapp, signal, matrix, email, ...
default = "90d"

[disk]
max_db_bytes = "2GB"       # optional budget; prune oldest eligible until under low_water
low_water = 0.8

[files]
max_age = "7d"             # orphan transcripts and request dumps older than this are removed

[profiles.work.retention]  # any of the above, for one profile
cron = "3d"
```
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from hermes_keeper.errors import KeeperError
from hermes_keeper.sqlite.writer import DEFAULT_BUDGET_MS, DEFAULT_BUSY_WAIT_S, DEFAULT_PAUSE_MS

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
DEFAULT_RETENTION = {
    "cron": 7 * DAY,
    "subagent": 7 * DAY,
    "cli": 90 * DAY,
    "tui": 90 * DAY,
    "acp": 90 * DAY,
    "messaging": 180 * DAY,
    "default": 90 * DAY,
}
CONFIG_NAME = "keeper.toml"

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": DAY, "w": 7 * DAY}
_SIZES = {
    "b": 1,
    "kb": 1024,
    "k": 1024,
    "mb": 1024**2,
    "m": 1024**2,
    "gb": 1024**3,
    "g": 1024**3,
    "tb": 1024**4,
    "t": 1024**4,
}


def parse_duration(value, where: str = "duration") -> float:
    """``"7d"``, ``"12h"``, ``"30m"``, ``"90s"``, ``"2w"`` or a number of seconds."""
    if isinstance(value, bool):
        raise KeeperError(f"{where}: expected a duration like 7d, got {value!r}")
    if isinstance(value, (int, float)):
        seconds = float(value)
    else:
        m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([smhdw]?)\s*", str(value).lower())
        if not m:
            raise KeeperError(f"{where}: not a duration: {value!r} (use e.g. 7d, 12h, 30m)")
        seconds = float(m.group(1)) * _UNITS.get(m.group(2) or "s", 1)
    if seconds < 0:
        raise KeeperError(f"{where}: must not be negative")
    return seconds


def parse_size(value, where: str = "size") -> int:
    if isinstance(value, bool):
        raise KeeperError(f"{where}: expected a size like 2GB, got {value!r}")
    if isinstance(value, (int, float)):
        return int(value)
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([a-z]*)\s*", str(value).lower())
    if not m or (m.group(2) and m.group(2) not in _SIZES):
        raise KeeperError(f"{where}: not a size: {value!r} (use e.g. 500MB, 2GB)")
    return int(float(m.group(1)) * _SIZES.get(m.group(2) or "b", 1))


@dataclass
class Policy:
    zombie_after_s: float = DAY
    keep_titled: bool = True
    archive: bool = True
    backup: bool = True
    compact: bool = True
    budget_ms: float = DEFAULT_BUDGET_MS
    pause_ms: float = DEFAULT_PAUSE_MS
    busy_wait_s: float = DEFAULT_BUSY_WAIT_S
    retention_s: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_RETENTION))
    max_db_bytes: int | None = None
    low_water: float = 0.8
    files_max_age_s: float = 7 * DAY
    #: key -> where its value came from: "default", "<file>: key", "<file>: profiles.X.key", "--flag"
    origin: dict[str, str] = field(default_factory=dict)

    def retention_for(self, source: str) -> float:
        if source in self.retention_s:
            return self.retention_s[source]
        if source in MESSAGING_SOURCES:
            return self.retention_s["messaging"]
        return self.retention_s["default"]

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
            "retention_s": dict(self.retention_s),
            "max_db_bytes": self.max_db_bytes,
            "low_water": self.low_water,
            "files_max_age_s": self.files_max_age_s,
            "origin": dict(self.origin),
        }


_TOP_KEYS = {
    "zombie_after",
    "keep_titled",
    "archive",
    "backup",
    "compact",
    "budget_ms",
    "pause_ms",
    "busy_wait",
    "retention",
    "disk",
    "files",
    "profiles",
}


def _apply(policy: Policy, data: dict, label: str) -> None:
    """Apply one TOML table (top level or a profile's) onto ``policy``, recording provenance."""
    unknown = set(data) - _TOP_KEYS
    if unknown:
        raise KeeperError(f"{label}: unknown key(s) {', '.join(sorted(unknown))}")

    def bool_of(key, value):
        if not isinstance(value, bool):
            raise KeeperError(f"{label}: {key} must be true or false")
        return value

    def positive(key, value):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise KeeperError(f"{label}: {key} must be a non-negative number")
        return float(value)

    if "zombie_after" in data:
        policy.zombie_after_s = parse_duration(data["zombie_after"], f"{label}: zombie_after")
        policy.origin["zombie_after"] = label
    if "busy_wait" in data:
        policy.busy_wait_s = parse_duration(data["busy_wait"], f"{label}: busy_wait")
        policy.origin["busy_wait"] = label
    for key in ("keep_titled", "archive", "backup", "compact"):
        if key in data:
            setattr(policy, key, bool_of(key, data[key]))
            policy.origin[key] = label
    for key in ("budget_ms", "pause_ms"):
        if key in data:
            setattr(policy, key, positive(key, data[key]))
            policy.origin[key] = label
    if policy.budget_ms < 1:
        raise KeeperError(f"{label}: budget_ms must be at least 1")
    retention = data.get("retention", {})
    if not isinstance(retention, dict):
        raise KeeperError(f"{label}: [retention] must be a table")
    for source, value in retention.items():
        policy.retention_s[source] = parse_duration(value, f"{label}: retention.{source}")
        policy.origin[f"retention.{source}"] = label
    disk = data.get("disk", {})
    if not isinstance(disk, dict) or set(disk) - {"max_db_bytes", "low_water"}:
        raise KeeperError(f"{label}: [disk] takes max_db_bytes and low_water")
    if "max_db_bytes" in disk:
        policy.max_db_bytes = parse_size(disk["max_db_bytes"], f"{label}: disk.max_db_bytes")
        policy.origin["disk.max_db_bytes"] = label
    if "low_water" in disk:
        lw = disk["low_water"]
        if isinstance(lw, bool) or not isinstance(lw, (int, float)) or not 0 < lw <= 1:
            raise KeeperError(f"{label}: disk.low_water must be a fraction in (0, 1]")
        policy.low_water = float(lw)
        policy.origin["disk.low_water"] = label
    files = data.get("files", {})
    if not isinstance(files, dict) or set(files) - {"max_age"}:
        raise KeeperError(f"{label}: [files] takes max_age")
    if "max_age" in files:
        policy.files_max_age_s = parse_duration(files["max_age"], f"{label}: files.max_age")
        policy.origin["files.max_age"] = label


def load_config(path: Path) -> dict:
    try:
        with open(path, "rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        return {}
    except tomllib.TOMLDecodeError as exc:
        raise KeeperError(f"{path}: invalid TOML: {exc}") from None
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
