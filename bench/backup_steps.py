"""The page-for-page backup beside a live gateway, against the ``VACUUM INTO`` one it replaced.

On copies of a home built by real Hermes, with the gateway stand-in appending through Hermes's
own ``SessionDB.append_message`` at 20 writes/s, ``take_backup`` runs ``--rounds`` times each
way, alternating (the machine is shared and noisy): as it is (SQLite's backup API in 4 MiB steps
inside one read transaction) and as it was (one ``VACUUM INTO``). Prints the writer's p50 / p99 /
max and failures, the backup's time and size, and the medians' ratios (page copy / VACUUM INTO).

    .venv/bin/python bench/backup_steps.py [--sessions 2000 --messages 120000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.backup_compact import beside_writer, line  # noqa: E402
from bench.homes import bench_home, copy_home  # noqa: E402
from bench.nights import vacuum_into  # noqa: E402
from hermes_keeper.backup import snapshot  # noqa: E402
from hermes_keeper.home import select_profiles  # noqa: E402

PAGE_COPY = snapshot.copy_pages


def one(base: Path, work: Path, how: str, i: int) -> tuple[dict, float, int]:
    snapshot.copy_pages = PAGE_COPY if how == "page copy" else vacuum_into
    home = copy_home(base, work / f"{how.replace(' ', '-')}-{i}")
    try:
        stats, seconds, rec = beside_writer(home, lambda: snapshot.take_backup(select_profiles(home)[0]))
    finally:
        snapshot.copy_pages = PAGE_COPY
    shutil.rmtree(home)
    return stats, seconds, rec.bytes


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sessions", type=int, default=2000)
    ap.add_argument("--messages", type=int, default=120_000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    snapshot.source_mark = lambda _db, _now: ""  # every round takes its backup
    base = bench_home(args.sessions, args.messages)
    work = Path(tempfile.mkdtemp(prefix="backup-steps-"))
    print(f"home: {(base / 'state.db').stat().st_size / 1e6:.1f} MB state.db; stand-in at 20 writes/s")
    got: dict[str, list[tuple[dict, float, int]]] = {"page copy": [], "VACUUM INTO": []}
    try:
        for i in range(args.rounds):
            for how in got:
                got[how].append(r := one(base, work, how, i))
                print(line(how, r[0], r[1], f"{r[2] / 1e6:.1f} MB zstd"))
    finally:
        shutil.rmtree(work, ignore_errors=True)

    def med(how: str, key: str) -> float:
        return statistics.median(s[key] for s, _t, _b in got[how])

    for key in ("p50_ms", "p99_ms", "max_ms"):
        print(f"{key}: page copy {med('page copy', key):.1f} / VACUUM INTO {med('VACUUM INTO', key):.1f} ms")
    secs = [statistics.median(t for _s, t, _b in got[h]) for h in got]
    print(f"time: {secs[0]:.2f} / {secs[1]:.2f} s ({secs[0] / secs[1]:.2f}x)")
    print(f"failures: {sum(s['failures'] for h in got for s, _t, _b in got[h])}")


if __name__ == "__main__":
    main()
