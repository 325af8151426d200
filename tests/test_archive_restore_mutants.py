"""archive/restore.py function by function, exactly: what comes back, what is refused and in which words.

The prompt rules, the plan (whole conversations, parents first, an address ``#N``, a session
partly back from an interrupted restore, damaged rows, rows this Hermes cannot take), the
writes step by step (hidden until the last, batches, links, retitles, ``OR IGNORE`` rows), the
journal records, Hermes's auto-prune that would undo a restore, and ``restore_sessions``.
Written against the mutants ``tools/mutate.py src/hermes_keeper/archive/restore.py`` left
(docs/testing.md). No Hermes: payloads as dicts, in-memory databases, and homes copied from
one schema-31 ``state.db`` (``tests/data/hermes_schema_31.sql``), written without syncs.
"""

from __future__ import annotations

import base64
import shutil
import sqlite3
from pathlib import Path
from types import SimpleNamespace

import pytest

from hermes_keeper.archive import restore
from hermes_keeper.archive.payload import FORMAT
from hermes_keeper.archive.store import ARCHIVED, PRUNED, RESTORED, Archive
from hermes_keeper.errors import KeeperError, TryLater
from hermes_keeper.journal import Journal, read_journal
from hermes_keeper.place import Place
from hermes_keeper.run.survey import SessionRow
from hermes_keeper.sqlite import writer
from hermes_keeper.sqlite.schema import SchemaInfo, inspect
from hermes_keeper.sqlite.walreset import WalGuard
from hermes_keeper.sqlite.writer import Budget
from tests import archive_home as ah
from tests import upstream_home as up

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


# ---- the planner, the writes, the resume and the refusals, on small hand-built homes (no Hermes) ----

T0 = 1_700_000_000.0


@pytest.fixture(scope="module")
def schema31(tmp_path_factory) -> Path:
    """One empty schema-31 state.db (as ``upstream_home.build`` makes it, without its sync a table),
    copied for each test."""
    path = tmp_path_factory.mktemp("schema31") / "state.db"
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA synchronous=OFF")
    conn.executescript(up.SCHEMA_31.read_text(encoding="utf-8"))
    conn.close()
    return path


@pytest.fixture
def home(tmp_path, schema31) -> Path:
    home = tmp_path / "home"
    (home / "keeper").mkdir(parents=True, mode=0o700)
    shutil.copyfile(schema31, home / "state.db")
    return home


def _payload(
    sid, ids, *, started=T0, parent=None, title=None, inactive=(), end="user_exit", **session
) -> dict:
    """An archived session as the keeper's prune stores it: its row, messages, usage and goal key."""
    return {
        "format": FORMAT,
        "schema_version": 31,
        "session": {
            "id": sid,
            "source": "cli",
            "started_at": started,
            "ended_at": started + 60,
            "end_reason": end,
            "parent_session_id": parent,
            "title": title,
            "archived": 0,
            **session,
        },
        "messages": [
            {
                "id": i,
                "session_id": sid,
                "role": "user",
                "content": f"text {i}",
                "timestamp": started + i,
                "active": 0 if i in inactive else 1,
            }
            for i in ids
        ],
        "model_usage": [{"session_id": sid, "model": "m1", "input_tokens": 5}],
        "state_meta": [{"key": f"goal:{sid}", "value": "g"}],
    }


def _archive(home, *payloads, state=PRUNED) -> list[int]:
    with Archive.for_home(home / "keeper", synchronous="OFF") as store:
        entries = store.put(payloads)
        store.set_state(entries, state)
    return entries


def _db(home) -> sqlite3.Connection:
    """state.db, written without syncs: the tests need no durability, the shared disk is slow."""
    conn = sqlite3.connect(home / "state.db")
    conn.execute("PRAGMA synchronous=OFF")
    return conn


def _sql(home, sql, params=()) -> list[tuple]:
    conn = _db(home)
    try:
        with conn:
            return conn.execute(sql, params).fetchall()
    finally:
        conn.close()


def _plan(home, ids) -> restore.RestorePlan:
    with Archive.for_home(home / "keeper", create=False) as store:
        return restore.plan_restore(store, home / "state.db", inspect(home / "state.db"), ids)


def _planned(plan) -> list[tuple]:
    """Each group: who asked, and each member (id, why, resumed ids, detached)."""
    return [
        (g.requested, [(m.session_id, m.why, m.existing, m.detach) for m in g.members]) for g in plan.groups
    ]


def test_fit_row_drops_only_empty_values_silently_and_titles_get_a_numbered_suffix():
    row = {"a": 1, "n": None, "z": 0, "e": "", "f": False, "x": "v", "y": 2}
    assert restore.fit_row(row, ["a", "n"]) == ({"a": 1, "n": None}, ["x", "y"])
    gen = restore.title_candidates("T")
    assert [next(gen) for _ in range(4)] == ["T", "T (restored)", "T (restored 2)", "T (restored 3)"]


def test_member_says_who_it_is_and_why_it_comes():
    p = _payload("s", [1, 2, 3])
    assert restore.Member(p, "parent", frozenset({1}), True, 7).to_dict() == {
        "session_id": "s",
        "why": "parent",
        "messages": 3,
        "resume": True,
        "detach": True,
    }
    m = restore.Member(p, restore.REQUESTED)
    assert (m.existing, m.detach, m.entry) == (None, False, 0)
    assert m.to_dict()["resume"] is False and m.to_dict()["detach"] is False


