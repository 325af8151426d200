"""The deleter (``run/prune.py``) function by function, exactly, on small schema-31 homes: what each
transaction marks, deletes and finishes, what is kept, put back or refused, and every record of it.

No Hermes process and no sleeps: the writer's clock is faked where the batch sizes are the subject
(each step "holds the lock" a set time), so the sizes are exact (docs/testing.md, "Mutation testing").
"""

from __future__ import annotations

import json
import queue
import signal
import sqlite3
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from hermes_keeper.archive import store as arch
from hermes_keeper.archive.payload import RawText, read_payload
from hermes_keeper.interrupt import Interrupted
from hermes_keeper.journal import Journal
from hermes_keeper.model.policy import Policy
from hermes_keeper.place import Place
from hermes_keeper.run import prune
from hermes_keeper.run.context import open_run
from hermes_keeper.sqlite import writer as writer_mod
from hermes_keeper.sqlite.schema import inspect
from hermes_keeper.sqlite.writer import Budget, Writer
from tests import upstream_home

NOW = time.time()
OLD = NOW - 200 * 86400.0
#: content of this many ASCII bytes costs exactly 1,000 units to delete (64 + 936)
K = "k" * 936


# --- homes --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def empty31(tmp_path_factory) -> dict[str, bytes]:
    """An empty schema-31 ``state.db`` in each journal mode, built once (copied per test)."""
    out = {}
    for mode in ("delete", "wal"):
        db = tmp_path_factory.mktemp(mode) / "state.db"
        conn = sqlite3.connect(db)
        conn.execute("PRAGMA synchronous=OFF")  # as upstream_home.build, without an fsync a statement
        conn.executescript(upstream_home.SCHEMA_31.read_text(encoding="utf-8"))
        conn.execute(f"PRAGMA journal_mode={mode}")
        conn.close()
        out[mode] = db.read_bytes()
    return out


@pytest.fixture
def place(tmp_path, empty31) -> Place:
    return _place(tmp_path, empty31)


def _place(tmp_path: Path, empty31: dict[str, bytes], mode: str = "delete") -> Place:
    home = tmp_path / "home"
    home.mkdir()
    (home / "state.db").write_bytes(empty31[mode])
    return Place("default", home, home)


