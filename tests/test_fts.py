"""FTS5 while the keeper writes: segment counts, the automerge hold, and its repair after a kill."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import time

import pytest
from click.testing import CliRunner

from hermes_keeper import demo
from hermes_keeper.cli import main
from hermes_keeper.journal import Journal, read_journal
from hermes_keeper.sqlite import fts
from hermes_keeper.sqlite.fts import (
    HOLD_NAME,
    MERGE_EVERY_SEGMENTS,
    MERGE_GUARD_SEGMENTS,
    MergeHold,
    fts5_tables,
    levels,
    release_leftover_hold,
)
from hermes_keeper.sqlite.schema import inspect
from hermes_keeper.sqlite.writer import Budget, Writer

NOW = time.time()
#: The FTS5 indexes of the homes here (Hermes 0.19 and the demo: no CJK index, tests/test_cjk.py has one).
FTS_TABLES = ("messages_fts", "messages_fts_trigram")


# --- an independent reader of FTS5's structure record (rowid 10 of <table>_data) ---------------


def _varint(buf: bytes, i: int) -> tuple[int, int]:
    """SQLite varint: big-endian 7-bit groups, high bit = more follows; a 9th byte gives all 8 bits."""
    value = 0
    for n in range(8):
        byte = buf[i + n]
        value = (value << 7) | (byte & 0x7F)
        if byte < 0x80:
            return value, i + n + 1
    return (value << 8) | buf[i + 8], i + 9


def parse_structure(buf: bytes) -> list[tuple[int, list[int]]]:
    """Levels of an FTS5 index as (nMerge, [segment ids]); the whole record must be consumed.

    4-byte cookie, (a 4-byte marker in SQLite >= 3.43's v2 records, which add five varints per
    segment), varints nLevel, nSegment, nWriteCounter, then per level nMerge, nSeg and per
    segment iSegid, pgnoFirst, pgnoLast.
    """
    i, v2 = 4, buf[4:8] == b"\xff\x00\x00\x01"
    if v2:
        i = 8
    n_level, i = _varint(buf, i)
    n_segment, i = _varint(buf, i)
    _write_counter, i = _varint(buf, i)
    levels = []
    for _ in range(n_level):
        n_merge, i = _varint(buf, i)
        n_seg, i = _varint(buf, i)
        segids = []
        for _ in range(n_seg):
            segid, i = _varint(buf, i)
            first, i = _varint(buf, i)
            last, i = _varint(buf, i)
            assert segid > 0 and 0 <= first <= last  # 0, 0: a segment with no leaf pages
            for _ in range(5 if v2 else 0):
                _, i = _varint(buf, i)
            segids.append(segid)
        assert n_merge <= n_seg
        levels.append((n_merge, segids))
    assert i == len(buf), "structure record not consumed exactly"
    assert sum(len(s) for _, s in levels) == n_segment
    return levels


def structure(conn: sqlite3.Connection, table: str) -> list[tuple[int, list[int]]]:
    return parse_structure(conn.execute(f"SELECT block FROM {table}_data WHERE id = 10").fetchone()[0])


def config_rows(conn: sqlite3.Connection, table: str) -> list[tuple]:
    """Every row of ``<table>_config`` with its storage class and bytes (byte-identical comparisons)."""
    return conn.execute(f"SELECT k, typeof(v), hex(v) FROM {table}_config ORDER BY k").fetchall()


def configs(db) -> dict[str, list[tuple]]:
    conn = sqlite3.connect(db)
    try:
        return {t: config_rows(conn, t) for t in FTS_TABLES}
    finally:
        conn.close()


def held_values(db) -> dict[str, dict]:
    """The keys a hold changes, as another connection (Hermes) reads them now."""
    conn = sqlite3.connect(db)
    try:
        return {
            t: dict(conn.execute(f"SELECT k, v FROM {t}_config WHERE k IN {tuple(fts.HELD)}"))
            for t in FTS_TABLES
        }
    finally:
        conn.close()


def set_fts(db, table: str, key: str, value: int) -> None:
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute(f"INSERT INTO {table}({table}, rank) VALUES(?, ?)", (key, value))
    conn.close()


def _demo(tmp_path, sessions: int = 40):
    home = tmp_path / "home"
    demo.build_home(home, demo.generate(NOW, sessions=sessions))
    return home


# --- levels(): the keeper's own reader ------------------------------------------------------------


def segment_count(conn: sqlite3.Connection, table: str) -> int | None:
    lv = levels(conn, table)
    return None if lv is None else sum(map(len, lv))


def test_segment_count_matches_the_structure_record_and_grows_one_per_transaction(tmp_path):
    home = _demo(tmp_path)
    db = home / "state.db"
    assert fts5_tables(inspect(db)) == list(FTS_TABLES)
    for t in FTS_TABLES:
        set_fts(db, t, "automerge", 0)
        # The demo's bulk insert already left ~13 segments in level 0: lift crisismerge (16)
        # out of reach too, or FTS5 would merge them in the middle of the probe.
        set_fts(db, t, "crisismerge", 200)
    conn = sqlite3.connect(db, isolation_level=None)
    before = {t: segment_count(conn, t) for t in FTS_TABLES}
    level0 = {t: len(structure(conn, t)[0][1]) for t in FTS_TABLES}
    for t in FTS_TABLES:
        assert before[t] == sum(len(s) for _, s in structure(conn, t)) > 1

    sid = conn.execute("SELECT id FROM sessions ORDER BY id LIMIT 1").fetchone()[0]
    n = 7
    for i in range(n):
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(
            "INSERT INTO messages (session_id, role, content, timestamp) VALUES (?, 'user', ?, ?)",
            (sid, f"segment probe number {i}", NOW),
        )
        conn.execute("COMMIT")

    for t in FTS_TABLES:
        levels = structure(conn, t)
        assert segment_count(conn, t) == before[t] + n == sum(len(s) for _, s in levels)
        assert len(levels[0][1]) == level0[t] + n  # each transaction flushed one new level-0 segment
    conn.close()


def test_a_merge_left_in_progress_is_read_with_its_level_and_inputs(tmp_path):
    """Hermes's bounded pass ('merge', 500 with usermerge 2) stops mid-merge: the structure record
    keeps how many of the level's segments are inputs, and the next positive 'merge' goes on with it."""
    home = _demo(tmp_path)
    db, t = home / "state.db", "messages_fts"
    set_fts(db, t, "automerge", 0)
    set_fts(db, t, "crisismerge", 200)
    conn = sqlite3.connect(db, isolation_level=None)
    sid = conn.execute("SELECT id FROM sessions ORDER BY id LIMIT 1").fetchone()[0]
    for i in range(30):
        conn.execute(
            "INSERT INTO messages (session_id, role, content, timestamp) VALUES (?, 'user', ?, ?)",
            (sid, " ".join(f"w{i}x{j}" for j in range(400)), NOW),
        )
    assert fts.merges_in_progress(conn, t) == []
    set_fts(db, t, "usermerge", 2)
    fts.merge_step(conn, t, 1)  # one page of output: the merge is started, not done

    theirs = [[n, m, len(segs)] for n, (m, segs) in enumerate(structure(conn, t)) if m]
    assert theirs and theirs[0][1] >= 2
    assert fts.merges_in_progress(conn, t) == theirs
    while fts.merge_step(conn, t, 64) >= 2:
        pass
    assert fts.merges_in_progress(conn, t) == []
    conn.close()


