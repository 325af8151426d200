"""The filesystem door: nothing outside the home is read through a link, written, chmod-ed or deleted.

Each test is one row of "Files and paths" in docs/reliability.md, on a copy of the demo home.
A symlink's target outside the home has its bytes and mode asserted unchanged afterwards.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hermes_keeper import demo
from hermes_keeper.archive.store import Archive
from hermes_keeper.backup.restore import restore_backup
from hermes_keeper.backup.snapshot import take_backup
from hermes_keeper.errors import KeeperError
from hermes_keeper.fs import HomeFS, check_export_target
from hermes_keeper.home import Profile
from hermes_keeper.journal import Journal, read_journal
from hermes_keeper.lock import keeper_lock
from tests.conftest import tree_digest


def keeper(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hermes_keeper", *args], capture_output=True, text=True)


def refused(res: subprocess.CompletedProcess, *words: str) -> None:
    """Exit 2, one line on stderr naming the problem, no traceback."""
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2, res.stderr
    assert len(lines) == 1 and lines[0].startswith("hermes-keeper: "), res.stderr
    for w in words:
        assert w in lines[0], lines[0]


def snapshot(root: Path) -> dict[str, tuple[str, int]]:
    """sha256 and mode of every entry under ``root`` (and of ``root`` itself), links not followed."""
    out = {".": ("dir", stat.S_IMODE(root.lstat().st_mode))}
    for p in sorted(root.rglob("*")):
        st = p.lstat()
        body = hashlib.sha256(p.read_bytes()).hexdigest() if stat.S_ISREG(st.st_mode) else "dir"
        out[str(p.relative_to(root))] = (body, stat.S_IMODE(st.st_mode))
    return out


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    home = tmp_path_factory.mktemp("door") / "home"
    demo.build_home(home, demo.generate(time.time(), sessions=60))
    return home


@pytest.fixture
def home(built, tmp_path) -> Path:
    return Path(shutil.copytree(built, tmp_path / "home", symlinks=True))


@pytest.fixture
def outside(tmp_path) -> Path:
    """A folder outside the home with a file the keeper must never touch (0644, 0755 folder)."""
    folder = tmp_path / "elsewhere"
    folder.mkdir(mode=0o755)
    os.chmod(folder, 0o755)
    (folder / "precious.txt").write_text("not the keeper's\n")
    os.chmod(folder / "precious.txt", 0o644)
    return folder


def state_digest(home: Path) -> str:
    return hashlib.sha256((home / "state.db").read_bytes()).hexdigest()


def test_symlinked_sessions_folder_files_are_reported_and_kept(home, tmp_path):
    moved = tmp_path / "bigdisk" / "sessions"
    moved.parent.mkdir()
    shutil.move(home / "sessions", moved)
    (home / "sessions").symlink_to(moved)
    before = snapshot(moved)
    plan = keeper("plan", "--json", "--home", str(home))
    files = json.loads(plan.stdout)["profiles"][0]["files"]
    assert files["remove"] == 0 and files["kept"] > 30  # the demo's orphans and pruned transcripts
    res = keeper("run", "--json", "--home", str(home))
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)["profiles"][0]
    assert out["pruned"] > 0 and out["files_removed"] == 0
    assert snapshot(moved) == before


def test_symlinked_lock_file_is_refused_not_truncated(home, outside):
    (home / "keeper.lock").symlink_to(outside / "precious.txt")
    before, db = snapshot(outside), state_digest(home)
    refused(keeper("run", "--home", str(home)), "keeper.lock", "symlink")
    assert snapshot(outside) == before
    assert state_digest(home) == db and not (home / "keeper").exists()


@pytest.mark.parametrize(
    "link, target",
    [
        ("keeper", "folder"),
        ("keeper/backups", "folder"),
        ("keeper/archive.db", "precious.txt"),
        ("keeper/archive.db", "missing.db"),  # dangling: must not be created there
        ("keeper/journal.jsonl", "precious.txt"),
    ],
)
@pytest.mark.parametrize("command", [["run"], ["backup"], ["archive", "restore", "x"]])
def test_symlinked_keeper_paths_are_refused(home, outside, link, target, command):
    (outside / "folder").mkdir(mode=0o755)
    os.chmod(outside / "folder", 0o755)
    if link != "keeper":
        (home / "keeper").mkdir()
    (home / link).symlink_to(outside / target)
    before, db = snapshot(outside), state_digest(home)
    refused(keeper(*command, "--home", str(home)), link, "symlink")
    assert snapshot(outside) == before  # nothing written there, nothing created, nothing chmod-ed
    assert state_digest(home) == db


def test_each_writer_refuses_a_symlinked_keeper_path_on_its_own(home, outside):
    """Below the CLI's first check, each module goes through the door itself."""
    profile = Profile("default", home, home)
    (home / "keeper").mkdir()
    (home / "keeper" / "backups").symlink_to(outside, target_is_directory=True)
    before = snapshot(outside)
    with pytest.raises(KeeperError, match="backups is a symlink"):
        take_backup(profile)
    (home / "keeper" / "archive.db").symlink_to(outside / "missing.db")
    with pytest.raises(KeeperError, match="archive.db is a symlink"):
        Archive.for_home(home / "keeper")
    with pytest.raises(KeeperError, match="backups is a symlink"):
        Journal(home / "keeper")
    os.unlink(home / "keeper" / "archive.db")
    os.unlink(home / "keeper" / "backups")
    (home / "keeper.lock").symlink_to(outside / "precious.txt")
    with pytest.raises(KeeperError, match="keeper.lock is a symlink"), keeper_lock(home):
        pass
    os.unlink(home / "keeper.lock")
    outer = home.parent / "link-to-elsewhere"
    outer.symlink_to(outside, target_is_directory=True)
    refused(keeper("backup", "--home", str(home), "--dest", str(outer)), "link-to-elsewhere is a symlink")
    # A --dest inside the home through another name for it: walked from the home all the same.
    (home / "keeper").rename(home / "keeper.real")
    (home / "keeper").symlink_to(outside, target_is_directory=True)
    alias = home.parent / "alias"
    alias.symlink_to(home, target_is_directory=True)
    with pytest.raises(KeeperError, match="keeper is a symlink"):
        take_backup(profile, alias / "keeper" / "backups")
    assert snapshot(outside) == before
    with pytest.raises(KeeperError, match="not one plain name"):
        HomeFS(home).path("sessions", "..", "state.db")
    for parts in (("sessions", "..", "state.db"), ("sessions", "../state.db")):
        assert HomeFS(home).unlink(*parts) is None  # a bad path is never deleted: kept
    assert (home / "state.db").exists()


