"""How long ``report`` takes on a big home, warm and with a cold page cache.

Default: a ~500 MB home with Hermes's schema built once with ``demo.build_home`` (cached in
.cache/bench/); ``--size 2GB|5GB --shape imported`` takes the cached big homes of
``bench/homes.py`` instead. Prints the database size, the median of 3 (``--runs``) ``build_report`` timings
with where the time goes, the same from a cold page cache (``posix_fadvise(DONTNEED)`` on the
home's ``state.db*`` only: no root needed and no other process's cache dropped), and the whole
``hermes-keeper report --json`` command next to Hermes's own ``hermes sessions stats`` (which only
counts sessions and messages). Targets: <= 3 s warm, <= 5 s cold at 5 GB.

Before timing, the home gets a ``keeper/`` folder and one full ``quick_check`` recorded, as any
``plan``, ``run`` or ``compact`` leaves it, and one report that records the ``dbstat`` breakdown
(timed apart, "first report"): the state a home the keeper looks after is in.

    .venv/bin/python bench/report_speed.py [--sessions 4000] [--messages-per-session 100]
    .venv/bin/python bench/report_speed.py --size 5GB --shape imported
    .venv/bin/python bench/report_speed.py --size 5GB --shape transcripts --row

``--row`` prints only the table row of docs/big-homes.md: the commands ``report``, ``plan`` and
``check`` as an operator runs them (``--json``, a new process each: Python's start included),
warm, median of ``--runs``, wall and CPU seconds (the CPU of the child: on a shared machine the
wall time also holds the waits for a core). Targets: report and plan <= 3 s, check <= 1 s.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.homes import CACHE, SHAPES, SIZES, bench_home  # noqa: E402
from hermes_keeper import demo, facts, report  # noqa: E402
from hermes_keeper.home import select_profiles  # noqa: E402
from hermes_keeper.run.message_stats import StatsCache  # noqa: E402
from hermes_keeper.run.survey import survey_profile  # noqa: E402
from hermes_keeper.sqlite.connect import connect_ro  # noqa: E402
from hermes_keeper.sqlite.holders import find_holders  # noqa: E402
from hermes_keeper.sqlite.schema import inspect  # noqa: E402
from tests.hermes_env import Hermes  # noqa: E402


def drop_cache(home: Path) -> None:
    """Evict the home's database files from the page cache (clean pages only: they were synced)."""
    for p in home.glob("state.db*"):
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


RUNS = 3


def median_time(fn, runs: int | None = None, before=None) -> tuple[float, list[float]]:
    times = []
    for _ in range(runs or RUNS):
        if before:
            before()
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), times


