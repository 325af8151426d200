"""A gateway stand-in: appends messages through Hermes's own SessionDB at a fixed rate.

Runs under the Python of a hermes-agent virtualenv (see bench/homes.py). Records the
latency of every ``append_message`` call and every failure (Hermes gives up on a write
after ~15 s of ``database is locked``: that is a lost message), and which calls ran
Hermes's own periodic FTS5 work inside the call (every 1,000 writes of a SessionDB: 0.19's
'optimize', on a big home seconds alone, keeper or not; 0.22's bounded ``'merge'`` passes),
and which ran its PASSIVE checkpoint (every 50 writes, inside the call: after an optimize it
copies the rewritten index out of the WAL; a no-op in DELETE mode, so not counted there).
Stops when the stop file appears, then writes its figures as JSON.
"""

import argparse
import json
import os
import sqlite3
import time
from pathlib import Path

import hermes_state


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("home", type=Path)
    ap.add_argument("--rate", type=float, default=20.0)
    ap.add_argument("--ready", type=Path, required=True)
    ap.add_argument("--stop", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    db = hermes_state.SessionDB(args.home / "state.db")
    sid = f"standin_{os.getpid()}"
    db.create_session(sid, "telegram")
    latencies, started, failed, errors, optimized, checkpointed = [], [], [], [], [], []
    every = getattr(db, "_OPTIMIZE_EVERY_N_WRITES", 0) or getattr(db, "_FTS_MERGE_EVERY_N_WRITES", 0)
    probe = sqlite3.connect(args.home / "state.db")
    wal = probe.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    probe.close()
    every_checkpoint = getattr(db, "_CHECKPOINT_EVERY_N_WRITES", 0) if wal else 0
    interval = 1.0 / args.rate
    args.ready.write_text("ready")
    next_at = time.perf_counter()
    n = 0
    while not args.stop.exists():
        started.append(time.time())
        t0 = time.perf_counter()
        try:
            db.append_message(
                sid, "user" if n % 2 == 0 else "assistant", f"live message {n} from the gateway"
            )
        except Exception as exc:  # a failed write is exactly what we measure
            errors.append(f"{type(exc).__name__}: {exc}")
            failed.append(n)
        latencies.append((time.perf_counter() - t0) * 1000.0)
        count = getattr(db, "_write_count", 1)
        if every and count % every == 0 and n not in failed:
            optimized.append(n)
        elif every_checkpoint and count % every_checkpoint == 0 and n not in failed:
            checkpointed.append(n)
        n += 1
        next_at += interval
        time.sleep(max(0.0, next_at - time.perf_counter()))
    db.close()
    args.out.write_text(
        json.dumps(
            {
                "latencies_ms": latencies,
                "started": started,
                "failed": failed,
                "optimized": optimized,
                "checkpointed": checkpointed,
                "errors": errors[:20],
            }
        )
    )


if __name__ == "__main__":
    main()
