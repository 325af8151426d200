"""Prune with the keeper, bring back with the keeper: real Hermes sees exactly what it had."""

from __future__ import annotations

import json
import sqlite3
import time

from click.testing import CliRunner

from hermes_keeper.archive import ARCHIVE_NAME
from hermes_keeper.cli import main
from hermes_keeper.export import import_batches

DAY = 86400.0
NOW = time.time()


def _spec(sid, age_days, word, n=6, **extra):
    start = NOW - age_days * DAY
    msgs = [
        ["user" if i % 2 == 0 else "assistant", f'{word} turn {i} ünïcødé "quoted"', start + i + 1]
        for i in range(n)
    ]
    return {
        "id": sid,
        "source": "cron",
        "started_at": start,
        "messages": msgs,
        "ended_at": start + n + 2,
        "end_reason": "cron_complete",
        **extra,
    }


def _home(hermes, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    specs = [
        _spec("old_a", 30, "walrus"),
        _spec("old_b", 30, "narwhal", end_reason="compression"),
        _spec("old_c", 29, "narwhal", kwargs={"parent_session_id": "old_b"}),
        _spec("keep_new", 1, "penguin"),
    ]
    hermes.run(
        home,
        [
            {"op": "build", "sessions": specs},
            # a rewound (inactive) message and a model usage row: both must come back
            {"op": "call", "method": "set_session_title", "args": ["old_a", "Walrus facts"]},
        ],
    )
    conn = sqlite3.connect(home / "state.db")
    conn.execute(
        "UPDATE messages SET active = 0 WHERE session_id = 'old_a' AND id = "
        "(SELECT max(id) FROM messages WHERE session_id = 'old_a')"
    )
    conn.execute(
        "INSERT INTO session_model_usage (session_id, model, input_tokens) VALUES ('old_a', 'm1', 42)"
    )
    conn.commit()
    conn.close()
    (home / "keeper.toml").write_text("keep_titled = false\n")
    return home


def _snapshot(hermes, home, ids):
    ops = []
    for sid in ids:
        ops += [
            {"op": "call", "method": "get_messages", "args": [sid], "kwargs": {"include_inactive": True}},
            {"op": "call", "method": "export_session", "args": [sid]},
        ]
    ops.append({"op": "query", "sql": "SELECT * FROM session_model_usage ORDER BY session_id"})
    return hermes.run(home, ops)


def test_prune_then_restore_is_exact(tmp_path, hermes):
    home = _home(hermes, tmp_path)
    ids = ["old_a", "old_b", "old_c"]
    before = _snapshot(hermes, home, ids)
    runner = CliRunner()
    res = runner.invoke(main, ["run", "--home", str(home), "--json"])
    assert json.loads(res.output)["profiles"][0]["pruned"] == 3
    assert hermes.call(home, "get_session", "old_a") is None

    listed = json.loads(runner.invoke(main, ["archive", "list", "--home", str(home), "--json"]).output)
    assert {s["session_id"] for s in listed["sessions"]} == set(ids)
    hits = json.loads(
        runner.invoke(main, ["archive", "search", "NARWHAL", "--home", str(home), "--json"]).output
    )
    assert {h["session"]["session_id"] for h in hits["hits"]} == {"old_b", "old_c"}
    quoted = json.loads(
        runner.invoke(main, ["archive", "search", 'ünïcødé "quoted"', "--home", str(home), "--json"]).output
    )
    assert len(quoted["hits"]) == 3
    shown = runner.invoke(main, ["archive", "show", "old_a", "--home", str(home)]).output
    assert "Walrus facts" in shown and "(inactive)" in shown

    # Asking for one member of a compression chain brings the whole chain back.
    res = runner.invoke(main, ["archive", "restore", "old_c", "old_a", "--home", str(home), "--json"])
    assert res.exit_code == 0, res.output
    assert set(json.loads(res.output)["restored"]) == set(ids)
    assert _snapshot(hermes, home, ids) == before
    found = hermes.call(home, "search_messages", "walrus")
    assert {m["session_id"] for m in found} == {"old_a"}
    assert hermes.run(home, [{"op": "fts_integrity"}])[0] == {
        "messages_fts": "ok",
        "messages_fts_trigram": "ok",
    }

    again = runner.invoke(main, ["archive", "restore", "old_a", "--home", str(home)])
    assert again.exit_code == 2 and "already in state.db" in again.output


def test_title_collision_gets_a_visible_suffix(tmp_path, hermes):
    home = _home(hermes, tmp_path)
    CliRunner().invoke(main, ["run", "--home", str(home)])
    hermes.run(
        home,
        [
            {"op": "call", "method": "create_session", "args": ["newcomer", "cli"]},
            {"op": "call", "method": "set_session_title", "args": ["newcomer", "Walrus facts"]},
        ],
    )
    res = CliRunner().invoke(main, ["archive", "restore", "old_a", "--home", str(home), "--json"])
    assert json.loads(res.output)["retitled"] == {"old_a": "Walrus facts (restored)"}
    assert hermes.call(home, "get_session", "old_a")["title"] == "Walrus facts (restored)"


def test_damaged_row_reported_and_refused_others_restorable(tmp_path, hermes):
    home = _home(hermes, tmp_path)
    runner = CliRunner()
    runner.invoke(main, ["run", "--home", str(home)])
    conn = sqlite3.connect(home / "keeper" / ARCHIVE_NAME)
    blob = bytearray(
        conn.execute("SELECT payload FROM archived_sessions WHERE session_id='old_a'").fetchone()[0]
    )
    blob[len(blob) // 2] ^= 0xFF
    conn.execute("UPDATE archived_sessions SET payload = ? WHERE session_id = 'old_a'", (bytes(blob),))
    conn.commit()
    conn.close()
    res = runner.invoke(main, ["archive", "verify", "--home", str(home), "--json"])
    assert res.exit_code == 1 and json.loads(res.output)["damaged"] == ["old_a"]
    res = runner.invoke(main, ["archive", "restore", "old_a", "--home", str(home)])
    assert res.exit_code == 1 and "damaged" in res.output
    assert hermes.call(home, "get_session", "old_a") is None
    res = runner.invoke(main, ["archive", "restore", "old_b", "--home", str(home)])
    assert res.exit_code == 0, res.output
    assert hermes.call(home, "get_session", "old_c")["parent_session_id"] == "old_b"


def test_export_imports_into_fresh_hermes(tmp_path, hermes):
    home = _home(hermes, tmp_path)
    before = {
        sid: e
        for sid, e in zip(
            ("old_b", "old_c"),
            hermes.run(
                home,
                [{"op": "call", "method": "export_session", "args": [sid]} for sid in ("old_b", "old_c")],
            ),
            strict=True,
        )
    }
    CliRunner().invoke(main, ["run", "--home", str(home)])
    out = tmp_path / "export.jsonl"
    res = CliRunner().invoke(main, ["archive", "export", "--home", str(home), "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert out.stat().st_mode & 0o777 == 0o600
    lines = out.read_text().splitlines()
    exported = {e["id"]: e for e in map(json.loads, lines)}
    assert exported["old_b"] == before["old_b"] and exported["old_c"] == before["old_c"]
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    results = hermes.run(
        fresh, [{"op": "call", "method": "import_sessions", "args": [b]} for b in import_batches(lines)]
    )
    assert sum(r["imported"] for r in results) == 3, results
    msgs = hermes.call(fresh, "get_messages", "old_c")
    assert [m["content"] for m in msgs] == [m["content"] for m in before["old_c"]["messages"]]
    assert hermes.call(fresh, "get_session", "old_c")["parent_session_id"] == "old_b"
    assert hermes.call(fresh, "search_messages", "walrus")


def test_import_batches_respect_hermes_limits():
    lines = [json.dumps({"id": f"s{i}", "messages": [{"content": "x"}] * 300}) for i in range(400)]
    batches = list(import_batches(lines))
    assert all(len(b) <= 500 and sum(len(s["messages"]) for s in b) <= 50_000 for b in batches)
    assert sum(len(b) for b in batches) == 400 and len(batches) == 3
