"""Archive rollover: one file per UTC month, read together by every archive command.

The first file is ``archive.db`` (an archive written before rollover is read as it is); a
later month gets ``archive-YYYY-MM.db``. Entry numbers run on across files, so a reused id
archived in two months is two entries and the newest wins.
"""

from __future__ import annotations

import json
import sqlite3
import stat

from hermes_keeper.archive.store import ARCHIVE_NAME, ARCHIVED, PRUNED, RESTORED, Archive, period_of
from tests.archive_home import payload
from tests.test_dataloss import DAY, NOW, _bring_back, _cli, _home, _run, _spec


def _age_archive(path, days: float) -> None:
    """Make every entry of one archive file look archived ``days`` earlier (a file of an earlier month)."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("UPDATE archived_sessions SET archived_at = archived_at - ?", (days * DAY,))
    conn.execute("UPDATE archive_meta SET value = ? WHERE key = 'period'", (period_of(NOW - days * DAY),))
    conn.close()


def _mode(path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_new_month_gets_its_own_file_and_every_command_reads_both(tmp_path):
    home = _home(tmp_path, _spec("dup", "walrus"), _spec("other", "otter", age_days=130))
    _run(home)
    keeper = home / "keeper"
    assert sorted(p.name for p in keeper.glob("archive*.db")) == [ARCHIVE_NAME]
    _age_archive(keeper / ARCHIVE_NAME, 62)  # archive.db now holds a month two months back
    before = (
        sqlite3.connect(keeper / ARCHIVE_NAME)
        .execute("SELECT entry, sha256 FROM archived_sessions")
        .fetchall()
    )
    _bring_back(home / "state.db", "dup", "narwhal")  # the same id, other content
    _run(home)

    rolled = keeper / f"archive-{period_of(NOW)}.db"
    assert sorted(p.name for p in keeper.glob("archive*.db")) == [rolled.name, ARCHIVE_NAME]
    assert _mode(rolled) == 0o600 and _mode(keeper) == 0o700
    old = sqlite3.connect(keeper / ARCHIVE_NAME)
    assert old.execute("SELECT entry, sha256 FROM archived_sessions").fetchall() == before  # untouched
    old.close()
    with Archive.for_home(keeper, create=False) as store:
        assert [f.path.name for f in store.files] == [ARCHIVE_NAME, rolled.name]
        dups = [e for e in store.entries() if e.session_id == "dup"]
        assert len(dups) == 2 and dups[0].entry < dups[1].entry
        assert store.entry("dup") == dups[1]
        assert store.get("dup")["messages"][0]["content"] == "narwhal 0"
        first = f"#{dups[0].entry}"

    listed = json.loads(_cli("archive", "list", "--home", str(home), "--json").stdout)["profiles"][0][
        "sessions"
    ]
    assert [r["session_id"] for r in listed] == ["dup", "dup", "other"]  # newest activity first
    assert [r["entry"] for r in listed[:2]] == [dups[1].entry, dups[0].entry]
    assert "narwhal 0" in _cli("archive", "show", "dup", "--home", str(home)).output
    assert "walrus 0" in _cli("archive", "show", first, "--home", str(home)).output
    assert (
        "otter 0" in _cli("archive", "show", "oth", "--home", str(home)).output
    )  # a prefix, in the old file
    for word in ("walrus", "narwhal", "otter"):
        [hits] = json.loads(_cli("archive", "search", word, "--home", str(home), "--json").stdout)["profiles"]
        assert hits["total"] == 1 and hits["scanned"] == 3
    [verified] = json.loads(_cli("archive", "verify", "--home", str(home), "--json").stdout)["profiles"]
    assert verified == {"profile": "default", "checked": 3, "damaged": {}, "database": "ok", "ok": True}
    out = tmp_path / "all.jsonl"
    assert _cli("archive", "export", "--home", str(home), "-o", str(out)).exit_code == 0
    exported = {json.loads(line)["id"]: json.loads(line) for line in out.read_text().splitlines()}
    assert sorted(exported) == ["dup", "other"]
    assert exported["dup"]["messages"][0]["content"] == "narwhal 0"  # the newest entry of the id

    # Restore after rollover: the newest entry comes back, from the new file; the old one stays.
    res = _cli("archive", "restore", "dup", "other", "--home", str(home))
    assert res.exit_code == 0, res.output
    conn = sqlite3.connect(home / "state.db")
    back = {
        sid: [
            r[0]
            for r in conn.execute("SELECT content FROM messages WHERE session_id = ? ORDER BY id", (sid,))
        ]
        for sid in ("dup", "other")
    }
    conn.close()
    assert back == {
        "dup": ["narwhal 0", "narwhal 1", "narwhal 2"],
        "other": ["otter 0", "otter 1", "otter 2"],
    }
    with Archive.for_home(keeper, create=False) as store:
        states = {e.entry: e.state for e in store.entries()}
    assert states[dups[1].entry] == RESTORED and states[dups[0].entry] == PRUNED


def test_entries_run_on_across_months_and_the_newest_wins(tmp_path):
    jan, feb, mar = NOW - 90 * DAY, NOW - 60 * DAY, NOW - 30 * DAY
    path = tmp_path / "keeper" / ARCHIVE_NAME
    with Archive(path) as store:
        (a,) = store.put([payload("s", "cli", jan, texts=("one",))], now=jan)
        store.set_state([a], PRUNED)
        (b,) = store.put([payload("s", "cli", feb, texts=("two",))], now=feb)
        store.set_state([b], PRUNED)
        (c,) = store.put([payload("t", "cli", mar, texts=("three",))], now=mar)
        assert a < b < c
        assert [f.path.name for f in store.files] == [
            ARCHIVE_NAME,
            f"archive-{period_of(feb)}.db",
            f"archive-{period_of(mar)}.db",
        ]
        assert store.entry("s").entry == b and store.get("s")["messages"][0]["content"] == "two"
        assert store.by_entry(a).session_id == "s" and store.get_entry(a)["messages"][0]["content"] == "one"
        # The same content again reuses its entry, in the file that holds it.
        assert store.put([payload("s", "cli", feb, texts=("two",))], now=mar) == [b]
        assert store.by_entry(b).state == ARCHIVED
        # A session that woke up mid-prune (entry not pruned) and is archived again with more:
        # its old entry in the older file is replaced, not kept beside the new one.
        (d,) = store.put([payload("s", "cli", feb, texts=("two", "more"))], now=mar)
        assert d > c and store.by_entry(b) is None
        assert [e.entry for e in store.entries() if e.session_id == "s"] == [a, d]
    # Every file is private, and a reader (another connection) sees all of them.
    assert all(_mode(p) == 0o600 for p in path.parent.glob("archive*.db"))
    with Archive(path, create=False) as reader:
        assert reader.newest() == {"s": d, "t": c}


def test_a_reader_opened_before_a_new_month_finds_its_entries(tmp_path):
    """The run's deleter opens the archive before its archiver makes the month's file."""
    path = tmp_path / "keeper" / ARCHIVE_NAME
    old = NOW - 62 * DAY
    with Archive(path) as writer, Archive(path) as deleter:
        writer.put([payload("x", "cli", old)], now=old)
        (e,) = writer.put([payload("y", "cli", NOW)], now=NOW)
        assert len(deleter.files) == 1
        deleter.set_state([e], PRUNED)
        assert len(deleter.files) == 2 and writer.by_entry(e).state == PRUNED
