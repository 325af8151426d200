"""Benchmark homes made by real Hermes, and the live gateway stand-in around an operation.

``bench_home()`` builds (once, cached in .cache/bench/) a home through Hermes's own
SessionDB from ``hermes_keeper.demo.generate`` specs, or with ``shape="imported"`` one whose
messages went in by big transactions, as an import leaves them (``imported_home``), or with
``shape="optimized"`` that home with each index merged into one segment, as Hermes 0.19 leaves it,
or with ``shape="transcripts"`` the imported home with a transcript per session (``transcripts_home``),
or with ``shape="chronological"`` one whose sessions went in in the order they started, as a home
Hermes wrote day by day has its rows (the default shape has them grouped as ``generate`` lists them);
``copy_home`` gives each scenario an identical copy; ``with live_writer(home) as w:`` runs
bench/gateway_standin.py beside the operation and ``w.stats`` then holds p50/p99/max latency
and failures.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hermes_keeper import demo  # noqa: E402
from hermes_keeper.sqlite.fts import FTS_TABLES  # noqa: E402
from tests.hermes_env import Hermes  # noqa: E402

#: Where built homes are kept (never in git); ``BENCH_CACHE`` moves them, to /tmp say.
CACHE = Path(os.environ.get("BENCH_CACHE") or ROOT / ".cache" / "bench")
STANDIN = Path(__file__).resolve().parent / "gateway_standin.py"


#: ``--size`` of the benches: (sessions, messages), about 2 KB of state.db per message (FTS included).
SIZES = {"240MB": (2000, 120_000), "2GB": (8000, 1_000_000), "5GB": (20_000, 2_500_000)}
SHAPES = ("hermes", "imported", "optimized", "transcripts", "chronological")
#: Messages per transaction of an imported home, and the FTS5 settings of the import: automerge
#: off as bulk loads do, so its segments pile up (crisismerge caps them below FTS5's 2,000 ids).
IMPORT_TXN_MESSAGES = 2000
IMPORT_FTS = {"automerge": 0, "crisismerge": 200}


def bench_home(
    sessions: int = 2000, messages: int = 120_000, version: str = "0.19.0", shape: str = "hermes"
) -> Path:
    """A cached home of ``sessions`` sessions / ~``messages`` messages built by real Hermes."""
    if shape == "imported":
        return imported_home(sessions, messages)
    if shape == "optimized":
        return optimized_home(imported_home(sessions, messages))
    if shape == "transcripts":
        return transcripts_home(imported_home(sessions, messages))
    per = demo.messages_per_session_for(messages, sessions)
    chrono = "-chrono" if shape == "chronological" else ""
    dest = CACHE / f"hermes-{version}-{sessions}x{per}{chrono}-text{demo.TEXT_VERSION}"
    if (dest / ".ready").exists():
        return dest
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    spec = demo.generate(time.time(), sessions=sessions, messages_per_session=per)
    if chrono:
        spec = dataclasses.replace(spec, sessions=sorted(spec.sessions, key=lambda s: s["started_at"]))
    hermes = Hermes(version)
    chunk = 200
    for i in range(0, len(spec.sessions), chunk):
        hermes.run(dest, [{"op": "build", "sessions": spec.sessions[i : i + chunk]}], timeout=3600)
    demo.write_files(dest, spec)
    conn = sqlite3.connect(dest / "state.db")
    for key, sid in spec.routed.items():
        conn.execute(
            "INSERT OR REPLACE INTO gateway_routing (scope, session_key, entry_json, updated_at)"
            " VALUES ('', ?, json_object('session_key', ?, 'session_id', ?), ?)",
            (key, key, sid, time.time()),
        )
    conn.commit()
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    (dest / ".ready").touch()
    return dest


def imported_home(sessions: int, messages: int) -> Path:
    """A cached home whose messages were inserted :data:`IMPORT_TXN_MESSAGES` at a time, with
    automerge off (:data:`IMPORT_FTS`): each FTS5 index then holds a hundred segments or more on
    one level, the shape an import or a one-time FTS rebuild leaves (147 on a level in the issue's
    2 GB home). Hermes's settings are put back afterwards, so its writes merge as usual."""
    per = demo.messages_per_session_for(messages, sessions)
    dest = CACHE / f"imported-{sessions}x{per}-text{demo.TEXT_VERSION}"
    if (dest / ".ready").exists():
        return dest
    shutil.rmtree(dest, ignore_errors=True)
    spec = demo.generate(time.time(), sessions=sessions, messages_per_session=per)
    rows = [(s["id"], *m) for s in spec.sessions for m in s.get("messages", [])]
    # The sessions (and files) as demo writes them; the messages in big transactions after.
    demo.build_home(dest, dataclasses.replace(spec, sessions=[{**s, "messages": []} for s in spec.sessions]))
    conn = sqlite3.connect(dest / "state.db", isolation_level=None)
    conn.execute("PRAGMA synchronous=OFF")
    present = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    tables = [t for t in FTS_TABLES if t in present]  # the CJK index only where Hermes made one
    for t in tables:
        for key, value in IMPORT_FTS.items():
            conn.execute(f"INSERT INTO {t}({t}, rank) VALUES(?, ?)", (key, value))
    for i in range(0, len(rows), IMPORT_TXN_MESSAGES):
        conn.execute("BEGIN")
        conn.executemany(
            "INSERT INTO messages (session_id, role, content, timestamp) VALUES (?,?,?,?)",
            rows[i : i + IMPORT_TXN_MESSAGES],
        )
        conn.execute("COMMIT")
    for t in tables:
        conn.execute(f"DELETE FROM {t}_config WHERE k IN ('automerge', 'crisismerge')")
    conn.execute("UPDATE sessions SET message_count = (SELECT count(*) FROM messages WHERE session_id = id)")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    (dest / ".ready").touch()
    return dest


