"""Off-host copies through restic on a bench home: the nightly addition, and the gateway beside a push.

On copies of a home built by real Hermes (bench/homes.py), with a local restic repository:

  night 1  ``Profile.run()`` (backup, prune, push): the first full copy goes off the host
  day      Hermes adds a day's sessions (its own SessionDB, 1/75 of the home's)
  night 2  the run again, its retention one day shorter (a day's sessions age out): what restic
           adds to the repository, against one full snapshot of state.db (target: <= 10%)
  gateway  night 1's run beside the gateway stand-in (20 writes/s), and the same run without
           ``[offsite]`` on an identical copy: writer failures, p99 and max (target: the same)

    .venv/bin/python bench/offsite.py [--sessions 5000] [--messages 300000]
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

from bench.backup_compact import beside_writer, line  # noqa: E402
from bench.homes import bench_home, copy_home  # noqa: E402
from hermes_keeper import demo  # noqa: E402
from hermes_keeper.home import select_profiles  # noqa: E402
from tests.hermes_env import Hermes  # noqa: E402
from tests.offsite_repo import init_repository, offsite_toml  # noqa: E402

DAY = 86400.0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sessions", type=int, default=5000)
    ap.add_argument("--messages", type=int, default=300_000)
    args = ap.parse_args()
    base = bench_home(args.sessions, args.messages)
    work = Path(tempfile.mkdtemp(prefix="offsite-bench-"))
    try:
        run_all(base, work, args)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def run_all(base: Path, work: Path, args: argparse.Namespace) -> None:
    db_mb = (base / "state.db").stat().st_size / 1e6
    print(f"home: {args.sessions} sessions, {db_mb:.1f} MB state.db; restic {restic_version()}\n")
    repo = str(work / "repo")
    pw = init_repository(repo, work)
    plain = copy_home(base, work / "plain")
    stats, seconds, _ = beside_writer(plain, lambda: select_profiles(plain)[0].run())
    print(line("run, no push", stats, seconds, ""))
    home = copy_home(base, work / "home")
    (home / "keeper.toml").write_text(offsite_toml(repo, pw, "bench"))
    stats, seconds, night1 = beside_writer(home, lambda: select_profiles(home)[0].run())
    push = night1.offsite
    print(line("run + push", stats, seconds, f"push {push['seconds']} s"))
    full = raw_bytes(home, night1.backup)
    added = push["added_bytes"] / 1e6
    print(f"\nnight 1: restic added {added:.1f} MB (a state.db snapshot is {full / 1e6:.1f} MB)")
    day = demo.generate(time.time(), sessions=max(1, args.sessions // 75), days=1, seed=11)
    Hermes().run(home, [{"op": "build", "sessions": day.sessions}], timeout=3600)
    profile = select_profiles(home)[0]
    policy = profile.config()
    policy.retention_s = {k: max(0.0, v - DAY) for k, v in policy.retention_s.items()}
    night2 = profile.run(policy)
    push, full = night2.offsite, raw_bytes(home, night2.backup)
    print(
        f"night 2: +{len(day.sessions)} sessions, {len(night2.prune.pruned)} pruned; restic added "
        f"{push['added_bytes'] / 1e6:.1f} MB of a {full / 1e6:.1f} MB snapshot = "
        f"{100 * push['added_bytes'] / full:.1f}% (target <= 10%); push {push['seconds']} s"
    )


def raw_bytes(home: Path, backup: str | None) -> int:
    rows = select_profiles(home)[0].backups()["backups"]
    return next(b["raw_bytes"] for b in rows if b["name"] == backup)


def restic_version() -> str:
    return subprocess.run(["restic", "version"], capture_output=True, text=True).stdout.split()[1]


if __name__ == "__main__":
    main()
