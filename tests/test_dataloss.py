"""Nothing lost when ids come back: reused session ids, reused message ids, NUL in an id.

Each case was first a loss (issue 13); see docs/reliability.md for the matrix.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from importlib.resources import files

import jsonschema
import pytest
from click.testing import CliRunner

from hermes_keeper import demo
from hermes_keeper.archive.store import ARCHIVE_NAME, LAYOUT, PRUNED, Archive
from hermes_keeper.cli import main
from tests.conftest import tree_digest

DAY = 86400.0
REPORT_SCHEMA = json.loads(files("hermes_keeper").joinpath("schemas/report.json").read_text())
NOW = time.time()


def _spec(sid: str, words: str, age_days: float = 120, n: int = 3) -> dict:
    start = NOW - age_days * DAY
    msgs = [["user" if i % 2 == 0 else "assistant", f"{words} {i}", start + 10 * (i + 1)] for i in range(n)]
    return {"id": sid, "source": "cli", "started_at": start, "ended_at": start + 100, "messages": msgs}


def _home(tmp_path, *specs) -> object:
    home = tmp_path / "home"
    demo.build_home(home, demo.DemoSpec(NOW, sessions=[_spec("fresh", "keepme", age_days=0.1), *specs]))
    return home


def _cli(*args):
    return CliRunner().invoke(main, list(args))


def _run(home):
    res = _cli("run", "--home", str(home), "--quiet")
    assert res.exit_code == 0, res.output
    return res


def _bring_back(db, sid: str, words: str, ids: list[int] | None = None, n: int = 3) -> None:
    """A session with this id appears again with other content (an import, a client-chosen id,
    or a backup restore that hands the same message ids out again)."""
    conn = sqlite3.connect(db, isolation_level=None)
    start = NOW - 100 * DAY
    conn.execute(
        "INSERT INTO sessions (id, source, started_at, ended_at, end_reason, message_count)"
        " VALUES (?, 'cli', ?, ?, 'user_exit', ?)",
        (sid, start, start + 100, n),
    )
    for i in range(n):
        conn.execute(
            "INSERT INTO messages (id, session_id, role, content, timestamp) VALUES (?, ?, 'user', ?, ?)",
            (ids[i] if ids else None, sid, f"{words} {i}", start + 10 * (i + 1)),
        )
    conn.close()


def _contents(payload: dict) -> list[str]:
    return [m["content"] for m in payload["messages"]]


def test_reused_session_id_gets_its_own_entry_and_every_command_sees_both(tmp_path):
    home = _home(tmp_path, _spec("dup", "walrus"))
    _run(home)
    _bring_back(home / "state.db", "dup", "narwhal")
    _run(home)
    with Archive.for_home(home / "keeper", create=False) as store:
        entries = list(store.entries("WHERE session_id = 'dup' ORDER BY entry"))
        assert [e.state for e in entries] == [PRUNED, PRUNED]
        old, new = (store.get_entry(e.entry) for e in entries)
        assert _contents(old) == ["walrus 0", "walrus 1", "walrus 2"]
        assert _contents(new) == ["narwhal 0", "narwhal 1", "narwhal 2"]
        assert store.get("dup") == new
    first, second = (f"#{e.entry}" for e in entries)

    listed = json.loads(_cli("archive", "list", "--home", str(home), "--json").stdout)["profiles"][0][
        "sessions"
    ]
    assert [(r["session_id"], r["entry"]) for r in listed if r["session_id"] == "dup"] == [
        ("dup", int(second[1:])),
        ("dup", int(first[1:])),
    ]  # newest first
    table = _cli("archive", "list", "--home", str(home)).output
    assert f"dup {first}" in table and f"dup {second}" in table
    assert "narwhal 0" in _cli("archive", "show", "dup", "--home", str(home)).output
    assert "walrus 0" in _cli("archive", "show", first, "--home", str(home)).output
    hits = json.loads(_cli("archive", "search", "walrus", "--home", str(home), "--json").stdout)["profiles"][
        0
    ]
    assert hits["total"] == 1
    verified = json.loads(_cli("archive", "verify", "--home", str(home), "--json").stdout)["profiles"][0]
    assert verified["ok"] and verified["checked"] == 2

    out = tmp_path / "export.jsonl"
    assert _cli("archive", "export", "--home", str(home), "-o", str(out)).exit_code == 0
    (line,) = out.read_text().splitlines()  # Hermes imports one session per id: the newest
    assert [m["content"] for m in json.loads(line)["messages"]] == ["narwhal 0", "narwhal 1", "narwhal 2"]
    assert _cli("archive", "export", first, "--home", str(home), "-o", str(out)).exit_code == 0
    (line,) = out.read_text().splitlines()
    assert json.loads(line)["messages"][0]["content"] == "walrus 0"

    res = _cli("archive", "restore", first, "--home", str(home))
    assert res.exit_code == 0, res.output
    conn = sqlite3.connect(home / "state.db")
    back = [r[0] for r in conn.execute("SELECT content FROM messages WHERE session_id = 'dup' ORDER BY id")]
    conn.close()
    assert back == ["walrus 0", "walrus 1", "walrus 2"]


def test_reused_message_ids_after_a_backup_restore_are_archived_before_deleting(tmp_path):
    home = _home(tmp_path, _spec("again", "original"))
    conn = sqlite3.connect(home / "state.db")
    ids = [r[0] for r in conn.execute("SELECT id FROM messages WHERE session_id = 'again' ORDER BY id")]
    conn.close()
    _run(home)
    # The same session id and the very same message ids, other content (a restored backup).
    _bring_back(home / "state.db", "again", "secondlife", ids=ids)
    _run(home)
    with Archive.for_home(home / "keeper", create=False) as store:
        payloads = [
            store.get_entry(e.entry) for e in store.entries("WHERE session_id = 'again' ORDER BY entry")
        ]
    assert [_contents(p) for p in payloads] == [
        ["original 0", "original 1", "original 2"],
        ["secondlife 0", "secondlife 1", "secondlife 2"],
    ]
    assert [m["id"] for m in payloads[1]["messages"]] == ids


def test_an_interrupted_archive_restore_still_reuses_its_entry(tmp_path):
    """A session back in state.db only in part (restore interrupted) is not a new version."""
    home = _home(tmp_path, _spec("half", "partial", n=4))
    _run(home)
    with Archive.for_home(home / "keeper", create=False) as store:
        (entry,) = store.entries("WHERE session_id = 'half'")
        full = store.get_entry(entry.entry)
    conn = sqlite3.connect(home / "state.db", isolation_level=None)
    s = full["session"]
    conn.execute(
        "INSERT INTO sessions (id, source, started_at, ended_at) VALUES (?,?,?,?)",
        (s["id"], s["source"], s["started_at"], s["ended_at"]),
    )
    m = full["messages"][0]
    conn.execute(
        "INSERT INTO messages (id, session_id, role, content, timestamp) VALUES (?,?,?,?,?)",
        (m["id"], m["session_id"], m["role"], m["content"], m["timestamp"]),
    )
    conn.close()
    assert _cli("archive", "restore", "half", "--home", str(home)).exit_code == 0
    with Archive.for_home(home / "keeper", create=False) as store:
        assert [e.entry for e in store.entries("WHERE session_id = 'half'")] == [entry.entry]
        assert store.get("half") == full


_LAYOUT_1 = """
CREATE TABLE archive_meta (key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE archived_sessions (
    session_id TEXT PRIMARY KEY, source TEXT NOT NULL, title TEXT, parent_session_id TEXT,
    started_at REAL, ended_at REAL, last_activity REAL, message_count INTEGER NOT NULL,
    raw_bytes INTEGER NOT NULL, stored_bytes INTEGER NOT NULL, sha256 TEXT NOT NULL,
    schema_version INTEGER, format INTEGER NOT NULL, reason TEXT, state TEXT NOT NULL,
    archived_at REAL NOT NULL, payload BLOB NOT NULL
);
"""


def test_a_layout_1_archive_is_migrated_in_place(tmp_path):
    home = _home(tmp_path, _spec("a1", "alpha"), _spec("b1", "beta", age_days=140))
    _run(home)
    path = home / "keeper" / ARCHIVE_NAME
    with Archive(path, create=False) as store:
        before = {e.session_id: (e.sha256, store.get_entry(e.entry)) for e in store.entries()}
        rows = (
            store.files[0]
            .conn.execute(
                "SELECT session_id, source, title, parent_session_id, started_at, ended_at, last_activity,"
                " message_count, raw_bytes, stored_bytes, sha256, schema_version, format, reason, state,"
                " archived_at, payload FROM archived_sessions"
            )
            .fetchall()
        )
    path.unlink()
    old = sqlite3.connect(path)
    old.executescript(_LAYOUT_1)
    old.executemany(f"INSERT INTO archived_sessions VALUES ({','.join('?' * 17)})", rows)
    old.commit()
    old.close()
    with Archive(path, create=False) as store:
        assert store.files[0].conn.execute(
            "SELECT value FROM archive_meta WHERE key = 'layout'"
        ).fetchone() == (str(LAYOUT),)
        after = {e.session_id: (e.sha256, store.get_entry(e.entry)) for e in store.entries()}
    assert after == before
    _bring_back(home / "state.db", "a1", "alphatwo")
    _run(home)  # a migrated archive takes a second entry of the same id
    with Archive(path, create=False) as store:
        assert len(list(store.entries("WHERE session_id = 'a1'"))) == 2


def test_a_nul_in_a_session_id_is_left_untouched(tmp_path):
    home = _home(tmp_path, _spec("nul\x00id", "zeroed"))
    before = _session_rows(home)
    res = _cli("plan", "--home", str(home), "-v", "--json")
    decisions = {d["session_id"]: d for d in json.loads(res.stdout)["profiles"][0]["decisions"]}
    assert decisions["nul\x00id"]["action"] == "keep" and "NUL" in decisions["nul\x00id"]["reason"]
    _run(home)
    _run(home)
    assert _session_rows(home)["nul\x00id"] == before["nul\x00id"]
    journal = [json.loads(x) for x in (home / "keeper" / "journal.jsonl").read_text().splitlines()]
    assert not any(x.get("pruned") for x in journal if x["action"] == "summary")


def _session_rows(home) -> dict[str, list]:
    conn = sqlite3.connect(home / "state.db")
    try:
        out: dict[str, list] = {}
        for sid, content in conn.execute(
            "SELECT s.id, m.content FROM sessions s LEFT JOIN messages m ON m.session_id = s.id ORDER BY m.id"
        ):
            out.setdefault(sid, []).append(content)
        return out
    finally:
        conn.close()


def _fk_table(home, outside):
    conn = sqlite3.connect(home / "state.db")
    conn.execute("CREATE TABLE my_notes (session_id TEXT REFERENCES sessions(id), note TEXT)")
    conn.execute("INSERT INTO my_notes VALUES ('old1', 'mine')")
    conn.commit()
    conn.close()


def _archive_text(home, outside):
    (home / "keeper" / ARCHIVE_NAME).write_text("not an archive\n" * 40)


def _archive_symlink(home, outside):
    outside.write_text("somebody else's notes\n" * 40)
    (home / "keeper" / ARCHIVE_NAME).symlink_to(outside)


def _archive_newer(home, outside):
    conn = sqlite3.connect(home / "keeper" / ARCHIVE_NAME)
    conn.executescript(
        "CREATE TABLE archive_meta (key TEXT PRIMARY KEY, value TEXT);"
        "CREATE TABLE archived_sessions (entry INTEGER PRIMARY KEY);"
        f"INSERT INTO archive_meta VALUES ('layout', '{LAYOUT + 1}');"
    )
    conn.close()


@pytest.mark.parametrize("spoil", [_fk_table, _archive_text, _archive_symlink, _archive_newer])
def test_checks_before_the_first_change(tmp_path, spoil):
    """A zombie, a prunable session and a stale dump wait; a bad table or archive is found first."""
    zombie = {**_spec("zombie1", "idle", age_days=3), "ended_at": None}
    home = _home(tmp_path, _spec("old1", "old"), zombie)
    dump = home / "sessions" / "request_dump_gone_20250101_000000.json"
    dump.write_text("{}")
    os.utime(dump, (NOW - 30 * DAY, NOW - 30 * DAY))
    (home / "keeper").mkdir(mode=0o700)
    outside = tmp_path / "outside.txt"
    spoil(home, outside)
    before, theirs = tree_digest(home), outside.read_bytes() if outside.exists() else None
    res = _cli("run", "--home", str(home))
    assert res.exit_code == 2 and len(res.output.strip().splitlines()) == 1, res.output
    assert res.output.startswith("hermes-keeper: ")
    assert tree_digest(home) == before and dump.exists()
    assert not (home / "keeper" / "backups").exists() and not (home / "keeper" / "journal.jsonl").exists()
    assert (outside.read_bytes() if outside.exists() else None) == theirs


# --- when unsure, keep --------------------------------------------------------------------------


def test_unreadable_sessions_json_means_routing_unknown_and_keeps_what_could_be_routed(tmp_path):
    # No session_key: only sessions.json could say the gateway routes to it.
    zombie = {**_spec("tg_zombie", "hello", age_days=3), "source": "telegram", "ended_at": None}
    old_tg = {**_spec("tg_old", "bye", age_days=400), "source": "telegram"}
    home = _home(tmp_path, zombie, old_tg, _spec("cli_old", "plain"))
    (home / "sessions" / "sessions.json").write_text('{"agent:main:telegram:dm:7": {"session_id": "tg_zo')
    res = _cli("plan", "--home", str(home), "-v", "--json")
    (plan,) = json.loads(res.stdout)["profiles"]
    decisions = {d["session_id"]: d for d in plan["decisions"]}
    assert plan["zombies"] == []
    assert decisions["tg_old"]["action"] == "keep" and "routing unknown" in decisions["tg_old"]["reason"]
    assert decisions["cli_old"]["action"] == "prune"  # nothing could route to it
    assert any("routing unknown" in w for w in plan["warnings"])
    assert "routing unknown" in _cli("plan", "--home", str(home)).output
    report = _report(home)
    assert "sessions.json" in report["sessions"]["routing_unknown"]
    assert "routing unknown" in _cli("report", "--home", str(home)).output
    _run(home)
    assert {"tg_zombie", "tg_old"} <= set(_session_rows(home))
    conn = sqlite3.connect(home / "state.db")
    assert conn.execute("SELECT ended_at FROM sessions WHERE id = 'tg_zombie'").fetchone() == (None,)
    conn.close()


def test_sessions_dated_in_the_future_are_flagged_not_within_retention(tmp_path):
    home = _home(tmp_path, _spec("later", "tomorrow", age_days=-30))
    res = _cli("plan", "--home", str(home), "-v", "--json")
    (plan,) = json.loads(res.stdout)["profiles"]
    (d,) = [d for d in plan["decisions"] if d["session_id"] == "later"]
    assert (d["action"], d["reason"]) == ("keep", "dated in the future")
    assert {"code": "future", "reason": "dated in the future", "sessions": 1} in plan["keep_reasons"]
    assert any("in the future" in w for w in plan["warnings"])
    assert _report(home)["sessions"]["future"] == 1
    assert "1 session dated in the future" in _cli("report", "--home", str(home)).output


def _report(home) -> dict:
    """The JSON report, validated against its published schema."""
    res = _cli("report", "--json", "--home", str(home))
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    jsonschema.validate(data, REPORT_SCHEMA)
    (profile,) = data["profiles"]
    return profile


def test_an_empty_archive_file_is_set_up_by_the_next_run(tmp_path):
    """A first run killed between creating archive.db and its tables must not block every later run."""
    home = _home(tmp_path, _spec("e1", "empty"))
    (home / "keeper").mkdir(mode=0o700)
    (home / "keeper" / ARCHIVE_NAME).touch(mode=0o600)
    assert _cli("archive", "list", "--home", str(home)).exit_code == 2  # nothing to read yet, one line
    assert (home / "keeper" / ARCHIVE_NAME).stat().st_size == 0  # and reading it wrote nothing
    _run(home)
    with Archive.for_home(home / "keeper", create=False) as store:
        assert [e.session_id for e in store.entries()] == ["e1"]
