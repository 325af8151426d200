"""Side doors to files outside the home, and one lock per database (issue 34, second round).

Each test is one row of "Side doors" in docs/reliability.md. Files outside the home have their
bytes, mode and owner asserted unchanged; the root cases run for real (the suite runs as root)
on a home chowned to ``nobody``; the bind mount is a real ``mount --bind`` (conftest's policy:
mount for real, fail loudly, never skip).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import shutil
import stat
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from hermes_keeper import demo
from hermes_keeper.errors import KeeperError
from hermes_keeper.home import Home, Profile, select_profiles
from tests.conftest import tree_digest
from tests.test_fs_door import keeper, refused, snapshot

NOBODY = 65534


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    home = tmp_path_factory.mktemp("doors") / "home"
    demo.build_home(home, demo.generate(time.time(), sessions=60))
    return home


@pytest.fixture
def home(built, tmp_path) -> Path:
    return Path(shutil.copytree(built, tmp_path / "home", symlinks=True))


def outside_file(tmp_path: Path) -> Path:
    """A file of someone else's, outside the home but on its filesystem (a hard link can reach it)."""
    (tmp_path / "elsewhere").mkdir()
    path = tmp_path / "elsewhere" / "precious.txt"
    path.write_text("not the keeper's\n")
    os.chmod(path, 0o644)
    return path


def facts(path: Path) -> tuple:
    st = path.stat()
    return path.read_bytes(), stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid


@pytest.mark.parametrize(
    "name, command",
    [
        ("keeper.lock", ["run"]),
        ("keeper.lock", ["backup"]),
        ("keeper/journal.jsonl", ["run"]),
        ("keeper/journal.jsonl", ["compact"]),
        ("keeper/archive.db", ["run"]),
        ("keeper/archive.db", ["archive", "restore", "x"]),
    ],
)
def test_hard_linked_keeper_files_are_refused(home, tmp_path, name, command):
    """A keeper file that is a second name of a file outside the home: never truncated, appended
    to or chmod-ed through it (the lock was cut to a pid and made 0600; the journal grew)."""
    precious = outside_file(tmp_path)
    assert keeper("run", "--home", str(home)).returncode == 0  # keeper/ and its files exist
    (home / name).unlink()
    os.link(precious, home / name)
    before, db = facts(precious), (home / "state.db").read_bytes()
    refused(keeper(*command, "--home", str(home)), name.split("/")[-1], "hard link")
    assert facts(precious) == before
    assert (home / "state.db").read_bytes() == db


@pytest.mark.parametrize("where", ["outside", "inside"])
def test_backup_dest_that_exists_keeps_its_mode(home, tmp_path, where):
    """``backup --dest`` on a shared folder (``/tmp``: 1777) left it 0700; a folder the keeper did
    not make keeps its mode, the backups in it are still 0600."""
    shared = tmp_path / "shared" if where == "outside" else home / "shared"
    shared.mkdir()
    os.chmod(shared, 0o1777)
    (shared / "theirs.txt").write_text("someone else's\n")
    for command in (["backup", "--dest", str(shared)], ["backups", "--dest", str(shared), "--prune"]):
        res = keeper(*command, "--home", str(home))
        assert res.returncode == 0, res.stderr
        assert stat.S_IMODE(shared.stat().st_mode) == 0o1777
    made = [p for p in shared.iterdir() if p.name.endswith(".db.zst")]
    assert made and all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in made)
    new = tmp_path / "new" / "backups"
    assert keeper("backup", "--dest", str(new), "--home", str(home)).returncode == 0
    assert stat.S_IMODE(new.stat().st_mode) == 0o700  # one it made: private