def test_target_reads_required_columns_rows_and_message_ids(tmp_path):
    db = tmp_path / "t.db"
    conn = sqlite3.connect(db)
    conn.executescript(
        "CREATE TABLE sessions (id TEXT PRIMARY KEY NOT NULL, source TEXT NOT NULL, started_at REAL NOT NULL,"
        " kind TEXT NOT NULL DEFAULT 'x', title TEXT);"
        "CREATE TABLE messages (id INTEGER PRIMARY KEY, session_id TEXT NOT NULL,"
        " role TEXT NOT NULL DEFAULT 'user', timestamp REAL);"
        "INSERT INTO sessions (id, source, started_at) VALUES ('a', 'cli', 5.0), ('b', 'cli', 6.0);"
    )
    taken = [1, 2, 500, 501, 1001, 1202]
    conn.executemany("INSERT INTO messages (id, session_id) VALUES (?, ?)", [(i, "b") for i in taken])
    conn.execute("INSERT INTO messages (id, session_id) VALUES (3000, 'a')")
    conn.commit()
    target = restore._Target(conn, inspect(db))
    assert target.required == {"sessions": {"source", "started_at"}, "messages": {"session_id"}}
    assert target.row("a") == (5.0,) and target.row("zz") is None
    assert target.message_ids("b") == set(taken) and target.message_ids("a") == {3000}
    assert target.message_ids("zz") == set()
    assert target.taken_message_ids(list(range(1, 1203))) == taken  # three chunks of 500
    assert target.taken_message_ids([7, 8]) == [] and target.taken_message_ids([]) == []
    conn.close()


def test_inactive_messages_go_back_only_where_hermes_has_the_notion():
    msgs = [{"id": 1, "active": 1}, {"id": 2, "active": 0}, {"id": 3}]
    p = {"messages": msgs}
    with_active = schema({"messages": ["id", "active"]})
    assert restore._restorable_messages(p, with_active) == msgs
    assert restore._restorable_messages(p, schema({"messages": ["id"]})) == [msgs[0], msgs[2]]


def test_a_conversation_comes_back_whole_parents_first_with_each_members_reason(home):
    _archive(
        home,
        _payload("p", [1, 2], end="compression", title="Walrus"),
        _payload("c", [3], started=T0 + 100, parent="p"),
        _payload("d", [4], started=T0 + 50, parent="c", model_config='{"_delegate_from": "c"}'),
        _payload("other", [5], started=T0 - 100),
    )
    plan = _plan(home, ["c"])
    assert _planned(plan) == [
        (
            ["c"],
            [("p", "parent", None, False), ("c", "requested", None, False), ("d", "delegate", None, False)],
        )
    ]
    assert plan.refused == {} and plan.warnings == []
    assert [m.entry for m in plan.groups[0].members] == [1, 2, 3]
    both = _plan(home, ["d", "p", "d", "other"])  # oldest first; one group for a conversation asked twice
    assert _planned(both)[0] == (["other"], [("other", "requested", None, False)])
    assert _planned(both)[1][0] == ["p", "d"]
    assert [m.session_id for m in both.groups[1].members] == ["p", "c", "d"]
    assert len(both.groups) == 2


def test_a_member_already_back_stays_and_a_branch_asked_after_its_parent_keeps_its_link(home):
    conn = _db(home)
    up.add_session(conn, "there", T0, texts=())
    conn.commit()
    conn.close()
    branch = '{"_branched_from": "root"}'
    _archive(
        home,
        _payload("root", [1], title="R"),
        _payload("br", [2], started=T0 + 10, parent="root", model_config=branch),
        _payload("kid", [3], started=T0 + 20, parent="there"),
        _payload("lost", [4], started=T0 + 30, parent="gone"),
    )
    plan = _plan(home, ["br", "root", "kid", "lost"])
    assert _planned(plan) == [
        (["root"], [("root", "requested", None, False)]),
        (["br"], [("br", "requested", None, False)]),  # its parent goes in first: the link stays
        (["kid"], [("kid", "requested", None, False)]),  # its parent is in state.db
        (["lost"], [("lost", "requested", None, True)]),
    ]
    assert plan.warnings == ["lost: its parent gone is not in state.db; restored without that link"]
    alone = _plan(home, ["br"])
    assert _planned(alone) == [(["br"], [("br", "requested", None, True)])]
    assert alone.warnings == ["br: its parent root is not in state.db; restored without that link"]


def _put_back(home, p, ids) -> None:
    """What an interrupted restore left: the (hidden) row and some of its messages."""
    conn = _db(home)
    s = p["session"]
    conn.execute(
        "INSERT INTO sessions (id, source, started_at, archived) VALUES (?, ?, ?, 1)",
        (s["id"], s["source"], s["started_at"]),
    )
    for m in p["messages"]:
        if m["id"] in ids:
            conn.execute(
                "INSERT INTO messages (id, session_id, role, content, timestamp) VALUES (?, ?, ?, ?, ?)",
                (m["id"], s["id"], m["role"], m["content"], m["timestamp"]),
            )
    conn.commit()
    conn.close()


def test_a_session_partly_back_from_an_interrupted_restore_is_resumed(home):
    p = _payload("s", [1, 2, 3], system_prompt_hash=HASH_A)
    _archive(home, p, _payload("kid", [4], started=T0 + 5, parent="s"))
    _put_back(home, p, {1, 2})
    plan = _plan(home, ["kid"])
    assert _planned(plan) == [
        (["kid"], [("s", "parent", frozenset({1, 2}), False), ("kid", "requested", None, False)])
    ]
    assert plan.warnings == []  # its prompt went back with its row, before the crash
    assert plan.groups[0].members[0].to_dict()["resume"] is True


def test_a_row_in_state_db_that_is_not_an_interrupted_restore_is_refused(home):
    p, q = _payload("s", [1, 2]), _payload("t", [3, 4], started=T0 + 10)
    r = _payload("r", [5], started=T0 + 20)
    _archive(home, p, q)
    _archive(home, r, state=ARCHIVED)  # archived, never pruned: what is in state.db is Hermes's own
    _put_back(home, p, {1})
    _put_back(home, r, {5})
    moved = {**q, "session": {**q["session"], "started_at": T0 + 11}}
    _put_back(home, moved, {3})  # another session under the same id
    _sql(home, "INSERT INTO messages (id, session_id, role, timestamp) VALUES (9, 's', 'user', 1)")
    plan = _plan(home, ["s", "t", "r"])
    assert plan.groups == []
    assert plan.refused == {
        "s": "s is already in state.db",  # holds a message the archive does not
        "t": "t is already in state.db",
        "r": "r is already in state.db",
    }