GARBAGE = [
    ("short blob", b"\x01\x02\x03", None),
    ("varint runs off the end", b"\x00\x00\x00\x01\xff\xff", None),
    ("text, not a blob", "0000000104", None),
    ("no structure row", None, None),
    # cookie, nLevel 1, nSegment 3, writes 5, level 0: nMerge 0, nSeg 3, (segid, first, last) x 3
    ("v1 record", b"\x00\x00\x00\x07\x01\x03\x05\x00\x03" + b"\x01\x01\x01\x02\x01\x02\x03\x01\x01", 3),
    # the same in v2: a marker, five more varints per segment
    (
        "v2 record",
        b"\x00\x00\x00\x07\xff\x00\x00\x01\x01\x03\x05\x00\x03" + b"\x01\x01\x01\x00\x00\x00\x00\x00" * 3,
        3,
    ),
    ("cut short after the header", b"\x00\x00\x00\x07\x01\x03\x05\x00\x03\x01", None),
]


@pytest.mark.parametrize("desc, block, expected", GARBAGE, ids=[g[0] for g in GARBAGE])
def test_segment_count_of_odd_structure_records(tmp_path, desc, block, expected):
    conn = sqlite3.connect(tmp_path / "x.db")
    conn.execute("CREATE TABLE x_data (id INTEGER PRIMARY KEY, block BLOB)")
    conn.execute("INSERT INTO x_data VALUES (1, x'00')")
    if block is not None:
        conn.execute("INSERT INTO x_data VALUES (10, ?)", (block,))
    assert segment_count(conn, "x") == expected
    conn.close()


def test_segment_count_and_the_parser_agree_on_multi_byte_varints(tmp_path):
    # 130 levels of one segment each: nLevel, nSegment and nWriteCounter take two-byte varints.
    levels = b"".join(b"\x00\x01" + bytes([1 + k % 100, 1, 1]) for k in range(130))
    record = b"\x00\x00\x00\x02" + b"\x81\x02" + b"\x81\x02" + b"\x85\x00" + levels
    parsed = parse_structure(record)
    assert len(parsed) == 130 and all(len(segs) == 1 for _, segs in parsed)
    conn = sqlite3.connect(tmp_path / "x.db")
    conn.execute("CREATE TABLE x_data (id INTEGER PRIMARY KEY, block BLOB)")
    conn.execute("INSERT INTO x_data VALUES (10, ?)", (record,))
    assert segment_count(conn, "x") == 130
    conn.close()


# --- MergeHold: engaged, then released ----------------------------------------------------------

PRESETS = [
    ("hermes defaults (no rows)", {}),
    ("user set automerge=7", {"automerge": 7}),
    ("user set automerge=7 and crisismerge=9", {"automerge": 7, "crisismerge": 9}),
    ("user set usermerge=6", {"usermerge": 6}),
]


