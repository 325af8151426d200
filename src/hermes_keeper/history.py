"""What every ``report``, ``run`` (and ``check``) measured and did, over time: ``keeper/history.db``.

One row per command and profile: when, kind, and its figures as JSON (disk bytes by component,
sessions by source, what a run did), so ``history`` can list runs and ``report --html`` can draw
disk use over time. Bounded: rows older than :data:`DAILY_AFTER_DAYS` are thinned to one per kind
and day, older than :data:`WEEKLY_AFTER_DAYS` to one per kind and ISO week; the row kept absorbs
the additive figures (sessions pruned, bytes freed, ...) of the rows it replaces.

Recording is bookkeeping, never the command's point: :meth:`History.record` turns any failure
(a read-only keeper folder, a full disk, a damaged history.db) into one warning line on stderr.
Never message content: counts, bytes, sources and durations only.
"""

from __future__ import annotations

import datetime
import json
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from hermes_keeper.archive.store import ARCHIVE_NAME
from hermes_keeper.errors import KeeperError, warn
from hermes_keeper.fs import KEEPER_DIR
from hermes_keeper.report import OTHER_DIRS, OTHER_FILES, dir_usage, object_sizes, table_group
from hermes_keeper.run.files import RETIRED_WAL_PREFIX
from hermes_keeper.sqlite.connect import connect_file, connect_ro, read_txn
from hermes_keeper.sqlite.fts import fts_index
from hermes_keeper.sqlite.holders import find_holders, long_reads_stall_hermes

if TYPE_CHECKING:
    from hermes_keeper.place import Place
    from hermes_keeper.report_types import Report
    from hermes_keeper.run.execute import RunResult

HISTORY_NAME = "history.db"
DAY = 86400.0
DAILY_AFTER_DAYS = 30
WEEKLY_AFTER_DAYS = 365
#: Figures of a run that add up when thinning merges several rows into one.
ADDITIVE = ("runs", "pruned", "archived", "zombies_closed", "files_removed", "freed_bytes", "seconds")
_SCHEMA = """
CREATE TABLE IF NOT EXISTS entries (
    id INTEGER PRIMARY KEY,
    ts REAL NOT NULL,
    kind TEXT NOT NULL,
    profile TEXT NOT NULL,
    figures TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS entries_ts ON entries (ts);
"""


@dataclass(frozen=True)
class Entry:
    ts: float
    kind: str
    profile: str
    figures: dict

    def to_dict(self) -> dict:
        return {"ts": self.ts, "kind": self.kind, "profile": self.profile, **self.figures}


def _period(ts: float, now: float) -> str | None:
    """The bucket a row is thinned into: None (kept as is) within 30 days, else its day or week."""
    age = now - ts
    if age < DAILY_AFTER_DAYS * DAY:
        return None
    t = time.gmtime(ts)
    if age < WEEKLY_AFTER_DAYS * DAY:
        return time.strftime("%Y-%m-%d", t)
    year, week, _ = datetime.datetime.fromtimestamp(ts, datetime.UTC).isocalendar()
    return f"{year}-W{week:02d}"


def thin(conn: sqlite3.Connection, now: float) -> int:
    """Keep the newest row per (profile, kind, period) of old rows, adding the others' additive
    figures into it; how many rows were removed."""
    rows = conn.execute(
        "SELECT id, ts, kind, profile, figures FROM entries WHERE ts < ? ORDER BY ts DESC",
        (now - DAILY_AFTER_DAYS * DAY,),
    ).fetchall()
    kept: dict[tuple, tuple[int, dict]] = {}
    gone: list[int] = []
    changed: set[int] = set()
    for rid, ts, kind, profile, figures in rows:
        key = (profile, kind, _period(ts, now))
        if key not in kept:
            kept[key] = (rid, json.loads(figures))
            continue
        gone.append(rid)
        keep_id, keep = kept[key]
        old = json.loads(figures)
        for k in ADDITIVE:
            if k in old or k in keep:
                keep[k] = keep.get(k, 0) + old.get(k, 0)
        changed.add(keep_id)
    for rid, figures in kept.values():
        if rid in changed:
            conn.execute("UPDATE entries SET figures = ? WHERE id = ?", (json.dumps(figures), rid))
    conn.executemany("DELETE FROM entries WHERE id = ?", [(rid,) for rid in gone])
    return len(gone)


