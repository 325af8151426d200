"""One conversation model: the plan, prune, archive restore and export agree on every shape."""

from __future__ import annotations

import json
import shutil
import sqlite3
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from hermes_keeper import demo
from hermes_keeper.archive.store import ARCHIVE_NAME, PRUNED
from hermes_keeper.cli import main
from hermes_keeper.model.conversations import (
    BRANCH,
    CHILD,
    COMPRESSION,
    DELEGATE,
    RESET,
    Facts,
    continues,
    conversations,
    lineage_root,
    link_kind,
    seconds,
)

DAY = 86400.0
TG = "agent:main:telegram:dm:42"
NOW = time.time()
OLD = NOW - 200 * DAY  # past every default retention


def s(sid, hour, end="user_exit", parent=None, source="cli", pinned=False, key=None, **config):
    """A session ``hour`` hours after :data:`OLD`, with two messages and Hermes's model_config markers
    (``key``: its gateway ``session_key``)."""
    start = OLD + hour * 3600
    kwargs = {"parent_session_id": parent, "model_config": config or None, "session_key": key}
    msgs = [("user", f"question {sid}", start + 10), ("assistant", f"answer {sid}", start + 20)]
    return {
        "id": sid,
        "source": source,
        "started_at": start,
        "ended_at": start + 1800,
        "end_reason": end,
        "kwargs": kwargs,
        "messages": msgs,
        "pinned": pinned,
    }


#: (shape, sessions, the conversations run prunes (each parents first, oldest first), kept ids)
SHAPES = [
    ("compression chain", [s("a", 0, "compression"), s("b", 1, parent="a")], [["a", "b"]], set()),
    (
        "branch off a session",
        [s("p", 0), s("x", 2, parent="p", _branched_from="p")],
        [["p"], ["x"]],
        set(),
    ),
    (
        "legacy branch (parent ended 'branched')",
        [s("p", 0, "branched"), s("x", 2, parent="p")],
        [["p"], ["x"]],
        set(),
    ),
    (
        "delegate child",
        [s("p", 0), s("d", 0.2, "delegate_done", parent="p", source="subagent", _delegate_from="p")],
        [["p", "d"]],
        set(),
    ),
    (
        "untagged child",
        [s("p", 0), s("u", 0.2, parent="p", source="subagent")],
        [["p", "u"]],
        set(),
    ),
    (
        "pinned chain member",
        [s("a", 0, "compression"), s("b", 1, parent="a", pinned=True), s("lone", 3)],
        [["lone"]],
        {"a", "b"},
    ),
    (
        "chain of 3 with a branch off the middle",
        [
            s("a", 0, "compression"),
            s("b", 1, "compression", parent="a"),
            s("c", 2, parent="b"),
            s("x", 1.5, parent="b", _branched_from="b"),
        ],
        [["a", "b", "c"], ["x"]],
        set(),
    ),
    (
        "gateway resets (today's marker)",
        [
            s("r1", 0, "session_reset", source="telegram", key=TG),
            s("r2", 5, "idle", parent="r1", source="telegram", key=TG, _reset_from="r1"),
            s("r3", 9, "daily", parent="r2", source="telegram", key=TG, _reset_from="r2"),
        ],
        [["r1"], ["r2"], ["r3"]],
        set(),
    ),
    (
        "gateway resets (rows from before the marker: same session_key after a reset end)",
        [
            s("r1", 0, "idle", source="telegram", key=TG),
            s("r2", 5, "daily", parent="r1", source="telegram", key=TG),
            s("u", 6, parent="r2", source="subagent"),  # no key: a plain child, it joins r2
        ],
        [["r1"], ["r2", "u"]],
        set(),
    ),
    (
        "a reset chat compressed: the continuation inherits _reset_from and still joins",
        [
            s("r1", 0, "session_reset", source="telegram", key=TG),
            s("r2", 5, "compression", parent="r1", source="telegram", key=TG, _reset_from="r1"),
            s("r3", 6, parent="r2", source="telegram", key=TG, _reset_from="r1"),
        ],
        [["r1"], ["r2", "r3"]],
        set(),
    ),
]


