"""Backups: consistent snapshots while real Hermes writes, private files, clean failure, leftovers."""

from __future__ import annotations

import json
import os
import sqlite3
import time
from datetime import UTC, datetime

import pytest
import zstandard
from click.testing import CliRunner

from bench.homes import live_writer
from hermes_keeper import demo
from hermes_keeper.backup import snapshot
from hermes_keeper.backup.snapshot import list_backups, take_backup, verify_backup
from hermes_keeper.cli import main
from hermes_keeper.errors import KeeperError, TryLater
from hermes_keeper.home import select_profiles
from tests.conftest import tiny_disk, tree_digest


@pytest.fixture
def home(hermes_home, tmp_path):
    return hermes_home(tmp_path / "home", sessions=300)


def expand(record, dest):
    """The database inside a backup, as a plain file."""
    with open(record.path, "rb") as src, open(dest, "wb") as dst:
        zstandard.ZstdDecompressor().copy_stream(src, dst)
    return sqlite3.connect(dest)


def test_backup_while_hermes_writes_is_a_consistent_snapshot(home, tmp_path):
    profile = select_profiles(home)[0]
    with live_writer(home, rate=100.0, warmup_s=0.5) as w:
        records = []
        for _ in range(4):
            records.append(take_backup(profile))
            time.sleep(0.2)
    assert w.stats["failures"] == 0 and w.stats["writes"] > 100
    final = sqlite3.connect(home / "state.db")
    live_counts = []
    for i, rec in enumerate(records):
        snap = expand(rec, tmp_path / f"snap{i}.db")
        assert snap.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        for fts in ("messages_fts", "messages_fts_trigram"):  # index and rows from the same instant
            snap.execute(f"INSERT INTO {fts}({fts}) VALUES('integrity-check')")
        torn = snap.execute(
            "SELECT count(*) FROM sessions s"
            " WHERE message_count != (SELECT count(*) FROM messages m WHERE m.session_id = s.id)"
        ).fetchone()[0]
        assert torn == 0  # Hermes bumps message_count in the same transaction as the insert
        rows = snap.execute("SELECT id, session_id, role, content FROM messages ORDER BY id").fetchall()
        # A prefix of the final history: every committed message up to the snapshot, nothing half-written.
        assert (
            rows
            == final.execute(
                "SELECT id, session_id, role, content FROM messages WHERE id <= ? ORDER BY id", (rows[-1][0],)
            ).fetchall()
        )
        live_counts.append(
            snap.execute("SELECT count(*) FROM messages WHERE session_id LIKE 'standin_%'").fetchone()[0]
        )
        snap.close()
        assert rec.schema_version == 22 and rec.raw_bytes == (tmp_path / f"snap{i}.db").stat().st_size
    assert live_counts == sorted(live_counts) and live_counts[-1] > live_counts[0]  # Hermes kept writing