class History:
    """One profile's history database (created on the first record, 0600 in the 0700 keeper folder)."""

    def __init__(self, profile: Place):
        self.profile = profile

    def _connect(self, create: bool) -> sqlite3.Connection | None:
        fs = self.profile.fs
        if not create and fs.lstat(KEEPER_DIR, HISTORY_NAME) is None:
            return None
        path = fs.sqlite_file(KEEPER_DIR, HISTORY_NAME, create=create)
        if create:
            conn = connect_file(path, "rwc", timeout=5, isolation_level="")
            conn.executescript(_SCHEMA)
            return conn
        return connect_file(path, "ro", timeout=5, isolation_level="")

    def record(self, kind: str, figures: dict, now: float | None = None) -> bool:
        """Append one row and thin old ones; False (and one warning line on stderr) when the
        history cannot be written: a command never fails for its bookkeeping."""
        now = time.time() if now is None else now
        try:
            conn = self._connect(create=True)
            try:
                with conn:
                    conn.execute(
                        "INSERT INTO entries (ts, kind, profile, figures) VALUES (?, ?, ?, ?)",
                        (now, kind, self.profile.name, json.dumps(figures, sort_keys=True, default=str)),
                    )
                    thin(conn, now)
            finally:
                conn.close()
        except (OSError, sqlite3.Error, KeeperError) as exc:
            _warn(self.profile, exc)
            return False
        return True

    def entries(self, kinds: tuple[str, ...] | None = None, limit: int | None = None) -> list[Entry]:
        """Rows oldest first (the newest ``limit`` of them); [] when nothing was recorded yet."""
        conn = self._connect(create=False)
        if conn is None:
            return []
        try:
            sql = "SELECT ts, kind, profile, figures FROM entries"
            params: list = []
            if kinds:
                sql += f" WHERE kind IN ({', '.join('?' * len(kinds))})"
                params += list(kinds)
            sql += " ORDER BY ts DESC, id DESC"
            if limit is not None:
                sql += " LIMIT ?"
                params.append(limit)
            rows = conn.execute(sql, params).fetchall()
        except sqlite3.Error as exc:
            raise KeeperError(f"{self.profile.keeper_dir / HISTORY_NAME} cannot be read: {exc}") from None
        finally:
            conn.close()
        return [Entry(ts, kind, profile, json.loads(f)) for ts, kind, profile, f in reversed(rows)]


def database_bytes(figures: dict) -> int | None:
    """state.db's bytes as every command says them (its pages, free ones included: the file):
    the row's ``db_bytes``; an older row's sum of its ``components`` (which leaves out the pages
    dbstat does not name, so it read a little smaller than the report's figure)."""
    if "db_bytes" in figures:
        return figures["db_bytes"]
    if "components" not in figures:
        return None
    beside = ("wal", "files", "backups", "archive")
    return sum(v for k, v in figures["components"].items() if k not in beside)


def _size(path) -> int:
    """A file's bytes (0 when gone): state.db's after a run, as report gives them."""
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def _sum_bytes(usage: dict) -> int:
    return sum(v["bytes"] for v in usage.values())


def components(
    profile: Place, objects: dict[str, int], free: int, wal: int, files: dict | None = None
) -> dict:
    """Disk bytes by component: the table groups with each FTS index apart, free pages, WAL,
    Hermes's files (``sessions/``, its other folders and files, its malformed copies and retired
    WAL generations), the keeper's backups and archive.

    ``objects`` are bytes per table and index (``dbstat``; empty where SQLite lacks it),
    ``files`` :func:`report.files_usage`'s (measured here when None).
    """
    home = profile.home
    out = {"messages": 0}
    for name, size in sorted(objects.items()):
        group = table_group(name)
        if group in ("fts", "fts_cjk"):  # each index with its shadow tables
            group = f"fts:{fts_index(name)}"
        out[group] = out.get(group, 0) + size
    out |= {"free": free, "wal": wal}
    hermes_dirs = [d for d in OTHER_DIRS + OTHER_FILES if d != KEEPER_DIR]
    if files is None:
        measured = {d: dir_usage(home / d, home) for d in ("sessions", *hermes_dirs)}
        malformed = sum(p.lstat().st_size for p in home.glob("state.db.malformed-backup-*"))
        retired = sum(dir_usage(p, home)["bytes"] for p in home.glob(f"{RETIRED_WAL_PREFIX}*"))
        out["files"] = _sum_bytes(measured) + malformed + retired
    else:
        other = {d: u for d, u in files["other"].items() if d != KEEPER_DIR}
        out["files"] = (
            _sum_bytes(files["sessions_dir"])
            + _sum_bytes(other)
            + sum(m["bytes"] for m in files["malformed_copies"])
            + sum(r["bytes"] for r in files.get("retired_wal", ()))
        )
    out["backups"] = dir_usage(profile.keeper_dir / "backups", home)["bytes"]
    out["archive"] = sum(
        (st.st_size if (st := profile.fs.lstat(KEEPER_DIR, ARCHIVE_NAME + side)) else 0)
        for side in ("", "-wal")
    )
    return out


