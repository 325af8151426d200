"""Which keeper events sit beside the gateway's slowest writes: one default run, journal beside latencies.

    .venv/bin/python bench/slow_writes.py [--sessions 5000 --messages 300000 | --size 2GB] [--shape imported]
        [--converted] [--top 12]

The home is ``bench/live_impact.py --journal-mode delete``'s (today's Hermes, DELETE mode, its own
writer at 20 writes/s); ``--converted`` takes it already in incremental auto-vacuum. Prints the
writer's p99 and max, the keeper's longest transaction by kind, then for each of the slowest
writes (``hermes FTS``: one that ran Hermes's own merge pass inside it) the journal events whose
span (an FTS merge round's ``wall_ms`` before its line) reaches within 1 s of it (offsets in s).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.homes import SHAPES, SIZES, converted_home, copy_home, delete_mode_home, live_writer  # noqa: E402
from bench.live_impact import POLICY, base_home  # noqa: E402
from tests.hermes_env import IOT  # noqa: E402

KEYS = ("table", "steps", "lock_ms", "max_step_ms", "pages", "full")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sessions", type=int, default=5000)
    ap.add_argument("--messages", type=int, default=300_000)
    ap.add_argument("--size", choices=SIZES, default=None, help="overrides the two above")
    ap.add_argument("--shape", choices=SHAPES, default="hermes")
    ap.add_argument("--converted", action="store_true")
    ap.add_argument("--top", type=int, default=12)
    args = ap.parse_args()
    base = delete_mode_home(base_home(args), IOT)
    if args.converted:
        base = converted_home(base)
    work = Path(tempfile.mkdtemp(prefix="slow-writes-"))
    home = copy_home(base, work / "home")
    (home / "keeper.toml").write_text(POLICY.replace("backup = false\n", ""))  # the default run
    with live_writer(home, version=IOT, warmup_s=1.0, tail_s=10.0) as writer:
        t0 = time.time()
        run = subprocess.run(
            [sys.executable, "-m", "hermes_keeper", "run", "--json", "--home", str(home)],
            capture_output=True,
            text=True,
        )
        wall = time.time() - t0
    lat = sorted(ms for _, ms in writer.timeline)
    w = json.loads(run.stdout)["profiles"][0]["writer"]
    print(
        f"run {wall:.1f} s, exit {run.returncode}; writes {len(lat)}, p99 {lat[int(len(lat) * 0.99)]:.1f} ms,"
        f" max {lat[-1]:.1f} ms, failures {writer.failures}; keeper longest txn {w['max_txn_ms']:.0f} ms"
        f" {w.get('max_step_ms')}"
    )
    journal = [json.loads(line) for line in (home / "keeper" / "journal.jsonl").read_text().splitlines()]
    for start, ms in sorted(writer.timeline, key=lambda t: t[1], reverse=True)[: args.top]:
        near = [
            (round(j["ts"] - start, 3), j["action"], {k: j[k] for k in KEYS if k in j})
            for j in journal
            if start - 1.0 <= j["ts"]
            and j["ts"] - j.get("wall_ms", 0) / 1000 <= start + ms / 1000 + 1.0
            and j["action"] not in ("file_removed",)
        ]
        own = "  hermes FTS" if start in writer.fts_starts else ""
        print(f"{ms:8.1f} ms at +{start - t0:7.2f} s{own}  {near[:4]}")


if __name__ == "__main__":
    main()