def copy_home(src: Path, dst: Path, link: bool = False) -> Path:
    """An identical copy, flushed to disk so the kernel's writeback does not land mid-measurement;
    ``link``: every file hard-linked instead (seconds, not minutes, at 5 GB), for a derived home
    that only adds files and is only read or copied by the benches."""
    copy = os.link if link else shutil.copy2
    shutil.copytree(
        src, dst, ignore=shutil.ignore_patterns(".ready", "keeper", "keeper.lock"), copy_function=copy
    )
    os.sync()
    return dst


class LiveWriter:
    stats: dict  # the writes that started before the block ended (the warm-up's too)
    after: dict  # the writes that started in the tail after it
    #: Hermes's own FTS5 'optimize' (every 1,000 of its writes, inside one): the latencies of
    #: those writes, apart from ``stats`` and ``after``, which measure what the operation costs.
    optimize_ms: list[float]
    checkpoint_ms: list[float]  # the same for Hermes's own PASSIVE checkpoint (every 50 writes)
    timeline: list[tuple[float, float]]  # (wall-clock start, latency ms) of every write
    fts_starts: set[float]  # the starts of the writes that ran Hermes's own FTS5 work
    failures: int  # of every write, Hermes's own optimize and checkpoint writes too


def latency_stats(latencies: list[float], failures: int) -> dict:
    lat = sorted(latencies)
    return {
        "writes": len(lat),
        "failures": failures,
        "p50_ms": statistics.median(lat) if lat else 0.0,
        "p99_ms": lat[int(len(lat) * 0.99) - 1] if len(lat) >= 100 else (lat[-1] if lat else 0.0),
        "max_ms": lat[-1] if lat else 0.0,
    }


@contextmanager
def live_writer(
    home: Path, rate: float = 20.0, version: str = "0.19.0", warmup_s: float = 1.0, tail_s: float = 1.0
):
    """Run the gateway stand-in against ``home`` for the duration of the block and ``tail_s`` after.

    The tail is where Hermes pays for work an operation left behind (FTS5 segments its own
    automerge then merges inside a gateway write, say): ``w.after`` holds those writes.
    """
    hermes = Hermes(version)
    tmp = Path(tempfile.mkdtemp(prefix="standin-"))
    ready, stop, out = tmp / "ready", tmp / "stop", tmp / "out.json"
    proc = subprocess.Popen(
        [
            str(hermes.python),
            str(STANDIN),
            str(home),
            "--rate",
            str(rate),
            "--ready",
            str(ready),
            "--stop",
            str(stop),
            "--out",
            str(out),
        ],
    )
    while not ready.exists():
        if proc.poll() is not None:
            raise RuntimeError("gateway stand-in died on start")
        time.sleep(0.05)
    time.sleep(warmup_s)
    w = LiveWriter()
    try:
        yield w
    finally:
        ended = time.time()
        time.sleep(tail_s)
        stop.touch()
        proc.wait(timeout=120)
        data = json.loads(out.read_text())
        failed, optimized = set(data["failed"]), set(data.get("optimized", []))
        checkpointed = set(data.get("checkpointed", []))
        w.timeline = list(zip(data["started"], data["latencies_ms"], strict=True))
        w.failures = len(failed)
        w.optimize_ms = [data["latencies_ms"][i] for i in sorted(optimized)]
        w.fts_starts = {data["started"][i] for i in optimized}
        w.checkpoint_ms = [data["latencies_ms"][i] for i in sorted(checkpointed)]
        optimized |= checkpointed
        during = [i for i, t in enumerate(data["started"]) if t < ended and i not in optimized]
        tail = [i for i, t in enumerate(data["started"]) if t >= ended and i not in optimized]
        for name, idx in (("stats", during), ("after", tail)):
            stats = latency_stats([data["latencies_ms"][i] for i in idx], len(failed.intersection(idx)))
            setattr(w, name, stats)
        shutil.rmtree(tmp, ignore_errors=True)


