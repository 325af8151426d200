"""The FTS5 merge a run ends with, in budgeted steps, against one 'optimize' of the same index.

A run deletes in short transactions and merges the FTS5 indexes in steps of about the
writer's budget (``fts.merge_round``); the floor does it all in one transaction. Which part of
the gap is the merge's? On two copies of a cached home (``bench/homes.py``; never changed) the
keeper's 7-day selection (as ``bench/live_impact.py``) is deleted in one transaction, the
floor's way; then one copy gets FTS5's 'optimize' of each index in one transaction, the other the
hold's full merge (``usermerge`` 2, then ``'merge', -N`` and ``'merge', N`` steps through a
``Writer`` with the default budget). No other process runs: the figures are the work alone.

    .venv/bin/python bench/final_merge.py [--size 240MB|2GB|5GB] [--shape imported|hermes]
"""

from __future__ import annotations

import argparse
import shutil
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.homes import SHAPES, SIZES, bench_home, copy_home  # noqa: E402
from bench.live_impact import floor_delete, selection  # noqa: E402
from hermes_keeper.sqlite import fts  # noqa: E402
from hermes_keeper.sqlite.schema import inspect  # noqa: E402
from hermes_keeper.sqlite.writer import Writer  # noqa: E402


def optimize(db: Path, table: str) -> float:
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        t0 = time.perf_counter()
        conn.execute(f"INSERT INTO {table}({table}) VALUES('optimize')")
        return time.perf_counter() - t0
    finally:
        conn.close()


def budgeted(w: Writer, table: str) -> tuple[float, float, fts.Round]:
    """(wall s, lock s, the round) of the hold's full merge of ``table``."""
    t0, held = time.perf_counter(), w.stats.total_txn_ms
    r = fts.merge_round(w, table, fts.start_full_merge(w, table), full=True)
    return time.perf_counter() - t0, (w.stats.total_txn_ms - held) / 1000, r


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", choices=SIZES, default="240MB")
    ap.add_argument("--shape", choices=SHAPES, default="imported")
    args = ap.parse_args()
    src = bench_home(*SIZES[args.size], shape=args.shape)
    with tempfile.TemporaryDirectory(dir=src.parent) as tmp:
        ids = selection(copy_home(src, Path(tmp) / "select"))
        shutil.rmtree(Path(tmp) / "select")
        homes = {}
        for way in ("optimize", "steps"):
            homes[way] = copy_home(src, Path(tmp) / way)
            t0 = time.perf_counter()
            floor_delete(homes[way], ids)
            print(f"{way}: floor delete of {len(ids)} sessions {time.perf_counter() - t0:.1f} s", flush=True)
        db = homes["optimize"] / "state.db"
        tables = fts.fts5_tables(inspect(db, check_timestamps=False))
        with Writer(homes["steps"] / "state.db", synchronous="NORMAL") as w:
            for table in tables:
                pages = fts.levels(w.conn, table)
                one = optimize(db, table)
                wall, lock, r = budgeted(w, table)
                print(
                    f"{table} ({sum(map(len, pages or []))} segments, {sum(map(sum, pages or [])):,} pages):"
                    f" optimize {one:.2f} s in one transaction; budgeted {r.steps} steps, lock {lock:.2f} s"
                    f" ({lock / one:.2f}x), wall {wall:.2f} s, longest step {r.max_step_ms:.0f} ms",
                    flush=True,
                )


if __name__ == "__main__":
    main()