@pytest.mark.parametrize("desc, preset", PRESETS, ids=[p[0] for p in PRESETS])
def test_hold_restores_fts_config_exactly(tmp_path, desc, preset):
    home = _demo(tmp_path)
    db, keeper = home / "state.db", home / "keeper"
    for t in FTS_TABLES:
        for k, v in preset.items():
            set_fts(db, t, k, v)
    before = configs(db)
    assert [r[0] for r in before["messages_fts"]] == sorted(["version", *preset])
    hold_file = keeper / HOLD_NAME

    with Writer(db, Budget(pause_ms=0)) as w, MergeHold(w, inspect(db), keeper) as hold:
        assert not hold_file.exists()
        hold.engage()
        assert hold_file.stat().st_mode & 0o777 == 0o600
        saved = {k: preset.get(k) for k in ("automerge", "crisismerge", "usermerge")}
        assert json.loads(hold_file.read_text()) == {t: saved for t in FTS_TABLES}
        # What every other connection (Hermes) now sees: automerge off, crisismerge out of reach,
        # usermerge at FTS5's 4 (Hermes's own value, 6 here, goes back at the end).
        held = {"automerge": 0, "crisismerge": 512, "usermerge": 16}
        assert held_values(db) == {t: held for t in FTS_TABLES}
        hold.engage()  # once per block: a second call changes nothing
        assert json.loads(hold_file.read_text()) == {t: saved for t in FTS_TABLES}

    assert not hold_file.exists()
    assert configs(db) == before
    assert held_values(db) == {t: preset for t in FTS_TABLES}


def _insert_messages(c, sid: str, i: int, rows: int, words: int) -> None:
    """One statement of ``rows`` messages: FTS5 flushes one segment per statement."""
    values = [(sid, " ".join(f"w{i}x{k}y{j}" for j in range(words)), NOW) for k in range(rows)]
    c.execute(
        "INSERT INTO messages (session_id, role, content, timestamp) VALUES "
        + ",".join(["(?, 'user', ?, ?)"] * len(values)),
        [v for r in values for v in r],
    )


def _held_writes(tmp_path, rows_per_write: int, writes: int, words: int):
    """Writes through an engaged hold; returns (hold steps, most growth of segments of >= 2 pages,
    most growth of all segments) per index, and checks the released index has < 4 segments a level."""
    home = _demo(tmp_path)
    db = home / "state.db"
    conn = sqlite3.connect(db)
    sid = conn.execute("SELECT id FROM sessions ORDER BY id LIMIT 1").fetchone()[0]
    conn.close()
    most_big = dict.fromkeys(FTS_TABLES, 0)
    most_all = dict.fromkeys(FTS_TABLES, 0)
    with Writer(db, Budget(pause_ms=0)) as w, MergeHold(w, inspect(db), home / "keeper") as hold:
        hold.engage()
        start = {t: levels(w.conn, t) for t in FTS_TABLES}
        start_big = {t: sum(p >= 2 for sizes in lv for p in sizes) for t, lv in start.items()}
        start_all = {t: sum(map(len, lv)) for t, lv in start.items()}

        def watch():  # growth since the hold began, above what the hold leaves after a merge
            for t in FTS_TABLES:
                lv = levels(w.conn, t)
                big = sum(p >= 2 for sizes in lv for p in sizes) - start_big[t]
                most_big[t] = max(most_big[t], big)
                most_all[t] = max(most_all[t], sum(map(len, lv)) - start_all[t])

        w.after_step.append(watch)  # runs after the hold's own tick

        for i in range(writes):
            w.step(lambda c, i=i: _insert_messages(c, sid, i, rows_per_write, words))
        steps = hold.merge_steps
    conn = sqlite3.connect(db)
    for t in FTS_TABLES:
        assert all(len(segs) < 4 for _, segs in structure(conn, t))  # released: the rest merged too
    conn.close()
    return steps, most_big, most_all


def test_hold_merges_once_level_0_holds_enough_big_segments(tmp_path):
    """Automerge is off while held: the hold merges when 64 multi-page segments piled up (a merge's
    output is one more big segment, hence the + 1)."""
    steps, most_big, _ = _held_writes(tmp_path, rows_per_write=40, writes=MERGE_EVERY_SEGMENTS + 10, words=60)
    assert steps > 0
    for t in FTS_TABLES:
        assert MERGE_EVERY_SEGMENTS // 2 < most_big[t] <= MERGE_EVERY_SEGMENTS + 1, (t, most_big[t])


def test_hold_merges_many_small_segments_too(tmp_path):
    """A gateway's one-page segments do not count as big, but cannot pile up without bound."""
    steps, most_big, most_all = _held_writes(
        tmp_path, rows_per_write=1, writes=MERGE_GUARD_SEGMENTS + 20, words=3
    )
    assert steps > 0
    for t in FTS_TABLES:
        assert most_big[t] < MERGE_EVERY_SEGMENTS
        assert MERGE_GUARD_SEGMENTS // 2 < most_all[t] <= MERGE_GUARD_SEGMENTS + 1, (t, most_all[t])