def test_export_never_overwrites_a_hermes_or_keeper_file(home, outside, tmp_path):
    assert keeper("run", "--home", str(home)).returncode == 0
    (home / "link.jsonl").symlink_to(outside / "precious.txt")
    os.mkfifo(tmp_path / "fifo")
    targets = [
        home / "state.db",
        home / "state.db-wal",
        home / "keeper.lock",
        home / "keeper" / "archive.db",
        home / "keeper" / "journal.jsonl",
        home / "keeper" / "new.jsonl",
        home / "link.jsonl",
        tmp_path / "fifo",
    ]
    before, outside_before = tree_digest(home), snapshot(outside)
    for target in targets:
        refused(keeper("archive", "export", "--home", str(home), "-o", str(target)), str(target))
        refused(keeper("archive", "export", "--home", str(home), "--split", "-o", str(target)), str(target))
    assert tree_digest(home) == before and snapshot(outside) == outside_before
    assert (home / "link.jsonl").is_symlink()
    # Relative to the working folder, and through another name for the home: still refused.
    alias = tmp_path / "alias"
    alias.symlink_to(home, target_is_directory=True)
    with pytest.raises(KeeperError, match="file of the Hermes home"):
        check_export_target(alias / "state.db")
    good = keeper("archive", "export", "--home", str(home), "-o", str(tmp_path / "out.jsonl"))
    assert good.returncode == 0, good.stderr
    assert (tmp_path / "out.jsonl").read_text().count("\n") > 30


