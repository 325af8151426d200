"""The restore's pure rules at their edges: which prompt references are lost, the row an older schema takes.

Written against the mutants ``tools/mutate.py src/hermes_keeper/archive/restore.py`` left
(docs/testing.md). Pure and fast: payloads as dicts, an in-memory database.
"""

from __future__ import annotations

import sqlite3

from hermes_keeper.archive import restore
from hermes_keeper.sqlite.schema import SchemaInfo

HASH_A, HASH_B, HASH_C = "a" * 64, "b" * 64, "c" * 64


def test_unresolved_prompts_are_hashes_neither_archived_nor_in_the_database():
    payload = {
        "session": {"id": "s", "system_prompt_hash": HASH_A, "tool_names": HASH_B},
        "system_prompts": [{"hash": HASH_C, "prompt": "p"}],
    }
    asked = []

    def in_db(h: str) -> bool:
        asked.append(h)
        return h == HASH_B

    assert restore.unresolved_prompts(payload, in_db) == ["system_prompt_hash"]
    assert asked == [HASH_A, HASH_B]
    assert restore.unresolved_prompts(payload, lambda h: False) == ["system_prompt_hash", "tool_names"]
    payload["system_prompts"] = [{"hash": HASH_A, "prompt": "p"}, {"hash": HASH_B, "prompt": "t"}]
    assert restore.unresolved_prompts(payload, lambda h: False) == []  # archived with it
    for value in ('["terminal", "web"]', HASH_A.upper(), HASH_A + "0", None, 7):  # inline JSON, not a hash
        other = {"session": {"id": "s", "system_prompt_hash": value, "tool_names": value}}
        assert restore.unresolved_prompts(other, lambda h: False) == [], value
    assert restore.unresolved_prompts({"session": {"id": "s", "tool_names": HASH_A}}, lambda h: False) == [
        "tool_names"
    ]


def test_has_prompt_looks_the_hash_up():
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE system_prompts (hash TEXT PRIMARY KEY, prompt TEXT)")
    conn.execute("INSERT INTO system_prompts VALUES (?, 'p')", (HASH_A,))
    assert restore._has_prompt(conn, HASH_A) is True
    assert restore._has_prompt(conn, HASH_B) is False


def schema(tables: dict[str, list[str]]) -> SchemaInfo:
    return SchemaInfo(path="state.db", status="ok", tables=tables)


def test_session_row_for_a_schema_without_system_prompts_takes_the_text_inline():
    payload = {
        "session": {"id": "s", "system_prompt": None, "system_prompt_hash": HASH_A, "title": "t"},
        "system_prompts": [{"hash": HASH_B, "prompt": "other"}, {"hash": HASH_A, "prompt": "the prompt"}],
    }
    old = schema({"sessions": ["id", "system_prompt", "title"]})
    assert restore.session_row(payload, old) == {"id": "s", "system_prompt": "the prompt", "title": "t"}
    new = schema({"sessions": ["id", "system_prompt", "system_prompt_hash"], "system_prompts": ["hash"]})
    assert restore.session_row(payload, new) == {
        "id": "s",
        "system_prompt": None,
        "system_prompt_hash": HASH_A,
    }
    oldest = schema({"sessions": ["id", "title"]})  # no column for it at all
    assert restore.session_row(payload, oldest) == {"id": "s", "title": "t"}
    inline = {**payload, "session": {**payload["session"], "system_prompt": "its own"}}
    assert restore.session_row(inline, old)["system_prompt"] == "its own"
    lost = {"session": payload["session"]}  # archived before prompts were: nothing to put inline
    assert restore.session_row(lost, old)["system_prompt"] is None
