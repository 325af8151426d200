"""A maintenance run on homes made by real Hermes, checked afterwards by real Hermes."""

from __future__ import annotations

import json
import os
import time

from click.testing import CliRunner

from hermes_keeper.archive.store import PRUNED, Archive
from hermes_keeper.cli import main
from hermes_keeper.lock import keeper_lock

DAY = 86400.0
NOW = time.time()


def _s(sid, source, age_days, words, n=4, ended=True, **extra):
    start = NOW - age_days * DAY
    msgs = [
        ["user" if i % 2 == 0 else "assistant", f"{words} message {i}", start + 10 * (i + 1)]
        for i in range(n)
    ]
    spec = {"id": sid, "source": source, "started_at": start, "messages": msgs}
    if ended:
        spec["ended_at"] = start + 10 * (n + 1)
        spec["end_reason"] = "user_exit"
    spec.update(extra)
    return spec


def build(hermes, home):
    chain_old = [
        _s("chain_a1", "cli", 120, "ancientchain", end_reason="compression"),
        _s("chain_a2", "cli", 119, "ancientchain", kwargs={"parent_session_id": "chain_a1"}),
    ]
    chain_live = [
        _s("chain_b1", "cli", 120, "livechainhead", end_reason="compression"),
        _s("chain_b2", "cli", 5, "livechaintail", kwargs={"parent_session_id": "chain_b1"}),
    ]
    telegram_old = _s(
        "tg_old",
        "telegram",
        200,
        "oldtelegram",
        ended=False,
        kwargs={"session_key": "agent:main:telegram:dm:1", "user_id": "1", "chat_id": "1", "chat_type": "dm"},
    )
    telegram_old["messages"].append(["user", "telegramtoday ping", NOW - 600])
    specs = [
        _s("cron_old", "cron", 20, "zebracron"),
        _s("cron_new", "cron", 1, "freshcron"),
        _s("cli_old", "cli", 100, "oldcli"),
        _s("cli_titled", "cli", 100, "titledcli", title="keep me"),
        _s("zombie_cli", "cli", 3, "zombiecli", ended=False),
        _s("open_recent", "cli", 0.2, "activecli", ended=False),
        _s(
            "routed_zombie",
            "discord",
            30,
            "routedchat",
            ended=False,
            kwargs={
                "session_key": "agent:main:discord:dm:9",
                "user_id": "9",
                "chat_id": "9",
                "chat_type": "dm",
            },
        ),
        _s("parent_old", "cli", 100, "delegateparent"),
        _s(
            "child_old",
            "subagent",
            100,
            "delegatechild",
            kwargs={"parent_session_id": "parent_old", "model_config": {"_delegate_from": "parent_old"}},
        ),
        telegram_old,
        *chain_old,
        *chain_live,
    ]
    ops = [
        {"op": "build", "sessions": specs},
        {
            "op": "call",
            "method": "save_gateway_routing_entry",
            "args": ["agent:main:discord:dm:9", json.dumps({"session_id": "routed_zombie"})],
        },
    ]
    hermes.run(home, ops)
    return specs


def _count(hermes, home):
    return hermes.run(
        home,
        [
            {"op": "call", "method": "session_count", "kwargs": {"include_archived": True}},
            {"op": "call", "method": "message_count"},
        ],
    )


