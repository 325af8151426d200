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
import shutil
import sqlite3
import time
from dataclasses import replace
from pathlib import Path

import pytest

from hermes_keeper import demo
from hermes_keeper.facts import Check, last_check, record_check
from hermes_keeper.fs import HomeFS
from hermes_keeper.home import select_profiles
from hermes_keeper.model.gateway import Peer
from hermes_keeper.run import message_stats, survey
from hermes_keeper.run.survey import SessionRow, runtime_leases, safe_filename_component, shown
from hermes_keeper.sqlite.holders import Holder, _own_pid_namespace
from hermes_keeper.sqlite.schema import SchemaInfo, inspect
from tests.hermes_env import hermes_python
from tests.sessions import session

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


def listed(files) -> list[tuple]:
    return [(f.path.name, f.kind, f.size, f.session_id, f.symlink) for f in files]


def test_scan_files_names_each_file_and_its_session(tmp_path):
    home = tmp_path / "home"
    assert survey.scan_files(HomeFS(home), {"s1"}) == []  # no sessions/ at all
    folder = home / "sessions"
    (folder / "saved" / "sub").mkdir(parents=True)
    (folder / "cache").mkdir()
    odd = "a/b"  # an id Hermes sanitises in file names: a_b_c14cddc033f6
    files = {
        "sessions.json": 2,
        "request_dump_s1_20260101_000000.json": 3,
        "request_dump_a_b_c14cddc033f6_20260101_000000_000001.json": 4,
        "request_dump_gone_20260101_000000.json": 5,
        "request_dump_s1_bad.json": 6,
        "session_s1.json": 7,
        "session_zzz.json": 8,
        "s1.jsonl": 9,
        "s2.json": 10,
        "other.jsonl": 11,
        "notes.txt": 12,
        "saved/one": 13,
        "saved/sub/two": 14,
        "cache/x": 15,
        "cache/y": 16,
        "request_dump_a b_20260101_000000.json": 17,  # the raw id, as older Hermes named dumps
        "s.1.jsonl": 18,
    }
    for name, size in files.items():
        (folder / name).write_bytes(b"x" * size)
    (folder / "saved" / "link").symlink_to(folder / "notes.txt")
    (folder / "s3.jsonl").symlink_to(folder / "notes.txt")
    found = survey.scan_files(HomeFS(home), {"s1", "s2", "s3", odd, "a b", "s.1"})
    assert listed(found) == [
        ("cache", "other", 31, None, False),
        ("notes.txt", "other", 12, None, False),
        ("other.jsonl", "transcript", 11, None, False),
        ("request_dump_a b_20260101_000000.json", "request_dump", 17, "a b", False),
        ("request_dump_a_b_c14cddc033f6_20260101_000000_000001.json", "request_dump", 4, odd, False),
        ("request_dump_gone_20260101_000000.json", "request_dump", 5, None, False),
        ("request_dump_s1_20260101_000000.json", "request_dump", 3, "s1", False),
        ("request_dump_s1_bad.json", "transcript", 6, None, False),
        ("s.1.jsonl", "transcript", 18, "s.1", False),
        ("s1.jsonl", "transcript", 9, "s1", False),
        ("s2.json", "transcript", 10, "s2", False),
        ("s3.jsonl", "transcript", len(str(folder / "notes.txt")), "s3", True),
        ("link", "saved", len(str(folder / "notes.txt")), None, True),
        ("one", "saved", 13, None, False),
        ("two", "saved", 14, None, False),
        ("session_s1.json", "snapshot", 7, "s1", False),
        ("session_zzz.json", "snapshot", 8, None, False),
        ("sessions.json", "routing", 2, None, False),
    ]
    orphans = [f.path.name for f in found if f.orphan]  # a transcript, dump or snapshot of no session
    assert orphans == [
        "other.jsonl",
        "request_dump_gone_20260101_000000.json",
        "request_dump_s1_bad.json",
        "session_zzz.json",
    ]
    assert found[0].mtime == os.lstat(folder / "cache").st_mtime
    assert found[1].mtime == os.lstat(folder / "notes.txt").st_mtime
    assert found[-4].path == folder / "saved" / "sub" / "two"
    assert found[-4].mtime == os.lstat(folder / "saved" / "sub" / "two").st_mtime


