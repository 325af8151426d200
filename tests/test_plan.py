"""The plan as a pure function of (survey, policy, now): table-driven, no database."""

from __future__ import annotations

from pathlib import Path

import pytest

from hermes_keeper.home import Profile
from hermes_keeper.model.conversations import conversations
from hermes_keeper.model.gateway import Peer
from hermes_keeper.model.policy import Policy
from hermes_keeper.run.plan import make_plan
from hermes_keeper.run.survey import SessionFile, SessionRow, Survey, schedule_is_live
from hermes_keeper.sqlite.schema import UNDERSTOOD, SchemaInfo

NOW = 1_800_000_000.0
DAY = 86400.0
TG = Peer("telegram", "1", "1", "dm", "")  # a Telegram DM's identity on a row


def row(sid, source="cli", age=100, open_=False, idle=None, **kw):
    last = NOW - (age if idle is None else idle) * DAY
    start = NOW - age * DAY
    base = dict(
        id=sid,
        source=source,
        started_at=start,
        ended_at=None if open_ else last,
        messages=3,
        content_bytes=300,
        first_message_at=start,
        last_message_at=last,
    )
    base.update(kw)
    return SessionRow(**base)


def survey_of(*rows, files=()):
    schema = SchemaInfo(path="state.db", status=UNDERSTOOD, schema_version=22, page_size=4096, page_count=100)
    s = Survey(Profile("default", Path("/h"), Path("/h")), schema, NOW)
    s.sessions = {r.id: r for r in rows}
    s.message_total = sum(r.messages for r in rows)
    s.files = list(files)
    return s


CASES = [
    # (description, rows, expected pruned ids)
    ("old cron pruned, fresh cron kept", [row("a", "cron", 8), row("b", "cron", 6)], {"a"}),
    ("cli within 90 days kept", [row("a", "cli", 89), row("b", "cli", 91)], {"b"}),
    ("messaging 180 days", [row("a", "telegram", 179), row("b", "discord", 181)], {"b"}),
    ("unknown source uses default 90d", [row("a", "webhook", 91)], {"a"}),
    ("age is last activity, not start", [row("a", "cli", 300, idle=0.01)], set()),
    ("titled kept", [row("a", "cli", 200, title="plans")], set()),
    ("pinned kept", [row("a", "cron", 200, pinned=True)], set()),
    ("open sessions never pruned", [row("a", "cron", 200, open_=True)], set()),
    ("routed kept", [row("a", "telegram", 400, routed=True)], set()),
    ("recoverable kept", [row("a", "telegram", 400, session_key="k", end_reason="agent_close")], set()),
    (
        "explicitly ended keyed session prunable",
        [row("a", "telegram", 400, session_key="k", end_reason="new")],
        {"a"},
    ),
    ("live lease kept", [row("a", "cron", 100, lease_expires_at=NOW + 60)], set()),
    ("expired lease ignored", [row("a", "cron", 100, lease_expires_at=NOW - 60)], {"a"}),
    ("handoff in flight kept", [row("a", "cli", 100, handoff_state="pending")], set()),
    ("topic binding kept", [row("a", "telegram", 400, topic_bound=True)], set()),
    ("pending delegation kept", [row("a", "cli", 100, pending_delegation=True)], set()),
    (
        "compression chain kept whole when its tail is recent",
        [row("p", "cli", 200, end_reason="compression"), row("c", "cli", 200, idle=1, parent_id="p")],
        set(),
    ),
    (
        "compression chain pruned whole when all old",
        [row("p", "cli", 200, end_reason="compression"), row("c", "cli", 199, parent_id="p")],
        {"p", "c"},
    ),
    (
        "titled chain member protects the chain",
        [row("p", "cli", 200, end_reason="compression", title="t"), row("c", "cli", 199, parent_id="p")],
        set(),
    ),
    (
        "delegate child goes with its parent",
        [row("p", "cli", 50), row("d", "subagent", 50, parent_id="p", delegate_from="p")],
        set(),
    ),
    (
        "delegate child pruned with its parent",
        [row("p", "cli", 100), row("d", "subagent", 100, parent_id="p", delegate_from="p")],
        {"p", "d"},
    ),
    (
        "branch is its own conversation",
        [row("p", "cli", 100), row("b", "cli", 10, parent_id="p", branched_from="p")],
        {"p"},
    ),
    (
        "legacy branch (parent ended 'branched') is its own conversation",
        [row("p", "cli", 100, end_reason="branched"), row("b", "cli", 10, parent_id="p")],
        {"p"},
    ),
    (
        "untagged subagent child (pre-v16) keeps its parent",
        [row("p", "cli", 100), row("d", "subagent", 1, parent_id="p")],
        set(),
    ),
    (
        "untagged subagent child pruned with its parent",
        [row("p", "cli", 100), row("d", "subagent", 100, parent_id="p")],
        {"p", "d"},
    ),
    (
        "old branch pruned while its parent is kept",
        [row("p", "cli", 10), row("b", "cli", 100, parent_id="p", branched_from="p")],
        {"b"},
    ),
]