def test_a_setting_hermes_changes_during_a_hold_is_the_one_put_back(tmp_path):
    """Today's Hermes lowers usermerge to 2 at its first bounded merge pass, which may fall in the
    middle of a run: the hold takes 4 back for its own rounds, and leaves Hermes's 2 at the end."""
    home = _demo(tmp_path)
    db, keeper = home / "state.db", home / "keeper"
    conn = sqlite3.connect(db)
    sid = conn.execute("SELECT id FROM sessions ORDER BY id LIMIT 1").fetchone()[0]
    conn.close()
    with Writer(db, Budget(pause_ms=0)) as w, MergeHold(w, inspect(db), keeper) as hold:
        hold.engage()
        for t in FTS_TABLES:
            set_fts(db, t, "usermerge", 2)  # Hermes, on its own connection
        for i in range(MERGE_EVERY_SEGMENTS + 2):  # until a round is due
            w.step(lambda c, i=i: _insert_messages(c, sid, i, 40, 60))
        assert hold.merge_steps > 0
        assert held_values(db) == {t: fts.HOLD_VALUES for t in FTS_TABLES}
        assert json.loads((keeper / HOLD_NAME).read_text()) == {
            t: {"automerge": None, "crisismerge": None, "usermerge": 2} for t in FTS_TABLES
        }
    assert held_values(db) == {t: {"usermerge": 2} for t in FTS_TABLES}


def test_a_setting_hermes_changes_in_the_middle_of_a_round_is_held_again_at_its_next_step(
    tmp_path, monkeypatch
):
    """Hermes's first bounded pass (usermerge 2) may fall between two steps of a round. A round that
    went on at 2 merged its outputs on up into the index's biggest segment (a 2 GB bench round:
    58 s of lock); the next step takes the hold's 16 back, so level 1 keeps gathering them, and
    Hermes's 2 is what goes back at the end."""
    home = _demo(tmp_path)
    db, keeper, t = home / "state.db", home / "keeper", "messages_fts_trigram"
    conn = sqlite3.connect(db)
    sid = conn.execute("SELECT id FROM sessions ORDER BY id LIMIT 1").fetchone()[0]
    conn.close()
    merging, rounds, real_round = [], [], fts.merge_round

    def round_of(w, table, *args, **kwargs):
        merging.append(table)
        try:
            return real_round(w, table, *args, **kwargs)
        finally:
            merging.pop()
            rounds.append(table)

    monkeypatch.setattr(fts, "merge_round", round_of)
    with Writer(db, Budget(pause_ms=0)) as w, MergeHold(w, inspect(db), keeper) as hold:
        hold.engage()

        passes = []

        def hermes_pass():  # once, after a step of the trigram index's second round, on its own connection
            if merging == [t] and rounds.count(t) == 1 and not passes:
                set_fts(db, t, "usermerge", 2)
                passes.append(i)

        w.after_step.append(hermes_pass)
        gathered, i = [], 0
        while rounds.count(t) < 2:
            w.step(lambda c, i=i: _insert_messages(c, sid, i, 40, 8))
            if rounds.count(t) == 1 and not gathered:
                gathered.append(len(fts.segments(w.conn, t)[1]))
            i += 1
        level_1 = len(fts.segments(w.conn, t)[1])
        assert passes and 2 <= gathered[0] < level_1 < 16  # the second round's output, not merged on at 2
        assert held_values(db)[t] == fts.HOLD_VALUES
        assert json.loads((keeper / HOLD_NAME).read_text())[t]["usermerge"] == 2
    assert held_values(db)[t] == {"usermerge": 2}


def test_hold_that_was_never_engaged_writes_nothing(tmp_path):
    home = _demo(tmp_path)
    db = home / "state.db"
    before = configs(db)
    with Writer(db, Budget(pause_ms=0)) as w:
        with MergeHold(w, inspect(db), home / "keeper"):
            pass
        assert w.stats.transactions == 0
    assert configs(db) == before
    assert not (home / "keeper" / HOLD_NAME).exists()


def test_release_leftover_hold_returns_false_when_nothing_is_left_over(tmp_path):
    home = _demo(tmp_path)
    db = home / "state.db"
    set_fts(db, "messages_fts", "automerge", 7)
    before = configs(db)
    with Writer(db, Budget(pause_ms=0)) as w:
        assert release_leftover_hold(w, inspect(db), home / "keeper") is False
        assert w.stats.transactions == 0
    assert configs(db) == before
    assert not (home / "keeper" / HOLD_NAME).exists()


# --- a hold killed before it was released -------------------------------------------------------


def _kill_while_held(db, keeper) -> None:
    """Engage a hold and 'die': no ``__exit__``, so Hermes's settings are not put back."""
    w = Writer(db, Budget(pause_ms=0))
    hold = MergeHold(w, inspect(db), keeper)
    hold.__enter__()
    hold.engage()
    w.close()


def _release_with_library(home) -> None:
    db = home / "state.db"
    with Writer(db, Budget(pause_ms=0)) as w:
        assert release_leftover_hold(w, inspect(db), home / "keeper") is True


def _cli(*args):
    def go(home):
        res = CliRunner().invoke(main, [*args, "--home", str(home)])
        assert res.exit_code == 0, res.output

    return go