def test_scan_files_through_a_moved_sessions_folder_marks_every_file_as_linked(tmp_path):
    home, moved = tmp_path / "home", tmp_path / "bigdisk"
    (moved / "saved").mkdir(parents=True)
    (moved / "saved" / "one").write_bytes(b"x")
    (moved / "s1.jsonl").write_bytes(b"xy")
    home.mkdir()
    (home / "sessions").symlink_to(moved, target_is_directory=True)
    assert listed(survey.scan_files(HomeFS(home), {"s1"})) == [
        ("s1.jsonl", "transcript", 2, "s1", True),
        ("saved", "other", os.lstat(moved / "saved").st_size, None, True),
    ]


BASE = (
    "id TEXT PRIMARY KEY, source TEXT, started_at REAL, ended_at REAL, end_reason TEXT,"
    " parent_session_id TEXT, title TEXT"
)
OLDEST = {
    "id": "s1",
    "source": "cli",
    "started_at": 1.0,
    "ended_at": None,
    "end_reason": None,
    "parent_session_id": None,
    "title": "t",
    "archived": 0,
    "pinned": 0,
    "hidden": 0,
    "auto_archived": 0,
    "session_key": None,
    "model_config": None,
    "last_activity_at": None,
    "input_tokens": 0,
    "output_tokens": 0,
    "cost_usd": 0,
    "handoff_state": None,
    "message_count": None,
    "profile_name": None,
    "user_id": None,
    "chat_id": None,
    "chat_type": None,
    "thread_id": None,
}


def database(tmp_path: Path, *ddl: str) -> tuple[sqlite3.Connection, SchemaInfo]:
    conn = sqlite3.connect(tmp_path / "state.db")
    for statement in ddl:
        conn.execute(statement)
    conn.commit()
    return conn, inspect(tmp_path / "state.db")


def test_select_sessions_fills_what_an_old_schema_lacks(tmp_path):
    conn, info = database(
        tmp_path,
        f"CREATE TABLE sessions ({BASE})",
        "INSERT INTO sessions VALUES ('s1', 'cli', 1.0, NULL, NULL, NULL, 't')",
    )
    assert survey._select_sessions(conn, info) == [OLDEST]
    assert survey._routed_from_db(conn, info) == set()


def test_select_sessions_reads_every_column_a_new_schema_has(tmp_path):
    cols = "archived, pinned, hidden, auto_archived, session_key, model_config, last_activity_at, "
    cols += "input_tokens, output_tokens, actual_cost_usd, estimated_cost_usd, handoff_state, "
    cols += "message_count, profile_name, user_id, chat_id, chat_type, thread_id"
    conn, info = database(
        tmp_path,
        f"CREATE TABLE sessions ({BASE}, {cols})",
        "INSERT INTO sessions VALUES ('s1', 'telegram', 1.0, 2.0, 'reset', 'p', 't', 1, 1, 1, 1, 'k', '{}',"
        " 3.0, 10, 20, NULL, 0.5, 'done', 4, 'work', 'u', 'c', 'dm', 'th')",
        "INSERT INTO sessions (id, actual_cost_usd, estimated_cost_usd) VALUES ('s2', 0.25, 0.5)",
        "CREATE TABLE gateway_routing (key TEXT, entry_json TEXT)",
        """INSERT INTO gateway_routing VALUES ('a', '{"session_id": "s1"}'), ('b', '{"session_id": "s9"}'),
           ('c', 'not json'), ('d', NULL)""",
    )
    first, second = survey._select_sessions(conn, info)
    assert first == {
        **OLDEST,
        **dict(source="telegram", ended_at=2.0, end_reason="reset", parent_session_id="p"),
        **dict(archived=1, pinned=1, hidden=1, auto_archived=1, session_key="k", model_config="{}"),
        **dict(last_activity_at=3.0, input_tokens=10, output_tokens=20, cost_usd=0.5),
        **dict(handoff_state="done", message_count=4, profile_name="work"),
        **dict(user_id="u", chat_id="c", chat_type="dm", thread_id="th"),
    }
    assert (second["id"], second["cost_usd"]) == ("s2", 0.25)  # the actual cost first
    assert survey._routed_from_db(conn, info) == {"s1", "s9"}


