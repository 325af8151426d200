"""The prune pipeline: sessions that wake up mid-prune, exact bytes, plan order, transaction bounds."""

from __future__ import annotations

import json
import os
import sqlite3
import time

import pytest
from click.testing import CliRunner

from hermes_keeper import demo
from hermes_keeper.archive.store import PRUNED, RESTORED, Archive
from hermes_keeper.cli import main
from hermes_keeper.home import select_profiles
from hermes_keeper.model.policy import Policy
from hermes_keeper.run import prune
from hermes_keeper.run.context import open_run
from hermes_keeper.run.plan import make_plan
from hermes_keeper.run.survey import safe_filename_component, survey_profile
from tests.test_plan import NOW as PLAN_NOW
from tests.test_plan import row, survey_of

NOW = time.time()
DAY = 86400.0
WOKE = "new activity during prune"
FTS = ("messages_fts", "messages_fts_trigram")


# --- helpers ------------------------------------------------------------------------------------


def prune_ids(profile, ids, **kwargs):
    """The keeper's prune of ``ids`` alone, in a run context of its own (no rest between steps)."""
    with open_run(profile, Policy(pause_ms=0)) as ctx:
        return prune.prune_sessions(ctx, ids, **kwargs)


def _home(tmp_path, sessions: int = 60):
    home = tmp_path / "home"
    demo.build_home(home, demo.generate(NOW, sessions=sessions))
    return home


def _plan(home):
    profile = select_profiles(str(home))[0]
    return profile, make_plan(survey_profile(profile), Policy(), time.time())


def _exact(db, table: str, where: str, params=()) -> list[tuple]:
    """Rows with every column as (storage class, bytes): equal means byte-identical."""
    conn = sqlite3.connect(db)
    try:
        cols = [r[1] for r in conn.execute(f"PRAGMA table_info({table})")]
        sel = ", ".join(f"typeof({c}), hex({c})" for c in cols)
        order = "id" if "id" in cols else "rowid"
        return conn.execute(f"SELECT {sel} FROM {table} WHERE {where} ORDER BY {order}", params).fetchall()
    finally:
        conn.close()


def _message_ids(db) -> dict[str, set[int]]:
    conn = sqlite3.connect(db)
    try:
        out: dict[str, set[int]] = {}
        for sid, mid in conn.execute("SELECT session_id, id FROM messages"):
            out.setdefault(sid, set()).add(mid)
        return out
    finally:
        conn.close()


def _session_ids(db) -> set[str]:
    conn = sqlite3.connect(db)
    try:
        return {r[0] for r in conn.execute("SELECT id FROM sessions")}
    finally:
        conn.close()


def _fts_ok(db) -> None:
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        for t in FTS:
            conn.execute(f"INSERT INTO {t}({t}) VALUES('integrity-check')")  # raises if the index is bad
    finally:
        conn.close()


def _standalone(db, plan, among: list[str]) -> str:
    """A planned session that is a conversation of its own (no parent, no children), with messages."""
    conn = sqlite3.connect(db)
    try:
        for sid in among:
            alone = sum(1 for d in plan.decisions.values() if d.unit == plan.decisions[sid].unit) == 1
            parent, n = conn.execute(
                "SELECT parent_session_id, (SELECT count(*) FROM messages WHERE session_id = ?)"
                " FROM sessions WHERE id = ?",
                (sid, sid),
            ).fetchone()
            child = conn.execute("SELECT 1 FROM sessions WHERE parent_session_id = ?", (sid,)).fetchone()
            if alone and parent is None and child is None and n >= 2:
                return sid
    finally:
        conn.close()
    raise AssertionError("no standalone session in the plan")


