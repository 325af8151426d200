"""Where every byte of a Hermes home goes, and what its sessions look like.

``build_report`` turns a survey plus disk facts into a JSON-able dict whose shape is
``data/report.schema.json``; ``render.py`` draws it for people. Read-only throughout.
"""

from __future__ import annotations

import os
import time
from collections import Counter, defaultdict
from pathlib import Path

from .db import connect_ro
from .discovery import Profile
from .holders import find_holders, gateway_pid
from .schema import SchemaInfo, inspect
from .survey import SessionRow, Survey, survey_profile

REPORT_VERSION = 1
AGE_BUCKETS = (
    ("<1h", 3600),
    ("1-6h", 6 * 3600),
    ("6-24h", 86400),
    ("1-7d", 7 * 86400),
    ("7-30d", 30 * 86400),
    (">30d", float("inf")),
)
#: A runaway: at least this many messages, arriving at least this fast on average.
RUNAWAY_MIN_MESSAGES = 200
RUNAWAY_MIN_RATE = 1.0  # messages per second, first to last message
OTHER_DIRS = (
    "checkpoints",
    "state-snapshots",
    "backups",
    "cron/output",
    "logs",
    "session-exports",
    "moa-traces",
    "keeper",
)


def age_bucket(age_s: float) -> str:
    for name, limit in AGE_BUCKETS:
        if age_s < limit:
            return name
    return AGE_BUCKETS[-1][0]


def _size(path: Path) -> int:
    try:
        return path.lstat().st_size
    except OSError:
        return 0


def dir_usage(path: Path) -> dict:
    """Bytes and files under ``path`` without following symlinks (a link counts as itself)."""
    total = files = 0
    if path.is_dir() and not path.is_symlink():
        for dirpath, _dirs, names in os.walk(path, followlinks=False):
            for n in names:
                total += _size(Path(dirpath) / n)
                files += 1
    return {"bytes": total, "files": files}


def table_group(name: str) -> str:
    if name.startswith("messages_fts"):
        return "fts"
    if name == "messages" or name.startswith(("idx_messages", "sqlite_autoindex_messages")):
        return "messages"
    if name == "sessions" or name.startswith(("idx_sessions", "sqlite_autoindex_sessions")):
        return "sessions"
    return "other"


def db_usage(db_path: Path, schema: SchemaInfo) -> dict:
    """Bytes per table/index (dbstat) grouped, plus free pages; falls back to totals only."""
    objects: dict[str, int] = {}
    conn = connect_ro(db_path)
    try:
        try:
            rows = conn.execute("SELECT name, sum(pgsize) FROM dbstat WHERE aggregate = 1 GROUP BY name")
            objects = {name: int(size or 0) for name, size in rows}
        except Exception:  # dbstat not compiled in: report what the pragmas give
            objects = {}
    finally:
        conn.close()
    groups = Counter()
    for name, size in objects.items():
        groups[table_group(name)] += size
    free = schema.freelist_count * schema.page_size
    groups["free"] = free
    return {
        "page_size": schema.page_size,
        "page_count": schema.page_count,
        "bytes": schema.page_count * schema.page_size,
        "groups": {k: int(groups.get(k, 0)) for k in ("messages", "fts", "sessions", "other", "free")},
        "objects": dict(sorted(objects.items(), key=lambda kv: -kv[1])),
        "reclaimable_bytes": free,
    }


def files_usage(home: Path, survey: Survey) -> dict:
    kinds: dict[str, dict] = defaultdict(lambda: {"bytes": 0, "files": 0})
    orphans = {"bytes": 0, "files": 0}
    for f in survey.files:
        k = kinds[f.kind]
        k["bytes"] += f.size
        k["files"] += 1
        if f.orphan:
            orphans["bytes"] += f.size
            orphans["files"] += 1
    other = {d: dir_usage(home / d) for d in OTHER_DIRS}
    malformed = [
        {"name": p.name, "bytes": _size(p)} for p in sorted(home.glob("state.db.malformed-backup-*"))
    ]
    return {"sessions_dir": dict(kinds), "orphans": orphans, "other": other, "malformed_copies": malformed}


def _session_summary(s: SessionRow) -> dict:
    return {
        "id": s.id,
        "source": s.source,
        "messages": s.messages,
        "bytes": s.content_bytes,
        "tokens": s.input_tokens + s.output_tokens,
        "cost_usd": round(s.cost_usd, 4),
        "started_at": s.started_at,
        "last_activity": s.last_activity,
        "open": s.is_open,
    }