def test_one_cost_column_alone_is_no_cost(tmp_path):
    conn, info = database(
        tmp_path,
        f"CREATE TABLE sessions ({BASE}, estimated_cost_usd REAL)",
        "INSERT INTO sessions VALUES ('s1', 'cli', 1.0, NULL, NULL, NULL, 't', 0.5)",
        "CREATE TABLE gateway_routing (key TEXT)",  # no entry_json: nothing read from it
    )
    assert survey._select_sessions(conn, info)[0]["cost_usd"] == 0
    assert survey._routed_from_db(conn, info) == set()


def test_routed_from_sessions_json_or_why_not(tmp_path):
    path = tmp_path / "sessions.json"
    assert survey.routed_from_sessions_json(tmp_path) == set()  # no mirror: routes nothing
    path.write_text(
        json.dumps({"a": {"session_id": "s1"}, "b": {"session_id": "s2"}, "_meta": {"session_id": "m"}})
    )
    assert survey.routed_from_sessions_json(tmp_path) == {"s1", "s2"}
    for body, why in (
        (b"[1]", f"{path} is not a JSON object"),
        (b"{cut", f"{path} unreadable (JSONDecodeError)"),
        (b'{"a": "\xff"}', f"{path} unreadable (UnicodeDecodeError)"),
    ):
        path.write_bytes(body)
        with pytest.raises(survey.RoutingUnknown) as unknown:
            survey.routed_from_sessions_json(tmp_path)
        assert str(unknown.value) == why
    path.unlink()
    path.symlink_to(tmp_path / "elsewhere.json")
    with pytest.raises(survey.RoutingUnknown) as unknown:
        survey.routed_from_sessions_json(tmp_path)
    assert str(unknown.value) == (
        f"{path} is a symlink (to {tmp_path / 'elsewhere.json'}); the keeper does not read it"
    )


NOW = 1_780_000_000.0


@pytest.fixture(scope="module")
def small_home(tmp_path_factory) -> Path:
    home = tmp_path_factory.mktemp("survey") / "home"
    demo.build_home(home, demo.generate(NOW, sessions=12, messages_per_session=4, words_per_message=5))
    (home / "keeper").mkdir()  # where the statistics cache may be kept
    conn = sqlite3.connect(home / "state.db")
    with conn:
        conn.execute("INSERT INTO sessions (id, source, started_at) VALUES ('empty', 'cli', ?)", (NOW - 60,))
    conn.close()
    return home


def watch_stats(monkeypatch) -> list[tuple[str, bool]]:
    """Which statistics reader ran, and inside the survey's read transaction or not."""
    seen: list[tuple[str, bool]] = []
    for name in ("message_stats", "message_stats_in_steps"):
        real = getattr(survey, name)

        def read(conn, *args, _real=real, _name=name, **kwargs):
            seen.append((_name, conn.in_transaction))
            return _real(conn, *args, **kwargs)

        monkeypatch.setattr(survey, name, read)
    return seen


def watch_cache_reads(monkeypatch) -> list[tuple[str, tuple, bool]]:
    """Each read of ``messages`` the statistics cache makes: its ids, and inside a transaction or not."""
    seen: list[tuple[str, tuple, bool]] = []
    real = message_stats.message_stats

    def read(conn, schema, since, where="", params=()):
        seen.append((where, params, conn.in_transaction))
        return real(conn, schema, since, where, params)

    monkeypatch.setattr(message_stats, "message_stats", read)
    return seen


