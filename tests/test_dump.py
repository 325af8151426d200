"""The off-host dump of state.db (``backup/dump.py``): loads back to the same rows, values and
search results, on awkward values and on every real Hermes's schema; refuses what it cannot
rebuild, and a dump cut short or altered."""

from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path

import pytest

from hermes_keeper import demo
from hermes_keeper.backup import dump
from hermes_keeper.errors import KeeperError
from tests.hermes_env import IOT, Hermes

ODD_TEXT = ["it's", "a\x00json:{}", "line\nline;\n;", "ünï 字", "", "-- not a comment"]
ODD_REALS = [1790440909.334849, 1790440909.3348489, 0.1, 1e300, 5e-324, -2.5, 3.0, 2.0**70, float("inf")]


def odd_database(path: Path) -> None:
    c = sqlite3.connect(path, isolation_level=None)
    c.executescript(
        '''
        PRAGMA auto_vacuum=INCREMENTAL; PRAGMA user_version=31; PRAGMA application_id=123456;
        CREATE TABLE sessions (id TEXT PRIMARY KEY, started_at REAL, note);
        CREATE TABLE messages (id INTEGER PRIMARY KEY AUTOINCREMENT, session_id TEXT, content TEXT,
            ts REAL, raw BLOB, n INTEGER, twice INTEGER GENERATED ALWAYS AS (n * 2) VIRTUAL);
        CREATE TABLE "odd ""name""" (k TEXT PRIMARY KEY, v) WITHOUT ROWID;
        CREATE INDEX messages_session ON messages(session_id);
        CREATE VIRTUAL TABLE messages_fts USING fts5(content);
        CREATE VIEW src AS SELECT id, content FROM messages WHERE session_id != 'hidden';
        CREATE VIRTUAL TABLE ext_fts USING fts5(content, content='src', content_rowid='id',
            tokenize='trigram');
        CREATE TRIGGER messages_ai AFTER INSERT ON messages BEGIN
            INSERT INTO messages_fts(rowid, content) VALUES (new.id, new.content);
            INSERT INTO ext_fts(rowid, content) VALUES (new.id, new.content);
        END;
        INSERT INTO messages_fts(messages_fts, rank) VALUES ('automerge', 2);
        '''
    )
    for i, sid in enumerate(["s2", "s1", "hidden", "s'4"]):
        c.execute("INSERT INTO sessions VALUES (?, ?, ?)", (sid, 1790440000.0 + i / 3, None))
    c.execute("DELETE FROM sessions WHERE id = 's1'")  # a gap in the implicit rowids
    rows = [
        (t, r, b, n)
        for t, r, b, n in zip(ODD_TEXT, ODD_REALS, [b"\x00\xff", None] * 3, [2**62, -1] * 3, strict=False)
    ]
    for t, r, b, n in rows * 3:
        c.execute(
            "INSERT INTO messages (session_id, content, ts, raw, n) VALUES ('s2', ?, ?, ?, ?)", (t, r, b, n)
        )
    c.execute("UPDATE messages SET session_id = 'hidden' WHERE id % 5 = 0")
    c.execute(
        "INSERT INTO messages (session_id, content) VALUES ('s2', CAST(X'6869ff' AS TEXT))"
    )  # bad UTF-8
    c.execute("DELETE FROM messages WHERE id > 15")  # sqlite_sequence above the highest id
    c.execute('''INSERT INTO "odd ""name""" VALUES ('b', 1.5), ('a', X'00')''')
    c.execute("PRAGMA journal_mode=WAL")
    c.close()


def everything(path: Path) -> dict:
    """Every row (rowid included) with each value's type, and what the indexes find."""
    c = sqlite3.connect(path)
    c.text_factory = bytes
    out = {}
    for (name,) in c.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE '%fts%'"):
        q = name.decode().replace('"', '""')
        cols = [r[1].decode() for r in c.execute(f'PRAGMA table_info("{q}")')]
        typed = ", ".join(f'"{x}", typeof("{x}")' for x in cols)
        rowid = "rowid, " if name != b'odd "name"' else ""
        out[name] = c.execute(f'SELECT {rowid}{typed} FROM "{q}" ORDER BY 1').fetchall()
    for q in (
        "SELECT rowid FROM messages_fts WHERE messages_fts MATCH 'line'",
        "SELECT rowid FROM ext_fts('son')",
    ):
        out[q] = c.execute(q + " ORDER BY rowid").fetchall()
    for p in ("user_version", "application_id", "auto_vacuum", "journal_mode", "page_size"):
        out[p] = c.execute(f"PRAGMA {p}").fetchone()
    out["schema"] = sorted(c.execute("SELECT type, name, sql FROM sqlite_master").fetchall())
    out["config"] = c.execute("SELECT * FROM messages_fts_config ORDER BY k").fetchall()
    c.close()
    return out