@contextlib.contextmanager
def users_home(built: Path):
    """A copy of the demo home owned by ``nobody``, in a folder that user can reach (pytest's
    tmp_path is root's 0700)."""
    top = Path(tempfile.mkdtemp(prefix="keeper-doors-"))
    try:
        os.chmod(top, 0o755)
        home = Path(shutil.copytree(built, top / "home", symlinks=True))
        (home / "config.yaml").write_text("model: x\nsessions:\n  auto_prune: true\n")
        os.chmod(home / "config.yaml", 0o644)
        for p in (home, *home.rglob("*")):
            os.lchown(p, NOBODY, NOBODY)
        yield home
    finally:
        shutil.rmtree(top)


@pytest.mark.parametrize("command", [["adopt", "--yes"], ["run"], ["backup"], ["report"]])
def test_root_on_a_users_home_is_refused(built, command):
    """``sudo hermes-keeper adopt`` left config.yaml root's 0600 (Hermes could not read it); one
    root ``run`` made keeper/ root's (the user's own commands failed). Refused in one line naming
    the user, before anything is written (not switched to that user: see require_owner)."""
    assert os.geteuid() == 0  # the suite runs as root: this is the real case
    with users_home(built) as home:
        before = snapshot(home)
        refused(keeper(*command, "--home", str(home)), "belongs to nobody", "sudo -u nobody")
        assert snapshot(home) == before
        assert {p.lstat().st_uid for p in (home, *home.rglob("*"))} == {NOBODY}


def test_root_on_a_root_folder_with_a_users_database_is_refused(home):
    """A folder root owns (a mounted volume) holding the state.db Hermes runs as its user: what
    root would make beside it (keeper/) the user could not open either."""
    os.chown(home / "state.db", NOBODY, NOBODY)
    before = snapshot(home)
    refused(keeper("run", "--home", str(home)), "belongs to nobody")
    assert snapshot(home) == before


def test_library_as_root_refuses_a_users_home(built):
    """A library caller as root on a user's home: refused before anything, as the command is."""
    with users_home(built) as home:
        before = snapshot(home)
        for open_home in (Home, lambda h: select_profiles(h, all_profiles=True)):
            with pytest.raises(KeeperError, match="belongs to nobody"):
                open_home(home)
        profile = Profile("default", home, home)  # made by hand: the lock and journal still refuse
        for change in (profile.adopt, profile.note_schedule):
            with pytest.raises(KeeperError, match="belongs to nobody"):
                change(True, "cron") if change == profile.note_schedule else change()
        assert snapshot(home) == before


def test_adopt_keeps_config_owner_group_and_mode(home):
    """A config.yaml of another user in a home root works on: rewritten, still theirs, same mode."""
    config = home / "config.yaml"
    config.write_text("model: x\nsessions:\n  auto_prune: true\n")
    os.chown(config, NOBODY, NOBODY)
    os.chmod(config, 0o640)
    res = keeper("adopt", "--yes", "--home", str(home))
    assert res.returncode == 0, res.stderr
    st = config.stat()
    assert "auto_prune: false" in config.read_text()
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (NOBODY, NOBODY, 0o640)


def test_adopt_in_a_folder_that_is_not_a_home_changes_nothing(tmp_path):
    """``adopt`` rewrote config.yaml, then its journal refused the folder: exit 2, "nothing
    changed", and config.yaml changed. The journal's checks now come first."""
    folder = tmp_path / "not-yet"
    folder.mkdir()
    (folder / "config.yaml").write_text("model: x\n")
    before = snapshot(folder)
    refused(keeper("adopt", "--yes", "--home", str(folder)), "not a Hermes home")
    assert snapshot(folder) == before


def test_demo_refuses_a_hermes_home_without_a_database(tmp_path):
    """``demo DIR`` wrote 317 fake sessions into a real home that had no state.db yet."""
    home = tmp_path / "real"
    home.mkdir()
    (home / "config.yaml").write_text("model: x\n")
    (home / "sessions").mkdir()
    before = snapshot(home)
    refused(keeper("demo", str(home)), "not empty", "config.yaml")
    assert snapshot(home) == before


