"""Search speed over a large archive: 10,000 archived sessions by default.

Builds (once, cached in .cache/bench/) an archive from demo-home payloads, then prints
the archive size and the median of 3 timings per query for ``archive_query.search``
(streaming decompression + sha256 check + byte search; target < 5 s).

    .venv/bin/python bench/archive_search.py [--sessions 10000]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from hermes_keeper import demo  # noqa: E402
from hermes_keeper.archive import Archive, read_payload  # noqa: E402
from hermes_keeper.archive_query import search  # noqa: E402
from hermes_keeper.db import connect_ro, read_txn  # noqa: E402
from hermes_keeper.schema import inspect  # noqa: E402

CACHE = Path(__file__).resolve().parent.parent / ".cache" / "bench"


def build(sessions: int) -> Path:
    path = CACHE / f"archive-{sessions}.db"
    if path.exists():
        return path
    CACHE.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp())
    demo.build_home(tmp / "h", demo.generate(time.time(), sessions=sessions, messages_per_session=20))
    schema = inspect(tmp / "h" / "state.db")
    conn = connect_ro(tmp / "h" / "state.db")
    ids = [r[0] for r in conn.execute("SELECT id FROM sessions")]
    with Archive(path.with_suffix(".tmp")) as store, read_txn(conn):
        for i in range(0, len(ids), 500):
            store.put([read_payload(conn, schema, sid) for sid in ids[i : i + 500]])
    conn.close()
    path.with_suffix(".tmp").rename(path)
    shutil.rmtree(tmp)
    return path


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sessions", type=int, default=10_000)
    args = ap.parse_args()
    path = build(args.sessions)
    with Archive(path, create=False) as store:
        n = sum(1 for _ in store.entries())
        raw = store.conn.execute("SELECT sum(raw_bytes), sum(stored_bytes) FROM archived_sessions").fetchone()
        print(
            f"archive: {n} sessions, {path.stat().st_size / 1e6:.1f} MB on disk "
            f"(payloads {raw[0] / 1e6:.1f} MB raw -> {raw[1] / 1e6:.1f} MB zstd)"
        )
        for query in ("kubernetes", "weather summary", "no-such-word-anywhere", "ÜNKNOWN"):
            times, hits = [], 0
            for _ in range(3):
                t0 = time.perf_counter()
                hits = sum(1 for _ in search(store, query))
                times.append(time.perf_counter() - t0)
            print(f"search {query!r:26} {statistics.median(times):6.2f} s  ({hits} sessions)")


if __name__ == "__main__":
    main()