def test_a_damaged_row_refuses_its_whole_conversation_in_words(home):
    _archive(
        home,
        _payload("p", [1], end="compression"),
        _payload("c", [2], started=T0 + 10, parent="p"),
        _payload("br", [3], started=T0 + 20, parent="c", model_config='{"_branched_from": "c"}'),
        _payload("far", [4], started=T0 + 30, parent="br", model_config='{"_branched_from": "br"}'),
        _payload("alone", [5], started=T0 + 40),
        _payload("c2", [6], started=T0 + 50, parent="p"),
    )
    ah.flip_byte(home, "br")
    plan = _plan(home, ["p", "far", "alone"])
    why = "(the conversation is restored whole or not at all; see `hermes-keeper archive verify`)"
    assert plan.refused == {
        "p": f"archive row damaged: br {why}",  # a child of c: its kind of link cannot be told
        "far": f"archive row damaged: br {why}",  # its parent
    }
    assert _planned(plan) == [(["alone"], [("alone", "requested", None, False)])]
    ah.flip_byte(home, "alone")
    assert _plan(home, ["alone"]).refused == {"alone": f"archive row damaged: alone {why}"}
    ah.flip_byte(home, "c2")
    assert _plan(home, ["p"]).refused == {"p": f"archive row damaged: br, c2 {why}"}


def test_a_damaged_row_already_back_in_state_db_refuses_nothing(home):
    p = _payload("p", [1])
    _archive(home, p, _payload("c", [2], started=T0 + 10, parent="p"))
    _put_back(home, p, {1})
    _sql(home, "UPDATE sessions SET started_at = 1 WHERE id = 'p'")  # Hermes's own p, not a resume
    ah.flip_byte(home, "p")
    plan = _plan(home, ["c"])
    assert plan.refused == {} and _planned(plan) == [(["c"], [("c", "requested", None, False)])]


def test_an_archive_address_restores_that_entry(home):
    old = _payload("s", [1, 2], title="old")
    _archive(home, old)
    new = _payload("s", [1, 3], title="new")  # not a superset of the pruned one: both entries stay
    with Archive.for_home(home / "keeper", synchronous="OFF") as store:
        store.set_state([1], ARCHIVED)
        assert store.put([new]) == [2]
        store.set_state([2], PRUNED)
    newest = _plan(home, ["s"])
    assert [(m.entry, m.payload["session"]["title"]) for m in newest.groups[0].members] == [(2, "new")]
    pinned = _plan(home, ["#1"])
    assert [(m.entry, m.payload["session"]["title"]) for m in pinned.groups[0].members] == [(1, "old")]
    assert pinned.groups[0].requested == ["s"]
    assert _plan(home, ["#7", "nobody"]).refused == {
        "#7": "no such archive entry",
        "nobody": "not in the archive",
    }
    with Archive.for_home(home / "keeper", synchronous="OFF") as store:
        planner = restore._Planner(store, None)
        assert planner.payload("s")["session"]["title"] == "new"
        planner.pin(store.by_entry(1))
        assert planner.entries["s"].entry == 1 and planner.payload("s")["session"]["title"] == "old"


def test_a_session_named_like_an_address_is_that_session(home):
    _archive(home, _payload("x", [1]), _payload("#1", [2], started=T0 + 1))
    plan = _plan(home, ["#1"])
    assert _planned(plan) == [(["#1"], [("#1", "requested", None, False)])]


def test_newer_format_unfit_rows_and_taken_ids_are_refused_in_words(home):
    newer = {**_payload("new", [1]), "format": FORMAT + 1}
    bare = _payload("bare", [2, 3], started=T0 + 1)
    del bare["session"]["started_at"]
    for m in bare["messages"]:
        del m["role"], m["timestamp"]
    taken = _payload("taken", [10, 11, 12], started=T0 + 2)
    _archive(home, newer, bare, taken)
    conn = _db(home)
    up.add_session(conn, "other", T0, texts=("a", "b"))
    conn.execute("UPDATE messages SET id = id + 10")  # 11, 12: the ids 'taken' needs
    conn.commit()
    conn.close()
    plan = _plan(home, ["new", "bare", "taken"])
    assert plan.groups == []
    assert plan.refused == {
        "new": f"new: archived by a newer hermes-keeper (format {FORMAT + 1})",
        "bare": "bare: this Hermes needs sessions.started_at, which the archived row lacks",
        "taken": "taken: 2 of its message ids are used by other sessions in state.db (e.g. 11; was state.db "
        "rebuilt?)",
    }
    msgs = _payload("msgs", [4, 5], started=T0 + 3)
    for m in msgs["messages"]:
        del m["timestamp"], m["role"]
    _archive(home, msgs)
    assert _plan(home, ["msgs"]).refused == {
        "msgs": "msgs: this Hermes needs messages.role, messages.timestamp, which the archived row lacks"
    }


def test_a_resumed_session_needs_only_its_missing_ids_free(home):
    p = _payload("s", [1, 2, 3])
    _archive(home, p)
    _put_back(home, p, {1, 2})
    assert _planned(_plan(home, ["s"])) == [(["s"], [("s", "requested", frozenset({1, 2}), False)])]
    _sql(home, "INSERT INTO sessions (id, source, started_at) VALUES ('o', 'cli', 1)")
    _sql(home, "INSERT INTO messages (id, session_id, role, timestamp) VALUES (3, 'o', 'user', 1)")
    assert _plan(home, ["s"]).refused == {
        "s": "s: 1 of its message ids are used by other sessions in state.db (e.g. 3; was state.db rebuilt?)"
    }