def is_runaway(s: SessionRow) -> bool:
    if s.messages < RUNAWAY_MIN_MESSAGES or s.first_message_at is None or s.last_message_at is None:
        return False
    span = max(s.last_message_at - s.first_message_at, 1.0)
    return s.messages / span >= RUNAWAY_MIN_RATE


def sessions_section(survey: Survey, now: float, zombie_after_s: float, top: int) -> dict:
    rows = list(survey.sessions.values())
    by_source: dict[str, Counter] = defaultdict(Counter)
    zombies: Counter = Counter()
    for s in rows:
        by_source[s.source][age_bucket(now - s.last_activity)] += 1
        if s.is_open and now - s.last_activity >= zombie_after_s:
            zombies[s.source] += 1
    largest = {
        key: [_session_summary(s) for s in sorted(rows, key=fn, reverse=True)[:top]]
        for key, fn in (
            ("messages", lambda s: s.messages),
            ("bytes", lambda s: s.content_bytes),
            ("tokens", lambda s: s.input_tokens + s.output_tokens),
            ("cost", lambda s: s.cost_usd),
        )
    }
    runaways = []
    for s in rows:
        if is_runaway(s):
            d = _session_summary(s)
            d["seconds"] = round(s.last_message_at - s.first_message_at, 1)
            runaways.append(d)
    return {
        "total": len(rows),
        "messages": survey.message_total,
        "open": sum(s.is_open for s in rows),
        "ended": sum(not s.is_open for s in rows),
        "archived": sum(s.archived for s in rows),
        "titled": sum(bool(s.title) for s in rows),
        "routed": sum(s.routed for s in rows),
        "zombie_after_s": zombie_after_s,
        "zombies": {"total": sum(zombies.values()), "by_source": dict(sorted(zombies.items()))},
        "by_source": {
            src: {b: int(c.get(b, 0)) for b, _ in AGE_BUCKETS} | {"total": sum(c.values())}
            for src, c in sorted(by_source.items(), key=lambda kv: -sum(kv[1].values()))
        },
        "largest": largest,
        "runaways": sorted(runaways, key=lambda d: -d["messages"]),
    }


def growth_section(survey: Survey, now: float, db_bytes: int) -> dict:
    """Sessions/day and bytes/day over 7 and 30 days; projection is linear at the 30-day rate.

    Bytes per session are estimated from the database as a whole (all bytes / all
    sessions, indexes included), since SQLite does not attribute pages to rows.
    """
    rows = list(survey.sessions.values())
    per_session = db_bytes / len(rows) if rows else 0.0
    out = {}
    for days in (7, 30):
        recent = [s for s in rows if s.started_at >= now - days * 86400]
        out[f"last_{days}d"] = {
            "sessions": len(recent),
            "sessions_per_day": round(len(recent) / days, 2),
            "bytes_per_day": int(len(recent) * per_session / days),
        }
    rate = out["last_30d"]["bytes_per_day"]
    out["projection"] = {
        "in_30d_bytes": int(db_bytes + 30 * rate),
        "in_365d_bytes": int(db_bytes + 365 * rate),
        "method": "linear at the last-30-day rate, bytes/session = db bytes / sessions",
    }
    return out


def build_report(
    profile: Profile, now: float | None = None, zombie_after_s: float = 86400, top: int = 10
) -> dict:
    """The whole report for one profile (raises KeeperError if state.db is not readable)."""
    now = time.time() if now is None else now
    schema = inspect(profile.db_path)
    schema.require_readable()
    survey = survey_profile(profile, schema, now=now)
    db = db_usage(profile.db_path, schema)
    wal, shm = (profile.db_path.with_name(profile.db_path.name + s) for s in ("-wal", "-shm"))
    disk = {"state_db": _size(profile.db_path), "wal": _size(wal), "shm": _size(shm)}
    gw = gateway_pid(profile.home)
    return {
        "report_version": REPORT_VERSION,
        "profile": profile.name,
        "home": str(profile.home),
        "generated_at": now,
        "schema": {
            "status": schema.status,
            "reason": schema.reason,
            "schema_version": schema.schema_version,
            "journal_mode": schema.journal_mode,
            "auto_vacuum": schema.auto_vacuum,
            "timestamp_problems": schema.timestamp_problems,
        },
        "disk": disk,
        "database": db,
        "files": files_usage(profile.home, survey),
        "sessions": sessions_section(survey, now, zombie_after_s, top),
        "growth": growth_section(survey, now, disk["state_db"] + disk["wal"]),
        "holders": {
            "processes": [h.to_dict() for h in find_holders(profile.db_path)],
            "gateway_pid": gw,
        },
    }
