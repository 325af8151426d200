"""The survey's readers at their edges: file names, odd bytes, routing, runtime leases, schedules.

Written against the mutants ``tools/mutate.py src/hermes_keeper/run/survey.py`` left
(docs/testing.md): each reader's exact answer for the shapes Hermes writes and the ones it
should not (a name Hermes sanitised, a pid proven gone, an unreadable lease file, a schema
without a protection's table). Pure and fast: small files under ``tmp_path``.
"""

from __future__ import annotations

import ast
import json
import os
from pathlib import Path

from hermes_keeper.run import survey
from hermes_keeper.run.survey import SessionRow, runtime_leases, safe_filename_component, shown
from hermes_keeper.sqlite.schema import SchemaInfo
from tests.hermes_env import hermes_python

GONE_PID = 99_999_999  # above any pid_max: provably not running


def hermes_safe_component():
    """Hermes's own ``_safe_session_filename_component``, taken from its run_agent.py (0.19.0)."""
    site = next(hermes_python("0.19.0").parent.parent.glob("lib/python*/site-packages"))
    tree = ast.parse((site / "run_agent.py").read_text(encoding="utf-8"))
    func = next(n for n in tree.body if getattr(n, "name", "") == "_safe_session_filename_component")
    scope: dict = {}
    exec("import hashlib, re\n" + ast.unparse(func), scope)
    return scope["_safe_session_filename_component"]


NAMES = {
    "abc-123_X": "abc-123_X",
    "  ab  ": "ab",
    "": "session_e3b0c44298fc",
    "a/b": "a_b_c14cddc033f6",
    "._a_.": "a_4bd136123263",
    "x" * 100: "x" * 96 + "_09ecb6ebc8bc",
    "\udcff": "session_8f1d0f9c8806",  # an id that was not UTF-8 (lossless_text)
    "a b": "a_b_c8687a08aa5d",
    "sess.1": "sess_1_58d657d24ca8",
    "é": "é",
}


def test_safe_filename_component_is_hermes_own_byte_for_byte():
    hermes = hermes_safe_component()
    for sid, name in NAMES.items():
        assert safe_filename_component(sid) == name == hermes(sid), sid
    assert safe_filename_component(None) == "session_e3b0c44298fc"


def test_odd_bytes_are_kept_and_shown_replaced():
    assert survey.lossless_text(b"a\xffb") == "a\udcffb"
    assert survey.lossless_text("é".encode()) == "é"
    assert [shown(None), shown(""), shown("abc"), shown("é"), shown("a\udcffé")] == [
        None,
        "",
        "abc",
        "é",
        "a\ufffdé",
    ]
    assert SessionRow("a\udcffb", "cli", 0).odd_id and not SessionRow("é", "cli", 0).odd_id
    assert SessionRow("a\x00b", "cli", 0).nul_id and not SessionRow("ab", "cli", 0).nul_id


def test_session_ids_in_a_routing_entry():
    assert survey._session_ids_in('{"session_id": "s1", "x": 1}') == {"s1"}
    assert survey._session_ids_in({"session_id": "s2"}) == {"s2"}
    for raw in ('{"session_id": 5}', "not json", None, "[1]", '{"id": "s"}', '"s"'):
        assert survey._session_ids_in(raw) == set(), raw


def write_leases(home: Path, data) -> None:
    (home / "runtime").mkdir(parents=True, exist_ok=True)
    raw = data if isinstance(data, bytes) else json.dumps(data).encode()
    (home / "runtime" / "active_sessions.json").write_bytes(raw)


def test_runtime_leases_of_running_processes_only(tmp_path):
    assert runtime_leases(tmp_path) == set()  # no file: no leases
    me = os.getpid()
    entries = [
        {"session_id": "a", "pid": me},
        {"session_id": "b", "pid": GONE_PID},  # proven gone: released
        {"session_id": "c", "pid": "not a pid"},  # proves nothing: kept
        {"session_id": 7, "pid": me, "metadata": {"live_session_id": "d"}},
        {"session_id": "", "pid": me, "metadata": {"live_session_id": None}},
        {"session_id": "e", "pid": me, "metadata": ["not", "a", "dict"]},
        "not an entry",
    ]
    write_leases(tmp_path, {"entries": entries})
    assert runtime_leases(tmp_path) == {"a", "c", "7", "d", "e"}
    write_leases(tmp_path, entries[:1])  # a bare list, as older Hermes wrote it
    assert runtime_leases(tmp_path) == {"a"}
    write_leases(tmp_path, b"\xef\xbb\xbf" + json.dumps([{"session_id": "f", "pid": me}]).encode())
    assert runtime_leases(tmp_path) == {"f"}  # a BOM (Windows editors)
    for unreadable in (b"{cut", b"\xff\xfe", {"entries": "x"}, {"other": []}, 5):
        write_leases(tmp_path, unreadable)
        assert runtime_leases(tmp_path) is None, unreadable
    os.unlink(tmp_path / "runtime" / "active_sessions.json")
    os.mkfifo(tmp_path / "runtime" / "active_sessions.json")
    assert runtime_leases(tmp_path) is None  # never blocks on it


def schema(tables: dict[str, list[str]]) -> SchemaInfo:
    return SchemaInfo(path="state.db", status="ok", tables=tables)


def test_schema_protections_name_what_the_schema_has():
    assert survey.schema_protections(schema({"sessions": ["id"]})) == []
    full = schema(
        {
            "sessions": ["id", "session_key", "pinned", "last_activity_at"],
            "conversation_generations": ["id"],
            "gateway_routing": ["entry_json"],
        }
    )
    assert survey.schema_protections(full) == [
        "gateway routing",
        "gateway-recoverable rows",
        "pinned sessions and chains",
        "activity column for ages",
        "conversation generations, never deleted",
    ]