def _cli(*args) -> str:
    res = CliRunner().invoke(main, [*args])
    assert res.exit_code == 0, res.output
    return res.stdout


def _home(path: Path, sessions: list[dict]) -> Path:
    demo.build_home(path, demo.DemoSpec(now=NOW, sessions=sessions))
    conn = sqlite3.connect(path / "state.db")
    conn.execute("ALTER TABLE sessions ADD COLUMN pinned INTEGER NOT NULL DEFAULT 0")  # as newer Hermes has
    conn.executemany(
        "UPDATE sessions SET pinned = 1 WHERE id = ?", [(x["id"],) for x in sessions if x["pinned"]]
    )
    conn.commit()
    conn.close()
    return path


def _ids(db: Path, sql: str) -> set[str]:
    conn = sqlite3.connect(db)
    try:
        return {r[0] for r in conn.execute(sql)}
    finally:
        conn.close()


@pytest.mark.parametrize("shape, sessions, expected, kept", SHAPES, ids=[x[0] for x in SHAPES])
def test_plan_prune_restore_and_export_agree(tmp_path, shape, sessions, expected, kept):
    home = _home(tmp_path / "home", sessions)
    everyone = {x["id"] for x in sessions}

    # The plan: one unit per conversation, a protected member keeps its whole conversation.
    plan = json.loads(_cli("plan", "--home", str(home), "--json", "-v"))["profiles"][0]
    units: dict[str, set[str]] = {}
    for d in plan["decisions"]:
        units.setdefault(d["unit"], set()).add(d["session_id"])
    assert sorted(map(sorted, units.values())) == sorted(
        [sorted(c) for c in expected] + ([sorted(kept)] if kept else [])
    )
    assert {d["session_id"] for d in plan["decisions"] if d["action"] == "keep"} == kept

    # Prune (the run): archived and deleted exactly the plan's pruned conversations.
    _cli("run", "--home", str(home), "--json")
    pruned = everyone - kept
    assert _ids(home / "state.db", "SELECT id FROM sessions") == kept
    archive = home / "keeper" / ARCHIVE_NAME
    assert _ids(archive, f"SELECT session_id FROM archived_sessions WHERE state = '{PRUNED}'") == pruned

    # Restore: any one member brings back exactly its conversation, parents first.
    for conv in expected:
        for member in conv:
            res = _cli("archive", "restore", member, "--dry-run", "--json", "--home", str(home))
            out = json.loads(res)["profiles"][0]
            assert [m["session_id"] for m in out["members"]] == conv, member
        copy = tmp_path / f"restored-{conv[-1]}"
        shutil.copytree(home, copy)
        out = json.loads(_cli("archive", "restore", conv[-1], "--json", "--home", str(copy)))["profiles"][0]
        assert out["restored"] == conv
        assert _ids(copy / "state.db", "SELECT id FROM sessions") == kept | set(conv)
        assert _ids(copy / "state.db", "SELECT DISTINCT session_id FROM messages") == kept | set(conv)

    # Export: the same sessions, conversation by conversation, parents first.
    target = tmp_path / "export.jsonl"
    _cli("archive", "export", "--home", str(home), "-o", str(target))
    order = [json.loads(line)["id"] for line in target.read_text().splitlines()]
    assert order == [sid for conv in expected for sid in conv]


