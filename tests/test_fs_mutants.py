"""The filesystem door at its edges, function by function: what each says, returns and leaves.

Written against the mutants ``tools/mutate.py src/hermes_keeper/fs.py`` left (docs/testing.md):
the exact words of each refusal (the path it names, what the thing is), the modes the keeper
sets and the ones it leaves, the counts it returns, and the races between a check and the
change it guards (a name swapped for a symlink, a FIFO or a second name in between), played by
a wrapped ``os.lstat``. Pure and fast: small files under ``tmp_path``, no home built.
"""

from __future__ import annotations

import errno
import os
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from hermes_keeper import fs
from hermes_keeper.errors import KeeperError
from hermes_keeper.fs import HomeFS


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def fake_stat(kind: int, perms: int = 0o600, uid: int | None = None, nlink: int = 1) -> os.stat_result:
    uid = os.geteuid() if uid is None else uid
    return os.stat_result((kind | perms, 1, 1, nlink, uid, 0, 0, 0, 0, 0))


def after_lstat(monkeypatch, name: str, change) -> None:
    """Run ``change`` once, right after the door's first ``lstat`` of ``name``: the race between
    its check and its change."""
    real, pending = os.lstat, [change]

    def lstat(path, *args, **kwargs):
        st = real(path, *args, **kwargs)
        if path == name and pending:
            pending.pop()()
        return st

    monkeypatch.setattr(os, "lstat", lstat)


@pytest.fixture
def home(tmp_path) -> Path:
    (tmp_path / "home" / "keeper").mkdir(parents=True)
    return tmp_path / "home"


@pytest.fixture
def precious(tmp_path) -> Path:
    """A file outside the home, 0644: never written, chmod-ed or chown-ed through a link."""
    path = tmp_path / "precious.txt"
    path.write_text("not the keeper's\n")
    os.chmod(path, 0o644)
    return path


def test_what_it_is_names_each_kind(tmp_path):
    (tmp_path / "target").write_text("x")
    (tmp_path / "link").symlink_to(tmp_path / "target")
    link = tmp_path / "link"
    assert fs.what_it_is(link, os.lstat(link)) == f"is a symlink (to {tmp_path / 'target'})"
    assert fs.what_it_is(tmp_path, os.lstat(tmp_path)) == "is a folder"
    assert fs.what_it_is(link, fake_stat(stat.S_IFREG)) == "is a file, not a folder"
    assert fs.what_it_is(link, fake_stat(stat.S_IFIFO)) == "is a FIFO (named pipe), not a regular file"
    for device in (stat.S_IFCHR, stat.S_IFBLK):
        assert fs.what_it_is(link, fake_stat(device)) == "is a device, not a regular file"
    assert fs.what_it_is(link, fake_stat(stat.S_IFSOCK)) == "is not a regular file"


def test_small_judgements():
    assert fs._linked(Path("/h/x"), fake_stat(stat.S_IFREG)) is None
    assert str(fs._linked(Path("/h/x"), fake_stat(stat.S_IFREG, nlink=3))) == (
        "/h/x is a hard link (3 names for one file, another may be outside the home); the keeper does "
        "not write through it, nothing changed (give it a name of its own: copy it and move the copy over it)"
    )
    missing = fs._missing(Path("/h/x"))
    assert (missing.errno, missing.strerror, missing.filename) == (
        errno.ENOENT,
        os.strerror(errno.ENOENT),
        "/h/x",
    )
    assert fs._loose(fake_stat(stat.S_IFREG, 0o644), 0o600)
    assert not fs._loose(fake_stat(stat.S_IFREG, 0o600), 0o600)
    assert not fs._loose(fake_stat(stat.S_IFREG, 0o644, uid=os.geteuid() + 4242), 0o600)  # another's
    for name in ("", ".", "..", "a/b", "a\0b", 5, None):
        assert not fs.plain_name(name), name
    assert fs.plain_name("state.db") and fs.plain_name("...")