def test_run_prunes_what_the_plan_says_and_hermes_still_works(tmp_path, hermes):
    home = tmp_path / "home"
    home.mkdir()
    build(hermes, home)
    runner = CliRunner()
    plan = json.loads(runner.invoke(main, ["plan", "--home", str(home), "--json", "-v"]).output)["profiles"][
        0
    ]
    pruned = {d["session_id"] for d in plan["decisions"] if d["action"] == "prune"}
    assert pruned == {"cron_old", "cli_old", "chain_a1", "chain_a2", "parent_old", "child_old"}
    assert [z["session_id"] for z in plan["zombies"]] == ["zombie_cli"]

    res = runner.invoke(main, ["run", "--home", str(home), "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)["profiles"][0]
    assert out["pruned"] == len(pruned) and out["zombies_closed"] == 1
    wr = out["writer"]  # where the run's time went: lock held, rests for other writers
    assert wr["transactions"] >= 2
    # Figures kept apart agree: the longest transaction is one of a kind of step (the deletes
    # among them), and the commits are part of the lock time.
    assert "delete" in wr["max_step_ms"] and max(wr["max_step_ms"].values()) == wr["max_txn_ms"] > 0
    assert 0 < wr["commit_ms"] <= wr["lock_ms"]

    sessions, messages = _count(hermes, home)
    assert sessions == plan["remaining"]["sessions"] == out["remaining"]["sessions"]
    assert messages == plan["remaining"]["messages"] == out["remaining"]["messages"]

    results = hermes.run(
        home,
        [
            {"op": "call", "method": "search_messages", "args": [w]}
            for w in (
                "zebracron",
                "oldcli",
                "ancientchain",
                "delegatechild",
                "freshcron",
                "titledcli",
                "telegramtoday",
                "livechainhead",
                "routedchat",
            )
        ]
        + [
            {"op": "fts_integrity"},
            {"op": "call", "method": "get_session", "args": ["zombie_cli"]},
            {"op": "call", "method": "get_session", "args": ["routed_zombie"]},
            {"op": "call", "method": "get_session", "args": ["open_recent"]},
            {"op": "call", "method": "get_session", "args": ["tg_old"]},
        ],
    )
    *found, fts, zombie, routed, recent, telegram = results
    assert [bool(r) for r in found] == [False] * 4 + [True] * 5
    assert fts == {"messages_fts": "ok", "messages_fts_trigram": "ok"}
    assert zombie["end_reason"] == "idle_timeout"  # an automatic stamp Hermes clears itself
    assert zombie["ended_at"] == max(m["timestamp"] for m in hermes.call(home, "get_messages", "zombie_cli"))
    assert routed["ended_at"] is None and recent["ended_at"] is None and telegram["ended_at"] is None

    with Archive.for_home(home / "keeper") as store:
        entries = {e.session_id: e for e in store.entries()}
        assert set(entries) == pruned
        assert all(e.state == PRUNED and store.verify(e.entry) for e in entries.values())
        assert len(store.get("cron_old")["messages"]) == 4
    assert (home / "keeper" / "archive.db").stat().st_mode & 0o777 == 0o600
    assert (home / "keeper").stat().st_mode & 0o777 == 0o700

    # Hermes's own prune still works on the result.
    removed = hermes.call(home, "prune_sessions", older_than_days=2)
    assert removed >= 1
    assert _count(hermes, home)[0] == sessions - removed


def test_months_old_chat_with_a_message_today_is_kept(tmp_path, hermes):
    home = tmp_path / "home"
    home.mkdir()
    spec = _s("old_chat", "cli", 300, "ancienttalk")
    spec["messages"].append(["user", "still here today", NOW - 60])
    hermes.run(home, [{"op": "build", "sessions": [spec]}])
    res = CliRunner().invoke(main, ["run", "--home", str(home), "--json"])
    assert json.loads(res.output)["profiles"][0]["pruned"] == 0
    assert hermes.call(home, "get_session", "old_chat")["id"] == "old_chat"


def test_second_keeper_is_refused(tmp_path, hermes):
    home = tmp_path / "home"
    home.mkdir()
    hermes.run(home, [{"op": "build", "sessions": [_s("cron_old", "cron", 20, "x")]}])
    with keeper_lock(home):
        res = CliRunner().invoke(main, ["run", "--home", str(home)])
    assert res.exit_code == 75  # EX_TEMPFAIL: a scheduler simply tries later
    assert "another hermes-keeper is running" in res.output and "try later" in res.output
    assert hermes.call(home, "get_session", "cron_old")["id"] == "cron_old"


def test_millisecond_timestamps_are_refused_and_untouched(tmp_path):
    import sqlite3

    from hermes_keeper import demo
    from tests.conftest import tree_digest

    home = tmp_path / "home"
    demo.build_home(home, demo.generate(NOW, sessions=20))
    conn = sqlite3.connect(home / "state.db")
    conn.execute("UPDATE sessions SET started_at = started_at * 1000")
    conn.commit()
    conn.close()
    before = tree_digest(home)
    res = CliRunner().invoke(main, ["run", "--home", str(home)])
    assert res.exit_code == 2
    assert "not unix seconds" in res.output
    assert tree_digest(home) == before


def test_odd_ids_and_symlinks_never_reach_outside_the_home(tmp_path, hermes):
    home = tmp_path / "home"
    (home / "sessions").mkdir(parents=True)
    odd = "../../outside ü id"
    hermes.run(
        home, [{"op": "build", "sessions": [_s(odd, "cron", 30, "oddid"), _s("plain", "cron", 30, "p")]}]
    )
    outside = tmp_path / "outside ü id.json"
    outside.write_text("not the keeper's to delete")
    victim = tmp_path / "victim.json"
    victim.write_text("precious")
    (home / "sessions" / "link.json").symlink_to(victim)
    old = time.time() - 30 * DAY
    os.utime(home / "sessions" / "link.json", (old, old), follow_symlinks=False)
    (home / "sessions" / "plain.jsonl").write_text("{}")
    res = CliRunner().invoke(main, ["run", "--home", str(home), "--json"])
    assert json.loads(res.output)["profiles"][0]["pruned"] == 2
    assert outside.read_text() == "not the keeper's to delete"
    assert victim.read_text() == "precious" and (home / "sessions" / "link.json").is_symlink()
    assert not (home / "sessions" / "plain.jsonl").exists()
    with Archive.for_home(home / "keeper") as store:
        assert store.get(odd)["session"]["id"] == odd
    res = CliRunner().invoke(main, ["archive", "restore", odd, "--home", str(home)])
    assert res.exit_code == 0, res.output
    assert hermes.call(home, "get_session", odd)["id"] == odd


def test_all_profiles_one_failing_does_not_stop_the_others(tmp_path):
    from hermes_keeper import demo

    demo.build_home(tmp_path, demo.generate(NOW, sessions=30))
    (tmp_path / "profiles" / "broken").mkdir(parents=True)
    (tmp_path / "profiles" / "broken" / "state.db").write_bytes(b"not a database at all" * 100)
    res = CliRunner().invoke(main, ["run", "--home", str(tmp_path), "--all-profiles", "--json"])
    assert res.exit_code == 1
    default, broken = json.loads(res.stdout)["profiles"]
    assert default["profile"] == "default" and default["pruned"] > 0
    assert broken["profile"] == "broken" and "error" in broken
    assert (tmp_path / "profiles" / "broken" / "state.db").read_bytes() == b"not a database at all" * 100

    (tmp_path / "state.db").write_bytes(b"broken too")
    for name in ("state.db-wal", "state.db-shm"):
        (tmp_path / name).unlink(missing_ok=True)
    res = CliRunner().invoke(main, ["run", "--home", str(tmp_path), "--all-profiles"])
    assert res.exit_code == 2, "nothing could run: a refusal"


def test_runs_rotate_their_backups(tmp_path):
    import sqlite3

    from hermes_keeper import demo

    home = tmp_path / "home"
    demo.build_home(home, demo.generate(NOW, sessions=10))
    for i in range(5):
        conn = sqlite3.connect(home / "state.db")
        conn.execute(
            "INSERT INTO sessions (id, source, started_at, ended_at) VALUES (?, 'cron', ?, ?)",
            (f"old_cron_{i}", NOW - 30 * DAY, NOW - 30 * DAY),
        )
        conn.commit()
        conn.close()
        res = CliRunner().invoke(main, ["run", "--home", str(home), "--json"])
        assert json.loads(res.output)["profiles"][0]["backup"], res.output
    names = sorted(p.name for p in (home / "keeper" / "backups").glob("state-*.db.zst"))
    assert len(names) == 3  # keep-last 3; the day's newest is among them