def round_trip(db: Path, out: Path) -> tuple[bytes, dict]:
    """Dump ``db`` into a folder beside ``out``, load it into ``out``: the dump's files joined, the rows."""
    folder = out.with_suffix(".sql.d")
    dump.write_dump(db, folder)
    rows = dump.load_dump(folder, out)
    return b"".join(p.read_bytes() for p in sorted(folder.iterdir())), rows


def test_a_dump_loads_back_to_the_same_rows_values_and_search(tmp_path):
    odd_database(tmp_path / "state.db")
    text, rows = round_trip(tmp_path / "state.db", tmp_path / "new.db")
    assert everything(tmp_path / "new.db") == everything(tmp_path / "state.db")
    assert rows['"messages"'] == 15 and rows['"sessions"'] == 3
    # The indexes' own data is rebuilt, not carried: only their text and settings are in the dump.
    assert b"messages_fts_data" not in text and b"messages_fts_content" in text
    assert b'INSERT INTO "messages_fts"("messages_fts") VALUES(\'rebuild\')' in text


def test_a_dump_is_the_same_text_for_the_same_rows(tmp_path):
    """What restic dedups against: the same database gives the same bytes, and a new row changes
    only the end of its table's part."""
    odd_database(tmp_path / "state.db")
    first, _ = round_trip(tmp_path / "state.db", tmp_path / "a.db")
    again, _ = round_trip(tmp_path / "state.db", tmp_path / "b.db")
    assert first == again
    c = sqlite3.connect(tmp_path / "state.db")
    c.execute("INSERT INTO messages (session_id, content) VALUES ('s2', 'new')")
    c.commit()
    c.close()
    after, _ = round_trip(tmp_path / "state.db", tmp_path / "c.db")
    gone = set(first.splitlines()) - set(after.splitlines())
    assert {line.rsplit(b" ", 1)[0] if line.startswith(b"--") else line.split(b"(")[0] for line in gone} == {
        b'-- rows "messages"',
        b'-- rows "messages_fts_content"',
        b'INSERT INTO "sqlite_sequence"',
    }


@pytest.mark.parametrize(
    "sql",
    [
        "CREATE VIRTUAL TABLE t USING fts5(x, tokenize='cjk_unicode61')",  # Hermes's CJK index
        "CREATE VIRTUAL TABLE t USING fts5(x, content='')",  # contentless: nothing to rebuild from
        "CREATE VIRTUAL TABLE t USING rtree(id, a, b)",
    ],
)
def test_an_index_the_dump_cannot_rebuild_makes_the_push_send_pages(tmp_path, sql):
    c = sqlite3.connect(tmp_path / "state.db")
    if "cjk" in sql:  # no such tokenizer here: the schema row as a home with the library has it
        c.execute("PRAGMA writable_schema=ON")
        c.execute("INSERT INTO sqlite_master VALUES ('table', 't', 't', 0, ?)", (sql,))
    else:
        c.execute(sql)
    c.commit()
    c.close()
    assert not dump.dumpable(tmp_path / "state.db")
    with pytest.raises(KeeperError, match="send the page copy"):
        dump.write_dump(tmp_path / "state.db", tmp_path / "dump")