def _wake(monkeypatch, db, target: str) -> list[tuple[int, str]]:
    """After the batch holding ``target`` is archived and verified (before any of it is deleted),
    a gateway appends a message to ``target`` with the next id. Returns [(id, content)]."""
    original = prune._archive_verified
    woken: list[tuple[int, str]] = []

    def archive_then_wake(store, payloads, result, journal):
        entries = original(store, payloads, result, journal)
        if target in {p["session"]["id"] for p in payloads}:
            conn = sqlite3.connect(db, timeout=10, isolation_level=None)
            try:
                conn.execute("BEGIN IMMEDIATE")
                nid = conn.execute("SELECT max(id) + 1 FROM messages").fetchone()[0]
                text = f"back again {nid}"
                conn.execute(
                    "INSERT INTO messages (id, session_id, role, content, timestamp)"
                    " VALUES (?, ?, 'user', ?, ?)",
                    (nid, target, text, time.time()),
                )
                conn.execute("COMMIT")
            finally:
                conn.close()
            woken.append((nid, text))
        return entries

    monkeypatch.setattr(prune, "_archive_verified", archive_then_wake)
    return woken


# --- a session that wakes up mid-prune ----------------------------------------------------------


def test_session_woken_during_prune_is_put_back_exactly(tmp_path, monkeypatch):
    home = _home(tmp_path)
    db = home / "state.db"
    profile, plan = _plan(home)
    counts = {sid: plan.decisions[sid].messages for sid in plan.prune}
    first_batch = prune._batches(plan.prune_conversations(), counts)[0]
    assert len(plan.prune) > 20 and len(first_batch) > 3
    target = _standalone(db, plan, first_batch[1:])
    with sqlite3.connect(db) as conn:  # archived in Hermes's own sense (hidden): it comes back so
        conn.execute("UPDATE sessions SET archived = 1 WHERE id = ?", (target,))
    row_before = _exact(db, "sessions", "id = ?", (target,))
    messages_before = _exact(db, "messages", "session_id = ?", (target,))
    ids_before = _message_ids(db)[target]
    others = [s for s in plan.prune if s != target]
    woken = _wake(monkeypatch, db, target)

    result = prune_ids(profile, plan.prune_conversations(), message_counts=counts)

    assert len(woken) == 1
    assert result.skipped == {target: WOKE}
    assert target not in result.pruned and sorted(result.pruned) == sorted(others)
    # Back exactly: the row (archived column included) and every original message, plus the new one.
    assert _exact(db, "sessions", "id = ?", (target,)) == row_before
    new_id, new_text = woken[0]
    assert _exact(db, "messages", "session_id = ? AND id != ?", (target, new_id)) == messages_before
    assert _message_ids(db)[target] == ids_before | {new_id}
    conn = sqlite3.connect(db)
    assert conn.execute("SELECT content FROM messages WHERE id = ?", (new_id,)).fetchone()[0] == new_text
    # The put-back messages are searchable again.
    hits = {r[0] for r in conn.execute("SELECT rowid FROM messages_fts WHERE messages_fts MATCH 'back'")}
    assert new_id in hits
    conn.close()
    _fts_ok(db)

    left = _session_ids(db)
    msgs = _message_ids(db)
    with Archive.for_home(profile.keeper_dir) as store:
        assert store.entry(target).state == RESTORED
        for sid in others:
            assert sid not in left and sid not in msgs
            assert store.verify(store.entry(sid).entry) and store.entry(sid).state == PRUNED