def test_backup_files_are_private_and_recorded(home):
    res = CliRunner().invoke(main, ["backup", "--home", str(home), "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)["profiles"][0]
    folder = home / "keeper" / "backups"
    assert out["name"].startswith("state-") and out["name"].endswith("Z.db.zst")
    assert folder.stat().st_mode & 0o777 == 0o700
    assert {p.name: p.stat().st_mode & 0o777 for p in folder.iterdir()} == {
        out["name"]: 0o600,
        "manifest.json": 0o600,
        ".manifest.lock": 0o600,
    }
    [rec] = list_backups(folder)
    assert rec.sha256 == out["sha256"] and rec.bytes == (folder / rec.name).stat().st_size
    assert rec.home == str(home) and verify_backup(rec)
    assert rec.bytes < rec.raw_bytes / 2  # zstd on conversation text


def test_backup_to_another_folder_with_names_that_sort(home, tmp_path, unmarked):
    profile = select_profiles(home)[0]
    dest = tmp_path / "elsewhere" / "my backups"
    new_year = datetime(2026, 12, 31, 23, 59, 59, tzinfo=UTC).timestamp()
    first = take_backup(profile, dest, now=new_year)
    same_second = take_backup(profile, dest, now=new_year)
    later = take_backup(profile, dest, now=new_year + 1)
    assert first.name == "state-20261231T235959Z.db.zst" and later.name == "state-20270101T000000Z.db.zst"
    assert same_second.name == "state-20261231T235959Z-2.db.zst"
    assert [r.name for r in list_backups(dest)] == [first.name, same_second.name, later.name]
    assert not (home / "keeper" / "backups").exists()


def test_full_disk_fails_cleanly_and_the_run_deletes_nothing(tmp_path):
    home = tmp_path / "home"
    spec = demo.generate(time.time(), sessions=120)
    demo.build_home(home, spec)
    (home / "keeper").mkdir(mode=0o700)
    # Mounted where the backups go (a symlink there would be refused: the keeper follows none).
    with tiny_disk(home / "keeper" / "backups", "256k") as disk:
        before = tree_digest(home)
        res = CliRunner().invoke(main, ["run", "--home", str(home)])
        assert res.exit_code == 2 and "backup of default failed" in res.output
        assert "disk is full" in res.output or "No space left" in res.output
        assert os.listdir(disk) == [".manifest.lock"]  # no temporary copy left behind
        conn = sqlite3.connect(home / "state.db")
        assert conn.execute("SELECT count(*) FROM sessions").fetchone()[0] == len(spec.sessions)
        conn.close()
        after = tree_digest(home)
        # The journal, the locks, and the checks on record (facts.json): bookkeeping, no user data.
        for own in (
            "keeper/journal.jsonl",
            "keeper.lock",
            "keeper/backups/.manifest.lock",
            "keeper/facts.json",
        ):
            after.pop(own, None)
        assert after == before


def test_never_fills_the_disk_hermes_writes_to(tmp_path):
    with tiny_disk(tmp_path / "disk", "16m") as disk:
        home = disk / "home"
        demo.build_home(home, demo.generate(time.time(), sessions=60))
        before = tree_digest(home)
        with pytest.raises(KeeperError, match="on the disk Hermes writes to"):
            take_backup(select_profiles(home)[0])
        assert tree_digest(home) == before and not (home / "keeper").exists()


def _delete_mode_home(tmp_path, sessions=30):
    home = tmp_path / "home"
    demo.build_home(home, demo.generate(time.time(), sessions=sessions))
    conn = sqlite3.connect(home / "state.db")
    assert conn.execute("PRAGMA journal_mode=DELETE").fetchone()[0] == "delete"  # as on a network disk
    conn.close()
    return home


def commit_at_each_rest(monkeypatch, db):
    """Another connection commits one row at every rest between two copy steps (Hermes writing)."""
    writer = sqlite3.connect(db, isolation_level=None)
    writer.execute("CREATE TABLE w(x)")
    monkeypatch.setattr(snapshot, "STEP_BYTES", 16 * 4096)
    monkeypatch.setattr(snapshot.time, "sleep", lambda _s: writer.execute("INSERT INTO w VALUES (1)"))
    return writer


def test_rollback_journal_database_held_open_is_not_snapshotted(tmp_path, hold_open):
    """Each step's read lock would hold its commits, and each commit restart the copy."""
    home = _delete_mode_home(tmp_path)
    proc = hold_open(home / "state.db", via_hermes=False)
    res = CliRunner().invoke(main, ["backup", "--home", str(home)])
    assert res.exit_code == 2 and f"pid {proc.pid}" in res.output and "restart a snapshot" in res.output
    assert list_backups(home / "keeper" / "backups") == []


def test_rollback_journal_copy_restarted_by_every_commit_says_try_later(tmp_path, monkeypatch):
    """A Hermes that opens the database after the check and commits: restarts, then try later."""
    home = _delete_mode_home(tmp_path)
    commit_at_each_rest(monkeypatch, home / "state.db")
    with pytest.raises(TryLater, match="restarted 4 times"):
        take_backup(select_profiles(home)[0])
    folder = home / "keeper" / "backups"
    assert list_backups(folder) == [] and sorted(os.listdir(folder)) == [".manifest.lock"]


def test_wal_copy_holds_one_snapshot_while_another_connection_commits(tmp_path, monkeypatch):
    home = tmp_path / "home"
    demo.build_home(home, demo.generate(time.time(), sessions=60))
    commit_at_each_rest(monkeypatch, home / "state.db")
    record = take_backup(select_profiles(home)[0])
    monkeypatch.undo()
    snap = expand(record, tmp_path / "snap.db")
    assert snap.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert snap.execute("SELECT count(*) FROM w").fetchone()[0] == 0
    live = sqlite3.connect(home / "state.db").execute("SELECT count(*) FROM w")
    assert live.fetchone()[0] > 0  # the commits happened, after the snapshot's instant


def pages(path, size=4096):
    data = path.read_bytes()
    return [data[i : i + size] for i in range(0, len(data), size)]


def test_backup_is_page_for_page(tmp_path):
    """Page n of the backup is page n of state.db (free pages too): what deduplication shares."""
    home = tmp_path / "home"
    demo.build_home(home, demo.generate(time.time(), sessions=80))
    conn = sqlite3.connect(home / "state.db")
    conn.execute("DELETE FROM messages WHERE id % 3 = 0")  # free pages and half-empty ones
    conn.commit()
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    record = take_backup(select_profiles(home)[0])
    expand(record, tmp_path / "snap.db").close()
    live, copy = pages(home / "state.db"), pages(tmp_path / "snap.db")
    assert len(copy) == len(live) and copy[1:] == live[1:]


def test_unchanged_database_is_not_backed_up_again(tmp_path):
    home = tmp_path / "home"
    demo.build_home(home, demo.generate(time.time(), sessions=30))
    profile = select_profiles(home)[0]
    quiet = time.time() - 60
    db = home / "state.db"
    for p in (db, db.with_name("state.db-wal")):
        if p.exists():
            os.utime(p, (quiet, quiet))
    first = take_backup(profile)
    again = take_backup(profile, now=time.time() + 86400)
    assert again.reused and again.name == first.name and len(list_backups(first.folder)) == 1
    conn = sqlite3.connect(db)
    conn.execute("UPDATE sessions SET title = 'changed' WHERE rowid = 1")
    conn.commit()
    conn.close()
    for p in (db, db.with_name("state.db-wal")):
        if p.exists():
            os.utime(p, (quiet + 1, quiet + 1))  # a write, long enough ago to be marked
    changed = take_backup(profile, now=time.time() + 2 * 86400)
    assert not changed.reused and len(list_backups(first.folder)) == 2


@pytest.mark.parametrize(
    "damage",
    [
        lambda db: db.write_bytes(b"not a database at all\n" * 100),
        lambda db: db.write_bytes(db.read_bytes()[: db.stat().st_size // 3]),
    ],
    ids=["not-sqlite", "truncated"],
)
def test_bad_database_is_refused_in_one_line(tmp_path, damage):
    home = tmp_path / "home"
    demo.build_home(home, demo.generate(time.time(), sessions=30))
    damage(home / "state.db")
    res = CliRunner().invoke(main, ["backup", "--home", str(home)])
    assert res.exit_code == 2 and len(res.output.strip().splitlines()) == 1
    assert not (home / "keeper" / "backups").exists()


def test_leftovers_reported_with_size_and_removed_only_on_request(tmp_path):
    home = tmp_path / "home"
    demo.build_home(home, demo.generate(time.time(), sessions=10))
    runner = CliRunner()
    out = json.loads(runner.invoke(main, ["backups", "--home", str(home), "--json"]).output)["profiles"][0]
    [lo] = out["leftovers"]
    assert lo["bytes"] == 2_000_000 and lo["removed"] is False and (home / lo["name"]).exists()
    text = runner.invoke(main, ["backups", "--home", str(home)]).output
    assert lo["name"] in text and "2.0 MB" in text and "--remove-leftovers" in text
    res = runner.invoke(main, ["backups", "--home", str(home), "--remove-leftovers", "--json"])
    assert json.loads(res.output)["profiles"][0]["leftovers"][0]["removed"] is True
    assert not list(home.glob("state.db.malformed-backup-*"))
    journal = [json.loads(x) for x in (home / "keeper" / "journal.jsonl").read_text().splitlines()]
    assert {"action": "leftover_removed", "name": lo["name"], "bytes": 2_000_000}.items() <= journal[
        -1
    ].items()


def test_unreadable_manifest_is_refused_before_copying(home):
    folder = home / "keeper" / "backups"
    folder.mkdir(parents=True)
    (folder / "manifest.json").write_text("{not json")
    res = CliRunner().invoke(main, ["backup", "--home", str(home)])
    assert res.exit_code == 2 and "unreadable backup manifest" in res.output
    assert sorted(p.name for p in folder.iterdir()) == [".manifest.lock", "manifest.json"]


def test_a_manifest_from_before_source_marks_reads_and_is_backed_up_again(tmp_path):
    home = tmp_path / "home"
    demo.build_home(home, demo.generate(time.time(), sessions=20))
    profile = select_profiles(home)[0]
    first = take_backup(profile)
    manifest = first.folder / "manifest.json"
    body = json.loads(manifest.read_text())
    for entry in body["backups"]:
        del entry["source_mark"]  # as an earlier keeper wrote it
    manifest.write_text(json.dumps(body))
    [old] = list_backups(first.folder)
    assert old.source_mark == "" and verify_backup(old)
    assert not take_backup(profile, now=time.time() + 60).reused  # no mark: nothing to compare
