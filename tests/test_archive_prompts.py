"""System prompts (schema >= 25) are archived by content: a restore never depends on Hermes keeping them."""

from __future__ import annotations

import json
import sqlite3
import time

import pytest
from click.testing import CliRunner

from hermes_keeper.archive.restore import session_row
from hermes_keeper.archive.store import ARCHIVED, PRUNED, Archive
from hermes_keeper.cli import main
from hermes_keeper.sqlite.schema import SchemaInfo
from tests import archive_home as ah
from tests import upstream_home as up
from tests.hermes_env import IOT, Hermes

#: Today's Hermes (schema 31, split hermes_state_* modules); may move to the shared real-Hermes matrix.

WALRUS, PENGUIN = "You are Walrus, a marine biologist.", "You are Penguin."
TOOLS = [{"type": "function", "function": {"name": "web_search"}}]


def _home(tmp_path):
    home = up.build(tmp_path / "home")
    conn = sqlite3.connect(home / "state.db")
    t0 = time.time() - 30 * 86400
    up.add_session(conn, "old_a", t0, WALRUS, TOOLS, ("walrus tusks",))
    up.add_session(conn, "old_b", t0 + 60, WALRUS, texts=("walrus diet",))
    up.add_session(conn, "fresh", time.time(), PENGUIN)
    conn.commit()
    conn.close()
    return home


def _hermes_cleanup(home) -> int:
    conn = sqlite3.connect(home / "state.db")
    with conn:
        return up.delete_unreferenced_prompts(conn)


def _prompt_rows(home) -> list[tuple[str, str]]:
    conn = sqlite3.connect(home / "state.db")
    try:
        return conn.execute("SELECT hash, prompt FROM system_prompts ORDER BY hash").fetchall()
    finally:
        conn.close()


def _restore(home, *ids):
    return CliRunner().invoke(main, ["archive", "restore", *ids, "--home", str(home), "--json"])


def test_restore_brings_back_the_prompt_hermes_deleted(tmp_path):
    home = _home(tmp_path)
    ah.prune(home, ["old_a", "old_b"])
    with Archive.for_home(home / "keeper") as store:
        held = {r["prompt"] for r in store.get("old_a")["system_prompts"]}
    assert held == {WALRUS, json.dumps(TOOLS)}  # the prompt and the tools pin, by content
    # nobody names them any more: the keeper's prune deleted both, as Hermes's own prune does
    assert [p for _, p in _prompt_rows(home)] == [PENGUIN]
    assert _hermes_cleanup(home) == 0

    res = _restore(home, "old_a")
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["profiles"][0]["restored"] == ["old_a"]
    assert up.resolved_prompts(home / "state.db", "old_a") == (WALRUS, json.dumps(TOOLS))
    rows = _prompt_rows(home)

    # old_b names the same prompt: the row is reused, not written twice.
    res = _restore(home, "old_b")
    assert res.exit_code == 0, res.output
    assert _prompt_rows(home) == rows
    assert up.resolved_prompts(home / "state.db", "old_b") == (WALRUS, None)
    assert _hermes_cleanup(home) == 0  # both named again

    # Restoring again changes nothing; pruned, cleaned up and restored again, the same result.
    again = _restore(home, "old_a")
    assert again.exit_code == 1 and "already in state.db" in again.output
    assert _prompt_rows(home) == rows
    ah.prune(home, ["old_a", "old_b"])
    _hermes_cleanup(home)
    res = _restore(home, "old_a", "old_b")
    assert res.exit_code == 0, res.output
    assert _prompt_rows(home) == rows
    assert up.resolved_prompts(home / "state.db", "old_a") == (WALRUS, json.dumps(TOOLS))


def test_export_carries_the_prompt_text_as_hermes_exports_it(tmp_path):
    home = _home(tmp_path)
    ah.prune(home, ["old_a"])
    _hermes_cleanup(home)
    res = CliRunner().invoke(main, ["archive", "export", "old_a", "--home", str(home)])
    assert res.exit_code == 0, res.output
    line = json.loads(res.stdout)
    assert (line["system_prompt"], line["tool_names"]) == (WALRUS, json.dumps(TOOLS))


def test_real_hermes_restores_after_its_own_prompt_cleanup(tmp_path):
    iot = Hermes(IOT)
    home = tmp_path / "home"
    home.mkdir()
    iot.run(
        home,
        [
            ah._call("create_session", "old_a", "cli", system_prompt=WALRUS),
            ah._call("append_message", "old_a", "user", "tell me about walrus tusks"),
            ah._call("update_session_tool_names", "old_a", TOOLS),
            ah._call("end_session", "old_a", "user_exit"),
            ah._call("create_session", "fresh", "cli", system_prompt=PENGUIN),
        ],
    )
    ah.prune(home, ["old_a"])
    # Any prompt update makes Hermes delete the prompts no session names: old_a's two.
    cleaned = iot.run(
        home,
        [
            ah._call("update_system_prompt", "fresh", PENGUIN + " v2"),
            {"op": "query", "sql": "SELECT prompt FROM system_prompts"},
        ],
    )[1]
    assert cleaned == [[PENGUIN + " v2"]]
    res = _restore(home, "old_a")
    assert res.exit_code == 0, res.output
    session, found = iot.run(home, [ah._call("get_session", "old_a"), ah._call("search_messages", "tusks")])
    assert (session["system_prompt"], json.loads(session["tool_names"])) == (WALRUS, TOOLS)
    assert [m["session_id"] for m in found] == ["old_a"]


