"""What Hermes's gateway would do with a row (model/gateway.py): recovery's reset fence and the
profile a routing key names. Pure; the real-Hermes side is tests/test_hermes_iot.py."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from hermes_keeper.model.gateway import FENCED_FROM_SCHEMA, Fence, Peer, fences, profile_of_key

CHAT = Peer("telegram", "1", "1", "dm", "")


@dataclass
class R:
    id: str
    started_at: float
    ended_at: float | None = None
    end_reason: str | None = None
    source: str = "telegram"
    session_key: str | None = "k"
    last_activity_at: float | None = None
    peer: Peer | None = CHAT
    profile_name: str | None = "default"


def test_a_later_reset_fences_both_paths_an_earlier_one_does_not():
    rows = [
        R("old", 100, 110, "agent_close", last_activity_at=105),
        R("reset", 200, 210, "session_reset"),
        R("after", 300, 310, "agent_close", last_activity_at=305),
    ]
    got = fences(rows, FENCED_FROM_SCHEMA)
    assert got["old"] == Fence(True, True)
    assert "after" not in got
    # the reset row ended after its own start: it fences itself too (a completed handoff's row
    # ended by a deliberate reset is not resumed)
    assert got["reset"] == Fence(True, True)


def test_the_fence_reads_the_activity_column_else_the_start():
    rows = [R("a", 100, 500, "agent_close", last_activity_at=None), R("b", 200, 300, "idle")]
    assert fences(rows, 31)["a"].by_key  # 300 > started 100, though a ended at 500
    rows[0].last_activity_at = 400
    assert "a" not in fences(rows, 31)


def test_key_and_chat_fences_are_their_own():
    other_key = [
        R("a", 100, 110, "agent_close", last_activity_at=105),
        R("b", 200, 210, "daily", session_key="k2"),
    ]
    assert fences(other_key, 31)["a"] == Fence(False, True)
    other_chat = [
        R("a", 100, 110, "agent_close", last_activity_at=105),
        R("b", 200, 210, "daily", peer=Peer("telegram", "1", "2", "dm", "")),
    ]
    assert fences(other_chat, 31)["a"] == Fence(True, False)
    other_source = [
        R("a", 100, 110, "agent_close"),
        R("b", 200, 210, "daily", source="discord", peer=CHAT._replace(source="discord")),
    ]
    assert "a" not in fences(other_source, 31)


@pytest.mark.parametrize(
    ("boundary", "row", "fenced"),
    [
        ("default", "default", True),
        (None, "default", True),  # the boundary counts for every owner
        ("work", "default", False),  # another profile's reset never fences
        ("work", None, False),  # the row's owner is not known: kept
        (None, None, True),
    ],
)
def test_the_chat_fence_stays_within_a_profile(boundary, row, fenced):
    rows = [
        R("a", 100, 110, "agent_close", session_key=None, profile_name=row),
        R("b", 200, 210, "session_reset", session_key=None, profile_name=boundary),
    ]
    assert ("a" in fences(rows, 31)) is fenced


def test_no_fence_below_the_schema_that_has_it():
    rows = [R("a", 100, 110, "agent_close"), R("b", 200, 210, "session_reset")]
    assert fences(rows, FENCED_FROM_SCHEMA - 1) == {} and fences(rows, None) == {}


@pytest.mark.parametrize(
    ("key", "profile"),
    [
        ("agent:main:telegram:dm:1", "default"),
        ("agent::telegram:dm:1", "default"),
        ("agent:main~:telegram:dm:1", "main"),
        ("agent:coder:discord:group:9:4", "coder"),
        ("telegram:1", None),
        ("agent", None),
    ],
)
def test_profile_of_key(key, profile):
    assert profile_of_key(key) == profile