def test_keeper_files_found_loose_are_tightened(home):
    assert keeper("run", "--home", str(home)).returncode == 0
    os.chmod(home / "keeper" / "archive.db", 0o644)
    os.chmod(home / "keeper" / "journal.jsonl", 0o666)
    os.chmod(home / "keeper.lock", 0o666)
    os.chmod(home / "keeper", 0o755)
    os.chmod(home / "keeper" / "backups", 0o755)
    for command in (["archive", "list"], ["backups"], ["report"]):  # reading changes nothing
        assert keeper(*command, "--home", str(home)).returncode == 0
    assert stat.S_IMODE((home / "keeper" / "archive.db").stat().st_mode) == 0o644
    for command in (["run"], ["backup"]):  # nothing left to prune: the files are only opened
        res = keeper(*command, "--home", str(home))
        assert res.returncode == 0, res.stderr
    mode = {p: stat.S_IMODE((home / p).stat().st_mode) for p in ("keeper.lock", "keeper")}
    mode |= {p: stat.S_IMODE((home / "keeper" / p).stat().st_mode) for p in os.listdir(home / "keeper")}
    assert mode["keeper.lock"] == mode["archive.db"] == mode["journal.jsonl"] == 0o600
    assert mode["keeper"] == mode["backups"] == 0o700


@pytest.mark.parametrize(
    "command",
    [["backup"], ["compact"], ["restore", "--latest"], ["archive", "restore", "x"], ["backups", "--prune"]],
)
def test_a_folder_that_is_not_a_hermes_home_gets_nothing_created(tmp_path, command):
    folder = tmp_path / "not-a-home"
    folder.mkdir()
    (folder / "notes.txt").write_text("mine\n")
    before = snapshot(folder)
    refused(keeper(*command, "--home", str(folder)), "not a Hermes home")
    assert snapshot(folder) == before


def test_a_killed_backups_temp_copy_is_listed_then_removed(home):
    assert keeper("backup", "--home", str(home)).returncode == 0
    folder = home / "keeper" / "backups"
    leftover = folder / ".state-20260101T000000Z.db.tmp"  # what a SIGKILL during VACUUM INTO leaves
    shutil.copyfile(home / "state.db", leftover)
    size = leftover.stat().st_size
    listing = keeper("backups", "--json", "--home", str(home))
    found = json.loads(listing.stdout)["profiles"][0]["killed_backup_files"]
    assert found == [{"name": leftover.name, "bytes": size}]
    assert "left by a killed backup" in keeper("backups", "--home", str(home)).stdout
    assert keeper("backup", "--home", str(home)).returncode == 0
    assert not leftover.exists()
    removed = [r for r in read_journal(home / "keeper") if r["action"] == "backup_temp_removed"]
    assert [(r["name"], r["bytes"]) for r in removed] == [(leftover.name, size)]


def test_restore_refuses_a_linked_wal_before_moving_anything(home, outside):
    profile = Profile("default", home, home)
    record = take_backup(profile)
    (home / "state.db-wal").unlink(missing_ok=True)
    (home / "state.db-wal").symlink_to(outside / "precious.txt")
    before, db = snapshot(outside), state_digest(home)
    with pytest.raises(KeeperError, match="state.db-wal is a symlink"):
        restore_backup(profile, record)
    assert snapshot(outside) == before and state_digest(home) == db
    assert not list(home.glob("state.db.keeper-before-restore-*"))