@pytest.mark.parametrize("desc, rows, expected", CASES, ids=[c[0] for c in CASES])
def test_retention(desc, rows, expected):
    plan = make_plan(survey_of(*rows), Policy(), NOW)
    assert set(plan.prune) == expected
    assert all(plan.decisions[r.id].reason.text for r in rows)


def test_keep_titled_false():
    p = Policy(keep_titled=False)
    assert make_plan(survey_of(row("a", "cli", 200, title="t")), p, NOW).prune == ["a"]


def test_children_pruned_before_parents():
    rows = [
        row("p", "cli", 200, end_reason="compression"),
        row("c1", "cli", 199, parent_id="p", end_reason="compression"),
        row("c2", "cli", 198, parent_id="c1"),
    ]
    assert make_plan(survey_of(*rows), Policy(), NOW).prune == ["c2", "c1", "p"]


ZOMBIE_CASES = [
    ("idle open cli closed at last activity", row("a", "cli", 10, open_=True, idle=3), True),
    ("recently active not closed", row("a", "cli", 10, open_=True, idle=0.5), False),
    ("routed not closed", row("a", "telegram", 10, open_=True, idle=5, routed=True), False),
    (
        "gateway-keyed messaging not closed",
        row("a", "telegram", 10, open_=True, idle=5, session_key="k"),
        False,
    ),
    ("leased not closed", row("a", "cli", 10, open_=True, idle=5, lease_expires_at=NOW + 5), False),
    ("ended session not a zombie", row("a", "cli", 10, idle=5), False),
]


@pytest.mark.parametrize("desc, r, closed", ZOMBIE_CASES, ids=[c[0] for c in ZOMBIE_CASES])
def test_zombies(desc, r, closed):
    plan = make_plan(survey_of(r), Policy(), NOW)
    assert bool(plan.zombies) is closed
    if closed:
        assert plan.zombies[0].ended_at == r.last_message_at


def test_disk_budget_takes_oldest_unprotected_first():
    rows = [row(f"s{i}", "cli", 10 + i, content_bytes=1000) for i in range(10)] + [
        row("t", "cli", 500, content_bytes=1000, title="kept")
    ]
    # 11 sessions x 1000 content bytes; db 110_000 bytes -> 10 bytes of db per content byte.
    policy = Policy(max_db_bytes=80_000, low_water=0.5)
    plan = make_plan(survey_of(*rows), policy, NOW, db_bytes=110_000)
    assert set(plan.prune) == {"s9", "s8", "s7", "s6", "s5", "s4", "s3"}
    assert "t" not in plan.prune
    assert all(plan.decisions[s].reason.code == "disk_budget" for s in plan.prune)
    assert plan.est_freed_bytes == 70_000


def test_files():
    f = [
        SessionFile(Path("/h/sessions/a.jsonl"), "transcript", 10, NOW - DAY, "a"),
        SessionFile(Path("/h/sessions/ghost.json"), "transcript", 20, NOW - 30 * DAY),
        SessionFile(Path("/h/sessions/new_ghost.json"), "transcript", 20, NOW - DAY),
        SessionFile(
            Path("/h/sessions/request_dump_b_20260101_000000_1.json"),
            "request_dump",
            5,
            NOW - 8 * DAY,
            "b",
        ),
        SessionFile(Path("/h/sessions/link.json"), "transcript", 5, NOW - 99 * DAY, symlink=True),
        SessionFile(Path("/h/sessions/saved/x.md"), "saved", 5, NOW - 99 * DAY),
    ]
    plan = make_plan(survey_of(row("a", "cron", 30), row("b", "cli", 1), files=f), Policy(), NOW)
    assert {Path(x.path).name for x in plan.files} == {
        "a.jsonl",
        "ghost.json",
        "request_dump_b_20260101_000000_1.json",
    }
    assert [Path(x.path).name for x in plan.kept_files] == ["link.json"]