def test_a_rollback_journal_database_has_its_statistics_read_outside_the_snapshot(
    small_home, tmp_path, monkeypatch
):
    delete = Path(shutil.copytree(small_home, tmp_path / "delete"))
    conn = sqlite3.connect(delete / "state.db")
    assert conn.execute("PRAGMA journal_mode=DELETE").fetchone()[0] == "delete"
    conn.close()
    seen = watch_stats(monkeypatch)
    wal = survey.survey_database(select_profiles(small_home, env={})[0], now=NOW)
    assert seen == [("message_stats", True)]  # one snapshot: Hermes's commits go on beside it
    seen.clear()
    stepped = survey.survey_database(select_profiles(delete, env={})[0], now=NOW)
    assert seen == [("message_stats_in_steps", False)]  # no reader holding every commit meanwhile
    assert stepped.sessions == wal.sessions and stepped.message_total == wal.message_total > 0
    assert wal.sessions["empty"].messages == 0 and wal.sessions["empty"].recent_messages == (0, 0)
    for side in ("", "-wal", "-shm", "-journal"):  # another database's cache, if the other test made it
        (delete / "keeper" / f"stats.db{side}").unlink(missing_ok=True)
    seen.clear()
    reads = watch_cache_reads(monkeypatch)
    cached = survey.survey_database(select_profiles(delete, env={})[0], now=NOW, cached=True)
    assert cached.sessions == wal.sessions and (delete / "keeper" / "stats.db").exists()
    high = wal.message_total  # the demo's ids run 1..n: the cache's first read, in steps, outside it too
    assert seen == [] and reads == [("WHERE id BETWEEN ? AND ?", (1, high), False)]
    assert not (small_home / "keeper" / "stats.db").exists()  # fresh unless asked: the plan deletes on them


def test_survey_profile_hands_each_argument_on(small_home, monkeypatch):
    profile = select_profiles(small_home, env={})[0]
    info = inspect(profile.db_path)
    holders: list = []
    scanned = []
    monkeypatch.setattr(survey, "scan_folders", lambda fs, check, budget: scanned.append((check, budget)))

    def db_check():
        return None

    seen = watch_stats(monkeypatch)
    taken = survey.survey_profile(profile, info, NOW, holders, db_check, 0.25)
    assert (taken.schema, taken.taken_at, taken.holders, scanned) == (info, NOW, holders, [(db_check, 0.25)])
    assert taken.schema is info and taken.holders is holders and seen == [("message_stats", True)]
    seen.clear()
    cached = survey.survey_profile(profile, now=NOW, holders=[], cached=True)
    assert seen == [] and (small_home / "keeper" / "stats.db").exists()  # through the cache
    assert cached.sessions == taken.sessions
    assert survey.survey_profile(profile, now=NOW).holders == []  # found when not given: none here
    later = survey.survey_database(profile)
    assert abs(later.taken_at - time.time()) < 60 and later.schema.schema_version == info.schema_version


def test_the_default_check_reads_the_whole_file_unless_that_would_stall_a_holder(
    small_home, tmp_path, monkeypatch
):
    """Where a malformed copy of Hermes's needs state.db checked, the survey's own check reads it in
    full now in WAL mode (readers block no one), but with Hermes holding a rollback-journal file
    takes the last check on record instead: reading every page would hold Hermes's commits."""
    checks = []
    monkeypatch.setattr(survey, "scan_folders", lambda fs, check, budget: checks.append(check))
    hermes = Holder(1234, "hermes", "hermes gateway run")
    wal = Path(shutil.copytree(small_home, tmp_path / "wal", ignore=shutil.ignore_patterns("stats.db*")))
    delete = Path(shutil.copytree(wal, tmp_path / "delete"))
    conn = sqlite3.connect(delete / "state.db")
    assert conn.execute("PRAGMA journal_mode=DELETE").fetchone()[0] == "delete"
    conn.close()
    for home in (wal, delete):
        profile = select_profiles(home, env={})[0]
        record_check(profile.fs, "an older check", at=NOW - 5)
        survey.survey_profile(profile, now=NOW, holders=[hermes])
    now_wal, now_delete = (check() for check in checks)
    assert now_delete == Check("an older check", NOW - 5)
    assert now_wal.result == last_check(HomeFS(wal)).result == "ok" and now_wal.at > NOW  # recorded too


def test_guard_rows_record_a_protection_they_cannot_read(tmp_path):
    conn = sqlite3.connect(tmp_path / "state.db")
    conn.execute("CREATE TABLE compression_locks (session_id TEXT, expires_at REAL)")
    conn.execute("INSERT INTO compression_locks VALUES ('s', 1.0)")
    unreadable: list[str] = []
    tables = {"compression_locks": ["session_id", "expires_at"], "gone": ["a"]}
    info = schema(tables)
    columns = ("session_id", "holder", "expires_at")
    assert survey._guard_rows(conn, info, "compression_locks", columns, unreadable) == []
    assert survey._guard_rows(conn, info, "compression_locks", ("session_id", "expires_at"), unreadable) == [
        ("s", 1.0)
    ]
    assert survey._guard_rows(conn, info, "gone", ("a",), unreadable) == []  # listed, then dropped
    assert survey._guard_rows(conn, info, "absent", ("a",), unreadable) == []  # not in this schema: fine
    assert unreadable == ["compression_locks (unexpected columns)", "gone (no such table: gone)"]


