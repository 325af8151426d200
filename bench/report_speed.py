"""How long ``report`` takes on a big home (~500 MB state.db, Hermes's schema).

Builds the home once with ``demo.build_home`` (cached in .cache/bench/), then prints the
database size and the median of 3 ``build_report`` timings. Target: under 3 s here.

    .venv/bin/python bench/report_speed.py [--sessions 4000] [--messages-per-session 100]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from hermes_keeper import demo  # noqa: E402
from hermes_keeper.discovery import select_profiles  # noqa: E402
from hermes_keeper.report import build_report  # noqa: E402

CACHE = Path(__file__).resolve().parent.parent / ".cache" / "bench"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sessions", type=int, default=4000)
    ap.add_argument("--messages-per-session", type=int, default=100)
    args = ap.parse_args()
    home = CACHE / f"report-{args.sessions}-{args.messages_per_session}"
    if not (home / "state.db").exists():
        t0 = time.perf_counter()
        demo.build_home(
            home,
            demo.generate(
                time.time(), sessions=args.sessions, messages_per_session=args.messages_per_session
            ),
        )
        print(f"built in {time.perf_counter() - t0:.0f} s")
    profile = select_profiles(home)[0]
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        rep = build_report(profile)
        times.append(time.perf_counter() - t0)
    print(
        f"state.db {rep['disk']['state_db'] / 1e6:.0f} MB, {rep['sessions']['total']} sessions, "
        f"{rep['sessions']['messages']} messages: report {statistics.median(times):.2f} s (median of 3; "
        f"target < 3 s)"
    )


if __name__ == "__main__":
    main()