def report_figures(profile: Place, rep: Report) -> dict:
    """A report's row: disk by component, sessions by source, totals and growth."""
    db, sessions = rep.database, rep.sessions
    return {
        "components": components(
            profile, db.objects, db.reclaimable_bytes, rep.disk.wal, rep.files.to_dict()
        ),
        "db_bytes": db.bytes,
        "sessions_by_source": {src: c["total"] for src, c in sessions.by_source.items()},
        "sessions": sessions.total,
        "messages": sessions.messages,
        "zombies": sessions.zombies.total,
        "runaways": len(sessions.runaways),
        "bytes_per_day": rep.growth.last_30d.bytes_per_day,
    }


def run_figures(profile: Place, result: RunResult) -> dict:
    """A run's row: what it did, what it freed, how long it took and held the write lock, and
    the disk by component afterwards (so a home only ever run from cron still has a curve)."""
    d = result.to_dict()
    out = {k: d[k] for k in ("pruned", "archived", "zombies_closed", "files_removed", "freed_bytes")}
    out |= {
        "runs": 1,
        "seconds": d["seconds"],
        "reclaimable_bytes": d["reclaimable_bytes"],
        "messages_deleted": d["messages_deleted"],
        "remaining_sessions": d["remaining"]["sessions"],
        "max_txn_ms": d["writer"].get("max_txn_ms", 0.0),
        "backup": d["backup"],
        "db_bytes": _size(profile.db_path),
    }
    if d["interrupted"]:
        out["interrupted"] = d["interrupted"]
    out["components"] = components(
        profile, _objects_after_run(profile), d["reclaimable_bytes"], profile.wal_bytes()
    )
    return out


def _objects_after_run(profile: Place) -> dict[str, int]:
    """Bytes per table and index after a run, for the history's curve.

    A fresh ``dbstat`` reads every page in one read transaction. In a rollback-journal
    database (today's Hermes on most SQLite builds) that read holds every Hermes commit for its
    length, seconds on a big home; so beside a process that holds such a database, or past
    report's time for it, the last recorded breakdown stands in (scaled), else the row has none.
    """
    conn = connect_ro(profile.db_path)
    try:
        with read_txn(conn):
            size, pages, free, mode = (
                conn.execute(f"PRAGMA {p}").fetchone()[0]
                for p in ("page_size", "page_count", "freelist_count", "journal_mode")
            )
        stalls = long_reads_stall_hermes(mode, find_holders(profile.db_path) if mode != "wal" else [])
        with read_txn(conn):
            objects = object_sizes(profile, conn, (pages - free) * size, time.time(), measure=not stalls)
    finally:
        conn.close()
    return objects.sizes if objects else {}


def _warn(profile: Place, exc: Exception) -> None:
    where = profile.keeper_dir / HISTORY_NAME
    warn(f"{profile.name}: history not recorded ({where}: {exc})")


def _record(profile: Place, kind: str, figures: Callable[[], dict]) -> bool:
    """Measure and record; any failure of either is one warning line, never the command's."""
    try:
        values = figures()
    except (OSError, sqlite3.Error, KeeperError) as exc:
        _warn(profile, exc)
        return False
    return History(profile).record(kind, values)


def record_report(profile: Place, rep: Report) -> bool:
    return _record(profile, "report", lambda: report_figures(profile, rep))


def record_run(profile: Place, result: RunResult) -> bool:
    return _record(profile, "run", lambda: run_figures(profile, result))