def command(argv: list[str], home: Path, check: bool = True):
    """``argv`` as a function that runs it on ``home``; ``check``: a non-zero exit is an error
    (not for ``check``, whose exit is the home's status)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")} | {"HERMES_HOME": str(home)}
    env["PYTHONPATH"] = str(ROOT / "src")  # this checkout's keeper, whatever the venv's install points at
    return lambda: subprocess.run(argv, env=env, check=check, capture_output=True)


def _shown(times: list[float]) -> str:
    return ", ".join(f"{t:.2f}" for t in times)


def _child_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed_command(argv: list[str], home: Path) -> tuple[float, float]:
    """Median wall and CPU seconds of ``argv`` run :data:`RUNS` times, after one run to warm up."""
    run = command(argv, home, check=argv[1] != "check")
    run()
    walls, cpus = [], []
    for _ in range(RUNS):
        cpu, t0 = _child_cpu(), time.perf_counter()
        run()
        walls.append(time.perf_counter() - t0)
        cpus.append(_child_cpu() - cpu)
    return statistics.median(walls), statistics.median(cpus)


def bench_row(home: Path, label: str) -> None:
    """One row of docs/big-homes.md's table: report, plan and check on ``home``, warm."""
    keeper = str(ROOT / ".venv" / "bin" / "hermes-keeper")
    schema = inspect(home / "state.db")
    files = sum(1 for _ in (home / "sessions").iterdir()) if (home / "sessions").is_dir() else 0
    sessions = report.build_report(select_profiles(home, env={})[0]).sessions.total
    cells = [label, f"{schema.db_bytes / 1e6:,.0f} MB", f"{sessions:,}", f"{files:,}"]
    for cmd in ("report", "plan", "check"):
        wall, cpu = timed_command([keeper, cmd, "--json", "--home", str(home)], home)
        cells.append(f"{wall:.2f} s ({cpu:.2f} s CPU)")
    print("| " + " | ".join(cells) + " |")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sessions", type=int, default=4000)
    ap.add_argument("--messages-per-session", type=int, default=100)
    ap.add_argument("--size", choices=SIZES, default=None, help="a cached big home of bench/homes.py")
    ap.add_argument("--shape", choices=SHAPES, default="imported")
    ap.add_argument("--no-hermes", action="store_true", help="skip `hermes sessions stats`")
    ap.add_argument("--runs", type=int, default=3, help="timings per figure (the median is shown)")
    ap.add_argument("--row", action="store_true", help="only the report/plan/check row of big-homes.md")
    args = ap.parse_args()
    global RUNS
    RUNS = args.runs
    if args.size:
        home = bench_home(*SIZES[args.size], shape=args.shape)
    else:
        home = CACHE / f"report-{args.sessions}-{args.messages_per_session}"
        if not (home / "state.db").exists():
            t0 = time.perf_counter()
            spec = demo.generate(
                time.time(), sessions=args.sessions, messages_per_session=args.messages_per_session
            )
            demo.build_home(home, spec)
            print(f"built in {time.perf_counter() - t0:.0f} s")
    profile = select_profiles(home, env={})[0]
    profile.fs.private_dir("keeper")
    if facts.last_check(profile.fs) is None:
        t0 = time.perf_counter()
        facts.full_check(profile.fs, profile.db_path)
        print(f"full quick_check (recorded, as plan/run/compact do): {time.perf_counter() - t0:.2f} s")
    if args.row:
        bench_row(home, f"{args.size or home.name} {args.shape if args.size else ''}".strip())
        return
    last: list[report.Report] = []

    def whole():
        last[:] = [report.build_report(profile)]

    first, _ = median_time(whole, runs=1)
    rep = last[0]
    print(
        f"state.db {rep.disk.state_db / 1e6:.0f} MB, {rep.sessions.total} sessions, "
        f"{rep.sessions.messages} messages; first report {first:.2f} s"
    )
    schema = inspect(profile.db_path)

    def objects():
        conn = connect_ro(profile.db_path)
        try:
            report.object_sizes(profile, conn, schema.used_bytes, time.time())
        finally:
            conn.close()

    def cached_stats():
        """The report's message statistics alone: the cache brought up to date (nothing new here)."""
        conn = connect_ro(profile.db_path)
        try:
            counts = dict(conn.execute("SELECT id, message_count FROM sessions"))
            StatsCache(profile.fs, profile.db_path).stats(conn, schema, counts, time.time(), stepped=False)
        finally:
            conn.close()

    budget = report.CHECK_BUDGET_S
    phases = {
        "inspect (as the report: messages' timestamps from the cache)": lambda: inspect(
            profile.db_path, check_timestamps=False
        ),
        # As the report calls it: state.db's check for the malformed-copy rule is the bounded one.
        "survey (sessions + cached message stats + files)": lambda: survey_profile(
            profile, schema, db_check=lambda: facts.last_check(profile.fs), check_budget_s=budget, cached=True
        ),
        "survey, fresh message stats (as plan/run; their full check apart)": lambda: survey_profile(
            profile, schema, db_check=lambda: facts.last_check(profile.fs), check_budget_s=budget
        ),
        "message stats alone, from the cache": cached_stats,
        "byte breakdown (recorded dbstat)": objects,
        "quick_check (bounded)": lambda: facts.bounded_check(profile.fs, profile.db_path, budget),
        "holders (psutil)": lambda: find_holders(profile.db_path),
    }
    for label, before in (("warm", None), ("cold", lambda: drop_cache(home))):
        if before is None:
            whole()  # warm the cache
        total, times = median_time(whole, before=before)
        print(f"build_report {label}: {total:.2f} s, median of {RUNS} ({_shown(times)})")
        for name, fn in phases.items():
            print(f"  {label} {name}: {median_time(fn, before=before)[0]:.2f} s")

    keeper = [str(ROOT / ".venv" / "bin" / "hermes-keeper"), "report", "--json", "--home", str(home)]
    command(keeper, home)()  # the cold phases above left the cache cold: warm it first
    ours, _ = median_time(command(keeper, home))
    cold, times = median_time(command(keeper, home), before=lambda: drop_cache(home))
    print(f"hermes-keeper report --json: warm {ours:.2f} s, cold {cold:.2f} s ({_shown(times)}) median")
    if not args.no_hermes:
        hermes = [str(Hermes().python.parent / "hermes"), "sessions", "stats"]
        theirs, _ = median_time(command(hermes, home))
        print(f"hermes sessions stats (warm) {theirs:.2f} s: ratio {ours / theirs:.2f}")


if __name__ == "__main__":
    main()