def test_a_prompt_hermes_deleted_is_warned_of_once_per_column(home):
    conn = _db(home)
    in_db = up.store_prompt(conn, "kept by Hermes")
    conn.commit()
    conn.close()
    _archive(
        home,
        _payload("s", [1], system_prompt_hash=HASH_A, tool_names=in_db),
        _payload("t", [2], started=T0 + 1, system_prompt_hash=HASH_B, tool_names=HASH_C),
    )
    plan = _plan(home, ["s", "t"])
    lost = (
        "was deleted by Hermes and this archive row (from an older hermes-keeper) lacks its text;"
        " restored without it"
    )
    assert plan.warnings == [
        f"s: the system prompt its system_prompt_hash names {lost}",
        f"t: the system prompt its system_prompt_hash names {lost}",
        f"t: the system prompt its tool_names names {lost}",
    ]


def test_warnings_name_the_dropped_columns_the_inactive_count_and_each_cut_link():
    old = SchemaInfo(
        path="state.db",
        status="ok",
        schema_version=11,
        tables={"sessions": ["id", "started_at", "parent_session_id"], "messages": ["id", "session_id"]},
    )
    p = _payload("s", [1, 2, 3], inactive=(2, 3), parent="gone", title="t", pinned=0)
    q = _payload("q", [4], started=T0 + 1, rewind_count=2)
    plan = restore.RestorePlan(
        groups=[
            restore.Group(["s"], [restore.Member(p, "requested", detach=True)]),
            restore.Group(["q"], [restore.Member(q, "requested")]),
        ],
        warnings=["earlier"],
    )
    restore._warnings(plan, old)
    assert plan.warnings == [
        "earlier",
        "s: its parent gone is not in state.db; restored without that link",
        "this Hermes (schema 11) has no column for messages.content, messages.role, messages.timestamp,"
        " sessions.end_reason, sessions.ended_at, sessions.rewind_count, sessions.source, sessions.title:"
        " those values stay in the archive only",  # not model_usage: this Hermes has no such table
        "2 inactive (rewound/compacted) messages stay in the archive only: this Hermes has no"
        " messages.active, they would come back as live history",
    ]
    quiet = restore.RestorePlan(
        groups=[restore.Group(["q"], [restore.Member(_payload("q", [4]), "requested")])]
    )
    restore._warnings(quiet, inspect_31())
    assert quiet.warnings == []