PROTECTION_TABLES = (
    "CREATE TABLE compression_locks (session_id TEXT, holder TEXT, expires_at REAL)",
    "INSERT INTO compression_locks VALUES ('s1', 'h1', 100.0)",
    "CREATE TABLE session_turn_leases (conversation_id TEXT, holder TEXT, expires_at REAL)",
    "INSERT INTO session_turn_leases VALUES ('root', 'h2', 200.0)",
    "CREATE TABLE state_meta (key, value TEXT)",
    """INSERT INTO state_meta VALUES ('last_auto_prune', '1700000000'), ('loop:s5', '{"status": "active"}'),
       ('heartbeat:s6', ''), ('heartbeat:s7', '{"status": "done"}'), ('heartbeat:s9', '{cut'),
       ('loopy:s8', '{}'), (5, 'x'), ('loop:agent:main:1', '{}')""",
    "CREATE TABLE gateway_heartbeats (started_at, last_heartbeat)",
    "INSERT INTO gateway_heartbeats VALUES (10.0, 20.0), (NULL, 'junk')",
    "CREATE TABLE telegram_dm_topic_bindings (session_id TEXT)",
    "INSERT INTO telegram_dm_topic_bindings VALUES ('t1'), (NULL), ('')",
    "CREATE TABLE async_delegations (origin_session, origin_session_id, parent_session_id, delivery_state)",
    """INSERT INTO async_delegations VALUES ('d1', NULL, NULL, 'pending'), (NULL, 'd2', NULL, 'queued'),
       (NULL, NULL, 'd3', 'running'), ('x1', 'x2', 'x3', 'delivered'), ('y1', 'y2', 'y3', 'failed'),
       ('z1', 'z2', 'z3', 'expired')""",
)


def test_read_protections_reads_each_table_exactly(tmp_path):
    conn, info = database(tmp_path, *PROTECTION_TABLES)
    taken = survey.Survey(None, info, NOW)
    around = survey._read_protections(conn, taken)
    assert around == survey._Around(
        routed=set(),
        locks={"s1": ("h1", 100.0)},
        turns={"root": ("h2", 200.0)},
        topic={"t1"},
        pending={"d1", "d2", "d3"},
        last_auto_prune=1_700_000_000.0,
        scheduled={"s5", "s9", "agent:main:1"},  # active or unreadable: live, as Hermes counts them
    )
    assert taken.heartbeats == [(10.0, 20.0), (0.0, 0.0)] and taken.unreadable == []


def test_read_protections_of_tables_without_their_columns(tmp_path):
    conn, info = database(
        tmp_path,
        "CREATE TABLE state_meta (key TEXT)",
        "CREATE TABLE async_delegations (origin_session TEXT)",
        "INSERT INTO async_delegations VALUES ('d1')",
        "CREATE TABLE session_turn_leases (conversation_id TEXT)",
        "CREATE TABLE gateway_heartbeats (started_at REAL)",
        "CREATE TABLE compression_locks (session_id TEXT)",
    )
    taken = survey.Survey(None, info, NOW)
    around = survey._read_protections(conn, taken)
    assert (around.last_auto_prune, around.scheduled, around.pending, around.turns) == (
        None,
        set(),
        set(),
        {},
    )
    assert taken.unreadable == [
        "compression_locks (unexpected columns)",
        "session_turn_leases (unexpected columns)",
        "gateway_heartbeats (unexpected columns)",
    ]
    (tmp_path / "bare").mkdir()
    conn, info = database(tmp_path / "bare", "CREATE TABLE sessions (id TEXT)")  # no state_meta at all
    assert survey._read_protections(conn, survey.Survey(None, info, NOW)).last_auto_prune is None