def test_units_are_transitive():
    rows = [
        row("a", end_reason="compression"),
        row("b", parent_id="a", end_reason="compression"),
        row("c", parent_id="b"),
        row("x"),
    ]
    groups = sorted(sorted(m) for m in conversations(survey_of(*rows).sessions.values()).members.values())
    assert groups == [["a", "b", "c"], ["x"]]


@pytest.mark.parametrize(
    ("heartbeat", "closed"),
    [
        ((NOW - 5 * DAY, NOW - 60), False),  # fresh, started before the session: owns it
        ((NOW - 3 * DAY - 60, NOW - 60), False),  # started within 2 x zombie_after after it: could own it
        ((NOW - 3 * DAY + 60, NOW - 60), True),  # started later than that: a newer backend, not its owner
        ((NOW - 9 * DAY, NOW - 2 * DAY - 60), True),  # silent for longer than 2 x zombie_after: dead
    ],
)
def test_zombie_closing_respects_upstreams_heartbeat_gate(heartbeat, closed):
    survey = survey_of(row("z", "tui", 5, open_=True, idle=2))
    survey.heartbeats = [heartbeat]
    plan = make_plan(survey, Policy(), NOW)
    assert bool(plan.zombies) is closed


@pytest.mark.parametrize(
    ("kw", "kept"),
    [
        ({"turn_lease_expires_at": NOW + 60}, True),
        ({"turn_lease_expires_at": NOW + 60, "turn_lease_holder_dead": True}, False),
        ({"turn_lease_expires_at": NOW - 1}, False),
        ({"lease_expires_at": NOW + 60}, True),
        ({"lease_expires_at": NOW + 60, "lease_holder_dead": True}, False),
        ({"runtime_lease": True}, True),
        ({"session_key": "k", "end_reason": "superseded_by_resume"}, True),
        ({"session_key": "k", "end_reason": "startup_orphan_reap"}, True),
        # a completed handoff owns the row whatever the source's teardown stamped
        ({"session_key": "k", "end_reason": "cli_close", "handoff_state": "completed"}, True),
        ({"session_key": "k", "end_reason": "cli_close", "handoff_state": "failed"}, False),
        # the key path takes a row without messages (an empty keyed row beats minting a new one)
        ({"session_key": "k", "end_reason": "agent_close", "messages": 0, "content_bytes": 0}, True),
        # the chat path needs no key, but messages (Hermes's column counts too)
        ({"end_reason": "agent_close", "peer": TG}, True),
        ({"end_reason": "agent_close", "peer": TG, "messages": 0, "content_bytes": 0}, False),
        ({"end_reason": "agent_close", "peer": TG, "messages": 0, "message_count": 2}, True),
        ({"end_reason": "agent_close", "peer": Peer("cli", "", "", "", "")}, False),  # no chat to find
        ({"end_reason": "user_exit", "peer": TG}, False),
        # a later reset of the same key or chat passes it over (schema 31's fence)
        ({"session_key": "k", "end_reason": "agent_close", "fenced_by_key": True}, False),
        ({"session_key": "k", "end_reason": "agent_close", "peer": TG, "fenced_by_key": True}, True),
        ({"end_reason": "agent_close", "peer": TG, "fenced_by_chat": True}, False),
        ({"live_schedule": True}, True),  # a live /loop or /heartbeat
    ],
)
def test_guards_by_upstreams_rules(kw, kept):
    plan = make_plan(survey_of(row("a", "cli", 200, **kw)), Policy(), NOW)
    assert (plan.prune == []) is kept


@pytest.mark.parametrize(
    ("raw", "live"),
    [
        ('{"prompt": "p", "status": "active"}', True),
        ('{"prompt": "p"}', True),  # Hermes's default status
        ('{"prompt": "p", "status": "paused"}', False),
        ('{"prompt": "p", "status": "done"}', False),
        ('{"prompt": "p", "status": "cleared"}', False),
        ("", False),  # blanked by a gateway reset
        (None, False),
        ("{cut short", True),  # unknown: kept, as Hermes's own store_has_active_* counts it
        ("[1, 2]", True),
    ],
)
def test_which_schedules_are_live(raw, live):
    assert schedule_is_live(raw) is live