def test_read_regular_reads_a_file_and_refuses_the_rest(tmp_path, precious):
    link = tmp_path / "link"
    link.symlink_to(precious)
    os.mkfifo(tmp_path / "fifo")
    assert fs.read_regular(str(precious)) == b"not the keeper's\n"
    assert fs.read_regular(link) == b"not the keeper's\n"  # followed unless told not to
    os.chmod(precious, 0o444)  # read-only opens too (not opened to write)
    assert fs.read_regular(precious, follow=False) == b"not the keeper's\n"
    with pytest.raises(KeeperError) as no:
        fs.read_regular(link, follow=False)
    assert str(no.value) == f"{link} is a symlink (to {precious}); the keeper does not read it"
    with pytest.raises(KeeperError) as no:
        fs.read_regular(tmp_path / "fifo")  # never blocks waiting for a writer
    assert (
        str(no.value)
        == f"{tmp_path / 'fifo'} is a FIFO (named pipe), not a regular file; the keeper does not read it"
    )
    with pytest.raises(KeeperError) as no:
        fs.read_regular(tmp_path)
    assert str(no.value) == f"{tmp_path} is a folder; the keeper does not read it"
    with pytest.raises(FileNotFoundError):
        fs.read_regular(tmp_path / "absent")


def test_read_regular_closes_what_it_opens(tmp_path, precious):
    before = len(os.listdir("/proc/self/fd"))
    for _ in range(3):
        fs.read_regular(precious)
        with pytest.raises(KeeperError):
            fs.read_regular(tmp_path)
    assert len(os.listdir("/proc/self/fd")) == before


def test_read_hermes_follows_a_link_only_when_told(home, precious):
    (home / "config.yaml").symlink_to(precious)
    hfs = HomeFS(home)
    with pytest.raises(KeeperError, match="is a symlink"):
        hfs.read_hermes("config.yaml")
    assert hfs.read_hermes("config.yaml", follow=True) == b"not the keeper's\n"
    assert hfs.read_hermes("absent.yaml") is None


def test_plain_dir_is_a_real_folder_only(home, tmp_path):
    (home / "file").write_text("x")
    (home / "linked").symlink_to(tmp_path, target_is_directory=True)
    hfs = HomeFS(home)
    assert hfs.plain_dir("keeper") is True
    assert [hfs.plain_dir(n) for n in ("file", "linked", "absent")] == [False, False, False]


def test_open_private_creates_0600_and_tightens_only_to_write(home):
    hfs = HomeFS(home)
    os.close(hfs.open_private("keeper", "new"))
    assert mode(home / "keeper" / "new") == 0o600
    with pytest.raises(FileNotFoundError):
        hfs.open_private("keeper", "deep", "x")  # folders made only when asked
    os.close(hfs.open_private("keeper", "deep", "x", create_dirs=True))
    assert (mode(home / "keeper" / "deep"), mode(home / "keeper" / "deep" / "x")) == (0o700, 0o600)
    for flags, after in ((os.O_RDONLY, 0o644), (os.O_WRONLY, 0o600), (os.O_RDWR, 0o600)):
        loose = home / "keeper" / f"loose{flags}"
        loose.write_text("x")
        os.chmod(loose, 0o644)
        os.close(hfs.open_private("keeper", loose.name, flags=flags))
        assert mode(loose) == after, flags
    hfs.private_file("keeper", "made")
    assert mode(home / "keeper" / "made") == 0o600
    with pytest.raises(FileNotFoundError):
        hfs.private_file("keeper", "deeper", "x")
    assert hfs.private_file("keeper", "deeper", "x", create_dirs=True) == home / "keeper" / "deeper" / "x"


