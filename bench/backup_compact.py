"""Backup and compact beside a live gateway writer (20 writes/s through Hermes's SessionDB).

On copies of the 2,000-session home built by real Hermes, each operation runs while the
gateway stand-in writes, and Hermes's own way of doing the same job runs on an identical
copy in the same run:

  backup   ``take_backup`` (VACUUM INTO + quick_check + zstd) vs Hermes's ``hermes backup``
           database copy (``hermes_cli.backup._safe_copy_db``: sqlite3 backup API, uncompressed)
  compact  ``compact`` on a copy already switched to ``auto_vacuum = INCREMENTAL`` with ~70% of
           its sessions deleted beforehand vs Hermes's ``SessionDB.vacuum()`` on the same copy;
           then Hermes's own ``optimize_fts()`` (it runs one every 1000 writes) and ``compact``
           again; and ``compact`` on a third copy with Hermes stopped (full FTS merge in steps)

Prints writer failures / p50 / p99 / max, wall time, backup size against the database
size, bytes freed, and the keeper/Hermes ratios. Targets: zero failures, max <= 250 ms.

    .venv/bin/python bench/backup_compact.py [--sessions 2000] [--messages 120000]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.homes import bench_home, copy_home, live_writer  # noqa: E402
from hermes_keeper.backup.snapshot import take_backup  # noqa: E402
from hermes_keeper.home import select_profiles  # noqa: E402
from hermes_keeper.run.compact import compact  # noqa: E402
from tests.hermes_env import Hermes  # noqa: E402

HERMES_BACKUP = (
    "import sys; from pathlib import Path; from hermes_cli.backup import _safe_copy_db;"
    " assert _safe_copy_db(Path(sys.argv[1]), Path(sys.argv[2]))"
)
HERMES_OPTIMIZE = (
    "import sys; from pathlib import Path; import hermes_state;"
    " db = hermes_state.SessionDB(Path(sys.argv[1])); db.optimize_fts(); db.close()"
)
HERMES_VACUUM = (
    "import sys; from pathlib import Path; import hermes_state;"
    " db = hermes_state.SessionDB(Path(sys.argv[1])); db.vacuum(); db.close()"
)


def disk_bytes(home: Path) -> int:
    return sum(p.stat().st_size for p in home.glob("state.db*") if ".keeper-" not in p.name)


def beside_writer(home: Path, op: Callable[[], object]) -> tuple[dict, float, object]:
    """Run ``op`` while the gateway stand-in writes; its latency figures, wall time and result.

    The copy just made is flushed first: otherwise the kernel writes its 150 MB back in the
    middle of the measurement and the stand-in's fsync waits 100-200 ms behind it, whatever runs.
    """
    os.sync()
    with live_writer(home) as w:
        t0 = time.perf_counter()
        result = op()
        seconds = time.perf_counter() - t0
    return w.stats, seconds, result


def line(name: str, stats: dict, seconds: float, extra: str) -> str:
    return (
        f"{name:15} failures {stats['failures']}  p50 {stats['p50_ms']:6.1f} ms"
        f"  p99 {stats['p99_ms']:7.1f} ms  max {stats['max_ms']:7.1f} ms  ({stats['writes']} writes)"
        f" | {seconds:6.2f} s  {extra}"
    )


def prepared_for_compact(base: Path, dest: Path) -> Path:
    """A copy switched to INCREMENTAL (one idle VACUUM), then ~70% of its sessions deleted."""
    home = copy_home(base, dest)
    conn = sqlite3.connect(home / "state.db", isolation_level=None)
    conn.execute("PRAGMA auto_vacuum=INCREMENTAL")
    conn.execute("VACUUM")
    conn.execute("DELETE FROM messages WHERE session_id IN (SELECT id FROM sessions WHERE source = 'cron')")
    conn.execute("DELETE FROM sessions WHERE source = 'cron'")
    conn.close()
    return home


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sessions", type=int, default=2000)
    ap.add_argument("--messages", type=int, default=120_000)
    args = ap.parse_args()
    hermes = Hermes()
    base = bench_home(args.sessions, args.messages)
    work = Path(tempfile.mkdtemp(prefix="backup-compact-"))
    try:
        run_all(hermes, base, work, args)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def run_all(hermes: Hermes, base: Path, work: Path, args: argparse.Namespace) -> None:
    db_mb = (base / "state.db").stat().st_size / 1e6
    print(f"home: {args.sessions} sessions, {db_mb:.1f} MB state.db; gateway stand-in at 20 writes/s\n")

    home = copy_home(base, work / "backup")
    stats, k_s, rec = beside_writer(home, lambda: take_backup(select_profiles(home)[0]))
    print(line("keeper backup", stats, k_s, f"{rec.bytes / 1e6:.1f} MB zstd ({rec.bytes / 1e6 / db_mb:.0%})"))
    home = copy_home(base, work / "hermes-backup")
    copy = work / "hermes-copy.db"
    run = [str(hermes.python), "-c", HERMES_BACKUP, str(home / "state.db"), str(copy)]
    stats, h_s, _ = beside_writer(home, lambda: subprocess.run(run, check=True))
    print(line("hermes backup", stats, h_s, f"{copy.stat().st_size / 1e6:.1f} MB uncompressed"))
    print(f"  keeper/hermes time {k_s / h_s:.2f}x, size {rec.bytes / copy.stat().st_size:.2f}x\n")

    home = prepared_for_compact(base, work / "compact")
    before = disk_bytes(home)
    stats, k_s, res = beside_writer(home, lambda: compact(select_profiles(home)[0]))
    k_freed = before - disk_bytes(home)
    print(line("keeper compact", stats, k_s, freed(res, k_freed)))
    # Hermes's own FTS optimize (it runs one every 1000 writes) merges out what deleted messages
    # left in the indexes; the next live compact then returns those pages.
    run = [str(hermes.python), "-c", HERMES_OPTIMIZE, str(home / "state.db")]
    stats, o_s, _ = beside_writer(home, lambda: subprocess.run(run, check=True))
    print(line("hermes optimize", stats, o_s, "(Hermes's own, every 1000 writes)"))
    before = disk_bytes(home)
    stats, k2_s, res = beside_writer(home, lambda: compact(select_profiles(home)[0]))
    k2_freed = before - disk_bytes(home)
    print(line("keeper compact", stats, k2_s, freed(res, k2_freed) + " (after that optimize)"))
    home = prepared_for_compact(base, work / "idle")
    before = disk_bytes(home)
    t0 = time.perf_counter()
    res = compact(select_profiles(home)[0])
    i_s, i_freed = time.perf_counter() - t0, before - disk_bytes(home)
    print(
        f"{'keeper compact':15} with Hermes stopped (full FTS merge in steps)"
        f" | {i_s:6.2f} s  {freed(res, i_freed)}"
    )
    home = prepared_for_compact(base, work / "hermes-vacuum")
    before = disk_bytes(home)
    run = [str(hermes.python), "-c", HERMES_VACUUM, str(home / "state.db")]
    stats, h_s, _ = beside_writer(home, lambda: subprocess.run(run, check=True))
    h_freed = before - disk_bytes(home)
    print(line("hermes vacuum()", stats, h_s, f"freed {h_freed / 1e6:.1f} MB on disk"))
    print(
        f"  bytes freed vs hermes vacuum(): live compact {k_freed / h_freed:.2f}x,"
        f" plus after Hermes's optimize "
        f"{(k_freed + k2_freed) / h_freed:.2f}x, idle compact {i_freed / h_freed:.2f}x; "
        f"live compact time {k_s / h_s:.2f}x"
    )


def freed(res, on_disk: int) -> str:
    return (
        f"freed {res.freed_bytes / 1e6:.1f} MB as reported, {on_disk / 1e6:.1f} MB on disk "
        f"({res.pages_freed} pages, {res.fts_merge_steps} FTS merges,"
        f" WAL left {res.wal_bytes_after / 1e6:.1f} MB)"
    )


if __name__ == "__main__":
    main()