def test_a_branch_restored_with_its_parent_keeps_its_link(tmp_path):
    """Alone, a branch whose parent is archived comes back unlinked (said); asked for with the
    parent, in any order, the parent goes in first and the link stays."""
    home = _home(tmp_path / "home", [s("p", 0), s("x", 2, parent="p", _branched_from="p")])
    _cli("run", "--home", str(home))
    res = _cli("archive", "restore", "x", "--dry-run", "--json", "--home", str(home))
    alone = json.loads(res)["profiles"][0]
    assert alone["warnings"] == ["x: its parent p is not in state.db; restored without that link"]
    out = json.loads(_cli("archive", "restore", "x", "p", "--json", "--home", str(home)))["profiles"][0]
    assert out["restored"] == ["p", "x"] and out["warnings"] == []
    conn = sqlite3.connect(home / "state.db")
    assert conn.execute("SELECT parent_session_id FROM sessions WHERE id = 'x'").fetchone() == ("p",)
    conn.close()


# --- the model itself ---------------------------------------------------------------------------


def f(
    sid, parent=None, end=None, start=0.0, ended=None, delegate=None, branch=None, source=None, **rest
) -> Facts:
    return Facts(sid, parent, end, start, ended, delegate, branch, source, **rest)


@pytest.mark.parametrize(
    "parent, child, kind",
    [
        (f("p", end="compression"), f("c", "p"), COMPRESSION),
        (f("p", end="compression"), f("c", "p", source="tool"), CHILD),  # a tool session forked off it
        (f("p", end="user_exit"), f("c", "p", delegate="p"), DELEGATE),
        (f("p", end="compression"), f("c", "p", delegate="p"), DELEGATE),  # not a continuation
        (f("p", end="compression"), f("c", "p", branch="p"), BRANCH),  # Hermes's compression tip skips it
        (f("p", end="branched", ended=5.0), f("c", "p", start=6.0), BRANCH),  # the legacy rule
        (f("p", end="branched", ended=5.0), f("c", "p", start=6.0, delegate="p"), DELEGATE),
        (f("p", end="branched", ended=5.0), f("c", "p", start=4.0), CHILD),  # started before the end
        (f("p", end="branched", ended=5.0), f("c", "p", start=None), CHILD),
        (f("p", end="user_exit"), f("c", "p"), CHILD),
        # markers bind to the parent: a continuation inherits its parent's model_config verbatim
        (f("p", end="compression"), f("c", "p", branch="a"), COMPRESSION),
        (f("p", end="compression"), f("c", "p", reset_from="a"), COMPRESSION),
        (f("p", end="compression"), f("c", "p", reset_from="p"), RESET),
        (f("p", end="user_exit"), f("c", "p", reset_from="p"), RESET),
        (f("p", end="session_reset"), f("c", "p", reset_from="p", delegate="p"), DELEGATE),
        # the legacy reset rule: a reset end and the exact, non-empty session_key
        (f("p", end="idle", session_key="k"), f("c", "p", session_key="k"), RESET),
        (f("p", end="idle", session_key="k"), f("c", "p", session_key="other"), CHILD),
        (f("p", end="idle", session_key=""), f("c", "p", session_key=""), CHILD),
        (f("p", end="user_exit", session_key="k"), f("c", "p", session_key="k"), CHILD),
    ],
)
def test_link_kind(parent, child, kind):
    assert link_kind(child, parent) == kind


def test_members_roots_links_and_orders():
    convs = conversations(
        [
            f("c", "b", start=3),
            f("b", "a", end="compression", start=2),
            f("a", end="compression", start=1),
            f("x", "b", start=2.5, branch="b"),
            f("y", "x", start=4),  # an untagged child of the branch
            f("lone", start=0),
        ]
    )
    assert convs.members == {"lone": ["lone"], "a": ["a", "b", "c"], "x": ["x", "y"]}
    assert convs.root == {"lone": "lone", "a": "a", "b": "a", "c": "a", "x": "x", "y": "x"}
    assert convs.children_first("a") == ["c", "b", "a"]
    assert [convs.kind(sid) for sid in ("a", "b", "c", "x", "y")] == [
        None,
        COMPRESSION,
        COMPRESSION,
        None,
        CHILD,
    ]
    assert {(k.child, k.parent, k.kind) for k in convs.links} == {
        ("b", "a", COMPRESSION),
        ("c", "b", COMPRESSION),
        ("x", "b", BRANCH),
        ("y", "x", CHILD),
    }
    assert convs.parents_first() == ["lone", "a", "b", "c", "x", "y"]


