"""The fleet's archive cache: 20 simulated hosts, each with N archived sessions in 12 month files,
pushed to one local restic repository as the keeper pushes them (``kind=archive`` snapshots).

Prints: the first ``Fleet.sync`` (time, bytes), a nightly sync after one host archived 50 more
sessions in its current month (time and bytes, and their ratio to the first), one with nothing
changed, ``Fleet.search`` after the sync for a rare and a common word (median of 3), and the peak
RSS of a sync of 5 and of 20 hosts (each in a fresh process: the keeper's Python, and restic's).

    .venv/bin/python bench/fleet.py [--hosts 20] [--sessions 2000]

Hosts share a base archive built once (demo sessions written by ``Archive.put``, as
bench/archive_search.py builds its own), each with a few sessions of its own.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from hermes_keeper import demo  # noqa: E402
from hermes_keeper.archive.payload import read_payload  # noqa: E402
from hermes_keeper.archive.store import Archive, archive_paths  # noqa: E402
from hermes_keeper.fleet import Fleet  # noqa: E402
from hermes_keeper.offsite.copies import TAG  # noqa: E402
from hermes_keeper.offsite.restic import Restic  # noqa: E402
from hermes_keeper.sqlite.connect import connect_ro, read_txn  # noqa: E402
from hermes_keeper.sqlite.schema import inspect  # noqa: E402

MONTHS = 12
DAY = 86400.0
RARE, COMMON = "zebrafinch", "kubernetes"


def payloads(work: Path, sessions: int, seed: int = 7) -> list[dict]:
    home = work / f"home-{seed}"
    demo.build_home(home, demo.generate(time.time(), sessions=sessions, messages_per_session=20, seed=seed))
    schema, conn = inspect(home / "state.db"), connect_ro(home / "state.db")
    with read_txn(conn):
        out = [read_payload(conn, schema, sid) for (sid,) in conn.execute("SELECT id FROM sessions")]
    conn.close()
    shutil.rmtree(home)
    return out


def base_archive(work: Path, sessions: int) -> Path:
    """``sessions`` archived sessions over :data:`MONTHS` month files: one host's archive."""
    folder = work / "base"
    folder.mkdir()
    got = payloads(work, sessions)
    per, now = -(-len(got) // MONTHS), time.time()
    with Archive(folder / "archive.db") as store:
        for m in range(MONTHS):
            chunk = got[m * per : (m + 1) * per]
            for i in range(0, len(chunk), 500):
                store.put(chunk[i : i + 500], now=now - (MONTHS - 1 - m) * 31 * DAY)
    return folder


def own(payload: dict, sid: str, text: str) -> dict:
    """A copy of ``payload`` as another session, its first message saying ``text``."""
    p = json.loads(json.dumps(payload))
    p["session"]["id"] = sid
    for m in p["messages"]:
        m["session_id"] = sid
    p["messages"][0]["content"] = text
    return p


def host_archive(base: Path, folder: Path, n: int, sample: list[dict]) -> None:
    """The base archive and two sessions of host ``n``'s own (one says the rare word)."""
    folder.mkdir(parents=True)
    for p in archive_paths(base / "archive.db"):
        shutil.copyfile(p, folder / p.name)
        os.chmod(folder / p.name, 0o600)
    with Archive(folder / "archive.db") as store:
        store.put(
            [own(sample[0], f"h{n:02d}-a", f"the {RARE} of host {n}"), own(sample[1], f"h{n:02d}-b", "ok")]
        )


def push(restic: Restic, folder: Path, host: str) -> None:
    names = [p.name for p in archive_paths(folder / "archive.db")]
    tags = f"{TAG},profile=default,kind=archive"
    restic.json("backup", "--host", host, "--tag", tags, *names, cwd=folder)


def timed(fn) -> tuple[float, object]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def child_rss(repo: str, pw: Path, cache: Path) -> tuple[float, float]:
    """Peak RSS (MB) of one sync in a fresh process: the keeper's Python (its own ``VmHWM``:
    ``ru_maxrss`` would count this bench's memory, copied at the fork), and restic's largest run."""
    code = (
        "import resource; from hermes_keeper.fleet import Fleet;"
        f"Fleet([{repo!r}], cache_dir={str(cache)!r}).sync();"
        "hwm = next(ln for ln in open('/proc/self/status') if ln.startswith('VmHWM')).split()[1];"
        "print(hwm, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"
    )
    src = str(Path(__file__).resolve().parent.parent / "src")
    env = os.environ | {"PYTHONPATH": src, "RESTIC_PASSWORD_FILE": str(pw)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    me, restic = out.stdout.split()
    return int(me) / 1024, int(restic) / 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hosts", type=int, default=20)
    ap.add_argument("--sessions", type=int, default=2000, help="Archived sessions per host.")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        t_build, base = timed(lambda: base_archive(work, args.sessions))
        sample = payloads(work, 2, seed=99)
        pw = work / "pw"
        pw.write_text("bench\n")
        repos = {k: str(work / f"repo{k}") for k in (min(5, args.hosts), args.hosts)}
        for repo in repos.values():
            subprocess.run(["restic", "init", "-q", "-r", repo, "--password-file", str(pw)], check=True)
        t0 = time.perf_counter()
        for n in range(args.hosts):
            host_archive(base, work / "hosts" / f"h{n:02d}", n, sample)
            for k, repo in repos.items():
                if n < k:
                    push(Restic(repo, str(pw)), work / "hosts" / f"h{n:02d}", f"h{n:02d}")
        t_push = time.perf_counter() - t0
        size = sum(p.stat().st_size for p in (work / "hosts" / "h00").iterdir())
        each = f"{MONTHS} month files each: {size / 1e6:.1f} MB a host"
        print(f"{args.hosts} hosts x {args.sessions} sessions, {each}")
        print(f"(built in {t_build:.0f} s, pushed in {t_push:.0f} s)")
        report(work, repos[args.hosts], pw, sample, args.hosts)
        rss = {k: child_rss(repo, pw, work / f"rss{k}") for k, repo in repos.items()}
        for k, (me, restic) in rss.items():
            print(f"peak RSS, sync of {k:>2} hosts: keeper {me:6.1f} MB, restic {restic:6.1f} MB")


def report(work: Path, repo: str, pw: Path, sample: list[dict], hosts: int) -> None:
    os.environ["RESTIC_PASSWORD_FILE"] = str(pw)  # restic's own way: the fleet names no password
    fleet = Fleet([repo], cache_dir=work / "cache")
    t_first, first = timed(fleet.sync)
    first = first.totals()
    t_same, same = timed(fleet.sync)
    name = f"h{min(7, hosts - 1):02d}"  # one host of the fleet archives 50 more sessions
    changed = work / "hosts" / name
    with Archive(changed / "archive.db") as store:
        store.put([own(sample[1], f"{name}-night-{i}", f"night {i}") for i in range(50)])
    push(Restic(repo, str(pw)), changed, name)
    t_night, night = timed(fleet.sync)
    night = night.totals()
    print(f"{'step':<34}{'time':>9}{'files':>8}{'bytes':>12}")
    mb = first["bytes_fetched"] / 1e6
    print(f"{'first sync':<34}{t_first:>8.2f}s{first['files_fetched']:>8}{mb:>10.1f}MB")
    print(f"{'sync, nothing changed':<34}{t_same:>8.2f}s{same.totals()['files_fetched']:>8}{0:>10.1f}MB")
    print(
        f"{'nightly sync, 1 host +50 sessions':<34}{t_night:>8.2f}s{night['files_fetched']:>8}"
        f"{night['bytes_fetched'] / 1e6:>10.1f}MB"
    )
    share = night["bytes_fetched"] / first["bytes_fetched"]
    print(f"nightly / first: time {t_night / t_first:.3f}, bytes {share:.3f}")
    for word in (RARE, COMMON):
        times = [timed(lambda w=word: fleet.search(w))[0] for _ in range(3)]
        found = fleet.search(word)
        total = sum(f.result.total for f in found)
        print(f"fleet search {word!r}: {statistics.median(times):.3f} s ({total} sessions on {hosts} hosts)")


if __name__ == "__main__":
    main()
