"""Schema introspection: classify without changing a byte."""

import sqlite3

import pytest

from hermes_keeper.errors import KeeperError
from hermes_keeper.sqlite import schema
from tests.conftest import tree_digest


def _hermes_like(path, version=22, started_at=1.7e9, ts=1.7e9):
    conn = sqlite3.connect(path)
    conn.executescript(
        "CREATE TABLE schema_version (version INTEGER NOT NULL);"
        "CREATE TABLE sessions (id TEXT PRIMARY KEY, source TEXT NOT NULL, started_at REAL NOT NULL,"
        " ended_at REAL, end_reason TEXT, parent_session_id TEXT, title TEXT);"
        "CREATE TABLE messages (id INTEGER PRIMARY KEY, session_id TEXT, role TEXT, content TEXT,"
        " timestamp REAL);"
    )
    conn.execute("INSERT INTO schema_version VALUES (?)", (version,))
    conn.execute("INSERT INTO sessions (id, source, started_at) VALUES ('a', 'cli', ?)", (started_at,))
    conn.execute(
        "INSERT INTO messages (session_id, role, content, timestamp) VALUES ('a','user','x',?)", (ts,)
    )
    conn.commit()
    conn.close()


@pytest.mark.parametrize(
    "version, status",
    [
        (11, schema.UNDERSTOOD),
        (22, schema.UNDERSTOOD),
        (30, schema.UNDERSTOOD),
        (31, schema.UNDERSTOOD),
        (32, schema.NEWER),
        (5, schema.FOREIGN),
    ],
)
def test_versions(tmp_path, version, status):
    db = tmp_path / "state.db"
    _hermes_like(db, version)
    info = schema.inspect(db)
    assert info.status == status
    assert info.schema_version == version


@pytest.mark.parametrize(
    "started_at, ts, fragment",
    [(1.7e12, 1.7e9, "milliseconds"), ("2026-01-01T00:00:00", 1.7e9, "text"), (1.7e9, 1.7e12, "messages")],
)
def test_timestamp_problems_block_actions(tmp_path, started_at, ts, fragment):
    db = tmp_path / "state.db"
    _hermes_like(db, started_at=started_at, ts=ts)
    info = schema.inspect(db)
    assert info.readable and not info.actionable
    assert any(fragment in p for p in info.timestamp_problems)
    with pytest.raises(KeeperError, match="not unix seconds"):
        info.require_actionable()


def test_bad_files_are_classified_and_untouched(tmp_path):
    cases = {}
    (tmp_path / "text").mkdir()
    (tmp_path / "text" / "state.db").write_text("hello, not sqlite at all" * 100)
    cases["text"] = "not a SQLite database"
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "state.db").write_bytes(b"")
    cases["empty"] = "empty"
    (tmp_path / "foreign").mkdir()
    c = sqlite3.connect(tmp_path / "foreign" / "state.db")
    c.execute("CREATE TABLE t (x)")
    c.commit()
    c.close()
    cases["foreign"] = "not a Hermes database"
    (tmp_path / "trunc").mkdir()
    _hermes_like(tmp_path / "trunc" / "state.db")
    big = sqlite3.connect(tmp_path / "trunc" / "state.db")
    big.execute("CREATE TABLE filler (b BLOB)")
    big.execute("INSERT INTO filler VALUES (zeroblob(200000))")
    big.commit()
    big.close()
    data = (tmp_path / "trunc" / "state.db").read_bytes()
    (tmp_path / "trunc" / "state.db").write_bytes(data[: len(data) // 2])
    cases["trunc"] = "malformed"  # or "truncated" when the schema pages survived
    before = tree_digest(tmp_path)
    for name, fragment in cases.items():
        info = schema.inspect(tmp_path / name / "state.db")
        assert not info.readable, name
        assert fragment in info.reason, (name, info.reason)
        assert "\n" not in info.reason
    assert tree_digest(tmp_path) == before


def test_real_hermes_schema_is_understood(tmp_path, hermes):
    hermes.call(tmp_path, "create_session", "s1", "cli")
    info = schema.inspect(tmp_path / "state.db")
    assert info.status == schema.UNDERSTOOD, info.reason
    assert info.schema_version == schema.HERMES_019_VERSION
    assert info.journal_mode == "wal"
    assert info.actionable


def test_a_rollback_journal_databases_timestamps_are_read_in_short_steps_and_counted_as_in_one(
    tmp_path, monkeypatch
):
    """A reader blocks Hermes's commits there: one scan of a big ``messages`` held them 0.5 s."""
    from hermes_keeper.sqlite import connect

    dbs = {}
    for mode in ("wal", "delete"):
        db = dbs[mode] = tmp_path / mode / "state.db"
        db.parent.mkdir()
        _hermes_like(db)
        conn = sqlite3.connect(db)
        assert conn.execute(f"PRAGMA journal_mode={mode}").fetchone()[0] == mode
        stamps = [1.7e12 if i % 97 == 0 else "2026-01-01" if i % 89 == 0 else 1.7e9 for i in range(1000)]
        conn.executemany(
            "INSERT INTO messages (session_id, role, content, timestamp) VALUES ('a', 'user', 'x', ?)",
            ((ts,) for ts in stamps),
        )
        conn.commit()
        conn.close()
    steps = []

    def counted(*args):
        for ids in connect.id_steps(*args):
            steps.append(ids)
            yield ids

    monkeypatch.setattr(connect, "FIRST_STEP_ROWS", 7)
    monkeypatch.setattr(connect, "STEP_READ_MS", 0.0)
    monkeypatch.setattr(schema, "id_steps", counted)
    whole = schema.inspect(dbs["wal"]).timestamp_problems
    assert steps == []  # WAL: readers block no one, one statement
    stepped = schema.inspect(dbs["delete"]).timestamp_problems
    assert stepped == whole and any("11 values look like milliseconds" in p for p in whole)
    assert any("11 values are text" in p for p in whole)
    assert len(steps) > 5 and steps[0] == (1, 7) and steps[-1][1] == 1001