@pytest.mark.parametrize("body", [b"", b"not a database, a text file that lost its way\n"])
@pytest.mark.parametrize("command", [["backup"], ["compact"], ["archive", "restore", "x"]])
def test_a_refused_database_gets_no_keeper_files(tmp_path, body, command):
    """``backup``/``compact``/``archive restore`` made keeper/, keeper.lock and a journal in front
    of a database they then refused; the check now comes first."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "state.db").write_bytes(body)
    before = snapshot(home)
    refused(keeper(*command, "--home", str(home)), "state.db")
    assert snapshot(home) == before


def test_archive_restore_without_an_archive_creates_nothing(home):
    before = tree_digest(home)  # reading a WAL database leaves an -shm: no data
    refused(keeper("archive", "restore", "x", "--home", str(home)), "no archive")
    assert tree_digest(home) == before and not (home / "keeper").exists()


@contextlib.contextmanager
def bind_mount(source: Path, target: Path):
    """``source`` also reachable at ``target`` (a real bind mount, unmounted at the end)."""
    target.mkdir()
    subprocess.run(["mount", "--bind", str(source), str(target)], check=True)
    try:
        yield target
    finally:
        subprocess.run(["umount", str(target)], check=True)


@pytest.fixture
def two_paths(tmp_path):
    """A root with a profile ``work``, and that profile's folder bind-mounted elsewhere."""
    root = tmp_path / "root"
    demo.build_home(root, demo.generate(time.time(), sessions=20))
    work = root / "profiles" / "work"
    demo.build_home(work, demo.generate(time.time(), sessions=60))
    with bind_mount(work, tmp_path / "mnt") as mnt:
        yield root, mnt


@pytest.mark.parametrize("command", [["run"], ["backup"], ["compact"]])
def test_one_lock_per_database_whatever_path_reaches_it(two_paths, command):
    """The same profile as ``--home ROOT --profile work`` and through a bind mount took two locks:
    two runs at once (more archive entries than sessions, FTS automerge=0 left without its hold
    file). While one keeper holds it by one path, the other path is refused, nothing changed."""
    root, mnt = two_paths
    with Home(root).profile("work")._changing():
        before = tree_digest(mnt)
        res = keeper(*command, "--home", str(mnt))
        after = tree_digest(mnt)
    refused(res, "another hermes-keeper is running", "through another path")
    after.pop("keeper.lock")  # its own lock file (a pid in it), taken first: the same path's lock
    assert after == before and (mnt / "keeper.lock").read_text().isdigit()
    again = keeper("run", "--home", str(mnt))  # released: the other path runs
    assert again.returncode == 0, again.stderr


def test_the_database_lock_holds_before_the_database_exists(two_paths):
    """A home that lost its state.db (a restore to come) still has one lock, keyed by the folder."""
    root, mnt = two_paths
    assert keeper("backup", "--home", str(mnt)).returncode == 0
    for side in ("state.db", "state.db-wal", "state.db-shm"):
        (mnt / side).unlink(missing_ok=True)
    with Home(root).profile("work")._changing():
        refused(keeper("restore", "--latest", "--yes", "--home", str(mnt)), "another hermes-keeper")
    assert not (mnt / "state.db").exists()
    res = keeper("restore", "--latest", "--yes", "--home", str(mnt))
    assert res.returncode == 0, res.stderr
    assert (root / "profiles" / "work" / "state.db").is_file()


def test_where_a_folder_cannot_be_flocked_keeper_lock_alone_guards(home, monkeypatch):
    """NFS emulates flock with POSIX locks, which a folder opened read-only cannot take (EBADF):
    the database lock is then left out, not the command."""
    real = fcntl.flock

    def nfs_flock(fd, op):
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            raise OSError(errno.EBADF, os.strerror(errno.EBADF))
        return real(fd, op)

    monkeypatch.setattr(fcntl, "flock", nfs_flock)
    done = Home(home).profile().backup()
    assert done.record.path.is_file()
    with Home(home).profile()._changing(), pytest.raises(KeeperError, match=r"pid \d+"):
        Home(home).profile().backup()  # the same home: keeper.lock still says no