REPAIRS = [
    ("release_leftover_hold", _release_with_library),
    ("hermes-keeper compact", _cli("compact")),
    ("hermes-keeper run", _cli("run")),
]


@pytest.mark.parametrize("desc, repair", REPAIRS, ids=[r[0] for r in REPAIRS])
def test_killed_hold_is_repaired_with_the_original_settings(tmp_path, desc, repair):
    home = _demo(tmp_path)
    db, keeper = home / "state.db", home / "keeper"
    set_fts(db, "messages_fts", "automerge", 7)  # the user's own value on one index, defaults on the other
    before = configs(db)

    _kill_while_held(db, keeper)
    set_fts(db, "messages_fts_trigram", "usermerge", 2)  # killed in a full merge (FULL_MERGE_VALUES)
    hold_file = keeper / HOLD_NAME
    assert hold_file.exists()
    assert held_values(db)["messages_fts"] == {"automerge": 0, "crisismerge": 512, "usermerge": 16}

    repair(home)

    assert not hold_file.exists()
    assert configs(db) == before  # the original 7 and the absent rows, not the held 0 / 512 / 16 / 2
    assert held_values(db) == {"messages_fts": {"automerge": 7}, "messages_fts_trigram": {}}
    if desc.startswith("hermes-keeper"):
        actions = [r["action"] for r in read_journal(keeper)]
        assert "fts_hold_found" in actions and "fts_restored" in actions
        restored = [r for r in read_journal(keeper) if r["action"] == "fts_restored"][-1]
        saved = {"automerge": 7, "crisismerge": None, "usermerge": None}
        assert restored["settings"]["messages_fts"] == saved


