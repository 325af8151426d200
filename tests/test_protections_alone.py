"""Each protection alone keeps its session: an old, ended session that only that protection
names, beside a twin that nothing names (the twin pruned shows retention would take it). Remove
any one protection's reading and its case fails (docs/testing.md)."""

from __future__ import annotations

import json
import os
import sqlite3
import time
from pathlib import Path

import pytest

from hermes_keeper import demo
from hermes_keeper.home import Home
from tests.holders import dead_holder, live_holder
from tests.sessions import session

DAY = 86400.0
NOW = time.time()
OLD = NOW - 200 * DAY  # past every default retention


def _sql(*statements):
    """``{now}``: the time the case is set up, not the suite's start (a lease of ten minutes taken
    at collection had expired by the time a 14-minute suite reached it)."""

    def apply(home: Path) -> None:
        conn = sqlite3.connect(home / "state.db")
        for s in statements:
            conn.execute(s.replace("{now}", repr(time.time())))
        conn.commit()
        conn.close()

    return apply


def _kept_json(home: Path) -> None:
    (home / "keeper").mkdir(mode=0o700, exist_ok=True)
    (home / "keeper" / "kept.json").write_text(json.dumps({"p": NOW + 10 * DAY}))
    os.chmod(home / "keeper" / "kept.json", 0o600)


def _runtime_lease(home: Path) -> None:
    (home / "runtime").mkdir(exist_ok=True)
    entry = {"session_id": "p", "pid": os.getpid()}  # this test's process: alive
    (home / "runtime" / "active_sessions.json").write_text(json.dumps({"entries": [entry]}))


LIVE = live_holder("compress=1")
CASES = {
    "compression lock": (
        _sql(f"INSERT INTO compression_locks VALUES ('p', '{LIVE}', {{now}}, {{now}} + 600)"),
        "lease",
    ),
    "titled": (_sql("UPDATE sessions SET title = 'kept for its name' WHERE id = 'p'"), "titled"),
    "handoff in flight": (_sql("UPDATE sessions SET handoff_state = 'pending' WHERE id = 'p'"), "handoff"),
    "pending delegation": (
        _sql(
            "INSERT INTO async_delegations (delegation_id, origin_session, state, dispatched_at, updated_at)"
            " VALUES ('d1', 'p', 'running', {now}, {now})"
        ),
        "pending_delegation",
    ),
    "topic binding": (
        _sql(
            "CREATE TABLE IF NOT EXISTS telegram_dm_topic_bindings"
            " (chat_id TEXT, thread_id TEXT, session_id TEXT)",
            "INSERT INTO telegram_dm_topic_bindings VALUES ('1', '2', 'p')",
        ),
        "topic_binding",
    ),
    "restored and kept": (_kept_json, "restored"),
    "open chat surface": (_runtime_lease, "chat_surface"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_protection_alone_keeps_its_session(tmp_path, case):
    setup, code = CASES[case]
    home = tmp_path / "home"
    demo.build_home(home, demo.DemoSpec(now=NOW, sessions=[session("p", OLD), session("twin", OLD)]))
    setup(home)
    plan = Home(home).profile().plan()
    got = {sid: (d.action, d.reason.code) for sid, d in plan.decisions.items()}
    assert got == {"p": ("keep", code), "twin": ("prune", "retention")}
    Home(home).profile().run()
    conn = sqlite3.connect(home / "state.db")
    assert {r[0] for r in conn.execute("SELECT id FROM sessions")} == {"p"}
    conn.close()


def test_a_compression_lock_whose_holder_is_provably_dead_keeps_nothing(tmp_path):
    """The other side of the lock's case: Hermes's own rule reclaims a dead holder's lock."""
    home = tmp_path / "home"
    demo.build_home(home, demo.DemoSpec(now=NOW, sessions=[session("p", OLD)]))
    dead = dead_holder("compress=1")
    _sql(f"INSERT INTO compression_locks VALUES ('p', '{dead}', {{now}}, {{now}} + 600)")(home)
    assert Home(home).profile().plan().decisions["p"].action == "prune"