def test_an_unreadable_protection_keeps_everything_and_closes_nothing():
    survey = survey_of(row("a", "cron", 200), row("z", "tui", 5, open_=True, idle=2))
    survey.unreadable = ["session_turn_leases (unexpected columns)"]
    plan = make_plan(survey, Policy(), NOW)
    assert plan.prune == [] and plan.zombies == []
    reason = plan.decisions["a"].reason
    assert reason.text == "protection unreadable: session_turn_leases (unexpected columns)"
    assert (reason.code, reason.details) == ("protection_unreadable", {"what": survey.unreadable[0]})


def test_continuations_of_a_pinned_chain_are_not_closed_but_forks_are():
    root = row("r", "tui", 10, pinned=True, end_reason="compression")
    tail = row("t", "tui", 5, open_=True, idle=2, parent_id="r")
    fork = row("f", "tui", 5, open_=True, idle=2, parent_id="r", branched_from="r")
    plan = make_plan(survey_of(root, tail, fork), Policy(), NOW)
    assert [z.session_id for z in plan.zombies] == ["f"]


def test_subagent_kept_for_its_parent_says_so_with_a_code():
    """Not "within retention (90d for subagent)": the subagent's own 7d passed, its parent's 90d not."""
    plan = make_plan(
        survey_of(row("p", "cli", 50), row("d", "subagent", 50, parent_id="p", delegate_from="p")),
        Policy(),
        NOW,
    )
    p, d = plan.decisions["p"].reason, plan.decisions["d"].reason
    assert (p.code, p.text) == ("within_retention", "within retention (90d for cli)")
    assert (d.code, d.text) == ("parent_kept", "kept with its conversation: within retention (90d for cli)")
    assert d.details == {"retention_s": Policy().retention_for("cli"), "source": "cli"}


def test_a_kept_conversation_says_which_member_holds_it_in_a_structured_reason():
    """The words name the member and its reason; the value carries both, made where the plan decided."""
    plan = make_plan(
        survey_of(row("p", "cli", 200, pinned=True), row("c", "cli", 200, parent_id="p", end_reason="x")),
        Policy(),
        NOW,
    )
    p, c = plan.decisions["p"].reason, plan.decisions["c"].reason
    assert (p.code, p.text) == ("pinned", "pinned")
    assert (c.code, c.text) == ("conversation_member", "conversation member p is pinned")
    assert c.details == {"member": "p", "why": p}
    row_of = {d["session_id"]: d for d in plan.to_dict(verbose=True)["decisions"]}
    assert (row_of["c"]["code"], row_of["c"]["reason"]) == ("conversation_member", c.text)


def test_every_decision_has_a_stable_reason_code():
    rows = [
        row("t", "cli", 200, title="plans"),
        row("p", "cron", 200, pinned=True),
        row("r", "telegram", 400, routed=True),
        row("w", "cli", 10),
        row("o", "cron", 200, open_=True),
        row("x", "cron", 30),
    ]
    plan = make_plan(survey_of(*rows), Policy(), NOW)
    assert all(d.reason.code.isidentifier() for d in plan.decisions.values())
    kept = plan.to_dict()["keep_reasons"]
    assert {r["code"] for r in kept} == {"titled", "pinned", "routed", "within_retention", "open"}
    assert plan.decisions["x"].reason.code == "retention"
    assert sum(r["sessions"] for r in kept) == sum(d.action == "keep" for d in plan.decisions.values())


def test_plan_lists_its_steps_and_says_when_deletes_are_final():
    s = survey_of(row("a", "cron", 30), row("z", "cli", 5, open_=True, idle=3))
    steps = make_plan(s, Policy(), NOW).steps()
    assert steps[0].startswith("backup") and steps[1] == "close 1 zombie session"
    assert steps[2].startswith("prune 1 session: archive and verify") and steps[-1].startswith("compact")
    final = make_plan(s, Policy(archive=False), NOW)
    assert "NO archive (final)" in final.steps()[2] and final.to_dict()["archive"] is False
    assert make_plan(survey_of(row("b", "cli", 5)), Policy(), NOW).steps() == []
