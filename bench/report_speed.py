"""How long ``report`` takes on a big home (~500 MB state.db, Hermes's schema).

Builds the home once with ``demo.build_home`` (cached in .cache/bench/), then prints the
database size, the median of 3 ``build_report`` timings with where the time goes, and the
whole ``hermes-keeper report --json`` command next to Hermes's own ``hermes sessions stats``
(which only counts sessions and messages) in the same run. Target: under 3 s here.

    .venv/bin/python bench/report_speed.py [--sessions 4000] [--messages-per-session 100]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hermes_keeper import demo, report  # noqa: E402
from hermes_keeper.home import select_profiles  # noqa: E402
from hermes_keeper.run.survey import survey_profile  # noqa: E402
from hermes_keeper.sqlite.holders import find_holders  # noqa: E402
from hermes_keeper.sqlite.schema import inspect  # noqa: E402
from tests.hermes_env import Hermes  # noqa: E402

CACHE = ROOT / ".cache" / "bench"


def median_time(fn, runs: int = 3) -> tuple[float, list[float]]:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), times


def command(argv: list[str], home: Path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")} | {"HERMES_HOME": str(home)}
    return lambda: subprocess.run(argv, env=env, check=True, capture_output=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sessions", type=int, default=4000)
    ap.add_argument("--messages-per-session", type=int, default=100)
    args = ap.parse_args()
    home = CACHE / f"report-{args.sessions}-{args.messages_per_session}"
    if not (home / "state.db").exists():
        t0 = time.perf_counter()
        spec = demo.generate(
            time.time(), sessions=args.sessions, messages_per_session=args.messages_per_session
        )
        demo.build_home(home, spec)
        print(f"built in {time.perf_counter() - t0:.0f} s")
    profile = select_profiles(home, env={})[0]
    rep: dict = {}

    def whole():
        rep.update(report.build_report(profile))

    total, times = median_time(whole)
    print(
        f"state.db {rep['disk']['state_db'] / 1e6:.0f} MB, {rep['sessions']['total']} sessions, "
        f"{rep['sessions']['messages']} messages"
    )
    print(f"build_report: {total:.2f} s median of 3 ({', '.join(f'{t:.2f}' for t in times)}); target < 3 s")
    schema = inspect(profile.db_path)
    phases = {
        "inspect (incl. timestamp scan)": lambda: inspect(profile.db_path),
        "survey (sessions + message stats + files)": lambda: survey_profile(profile, schema),
        "holders (psutil)": lambda: find_holders(profile.db_path),
    }
    for name, fn in phases.items():
        print(f"  {name}: {median_time(fn)[0]:.2f} s")

    keeper = [str(ROOT / ".venv" / "bin" / "hermes-keeper"), "report", "--json", "--home", str(home)]
    hermes = [str(Hermes().python.parent / "hermes"), "sessions", "stats"]
    ours, _ = median_time(command(keeper, home))
    theirs, _ = median_time(command(hermes, home))
    print(
        f"commands (median of 3): hermes-keeper report --json {ours:.2f} s, "
        f"hermes sessions stats {theirs:.2f} s: ratio {ours / theirs:.2f}"
    )


if __name__ == "__main__":
    main()
