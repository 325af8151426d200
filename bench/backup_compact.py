"""Backup and compact beside a live gateway writer (20 writes/s through Hermes's SessionDB).

On a copy of the 2,000-session home built by real Hermes: ``take_backup`` while the
stand-in writes; then, on a copy already switched to ``auto_vacuum = INCREMENTAL`` (one
VACUUM while idle) with ~70% of its sessions deleted beforehand, ``compact`` while the
stand-in writes. Prints writer failures / p50 / p99 / max, backup time and size against
the database size, and bytes freed. Targets: zero failures, max latency <= 250 ms.

    .venv/bin/python bench/backup_compact.py
"""

from __future__ import annotations

import sqlite3
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.homes import bench_home, copy_home, live_writer  # noqa: E402
from hermes_keeper.backup import take_backup  # noqa: E402
from hermes_keeper.discovery import select_profiles  # noqa: E402
from hermes_keeper.reclaim import compact  # noqa: E402


def line(name: str, stats: dict, extra: str) -> str:
    return (
        f"{name:10} writes {stats['writes']:4d}  failures {stats['failures']}"
        f"  p50 {stats['p50_ms']:6.1f} ms  "
        f"p99 {stats['p99_ms']:6.1f} ms  max {stats['max_ms']:6.1f} ms  | {extra}"
    )


def main() -> None:
    base = bench_home()
    work = Path(tempfile.mkdtemp(prefix="backup-compact-"))

    home = copy_home(base, work / "backup")
    db_bytes = (home / "state.db").stat().st_size
    profile = select_profiles(home)[0]
    with live_writer(home) as w:
        t0 = time.perf_counter()
        rec = take_backup(profile)
        seconds = time.perf_counter() - t0
    print(
        line(
            "backup",
            w.stats,
            f"{seconds:.2f} s, {rec.bytes / 1e6:.1f} MB compressed for a "
            f"{db_bytes / 1e6:.1f} MB database ({rec.bytes / db_bytes:.0%})",
        )
    )

    home = copy_home(base, work / "compact")
    conn = sqlite3.connect(home / "state.db", isolation_level=None)
    conn.execute("PRAGMA auto_vacuum=INCREMENTAL")
    conn.execute("VACUUM")
    conn.execute("DELETE FROM messages WHERE session_id IN (SELECT id FROM sessions WHERE source = 'cron')")
    conn.execute("DELETE FROM sessions WHERE source = 'cron'")
    conn.close()
    profile = select_profiles(home)[0]
    with live_writer(home) as w:
        t0 = time.perf_counter()
        res = compact(profile)
        seconds = time.perf_counter() - t0
    print(
        line(
            "compact",
            w.stats,
            f"{seconds:.2f} s, freed {res.freed_bytes / 1e6:.1f} MB "
            f"({res.pages_freed} pages), {res.fts_merge_steps} FTS merge steps",
        )
    )


if __name__ == "__main__":
    main()