def test_run_keeps_the_files_of_a_woken_session(tmp_path, monkeypatch):
    home = _home(tmp_path)
    db = home / "state.db"
    _, plan = _plan(home)
    target = _standalone(db, plan, plan.prune[len(plan.prune) // 2 :])
    gone = [s for s in plan.prune if s != target][:3]

    def files_of(sid: str) -> list:
        safe = safe_filename_component(sid)
        names = [f"{sid}.jsonl", f"{sid}.json", f"session_{safe}.json"]
        names.append(f"request_dump_{safe}_20260101_000000_000001.json")
        return [home / "sessions" / n for n in names]

    for sid in [target, *gone]:
        for path in files_of(sid):
            path.write_text("{}")
    old = time.time() - 30 * DAY  # old enough that nothing but "session pruned" keeps them
    for path in files_of(target):
        os.utime(path, (old, old))
    woken = _wake(monkeypatch, db, target)

    res = CliRunner().invoke(main, ["run", "--home", str(home), "--json"])

    assert res.exit_code == 0, res.output
    out = json.loads(res.output)["profiles"][0]
    assert len(woken) == 1
    assert out["skipped"] == {target: WOKE}
    assert out["pruned"] == len(plan.prune) - 1
    assert all(p.exists() for p in files_of(target)), "files of a session that was put back were removed"
    assert not any(p.exists() for sid in gone for p in files_of(sid))
    assert out["files_removed"] >= 4 * len(gone)
    assert target in _session_ids(db)
    journal = [json.loads(x) for x in (home / "keeper" / "journal.jsonl").read_text().splitlines()]
    removed = {r["path"] for r in journal if r["action"] == "file_removed"}
    assert not any(target in p for p in removed)
    assert {"session": target, "reason": WOKE}.items() <= next(
        r for r in journal if r["action"] == "skipped"
    ).items()


def test_woken_chain_tail_keeps_its_compression_chain(tmp_path, monkeypatch):
    """A compression chain lives and dies whole (docs/how-it-works.md): the live tail keeps
    its head and its link.

    (The bug this caught: the tail was put back, but its head was still deleted afterwards and
    orphaned the tail, so the live conversation lost its start and its link.)
    """
    home = _home(tmp_path, sessions=30)
    db = home / "state.db"
    t0 = NOW - 30 * DAY
    conn = sqlite3.connect(db)
    conn.execute(
        "INSERT INTO sessions (id, source, started_at, ended_at, end_reason)"
        " VALUES ('chain_head', 'cron', ?, ?, 'compression')",
        (t0, t0 + 100),
    )
    conn.execute(
        "INSERT INTO sessions (id, source, started_at, ended_at, end_reason, parent_session_id)"
        " VALUES ('chain_tail', 'cron', ?, ?, 'cron_complete', 'chain_head')",
        (t0 + 100, t0 + 200),
    )
    for sid, t in (("chain_head", t0 + 10), ("chain_tail", t0 + 110)):
        conn.executemany(
            "INSERT INTO messages (session_id, role, content, timestamp) VALUES (?, 'user', ?, ?)",
            [(sid, f"chain words {i}", t + i) for i in range(3)],
        )
    conn.commit()
    conn.close()
    profile, plan = _plan(home)
    assert {"chain_head", "chain_tail"} <= set(plan.prune)
    assert plan.decisions["chain_head"].unit == plan.decisions["chain_tail"].unit
    tail_before = _exact(db, "sessions", "id = 'chain_tail'")
    head_messages = _message_ids(db)["chain_head"]
    _wake(monkeypatch, db, "chain_tail")

    result = prune_ids(profile, plan.prune_conversations())

    assert result.skipped == {"chain_tail": WOKE, "chain_head": f"conversation member chain_tail had {WOKE}"}
    assert "chain_head" in _session_ids(db), "the head of a live compression chain was pruned"
    assert _message_ids(db).get("chain_head") == head_messages
    assert _exact(db, "sessions", "id = 'chain_tail'") == tail_before  # parent link included


# --- bytes that are not UTF-8 text --------------------------------------------------------------


def test_invalid_utf8_text_and_blobs_survive_archive_and_restore(tmp_path):
    home = _home(tmp_path, sessions=20)
    db = home / "state.db"
    t0 = NOW - 30 * DAY
    conn = sqlite3.connect(db)
    conn.execute(
        "INSERT INTO sessions (id, source, started_at, ended_at, end_reason, system_prompt)"
        " VALUES ('odd_bytes', 'cron', ?, ?, 'cron_complete', CAST(X'73797374656dff' AS TEXT))",
        (t0, t0 + 100),
    )
    values = [
        "CAST(X'66ff6f' AS TEXT)",  # TEXT that is not UTF-8
        "X'00ff10'",  # a BLOB
        "X''",  # an empty BLOB
        "'plain text ünïcødé'",
        "CAST(X'c328' AS TEXT)",  # a truncated two-byte sequence
    ]
    for i, v in enumerate(values):
        conn.execute(
            f"INSERT INTO messages (session_id, role, content, tool_calls, timestamp)"
            f" VALUES ('odd_bytes', 'user', {v}, {v if i == 1 else 'NULL'}, ?)",
            (t0 + i + 1,),
        )
    conn.commit()
    conn.close()
    session_before = _exact(db, "sessions", "id = 'odd_bytes'")
    messages_before = _exact(db, "messages", "session_id = 'odd_bytes'")
    conn = sqlite3.connect(db)
    content_sql = (
        "SELECT typeof(content), hex(content) FROM messages WHERE session_id = 'odd_bytes' ORDER BY id"
    )
    content_before = conn.execute(content_sql).fetchall()
    conn.close()
    assert content_before[:3] == [("text", "66FF6F"), ("blob", "00FF10"), ("blob", "")]

    profile = select_profiles(str(home))[0]
    result = prune_ids(profile, [["odd_bytes"]])
    assert result.pruned == ["odd_bytes"]
    assert "odd_bytes" not in _session_ids(db) and "odd_bytes" not in _message_ids(db)
    with Archive.for_home(profile.keeper_dir) as store:
        assert store.verify(store.entry("odd_bytes").entry)

    res = CliRunner().invoke(main, ["archive", "restore", "odd_bytes", "--home", str(home)])
    assert res.exit_code == 0, res.output

    assert _exact(db, "sessions", "id = 'odd_bytes'") == session_before
    assert _exact(db, "messages", "session_id = 'odd_bytes'") == messages_before
    conn = sqlite3.connect(db)
    assert conn.execute(content_sql).fetchall() == content_before
    conn.close()
    _fts_ok(db)


def test_invalid_utf8_in_a_column_the_plan_reads_is_not_a_traceback(tmp_path):
    """A session row that is not UTF-8 does not crash the survey (it did: ``Could not decode to
    UTF-8 column 'model_config'``). Such a config or title is pruned like any other row; a session
    whose *id* is not UTF-8 is never touched (the keeper could not address it exactly)."""
    home = _home(tmp_path, sessions=10)
    db = home / "state.db"
    t0 = NOW - 30 * DAY
    conn = sqlite3.connect(db)
    conn.execute(
        "INSERT INTO sessions (id, source, started_at, ended_at, end_reason, model_config)"
        " VALUES ('odd_config', 'cron', ?, ?, 'cron_complete', CAST(X'7b7dff' AS TEXT))",
        (t0, t0 + 100),
    )
    conn.execute(
        "INSERT INTO sessions (id, source, started_at, ended_at, end_reason, title)"
        " VALUES (CAST(X'6f6464ff' AS TEXT), 'cron', ?, ?, 'cron_complete', CAST(X'74ff' AS TEXT))",
        (t0, t0 + 100),
    )
    conn.commit()
    conn.close()
    for args in (["report", "--json"], ["plan", "-v"], ["run", "--json"]):
        res = CliRunner().invoke(main, [*args, "--home", str(home)])
        assert res.exit_code == 0 and res.exception is None, (args, repr(res.exception))
    conn = sqlite3.connect(db)
    ids = {r[0] for r in conn.execute("SELECT hex(id) FROM sessions")}
    conn.close()
    assert "6F6464FF" in ids  # the odd id: kept, byte for byte
    assert b"odd_config".hex().upper() not in ids  # an odd config: pruned like its peers


# --- the order of the plan ----------------------------------------------------------------------

ORDER = [
    # (description, rows, policy kwargs, db_bytes, expected plan.prune)
    (
        "units by their oldest message id, not by age or name",
        [
            row("a", "cron", 30, first_message_id=300),
            row("b", "cron", 10, first_message_id=100),
            row("c", "cron", 20, first_message_id=200),
        ],
        {},
        None,
        ["b", "c", "a"],
    ),
    (
        "a chain sorts by its oldest member, children before parents",
        [
            row("p", "cli", 200, end_reason="compression", first_message_id=50),
            row("c", "cli", 199, parent_id="p", first_message_id=500),
            row("x", "cli", 150, first_message_id=100),
        ],
        {},
        None,
        ["c", "p", "x"],
    ),
    (
        "a unit whose child wrote first sorts by the child's rows",
        [
            row("p", "cli", 200, first_message_id=400),
            row("d", "subagent", 200, parent_id="p", delegate_from="p", first_message_id=10),
            row("x", "cli", 150, first_message_id=100),
        ],
        {},
        None,
        ["d", "p", "x"],
    ),
    (
        "a unit without messages comes first",
        [
            row("m", "cron", 30, first_message_id=7),
            row("e", "cron", 40, messages=0, first_message_id=None),
        ],
        {},
        None,
        ["e", "m"],
    ),
    (
        "disk-budget units are ordered with the retention ones",
        [
            row("old", "cli", 100, content_bytes=1000, first_message_id=50),
            row("budget", "cli", 10, content_bytes=1000, first_message_id=5),
            row("kept", "cli", 5, content_bytes=1000, first_message_id=1, title="t"),
        ],
        {"max_db_bytes": 15_000, "low_water": 0.5},
        30_000,
        ["budget", "old"],
    ),
]


@pytest.mark.parametrize("desc, rows, policy, db_bytes, expected", ORDER, ids=[o[0] for o in ORDER])
def test_plan_orders_units_by_their_oldest_message(desc, rows, policy, db_bytes, expected):
    plan = make_plan(survey_of(*rows), Policy(**policy), PLAN_NOW, db_bytes=db_bytes)
    assert plan.prune == expected


# --- deletes stay inside transactions -----------------------------------------------------------


def test_deletes_are_budgeted_transactions_and_sessions_end_whole_or_gone(tmp_path, monkeypatch):
    home = _home(tmp_path, sessions=80)
    db = home / "state.db"
    profile, plan = _plan(home)
    counts = {sid: plan.decisions[sid].messages for sid in plan.prune}
    original = _message_ids(db)
    planned = set(plan.prune)
    target = _standalone(db, plan, plan.prune[::-1])
    _wake(monkeypatch, db, target)
    assert sum(counts.values()) > 300

    reader = sqlite3.connect(db)
    seen_partial = set()

    def check_committed_state() -> None:
        """After every committed step: no orphan messages; a session missing some of its
        messages is marked archived (hidden from Hermes) until it is gone."""
        assert (
            reader.execute(
                "SELECT count(*) FROM messages WHERE session_id NOT IN (SELECT id FROM sessions)"
            ).fetchone()[0]
            == 0
        )
        now = dict(reader.execute("SELECT session_id, count(*) FROM messages GROUP BY session_id"))
        marks = dict(reader.execute("SELECT id, archived FROM sessions"))
        for sid in planned:
            n = now.get(sid, 0)
            if 0 < n < len(original[sid]):
                seen_partial.add(sid)
                assert marks[sid] == 1, f"{sid} half deleted but not marked archived"

    try:
        with open_run(profile, Policy(budget_ms=2, pause_ms=0)) as ctx:
            w = ctx.writer
            w.after_step.append(check_committed_state)
            result = prune.prune_sessions(ctx, plan.prune_conversations(), message_counts=counts)
    finally:
        reader.close()

    assert w.stats.transactions > 5
    assert seen_partial, "no transaction ended inside a session: the check above proved nothing"
    assert result.skipped == {target: WOKE}
    after = _message_ids(db)
    sessions = _session_ids(db)
    for sid in planned:
        whole = sid in sessions and original[sid] <= after.get(sid, set())
        gone = sid not in sessions and sid not in after
        assert whole or gone, f"{sid} left in part: {len(after.get(sid, ()))}/{len(original[sid])}"
        assert whole == (sid == target)
    assert result.messages_deleted == sum(len(original[s]) for s in planned if s != target)


def test_a_session_with_no_numeric_stamp_counts_as_idle_since_the_epoch():
    """An old schema (no ``last_activity_at``), reopened (``ended_at`` NULL), its messages stamped in
    text: nothing to compare with the plan's time, so nothing newer than it; the deleter's re-check
    goes on by its other reasons (reopened, here) instead of failing on ``max()`` of nothing."""
    payload = {"messages": [{"timestamp": "2026-01-01T00:00:00"}, {"timestamp": None}, {}]}
    assert prune._activity((None,), payload) == 0.0
    assert prune._activity((None, 5.0), {"messages": [{"timestamp": 7}]}) == 7