def test_each_session_row_carries_its_columns_and_statistics(tmp_path):
    home = tmp_path / "home"
    parent = session("p", NOW - 7200, source="telegram", key="agent:main:telegram:dm:1", ended=False)
    child = session("c", NOW - 3600, end="reset")
    links = {"_delegate_from": "d", "_branched_from": "b", "_reset_from": "r"}
    child.update(kwargs={"parent_session_id": "p", "model_config": links}, title="child")
    demo.build_home(home, demo.DemoSpec(NOW, sessions=[parent, child]))
    conn = sqlite3.connect(home / "state.db")
    with conn:
        for column in ("pinned INTEGER", "hidden INTEGER", "auto_archived INTEGER", "last_activity_at REAL"):
            conn.execute(f"ALTER TABLE sessions ADD COLUMN {column}")
        conn.execute(
            "UPDATE sessions SET archived = 1, pinned = 1, hidden = 1, auto_archived = 2,"
            " last_activity_at = ?, input_tokens = 5, output_tokens = 6,"
            " actual_cost_usd = 0.5, estimated_cost_usd = 0.25,"
            " handoff_state = 'done', profile_name = 'work', message_count = 7 WHERE id = 'c'",
            (NOW - 60,),
        )
        conn.execute("UPDATE sessions SET message_count = 'x', input_tokens = NULL WHERE id = 'p'")
        conn.execute("UPDATE messages SET timestamp = '2026-01-01' WHERE role = 'user'")  # text: odd stamps
        conn.execute("CREATE TABLE session_turn_leases (conversation_id TEXT, holder TEXT, expires_at REAL)")
        dead = f"pid={GONE_PID}:pidns={_own_pid_namespace()}"  # a holder proven gone
        conn.execute("INSERT INTO session_turn_leases VALUES ('p', ?, ?)", (dead, NOW + 30))
        conn.execute(
            "INSERT INTO compression_locks (session_id, holder, acquired_at, expires_at)"
            " VALUES ('c', 'h', ?, ?)",
            (NOW, NOW + 60),
        )
    conn.close()
    taken = survey.survey_database(select_profiles(home, env={})[0], now=NOW)
    assert (taken.message_total, taken.odd_message_stamps) == (4, (2, 0, 0))
    got = {
        sid: replace(row, first_message_at=None, last_message_at=None) for sid, row in taken.sessions.items()
    }
    stats = dict(messages=2, content_bytes=18, recent_messages=(2, 2), recent_bytes=(18, 18))
    assert got == {
        "p": SessionRow(
            **dict(id="p", source="telegram", started_at=NOW - 7200, session_key="agent:main:telegram:dm:1"),
            **stats,
            first_message_id=1,
            **dict(turn_lease_expires_at=NOW + 30, turn_lease_holder_dead=True),  # held by its lineage's root
            peer=Peer("telegram", "", "", "", ""),
        ),
        "c": SessionRow(
            **dict(id="c", source="cli", started_at=NOW - 3600, ended_at=NOW - 1800, end_reason="reset"),
            **dict(parent_id="p", title="child", archived=True, pinned=True, hidden=True, auto_archived=True),
            **dict(delegate_from="d", branched_from="b", reset_from="r"),
            **stats,
            first_message_id=3,
            last_activity_at=NOW - 60,  # a delegate: a lineage of its own, not under p's turn lease
            **dict(input_tokens=5, output_tokens=6, cost_usd=0.5, lease_expires_at=NOW + 60),
            **dict(handoff_state="done", message_count=7, profile_name="work"),
            peer=Peer("cli", "", "", "", ""),
        ),
    }


