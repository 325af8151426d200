"""The race between plan and delete (issue 34): a session the plan chose to prune that Hermes
reopens, writes to, or the user titles, pins or routes before its batch is deleted is kept, put back
visible, and reported; the deleter looks again inside the transaction that deletes it."""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path

import pytest

from hermes_keeper import demo
from hermes_keeper import home as home_mod
from hermes_keeper.archive.store import PRUNED, RESTORED, Archive
from hermes_keeper.home import Home

DAY = 86400.0
NOW = time.time()
OLD = NOW - 200 * DAY


def _session(sid: str, start: float) -> dict:
    msgs = [("user", f"question {sid}", start + 10), ("assistant", f"answer {sid}", start + 20)]
    return {
        "id": sid,
        "source": "cli",
        "started_at": start,
        "ended_at": start + 1800,
        "end_reason": "user_exit",
        "kwargs": {},
        "messages": msgs,
    }


def _home(path: Path) -> Path:
    sessions = [_session("victim", OLD)] + [_session(f"other{i}", OLD + i) for i in range(5)]
    demo.build_home(path, demo.DemoSpec(now=NOW, sessions=sessions, routed={}))
    conn = sqlite3.connect(path / "state.db")  # the columns of today's Hermes the demo schema lacks
    for col in ("pinned INTEGER NOT NULL DEFAULT 0", "last_activity_at REAL"):
        name = col.split()[0]
        if name not in {r[1] for r in conn.execute("PRAGMA table_info(sessions)")}:
            conn.execute(f"ALTER TABLE sessions ADD COLUMN {col}")
    conn.commit()
    conn.close()
    return path


def _sql(db: Path, *statements: tuple[str, tuple]) -> None:
    conn = sqlite3.connect(db)
    for sql, args in statements:
        conn.execute(sql, args)
    conn.commit()
    conn.close()


def _message(sid: str) -> tuple[str, tuple]:
    return (
        "INSERT INTO messages (session_id, role, content, timestamp) VALUES (?, 'user', 'back again', ?)",
        (sid, time.time()),
    )


#: What Hermes or the user does to the planned session between the plan and its delete.
CHANGES = {
    "reopened": (
        [("UPDATE sessions SET ended_at = NULL, end_reason = NULL WHERE id = 'victim'", ())],
        "reopened",
    ),
    "resumed": (
        [
            ("UPDATE sessions SET ended_at = NULL, end_reason = NULL WHERE id = 'victim'", ()),
            _message("victim"),
        ],
        "reopened",
    ),
    "resumed_and_ended": (
        [_message("victim"), ("UPDATE sessions SET ended_at = ? WHERE id = 'victim'", (time.time(),))],
        "activity",
    ),
    "active": (
        [("UPDATE sessions SET last_activity_at = ? WHERE id = 'victim'", (time.time(),))],
        "activity",
    ),
    "titled": ([("UPDATE sessions SET title = 'my notes' WHERE id = 'victim'", ())], "titled"),
    "pinned": ([("UPDATE sessions SET pinned = 1 WHERE id = 'victim'", ())], "pinned"),
    "routed": (
        [
            (
                "INSERT INTO gateway_routing (scope, session_key, entry_json, updated_at)"
                " VALUES ('', ?, ?, ?)",
                ("agent:main:telegram:dm:9", json.dumps({"session_id": "victim"}), time.time()),
            )
        ],
        "routed",
    ),
}
WHY = {
    "reopened": "reopened during prune",
    "activity": "new activity during prune",
    "titled": "titled during prune",
    "pinned": "pinned during prune",
    "routed": "routed by the gateway during prune",
}


def _change_after_plan(monkeypatch, db: Path, statements: list) -> None:
    plan = home_mod.make_plan

    def plan_then_change(*args, **kwargs):
        made = plan(*args, **kwargs)
        assert "victim" in made.prune
        _sql(db, *statements)
        return made

    monkeypatch.setattr(home_mod, "make_plan", plan_then_change)


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_a_planned_session_changed_after_the_plan_is_kept_visible_and_reported(tmp_path, monkeypatch, change):
    home = _home(tmp_path / "home")
    db = home / "state.db"
    statements, why = CHANGES[change]
    conn = sqlite3.connect(db)
    before = conn.execute(
        "SELECT id, content FROM messages WHERE session_id = 'victim' ORDER BY id"
    ).fetchall()
    conn.close()
    _change_after_plan(monkeypatch, db, statements)

    result = Home(home).profile().run()

    assert result.prune.skipped == {"victim": WHY[why]}
    assert "victim" not in result.prune.pruned and len(result.prune.pruned) == 5
    conn = sqlite3.connect(db)
    assert conn.execute("SELECT archived FROM sessions WHERE id = 'victim'").fetchone() == (0,)
    after = conn.execute(
        "SELECT id, content FROM messages WHERE session_id = 'victim' ORDER BY id"
    ).fetchall()
    assert after[: len(before)] == before  # every planned message back (and a new one kept)
    assert conn.execute("SELECT count(*) FROM sessions").fetchone() == (1,)
    conn.close()
    with Archive.for_home(home / "keeper") as store:
        assert store.entry("victim").state == RESTORED  # the entry stays, as history
        assert store.entry("other0").state == PRUNED
    lines = [json.loads(x) for x in (home / "keeper" / "journal.jsonl").read_text().splitlines()]
    skipped = [x for x in lines if x.get("action") == "skipped"]
    assert [(x["session"], x["reason"]) for x in skipped] == [("victim", WHY[why])]


def test_a_title_is_no_change_where_titles_do_not_keep(tmp_path, monkeypatch):
    """``keep_titled = false``: a title set after the plan is no reason to keep."""
    home = _home(tmp_path / "home")
    (home / "keeper.toml").write_text("keep_titled = false\n")
    _change_after_plan(monkeypatch, home / "state.db", CHANGES["titled"][0])
    result = Home(home).profile().run()
    assert result.prune.skipped == {} and "victim" in result.prune.pruned
