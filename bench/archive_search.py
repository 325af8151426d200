"""Archive search over 10,000 (``--sessions``: 50,000 for issue 37) archived sessions: the method
we use, and the ones we did not.

Builds (once, cached in .cache/bench/archive-N-zstd3/, the index beside it) an archive of
demo-home payloads (the schema real Hermes 0.19.0 creates, ``hermes_keeper.demo.generate``
sessions) written by the keeper's own ``Archive.put``, then prints the archive size and, median
of 3 runs:

- ``archive_query.search`` with its index (the method used, ``archive/index.py``: an FTS5
  trigram index without positions gives the candidates newest first, each is confirmed in its
  payload until the first match past ``--limit``): the first (cold) search, which builds the
  index, the index's size, then each query;
- the same search without the index (every payload streamed newest first, the same stop), and
  every payload with every match counted (``limit=None``: what a search did before issue 37);
- its floor: reading + decompressing every payload, nothing else;
- alternative A, a zstd dictionary trained on the payloads: archive size and scan time;
- alternative B, an FTS5 trigram index with positions (exact phrase matches, no payload to
  confirm): build time, extra bytes on disk, query time (``--no-alternatives`` skips both).

    .venv/bin/python bench/archive_search.py [--sessions 10000] [--limit 50] [--no-alternatives] [--months 12]

``--months N`` instead compares reading the archive as one file with reading the same entries
rolled over into N month files (list and search, median of 3).
"""

from __future__ import annotations

import argparse
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import zstandard

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from hermes_keeper import demo  # noqa: E402
from hermes_keeper.archive.index import INDEX_NAME  # noqa: E402
from hermes_keeper.archive.payload import read_payload  # noqa: E402
from hermes_keeper.archive.query import ALL, list_entries, search, searchable_fields  # noqa: E402
from hermes_keeper.archive.store import ZSTD_LEVEL, Archive  # noqa: E402
from hermes_keeper.sqlite.connect import connect_ro, read_txn  # noqa: E402
from hermes_keeper.sqlite.schema import inspect  # noqa: E402

CACHE = Path(__file__).resolve().parent.parent / ".cache" / "bench"
QUERIES = ("kubernetes", "weather summary", "no-such-word-anywhere", "ÜNKNOWN", "20261")


def build(sessions: int) -> Path:
    """The archive of ``sessions`` demo sessions, in a folder of its own (its index beside it)."""
    path = CACHE / f"archive-{sessions}-zstd{ZSTD_LEVEL}" / "archive.db"
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
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


def median_s(fn: Callable[[], object], runs: int = 3) -> tuple[float, object]:
    times, out = [], None
    for _ in range(runs):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def scan_floor(store: Archive) -> int:
    zd = zstandard.ZstdDecompressor()
    return sum(
        len(zd.decompress(b)) for (b,) in store.files[0].conn.execute("SELECT payload FROM archived_sessions")
    )