def test_a_dump_cut_short_altered_or_foreign_is_refused(tmp_path):
    odd_database(tmp_path / "state.db")
    text, _ = round_trip(tmp_path / "state.db", tmp_path / "ok.db")
    lines = text.splitlines(True)
    one_row = next(i for i, line in enumerate(lines) if line.startswith(b'INSERT INTO "messages"'))
    cases = {
        "cut short": text[: len(text) // 2],
        "rows in": b"".join(lines[:one_row] + lines[one_row + 1 :]),
        "not a hermes-keeper": b"CREATE TABLE x(y);\n",
        "before its COMMIT": b"".join(line for line in lines if line != b"COMMIT;\n"),
    }
    for i, (why, bad) in enumerate(cases.items()):
        (tmp_path / f"bad{i}.sql").write_bytes(bad)
        with pytest.raises(KeeperError, match=why):
            dump.load_dump(tmp_path / f"bad{i}.sql", tmp_path / f"bad{i}.db")
    with pytest.raises(KeeperError, match="loads only into a new file"):
        dump.load_dump(tmp_path / "ok.sql.d", tmp_path / "ok.db")
    link = tmp_path / "linked.sql.d"
    link.mkdir()
    (link / "0-head.sql").symlink_to(tmp_path / "ok.sql.d" / "0-head.sql")
    with pytest.raises(KeeperError, match="cannot read this part"):
        dump.load_dump(link, tmp_path / "linked.db")
    odd = tmp_path / "odd.sql.d"
    odd.mkdir()
    os.mkfifo(odd / "0-head.sql")  # a FIFO where a part should be: refused, never waited on
    with pytest.raises(KeeperError, match="cannot read this part"):
        dump.load_dump(odd, tmp_path / "odd.db")


@pytest.mark.parametrize("spec", ["0.13.0", "0.19.0", IOT])
def test_every_hermes_reads_a_loaded_dump_as_its_own(tmp_path, spec):
    """A home built by each real Hermes, dumped and loaded: Hermes sees the same sessions and
    messages, its FTS indexes pass their integrity check, and its own search finds the same rows."""
    hermes = Hermes(spec)
    home, new = tmp_path / "home", tmp_path / "new"
    home.mkdir()
    new.mkdir()
    sessions = demo.generate(time.time(), sessions=12).sessions
    if spec == "0.13.0":  # schema 11: no session_key and the other columns the kwargs name
        sessions = [{k: v for k, v in s.items() if k != "kwargs"} for s in sessions]
    hermes.run(home, [{"op": "build", "sessions": sessions}])
    round_trip(home / "state.db", new / "state.db")
    ops = [
        {"op": "query", "sql": "SELECT id, session_id, role, content, timestamp FROM messages ORDER BY id"},
        {
            "op": "query",
            "sql": "SELECT id, source, started_at, ended_at, message_count FROM sessions ORDER BY id",
        },
        {
            "op": "query",
            "sql": "SELECT rowid FROM messages_fts WHERE messages_fts MATCH 'the' ORDER BY rowid",
        },
        {"op": "fts_integrity"},
    ]
    before, after = hermes.run(home, ops), hermes.run(new, ops)
    assert after == before and len(before[0]) > 50 and before[2]
    assert set(after[3].values()) == {"ok"}


def small_home_db(path: Path, sessions: list[tuple[str, str, float]]) -> None:
    c = sqlite3.connect(path, isolation_level=None)
    c.executescript(
        """
        CREATE TABLE sessions (id TEXT PRIMARY KEY, source TEXT, started_at REAL);
        CREATE TABLE messages (
            id INTEGER PRIMARY KEY AUTOINCREMENT, session_id TEXT, content TEXT, timestamp REAL
        );
        CREATE VIRTUAL TABLE messages_fts USING fts5(content);
        CREATE TRIGGER ai AFTER INSERT ON messages BEGIN
            INSERT INTO messages_fts(rowid, content) VALUES (new.id, new.content);
        END;
        CREATE TRIGGER ad AFTER DELETE ON messages BEGIN DELETE FROM messages_fts WHERE rowid = old.id; END;
        """
    )
    for sid, source, t in sessions:
        c.execute("INSERT INTO sessions VALUES (?, ?, ?)", (sid, source, t))
        for i in range(3):
            c.execute(
                "INSERT INTO messages (session_id, content, timestamp) VALUES (?, ?, ?)",
                (sid, f"{sid} {i}", t + i),
            )
    c.close()


def test_a_night_changes_few_files_of_the_dump(tmp_path):
    """A prune takes a source's sessions idle longest: their day's file goes whole; a day's new
    sessions make a new file; every other day's file is byte for byte what restic already holds."""
    day = 86400.0
    t0 = 1_790_000_000.0
    db = tmp_path / "state.db"
    small_home_db(db, [(f"{src}{d}", src, t0 + d * day) for d in range(5) for src in ("cli", "cron")])
    dump.write_dump(db, tmp_path / "a")
    c = sqlite3.connect(db)
    c.execute("DELETE FROM messages WHERE session_id = 'cron0'")  # the prune
    c.execute("DELETE FROM sessions WHERE id = 'cron0'")
    c.execute("INSERT INTO sessions VALUES ('cli5', 'cli', ?)", (t0 + 5 * day,))  # the day
    c.execute(
        "INSERT INTO messages (session_id, content, timestamp) VALUES ('cli5', 'new', ?)", (t0 + 5 * day,)
    )
    c.commit()
    c.close()
    dump.write_dump(db, tmp_path / "b")
    a = {p.name: p.read_bytes() for p in (tmp_path / "a").iterdir()}
    b = {p.name: p.read_bytes() for p in (tmp_path / "b").iterdir()}
    assert all(p.stat().st_mode & 0o777 == 0o600 for p in (tmp_path / "b").iterdir())
    gone, new = set(a) - set(b), set(b) - set(a)
    assert [n[: len("2-2026-09-21T14-cron")] for n in gone] == ["2-2026-09-21T14-cron"]
    assert [n[: len("2-2026-09-26T14-cli")] for n in new] == ["2-2026-09-26T14-cli"]
    changed = {n for n in set(a) & set(b) if a[n] != b[n]}
    assert changed == {"1-tables.sql", "3-tail.sql"}  # the sessions table, the row counts
    assert len([n for n in b if n.startswith("2-")]) == 10
    assert dump.load_dump(tmp_path / "b", tmp_path / "b.db")['"messages"'] == 28