def test_a_branch_exports_after_the_conversation_it_came_from_even_if_older():
    convs = conversations([f("p", start=5), f("x", "p", start=1, branch="p")])
    assert convs.members == {"x": ["x"], "p": ["p"]}
    assert convs.parents_first() == ["p", "x"]


def test_delegate_marker_links_without_a_parent_id_and_missing_parents_are_no_link():
    convs = conversations([f("p", start=1), f("d", None, start=2, delegate="p"), f("o", "gone", start=0)])
    assert convs.members == {"o": ["o"], "p": ["p", "d"]}
    assert convs.kind("d") == DELEGATE and convs.kind("o") is None


def test_cycles_keep_every_session():
    convs = conversations([f("a", "b", start=1), f("b", "a", start=2), f("s", "s", start=3)])
    assert convs.members == {"b": ["b", "a"], "s": ["s"]}  # a self-link is no link
    assert convs.parents_first() == ["b", "a", "s"]


def test_facts_of_an_archived_reset_row():
    got = Facts.of_row({"id": "s", "model_config": '{"_reset_from": "p"}', "session_key": "k"})
    assert (got.reset_from, got.session_key, got.delegate_from) == ("p", "k", None)


@pytest.mark.parametrize(
    "row, delegate, branch, started",
    [
        ({"id": "s", "model_config": '{"_delegate_from": "p"}', "started_at": 5}, "p", None, 5.0),
        ({"id": "s", "model_config": '{"_branched_from": "p"}', "started_at": "7"}, None, "p", 7.0),
        ({"id": "s", "model_config": "not json"}, None, None, None),
        ({"id": "s", "model_config": {"$text_b64": "/w=="}}, None, None, None),  # undecodable text
        ({"id": "s", "model_config": '{"_delegate_from": 3}'}, None, None, None),
    ],
)
def test_facts_of_an_archived_row(row, delegate, branch, started):
    got = Facts.of_row({"parent_session_id": "p", "end_reason": "x", **row})
    assert (got.delegate_from, got.branched_from, got.started_at) == (delegate, branch, started)
    assert (got.parent_id, got.end_reason) == ("p", "x")


def test_a_gateway_chat_prunes_its_old_sessions_and_keeps_the_routed_one(tmp_path):
    """Today's gateway starts a session on every reset, linked to the one before: each is a
    conversation of its own, so the chat's old sessions age out while the routed one stays."""
    recent = (NOW - 3600 - OLD) / 3600  # an hour ago, in s()'s hours
    chat = [
        s("r1", 0, "session_reset", source="telegram", key=TG),
        s("r2", 5, "idle", parent="r1", source="telegram", key=TG, _reset_from="r1"),
        s("r3", recent, "daily", parent="r2", source="telegram", key=TG, _reset_from="r2"),
    ]
    home = tmp_path / "home"
    demo.build_home(home, demo.DemoSpec(now=NOW, sessions=chat, routed={TG: "r3"}))
    plan = json.loads(_cli("plan", "--home", str(home), "--json", "-v"))["profiles"][0]
    action = {d["session_id"]: d["action"] for d in plan["decisions"]}
    assert action == {"r1": "prune", "r2": "prune", "r3": "keep"}
    _cli("run", "--home", str(home))
    assert _ids(home / "state.db", "SELECT id FROM sessions") == {"r3"}
    archived = _ids(home / "keeper" / ARCHIVE_NAME, "SELECT session_id FROM archived_sessions")
    assert archived == {"r1", "r2"}


