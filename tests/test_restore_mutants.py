"""``backup restore``'s edges, each where a one-token change (a mutant, ``tools/mutate.py``) would move it.

``tests/test_backup_restore.py`` holds restore against real Hermes, kills and hot journals; these
hold the details a surviving mutant of ``backup/restore.py`` changed: the safety copy's name and
what it holds alone, a checkpoint that cannot finish, the restored file's owner, the words of a
refusal; so that each one fails here or is explained as equivalent in ``docs/testing.md``.
Homes built by ``demo`` (no Hermes), small.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import shutil
import sqlite3
import time

import pytest
import zstandard

from hermes_keeper import demo
from hermes_keeper.backup import restore as restore_mod
from hermes_keeper.backup.restore import RESTORE_TMP, SAFETY_PREFIX, SIDECARS, RestoreResult, restore_backup
from hermes_keeper.backup.snapshot import MANIFEST, list_backups, sha256_file, take_backup
from hermes_keeper.errors import KeeperError
from hermes_keeper.home import select_profiles
from hermes_keeper.journal import Journal, read_journal
from hermes_keeper.sqlite.holders import Holder
from tests.kill_after import leave_hot_journal

NOW = time.gmtime(1_790_000_000)  # 2026-09-21T14:13:20Z
BASE = SAFETY_PREFIX + "20260921T141320Z"


@pytest.fixture(scope="module")
def demo_home(tmp_path_factory):
    """Built once (the build is most of a test's time here); each test gets its own copy."""
    home = tmp_path_factory.mktemp("demo") / "home"
    demo.build_home(home, demo.generate(time.time(), sessions=4))
    return home


@pytest.fixture
def profile(tmp_path, demo_home):
    shutil.copytree(demo_home, tmp_path / "home", symlinks=True)
    return select_profiles(tmp_path / "home")[0]


@pytest.fixture
def fixed_clock(monkeypatch):
    monkeypatch.setattr(restore_mod.time, "gmtime", lambda *_: NOW)


def test_a_safety_name_taken_by_a_file_or_a_sidecar_alone_is_numbered_on(profile, fixed_clock):
    fs = profile.fs
    assert restore_mod._safety_name(fs) == BASE
    (profile.home / BASE).write_bytes(b"")
    assert restore_mod._safety_name(fs) == BASE + "-2"
    (profile.home / f"{BASE}-2{SIDECARS[1]}").write_bytes(b"")  # a -wal whose file is gone
    assert restore_mod._safety_name(fs) == BASE + "-3"
    (profile.home / f"{BASE}-3{SIDECARS[2]}").write_bytes(b"")
    assert restore_mod._safety_name(fs) == BASE + "-4"


@pytest.mark.parametrize("euid", [0, 1000])
def test_the_restored_file_keeps_the_owner_and_mode_of_the_one_it_replaces(profile, monkeypatch, euid):
    """Hermes may run as another user than the keeper: as root, its file stays its own; as a
    user (``os.geteuid`` faked), no chown is tried (it would fail) and the file is the keeper's."""
    record = take_backup(profile)
    os.chown(profile.db_path, 1234, 2345)
    os.chmod(profile.db_path, 0o640)
    monkeypatch.setattr(restore_mod.os, "geteuid", lambda: euid)
    restore_backup(profile, record)
    st = os.stat(profile.db_path)
    owner = (1234, 2345) if euid == 0 else (os.getuid(), os.getgid())
    assert (st.st_uid, st.st_gid, st.st_mode & 0o777) == (*owner, 0o640)


def test_a_backup_the_manifest_does_not_know_is_refused_naming_the_manifest(profile, tmp_path):
    record = take_backup(profile)
    loose = tmp_path / "loose" / record.name
    loose.parent.mkdir()
    shutil.copy(record.path, loose)
    with pytest.raises(KeeperError, match=re.escape(f"is not in {loose.parent / MANIFEST} (no sha256")):
        restore_backup(profile, loose)


def _count(db, sql="SELECT count(*) FROM messages"):
    conn = sqlite3.connect(db)
    try:
        return conn.execute(sql).fetchone()[0]
    finally:
        conn.close()


def _leave_a_wal(profile, tmp_path):
    """A -wal with commits state.db does not have yet (a killed Hermes's): every message deleted."""
    crashed = tmp_path / "crashed"
    crashed.mkdir()
    shutil.copy(profile.db_path, crashed / "state.db")
    conn = sqlite3.connect(crashed / "state.db", isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA wal_autocheckpoint=0")
    conn.execute("DELETE FROM messages")
    for name in ("state.db", "state.db-wal"):
        shutil.copy(crashed / name, profile.home / name)
    conn.close()


def test_commits_left_in_a_wal_beside_state_db_are_in_the_safety_copy_alone(profile, tmp_path):
    """The -wal is checkpointed before the swap: the safety copy is whole as one file, no -wal
    of its own to keep beside it."""
    record = take_backup(profile)
    _leave_a_wal(profile, tmp_path)
    res = restore_backup(profile, record)
    assert not [p.name for p in profile.home.glob(f"{res.safety_copy}-*")]
    alone = tmp_path / "alone.db"
    shutil.copy(profile.home / res.safety_copy, alone)
    assert _count(alone) == 0 and _count(profile.db_path) == res.messages > 0


def test_a_wal_that_cannot_be_checkpointed_stops_a_forced_restore_before_the_swap(
    profile, tmp_path, monkeypatch
):
    """A reader in the -wal (forced past the holder check) keeps TRUNCATE from finishing: refused,
    state.db and its -wal as they were (no wait for the reader here: busy at once)."""
    real = restore_mod.connect_rw
    monkeypatch.setattr(restore_mod, "connect_rw", lambda db, **_: real(db, busy_timeout_s=0))
    record = take_backup(profile)
    _leave_a_wal(profile, tmp_path)
    reader = sqlite3.connect(profile.db_path, isolation_level=None)
    reader.execute("BEGIN")
    reader.execute("SELECT count(*) FROM messages").fetchone()
    try:
        with pytest.raises(
            KeeperError, match=re.escape(f"{profile.db_path}: its -wal could not be checkpointed")
        ):
            restore_backup(profile, record, force=True)
    finally:
        reader.close()
    assert not list(profile.home.glob(SAFETY_PREFIX + "*"))
    assert _count(profile.db_path) == 0  # its -wal's commits still there


class _WriteOnClose:
    """The checkpoint's connection, with a write of another connection landing as it closes (a
    Hermes commit between the checkpoint and the look at the -wal)."""

    def __init__(self, conn, other):
        self.conn, self.other = conn, other

    def execute(self, sql):
        return self.conn.execute(sql)

    def close(self):
        self.conn.close()
        self.other.execute("DELETE FROM sessions")


def test_a_commit_after_a_finished_checkpoint_still_stops_the_swap(profile, tmp_path, monkeypatch):
    _leave_a_wal(profile, tmp_path)
    other = sqlite3.connect(profile.db_path, isolation_level=None)
    real = restore_mod.connect_rw
    monkeypatch.setattr(restore_mod, "connect_rw", lambda db, **kw: _WriteOnClose(real(db, **kw), other))
    try:
        with pytest.raises(KeeperError, match="its -wal could not be checkpointed"):
            restore_mod._checkpoint(profile.db_path)
    finally:
        other.close()
    assert _count(profile.db_path, "SELECT count(*) FROM sessions") == 0


def test_a_hot_journal_is_rolled_back_so_the_safety_copy_is_whole_alone(profile, tmp_path):
    record = take_backup(profile)
    sessions = _count(profile.db_path, "SELECT count(*) FROM sessions")
    leave_hot_journal(profile.db_path)
    res = restore_backup(profile, record)
    assert res.journal_mode == "delete"  # read from state.db once rolled back: it was left in DELETE mode
    assert not [p.name for p in profile.home.glob(f"{res.safety_copy}-*")]
    alone = tmp_path / "alone.db"
    shutil.copy(profile.home / res.safety_copy, alone)
    assert _count(alone, "SELECT count(*) FROM sessions") == sessions  # the killed write undone


def test_a_journal_left_without_its_state_db_is_set_aside_not_opened(profile):
    record = take_backup(profile)
    sessions = _count(profile.db_path, "SELECT count(*) FROM sessions")
    leave_hot_journal(profile.db_path)
    profile.db_path.unlink()
    res = restore_backup(profile, record)
    assert res.safety_copy is None and res.sessions == sessions
    assert [p.name for p in profile.home.glob("state.db*-journal")] == [
        p.name for p in profile.home.glob(SAFETY_PREFIX + "*-journal")
    ]


def test_a_hot_journal_that_cannot_be_rolled_back_is_refused_in_words(profile, monkeypatch):
    record = take_backup(profile)
    leave_hot_journal(profile.db_path)

    def locked(db, **_):
        raise sqlite3.OperationalError("database is locked")

    monkeypatch.setattr(restore_mod, "connect_rw", locked)
    said = f"{profile.db_path}: its -journal (a write Hermes did not finish) could not be rolled back"
    with pytest.raises(KeeperError, match=re.escape(f"{said} (database is locked); start Hermes once")):
        restore_backup(profile, record)
    assert not list(profile.home.glob(SAFETY_PREFIX + "*"))


# ``restore_backup`` and ``_swap`` whole, on demo homes: what ends where, in which order, the
# refusals' words, and that a refusal changes nothing.

ROOT = os.geteuid() == 0  # the restored file's owner is only set as root
HELD = Holder(4242, "hermes", "hermes gateway run")


def _state(home):
    """Every file of the home outside ``keeper/``: name -> (sha256, mode); a refusal leaves it as it was."""
    return {
        p.name: (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mode & 0o777)
        for p in home.iterdir()
        if p.is_file() and not (p.name.endswith("-shm") or (p.name.endswith("-wal") and not p.stat().st_size))
    }


def _replace_backup(record, raw: bytes, compress: bool = True):
    """The backup's file replaced by ``raw`` (zstd-compressed unless told), the manifest's size and
    sha256 made to match: damage from before the hash was taken, which only the content checks catch."""
    record.path.write_bytes(zstandard.ZstdCompressor().compress(raw) if compress else raw)
    manifest = json.loads((record.folder / MANIFEST).read_text())
    manifest["backups"][-1] |= {"sha256": sha256_file(record.path), "bytes": record.path.stat().st_size}
    (record.folder / MANIFEST).write_text(json.dumps(manifest))
    return list_backups(record.folder)[-1]


def _damaged_copy(db, tmp_path) -> bytes:
    """``db`` with an index whose schema no longer matches its entries: it opens and quick_check
    passes, integrity_check does not."""
    copy = tmp_path / "damaged.db"
    shutil.copy(db, copy)
    conn = sqlite3.connect(copy, isolation_level=None)
    conn.execute("PRAGMA writable_schema=ON")
    conn.execute(
        "UPDATE sqlite_master SET sql = 'CREATE INDEX idx_sessions_source ON sessions(model)'"
        " WHERE name = 'idx_sessions_source'"
    )
    conn.close()
    return copy.read_bytes()


def test_a_backup_named_alone_is_found_in_the_homes_folder_and_put_in_place(profile, fixed_clock):
    """``restore_backup(profile, "state-....db.zst")``: the name is looked up in the manifest of the
    home's backup folder (a bare name used to be compared, as a ``Path``, with the manifest's text
    and never found). The old file is kept aside under the safety name, 0600, and the journal says
    what was restored, with the result's very fields."""
    record = take_backup(profile)
    sessions, messages = _count(profile.db_path, "SELECT count(*) FROM sessions"), _count(profile.db_path)
    os.chmod(profile.db_path, 0o640)
    conn = sqlite3.connect(profile.db_path)
    conn.execute("DELETE FROM sessions WHERE rowid % 2 = 0")
    conn.commit()
    conn.close()
    old = profile.db_path.read_bytes()
    with Journal(profile.keeper_dir) as journal:
        res = restore_backup(profile, record.name, journal=journal)
    assert res == RestoreResult(record.name, BASE, sessions, messages, 22, "wal", "none")
    assert (profile.home / BASE).read_bytes() == old
    assert os.stat(profile.home / BASE).st_mode & 0o777 == 0o600
    assert os.stat(profile.db_path).st_mode & 0o777 == 0o640
    assert _count(profile.db_path, "SELECT count(*) FROM sessions") == sessions
    assert not list(profile.home.glob(".state.db.keeper-restore*"))
    [said] = [r for r in read_journal(profile.keeper_dir) if r["action"] == "restored"]
    assert {k: v for k, v in said.items() if k not in ("ts", "run")} == {
        "action": "restored",
        "forced": False,
        **res.to_dict(),
    }


def _holders(monkeypatch, *answers):
    """``find_holders`` answering ``answers`` in turn (then none); the databases it was asked about."""
    asked, answers = [], list(answers)
    monkeypatch.setattr(
        restore_mod, "find_holders", lambda db: asked.append(db) or (answers.pop(0) if answers else [])
    )
    return asked


def test_a_held_database_is_refused_in_words_and_nothing_moves(profile, monkeypatch):
    record = take_backup(profile)
    asked = _holders(monkeypatch, [HELD, Holder(77, "python3", "")])
    before = _state(profile.home)
    said = "refusing to restore while the database is open by pid 4242 (hermes gateway run); pid 77 (python3)"
    with pytest.raises(KeeperError, match=re.escape(f"{said}; stop Hermes or use --force")):
        restore_backup(profile, record)
    assert asked == [profile.db_path] and _state(profile.home) == before


def test_hermes_started_while_the_backup_was_expanded_is_refused_before_the_swap(profile, monkeypatch):
    record = take_backup(profile)
    asked = _holders(monkeypatch, [], [HELD])
    before = _state(profile.home)
    with pytest.raises(KeeperError, match=re.escape("open by pid 4242 (hermes gateway run); stop Hermes")):
        restore_backup(profile, record)
    assert asked == [profile.db_path] * 2 and _state(profile.home) == before


def test_forced_it_asks_for_no_holder_and_says_so_in_the_journal(profile, monkeypatch, fixed_clock):
    record = take_backup(profile)
    asked = _holders(monkeypatch, [HELD], [HELD])
    with Journal(profile.keeper_dir) as journal:
        res = restore_backup(profile, record, force=True, journal=journal)
    assert asked == [] and res.safety_copy == BASE
    assert [r["forced"] for r in read_journal(profile.keeper_dir) if r["action"] == "restored"] == [True]


@pytest.mark.parametrize("name", sorted(restore_mod.DB_FILES))
def test_a_symlink_among_the_database_files_is_refused_before_anything(profile, tmp_path, name):
    """Each of them is renamed aside or chmod-ed: a link would carry that to a file elsewhere."""
    record = take_backup(profile)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_bytes(b"not the keeper's")
    if name == "state.db":
        (profile.home / "state.db.real").write_bytes(profile.db_path.read_bytes())
    (profile.home / name).unlink(missing_ok=True)  # take_backup's open left the -wal and -shm
    (profile.home / name).symlink_to(elsewhere)
    before = _state(profile.home)
    with pytest.raises(KeeperError, match=re.escape(f"{profile.home / name}") + ".*symlink"):
        restore_backup(profile, record, force=True)
    assert _state(profile.home) == before and elsewhere.read_bytes() == b"not the keeper's"


def _refused_with_nothing_changed(profile, record, match: str) -> None:
    """The restore of ``record`` is refused in words matching ``match``; every file of the home is
    as it was and no expansion is left."""
    before = _state(profile.home)
    with pytest.raises(KeeperError, match=match):
        restore_backup(profile, record)
    assert _state(profile.home) == before and not list(profile.home.glob(".state.db.keeper-restore*"))


def test_a_backup_that_does_not_match_its_sha256_is_refused_in_words(profile):
    record = take_backup(profile)
    record.path.write_bytes(record.path.read_bytes()[:-1] + b"\0")
    said = f"backup {record.path} is damaged or missing (size/sha256 mismatch); nothing was changed"
    _refused_with_nothing_changed(profile, record, re.escape(said))


def test_a_backup_that_expands_to_a_damaged_database_is_refused_naming_the_damage(profile, tmp_path):
    record = take_backup(profile)
    record = _replace_backup(record, _damaged_copy(profile.db_path, tmp_path))
    said = (
        f"backup {record.name} expands to a damaged database (row 1 missing from index idx_sessions_source)"
    )
    _refused_with_nothing_changed(profile, record, re.escape(f"{said}; nothing was changed"))


def test_a_backup_of_a_database_that_is_not_hermes_s_is_refused(profile, tmp_path):
    record = take_backup(profile)
    other = tmp_path / "other.db"
    conn = sqlite3.connect(other)
    conn.execute("CREATE TABLE notes (x)")
    conn.close()
    record = _replace_backup(record, other.read_bytes())
    _refused_with_nothing_changed(profile, record, re.escape(f"{profile.home / RESTORE_TMP}: "))


@pytest.mark.parametrize(
    ("raw", "compress", "why"),
    [
        (b"not zstd at all", False, "zstd"),  # zstandard.ZstdError
        (b"zstd, but no database inside" * 40, True, "file is not a database"),  # sqlite3.Error
    ],
    ids=["not-zstd", "not-sqlite"],
)
def test_a_backup_that_cannot_be_read_is_refused_in_words(profile, raw, compress, why):
    record = take_backup(profile)
    record = _replace_backup(record, raw, compress)
    _refused_with_nothing_changed(
        profile, record, rf"^backup {re.escape(record.name)} cannot be read \(.*{why}.*\); nothing"
    )


def test_a_failed_write_is_refused_in_one_line_and_the_half_file_removed(profile, monkeypatch):
    record = take_backup(profile)
    tmp = profile.home / RESTORE_TMP

    def full(_record, dst):
        dst.write_bytes(b"half")
        raise OSError(errno.ENOSPC, "No space left on device", str(dst))

    monkeypatch.setattr(restore_mod, "decompress_to", full)
    said = f"restore of {record.name} failed: No space left on device: {tmp}; nothing was changed"
    _refused_with_nothing_changed(profile, record, re.escape(said))


def test_files_a_killed_restore_left_are_cleared_before_and_after(profile, fixed_clock):
    """Its half-written file and sidecars: a stale ``-journal`` beside the fresh expansion would be
    rolled back into it (another database's pages)."""
    record = take_backup(profile)
    sessions = _count(profile.db_path, "SELECT count(*) FROM sessions")
    stale = profile.home / RESTORE_TMP
    shutil.copy(profile.db_path, stale)
    conn = sqlite3.connect(stale, isolation_level=None)
    conn.execute("PRAGMA journal_mode=delete")
    conn.close()
    leave_hot_journal(stale)
    for side in ("-wal", "-shm"):
        (profile.home / (RESTORE_TMP + side)).write_bytes(b"stale")
    res = restore_backup(profile, record)
    assert res.sessions == sessions == _count(profile.db_path, "SELECT count(*) FROM sessions")
    assert not list(profile.home.glob(".state.db.keeper-restore*"))


def _spy(monkeypatch, fs):
    """The durable steps of a restore, in order: each HomeFS move and the fsyncs."""
    steps = []

    def record(name, real):
        def step(*parts, **kw):
            steps.append((name, *parts, *sorted(kw.items())))
            return real(*parts, **kw)

        return step

    for name in ("link", "chmod", "sync", "rename"):
        monkeypatch.setattr(fs, name, record(name, getattr(fs, name)))
    real_fsync = restore_mod.fsync_file
    monkeypatch.setattr(
        restore_mod, "fsync_file", lambda p: steps.append(("fsync_file", p.name)) or real_fsync(p)
    )
    return steps


def test_the_swap_keeps_the_old_file_durably_before_anything_moves(
    profile, tmp_path, monkeypatch, fixed_clock
):
    """Crash-safe order: the restored file on disk; the old one linked to the safety name, 0600, and
    that link fsynced; its sidecars renamed after it; the restored file renamed over ``state.db``
    last (and fsynced). The old file and its -wal's commits are in the safety copy."""
    record = take_backup(profile)
    _leave_a_wal(profile, tmp_path)
    idle = sqlite3.connect(
        profile.db_path
    )  # open, no transaction: its -wal and -shm stay after the checkpoint
    idle.execute("SELECT count(*) FROM sessions").fetchone()
    st = os.stat(profile.db_path)
    steps = _spy(monkeypatch, profile.fs)
    try:
        res = restore_backup(profile, record)
    finally:
        idle.close()
    assert steps == [
        (
            "chmod",
            RESTORE_TMP,
            ("mode", st.st_mode & 0o777),
            ("owner", (st.st_uid, st.st_gid) if ROOT else None),
        ),
        ("fsync_file", RESTORE_TMP),
        ("link", "state.db", ("sync", False), ("to", BASE)),
        ("chmod", BASE, ("mode", 0o600)),
        ("sync",),
        ("rename", "state.db-wal", ("sync", False), ("to", f"{BASE}-wal")),
        ("rename", "state.db-shm", ("sync", False), ("to", f"{BASE}-shm")),
        ("rename", RESTORE_TMP, ("to", "state.db")),
    ]
    assert res.safety_copy == BASE and _count(profile.home / BASE) == 0  # the -wal's DELETE is in it


@pytest.mark.parametrize("left", [SIDECARS, ("-wal",)], ids=["all", "a-wal-alone"])
def test_with_no_state_db_its_stale_sidecars_are_set_aside_before_the_rename(
    profile, monkeypatch, fixed_clock, left
):
    """A -wal or -journal left beside the name would be replayed into the restored file: they go
    aside under a safety name (no safety copy of a file that is not there), one alone as well."""
    record = take_backup(profile)
    sessions = _count(profile.db_path, "SELECT count(*) FROM sessions")
    for p in profile.home.glob("state.db*"):
        p.unlink()
    for side in left:
        (profile.home / f"state.db{side}").write_bytes(side.encode())
    steps = _spy(monkeypatch, profile.fs)
    res = restore_backup(profile, record)
    assert steps == [
        ("fsync_file", RESTORE_TMP),
        *[("rename", f"state.db{side}", ("sync", False), ("to", f"{BASE}{side}")) for side in left],
        ("sync",),
        ("rename", RESTORE_TMP, ("to", "state.db")),
    ]
    assert (res.safety_copy, res.sessions) == (None, sessions)
    assert {p.name: p.read_bytes() for p in profile.home.glob(SAFETY_PREFIX + "*")} == {
        f"{BASE}{side}": side.encode() for side in left
    }


def test_with_nothing_beside_the_name_the_restored_file_is_just_renamed_in(profile, monkeypatch):
    record = take_backup(profile)
    for p in profile.home.glob("state.db*"):
        p.unlink()
    steps = _spy(monkeypatch, profile.fs)
    res = restore_backup(profile, record)
    assert steps == [("fsync_file", RESTORE_TMP), ("rename", RESTORE_TMP, ("to", "state.db"))]
    assert res.safety_copy is None and not list(profile.home.glob(SAFETY_PREFIX + "*"))


@pytest.mark.parametrize("auto_vacuum", ["none", "full"])
def test_the_restored_file_takes_the_modes_of_the_one_it_replaces(profile, auto_vacuum):
    """Backed up in WAL without auto_vacuum; the database it replaces was since switched to DELETE
    (and to FULL auto_vacuum, which takes a VACUUM): the restored one is switched too, and the
    result says so."""
    record = take_backup(profile)
    conn = sqlite3.connect(profile.db_path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=delete")
    conn.execute(f"PRAGMA auto_vacuum={auto_vacuum}")
    conn.execute("VACUUM")
    conn.close()
    res = restore_backup(profile, record)
    assert (res.journal_mode, res.auto_vacuum) == ("delete", auto_vacuum)
    conn = sqlite3.connect(profile.db_path)
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
        assert conn.execute("PRAGMA auto_vacuum").fetchone()[0] == {"none": 0, "full": 1}[auto_vacuum]
    finally:
        conn.close()


def test_a_stale_expansion_hard_linked_elsewhere_is_unlinked_not_written_through(profile):
    """A killed restore's file is removed by name before the new expansion is made: had it a second
    name (a hard link), writing into it would change that other file (the door refuses to)."""
    record = take_backup(profile)
    precious = profile.home / "precious.txt"
    precious.write_bytes(b"someone else's")
    os.link(precious, profile.home / RESTORE_TMP)
    res = restore_backup(profile, record)
    assert res.restored == record.name and precious.read_bytes() == b"someone else's"
    assert not list(profile.home.glob(".state.db.keeper-restore*"))


def _after_modes(monkeypatch, then):
    """``match_modes`` as it is, then ``then(tmp)``: what might be found when the expansion is looked
    at once more before the swap."""
    real = restore_mod.match_modes

    def match_modes(tmp, *modes):
        real(tmp, *modes)
        then(tmp)

    monkeypatch.setattr(restore_mod, "match_modes", match_modes)


def test_an_expansion_with_a_wal_or_journal_beside_it_is_not_put_in_place(profile, monkeypatch):
    """A -wal holding commits (or a non-empty -journal) beside the restored file: it would not be
    whole alone once renamed in, so refused, named, and nothing changed."""
    record = take_backup(profile)
    held = []

    def leave_sidecars(tmp):
        conn = sqlite3.connect(tmp, isolation_level=None)  # kept open: its -wal stays, commits in it
        conn.execute("PRAGMA wal_autocheckpoint=0")
        conn.execute("DELETE FROM messages")
        held.append(conn)
        tmp.with_name(tmp.name + "-journal").write_bytes(b"\0" * 512)  # not hot, not empty

    _after_modes(monkeypatch, leave_sidecars)
    before = _state(profile.home)
    left = f"{RESTORE_TMP}-journal, {RESTORE_TMP}-wal left beside it"
    said = f"backup {record.name} did not come out whole ({left})"
    try:
        with pytest.raises(KeeperError, match=re.escape(f"{said}; nothing was changed")):
            restore_backup(profile, record)
    finally:
        held[0].close()
    assert _state(profile.home) == before


@pytest.mark.parametrize("side", ["-journal", "-wal"])
def test_an_empty_sidecar_beside_the_expansion_holds_nothing_and_is_let_be(profile, monkeypatch, side):
    record = take_backup(profile)
    _after_modes(monkeypatch, lambda tmp: tmp.with_name(tmp.name + side).write_bytes(b""))
    assert restore_backup(profile, record).restored == record.name


def test_an_expansion_damaged_after_its_first_check_is_not_put_in_place(profile, monkeypatch):
    """The file is checked once more (quick_check) after its modes were set: damage found then
    (here an index's only page made unreadable) is named and nothing moves."""
    record = take_backup(profile)

    def damage(tmp):
        conn = sqlite3.connect(tmp)
        root, size = conn.execute(
            "SELECT rootpage, (SELECT page_size FROM pragma_page_size) FROM sqlite_master"
            " WHERE name = 'sqlite_autoindex_state_meta_1'"
        ).fetchone()
        conn.close()
        with open(tmp, "r+b") as fh:
            fh.seek((root - 1) * size)
            fh.write(b"\0")
        damage.root = root

    _after_modes(monkeypatch, damage)
    before = _state(profile.home)
    with pytest.raises(KeeperError) as refused:
        restore_backup(profile, record)
    assert str(refused.value) == (
        f"backup {record.name} did not come out whole (Page {damage.root}: btreeInitPage() returns error"
        " code 11); nothing was changed"
    )
    assert _state(profile.home) == before


def _manifest(folder, *entries):
    """A backup folder's manifest of ``(home, created_at)`` entries, named ``state-<created_at>.db.zst``
    (no files: finding one reads only the manifest)."""
    folder.mkdir(parents=True, exist_ok=True)
    backups = [
        {
            "name": f"state-{at}.db.zst",
            "profile": "default",
            "home": str(home),
            "created_at": float(at),
            "bytes": 1,
            "raw_bytes": 1,
            "sha256": "0" * 64,
            "schema_version": 22,
            "source_bytes": 1,
        }
        for home, at in entries
    ]
    (folder / MANIFEST).write_text(json.dumps({"format": 1, "backups": backups}))


def test_the_latest_is_this_homes_newest_in_the_folder_asked(profile, tmp_path):
    shared, other = tmp_path / "shared", tmp_path / "other-home"
    _manifest(shared, (profile.home, 1), (other, 2), (profile.home, 3), (profile.home, 4), (other, 5))
    assert restore_mod.find_backup(profile, None, shared).name == "state-4.db.zst"
    assert restore_mod.find_backup(profile, "state-2.db.zst", shared).folder == shared
    with pytest.raises(
        KeeperError, match=re.escape(f"no backups of {profile.home} in {profile.keeper_dir / 'backups'}")
    ):
        restore_mod.find_backup(profile, None)  # its own folder: none there


def test_a_folder_with_only_other_homes_backups_has_no_latest_for_this_one(profile, tmp_path):
    shared = tmp_path / "shared"
    _manifest(shared, (tmp_path / "other-home", 1))
    with pytest.raises(KeeperError) as refused:
        restore_mod.find_backup(profile, None, shared)
    assert str(refused.value) == f"no backups of {profile.home} in {shared}"