def _derived_home(base: Path, suffix: str, make: Callable[[Path], None], link: bool = False) -> Path:
    """A copy of ``base`` changed once by ``make`` outside any measurement, cached beside it
    (``link``: :func:`copy_home`'s)."""
    dest = CACHE / f"{base.name}-{suffix}"
    if (dest / ".ready").exists():
        return dest
    shutil.rmtree(dest, ignore_errors=True)
    make(copy_home(base, dest, link))
    (dest / ".ready").touch()
    return dest


def _sql(*statements: str) -> Callable[[Path], None]:
    """The statements on ``home``'s state.db, each committed on its own."""

    def run(home: Path) -> None:
        conn = sqlite3.connect(home / "state.db", isolation_level=None)
        for sql in statements:
            conn.execute(sql)
        conn.close()

    return run


def converted_home(base: Path) -> Path:
    """``base`` after the keeper's one-time switch to ``auto_vacuum=INCREMENTAL`` (a full VACUUM):
    the home of a second night."""
    return _derived_home(base, "incremental", _sql("PRAGMA auto_vacuum=INCREMENTAL", "VACUUM"))


def optimized_home(base: Path) -> Path:
    """``base`` with each FTS5 index merged into one segment (``'optimize'``): the index Hermes 0.19
    leaves, which optimizes both after every 1,000 writes of a process. Building that through Hermes
    message by message is quadratic (each optimize rewrites the whole index): a 2 GB home had 4,400
    of its 8,000 sessions after 37 minutes, at a falling 54 sessions a minute. What this one lacks
    is the level per optimize a long-running 0.19 gateway stacks up (867 and 869 in that stopped
    build), which only sizes the merges of Hermes's own automerge after a run."""
    optimize = [f"INSERT INTO {t}({t}) VALUES('optimize')" for t in FTS_TABLES]
    return _derived_home(base, "optimized", _sql(*optimize, "PRAGMA wal_checkpoint(TRUNCATE)"))


def delete_mode_home(base: Path, version: str) -> Path:
    """``base`` opened once by Hermes ``version`` (its schema migration done outside any measurement),
    then switched to ``journal_mode=DELETE``: the file today's Hermes creates on SQLite builds with the
    WAL-reset bug (it never enables WAL on them)."""

    def make(home: Path) -> None:
        Hermes(version).run(
            home, [{"op": "query", "sql": "SELECT version FROM schema_version"}], timeout=3600
        )
        _sql("PRAGMA journal_mode=DELETE")(home)

    return _derived_home(base, f"{version.replace('==', '-')}-delete", make)


#: Bytes of a transcript per message of its session (Hermes's ``session_<id>.json`` holds each
#: message once more, as JSON).
TRANSCRIPT_BYTES_PER_MESSAGE = 200


def transcripts_home(base: Path) -> Path:
    """``base`` with ``sessions/session_<id>.json`` for every session, as a home that keeps Hermes's
    opt-in transcript snapshots has them (never deleted upstream, #20334): the files ``report`` and
    ``plan`` stat, one per session, on top of the database. Only files are added, so the rest is
    hard-linked to ``base`` (a bench that changes the home works on a :func:`copy_home` of it)."""

    def make(home: Path) -> None:
        conn = sqlite3.connect(f"file:{home / 'state.db'}?mode=ro", uri=True)  # linked: only read
        rows = conn.execute("SELECT id, started_at, message_count FROM sessions").fetchall()
        conn.close()
        for sid, started, count in rows:
            path = home / "sessions" / f"session_{sid}.json"
            path.write_bytes(b"{}" + b" " * max(0, TRANSCRIPT_BYTES_PER_MESSAGE * count - 2))
            os.utime(path, (started, started))

    return _derived_home(base, "transcripts", make, link=True)
