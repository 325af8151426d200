"""Which keeper events sit beside the gateway's slowest writes: one default run, journal beside latencies.

    .venv/bin/python bench/slow_writes.py [--sessions 5000 --messages 300000 | --size 2GB] [--shape imported]
        [--converted] [--top 12]

The home is ``bench/live_impact.py --journal-mode delete``'s (today's Hermes, DELETE mode, its own
writer at 20 writes/s); ``--converted`` takes it already in incremental auto-vacuum. Prints the
writer's p99 and max, the keeper's longest transaction by kind, each full merge's journal figures
(its steps over the budget, its longest doclist), every write attributed to what the keeper was
doing when it started (:func:`phases`), with each phase's p99 and writes over 100 ms (where the
run's p99 comes from), then for each of the slowest writes (``hermes FTS``: one that ran Hermes's
own merge pass inside it) the journal events whose span (an FTS merge round's ``wall_ms`` before
its line) reaches within 1 s of it (offsets in s). The home's copy is removed at the end.
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
#: The p99 target of issue 18: a write over it counts against the run's p99.
SLOW_MS = 100.0


def phases(journal: list[dict]) -> list[tuple[str, float, float]]:
    """The keeper's phases as (name, start, end) from its journal, the narrowest first: each FTS
    merge round and each index's full merge (its ``wall_ms`` before its line), the final merge
    around those full merges (``final_merge_s`` before ``fts_restored``), compact (``seconds``
    before its line), and the run from its first to its last line (deletes, archiving, the rest)."""
    spans = [
        ("full merge" if j["full"] else "merge round", j["ts"] - j["wall_ms"] / 1000, j["ts"])
        for j in journal
        if j["action"] == "fts_merge"
    ]
    spans += [
        ("final merge", j["ts"] - j["final_merge_s"], j["ts"])
        for j in journal
        if j["action"] == "fts_restored"
    ]
    spans += [("compact", j["ts"] - j["seconds"], j["ts"]) for j in journal if j["action"] == "compact"]
    spans.sort(key=lambda s: s[2] - s[1])
    return [*spans, ("deletes and the rest", journal[0]["ts"], journal[-1]["ts"])]


def by_phase(
    timeline: list[tuple[float, float]], spans: list[tuple[str, float, float]], own: set[float]
) -> None:
    """Print per phase: writes, p50, p99, max and the writes over :data:`SLOW_MS` (Hermes's own
    FTS passes apart, as ``hermes FTS``)."""
    groups: dict[str, list[float]] = {}
    for start, ms in timeline:
        name = (
            "hermes FTS"
            if start in own
            else next((n for n, a, b in spans if a <= start <= b), "outside the journal")
        )
        groups.setdefault(name, []).append(ms)
    slow_all = sum(ms > SLOW_MS for _, ms in timeline)
    print(f"{'phase':<22} {'writes':>7} {'p50':>7} {'p99':>8} {'max':>8} {'>100ms':>7} {'of all >100':>11}")
    for name, lat in sorted(groups.items(), key=lambda g: -sum(ms > SLOW_MS for ms in g[1])):
        lat.sort()
        slow = sum(ms > SLOW_MS for ms in lat)
        print(
            f"{name:<22} {len(lat):7d} {lat[len(lat) // 2]:7.1f} {lat[int(len(lat) * 0.99)]:8.1f}"
            f" {lat[-1]:8.1f} {slow:7d} {slow / max(slow_all, 1):10.0%}"
        )


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
    with tempfile.TemporaryDirectory(prefix="slow-writes-") as work:  # a 5 GB home's copy, removed
        home = copy_home(base, Path(work) / "home")
        (home / "keeper.toml").write_text(POLICY.replace("backup = false\n", ""))  # the default run
        with live_writer(home, version=IOT, warmup_s=1.0, tail_s=10.0) as writer:
            t0 = time.time()
            run = subprocess.run(
                [sys.executable, "-m", "hermes_keeper", "run", "--json", "--home", str(home)],
                capture_output=True,
                text=True,
            )
            wall = time.time() - t0
        journal = [json.loads(line) for line in (home / "keeper" / "journal.jsonl").read_text().splitlines()]
    lat = sorted(ms for _, ms in writer.timeline)
    w = json.loads(run.stdout)["profiles"][0]["writer"]
    print(
        f"run {wall:.1f} s, exit {run.returncode}; writes {len(lat)}, p99 {lat[int(len(lat) * 0.99)]:.1f} ms,"
        f" max {lat[-1]:.1f} ms, failures {writer.failures}; keeper longest txn {w['max_txn_ms']:.0f} ms"
        f" {w.get('max_step_ms')}"
    )
    for j in journal:
        if j["action"] == "fts_merge" and j["full"]:
            print("full merge:", {k: j[k] for k in (*KEYS, "over_budget", "longest_doclist_pages")})
    by_phase(writer.timeline, phases(journal), writer.fts_starts)
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