def test_open_private_refuses_a_second_name_before_truncating(home, precious):
    os.link(precious, home / "keeper" / "journal")
    with pytest.raises(KeeperError) as no:
        HomeFS(home).open_private("keeper", "journal", flags=os.O_RDWR | os.O_TRUNC)
    assert str(no.value).startswith(f"{home / 'keeper' / 'journal'} is a hard link (2 names")
    assert precious.read_text() == "not the keeper's\n" and mode(precious) == 0o644
    os.mkfifo(home / "keeper" / "fifo")
    with pytest.raises(KeeperError) as no:
        HomeFS(home).open_private("keeper", "fifo", flags=os.O_RDONLY)  # refused before an open that blocks
    assert str(no.value) == (
        f"{home / 'keeper' / 'fifo'} is a FIFO (named pipe), not a regular file; "
        "the keeper does not follow or replace it, nothing changed"
    )


def swap_for(home: Path, name: str, make) -> callable:
    def swap():
        os.unlink(home / "keeper" / name)
        make(home / "keeper" / name)

    return swap


def test_open_private_refuses_a_symlink_swapped_in_after_its_check(home, precious, monkeypatch):
    (home / "keeper" / "x").write_text("mine")
    after_lstat(monkeypatch, "x", swap_for(home, "x", lambda p: p.symlink_to(precious)))
    with pytest.raises(KeeperError) as no:
        HomeFS(home).open_private("keeper", "x", flags=os.O_RDWR | os.O_TRUNC)
    assert str(no.value) == (
        f"{home / 'keeper' / 'x'} is a symlink (to {precious}); "
        "the keeper does not follow or replace it, nothing changed"
    )
    assert precious.read_text() == "not the keeper's\n" and mode(precious) == 0o644


def test_open_private_refuses_a_fifo_or_a_second_name_arriving_after_its_check(home, precious, monkeypatch):
    (home / "keeper" / "x").write_text("mine")
    before = len(os.listdir("/proc/self/fd"))
    after_lstat(monkeypatch, "x", swap_for(home, "x", os.mkfifo))
    with pytest.raises(KeeperError) as no:
        HomeFS(home).open_private("keeper", "x")
    assert str(no.value) == (
        f"{home / 'keeper' / 'x'} is a FIFO (named pipe), not a regular file; "
        "the keeper does not follow or replace it, nothing changed"
    )
    (home / "keeper" / "y").write_text("mine")
    after_lstat(monkeypatch, "y", lambda: os.link(home / "keeper" / "y", home / "y2"))
    with pytest.raises(KeeperError) as no:
        HomeFS(home).open_private("keeper", "y")
    assert str(no.value).startswith(f"{home / 'keeper' / 'y'} is a hard link (2 names")
    assert len(os.listdir("/proc/self/fd")) == before  # the descriptor opened is closed


def test_sqlite_file_checks_each_side_file_and_tightens_only_to_create(home, precious):
    hfs, keeper = HomeFS(home), home / "keeper"
    with pytest.raises(FileNotFoundError) as gone:
        hfs.sqlite_file("keeper", "index.db")
    assert gone.value.filename == str(keeper / "index.db")
    assert hfs.sqlite_file("keeper", "new", "index.db", create=True) == keeper / "new" / "index.db"
    assert (mode(keeper / "new"), mode(keeper / "new" / "index.db")) == (0o700, 0o600)
    for name in ("index.db", "index.db-shm"):
        (keeper / name).write_text("")
        os.chmod(keeper / name, 0o644)
    hfs.sqlite_file("keeper", "index.db")  # to read: modes left
    assert (mode(keeper / "index.db"), mode(keeper / "index.db-shm")) == (0o644, 0o644)
    hfs.sqlite_file("keeper", "index.db", create=True)
    assert (mode(keeper / "index.db"), mode(keeper / "index.db-shm")) == (0o600, 0o600)
    (keeper / "index.db-journal").symlink_to(precious)  # past an absent -wal
    with pytest.raises(KeeperError) as no:
        hfs.sqlite_file("keeper", "index.db", create=True)
    assert str(no.value).startswith(f"{keeper / 'index.db-journal'} is a symlink")
    assert mode(precious) == 0o644