@pytest.mark.parametrize("cleaned", [False, True])
def test_older_payloads_without_prompts_still_restore(tmp_path, cleaned):
    home = _home(tmp_path)
    ah.prune(home, ["old_a", "old_b"])
    with Archive.for_home(home / "keeper") as store:  # as an older keeper archived it
        payload = store.get("old_a")
        held = payload.pop("system_prompts")
        store.set_state([store.entry("old_a").entry], ARCHIVED)  # else put() keeps the pruned entry
        (entry,) = store.put([payload])
        store.set_state([entry], PRUNED)
    if not cleaned:  # the prompts an older keeper's prune left in state.db
        with sqlite3.connect(home / "state.db") as conn:
            conn.executemany("INSERT INTO system_prompts (hash, prompt) VALUES (:hash, :prompt)", held)
        conn.close()
    res = _restore(home, "old_a")
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)["profiles"][0]
    assert out["restored"] == ["old_a"]
    if cleaned:  # the text is gone for good: the session comes back without it, and says so
        assert up.resolved_prompts(home / "state.db", "old_a") == (None, None)
        assert [w for w in out["warnings"] if "system prompt" in w] == [
            f"old_a: the system prompt its {col} names was deleted by Hermes and this archive row "
            "(from an older hermes-keeper) lacks its text; restored without it"
            for col in ("system_prompt_hash", "tool_names")
        ]
    else:
        assert up.resolved_prompts(home / "state.db", "old_a") == (WALRUS, json.dumps(TOOLS))
        assert out["warnings"] == []
    conn = sqlite3.connect(home / "state.db")
    assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
    conn.close()


def test_a_hermes_without_the_prompt_table_gets_the_text_inline():
    payload = ah.payload("old_a", "cli", 1.7e9)
    payload["session"] |= {"system_prompt": None, "system_prompt_hash": "ab" * 32}
    payload["system_prompts"] = [{"hash": "ab" * 32, "prompt": WALRUS}]
    old = SchemaInfo("state.db", "understood", tables={"sessions": ["id", "source", "system_prompt"]})
    assert session_row(payload, old) == {"id": "old_a", "source": "cli", "system_prompt": WALRUS}
    new = SchemaInfo(
        "state.db",
        "newer",
        tables={
            "sessions": ["id", "system_prompt", "system_prompt_hash"],
            "system_prompts": ["hash", "prompt"],
        },
    )
    assert session_row(payload, new) == {
        "id": "old_a",
        "system_prompt": None,
        "system_prompt_hash": "ab" * 32,
    }


def test_the_keepers_prune_leaves_no_prompt_behind_that_hermes_would_clean(tmp_path):
    """Hermes's own prune deletes the ``system_prompts`` rows no session names any more; the
    keeper's does the same for the sessions it prunes (their text is in the archive): a prompt a
    kept session still names stays, and Hermes's next cleanup finds nothing the keeper left."""
    iot = Hermes(IOT)
    home = tmp_path / "home"
    home.mkdir()
    old = time.time() - 200 * 86400
    ops = [{"op": "clock", "t": old}]
    for sid in ("old_a", "old_b"):
        ops += [
            ah._call("create_session", sid, "cli", system_prompt=WALRUS),
            ah._call("append_message", sid, "user", f"walrus question {sid}"),
            ah._call("end_session", sid, "user_exit"),
        ]
    ops += [
        ah._call("update_session_tool_names", "old_a", TOOLS),
        ah._call("set_session_title", "old_b", "kept"),
    ]
    ops += [{"op": "clock", "t": None}, ah._call("create_session", "fresh", "cli", system_prompt=PENGUIN)]
    iot.run(home, ops)
    assert sorted(p for _, p in _prompt_rows(home)) == sorted([WALRUS, json.dumps(TOOLS), PENGUIN])
    res = CliRunner().invoke(main, ["run", "--home", str(home), "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["profiles"][0]["pruned"] == 1
    assert sorted(p for _, p in _prompt_rows(home)) == sorted([WALRUS, PENGUIN])  # old_b names WALRUS
    lines = [json.loads(line) for line in (home / "keeper" / "journal.jsonl").read_text().splitlines()]
    assert [r["prompts"] for r in lines if r["action"] == "prompts_deleted"] == [1]
    # Hermes's own cleanup (run by any prompt update) now only finds the prompt it just replaced.
    cleaned = iot.run(
        home,
        [
            ah._call("update_system_prompt", "fresh", PENGUIN + " v2"),
            {"op": "query", "sql": "SELECT prompt FROM system_prompts ORDER BY prompt"},
        ],
    )[1]
    assert cleaned == [[PENGUIN + " v2"], [WALRUS]]
    assert (
        CliRunner().invoke(main, ["adopt", "--yes", "--home", str(home)]).exit_code == 0
    )  # Hermes's auto-prune off, as a restore needs
    res = _restore(home, "old_a")
    assert res.exit_code == 0, res.output
    session = iot.call(home, "get_session", "old_a")
    assert (session["system_prompt"], json.loads(session["tool_names"])) == (WALRUS, TOOLS)