def test_what_beside_the_database_could_not_be_read_is_said(small_home, tmp_path):
    home = Path(shutil.copytree(small_home, tmp_path / "home"))
    (home / "sessions").mkdir(exist_ok=True)
    (home / "sessions" / "sessions.json").write_text("[1]")
    write_leases(home, b"{cut")
    (home / "keeper" / "kept.json").write_text("{cut")
    conn = sqlite3.connect(home / "state.db")
    with conn:
        conn.execute(
            "INSERT OR REPLACE INTO state_meta (key, value) VALUES ('last_auto_prune', ?)", (NOW - 99,)
        )
    conn.close()
    other = home / "profiles" / "other" / "sessions" / "sessions.json"  # a multiplexed gateway's mirror
    other.parent.mkdir(parents=True)
    other.write_text("{cut")
    taken = survey.survey_database(select_profiles(home, env={})[0], now=NOW)
    assert taken.routing_problem == (
        f"{home / 'sessions' / 'sessions.json'} is not a JSON object; {other} unreadable (JSONDecodeError)"
    )
    assert taken.unreadable == ["runtime/active_sessions.json", "keeper/kept.json is not JSON"]
    assert (taken.auto_prune.last_run, taken.auto_prune.origin) == (
        NOW - 99,
        "Hermes's default for schema 22",
    )
    leased, kept = sorted(taken.sessions)[:2]
    write_leases(home, [{"session_id": leased, "pid": os.getpid()}])
    (home / "keeper" / "kept.json").write_text(json.dumps({kept: NOW + 5}))
    (home / "sessions" / "sessions.json").unlink()
    other.unlink()
    again = survey.survey_database(select_profiles(home, env={})[0], now=NOW)
    assert (again.routing_problem, again.unreadable) == (None, [])
    assert again.sessions[leased].runtime_lease and again.sessions[kept].restored_until == NOW + 5
    assert not taken.sessions[leased].runtime_lease and taken.sessions[kept].restored_until is None


def test_add_session_reads_odd_rows_and_says_which_may_be_routed():
    """One row at a time, as the survey hands it on: no source, a start that is not a time, a
    schema without chat identity; and, with the routing mirror unreadable, the rows a gateway
    could route to (a key, or a messaging source) kept as maybe routed."""
    around = survey._Around(set(), {}, {}, set(), set(), None, leased=set(), scheduled={"k"})
    old = survey.Survey(None, schema({"sessions": ["id", "source"]}), NOW, routing_problem="unreadable")
    msgs = survey.Stats(messages=3, inactive=1, first_at=NOW - 50, last_at=NOW - 5, first_id=9)
    rows = {
        "k": dict(OLDEST, id="k", source=None, started_at="junk", session_key="agent:main:cli:1"),
        "t": dict(OLDEST, id="t", source="telegram"),
        "c": dict(OLDEST, id="c", source="cli"),
    }
    for row in rows.values():
        survey._add_session(old, row, msgs, around)
    k, t, c = (old.sessions[i] for i in "ktc")
    assert (k.source, k.started_at, k.peer, k.live_schedule, t.live_schedule) == (
        "unknown",
        0.0,
        None,
        True,
        False,
    )
    assert (k.inactive_messages, k.first_message_at, k.last_message_at, k.first_message_id) == (
        1,
        NOW - 50,
        NOW - 5,
        9,
    )
    assert [k.maybe_routed, t.maybe_routed, c.maybe_routed] == [True, True, False]
    assert old.message_total == 9
    readable = survey.Survey(None, schema({"sessions": ["id", "source", "chat_id"]}), NOW)
    survey._add_session(readable, rows["t"], msgs, around)
    assert not readable.sessions["t"].maybe_routed and readable.sessions["t"].peer == Peer(
        "telegram", "", "", "", ""
    )


def test_recovery_fences_are_set_on_the_rows_a_later_reset_passes_over():
    chat = Peer("telegram", "u", "c", "dm", "")
    rows = [
        SessionRow("a", "telegram", 100.0, session_key="K"),  # fenced by b's reset of its key
        SessionRow("b", "telegram", 200.0, ended_at=300.0, end_reason="session_reset", session_key="K"),
        SessionRow("c", "telegram", 100.0, peer=chat),  # fenced by d's reset of its chat
        SessionRow("d", "telegram", 150.0, ended_at=400.0, end_reason="session_reset", peer=chat),
    ]
    later = {"a": (True, False), "b": (True, False), "c": (False, True), "d": (False, True)}  # the resets too
    for version, fenced in ((31, later), (30, {})):
        taken = survey.Survey(None, SchemaInfo("state.db", "ok", schema_version=version), NOW)
        taken.sessions = {r.id: r for r in rows}
        survey._add_recovery_fences(taken)
        assert {
            sid: (r.fenced_by_key, r.fenced_by_chat)
            for sid, r in taken.sessions.items()
            if r.fenced_by_key or r.fenced_by_chat
        } == fenced
        assert [
            replace(r, fenced_by_key=False, fenced_by_chat=False) for r in taken.sessions.values()
        ] == rows