def inspect_31() -> SchemaInfo:
    conn = sqlite3.connect(":memory:")
    conn.executescript(up.SCHEMA_31.read_text(encoding="utf-8"))
    tables = {
        t: [r[1] for r in conn.execute(f"PRAGMA table_info({t})")]
        for (t,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
    }
    conn.close()
    return SchemaInfo(path="state.db", status="ok", schema_version=31, tables=tables)


class _Steps:
    """A :class:`Writer` as the restore drives it: each step one transaction, recorded (its units,
    whether it fed a batch, and each session's ``archived`` flag after it, its parent link in ``links``);
    batches keep their start size. Foreign keys on, as the Writer's connection has them."""

    def __init__(self, home):
        self.conn = _db(home)
        self.conn.execute("PRAGMA foreign_keys=ON")
        hidden = any(r[1] == "archived" for r in self.conn.execute("PRAGMA table_info(sessions)"))
        self.flags = f"SELECT id, {'archived' if hidden else 'NULL'} FROM sessions ORDER BY id"
        self.steps: list[tuple] = []
        self.links: list[list[tuple]] = []
        self.stats = SimpleNamespace(transactions=0, max_txn_ms=1.23456)

    def batch(self, start=50, fill=0.6):
        return SimpleNamespace(size=start)

    def step(self, fn, batch=None, units=1):
        with self.conn:
            fn(self.conn)
        flags = self.conn.execute(self.flags).fetchall()
        self.steps.append((units, batch is not None, flags))
        self.links.append(
            self.conn.execute("SELECT id, parent_session_id FROM sessions ORDER BY id").fetchall()
        )
        self.stats.transactions += 1


def _apply(home, plan, journal=None):
    w = _Steps(home)
    with Archive.for_home(home / "keeper", synchronous="OFF") as store:
        result = restore.apply_restore(w, inspect(home / "state.db"), store, plan, journal)
        states = [(e.session_id, e.state) for e in store.entries("ORDER BY entry")]
    w.conn.close()
    return w, result, states


def _records(home) -> list[dict]:
    return [{k: v for k, v in r.items() if k not in ("ts", "run")} for r in read_journal(home / "keeper")]


def test_apply_puts_every_row_back_hidden_until_its_last_step(home):
    conn = _db(home)
    up.add_session(conn, "newcomer", T0 + 500, texts=())
    conn.execute("UPDATE sessions SET title = 'Walrus' WHERE id = 'newcomer'")
    conn.execute("INSERT INTO state_meta VALUES ('goal:c', 'written by Hermes since')")
    kept = up.store_prompt(conn, "a prompt Hermes still holds")  # c's, not archived with it
    conn.commit()
    conn.close()
    p = _payload("p", [1, 2], end="compression", title="Walrus", system_prompt_hash=HASH_A, tool_names=HASH_B)
    p["system_prompts"] = [{"hash": HASH_A, "prompt": "You are Walrus."}]
    c = _payload("c", [3, 4], started=T0 + 10, parent="p", inactive=(4,), archived=1, system_prompt_hash=kept)
    c["messages"][0]["content"] = {"$text_b64": base64.b64encode(b"not utf-8 \xff").decode()}
    c["messages"][1]["content"] = {"$blob_b64": base64.b64encode(b"\x00blob").decode()}
    _archive(home, p, c)
    plan = _plan(home, ["c"])
    with Journal(home / "keeper") as journal:
        w, result, states = _apply(home, plan, journal)
    # each member: its row, its messages, its last step; then the relink (nothing left unset here)
    assert [s[:2] for s in w.steps] == [
        (1, False),
        (2, True),
        (1, False),
        (1, False),
        (2, True),
        (1, False),
    ] + [(1, False)]
    assert w.steps[0][2] == w.steps[1][2] == [("newcomer", 0), ("p", 1)]  # hidden until its last step
    assert w.steps[2][2] == [("newcomer", 0), ("p", 0)]
    assert w.steps[4][2] == w.steps[6][2] == [("c", 1), ("newcomer", 0), ("p", 0)]  # c was archived
    assert _sql(
        home,
        "SELECT id, title, parent_session_id, system_prompt_hash, tool_names, started_at FROM sessions"
        " WHERE id != 'newcomer' ORDER BY started_at",
    ) == [
        ("p", "Walrus (restored)", None, HASH_A, None, T0),  # the tools pin Hermes deleted: not restored
        ("c", None, "p", kept, None, T0 + 10),
    ]
    assert _sql(home, "SELECT id, session_id, typeof(content), active FROM messages ORDER BY id") == [
        (1, "p", "text", 1),
        (2, "p", "text", 1),
        (3, "c", "text", 1),
        (4, "c", "blob", 0),
    ]
    assert _sql(home, "SELECT content FROM messages WHERE id IN (1, 4) ORDER BY id") == [
        ("text 1",),
        (b"\x00blob",),
    ]
    assert _sql(home, "SELECT hash, prompt FROM system_prompts ORDER BY prompt") == [
        (HASH_A, "You are Walrus."),
        (kept, "a prompt Hermes still holds"),
    ]
    assert _sql(
        home, "SELECT session_id, model, input_tokens FROM session_model_usage ORDER BY session_id"
    ) == [
        ("c", "m1", 5),
        ("p", "m1", 5),
    ]
    assert _sql(home, "SELECT key, value FROM state_meta ORDER BY key") == [
        ("goal:c", "written by Hermes since"),  # Hermes's row wins
        ("goal:p", "g"),
    ]
    assert states == [("p", RESTORED), ("c", RESTORED)]
    assert result.to_dict() == {
        "restored": ["p", "c"],
        "refused": {},
        "retitled": {"p": "Walrus (restored)"},
        "warnings": [
            "p: the system prompt its tool_names names was deleted by Hermes and this archive row (from an"
            " older hermes-keeper) lacks its text; restored without it"
        ],
        "members": [m.to_dict() for g in plan.groups for m in g.members],
        "messages": 4,
        "transactions": 7,
        "max_txn_ms": 1.23,
        "dry_run": False,
        "kept_until": None,
    }
    assert _records(home) == [
        {"action": "restored", "sessions": ["p", "c"], "requested": ["c"], "messages": 4, "retitled": ["p"]}
    ]


def test_apply_inserts_messages_in_batches_and_finishes_a_resumed_session(home):
    big = _payload("big", list(range(1, 451)))
    part = _payload("part", [501, 502, 503], started=T0 + 1, title="Part", archived=1)
    _archive(home, big, part)
    _put_back(home, part, {501})
    plan = _plan(home, ["big", "part"])
    w, result, _ = _apply(home, plan)
    assert [s[:2] for s in w.steps] == [
        (1, False),
        (200, True),
        (200, True),
        (50, True),
        (1, False),  # big
        (2, True),
        (1, False),  # part: its row is there; the two missing messages and the last step
    ]
    assert _sql(home, "SELECT count(*), min(id), max(id) FROM messages WHERE session_id = 'big'") == [
        (450, 1, 450)
    ]
    assert _sql(home, "SELECT id FROM messages WHERE session_id = 'part'") == [(501,), (502,), (503,)]
    assert _sql(home, "SELECT id, title, archived FROM sessions ORDER BY id") == [
        ("big", None, 0),
        ("part", None, 1),  # a resumed row is finished, not rewritten
    ]
    assert (result.restored, result.messages, result.retitled) == (["big", "part"], 452, {})


def test_a_failed_group_stays_hidden_and_pruned_and_the_next_goes_on(home):
    _archive(home, _payload("a", [1, 2]), _payload("b", [3], started=T0 + 1))
    plan = _plan(home, ["a", "b"])
    _sql(home, "INSERT INTO sessions (id, source, started_at) VALUES ('hermes', 'cli', 1)")
    _sql(home, "INSERT INTO messages (id, session_id, role, timestamp) VALUES (2, 'hermes', 'user', 1)")
    with Journal(home / "keeper") as journal:
        _, result, states = _apply(home, plan, journal)
    assert result.refused == {
        "a": "stopped by state.db (UNIQUE constraint failed: messages.id); run the restore again to finish it"
    }
    assert (result.restored, result.messages) == (["b"], 1)
    assert states == [("a", PRUNED), ("b", RESTORED)]
    assert _sql(home, "SELECT id, archived FROM sessions ORDER BY id") == [("a", 1), ("b", 0), ("hermes", 0)]
    assert _records(home) == [
        {"action": "restore-failed", "sessions": ["a"], "error": "UNIQUE constraint failed: messages.id"},
        {"action": "restored", "sessions": ["b"], "requested": ["b"], "messages": 1, "retitled": []},
    ]


def test_a_cycle_of_parents_is_linked_once_both_are_in(home):
    _archive(home, _payload("a", [1], parent="b"), _payload("b", [2], started=T0 + 1, parent="a"))
    plan = _plan(home, ["a"])
    assert [m.session_id for m in plan.groups[0].members] == ["b", "a"]
    w, _, _ = _apply(home, plan)
    assert [s[:2] for s in w.steps][-1] == (1, False)  # the relink: one step after the members
    assert len(w.steps) == 7
    assert w.links[0] == [("b", None)]  # a is not in yet: b goes in without its link
    assert w.links[3] == [("a", "b"), ("b", None)]
    assert w.links[5] == [("a", "b"), ("b", None)]
    assert _sql(home, "SELECT id, parent_session_id FROM sessions ORDER BY id") == [("a", "b"), ("b", "a")]


def test_relink_sets_only_missing_links():
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE sessions (id TEXT, parent_session_id TEXT)")
    conn.executemany("INSERT INTO sessions VALUES (?, ?)", [("a", "x"), ("b", None), ("c", None)])
    group = restore.Group(
        ["a"],
        [
            restore.Member(_payload("a", [], parent="b"), "requested"),
            restore.Member(_payload("b", [], parent="a"), "child"),
            restore.Member(_payload("c", [], parent="elsewhere"), "child"),
        ],
    )
    w = SimpleNamespace(step=lambda fn: fn(conn))
    restore._relink(w, group)
    assert conn.execute("SELECT * FROM sessions ORDER BY id").fetchall() == [
        ("a", "x"),
        ("b", "a"),
        ("c", None),
    ]
    restore._relink(SimpleNamespace(step=None), restore.Group(["c"], group.members[2:]))  # no link: no step


def test_free_title_skips_titles_other_sessions_hold():
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE sessions (id TEXT, title TEXT)")
    conn.executemany("INSERT INTO sessions VALUES (?, ?)", [("x", "T"), ("y", "T (restored)"), ("z", "U")])
    assert restore._free_title(conn, "T", "new") == "T (restored 2)"
    assert restore._free_title(conn, "T (restored)", "y") == "T (restored)"
    assert restore._free_title(conn, "U", "z") == "U"  # its own title, there from an interrupted restore
    assert restore._free_title(conn, "V", "new") == "V"


def test_open_archive_refuses_in_one_line(home):
    place = Place("default", home, home)
    path = home / "keeper" / "archive.db"
    with pytest.raises(KeeperError) as no:
        restore.open_archive(place)
    assert str(no.value) == f"no archive for profile default ({path})"
    path.write_bytes(b"not a database" * 100)
    with pytest.raises(KeeperError) as bad:
        restore.open_archive(place)
    assert str(bad.value) == f"{path}: cannot open the archive (file is not a database)"
    path.unlink()
    _archive(home, _payload("s", [1]))
    with restore.open_archive(place) as store:
        assert [e.session_id for e in store.entries()] == ["s"]


def test_archived_row_is_the_row_a_survey_reads_after_the_restore():
    p = _payload("s", [1, 2], parent="p", pinned=1, session_key="k", last_activity_at=T0 + 99)
    p["messages"].append({"id": 3, "timestamp": None})
    p["session"]["model_config"] = '{"_delegate_from": "d", "_branched_from": "b", "_reset_from": "r"}'
    assert restore.archived_row(p) == SessionRow(
        id="s",
        source="cli",
        started_at=T0,
        ended_at=T0 + 60,
        end_reason="user_exit",
        parent_id="p",
        pinned=True,
        session_key="k",
        delegate_from="d",
        branched_from="b",
        reset_from="r",
        messages=3,
        last_message_at=T0 + 2,
        last_activity_at=T0 + 99,
    )
    bare = {"session": {"id": "b", "source": None, "started_at": None}, "messages": []}
    row = restore.archived_row(bare)
    assert (row.source, row.started_at, row.pinned, row.last_message_at, row.last_activity_at) == (
        "unknown",
        0.0,
        False,
        None,
        None,
    )


def test_a_restore_hermes_would_prune_again_is_refused_or_forced_with_words(home):
    (home / "config.yaml").write_text("sessions:\n  auto_prune: true\n  retention_days: 1.5\n")
    ids = ["s1", "s2", "s3", "s4", "s5"]
    _archive(home, *[_payload(s, [i]) for i, s in enumerate(ids, 1)], _payload("pin", [9], pinned=1))
    place = Place("default", home, home)
    schema31 = inspect(home / "state.db")
    plan = _plan(home, [*ids, "pin"])
    auto, doomed = restore.undone_by_hermes(place, schema31, plan, T0 + 2 * 86400)
    assert (auto.enabled, auto.retention_days, doomed) == (True, 1.5, ids)
    assert restore.undone_by_hermes(place, schema31, plan, T0 + 86400)[1] == []
    what = (
        "Hermes's own auto-prune (config.yaml sessions.auto_prune: on, retention 1.5 days) would delete"
        " s1, s2, s3 and 2 more again at its next pass, without an archive"
    )
    with pytest.raises(KeeperError) as refused:
        restore._refuse_if_undone(place, schema31, plan, False)
    assert str(refused.value) == (
        f"not restored: {what}; run `hermes-keeper adopt` first (the keeper then owns retention), or --force"
        " to restore anyway"
    )
    restore._refuse_if_undone(place, schema31, plan, True)
    assert plan.warnings == [f"{what}: `hermes-keeper adopt` keeps them"]
    three = _plan(home, ids[:3])
    restore._refuse_if_undone(place, schema31, three, True)
    assert three.warnings[0].startswith(
        "Hermes's own auto-prune (config.yaml sessions.auto_prune: on,"
        " retention 1.5 days) would delete s1, s2, s3 again"
    )
    (home / "config.yaml").write_text("sessions:\n  auto_prune: false\n")
    restore._refuse_if_undone(place, schema31, plan, False)  # off: nothing to refuse


def test_restore_sessions_plans_writes_and_journals(home, monkeypatch):
    (home / "config.yaml").write_text("sessions:\n  auto_prune: false\n")
    _archive(home, _payload("p", [1, 2], end="compression"), _payload("c", [3], started=T0 + 1, parent="p"))
    place = Place("default", home, home)
    before = _sql(home, "SELECT count(*) FROM sessions")
    with Journal(home / "keeper") as journal:
        dry = restore.restore_sessions(place, ["c", "nobody"], journal=journal, dry_run=True)
        assert (
            dry.to_dict() | {"members": []}
            == restore.RestoreResult(refused={"nobody": "not in the archive"}, dry_run=True).to_dict()
        )
        assert [m["session_id"] for m in dry.members] == ["p", "c"]
        assert _sql(home, "SELECT count(*) FROM sessions") == before == [(0,)]
        none = restore.restore_sessions(place, ["nobody"], journal=journal)
        assert (none.refused, none.members, none.dry_run, none.transactions) == (
            {"nobody": "not in the archive"},
            [],
            False,
            0,
        )
        budgets = []

        class Recording(writer.Writer):  # the policy's budget paces the restore's writer
            def __init__(self, db_path, budget=None):
                budgets.append(budget)
                super().__init__(db_path, budget)

        monkeypatch.setattr(restore, "Writer", Recording)
        budget = Budget(budget_ms=40.0, pause_ms=0, busy_wait_s=9.0)
        done = restore.restore_sessions(place, ["c", "nobody"], journal=journal, budget=budget)
    assert budgets == [budget]
    assert (done.restored, done.refused, done.messages, done.warnings) == (
        ["p", "c"],
        {"nobody": "not in the archive"},
        3,
        [],
    )
    assert done.transactions == 8 and done.max_txn_ms > 0
    assert _sql(home, "SELECT id, archived FROM sessions ORDER BY id") == [("c", 0), ("p", 0)]
    records = [r for r in _records(home) if r["action"] != "fts_merge"]  # merges: as many as the hold takes
    assert [(r["action"], r.get("refused"), r.get("sessions")) for r in records] == [
        ("restore-refused", {"nobody": "not in the archive"}, None),  # the dry run wrote none
        ("restore-refused", {"nobody": "not in the archive"}, None),
        ("fts_hold", None, None),  # the FTS merge hold, journaled with the restore
        ("restored", None, ["p", "c"]),
        ("fts_restored", None, None),
    ]


def test_restore_sessions_waits_out_hermes_maintenance_and_tells_of_a_hands_off(home, monkeypatch):
    (home / "config.yaml").write_text("sessions:\n  auto_prune: false\n")
    _archive(home, _payload("s", [1]))
    place = Place("default", home, home)
    _sql(home, "INSERT INTO state_meta VALUES ('fts_rebuild_progress', '1')")
    assert [m["session_id"] for m in restore.restore_sessions(place, ["s"], dry_run=True).members] == ["s"]
    with pytest.raises(TryLater) as later:
        restore.restore_sessions(place, ["s"])
    assert str(later.value) == (
        "Hermes is rebuilding its search index (deferred FTS rebuild in state_meta); nothing changed,"
        " run again later"
    )
    assert _sql(home, "SELECT count(*) FROM sessions") == [(0,)]
    _sql(home, "DELETE FROM state_meta")
    guard = WalGuard("3.40.1", vulnerable=True, wal=True, holders=("hermes (pid 1)",))
    monkeypatch.setattr(writer, "wal_guard", lambda *a, **k: guard)
    done = restore.restore_sessions(place, ["s"], budget=Budget(pause_ms=0))
    assert (done.restored, done.warnings) == (["s"], [guard.note()])


def test_restore_sessions_refuses_a_database_whose_timestamps_are_not_seconds(home):
    _archive(home, _payload("s", [1]))
    _sql(home, "INSERT INTO sessions (id, source, started_at) VALUES ('ms', 'cli', 1700000000000)")
    with pytest.raises(
        KeeperError, match="refusing to change a database whose timestamps are not unix seconds"
    ):
        restore.restore_sessions(Place("default", home, home), ["s"], dry_run=True)


def test_a_session_with_all_its_messages_back_but_not_finished_is_resumed(home):
    p = _payload("s", [1, 2], title="S")
    _archive(home, p)
    _put_back(home, p, {1, 2})  # killed after its last messages, before its last step
    plan = _plan(home, ["s"])
    assert _planned(plan) == [(["s"], [("s", "requested", frozenset({1, 2}), False)])]
    w, result, states = _apply(home, plan)
    assert [s[:2] for s in w.steps] == [(1, False)]  # only the last step was left
    assert (result.restored, result.messages, states) == (["s"], 0, [("s", RESTORED)])
    assert _sql(home, "SELECT id, archived FROM sessions") == [("s", 0)]
    assert _sql(home, "SELECT key FROM state_meta") == [("goal:s",)]


def test_a_branch_whose_parent_is_gone_goes_back_without_its_link(home):
    _archive(home, _payload("lost", [1], parent="gone"))
    w, result, _ = _apply(home, _plan(home, ["lost"]))
    assert result.refused == {} and result.restored == ["lost"]
    assert w.links[0] == [("lost", None)]
    assert _sql(home, "SELECT id, parent_session_id FROM sessions") == [("lost", None)]


OLD_SCHEMA = (
    "CREATE TABLE sessions (id TEXT PRIMARY KEY, source TEXT NOT NULL, started_at REAL NOT NULL,"
    " parent_session_id TEXT REFERENCES sessions(id), title TEXT, system_prompt TEXT);"
    "CREATE TABLE messages (id INTEGER PRIMARY KEY, session_id TEXT NOT NULL REFERENCES sessions(id),"
    " role TEXT NOT NULL, content TEXT, timestamp REAL NOT NULL);"
)


def test_an_older_hermes_gets_what_its_schema_holds(tmp_path):
    """No ``archived``, no ``active``, no usage, state_meta or prompt tables: the rest stays archived."""
    home = tmp_path / "home"
    (home / "keeper").mkdir(parents=True, mode=0o700)
    conn = _db(home)
    conn.executescript(OLD_SCHEMA)
    conn.close()
    p = _payload("p", [1, 2, 3], inactive=(2,), title="T", system_prompt=None, system_prompt_hash=HASH_A)
    p["system_prompts"] = [{"hash": HASH_A, "prompt": "You are Walrus."}]
    _archive(home, p, _payload("c", [4], started=T0 + 1, parent="p"))
    plan = _plan(home, ["c"])
    assert plan.warnings[1:] == [
        "1 inactive (rewound/compacted) messages stay in the archive only: this Hermes has no"
        " messages.active, they would come back as live history"
    ]
    assert plan.warnings[0] == (
        "this Hermes (schema None) has no column for sessions.end_reason, sessions.ended_at,"
        " sessions.system_prompt_hash: those values stay in the archive only"
    )
    w, result, _ = _apply(home, plan)
    assert (result.restored, result.refused, result.messages) == (["p", "c"], {}, 3)
    assert [s[:2] for s in w.steps] == [
        (1, False),
        (2, True),
        (1, False),
        (1, False),
        (1, True),
        (1, False),
    ] + [(1, False)]
    assert _sql(home, "SELECT * FROM sessions ORDER BY id") == [
        ("c", "cli", T0 + 1, "p", None, None),
        ("p", "cli", T0, None, "T", "You are Walrus."),
    ]
    assert _sql(home, "SELECT id, session_id FROM messages ORDER BY id") == [(1, "p"), (3, "p"), (4, "c")]


def test_hermess_default_auto_prune_and_a_pinned_chain_decide_what_it_would_undo(home):
    (home / "config.yaml").write_text("sessions:\n  retention_days: 1\n")  # on: schema 31's default
    ids = ["s1", "s2", "s3", "s4"]
    _archive(
        home,
        *[_payload(s, [i]) for i, s in enumerate(ids, 1)],
        _payload("pin", [9], end="compression", pinned=1),
        _payload("tail", [10], started=T0 + 5, parent="pin"),  # a pin covers its compression tail
    )
    place = Place("default", home, home)
    plan = _plan(home, [*ids, "tail"])
    assert [m.session_id for g in plan.groups for m in g.members] == [*ids, "pin", "tail"]
    auto, doomed = restore.undone_by_hermes(place, inspect(home / "state.db"), plan, T0 + 2 * 86400)
    assert (auto.enabled, auto.origin, doomed) == (True, "Hermes's default for schema 31", ids)
    what = (
        "Hermes's own auto-prune (Hermes's default for schema 31: on, retention 1 days) would delete"
        " s1, s2, s3 and 1 more again at its next pass, without an archive"
    )
    with pytest.raises(KeeperError) as refused:
        restore.restore_sessions(place, ids)
    assert str(refused.value).startswith(f"not restored: {what};")
    assert _sql(home, "SELECT count(*) FROM sessions") == [(0,)]
    done = restore.restore_sessions(place, ids, force=True, budget=Budget(pause_ms=0))
    assert (done.restored, done.warnings) == (ids, [f"{what}: `hermes-keeper adopt` keeps them"])


def test_a_dry_run_says_the_plans_warnings(home):
    (home / "config.yaml").write_text("sessions:\n  auto_prune: false\n")
    _archive(home, _payload("lost", [1], parent="gone"))
    dry = restore.restore_sessions(Place("default", home, home), ["lost"], dry_run=True)
    assert dry.warnings == ["lost: its parent gone is not in state.db; restored without that link"]


def test_open_archive_refuses_a_file_that_is_no_archive_and_one_it_cannot_migrate(home):
    place = Place("default", home, home)
    path = home / "keeper" / "archive.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE other (x)")
    conn.commit()
    conn.close()
    with pytest.raises(KeeperError) as foreign:
        restore.open_archive(place)
    assert str(foreign.value) == f"{path}: cannot open the archive (it holds no archive tables)"
    assert _tables(path) == ["other"]  # not made into an archive
    path.unlink()
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE archived_sessions (x)")  # the old layout's table, not its columns
    conn.commit()
    conn.close()
    with pytest.raises(KeeperError) as old:
        restore.open_archive(place)
    assert str(old.value) == f"{path}: cannot open the archive (no such column: session_id)"