@pytest.mark.parametrize(
    "value, expected",
    [
        (None, None),
        (5, 5),
        (2.5, 2.5),
        ("7", 7.0),
        ("2026-01-01T00:00:00Z", 1767225600.0),
        ("2026-01-01T00:00:00", 1767225600.0),  # no zone: UTC
        ("2026-01-01T01:00:00+01:00", 1767225600.0),
        (" 2026-01-01T00:00:00Z ", 1767225600.0),
        ("yesterday", None),
    ],
)
def test_seconds_reads_every_stored_timestamp_shape(value, expected, monkeypatch):
    monkeypatch.setenv("TZ", "America/New_York")  # a date without a zone is UTC, not local time
    time.tzset()
    try:
        assert seconds(value) == expected
    finally:
        monkeypatch.undo()
        time.tzset()


def test_facts_keep_text_and_drop_any_other_type():
    text = Facts.of_row(
        {"id": "s", "source": "telegram", "parent_session_id": "p", "end_reason": "idle", "session_key": "k"}
    )
    assert (text.source, text.parent_id, text.end_reason, text.session_key) == ("telegram", "p", "idle", "k")
    odd = Facts.of_row({"id": "s", "source": 3, "parent_session_id": 4, "end_reason": 5, "session_key": 6})
    assert (odd.source, odd.parent_id, odd.end_reason, odd.session_key) == (None, None, None, None)


def test_a_child_started_the_moment_its_branched_parent_ended_is_a_branch():
    assert link_kind(f("c", "p", start=5.0), f("p", end="branched", ended=5.0)) == BRANCH


def test_lineage_root_follows_compression_only_and_survives_cycles():
    chain = {
        "a": f("a", end="compression", start=1),
        "b": f("b", "a", end="compression", start=2),
        "c": f("c", "b", start=3),
        "x": f("x", "b", start=4, branch="b"),
        "y": f("y", "z", end="compression", start=5),
        "z": f("z", "y", end="compression", start=6),
    }
    assert [lineage_root(s, chain) for s in ("a", "b", "c", "x")] == ["a", "a", "a", "x"]
    assert {lineage_root("y", chain), lineage_root("z", chain)} <= {"y", "z"}  # a cycle ends
    chain["s"] = f("s", "y", start=7)  # a cycle above the start ends too
    assert lineage_root("s", chain) in {"y", "z"}
    assert continues(chain["c"], chain["b"]) and not continues(chain["x"], chain["b"])


def test_a_delegate_marker_naming_a_session_not_given_is_no_link():
    convs = conversations([f("p", start=1), f("d", "p", start=2, delegate="ghost")])
    assert {(k.child, k.parent) for k in convs.links} == {("d", "p")}


def test_parents_first_keeps_the_given_order_except_that_parents_come_first():
    convs = conversations(
        [
            f("root2", start=1),
            f("root1", start=0),
            f("k2", "root1", start=5, branch="root1"),
            f("k1", "k2", start=3, branch="k2"),
            f("k0", "root1", start=2, branch="root1"),
            f("k3", start=6),
        ]
    )
    assert convs.parents_first() == ["root1", "root2", "k0", "k2", "k1", "k3"]


def test_members_come_after_every_parent_in_the_order_they_were_given():
    chain = conversations(  # started in the reverse order of the chain
        [f("g", start=3, end="compression"), f("p", "g", start=2, end="compression"), f("c", "p", start=1)]
    )
    assert chain.members == {"g": ["g", "p", "c"]}
    two = conversations([f("c", "aa", start=0, delegate="zz"), f("zz", start=1), f("aa", start=2)])
    assert two.members == {"zz": ["zz", "aa", "c"]}  # parents by age, not by name
    deep = conversations(
        [f("c", "p", start=0), f("p", "aa", start=3, delegate="zz"), f("zz", start=1), f("aa", start=2)]
    )
    assert deep.members == {"zz": ["zz", "aa", "p", "c"]}  # a parent's own parents too