def test_a_name_read_from_the_manifest_never_leaves_the_backup_folder(home):
    assert keeper("backup", "--home", str(home)).returncode == 0
    manifest = home / "keeper" / "backups" / "manifest.json"
    data = json.loads(manifest.read_text())
    forged = dict(data["backups"][0], name="../../state.db", created_at=time.time() + 60)  # the newest
    data["backups"].append(forged)
    manifest.write_text(json.dumps(data))
    db = state_digest(home)
    for command in (
        ["backups", "--prune"],
        ["backups"],
        ["backup"],
        ["restore", "--latest", "--force", "--yes"],
    ):
        refused(keeper(*command, "--home", str(home)), "'../../state.db'", "not one plain name")
    assert state_digest(home) == db


def test_rename_link_chmod_and_sync_stay_in_the_home_and_follow_no_link(tmp_path, outside):
    """The door's moves for a restore's swap: a symlink (to a file or a folder outside) is refused,
    never followed; a name that is not one plain name never leaves the folder; nothing outside changes."""
    home = tmp_path / "home"
    (home / "keeper").mkdir(parents=True)
    (home / "state.db").write_bytes(b"db")
    os.chmod(home / "state.db", 0o644)
    (home / "link").symlink_to(outside / "precious.txt")
    (home / "folder").symlink_to(outside, target_is_directory=True)
    fs, before = HomeFS(home), snapshot(outside)

    fs.link("state.db", to="copy", sync=False)
    fs.chmod("copy", mode=0o600, owner=(os.geteuid(), os.getegid()))
    fs.sync()
    assert os.path.samefile(home / "state.db", home / "copy")  # one file, two names
    assert stat.S_IMODE((home / "state.db").stat().st_mode) == 0o600
    fs.rename("copy", to="moved", sync=False)
    (home / "new").write_bytes(b"new")
    fs.rename("new", to="moved")  # replaces a regular file
    assert (home / "moved").read_bytes() == b"new" and (home / "state.db").stat().st_nlink == 1
    fs.unlink("moved")
    assert sorted(os.listdir(home)) == ["folder", "keeper", "link", "state.db"]
    with pytest.raises(FileNotFoundError):
        fs.link("gone", to="other")
    with pytest.raises(FileNotFoundError):
        fs.chmod("gone", mode=0o600)

    for refuse in (
        lambda: fs.link("link", to="copy"),  # a symlink is not hard-linked (nor what it points to)
        lambda: fs.chmod("link", mode=0o600),
        lambda: fs.chmod("link", mode=0o600, owner=(os.geteuid(), os.getegid())),
        lambda: fs.rename("link", to="copy"),
        lambda: fs.rename("state.db", to="link"),  # nor replaced
        lambda: fs.link("folder", "precious.txt", to="copy"),  # nor walked through to a folder outside
        lambda: fs.chmod("folder", "precious.txt", mode=0o600),
        lambda: fs.rename("folder", "precious.txt", to="copy"),
        lambda: fs.sync("folder"),
    ):
        with pytest.raises(KeeperError, match="is a symlink"):
            refuse()
    with pytest.raises(FileExistsError):
        fs.link("state.db", to="link")  # an existing name, a link too, is never replaced
    elsewhere = os.path.relpath(outside / "precious.txt", home)
    for refuse in (
        lambda: fs.link("state.db", to=elsewhere),
        lambda: fs.link("state.db", to="../copy"),
        lambda: fs.rename("state.db", to=elsewhere),
        lambda: fs.chmod("..", "elsewhere", "precious.txt", mode=0o600),
        lambda: fs.sync(".."),
    ):
        with pytest.raises(KeeperError, match="not one plain name"):
            refuse()
    assert snapshot(outside) == before
    assert sorted(os.listdir(home)) == ["folder", "keeper", "link", "state.db"]
    assert (home / "state.db").read_bytes() == b"db" and (home / "link").is_symlink()