def test_rename_checks_the_target_in_the_same_folder_and_syncs_it(home, precious, monkeypatch):
    hfs, keeper = HomeFS(home), home / "keeper"
    (keeper / "a").write_text("a")
    (keeper / "b").symlink_to(precious)
    with pytest.raises(KeeperError, match="is a symlink"):
        hfs.rename("keeper", "a", to="b")
    assert (keeper / "b").is_symlink()
    synced = []
    monkeypatch.setattr(os, "fsync", synced.append)
    hfs.rename("keeper", "a", to="c")
    hfs.link("keeper", "c", to="d")
    assert len(synced) == 2 and all(isinstance(fd, int) for fd in synced)
    with pytest.raises(FileNotFoundError) as gone:
        hfs.link("keeper", "absent", to="e")
    assert gone.value.filename == str(keeper / "absent")
    with pytest.raises(FileNotFoundError) as gone:
        hfs.chmod("keeper", "absent", mode=0o600)
    assert gone.value.filename == str(keeper / "absent")


def test_chmod_and_chown_by_name_never_follow_a_symlink_swapped_in(home, precious, monkeypatch):
    hfs, keeper = HomeFS(home), home / "keeper"
    (keeper / "x").write_text("mine")
    hfs.chmod("keeper", "x", mode=0o640, owner=(4242, 4243))
    st = os.lstat(keeper / "x")
    assert (stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid) == (0o640, 4242, 4243)
    hfs.chmod("keeper", "x", mode=0o600)
    assert (mode(keeper / "x"), os.lstat(keeper / "x").st_uid) == (0o600, 4242)
    for owner in (None, (4242, 4243)):
        (keeper / "y").write_text("mine")
        after_lstat(monkeypatch, "y", swap_for(home, "y", lambda p: p.symlink_to(precious)))
        with pytest.raises(KeeperError, match="y is a symlink .*does not follow or replace it"):
            hfs.chmod("keeper", "y", mode=0o777, owner=owner)
        st = os.stat(precious)
        assert (stat.S_IMODE(st.st_mode), st.st_uid) == (0o644, 0), owner
        os.unlink(keeper / "y")


def test_sqlite_file_tightens_by_name_never_through_a_symlink_swapped_in(home, precious, monkeypatch):
    keeper = home / "keeper"
    (keeper / "index.db").write_text("")
    os.chmod(keeper / "index.db", 0o644)
    after_lstat(monkeypatch, "index.db", swap_for(home, "index.db", lambda p: p.symlink_to(precious)))
    with pytest.raises(KeeperError) as no:
        HomeFS(home).sqlite_file("keeper", "index.db", create=True)
    assert str(no.value) == (
        f"{keeper / 'index.db'} is a symlink (to {precious}); the keeper does not follow or replace it, "
        "nothing changed"
    )
    assert mode(precious) == 0o644


def test_unlink_and_entries(home, tmp_path):
    hfs, keeper = HomeFS(home), home / "keeper"
    (keeper / "b").write_bytes(b"12345")
    (keeper / "a").symlink_to(tmp_path)
    (keeper / "c").mkdir()
    listed = hfs.entries("keeper")
    assert [n for n, _ in listed] == ["a", "b", "c"]
    assert [stat.S_IFMT(st.st_mode) for _, st in listed] == [stat.S_IFLNK, stat.S_IFREG, stat.S_IFDIR]
    assert hfs.entries("absent") == []
    assert hfs.entries("keeper", "a") is None and hfs.entries("keeper", "b") is None
    assert hfs.unlink("keeper", "b") == 5 and not (keeper / "b").exists()
    assert [hfs.unlink("keeper", n) for n in ("a", "c", "b")] == [None, None, None]
    assert (keeper / "a").is_symlink() and (keeper / "c").is_dir()