@pytest.mark.parametrize("content", [b"", b"{", b"[]", b'{"messages_fts": {"automerge": "x"}}'])
def test_an_empty_or_unreadable_hold_file_is_recovered_from_the_database(tmp_path, content):
    """A power cut that kept the hold file's name but not its data: `run` says so in one line and
    puts Hermes's settings back from what the database holds (was: every run failed after its backup)."""
    home = _demo(tmp_path)
    db, keeper = home / "state.db", home / "keeper"
    _kill_while_held(db, keeper)
    assert held_values(db)["messages_fts"] == {"automerge": 0, "crisismerge": 512, "usermerge": 16}
    (keeper / HOLD_NAME).write_bytes(content)
    set_fts(db, "messages_fts", "automerge", 7)  # Hermes's own value since the kill: not a hold's, kept
    set_fts(db, "messages_fts_trigram", "usermerge", 2)  # today's Hermes sets this one itself: kept

    res = subprocess.run(
        [sys.executable, "-m", "hermes_keeper", "run", "--home", str(home)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    warnings = [line for line in res.stderr.splitlines() if HOLD_NAME in line]
    assert len(warnings) == 1 and "taken from the database" in warnings[0]
    assert not (keeper / HOLD_NAME).exists()
    assert held_values(db) == {"messages_fts": {"automerge": 7}, "messages_fts_trigram": {"usermerge": 2}}
    (found,) = [r for r in read_journal(keeper) if r["action"] == "fts_hold_recovered"]
    assert found["settings"]["messages_fts"] == {"automerge": 7, "crisismerge": None, "usermerge": None}


def test_run_after_a_kill_does_not_save_the_held_values_as_hermes_settings(tmp_path):
    """Two kills in a row: the second hold must still carry the settings from before the first."""
    home = _demo(tmp_path)
    db, keeper = home / "state.db", home / "keeper"
    set_fts(db, "messages_fts_trigram", "automerge", 7)
    before = configs(db)
    _kill_while_held(db, keeper)
    _kill_while_held(db, keeper)  # a second keeper killed while the first one's hold is still in force
    assert json.loads((keeper / HOLD_NAME).read_text())["messages_fts_trigram"]["automerge"] == 7
    _release_with_library(home)
    assert configs(db) == before


# --- a real run on a home made by real Hermes ---------------------------------------------------


def test_run_on_hermes_home_restores_config_and_leaves_merged_levels(tmp_path, hermes, hermes_home):
    home = hermes_home(tmp_path / "home", sessions=40)
    # compact = false: the levels below are the hold's own merging, not compact's full merge.
    (home / "keeper.toml").write_text("compact = false\n")
    db = home / "state.db"
    before = configs(db)
    conn = sqlite3.connect(db)
    assert any(len(segs) >= 4 for _, segs in structure(conn, "messages_fts")), "nothing to merge: weak test"
    conn.close()

    res = CliRunner().invoke(main, ["run", "--home", str(home), "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)["profiles"][0]
    assert out["pruned"] > 0 and out["writer"]["fts_merge_steps"] > 0

    assert configs(db) == before
    assert not (home / "keeper" / HOLD_NAME).exists()
    conn = sqlite3.connect(db, isolation_level=None)
    for t in FTS_TABLES:
        levels = structure(conn, t)
        assert all(len(segs) < 4 for _, segs in levels), (t, levels)
        assert all(n_merge == 0 for n_merge, _ in levels), (t, levels)  # no merge left half-done
        conn.execute(f"INSERT INTO {t}({t}) VALUES('integrity-check')")  # raises if the index is bad
    conn.close()
    assert hermes.run(home, [{"op": "fts_integrity"}])[0] == {t: "ok" for t in FTS_TABLES}


# --- a hold that made big segments ends with the index merged into one -------------------------


def _one_segment(conn: sqlite3.Connection, table: str) -> bool:
    """Everything in one segment on the index's last level (as after Hermes's own 'optimize')."""
    levels = structure(conn, table)
    return [segs for _, segs in levels if segs] == [levels[-1][1]] and len(levels[-1][1]) == 1


def test_run_that_made_big_segments_merges_each_index_into_one(tmp_path, monkeypatch, hermes, hermes_home):
    """Left at a low level, a big segment of tombstones would be merged inside a gateway write
    by Hermes's automerge once its level filled (1.3-1.8 s on the bench home)."""
    monkeypatch.setattr(fts, "FULL_MERGE_PAGES", 2)  # this small home's segments count as big
    home = hermes_home(tmp_path / "home", sessions=40)
    (home / "keeper.toml").write_text("compact = false\n")
    db = home / "state.db"
    before = configs(db)
    conn = sqlite3.connect(db)
    assert not any(_one_segment(conn, t) for t in FTS_TABLES), "already merged: weak test"
    conn.close()

    res = CliRunner().invoke(main, ["run", "--home", str(home), "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)["profiles"][0]
    assert out["pruned"] > 0
    journal = read_journal(home / "keeper")
    restored = [e for e in journal if e["action"] == "fts_restored"]
    assert restored[-1]["full_merge"] == list(FTS_TABLES)
    # Each round of merges is journaled with its cost; together they are the run's figures.
    rounds = [e for e in journal if e["action"] == "fts_merge"]
    assert sum(e["steps"] for e in rounds) == out["writer"]["fts_merge_steps"]
    assert sum(e["lock_ms"] for e in rounds) == pytest.approx(out["writer"]["fts_merge_ms"], abs=1)
    # ... and says what its longest step was: how long, how much of it the COMMIT, how many pages asked.
    assert max(e["max_step_ms"] for e in rounds) == pytest.approx(out["writer"]["fts_max_step_ms"], abs=0.1)
    assert out["writer"]["max_step_ms"]["merge"] == pytest.approx(out["writer"]["fts_max_step_ms"], abs=0.1)
    for e in rounds:
        assert 0 <= e["max_step_commit_ms"] <= e["max_step_ms"] and e["max_step_pages"] > 0, e
        assert 0 <= e["over_budget"] <= e["steps"], e
        # (A round that found no level to merge wrote nothing: its one COMMIT takes no time.)
        assert e["max_step_commit_ms"] > 0 or e["pages"][0] == e["pages"][1], e
    full = {e["table"]: e for e in rounds if e["full"]}
    assert sorted(full) == sorted(FTS_TABLES)
    for e in full.values():
        assert e["segments"][0] > 1 and e["segments"][1] == 1, e
        assert e["longest_doclist_pages"] >= 1, e  # why its longest step took what it took
        assert 0 < e["lock_ms"] <= e["wall_ms"], e
    assert configs(db) == before
    conn = sqlite3.connect(db, isolation_level=None)
    for t in FTS_TABLES:
        assert _one_segment(conn, t), (t, structure(conn, t))
    conn.close()
    assert hermes.run(home, [{"op": "fts_integrity"}])[0] == {t: "ok" for t in FTS_TABLES}


def test_small_segments_get_no_full_merge(tmp_path, hermes, hermes_home):
    """The default threshold: a small run leaves Hermes's structure alone beyond its merges."""
    home = hermes_home(tmp_path / "home", sessions=40)
    (home / "keeper.toml").write_text("compact = false\n")
    conn = sqlite3.connect(home / "state.db")
    assert max(p for t in FTS_TABLES for lv in levels(conn, t) for p in lv) < fts.FULL_MERGE_PAGES
    conn.close()
    res = CliRunner().invoke(main, ["run", "--home", str(home), "--json"])
    assert res.exit_code == 0, res.output
    restored = [e for e in read_journal(home / "keeper") if e["action"] == "fts_restored"]
    assert restored[-1]["full_merge"] == []


def test_hold_found_after_a_kill_merges_fully_where_a_big_segment_is_below_the_last_level(
    tmp_path, monkeypatch
):
    """Which segments the killed run made is unknown: when unsure, merge (Hermes never pays for it)."""
    home = _demo(tmp_path)
    db, keeper = home / "state.db", home / "keeper"
    _kill_while_held(db, keeper)
    monkeypatch.setattr(fts, "FULL_MERGE_PAGES", 1)
    _release_with_library(home)
    conn = sqlite3.connect(db)
    assert all(_one_segment(conn, t) for t in FTS_TABLES), {t: structure(conn, t) for t in FTS_TABLES}
    conn.close()


def test_hold_found_after_a_completed_full_merge_does_not_merge_again(tmp_path, monkeypatch):
    """The one segment on the last level is what 'optimize' leaves: nothing for Hermes to pay."""
    home = _demo(tmp_path)
    db, keeper = home / "state.db", home / "keeper"
    monkeypatch.setattr(fts, "FULL_MERGE_PAGES", 1)
    _kill_while_held(db, keeper)
    _release_with_library(home)  # merges fully (the test above)
    _kill_while_held(db, keeper)
    with Writer(db, Budget(pause_ms=0)) as w, MergeHold(w, inspect(db), keeper, Journal(keeper)) as hold:
        assert hold.saved
    restored = [e for e in read_journal(keeper) if e["action"] == "fts_restored"]
    assert restored[-1]["full_merge"] == []


def test_full_merge_finishes_while_a_gateway_writes_between_its_steps(tmp_path, monkeypatch):
    """With FTS5's usermerge of 4, a merge of two segments was not continued once a gateway's
    writes left two segments on a lower level between two steps: the full merge ended halfway
    and the tombstones stayed for Hermes's automerge (a 2 s gateway write in the bench)."""
    monkeypatch.setattr(fts, "FULL_MERGE_PAGES", 2)
    monkeypatch.setattr(fts, "FULL_MERGE_START_PAGES", 1)
    home = _demo(tmp_path)
    db = home / "state.db"
    gateway = sqlite3.connect(db, isolation_level=None)
    for t in FTS_TABLES:  # one segment, as Hermes's 'optimize' leaves an index
        gateway.execute(f"INSERT INTO {t}({t}) VALUES('optimize')")
    sid = gateway.execute("SELECT id FROM sessions ORDER BY id LIMIT 1").fetchone()[0]
    writes = []

    def in_full_merge(t):  # FULL_MERGE_VALUES set, and a merge half done
        usermerge = gateway.execute(f"SELECT v FROM {t}_config WHERE k = 'usermerge'").fetchone()
        return usermerge == (2,) and any(n_merge for n_merge, _ in structure(gateway, t))

    def gateway_writes():  # two appends between two steps of a full merge
        if len(writes) < 40 and any(in_full_merge(t) for t in FTS_TABLES):
            for _ in range(2):
                gateway.execute(
                    "INSERT INTO messages (session_id, role, content, timestamp) VALUES (?, 'user', ?, ?)",
                    (sid, f"gateway write {len(writes)}", NOW),
                )
                writes.append(1)

    # A budget no step fits in: every merge step is one page, so the merge takes many steps.
    tiny = Budget(budget_ms=0.001, pause_ms=0)
    with Writer(db, tiny) as w, MergeHold(w, inspect(db), home / "keeper") as hold:
        hold.engage()
        w.step(lambda c: c.execute("DELETE FROM messages WHERE id % 2 = 0"))  # one big tombstone segment
        big = {t: {s for level in fts.segments(w.conn, t) for s in level} for t in FTS_TABLES}
        w.after_step.append(gateway_writes)
    assert len(writes) >= 4, "the merge was never half done between two steps: weak test"
    for t in FTS_TABLES:
        assert all(n_merge == 0 for n_merge, _ in structure(gateway, t)), t  # no merge left half-done
        left = {s for level in fts.segments(gateway, t) for s in level}
        assert not left & big[t], (t, left & big[t])  # the optimized segment and the tombstones: merged
        gateway.execute(f"INSERT INTO {t}({t}) VALUES('integrity-check')")
    assert held_values(db) == {t: {} for t in FTS_TABLES}
    gateway.close()


def _hermes_pass_left_a_merge(conn, t: str, lowest: int = 1) -> list[int]:
    """Hermes's bounded pass (usermerge 2, a few pages a command) until it has started a merge of a
    level from ``lowest`` up and left it half done: [level, inputs]."""
    conn.execute(f"INSERT INTO {t}({t}, rank) VALUES('usermerge', 2)")
    for _ in range(1000):
        left = [m for m in fts.merges_in_progress(conn, t) if m[0] >= lowest]
        if left:
            return left[0][:2]
        fts.merge_step(conn, t, 2)
    raise AssertionError(f"no merge left half done from level {lowest} up")


def test_a_merge_hermes_left_half_done_is_left_to_the_full_merge(tmp_path, monkeypatch):
    """Hermes's bounded passes start a merge of a level's every segment and leave it half done.
    The hold's rounds do not go on with it (that rewrote the index once in the rounds and again in
    the full merge); they merge the run's own segments, and the full merge at the end takes it in."""
    monkeypatch.setattr(fts, "FULL_MERGE_PAGES", 2)
    home = _demo(tmp_path)
    db, keeper, t = home / "state.db", home / "keeper", "messages_fts_trigram"
    gateway = sqlite3.connect(db, isolation_level=None)
    sid = gateway.execute("SELECT id FROM sessions ORDER BY id LIMIT 1").fetchone()[0]
    # An import: one big segment a transaction, under FTS5's own automerge, until a level above 0
    # holds two segments (what Hermes's pass, at usermerge 2, starts a merge of).
    for i in range(64):
        _insert_messages(gateway, sid, 1000 + i, 60, 40)
        if any(len(level) >= 2 for level in fts.segments(gateway, t)[1:]):
            break
    theirs = _hermes_pass_left_a_merge(gateway, t)
    inputs = {s.key for s in fts.segments(gateway, t)[theirs[0]][: theirs[1]]}
    # A budget no step fits in: one page a step. (A step that ends a merge of ours goes on with
    # the next one for the rest of its pages: a big step could finish this small merge of theirs.)
    with (
        Writer(db, Budget(budget_ms=0.001, pause_ms=0)) as w,
        MergeHold(w, inspect(db), keeper, Journal(keeper)) as hold,
    ):
        hold.engage()
        for i in range(MERGE_EVERY_SEGMENTS + 2):  # until a round is due
            w.step(lambda c, i=i: _insert_messages(c, sid, i, 40, 60))
        rounds = [e for e in read_journal(keeper) if e["action"] == "fts_merge" and e["table"] == t]
        assert rounds and all(e["left"] == theirs for e in rounds), rounds
        level = fts.structure(w.conn, t)[theirs[0]]
        assert level[0] == theirs[1] and {s.key for s in level[1][: theirs[1]]} == inputs  # as Hermes left it
        assert len(fts.segments(w.conn, t)[0]) < MERGE_EVERY_SEGMENTS  # the run's own segments merged
    restored = [e for e in read_journal(keeper) if e["action"] == "fts_restored"][-1]
    assert t in restored["full_merge"]
    assert fts.merges_in_progress(gateway, t) == [] and sum(map(len, fts.segments(gateway, t))) == 1
    gateway.execute(f"INSERT INTO {t}({t}) VALUES('integrity-check')")
    hits = gateway.execute(f"SELECT count(*) FROM {t} WHERE {t} MATCH '\"w1000x5y7\"'").fetchone()[0]
    assert hits == 1
    gateway.close()


def test_a_merge_hermes_left_half_done_on_level_0_is_gone_on_with(tmp_path):
    """Every write's new segment goes to level 0: a merge left there would hold them all back until
    FTS5's crisismerge merged them inside someone's write."""
    home = _demo(tmp_path)
    db, keeper, t = home / "state.db", home / "keeper", "messages_fts_trigram"
    gateway = sqlite3.connect(db, isolation_level=None)
    sid = gateway.execute("SELECT id FROM sessions ORDER BY id LIMIT 1").fetchone()[0]
    set_fts(db, t, "automerge", 0)
    for i in range(8):
        _insert_messages(gateway, sid, 1000 + i, 20, 40)
    assert _hermes_pass_left_a_merge(gateway, t, lowest=0)[0] == 0
    with Writer(db, Budget(pause_ms=0)) as w, MergeHold(w, inspect(db), keeper, Journal(keeper)) as hold:
        hold.engage()
        for i in range(MERGE_EVERY_SEGMENTS + 2):  # until a round is due
            w.step(lambda c, i=i: _insert_messages(c, sid, i, 40, 60))
        rounds = [e for e in read_journal(keeper) if e["action"] == "fts_merge" and e["table"] == t]
        assert rounds and rounds[0]["merging"][0][0] == 0  # the round found Hermes's merge on level 0
        assert all(level > 0 for level, _, _ in fts.merges_in_progress(w.conn, t))  # and finished it
        assert len(fts.segments(w.conn, t)[0]) < MERGE_EVERY_SEGMENTS
    gateway.execute(f"INSERT INTO {t}({t}) VALUES('integrity-check')")
    gateway.close()


def test_rounds_gather_the_levels_above_0_sixteen_to_a_merge_and_the_full_merge_takes_the_rest(
    tmp_path, monkeypatch
):
    """With FTS5's usermerge of 4 the rounds merged level 1 again at every fourth output, tombstones
    and all; held at 16 they do it a fourth as often, and the full merge gets fewer inputs."""
    monkeypatch.setattr(fts, "FULL_MERGE_PAGES", 2)
    home = _demo(tmp_path)
    db, keeper, t = home / "state.db", home / "keeper", "messages_fts_trigram"
    conn = sqlite3.connect(db)
    sid = conn.execute("SELECT id FROM sessions ORDER BY id LIMIT 1").fetchone()[0]
    conn.close()
    with Writer(db, Budget(pause_ms=0)) as w, MergeHold(w, inspect(db), keeper, Journal(keeper)) as hold:
        hold.engage()
        for i in range(5 * (MERGE_EVERY_SEGMENTS + 1)):
            w.step(lambda c, i=i: _insert_messages(c, sid, i, 40, 8))
        rounds = [e for e in read_journal(keeper) if e["action"] == "fts_merge" and e["table"] == t]
        assert len(rounds) >= 5
        assert max(e["levels"][1] for e in rounds) >= 4  # a fourth output on level 1, not merged
        assert len(fts.segments(w.conn, t)[0]) < MERGE_EVERY_SEGMENTS
    restored = [e for e in read_journal(keeper) if e["action"] == "fts_restored"][-1]
    assert t in restored["full_merge"]
    conn = sqlite3.connect(db)
    assert sum(map(len, fts.segments(conn, t))) == 1
    conn.execute(f"INSERT INTO {t}({t}) VALUES('integrity-check')")
    conn.close()
