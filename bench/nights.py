"""Sixty simulated nights of a home that grows like the demo's: does the keeper stay bounded?

A demo home (``--sessions`` sessions spread over ``--days`` days, so both retention windows,
90 days and messaging's 180, are reached from the first night) gets ``--per-night`` new
sessions each day; at 03:00 of each simulated night ``Profile.run()`` runs as cron would
(backup, prune, archive, compact), with the keeper's clock (``time.time``) moved to that night.
After each run it measures the home: state.db and its WAL, ``keeper/`` (backups, archive), the
whole home, and what a deduplicating store (restic, borg) would add for tonight's backup: the
bytes of its decompressed pages that last night's backup did not hold, and the ones
that a copy of state.db just after last night's run did not hold either (Hermes's own writes of
the day; the rest is the run's own rewrite: its prune, full FTS merge and compact).

``--before`` is the keeper as it was: each backup a ``VACUUM INTO`` copy (no page shared
with the last one), never skipped, rotation last 3 / daily 7 / weekly 4 / monthly 12.

    .venv/bin/python bench/nights.py [--nights 60] [--before] [--every 10]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

import zstandard

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from hermes_keeper import demo, units  # noqa: E402
from hermes_keeper.backup import snapshot  # noqa: E402
from hermes_keeper.backup.rotation import plan_rotation  # noqa: E402
from hermes_keeper.home import select_profiles  # noqa: E402

DAY = 86400.0
PAGE = 4096
START = 1_798_761_600.0 + 3 * 3600  # 2027-01-01T03:00Z: the first simulated night


class Clock:
    """``time.time`` for the keeper: the simulated night, plus the real time since it began."""

    def __init__(self) -> None:
        self.real, self.night = time.time, START
        self.began = self.real()

    def set(self, night: float) -> None:
        self.night, self.began = night, self.real()

    def __call__(self) -> float:
        return self.night + (self.real() - self.began)


def tree_bytes(path: Path) -> int:
    return sum(
        (Path(d) / n).lstat().st_size
        for d, _s, names in os.walk(path)
        for n in names
        if (Path(d) / n).is_file()
    )


def page_hashes(record) -> set[bytes]:
    """The decompressed backup's pages, each as a digest."""
    with open(record.path, "rb") as fh:
        return _hashes(zstandard.ZstdDecompressor().stream_reader(fh))


def image_hashes(db: Path, work: Path) -> set[bytes]:
    """The pages of a copy of ``db`` made as the keeper makes its backups (page copy or VACUUM INTO)."""
    copy = work / "image.db"
    snapshot.copy_pages(db, copy, "wal")
    try:
        with open(copy, "rb") as fh:
            return _hashes(fh)
    finally:
        copy.unlink()


def _hashes(reader) -> set[bytes]:
    out = set()
    while block := reader.read(PAGE * 256):
        out.update(
            hashlib.blake2b(block[i : i + PAGE], digest_size=16).digest() for i in range(0, len(block), PAGE)
        )
    return out


def vacuum_into(source: Path, dest: Path, journal_mode: str | None) -> snapshot.Copied:
    """The old copy: one ``VACUUM INTO`` (a rewritten file, its journal mode set after)."""
    conn = sqlite3.connect(f"file:{source}?mode=ro", uri=True)
    try:
        conn.execute("VACUUM INTO ?", (str(dest),))
    finally:
        conn.close()
    snapshot.match_modes(dest, journal_mode, None)
    return snapshot.Copied()


def as_before(home: Path) -> None:
    """The keeper before page copies, skips and the bounded rotation."""
    snapshot.copy_pages = vacuum_into
    snapshot.source_mark = lambda _db, _now: ""
    (home / "keeper.toml").write_text("[backups]\nkeep_monthly = 12\n")


def add_day(db: Path, night: float, n: int, per_night: int) -> None:
    """One day of new sessions, as the demo spreads them (titles made unique per night)."""
    fresh = demo.generate(night, sessions=per_night, days=1, seed=10_000 + n).sessions[:per_night]
    for s in fresh:
        if s.get("title"):
            s["title"] += f" n{n}"
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        conn.execute("BEGIN")
        demo.insert_sessions(conn, fresh)
        conn.execute("COMMIT")
    finally:
        conn.close()