def _tables(path) -> list[str]:
    conn = sqlite3.connect(path)
    try:
        return [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    finally:
        conn.close()


def test_an_older_entry_linked_to_a_session_planned_before_it_does_not_bring_it_twice(home):
    """``#1``: an entry whose parent link the newest entry lacks; its parent, asked for first, goes once."""
    _archive(home, _payload("p", [1]), _payload("s", [2], started=T0 + 10, parent="p"))
    with Archive.for_home(home / "keeper", synchronous="OFF") as store:
        store.set_state([2], ARCHIVED)
        assert store.put([_payload("s", [3], started=T0 + 10)]) == [3]  # unlinked since, archived again
        store.set_state([3], PRUNED)
    plan = _plan(home, ["p", "#2"])
    assert _planned(plan) == [
        (["p"], [("p", "requested", None, False)]),
        (["s"], [("s", "requested", None, False)]),  # its parent is planned: the link stays
    ]
    w, result, _ = _apply(home, plan)
    assert (result.restored, result.refused) == (["p", "s"], {})
    assert _sql(home, "SELECT id, parent_session_id FROM sessions ORDER BY id") == [("p", None), ("s", "p")]


def test_a_damaged_row_beyond_a_branch_neither_refuses_nor_cuts_the_conversation(home):
    branch = '{"_branched_from": "s"}'
    _archive(
        home,
        _payload("s", [1]),
        _payload("x", [2], started=T0 + 1, parent="s"),  # a child: it comes with s
        _payload("br", [3], started=T0 + 2, parent="s", model_config=branch),  # a conversation of its own
        _payload("far", [4], started=T0 + 3, parent="br"),
    )
    ah.flip_byte(home, "far")
    plan = _plan(home, ["s"])
    assert (plan.refused, _planned(plan)) == (
        {},
        [(["s"], [("s", "requested", None, False), ("x", "child", None, False)])],
    )


def test_a_usage_row_lacking_a_column_this_hermes_requires_is_refused(tmp_path):
    home = tmp_path / "home"
    (home / "keeper").mkdir(parents=True, mode=0o700)
    conn = sqlite3.connect(home / "state.db")
    conn.executescript(
        OLD_SCHEMA + "CREATE TABLE session_model_usage (session_id TEXT NOT NULL, model TEXT NOT NULL);"
    )
    conn.close()
    p = _payload("s", [1])
    del p["model_usage"][0]["model"]
    q = _payload("q", [2], started=T0 + 1)
    del q["format"]  # a payload from before the format was recorded: format 1
    _archive(home, p, q)
    plan = _plan(home, ["s", "q"])
    assert plan.refused == {
        "s": "s: this Hermes needs session_model_usage.model, which the archived row lacks"
    }
    assert _planned(plan) == [(["q"], [("q", "requested", None, False)])]
    assert plan.warnings == [
        "this Hermes (schema None) has no column for session_model_usage.input_tokens, sessions.end_reason,"
        " sessions.ended_at: those values stay in the archive only"  # messages.active: said with its count
    ]