def test_remove_tree_counts_bytes_and_keeps_links_with_their_folders(home, tmp_path, precious):
    hfs, tree = HomeFS(home), home / "keeper" / "tree"
    (tree / "sub" / "deeper").mkdir(parents=True)
    (tree / "kept" / "inner").mkdir(parents=True)
    (tree / "a").write_bytes(b"x" * 100)
    (tree / "sub" / "b").write_bytes(b"x" * 20)
    (tree / "sub" / "deeper" / "c").write_bytes(b"x" * 3)
    (tree / "kept" / "inner" / "d").write_bytes(b"x" * 7)
    (tree / "kept" / "inner" / "link").symlink_to(precious)
    (tree / "kept" / "pipe").symlink_to(tmp_path, target_is_directory=True)
    assert hfs.remove_tree("keeper", "tree") == 130
    assert sorted(str(p.relative_to(tree)) for p in tree.rglob("*")) == [
        "kept",
        "kept/inner",
        "kept/inner/link",
        "kept/pipe",
    ]
    os.unlink(tree / "kept" / "inner" / "link")
    os.unlink(tree / "kept" / "pipe")
    assert hfs.remove_tree("keeper", "tree") == 0 and not tree.exists()
    (home / "keeper" / "file").write_bytes(b"x" * 9)
    (home / "keeper" / "link").symlink_to(tmp_path, target_is_directory=True)
    assert [hfs.remove_tree("keeper", n) for n in ("file", "link", "absent")] == [None, None, None]
    assert (home / "keeper" / "file").exists() and precious.exists()


