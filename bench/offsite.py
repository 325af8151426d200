"""Off-host copies through restic on a bench home: the nightly addition, and the gateway beside a push.

On copies of a home built by real Hermes (bench/homes.py), with a local restic repository:

  night 1  ``Profile.run()`` (backup, prune, push): the first full copy goes off the host
  day      Hermes adds a day's sessions (its own SessionDB, 1/75 of the home's): what that alone
           changed of state.db's pages and one-MiB regions
  night 2, 3  the run again, retention one day shorter each night (a day's sessions age out):
           what restic adds to the repository, against one full snapshot of state.db (target:
           <= 10% after the first night); beside it, what a page-for-page copy of the same
           state.db (SQLite's backup API) adds to a second repository
  gateway  night 1's run beside the gateway stand-in (20 writes/s), and the same run without
           ``[offsite]`` on an identical copy; then a push alone beside it, and the stand-in alone
           as long: writer failures, p99 and max (target: the same)

    .venv/bin/python bench/offsite.py [--sessions 5000] [--messages 300000] [--home DIR]
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.backup_compact import beside_writer, line  # noqa: E402
from bench.homes import bench_home, copy_home  # noqa: E402
from hermes_keeper import demo  # noqa: E402
from hermes_keeper.home import select_profiles  # noqa: E402
from hermes_keeper.offsite.copies import push  # noqa: E402
from hermes_keeper.offsite.restic import Restic  # noqa: E402
from tests.hermes_env import Hermes  # noqa: E402
from tests.offsite_repo import init_repository, offsite_toml  # noqa: E402

DAY = 86400.0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sessions", type=int, default=5000)
    ap.add_argument("--messages", type=int, default=300_000)
    ap.add_argument("--home", type=Path, default=None, help="An existing bench home instead of building one.")
    ap.add_argument(
        "--shape",
        default="chronological",
        help="bench/homes.py shape (default: sessions in the order they started)",
    )
    args = ap.parse_args()
    base = args.home or bench_home(args.sessions, args.messages, shape=args.shape)
    work = Path(tempfile.mkdtemp(prefix="offsite-bench-"))
    try:
        run_all(base, work, args)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def run_all(base: Path, work: Path, args: argparse.Namespace) -> None:
    db_mb = (base / "state.db").stat().st_size / 1e6
    print(f"home: {args.sessions} sessions, {db_mb:.1f} MB state.db; restic {restic_version()}\n")
    repo = str(work / "repo")
    pw = init_repository(repo, work)
    plain = copy_home(base, work / "plain")
    stats, seconds, _ = beside_writer(plain, lambda: select_profiles(plain)[0].run())
    print(line("run, no push", stats, seconds, ""))
    home = copy_home(base, work / "home")
    (home / "keeper.toml").write_text(offsite_toml(repo, pw, "bench"))
    stats, seconds, night = beside_writer(home, lambda: select_profiles(home)[0].run())
    print(line("run + push", stats, seconds, f"push {night.offsite['seconds']} s"))
    pages = Restic(str(work / "pages"), str(pw))  # page-for-page copies (SQLite backup API) beside
    pages.run("init")
    print()
    report(1, night, home, 0, pages)
    for n in (2, 3):
        day = demo.generate(time.time(), sessions=max(1, args.sessions // 75), days=1, seed=10 + n)
        fresh = [{k: v for k, v in s.items() if k != "title"} for s in day.sessions]  # titles are unique
        before = page_digests(home / "state.db")
        Hermes().run(home, [{"op": "build", "sessions": fresh}], timeout=3600)
        print(day_alone(before, page_digests(home / "state.db"), sum(len(s["messages"]) for s in fresh)))
        profile = select_profiles(home)[0]
        policy = profile.config()  # a day later: each source's retention one day shorter
        policy.retention_s = {k: max(0.0, v - (n - 1) * DAY) for k, v in policy.retention_s.items()}
        report(n, profile.run(policy), home, len(fresh), pages)
    gateway_beside_push(select_profiles(home)[0])


def gateway_beside_push(profile) -> None:
    """The push alone (a new backup to send) beside the stand-in, then the stand-in alone as long."""
    profile.backup()
    policy = profile.config()
    print()
    stats, seconds, done = beside_writer(
        profile.home, lambda: push(profile, policy.offsite, policy.rotation, None, None)
    )
    print(line("push alone", stats, seconds, f"added {done.added_bytes / 1e6:.1f} MB"))
    stats, idle, _ = beside_writer(profile.home, lambda: time.sleep(seconds))
    print(line("writer alone", stats, idle, ""))


def report(n: int, night, home: Path, added_sessions: int, pages: Restic) -> None:
    """One night's figures: what restic added for state.db (against one full snapshot) and in all;
    and what it adds for a page-for-page copy of the same state.db, as page-for-page backups send."""
    push, full = night.offsite, raw_bytes(home, night.backup)
    state, total, sent = push["state_added_bytes"], push["added_bytes"], push["state_bytes"]
    print(
        f"night {n}: +{added_sessions} sessions, {len(night.prune.pruned)} pruned;"
        f" state.db {full / 1e6:.1f} MB, sent as {push['state_file']} of {sent / 1e6:.1f} MB:"
        f" restic added {state / 1e6:.1f} MB = {100 * state / sent:.1f}% of that, {100 * state / full:.1f}%"
        f" of state.db ({total / 1e6:.1f} MB with the archive); push {push['seconds']} s"
    )
    copy = home / "keeper" / "page-copy.db"
    src, dst = sqlite3.connect(home / "state.db"), sqlite3.connect(copy)
    src.backup(dst)
    src.close()
    dst.close()
    done = pages.json(
        "backup", "--stdin", "--stdin-filename", "state.db", feed=lambda fh: fh.write(copy.read_bytes())
    )
    size = copy.stat().st_size
    copy.unlink()
    print(
        f"         page-for-page copy {size / 1e6:.1f} MB: restic added {done['data_added'] / 1e6:.1f} MB ="
        f" {100 * done['data_added'] / size:.1f}%"
    )


def page_digests(db: Path, page: int = 4096) -> list[bytes]:
    """A digest of each page of ``db`` (Hermes closed it: no WAL to fold in)."""
    data = db.read_bytes()
    return [hashlib.blake2b(data[i : i + page], digest_size=12).digest() for i in range(0, len(data), page)]


def day_alone(before: list[bytes], after: list[bytes], messages: int) -> str:
    """What Hermes's day alone changed of state.db's pages, and of its one-MiB regions (restic's
    chunks are about that big): why a page copy cannot dedup night to night."""
    old = set(before)
    new = [i for i, d in enumerate(after) if d not in old]
    regions = {i // 256 for i in new}
    return (
        f"day: Hermes wrote {messages} messages; {100 * len(new) / len(after):.1f}% of state.db's pages"
        f" changed, in {len(regions)} of its {(len(after) + 255) // 256} one-MiB regions"
    )


def raw_bytes(home: Path, backup: str | None) -> int:
    rows = select_profiles(home)[0].backups()["backups"]
    return next(b["raw_bytes"] for b in rows if b["name"] == backup)


def restic_version() -> str:
    return subprocess.run(["restic", "version"], capture_output=True, text=True).stdout.split()[1]


if __name__ == "__main__":
    main()