def dictionary_variant(store: Archive) -> None:
    zd = zstandard.ZstdDecompressor()
    raws = [zd.decompress(b) for (b,) in store.files[0].conn.execute("SELECT payload FROM archived_sessions")]
    t0 = time.perf_counter()
    zdict = zstandard.train_dictionary(112_640, raws[:: max(1, len(raws) // 2000)])
    train = time.perf_counter() - t0
    zc = zstandard.ZstdCompressor(level=ZSTD_LEVEL, dict_data=zdict)
    blobs = [zc.compress(r) for r in raws]
    zdd = zstandard.ZstdDecompressor(dict_data=zdict)
    scan, _ = median_s(lambda: sum(len(zdd.decompress(b)) for b in blobs))
    print(
        f"  A. zstd dictionary (112 KB, trained in {train:.1f} s): "
        f"payloads {sum(map(len, blobs)) / 1e6:.1f} MB, decompress-all {scan:.2f} s"
    )


def fts_variant(store: Archive, workdir: Path) -> None:
    import json

    db = workdir / "fts.db"
    conn = sqlite3.connect(db)
    conn.execute("CREATE VIRTUAL TABLE t USING fts5(session_id UNINDEXED, body, tokenize='trigram')")
    t0 = time.perf_counter()
    with conn:
        for entry, raw in store.payloads():
            body = "\n".join(f for m in json.loads(raw)["messages"] for f in searchable_fields(m))
            conn.execute("INSERT INTO t VALUES (?, ?)", (entry.session_id, body))
    built = time.perf_counter() - t0
    size = db.stat().st_size
    q, hits = median_s(
        lambda: conn.execute(
            "SELECT count(DISTINCT session_id) FROM t WHERE body MATCH ?", ('"kubernetes"',)
        ).fetchone()[0]
    )
    print(
        f"  B. FTS5 trigram index: built in {built:.1f} s, +{size / 1e6:.1f} MB on disk, "
        f"'kubernetes' {q * 1000:.0f} ms ({hits} sessions)"
    )
    conn.close()


def months_variant(path: Path, out: Path, months: int) -> None:
    """The same entries rolled over into ``months`` files, read by every command through one Archive."""
    now = time.time()
    with Archive(path, create=False) as src, Archive(out) as dst:
        entries = list(src.entries("ORDER BY entry"))
        per = -(-len(entries) // months)
        for m in range(months):
            chunk = entries[m * per : (m + 1) * per]
            for i in range(0, len(chunk), 500):
                dst.put(
                    [src.get_entry(e.entry) for e in chunk[i : i + 500]], now=now - (months - m) * 31 * 86400
                )
    for label, p in (("1 file", path), (f"{months} month files", out)):
        with Archive(p, create=False) as store:
            listed, _ = median_s(lambda store=store: list_entries(store, ALL))
            none, _ = median_s(lambda store=store: search(store, QUERIES[2], limit=None))
            kube, _ = median_s(lambda store=store: search(store, QUERIES[0], limit=None))
            print(
                f"{label:>16}: list {listed:.2f} s, search {QUERIES[2]!r} {none:.2f} s, "
                f"{QUERIES[0]!r} {kube:.2f} s ({len(store.files)} files)"
            )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sessions", type=int, default=10_000)
    ap.add_argument("--months", type=int, default=0, help="Also read the same entries as N month files.")
    ap.add_argument("--limit", type=int, default=50, help="archive search's --limit (its default: 50)")
    ap.add_argument(
        "--no-alternatives", action="store_true", help="Skip the dictionary and positions variants."
    )
    args = ap.parse_args()
    path = build(args.sessions)
    if args.months:
        with tempfile.TemporaryDirectory() as tmp:
            months_variant(path, Path(tmp) / "archive.db", args.months)
        return
    with Archive(path, create=False) as store:
        n, raw, stored = (
            store.files[0]
            .conn.execute("SELECT count(*), sum(raw_bytes), sum(stored_bytes) FROM archived_sessions")
            .fetchone()
        )
        print(
            f"archive: {n} sessions, {path.stat().st_size / 1e6:.1f} MB on disk "
            f"(payloads {raw / 1e6:.1f} MB JSON -> {stored / 1e6:.1f} MB zstd level {ZSTD_LEVEL})"
        )
        index = path.parent / INDEX_NAME
        for side in ("", "-wal", "-shm"):
            Path(f"{index}{side}").unlink(missing_ok=True)
        t0 = time.perf_counter()
        search(store, QUERIES[0], limit=args.limit)
        built = time.perf_counter() - t0
        size = sum(Path(f"{index}{s}").stat().st_size for s in ("", "-wal") if Path(f"{index}{s}").exists())
        print(f"used: indexed search; the first (cold) built the index in {built:.1f} s, {size / 1e6:.1f} MB")
        print(
            f"  search --limit {args.limit}, median of 3: with the index | every payload, stopping as the"
            " index does | every payload, every match counted (as before issue 37)"
        )
        for query in QUERIES:
            secs = {}
            for how, limit, use_index in (
                ("index", args.limit, True),
                ("scan", args.limit, False),
                ("all", None, False),
            ):
                secs[how], result = median_s(
                    lambda query=query, limit=limit, use_index=use_index: search(
                        store, query, limit=limit, use_index=use_index
                    )
                )
                if how == "index":
                    found = result.total if result.complete else f"more than {len(result.hits)}"
            fast, scan, every = secs["index"], secs["scan"], secs["all"]
            print(
                f"    {query!r:24} {fast:6.3f} s | {scan:5.2f} s ({scan / fast:5.1f}x) | {every:5.2f} s"
                f" ({every / fast:5.1f}x)  {found} of {result.scanned}"
            )
        floor, _ = median_s(lambda: scan_floor(store))
        print(f"  floor: read + decompress every payload {floor:.2f} s")
        if args.no_alternatives:
            return
        print("alternatives, same payloads:")
        dictionary_variant(store)
        with tempfile.TemporaryDirectory() as tmp:
            fts_variant(store, Path(tmp))


if __name__ == "__main__":
    main()