def _connect(db: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA synchronous=OFF")  # the test's own writes: no fsync to wait for
    return conn


def _add(db: Path, sid: str, texts, **cols) -> None:
    """An ended session with one message per text (stamped OLD + 1, + 2, ...)."""
    conn = _connect(db)
    row = {
        "id": sid,
        "source": "cli",
        "started_at": OLD,
        "ended_at": OLD + 60,
        "end_reason": "user_exit",
        **cols,
    }
    conn.execute(
        f"INSERT INTO sessions ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})", tuple(row.values())
    )
    conn.executemany(
        "INSERT INTO messages (session_id, role, content, timestamp) VALUES (?, 'user', ?, ?)",
        [(sid, t, OLD + i + 1) for i, t in enumerate(texts)],
    )
    conn.commit()
    conn.close()


def _sql(db: Path, sql: str, args=()) -> list[tuple]:
    conn = _connect(db)
    try:
        rows = conn.execute(sql, args).fetchall()
        conn.commit()
        return rows
    finally:
        conn.close()


def _exact(db: Path, table: str, where: str, args=()) -> list[tuple]:
    """Rows with every column as (storage class, hex): equal means byte-identical."""
    conn = sqlite3.connect(db)
    try:
        cols = [r[1] for r in conn.execute(f"PRAGMA table_info({table})")]
        sel = ", ".join(f"typeof({c}), hex({c})" for c in cols)
        return conn.execute(f"SELECT {sel} FROM {table} WHERE {where} ORDER BY rowid", args).fetchall()
    finally:
        conn.close()


def _payloads(place: Place, sids: list[str]) -> tuple[list[dict], dict[int, int]]:
    conn = sqlite3.connect(place.db_path)
    schema = inspect(place.db_path)
    try:
        return [read_payload(conn, schema, s) for s in sids], prune.message_costs(conn, schema, sids)
    finally:
        conn.close()


def _records(place: Place, *skip: str) -> list[dict]:
    """The journal's records without their stamp and run id."""
    lines = (place.keeper_dir / "journal.jsonl").read_text().splitlines()
    out = [{k: v for k, v in json.loads(x).items() if k not in ("ts", "run")} for x in lines]
    return [r for r in out if r["action"] not in skip]


class Clock:
    """The writer's clock: each delete step holds the lock ``hold_ms`` (see :func:`_steps`)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def perf_counter(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def _steps(monkeypatch, hold_ms: float = 0.0, after=None) -> list[tuple]:
    """Each delete transaction as (marked, how many messages deleted, the conversations finished);
    on a fake clock where each holds the lock ``hold_ms``. ``after(n)``: called after step ``n``."""
    clock = Clock()
    monkeypatch.setattr(writer_mod, "time", clock)
    steps: list[tuple] = []
    work = prune._Deleter._work

    def recording(self, c, mark, ids, units):
        steps.append((list(mark), len(ids), [[p.sid for p in u] for u in units]))
        clock.now += hold_ms / 1000.0
        out = work(self, c, mark, ids, units)
        if after:
            after(len(steps), self)
        return out

    monkeypatch.setattr(prune._Deleter, "_work", recording)
    return steps


def _feed(place, batches: list[list[str]], units=None, store=None, result=None):
    """Verified batches as the archiver hands them over (archived in ``store`` when given)."""
    out = []
    for sids in batches:
        payloads, costs = _payloads(place, sids)
        entries = [None] * len(payloads)
        if store is not None:
            entries = prune._archive_verified(store, payloads, result or prune.PruneResult(), None)
        out.append(
            [prune._Pending.of(p, costs, units or {}, e) for p, e in zip(payloads, entries, strict=True)]
        )
    return out


# --- message_costs, _Pending, _batches, _activity ----------------------------------------------


def test_message_costs_are_text_bytes_plus_a_row_share_for_the_named_sessions_only(place):
    db = place.db_path
    _add(db, "a", ["héllo", ""])
    _add(db, "b", ["x" * 10])
    _add(db, "c", ["not asked"])
    _sql(db, "UPDATE messages SET tool_calls = '[1]', reasoning = 'why' WHERE content = ''")
    _sql(db, "INSERT INTO messages (session_id, role, content, timestamp) VALUES ('a', 'tool', NULL, 1)")
    conn = sqlite3.connect(db)
    costs = prune.message_costs(conn, inspect(db), ["a", "b"])
    conn.close()
    ids = dict(_sql(db, "SELECT id, session_id FROM messages"))
    assert sorted(costs.values()) == [64, 64 + 3 + 3, 64 + 6, 64 + 10]  # NULL 0; 'é' two bytes
    assert {ids[i] for i in costs} == {"a", "b"}
    assert prune._in(["a", 1]) == ("IN (SELECT value FROM json_each(?))", ('["a", 1]',))


def test_a_pending_session_takes_its_ids_costs_unit_and_entry():
    payload = {"session": {"id": "s"}, "messages": [{"id": 7}, {"id": 9}]}
    p = prune._Pending.of(payload, {7: 100, 8: 5}, {"s": "root", "t": "x"}, 42)
    assert (p.sid, p.ids, p.costs, p.unit, p.entry, p.batch, p.done) == (
        "s",
        [7, 9],
        [100, 64],
        "root",
        42,
        -1,
        0,
    )
    alone = prune._Pending.of(payload, {}, {}, None)
    assert (alone.unit, alone.costs, alone.entry) == ("s", [64, 64], None)


@pytest.mark.parametrize(
    "convs, sizes, cap, expected",
    [
        ([], {}, 10, []),
        ([["a"], ["b"]], {"a": 5, "b": 5}, 10, [["a", "b"]]),  # exactly the cap fits
        ([["a"], ["b"]], {"a": 5, "b": 6}, 10, [["a"], ["b"]]),
        ([["a"], ["b", "c"], ["d"]], {"a": 4, "b": 3, "c": 4}, 10, [["a"], ["b", "c", "d"]]),  # never split
        ([["big"], ["a"]], {"big": 99}, 10, [["big"], ["a"]]),  # one over the cap alone still goes
        ([["a"], ["b"]], {}, 0, [["a", "b"]]),  # no count: no messages
        (
            [["a"], ["b"], ["c"]],
            {"a": 6, "b": 5, "c": 5},
            10,
            [["a"], ["b", "c"]],
        ),  # a new batch counts from 0
    ],
)
def test_batches_cut_at_the_message_cap_and_never_split_a_conversation(convs, sizes, cap, expected):
    assert prune._batches(convs, sizes, cap) == expected


def test_batches_hold_fifty_sessions_and_five_thousand_messages_by_default():
    convs = [[f"s{i:03d}"] for i in range(101)]
    assert [len(b) for b in prune._batches(convs, {})] == [50, 50, 1]
    pair = [[f"s{i:03d}", f"t{i:03d}"] for i in range(26)]  # the 25th pair makes 50: the 26th waits
    assert [len(b) for b in prune._batches(pair, {})] == [50, 2]
    sizes = {"a": 2500, "b": 2500, "c": 1}
    assert prune._batches([["a"], ["b"], ["c"]], sizes) == [["a", "b"], ["c"]]


def test_activity_is_the_newest_numeric_stamp_of_row_and_messages():
    payload = {"messages": [{"timestamp": 5}, {"timestamp": "9"}, {"timestamp": 7.5}, {}]}
    assert prune._activity((3, None, "x"), payload) == 7.5
    assert prune._activity((8.25, 2), payload) == 8.25
    assert prune._activity((), {"messages": []}) == 0.0


# --- changed_since_plan and _routed -------------------------------------------------------------


def _items(place, sids):
    payloads, costs = _payloads(place, sids)
    return [prune._Pending.of(p, costs, {}, None) for p in payloads]


def test_changed_since_plan_names_each_change_and_the_strongest_wins(place):
    db = place.db_path
    for sid in ("same", "pin", "title", "late", "slack", "open", "all", "routed", "junk", "gone"):
        _add(db, sid, ["hi"])
    _sql(db, "UPDATE sessions SET pinned = 1 WHERE id IN ('pin', 'all')")
    _sql(db, "UPDATE sessions SET title = 'notes ' || id WHERE id IN ('title', 'all')")
    _sql(db, "UPDATE sessions SET title = '' WHERE id = 'same'")  # an empty title is none
    _sql(db, "UPDATE sessions SET last_activity_at = ? WHERE id IN ('late', 'all')", (OLD + 100.002,))
    _sql(db, "UPDATE sessions SET last_activity_at = ? WHERE id = 'slack'", (OLD + 100.0009,))
    _sql(db, "UPDATE sessions SET ended_at = NULL WHERE id IN ('open', 'all')")
    for key, entry in (("k1", json.dumps({"session_id": "routed"})), ("k2", "{not json"), ("k3", '"junk"')):
        _sql(
            db,
            "INSERT INTO gateway_routing (scope, session_key, entry_json, updated_at) VALUES ('', ?, ?, 0)",
            (key, entry),
        )
    items = _items(place, ["same", "pin", "title", "late", "slack", "open", "all", "routed", "junk"])
    items.insert(0, prune._Pending({"session": {"id": "gone"}, "messages": []}, [], []))  # not there: next
    _sql(db, "DELETE FROM sessions WHERE id = 'gone'")
    last = {p.sid: OLD + 100.0 for p in items}
    conn = sqlite3.connect(db)
    schema = inspect(db)
    try:
        found = prune.changed_since_plan(conn, schema, prune.Planned(last=last), items)
        untitled = prune.changed_since_plan(conn, schema, prune.Planned(last=last, keep_titled=False), items)
        unplanned = prune.changed_since_plan(conn, schema, prune.Planned(), items)
        assert prune._routed(conn, schema, ["routed", "junk", "same"]) == {"routed"}
    finally:
        conn.close()
    assert found == {
        "pin": prune.PINNED,
        "title": prune.TITLED,
        "late": prune.WOKE,
        "open": prune.REOPENED,
        "all": prune.REOPENED,
        "routed": prune.ROUTED,
    }
    assert untitled == {k: v for k, v in found.items() if k != "title"}
    assert unplanned == {
        "pin": prune.PINNED,
        "title": prune.TITLED,
        "open": prune.REOPENED,
        "all": prune.REOPENED,
        "routed": prune.ROUTED,
    }


def test_the_order_of_reasons_pinned_then_titled_then_activity_then_reopened(place):
    db = place.db_path
    for sid in ("pt", "ta", "ao"):
        _add(db, sid, ["hi"])
    _sql(db, "UPDATE sessions SET pinned = 1, title = 'p' WHERE id = 'pt'")
    _sql(db, "UPDATE sessions SET title = 't', last_activity_at = ? WHERE id = 'ta'", (NOW,))
    _sql(db, "UPDATE sessions SET last_activity_at = ?, ended_at = NULL WHERE id = 'ao'", (NOW,))
    items = _items(place, ["pt", "ta", "ao"])
    conn = sqlite3.connect(db)
    try:
        found = prune.changed_since_plan(
            conn, inspect(db), prune.Planned(last={"pt": NOW, "ta": OLD + 100, "ao": OLD + 100}), items
        )
    finally:
        conn.close()
    assert found == {"pt": prune.TITLED, "ta": prune.WOKE, "ao": prune.REOPENED}


def test_activity_the_archive_read_counts_as_newer_than_the_plan(place):
    """A message that came between the plan and the archive's read has no row stamp to show it:
    the archived messages' own stamps do."""
    _add(place.db_path, "s", ["a", "b"], started_at=OLD - 9, ended_at=OLD)  # messages: OLD + 1, OLD + 2
    items = _items(place, ["s"])
    conn = sqlite3.connect(place.db_path)
    try:
        at = prune.changed_since_plan(conn, inspect(place.db_path), prune.Planned(last={"s": OLD + 2}), items)
        before = prune.changed_since_plan(
            conn, inspect(place.db_path), prune.Planned(last={"s": OLD + 1.5}), items
        )
    finally:
        conn.close()
    assert (at, before) == ({}, {"s": prune.WOKE})


def test_no_routing_table_routes_nothing_and_no_pinned_column_pins_nothing(tmp_path):
    db = tmp_path / "state.db"
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE sessions (id TEXT PRIMARY KEY, started_at REAL, ended_at REAL, title TEXT)")
    conn.execute("INSERT INTO sessions VALUES ('s', 1, 2, NULL)")
    conn.commit()
    item = prune._Pending({"session": {"id": "s"}, "messages": []}, [], [])
    try:
        schema = inspect(db, check_timestamps=False)
        assert prune._routed(conn, schema, ["s"]) == set()
        assert prune.changed_since_plan(conn, schema, prune.Planned(last={"s": 2.0}), [item]) == {}
        conn.execute("UPDATE sessions SET ended_at = ?", (2.0 + prune.STAMP_SLACK_S,))  # within the slack
        assert prune.changed_since_plan(conn, schema, prune.Planned(last={"s": 2.0}), [item]) == {}
        conn.execute("CREATE TABLE gateway_routing (scope TEXT, session_key TEXT)")  # no entry_json yet
        conn.commit()
        assert prune._routed(conn, inspect(db, check_timestamps=False), ["s"]) == set()
        assert prune.changed_since_plan(conn, schema, prune.Planned(last={"s": 1.0}), [item]) == {
            "s": prune.WOKE
        }
    finally:
        conn.close()


# --- _finish_sessions, unmark, _reinsert_messages ------------------------------------------------


def test_finish_sessions_deletes_what_names_them_and_the_prompts_only_they_named(place, monkeypatch):
    db = place.db_path
    conn = sqlite3.connect(db)
    upstream_home.add_session(conn, "a", OLD, prompt="only a", tools=["t1"])
    upstream_home.add_session(conn, "b", OLD, prompt="shared", tools=["t2"])
    upstream_home.add_session(conn, "keep", OLD, prompt="shared")
    upstream_home.add_session(conn, "inline", OLD)
    conn.execute("UPDATE sessions SET tool_names = '[\"x\"]' WHERE id = 'inline'")
    conn.execute("UPDATE sessions SET parent_session_id = 'a' WHERE id = 'keep'")
    conn.execute("DELETE FROM messages")
    for sid in ("a", "b", "keep"):
        conn.execute("INSERT INTO session_model_usage (session_id, model) VALUES (?, 'm')", (sid,))
        for key in ("goal:", "loop:", "heartbeat:", "other:"):
            conn.execute("INSERT INTO state_meta (key, value) VALUES (?, 'v')", (key + sid,))
    locks = [("a", NOW), ("b", NOW + 1), ("keep", NOW - 1)]
    conn.executemany("INSERT INTO compression_locks VALUES (?, 'h', 0, ?)", locks)
    conn.commit()
    monkeypatch.setattr(prune, "time", SimpleNamespace(time=lambda: NOW))
    with conn:
        went = prune._finish_sessions(conn, inspect(db), ["a", "b", "inline"])
    conn.close()
    assert went == 3  # "only a", a's tools and b's tools; "shared" is still named by keep
    assert _sql(db, "SELECT id, parent_session_id FROM sessions") == [("keep", None)]
    assert _sql(db, "SELECT session_id FROM session_model_usage") == [("keep",)]
    assert sorted(_sql(db, "SELECT key FROM state_meta")) == [
        ("goal:keep",),
        ("heartbeat:keep",),
        ("loop:keep",),
        ("other:a",),
        ("other:b",),
        ("other:keep",),
    ]
    assert sorted(_sql(db, "SELECT session_id FROM compression_locks")) == [("b",), ("keep",)]  # b's is live
    assert _sql(db, "SELECT prompt FROM system_prompts") == [("shared",)]


def test_finish_sessions_on_a_schema_without_the_side_tables(tmp_path):
    db = tmp_path / "state.db"
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE sessions (id TEXT PRIMARY KEY, parent_session_id TEXT, started_at REAL)")
    conn.execute("CREATE TABLE system_prompts (hash TEXT PRIMARY KEY, prompt TEXT)")
    conn.executemany("INSERT INTO sessions VALUES (?, ?, 1)", [("a", None), ("b", "a")])
    conn.execute("INSERT INTO system_prompts VALUES (?, 'p')", ("0" * 64,))
    conn.commit()
    assert prune._finish_sessions(conn, inspect(db, check_timestamps=False), ["a"]) == 0
    assert conn.execute("SELECT id, parent_session_id FROM sessions").fetchall() == [("b", None)]
    assert conn.execute("SELECT count(*) FROM system_prompts").fetchone() == (1,)  # no column names it
    conn.close()
    db = tmp_path / "refs.db"  # the reference column without the table (a half-migrated home)
    conn = sqlite3.connect(db)
    conn.execute(
        "CREATE TABLE sessions (id TEXT PRIMARY KEY, parent_session_id TEXT, system_prompt_hash TEXT)"
    )
    conn.execute("INSERT INTO sessions VALUES ('a', NULL, ?)", ("0" * 64,))
    assert prune._finish_sessions(conn, inspect(db, check_timestamps=False), ["a"]) == 0
    assert conn.execute("SELECT count(*) FROM sessions").fetchone() == (0,)
    conn.close()


def test_finish_sessions_takes_only_a_hex_sha256_as_a_prompt_reference(place):
    db = place.db_path
    refs = ["A" * 64, "g" * 64, "a" * 63, "b" * 64]
    for i, ref in enumerate(refs):
        _add(db, f"s{i}", [], system_prompt_hash=ref)
        _sql(db, "INSERT INTO system_prompts (hash, prompt) VALUES (?, 'p')", (ref,))
    conn = sqlite3.connect(db)
    with conn:
        went = prune._finish_sessions(conn, inspect(db), [f"s{i}" for i in range(4)])
    conn.close()
    assert went == 1
    assert sorted(_sql(db, "SELECT hash FROM system_prompts")) == [("A" * 64,), ("a" * 63,), ("g" * 64,)]


def _writer(db: Path) -> Writer:
    return Writer(db, Budget(budget_ms=1e6, pause_ms=0))


def test_unmark_sets_the_archived_flag_back_and_leaves_a_schema_without_it_alone(place):
    _add(place.db_path, "s", ["x"], archived=1)
    _add(place.db_path, "t", ["x"], archived=1)
    with _writer(place.db_path) as w:
        prune.unmark(w, inspect(place.db_path), "s", 0)
        assert w.stats.transactions == 1
    assert _sql(place.db_path, "SELECT id, archived FROM sessions ORDER BY id") == [("s", 0), ("t", 1)]
    db = place.home / "old.db"
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE sessions (id TEXT PRIMARY KEY, started_at REAL)")
    conn.close()
    with _writer(db) as w:
        prune.unmark(w, inspect(db, check_timestamps=False), "s", 0)
        assert w.stats.transactions == 0


def test_reinsert_puts_back_exact_rows_in_growing_chunks_and_leaves_present_ones(place, monkeypatch):
    db = place.db_path
    _add(db, "s", [f"m{i}" for i in range(600)])
    _sql(db, "UPDATE messages SET content = CAST(X'66ff' AS TEXT), tool_calls = X'00ff' WHERE id = 1")
    before = _exact(db, "messages", "1")
    (payload,), _ = _payloads(place, ["s"])
    payload["messages"][0]["not_a_column"] = "ignored"
    _sql(db, "DELETE FROM messages WHERE id > 1")
    _sql(db, "UPDATE messages SET content = 'newer' WHERE id = 1")  # present: left as it is
    chunks = []
    with _writer(db) as w:
        step = w.step

        def counting(fn, batch=None, units=1, kind="write"):
            chunks.append((units, batch is not None))
            return step(fn, batch, units, kind)

        w.step = counting
        prune._reinsert_messages(w, inspect(db), payload)
    assert chunks == [(200, True), (400, True)]
    after = _exact(db, "messages", "1")
    assert after[1:] == before[1:]
    assert _sql(db, "SELECT typeof(content), content FROM messages WHERE id = 1") == [("text", "newer")]
    _sql(db, "DELETE FROM messages")
    with _writer(db) as w:  # one message: its columns are the first message's
        prune._reinsert_messages(w, inspect(db), {"messages": [payload["messages"][0]]})
    assert _sql(db, "SELECT id, typeof(content), hex(content), typeof(tool_calls) FROM messages") == [
        (1, "text", "66FF", "blob")
    ]


def test_reinsert_binds_raw_text_as_text(place):
    _add(place.db_path, "s", [])
    payload = {
        "messages": [
            {"id": 5, "session_id": "s", "role": "user", "content": {"$text_b64": "Zv8="}, "timestamp": 1.0}
        ]
    }
    with _writer(place.db_path) as w:
        prune._reinsert_messages(w, inspect(place.db_path), payload)
    assert _sql(place.db_path, "SELECT id, typeof(content), hex(content) FROM messages") == [
        (5, "text", "66FF")
    ]
    assert isinstance(prune.decode_value({"$text_b64": "Zv8="}), RawText)


# --- the deleter: what each transaction marks, deletes and finishes ----------------------------


def _run_ctx(place: Place, journal: bool = False, **policy):
    return open_run(
        place, Policy(pause_ms=0, **policy), journal=Journal(place.keeper_dir) if journal else None
    )


def test_the_first_step_spends_exactly_its_units_and_the_next_is_sized_at_nine_tenths(place, monkeypatch):
    """20,000 units: 20 messages of cost 1,000 fill the first step to the unit. A step that held the
    lock its whole budget (50 ms) sizes the next at 0.9 of what it did."""
    _add(place.db_path, "big", [K] * 40)
    steps = _steps(monkeypatch, hold_ms=50.0)
    result = prune.PruneResult()
    with _run_ctx(place) as ctx:
        prune._delete_all(ctx, None, _feed(place, [["big"]]), result, None)
    assert steps == [(["big"], 20, []), ([], 18, []), ([], 2, [["big"]])]
    assert (result.pruned, result.messages_deleted, result.prompts_deleted) == (["big"], 40, 0)
    assert _sql(place.db_path, "SELECT count(*) FROM sessions") == [(0,)]


def test_batches_are_taken_until_the_queue_fills_a_step(place, monkeypatch):
    """A batch's sessions are marked in the step that first takes from it; a session whose last
    message a step deletes costs a row more, and is finished in that step."""
    for sid in ("s0", "s1", "s2", "s3"):
        _add(place.db_path, sid, [K] * 10)
    steps = _steps(monkeypatch)
    result = prune.PruneResult()
    with _run_ctx(place) as ctx:
        prune._delete_all(ctx, None, _feed(place, [["s0"], ["s1"], ["s2", "s3"]]), result, None)
    assert steps == [(["s0", "s1"], 20, [["s0"], ["s1"]]), (["s2", "s3"], 20, [["s2"], ["s3"]])]
    assert result.pruned == ["s0", "s1", "s2", "s3"] and result.messages_deleted == 40


def test_a_batch_whose_sessions_were_all_gone_is_skipped_and_a_polled_feed_is_not_waited_on(
    place, monkeypatch
):
    _add(place.db_path, "a", ["x"])
    _add(place.db_path, "b", ["y"])
    first, second = _feed(place, [["a"], ["b"]])
    polls = []

    class Feed:
        """The archiver's side: ``poll`` says when the next batch is not ready yet."""

        def __init__(self):
            self.items = [[], first, second]

        def __iter__(self):
            return self

        def __next__(self):
            if not self.items:
                raise StopIteration
            return self.items.pop(0)

        def poll(self):
            polls.append(len(self.items))
            return prune._NOT_READY  # the archiver is never ahead here

    steps = _steps(monkeypatch)
    result = prune.PruneResult()
    with _run_ctx(place) as ctx:
        prune._delete_all(ctx, None, Feed(), result, None)
    # the empty batch is taken (nothing in it), then "a"; the poll for more finds nothing ready: a
    # step goes ahead with what it has. With the queue empty it waits for "b", and after b's step
    # for the next batch: the feed's end, found by waiting, not by a poll.
    assert steps == [(["a"], 1, [["a"]]), (["b"], 1, [["b"]])]
    assert polls == [1, 0]
    assert result.pruned == ["a", "b"]


def _scene(place: Place) -> dict[str, list[tuple]]:
    """Sessions for the put-back cases; their rows as they were."""
    db = place.db_path
    _add(db, "root", [K] * 3)
    _add(db, "child", [K] * 3, parent_session_id="root")
    _add(db, "leased", [K] * 2)
    _add(db, "titled", [K] * 2, archived=1)
    _add(db, "both", [K] * 2)
    _add(db, "clean", [K] * 4)
    return {
        sid: (_exact(db, "sessions", "id = ?", (sid,)), _exact(db, "messages", "session_id = ?", (sid,)))
        for sid in ("root", "child", "leased", "titled", "both")
    }


def test_a_batch_where_sessions_woke_puts_each_conversation_back_whole_and_records_it(place, monkeypatch):
    before = _scene(place)
    db = place.db_path
    sids = ["root", "child", "leased", "titled", "both", "clean"]
    units = {"root": "root", "child": "root"}
    with arch.Archive.for_home(place.keeper_dir) as store, _run_ctx(place, journal=True) as ctx:
        archived = prune.PruneResult()
        feed = _feed(place, [sids], units, store, archived)
        assert archived.archived == sids
        # after the archive's read, before the deletes: Hermes writes, leases, the user titles
        later = NOW + 5
        _sql(
            db,
            "INSERT INTO messages (session_id, role, content, timestamp) VALUES ('child', 'user', 'new', ?)",
            (later,),
        )
        _sql(db, "INSERT INTO compression_locks VALUES ('leased', 'h', 0, ?)", (NOW + 3600,))
        _sql(db, "INSERT INTO compression_locks VALUES ('both', 'h', 0, ?)", (NOW + 3600,))
        _sql(db, "UPDATE sessions SET title = 'kept' WHERE id = 'titled'")
        _sql(db, "UPDATE sessions SET title = 'too' WHERE id = 'both'")
        planned = prune.Planned(last=dict.fromkeys(sids, OLD + 100))
        result, seen, progress = prune.PruneResult(), [], []
        prune._delete_all(ctx, store, feed, result, lambda *a: progress.append(a), seen.append, planned)
        states = {sid: store.entry(sid).state for sid in sids}
    assert result.skipped == {
        "child": prune.WOKE,
        "root": f"conversation member child had {prune.WOKE}",
        "leased": prune.GUARDED,
        "titled": prune.TITLED,
        "both": prune.TITLED,  # a change since the plan says more than the lease
    }
    assert (result.pruned, result.messages_deleted, seen, progress) == (
        ["clean"],
        4,
        [["clean"]],
        [("prune", 6)],
    )
    assert states == {**dict.fromkeys(sids, arch.RESTORED), "clean": arch.PRUNED}
    for sid, (row, messages) in before.items():
        now = _exact(db, "messages", "session_id = ?", (sid,))
        assert now[: len(messages)] == messages, sid
        if sid not in ("titled", "both"):
            assert _exact(db, "sessions", "id = ?", (sid,)) == row, sid
    assert _sql(db, "SELECT id, archived FROM sessions WHERE id IN ('titled', 'both') ORDER BY id") == [
        ("both", 0),
        ("titled", 1),
    ]
    assert _sql(db, "SELECT count(*) FROM messages WHERE session_id = 'clean'") == [(0,)]
    assert [r for r in _records(place) if not r["action"].startswith("fts_")] == [
        {"action": "pruned", "sessions": ["clean"], "messages": 4},
        *({"action": "skipped", "session": sid, "reason": result.skipped[sid]} for sid in sids[:5]),
    ]


def test_a_message_the_archive_does_not_have_wakes_its_session_above_all(place, monkeypatch):
    _add(place.db_path, "s", [K])
    with _run_ctx(place) as ctx:
        feed = _feed(place, [["s"]])
        _sql(place.db_path, "UPDATE sessions SET title = 'x' WHERE id = 's'")
        _sql(
            place.db_path,
            "INSERT INTO messages (session_id, role, content, timestamp) VALUES ('s', 'user', 'n', 1)",
        )
        result = prune.PruneResult()
        prune._delete_all(ctx, None, feed, result, None, planned=prune.Planned(last={"s": NOW}))
    assert result.skipped == {"s": prune.WOKE} and (result.pruned, result.prompts_deleted) == ([], 0)
    assert _sql(
        place.db_path,
        "SELECT count(*), max(archived) FROM messages JOIN sessions ON sessions.id = session_id",
    ) == [(2, 0)]


def test_without_a_plan_only_what_no_prune_may_take_is_looked_at(place, monkeypatch):
    """Ids chosen by the caller (no :class:`Planned`): a title set since is no change; a reopened
    session is."""
    _add(place.db_path, "t", [K])
    _add(place.db_path, "o", [K])
    with _run_ctx(place) as ctx:
        feed = _feed(place, [["t", "o"]])
        _sql(place.db_path, "UPDATE sessions SET title = 'x', last_activity_at = ? WHERE id = 't'", (NOW,))
        _sql(place.db_path, "UPDATE sessions SET ended_at = NULL WHERE id = 'o'")
        result = prune.PruneResult()
        prune._delete_all(ctx, None, feed, result, None)
    assert (result.pruned, result.skipped) == (["t"], {"o": prune.REOPENED})


def test_a_schema_without_the_archived_column_marks_nothing(tmp_path, monkeypatch):
    """Hermes 0.13's sessions have no ``archived``: nothing to hide with, nothing marked."""
    db = tmp_path / "home" / "state.db"
    db.parent.mkdir()
    conn = sqlite3.connect(db)
    conn.execute(
        "CREATE TABLE sessions (id TEXT PRIMARY KEY, source TEXT, started_at REAL, ended_at REAL,"
        " end_reason TEXT, parent_session_id TEXT, title TEXT)"
    )
    conn.execute(
        "CREATE TABLE messages (id INTEGER PRIMARY KEY, session_id TEXT, role TEXT, content TEXT,"
        " timestamp REAL)"
    )
    conn.execute("CREATE TABLE schema_version (version INTEGER NOT NULL)")
    conn.execute("INSERT INTO schema_version VALUES (11)")
    conn.execute("INSERT INTO sessions VALUES ('s', 'cli', ?, ?, 'user_exit', NULL, NULL)", (OLD, OLD + 60))
    conn.execute("INSERT INTO messages VALUES (1, 's', 'user', 'x', ?)", (OLD + 1,))
    conn.commit()
    conn.close()
    place = Place("default", db.parent, db.parent)
    steps = _steps(monkeypatch)
    with _run_ctx(place) as ctx:
        result = prune.prune_sessions(ctx, [["s"]])
    assert steps == [([], 1, [["s"]])]
    assert result.pruned == ["s"]


def _writes(monkeypatch, w: Writer) -> list[tuple[str, int]]:
    """The put-back steps the writer takes from here on: ("reinsert", messages) or ("unmark", 1)."""
    seen: list[tuple[str, int]] = []
    step = w.step

    def counting(fn, batch=None, units=1, kind="write"):
        name = fn.__qualname__
        for label in ("unmark", "_reinsert_messages"):
            if label in name:
                seen.append((label.strip("_"), units))
        return step(fn, batch, units, kind)

    monkeypatch.setattr(w, "step", counting)
    return seen


def test_a_signal_mid_prune_shows_every_hidden_unfinished_session_again(place, monkeypatch):
    db = place.db_path
    _add(db, "x", [K] * 5)
    _add(db, "y", [K] * 30, archived=1)  # hidden by Hermes itself: it stays so
    _add(db, "w", [K] * 3)
    _add(db, "z", [K])
    before = {sid: _exact(db, "messages", "session_id = ?", (sid,)) for sid in ("y", "w", "z")}

    def signal_after_first(n, deleter):
        deleter.stop.signum = signal.SIGTERM

    steps = _steps(monkeypatch, after=signal_after_first)
    result = prune.PruneResult()
    marks = []
    with _run_ctx(place, journal=True) as ctx:
        writes = _writes(monkeypatch, ctx.writer)
        ctx.writer.after_step.append(
            lambda: marks.append(_sql(db, "SELECT id, archived FROM sessions ORDER BY id"))
        )
        with pytest.raises(Interrupted):
            prune._delete_all(ctx, None, _feed(place, [["x", "y", "w"], ["z"]]), result, None)
    assert steps == [(["x", "y", "w"], 20, [["x"]])]
    assert [("w", 1), ("y", 1), ("z", 0)] in marks  # committed: x gone, y and w hidden (y in part)
    assert writes == [
        ("reinsert_messages", 30),
        ("unmark", 1),
        ("unmark", 1),
    ]  # y's 30 messages back (the 15 left ignored), y and w unmarked
    assert result.pruned == ["x"]  # finished, in a batch that was not: recorded all the same
    for sid, rows in before.items():
        assert _exact(db, "messages", "session_id = ?", (sid,)) == rows, sid
    assert _sql(db, "SELECT id, archived FROM sessions ORDER BY id") == [("w", 0), ("y", 1), ("z", 0)]
    assert [r for r in _records(place) if not r["action"].startswith("fts_")] == [
        {"action": "pruned", "sessions": ["x"], "messages": 5},
        {"action": "shown_again", "sessions": ["y", "w"]},
    ]


def test_a_signal_before_anything_was_marked_writes_nothing(place, monkeypatch):
    _add(place.db_path, "a", [K], archived=1)
    _add(place.db_path, "b", [K])
    first, second = _feed(place, [["a"], ["b"]])

    def feed():
        yield first
        yield second
        raise Interrupted(signal.SIGINT)

    steps = _steps(monkeypatch)
    with _run_ctx(place, journal=True) as ctx:
        writes = _writes(monkeypatch, ctx.writer)
        with pytest.raises(Interrupted):
            prune._delete_all(ctx, None, feed(), prune.PruneResult(), None)
    assert (steps, writes) == ([], [])
    assert _sql(place.db_path, "SELECT id, archived FROM sessions ORDER BY id") == [("a", 1), ("b", 0)]
    assert [r for r in _records(place) if not r["action"].startswith("fts_")] == [
        {"action": "shown_again", "sessions": ["a", "b"]}
    ]


# --- prune_sessions: the archiver ahead of the deleter -------------------------------------------


def _three(place: Place) -> None:
    for sid in ("p", "q", "r"):
        _add(place.db_path, sid, [f"{sid}{i}" for i in range(300)])


COUNTS = dict.fromkeys(("p", "q", "r"), 300)


@pytest.mark.parametrize(
    "mode, batches, lowered", [("delete", [["p"], ["q"], ["r"]], 0), ("wal", [["p", "q", "r"]], 1)]
)
def test_prune_sessions_archives_in_batches_sized_to_the_journal_mode(
    tmp_path, empty31, monkeypatch, mode, batches, lowered
):
    """500 messages a batch in a rollback-journal database (its read holds Hermes's commits),
    5,000 in WAL, where only the archiver's thread runs at a lower priority."""
    place = _place(tmp_path, empty31, mode)
    _three(place)
    niced = []
    monkeypatch.setattr(prune, "background_thread", lambda: niced.append(1))
    mine = prune.PruneResult()
    with _run_ctx(place, journal=True) as ctx:
        result = prune.prune_sessions(ctx, [["p"], ["q"], ["r"]], message_counts=COUNTS, result=mine)
    assert result is mine and len(niced) == lowered
    assert (result.archived, result.pruned, result.messages_deleted) == (
        ["p", "q", "r"],
        ["p", "q", "r"],
        900,
    )
    archived = [r for r in _records(place) if r["action"] == "archived"]
    assert archived == [{"action": "archived", "sessions": b, "messages": 300 * len(b)} for b in batches]
    assert _sql(place.db_path, "SELECT count(*) FROM sessions") == [(0,)]
    with arch.Archive.for_home(place.keeper_dir) as store:
        assert [(e.session_id, e.state) for e in store.entries()] == [(s, arch.PRUNED) for s in "pqr"]


def test_prune_sessions_puts_a_conversation_back_whole_when_a_later_member_wakes(place, monkeypatch):
    _three(place)
    verified = prune._archive_verified

    def archive_then_wake(store, payloads, result, journal):
        entries = verified(store, payloads, result, journal)
        _sql(
            place.db_path,
            "INSERT INTO messages (session_id, role, content, timestamp) VALUES ('r', 'user', 'n', 1)",
        )
        return entries

    monkeypatch.setattr(prune, "_archive_verified", archive_then_wake)
    with _run_ctx(place) as ctx:
        result = prune.prune_sessions(ctx, [["p"], ["q", "r"]])
    assert result.pruned == ["p"]
    assert result.skipped == {"r": prune.WOKE, "q": f"conversation member r had {prune.WOKE}"}
    assert _sql(place.db_path, "SELECT session_id, count(*) FROM messages GROUP BY 1") == [
        ("q", 300),
        ("r", 301),
    ]


def test_prune_sessions_without_archiving_keeps_no_archive(place):
    _three(place)
    with _run_ctx(place, archive=False) as ctx:
        result = prune.prune_sessions(ctx, [["p"], ["q"]], message_counts=COUNTS)
    assert (result.archived, result.pruned) == ([], ["p", "q"])
    assert not arch.archive_exists(place.keeper_dir)
    assert _sql(place.db_path, "SELECT id FROM sessions") == [("r",)]


def test_prune_sessions_of_nothing_touches_nothing(place):
    with _run_ctx(place) as ctx:
        assert prune.prune_sessions(ctx, []) == prune.PruneResult()
    assert not place.keeper_dir.exists()


def test_an_archiver_error_is_raised_in_the_deleter_and_nothing_is_deleted(place, monkeypatch):
    _three(place)
    read = prune.read_payload

    def failing(conn, schema, sid):
        if sid == "q":
            raise RuntimeError("disk went away")
        return read(conn, schema, sid)

    monkeypatch.setattr(prune, "read_payload", failing)
    result = prune.PruneResult()
    with _run_ctx(place) as ctx, pytest.raises(RuntimeError, match="disk went away"):
        prune.prune_sessions(ctx, [["q"], ["p"]], message_counts=COUNTS, result=result)
    assert (result.archived, result.pruned) == ([], [])
    assert _sql(place.db_path, "SELECT session_id, count(*) FROM messages GROUP BY 1") == [
        ("p", 300),
        ("q", 300),
        ("r", 300),
    ]
    assert _sql(place.db_path, "SELECT count(*) FROM sessions WHERE archived = 0") == [(3,)]


def test_the_archiver_hands_over_in_order_and_stops_when_told(place):
    with _run_ctx(place) as ctx:
        a = prune._Archiver(ctx, [["s"]], {}, True, prune.PruneResult())
        assert a.out.maxsize == prune.ARCHIVE_AHEAD == 3 and a.daemon and a.name == "keeper-archiver"
        assert a.poll() is prune._NOT_READY
        a._put([1])
        a._put(ValueError("bad"))
        assert a.poll() == [1]
        with pytest.raises(ValueError, match="bad"):
            next(a)
        assert a.poll() is None
        with pytest.raises(StopIteration):
            next(a)
        b = prune._Archiver(ctx, [["s"]], {}, True, prune.PruneResult())
        b._put(None)
        assert list(b) == [] and b.poll() is None
        c = prune._Archiver(ctx, [["s"]], {}, True, prune.PruneResult())
        c.stop.set()
        c._put([2])  # told to stop: nothing more is handed over
        c.run()  # nor read
        assert c.out.empty()
        c.start()
        c.close()
        assert not c.is_alive()


def test_archive_verified_refuses_a_batch_one_entry_of_which_does_not_read_back(place, monkeypatch):
    _add(place.db_path, "a", ["x", "y"])
    _add(place.db_path, "b", ["z"])
    payloads, _ = _payloads(place, ["a", "b"])
    journal = Journal(place.keeper_dir)
    result = prune.PruneResult()
    with prune._state_store(place) as store:
        assert [f.conn.execute("PRAGMA synchronous").fetchone() for f in store.files] == [(1,)]  # NORMAL
        entries = prune._archive_verified(store, payloads, result, journal)
        assert [(store.by_entry(e).session_id, store.by_entry(e).reason) for e in entries] == [
            ("a", "retention"),
            ("b", "retention"),
        ]
        monkeypatch.setattr(store, "verify", lambda e: e != entries[1])
        with pytest.raises(arch.ArchiveDamaged, match="^archive read-back failed for 1 sessions$"):
            prune._archive_verified(store, payloads, result, journal)
    assert result.archived == ["a", "b"]
    assert _records(place) == [{"action": "archived", "sessions": ["a", "b"], "messages": 3}]


# --- _delete_all, resume_pending -------------------------------------------------------------------


def test_delete_all_holds_merges_records_the_prompts_deleted_and_syncs_the_journal(place, monkeypatch):
    conn = _connect(place.db_path)
    upstream_home.add_session(conn, "a", OLD, prompt="pa", tools=["ta"], texts=(K,) * 20)
    upstream_home.add_session(conn, "b", OLD, prompt="pb")
    conn.commit()
    conn.close()
    _add(place.db_path, "c", ["x"])
    holds = []
    _steps(monkeypatch, after=lambda n, deleter: holds.append(deleter.hold))
    with _run_ctx(place, journal=True) as ctx:
        syncs, durable = [], []
        monkeypatch.setattr(ctx.journal, "sync", lambda: syncs.append(1))
        write = ctx.journal.write

        def writing(action, durable_=True, **fields):
            durable.append((action, durable_))
            return write(action, durable=durable_, **fields)

        monkeypatch.setattr(
            ctx.journal, "write", lambda action, durable=True, **f: writing(action, durable, **f)
        )
        result = prune.PruneResult()
        prune._delete_all(ctx, None, _feed(place, [["a"], ["b"]]), result, None)
        assert result.prompts_deleted == 3 and syncs  # 2 in the first step, 1 in the next
        # a batch's record waits for the one sync at the end (the archive's rows say the same)
        assert [d for a, d in durable if a in ("pruned", "prompts_deleted")] == [False, False, False]
        assert ctx.hold is None and holds[0] is not None  # a hold of its own, for the while
        with ctx.holding() as hold:  # the run's own hold: no second one
            prune._delete_all(ctx, None, _feed(place, [["c"]]), prune.PruneResult(), None)
        assert holds[-1] is hold
    assert [r for r in _records(place) if r["action"] in ("pruned", "prompts_deleted")] == [
        {"action": "pruned", "sessions": ["a"], "messages": 20},
        {"action": "pruned", "sessions": ["b"], "messages": 1},
        {"action": "prompts_deleted", "prompts": 3},
        {"action": "pruned", "sessions": ["c"], "messages": 1},
    ]


def test_resume_without_an_archive_or_pending_entries_does_nothing(place):
    _add(place.db_path, "s", ["x"])
    with _run_ctx(place, journal=True) as ctx:
        assert prune.resume_pending(ctx) == 0
        assert not arch.archive_exists(place.keeper_dir)
        with arch.Archive.for_home(place.keeper_dir) as store:
            payloads, _ = _payloads(place, ["s"])
            store.set_state(store.put(payloads), arch.PRUNED)
        assert prune.resume_pending(ctx) == 0
    assert _records(place) == []
    assert _sql(place.db_path, "SELECT id FROM sessions") == [("s",)]


def test_resume_finishes_each_pending_entry_by_what_state_db_holds_now(place):
    db = place.db_path
    for sid in ("ok", "gone", "bad", "reused", "titled", "other"):
        _add(db, sid, [f"{sid} {i}" for i in range(3)])
    with arch.Archive.for_home(place.keeper_dir) as store:
        payloads, _ = _payloads(place, ["ok", "gone", "bad", "reused", "titled"])
        entries = dict(zip(["ok", "gone", "bad", "reused", "titled"], store.put(payloads), strict=True))
        for f in store.files:
            f.conn.execute(
                "UPDATE archived_sessions SET payload = zeroblob(length(payload)) WHERE entry = ?",
                (entries["bad"],),
            )
            f.conn.commit()
    # the crashed run had marked them, deleted part of "ok" and all of "gone"
    _sql(db, "UPDATE sessions SET archived = 1 WHERE id <> 'other'")
    _sql(db, "DELETE FROM messages WHERE session_id = 'ok' AND content = 'ok 0'")
    _sql(db, "DELETE FROM messages WHERE session_id = 'gone'")
    _sql(db, "DELETE FROM sessions WHERE id = 'gone'")
    _sql(
        db, "UPDATE messages SET content = 'other text' WHERE content = 'reused 1'"
    )  # an id with new content
    _sql(db, "UPDATE sessions SET title = 'mine' WHERE id = 'titled'")
    with _run_ctx(place, journal=True) as ctx:
        assert prune.resume_pending(ctx) == 1
    with arch.Archive.for_home(place.keeper_dir) as store:
        states = {e.session_id: e.state for e in store.entries()}
    assert states == {
        "ok": arch.PRUNED,
        "gone": arch.PRUNED,
        "bad": arch.RESTORED,
        "reused": arch.RESTORED,
        "titled": arch.RESTORED,
    }
    assert _sql(db, "SELECT id, archived FROM sessions ORDER BY id") == [
        ("bad", 0),
        ("other", 0),
        ("reused", 0),
        ("titled", 0),
    ]
    assert _sql(db, "SELECT session_id, content FROM messages WHERE session_id = 'reused' ORDER BY id") == [
        ("reused", "reused 0"),
        ("reused", "other text"),
        ("reused", "reused 2"),
    ]
    assert [r for r in _records(place) if r["action"] in ("skipped", "resumed", "pruned")] == [
        {"action": "pruned", "sessions": ["ok"], "messages": 2},
        {"action": "skipped", "session": "reused", "reason": prune.WOKE},
        {"action": "skipped", "session": "titled", "reason": prune.TITLED},
        {"action": "resumed", "sessions": 1, "skipped": 2},
    ]


def test_resume_where_titles_do_not_keep_prunes_a_titled_session(place):
    _add(place.db_path, "t", ["x"])
    with arch.Archive.for_home(place.keeper_dir) as store:
        store.put(_payloads(place, ["t"])[0])
    _sql(place.db_path, "UPDATE sessions SET title = 'mine', archived = 1")
    with _run_ctx(place, keep_titled=False) as ctx:
        assert prune.resume_pending(ctx) == 1
    assert _sql(place.db_path, "SELECT count(*) FROM sessions") == [(0,)]


def test_a_signal_after_the_last_step_has_nothing_to_show_again(place, monkeypatch):
    _add(place.db_path, "a", [K])
    _steps(monkeypatch, after=lambda n, deleter: setattr(deleter.stop, "signum", signal.SIGTERM))
    with _run_ctx(place, journal=True) as ctx, pytest.raises(Interrupted):
        prune._delete_all(ctx, None, _feed(place, [["a"]]), prune.PruneResult(), None)
    assert [r["action"] for r in _records(place) if not r["action"].startswith("fts_")] == ["pruned"]


def test_the_costs_the_archiver_and_resume_read_size_the_deletes(place, monkeypatch):
    """A message costs its bytes (here 1,000 units): 20 fill the first step, not the whole 25."""
    _add(place.db_path, "big", [K] * 25)
    _add(place.db_path, "pending", [K] * 25)
    with arch.Archive.for_home(place.keeper_dir) as store:
        store.put(_payloads(place, ["pending"])[0])
    _sql(place.db_path, "UPDATE sessions SET archived = 1 WHERE id = 'pending'")
    steps = _steps(monkeypatch)
    calls, progress = [], []
    with _run_ctx(place) as ctx:
        prune.resume_pending(ctx)
        prune.prune_sessions(ctx, [["big"]], progress=lambda *a: progress.append(a), on_pruned=calls.append)
    assert steps == [
        (["pending"], 20, []),
        ([], 5, [["pending"]]),
        (["big"], 20, []),
        ([], 5, [["big"]]),
    ]
    assert (calls, progress) == ([["big"]], [("prune", 1)])


def test_an_archiver_ahead_of_the_deletes_waits_and_loses_nothing(place):
    """Three verified batches ahead at most: the fourth waits for room (and for a stop)."""
    for i in range(5):
        _add(place.db_path, f"s{i}", ["x"])
    with _run_ctx(place) as ctx:
        for consume in (True, False):
            a = prune._Archiver(ctx, [[f"s{i}"] for i in range(5)], {}, False, prune.PruneResult())
            full = threading.Event()
            put = a.out.put

            def watching(item, block=True, timeout=None, full=full, put=put):
                try:
                    return put(item, block, timeout)
                except queue.Full:  # no room for a while: it must try again, not drop the batch
                    full.set()
                    raise

            a.out.put = watching
            a.start()
            assert full.wait(30), "the archiver never got three batches ahead"
            if consume:
                assert [[p.sid for p in batch] for batch in a] == [[f"s{i}"] for i in range(5)]
            a.close()  # returns: a waiting hand-over gives up when told to stop
            assert not a.is_alive()


def test_what_is_still_queued_decides_whether_another_batch_joins_the_next_step(place, monkeypatch):
    """A step that held the lock 46 ms for 21,000 units sizes the next at 20,543. Of "a" (27 messages of
    1,500 units) the first step deleted 14 (1,000 units over its 20,000): 19,564 are left, less than
    the next step's size, so "b" joins it; one unit more left and it would wait."""
    _add(place.db_path, "a", ["k" * 1436] * 27)
    _add(place.db_path, "b", ["x"])
    steps = _steps(monkeypatch, hold_ms=46.0)
    with _run_ctx(place) as ctx:
        prune._delete_all(ctx, None, _feed(place, [["a"], ["b"]]), prune.PruneResult(), None)
        assert ctx.writer.stats.max_ms["delete"] == pytest.approx(46.0)  # named as a delete
    assert steps == [(["a"], 14, []), (["b"], 14, [["a"], ["b"]])]


def test_a_step_with_one_unit_left_still_takes_a_message(place, monkeypatch):
    """Batch "a" queues 19,999 units (19 messages of 1,000, one of 935, and its row): one short of a
    step, so "b" is taken too; the step spends 19,999 on "a" and its last unit on a message of "b"."""
    _add(place.db_path, "a", [K] * 19 + ["k" * 871])
    _add(place.db_path, "b", [K] * 2)
    steps = _steps(monkeypatch)
    with _run_ctx(place) as ctx:
        prune._delete_all(ctx, None, _feed(place, [["a"], ["b"]]), prune.PruneResult(), None)
    assert steps[0] == (["a", "b"], 21, [["a"]])


def test_a_batch_that_fills_a_step_exactly_is_deleted_alone(place, monkeypatch):
    """Batch "a" queues exactly 20,000 units (19 of 1,000, one of 936, its row): a full step, so the
    next batch waits for the step after."""
    _add(place.db_path, "a", [K] * 19 + ["k" * 872])
    _add(place.db_path, "b", [K] * 2)
    steps = _steps(monkeypatch)
    with _run_ctx(place) as ctx:
        prune._delete_all(ctx, None, _feed(place, [["a"], ["b"]]), prune.PruneResult(), None)
    assert steps == [(["a"], 20, [["a"]]), (["b"], 2, [["b"]])]