def test_clear_folder_of_a_link_or_a_file_removes_nothing(home):
    (home / "keeper" / "file").write_bytes(b"x" * 9)
    (home / "keeper" / "link").symlink_to(home / "keeper" / "file")
    fd = os.open(home / "keeper", os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert fs._clear_folder(fd, "file") == (0, False)
        assert fs._clear_folder(fd, "link") == (0, False)
        with pytest.raises(FileNotFoundError):
            fs._clear_folder(fd, "absent")
    finally:
        os.close(fd)
    assert (home / "keeper" / "file").read_bytes() == b"x" * 9


def test_a_folder_that_fills_while_it_is_cleared_is_kept(home, monkeypatch):
    tree = home / "keeper" / "tree"
    tree.mkdir()
    (tree / "a").write_bytes(b"xy")
    real = os.rmdir

    def rmdir(name, *args, **kwargs):
        (tree / "arrived").write_bytes(b"new")  # a file written meanwhile
        return real(name, *args, **kwargs)

    monkeypatch.setattr(os, "rmdir", rmdir)
    assert HomeFS(home).remove_tree("keeper", "tree") == 2
    assert os.listdir(tree) == ["arrived"]


def test_folder_outside_the_home_makes_its_parents(home, tmp_path):
    hfs = HomeFS(home)
    assert hfs.folder(tmp_path / "dest" / "a" / "b") == tmp_path / "dest" / "a" / "b"
    assert hfs.folder(tmp_path / "dest" / "a" / "c") == tmp_path / "dest" / "a" / "c"  # parent exists
    assert mode(tmp_path / "dest" / "a" / "c") == 0o700


def test_require_home_takes_a_database_a_keeper_folder_or_profiles(tmp_path):
    for made in ("state.db", "keeper", "profiles"):
        home = tmp_path / made / "home"
        home.mkdir(parents=True)
        (home / made).mkdir() if made != "state.db" else (home / made).write_bytes(b"")
        HomeFS(home).require_home()
    bare = tmp_path / "bare"
    (bare / "state.db").mkdir(parents=True)  # a folder of that name is no database
    with pytest.raises(KeeperError) as no:
        HomeFS(bare).require_home()
    assert str(no.value) == f"{bare} is not a Hermes home (state.db not found); nothing changed"


def test_check_keeper_tree_refuses_links_and_special_files(home, tmp_path):
    hfs, keeper = HomeFS(home), home / "keeper"
    HomeFS(tmp_path / "nohome").check_keeper_tree()  # no keeper folder: nothing to check
    (keeper / "a.journal").write_text("")
    (keeper / "archive").mkdir()
    hfs.check_keeper_tree()  # no backups folder yet
    (keeper / "backups" / "one").mkdir(parents=True)
    with pytest.raises(KeeperError) as no:
        hfs.check_keeper_tree()  # a backup is a file: a folder in backups/ is not the keeper's
    assert str(no.value) == (
        f"{keeper / 'backups' / 'one'} is a folder; the keeper does not follow or replace it, nothing changed"
    )
    os.rmdir(keeper / "backups" / "one")
    (keeper / "backups" / "b.db").write_text("")
    (keeper / "backups" / "z").symlink_to(tmp_path / "nowhere")
    with pytest.raises(KeeperError, match=f"^{keeper / 'backups' / 'z'} is a symlink"):
        hfs.check_keeper_tree()  # found after a regular file, a dangling link too
    os.unlink(keeper / "backups" / "z")
    (keeper / "z").symlink_to(keeper / "archive", target_is_directory=True)
    with pytest.raises(KeeperError, match=f"^{keeper / 'z'} is a symlink"):
        hfs.check_keeper_tree()


def test_module_helpers(tmp_path):
    assert fs.private_dir(tmp_path / "made") == tmp_path / "made" and mode(tmp_path / "made") == 0o700
    (tmp_path / "loose").write_text("")
    os.chmod(tmp_path / "loose", 0o644)
    os.close(fs.open_private(tmp_path / "loose", flags=os.O_RDONLY))
    assert mode(tmp_path / "loose") == 0o644  # read-only: left as it is
    with pytest.raises(NotADirectoryError):
        fs.fsync_dir(tmp_path / "loose")


def owned_by(monkeypatch, owners: dict[Path, int]) -> None:
    """Run as root, over paths ``owners`` says belong to other uids (pure: nothing chown-ed)."""
    real_stat, real_lstat = os.stat, os.lstat

    def owned(real):
        def call(path, *args, **kwargs):
            st = real(path, *args, **kwargs)
            uid = owners.get(Path(path), st.st_uid)
            return os.stat_result((st.st_mode, st.st_ino, st.st_dev, st.st_nlink, uid, *st[5:10]))

        return call

    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(os, "stat", owned(real_stat))
    monkeypatch.setattr(os, "lstat", owned(real_lstat))


def test_root_refuses_a_home_another_user_owns(tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    (home / "state.db").write_bytes(b"")
    owned_by(monkeypatch, {home: 0, home / "state.db": 0})
    HomeFS(home).require_owner()  # root's own
    owned_by(monkeypatch, {home: 0, home / "state.db": 4242})  # a volume root owns, Hermes's database not
    with pytest.raises(KeeperError) as no:
        HomeFS(home).require_home()
    assert str(no.value) == (
        f"{home} belongs to #4242: as root the keeper would leave files #4242 cannot open;"
        " run it as #4242 (sudo -u #4242 hermes-keeper ...), nothing changed"
    )
    owned_by(monkeypatch, {home: 65534, home / "state.db": 0})
    with pytest.raises(
        KeeperError, match=f"^{home} belongs to nobody: .* run it as nobody \\(sudo -u nobody "
    ):
        HomeFS(home).require_owner()
    monkeypatch.undo()
    owned_by(monkeypatch, {home: 65534})
    monkeypatch.setattr(os, "geteuid", lambda: 65534)  # not root: its own business
    HomeFS(home).require_owner()


def test_link_names_a_symlink_swapped_in_never_what_it_points_to(home, precious, monkeypatch):
    (home / "keeper" / "x").write_text("mine")
    after_lstat(monkeypatch, "x", swap_for(home, "x", lambda p: p.symlink_to(precious)))
    HomeFS(home).link("keeper", "x", to="y", sync=False)
    assert (home / "keeper" / "y").is_symlink()  # a second name for the link itself
    assert os.stat(precious).st_nlink == 1  # the file outside gained no name in the home


def test_folder_outside_the_home_keeps_a_keeper_named_folders_mode(home, tmp_path):
    shared = tmp_path / "shared" / "keeper"  # a --dest that only happens to be called keeper
    shared.mkdir(parents=True)
    os.chmod(shared, 0o755)
    assert HomeFS(home).folder(shared) == shared and mode(shared) == 0o755
    os.chmod(home / "keeper", 0o755)
    alias = tmp_path / "alias"
    alias.symlink_to(home, target_is_directory=True)  # the home by another name: walked from the home
    assert HomeFS(home).folder(alias / "keeper" / "exports") == home / "keeper" / "exports"
    assert (mode(home / "keeper"), mode(home / "keeper" / "exports")) == (0o700, 0o700)


def test_check_export_target_refuses_hermes_and_keeper_files_of_any_home(
    home, tmp_path, precious, monkeypatch
):
    (home / "state.db").write_bytes(b"")
    (home / "keeper" / "archive").mkdir()
    monkeypatch.chdir(tmp_path)
    assert fs.check_export_target("out.md") == tmp_path / "out.md"  # absent: made absolute
    assert fs.check_export_target(precious) == precious  # an existing regular file: overwritten
    assert fs.check_export_target(home / "notes.md") == home / "notes.md"
    assert fs.check_export_target(home / "sub" / "state.db") == home / "sub" / "state.db"
    for target in (
        "state.db",
        "state.db-wal",
        "keeper.lock",
        "gateway.pid",
        "keeper/x.md",
        "keeper/archive/x.md",
    ):
        with pytest.raises(KeeperError) as no:
            fs.check_export_target(home / target)
        assert str(no.value) == (
            f"export target {home / target} is a file of the Hermes home {home}; "
            "choose another file, nothing changed"
        )
    alias = tmp_path / "alias"
    alias.symlink_to(home, target_is_directory=True)
    with pytest.raises(KeeperError, match=f"is a file of the Hermes home {home};"):
        fs.check_export_target(alias / "state.db")  # the home by another name
    (tmp_path / "link.md").symlink_to(precious)
    os.mkfifo(tmp_path / "fifo")
    for name, what in (
        ("link.md", f"is a symlink (to {precious})"),
        ("fifo", "is a FIFO (named pipe), not a regular file"),
    ):
        with pytest.raises(KeeperError) as no:
            fs.check_export_target(tmp_path / name)
        assert (
            str(no.value) == f"export target {tmp_path / name} {what}; choose another file, nothing changed"
        )


def test_sqlite_file_refuses_a_side_file_with_a_second_name(home, precious):
    (home / "keeper" / "index.db").write_bytes(b"")
    os.link(precious, home / "keeper" / "index.db-wal")
    with pytest.raises(KeeperError) as no:
        HomeFS(home).sqlite_file("keeper", "index.db", create=True)
    assert str(no.value).startswith(
        f"{home / 'keeper' / 'index.db-wal'} is a hard link (2 names for one file"
    )
    assert mode(precious) == 0o644


NOBODY = 65534  # the unprivileged uid and gid a root test drops to


def as_the_owner(folder: Path, act) -> str:
    """``act()`` in a forked child working in ``folder`` as its owner, said as text (its result or
    its exception). A root test drops to ``folder``'s uid and gid, for whom file modes hold (root
    opens any file whatever its mode); any other user is that owner already."""
    st = os.stat(folder)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        try:
            os.close(read)
            os.chdir(folder)
            if os.geteuid() == 0:
                os.setgroups([])
                os.setresgid(st.st_gid, st.st_gid, st.st_gid)
                os.setresuid(st.st_uid, st.st_uid, st.st_uid)
            try:
                said = repr(act())
            except OSError as exc:
                said = f"{type(exc).__name__}: {exc}"
            os.write(write, said.encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as fh:
        said = fh.read().decode()
    assert os.waitpid(pid, 0)[1] == 0
    return said


def test_private_file_needs_no_write_access_to_the_file_it_makes_sure_of(tmp_path):
    """A keeper file its owner made read-only (0400) is still there to be used: ``private_file``
    only makes sure it exists (read-only, created when absent), never asks to write it, and
    leaves its bytes alone. (Called here first too: mutmut only counts a test as reaching a
    function it saw called in the test's own process, not in the child.)"""
    assert fs.private_file(tmp_path / "made") == tmp_path / "made" and mode(tmp_path / "made") == 0o600
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "kept").write_bytes(b"the owner's bytes")
    os.chmod(folder / "kept", 0o400)
    if os.geteuid() == 0:
        for path in (folder, folder / "kept"):
            os.chown(path, NOBODY, NOBODY)
    said = as_the_owner(folder, lambda: (fs.private_file(Path("kept")), fs.private_file(Path("new"))))
    assert said == repr((Path("kept"), Path("new")))
    assert (folder / "kept").read_bytes() == b"the owner's bytes" and (folder / "new").read_bytes() == b""
    assert (mode(folder / "kept"), mode(folder / "new")) == (0o600, 0o600)
    assert os.stat(folder / "new").st_uid == os.stat(folder).st_uid


@pytest.fixture
def old_glibc(monkeypatch):
    """fchmodat without ``AT_SYMLINK_NOFOLLOW`` (glibc before 2.32: Debian 10, Ubuntu 20.04): Python
    refuses every ``os.chmod(..., dir_fd=..., follow_symlinks=False)`` with its ValueError."""
    real = os.chmod

    def chmod(path, mode, *, dir_fd=None, follow_symlinks=True):
        if dir_fd is not None and not follow_symlinks:
            raise ValueError("chmod: cannot use dir_fd and follow_symlinks together")
        return real(path, mode, dir_fd=dir_fd, follow_symlinks=follow_symlinks)

    monkeypatch.setattr(os, "chmod", chmod)


def _locked_from_another_process(db: Path) -> bool:
    probe = (
        "import sqlite3,sys; c=sqlite3.connect(sys.argv[1], timeout=0)\ntry: c.execute('BEGIN IMMEDIATE')\n"
    )
    probe += "except sqlite3.OperationalError: print('locked')\nelse: print('free')"
    out = subprocess.run([sys.executable, "-c", probe, str(db)], capture_output=True, text=True, check=True)
    return out.stdout.strip() == "locked"


def test_where_the_c_library_cannot_chmod_without_following_a_file_is_still_set_by_name(
    home, precious, monkeypatch, old_glibc
):
    """There every chmod by name failed, and the keeper refused its own regular files as if they
    were symlinks. Now the file goes through an O_PATH descriptor: set, a symlink still refused,
    and this process's SQLite lock on the file kept (closing an opened descriptor would drop it)."""
    hfs, keeper = HomeFS(home), home / "keeper"
    db = keeper / "x.db"
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("CREATE TABLE t(a)")
    os.chmod(db, 0o644)
    conn.execute("BEGIN IMMEDIATE")
    try:
        hfs.chmod("keeper", "x.db", mode=0o600)
        assert mode(db) == 0o600
        assert _locked_from_another_process(db)  # still ours
    finally:
        conn.rollback()
        conn.close()
    assert not _locked_from_another_process(db)  # the probe can tell
    (keeper / "y").write_text("mine")
    after_lstat(monkeypatch, "y", swap_for(home, "y", lambda p: p.symlink_to(precious)))
    with pytest.raises(KeeperError, match="y is a symlink .*does not follow or replace it"):
        hfs.chmod("keeper", "y", mode=0o777)
    assert mode(precious) == 0o644


def test_where_neither_the_c_library_nor_proc_can_chmod_without_following_it_is_said(
    home, monkeypatch, old_glibc
):
    (home / "keeper" / "x").write_text("mine")
    os.chmod(home / "keeper" / "x", 0o644)
    real = os.chmod

    def no_proc(path, mode, **kw):
        if str(path).startswith("/proc/self/fd/"):
            raise FileNotFoundError(2, "No such file or directory", path)
        return real(path, mode, **kw)

    monkeypatch.setattr(os, "chmod", no_proc)
    with pytest.raises(KeeperError) as no:
        HomeFS(home).chmod("keeper", "x", mode=0o600)
    assert str(no.value) == (
        f"cannot set the mode of {home / 'keeper' / 'x'} without following a symlink: this C library has "
        "no AT_SYMLINK_NOFOLLOW and /proc is not mounted; nothing changed"
    )
    assert mode(home / "keeper" / "x") == 0o644