def simulate(args) -> list[dict]:
    clock = Clock()
    time.time = clock  # the keeper's clock: every module reads it through time.time()
    work = Path(tempfile.mkdtemp(prefix="nights-"))
    home = work / "home"
    demo.build_home(home, demo.generate(START - DAY, sessions=args.sessions, days=args.days))
    if args.before:
        as_before(home)
    [profile] = select_profiles(home)
    rows, last_pages, after_run = [], set(), set()
    for n in range(1, args.nights + 1):
        night = START + (n - 1) * DAY
        clock.set(night - 12 * 3600)
        add_day(home / "state.db", night, n, args.per_night)
        clock.set(night)
        res = profile.run()
        backups = snapshot.list_backups(home / "keeper" / "backups")
        newest = backups[-1]
        pages = page_hashes(newest)
        new = len(pages - last_pages) * PAGE
        hermes_day = len(pages - after_run) * PAGE  # what Hermes alone changed since the last run
        last_pages, after_run = pages, image_hashes(home / "state.db", work)
        db = (home / "state.db").stat().st_size + (
            (home / "state.db-wal").stat().st_size if (home / "state.db-wal").exists() else 0
        )
        rows.append(
            {
                "night": n,
                "db": db,
                "backups": len(backups),
                "backup_bytes": sum(b.bytes for b in backups),
                "keeper": tree_bytes(home / "keeper"),
                "home": tree_bytes(home),
                "dedup_new": new,
                "hermes_day": hermes_day,
                "raw": newest.raw_bytes,
                "summary": res.summary(),
            }
        )
    rows[-1]["scattered"] = scattered_change(home / "state.db", work)
    time.time = clock.real
    shutil.rmtree(work)
    return rows


def scattered_change(db: Path, work: Path) -> tuple[int, int]:
    """Issue 36's case: 2% of the sessions deleted with their messages, here and there (as Hermes's
    own ``/delete`` does); the bytes of the next copy's pages the copy before did not hold, and the
    copy's size."""
    before = image_hashes(db, work)
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        conn.execute("CREATE TEMP TABLE gone AS SELECT id FROM sessions WHERE rowid % 50 = 7")
        conn.execute("DELETE FROM messages WHERE session_id IN (SELECT id FROM gone)")
        conn.execute("DELETE FROM sessions WHERE id IN (SELECT id FROM gone)")
    finally:
        conn.close()
    after = image_hashes(db, work)
    return len(after - before) * PAGE, len(after) * PAGE


def steady_backups(before: bool, nights: int = 400) -> list[int]:
    """How many backups rotation keeps on each of the last 100 of ``nights`` nightly backups."""
    rules = {"keep_monthly": 12} if before else {}
    kept: list[tuple] = []
    counts = []
    for i in range(nights):
        kept.append((str(i), START + i * DAY, True))
        keep = {d.id for d in plan_rotation(kept, now=START + i * DAY, **rules) if d.keep}
        kept = [b for b in kept if b[0] in keep]
        counts.append(len(kept))
    return counts[-100:]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nights", type=int, default=60)
    ap.add_argument("--sessions", type=int, default=400)
    ap.add_argument("--days", type=int, default=200)
    ap.add_argument("--per-night", type=int, default=2)
    ap.add_argument("--every", type=int, default=10)
    ap.add_argument("--before", action="store_true", help="the keeper as it was (VACUUM INTO, monthly 12)")
    args = ap.parse_args()
    t0 = time.perf_counter()
    rows = simulate(args)
    print(f"{'before' if args.before else 'after'}: {args.nights} nights, {time.perf_counter() - t0:.0f} s")
    print("| night | state.db | backups | keeper/ | home | dedup store adds | new since last run's end |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        if r["night"] % args.every == 0 or r["night"] in (1, args.nights):
            print(
                f"| {r['night']} | {units.size(r['db'])} | {r['backups']} ({units.size(r['backup_bytes'])}) "
                f"| {units.size(r['keeper'])} | {units.size(r['home'])} | {units.size(r['dedup_new'])} of "
                f"{units.size(r['raw'])} | {units.size(r['hermes_day'])} |"
            )
    tail = rows[-21:]
    spread = max(r["home"] for r in tail) - min(r["home"] for r in tail)
    print(
        f"last 21 nights: keeper/ max {units.size(max(r['keeper'] for r in tail))}, home spread "
        f"{units.size(spread)} ({spread / tail[-1]['home']:.1%}), backups {min(r['backups'] for r in tail)}-"
        f"{max(r['backups'] for r in tail)}"
    )
    print("last run:", rows[-1]["summary"])
    new, size = rows[-1]["scattered"]
    print(
        f"2% of the sessions deleted, here and there: the next copy adds {units.size(new)}"
        f" of {units.size(size)}"
    )
    year = steady_backups(args.before)
    each = statistics.mean(r["backup_bytes"] / r["backups"] for r in tail)
    print(
        f"rotation over a year of nights (pure): {min(year)}-{max(year)} backups in the last 100, so"
        f" about {units.size(max(year) * each)} of backups at {units.size(each)} each"
    )


if __name__ == "__main__":
    main()
