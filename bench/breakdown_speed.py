"""``report`` right after a run that moved the used bytes by more than 10%: the byte breakdown.

The recorded ``dbstat`` breakdown no longer stands in once the used bytes moved that far, and
``dbstat`` reads every page (~20 s at 2 GB cold). ``report`` gives it ``report.DBSTAT_BUDGET_S``;
past that it shows the recorded breakdown scaled, labelled as an estimate with its age. On a copy
of the cached home (``bench/homes.py``; the cache is never changed): a ``keeper/`` folder, one
report that records the breakdown, a ``run`` (backup off, the default retention: cron after 7 days,
then its compact), then ``build_report`` from a cold page cache (the next morning's report) and
warm (median of ``--runs``), and last, for comparison, the cold one again with the breakdown from
before the run and an unbounded ``dbstat`` (what the first report after such a run did).

    .venv/bin/python bench/breakdown_speed.py [--size 2GB] [--shape imported] [--runs 3]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.homes import SHAPES, SIZES, bench_home, copy_home  # noqa: E402
from bench.report_speed import drop_cache, median_time  # noqa: E402
from hermes_keeper import report  # noqa: E402
from hermes_keeper.home import select_profiles  # noqa: E402
from hermes_keeper.report_types import Report  # noqa: E402
from hermes_keeper.sqlite.schema import inspect  # noqa: E402

UNBOUNDED_S = 3600.0


def _breakdown(rep: Report) -> str:
    db = rep.database
    if not db.per_object:
        return "unknown"
    age = rep.generated_at - db.objects_measured_at
    return f"{'estimate' if db.objects_estimated else 'measured'}, {age:.0f} s old"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", choices=SIZES, default="2GB")
    ap.add_argument("--shape", choices=SHAPES, default="imported")
    ap.add_argument("--runs", type=int, default=3, help="warm timings (the median is shown)")
    args = ap.parse_args()
    src = bench_home(*SIZES[args.size], shape=args.shape)
    with tempfile.TemporaryDirectory(dir=src.parent) as tmp:
        home = copy_home(src, Path(tmp) / "home")
        (home / "keeper").mkdir(mode=0o700)
        (home / "keeper.toml").write_text("backup = false\n")
        profile = select_profiles(home, env={})[0]
        before = inspect(profile.db_path).used_bytes
        report.DBSTAT_BUDGET_S = UNBOUNDED_S
        t0 = time.perf_counter()
        profile.report()  # records the breakdown, as the reports before a run leave it
        first = time.perf_counter() - t0
        report.DBSTAT_BUDGET_S = 1.0
        t0 = time.perf_counter()
        result = profile.run()
        ran = time.perf_counter() - t0
        after = inspect(profile.db_path).used_bytes
        print(f"{args.size} {args.shape}: used {before / 1e6:.0f} MB -> {after / 1e6:.0f} MB")
        print(f"  ({100 * (before - after) / before:.0f}% moved; run {ran:.0f} s, {result.summary()})")
        print(f"  first report (records the breakdown): {first:.2f} s")
        facts = home / "keeper" / "facts.json"
        recorded = facts.read_bytes()  # the breakdown from before the run
        reps: list[Report] = []
        cold, _ = median_time(lambda: reps.append(profile.report()), 1, before=lambda: drop_cache(home))
        print(f"  report after the run, cold: {cold:.2f} s; breakdown: {_breakdown(reps[-1])}")
        warm, times = median_time(lambda: reps.append(profile.report()), args.runs)
        shown = ", ".join(f"{t:.2f}" for t in times)
        print(f"  then warm: {warm:.2f} s ({shown}); breakdown: {_breakdown(reps[-1])}")
        facts.write_bytes(recorded)
        report.DBSTAT_BUDGET_S = UNBOUNDED_S
        full, _ = median_time(lambda: reps.append(profile.report()), 1, before=lambda: drop_cache(home))
        print(f"  the same, dbstat unbounded, cold: {full:.2f} s; breakdown: {_breakdown(reps[-1])}")


if __name__ == "__main__":
    main()
