"""The plan's edges, each where a one-token change (a mutant, ``tools/mutate.py``) would move it.

``tests/test_plan.py`` holds the rules; these hold their boundaries (exactly at a retention, a
lease's expiry, a heartbeat's staleness), the fields every decision and close carries, and the
plan's JSON, so that each surviving mutant of ``run/plan.py`` fails here or is explained as
equivalent in ``docs/testing.md``. Pure: no database, no clock.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import pytest

from hermes_keeper import units
from hermes_keeper.archive.retention import Drop, RetentionPlan
from hermes_keeper.hermes_config import AutoPrune
from hermes_keeper.model.policy import Policy
from hermes_keeper.run import reasons as why
from hermes_keeper.run.files import SYMLINK, FileAction, Folders, Found
from hermes_keeper.run.plan import (
    ARCHIVE,
    FUTURE_SLACK_S,
    NONE,
    REFUSE,
    SNAPSHOT,
    Decision,
    Safeguard,
    ZombieClose,
    compact_step,
    heartbeat_owned,
    hermes_auto_prunes,
    make_plan,
    pinned_tails,
    protections,
    safeguard,
    zombie_blockers,
)
from hermes_keeper.run.survey import SessionFile
from hermes_keeper.sqlite import walreset
from hermes_keeper.sqlite.holders import Holder
from tests.test_plan import DAY, NOW, row, survey_of

HOLDERS = [Holder(7, "hermes", "hermes gateway"), Holder(8, "python", "")]
RECOVERABLE = why.GATEWAY_RECOVERABLE  # an open keyed row: also what its key finds
AUTO = AutoPrune(enabled=True, retention_days=30, min_interval_hours=24, origin="config.yaml")


# --- protections and leases, exactly at their edges ------------------------------------------------


def test_a_lease_that_expires_now_is_not_live():
    plan = make_plan(survey_of(row("a", "cron", 100, lease_expires_at=NOW)), Policy(), NOW)
    assert plan.prune == ["a"]


@pytest.mark.parametrize(
    ("kw", "reasons"),
    [
        ({"open_": True, "idle": 1}, [why.OPEN]),  # idle exactly zombie_after (1d): a zombie
        ({"open_": True, "idle": 0.5}, [why.OPEN_ACTIVE]),
        ({"last_message_at": NOW + FUTURE_SLACK_S, "ended_at": NOW + FUTURE_SLACK_S}, []),  # the slack: dated
        ({"idle": -2 * FUTURE_SLACK_S / DAY}, [why.FUTURE]),
        ({"idle": 0}, []),
        ({"restored_until": NOW}, []),  # its keep ends now
        ({"restored_until": NOW + 2 * DAY}, [why.restored(2 * DAY)]),
    ],
)
def test_protections_at_their_edges(kw, reasons):
    assert protections(row("a", "cli", 5, **kw), Policy(), NOW) == reasons


def test_a_restored_session_says_how_long_its_keep_lasts():
    (reason,) = protections(row("a", "cli", 500, restored_until=NOW + 2 * DAY), Policy(), NOW)
    assert reason.text == "restored from the archive (2d more)"


def test_a_single_protected_session_gives_its_own_reason_not_a_members():
    plan = make_plan(survey_of(row("a", "cron", 200, pinned=True)), Policy(), NOW)
    assert plan.decisions["a"].reason.text == "pinned"


def test_a_parent_cycle_beyond_the_start_ends_the_pinned_tail_walk():
    """``a`` continues ``b``, and ``b`` and ``c`` continue each other: the walk from ``a`` must stop."""
    rows = [
        row("a", end_reason="compression", parent_id="b"),
        row("b", end_reason="compression", parent_id="c"),
        row("c", end_reason="compression", parent_id="b"),
    ]
    assert pinned_tails(survey_of(*rows)) == set()


@pytest.mark.parametrize(
    ("heartbeat", "owned"),
    [
        ((NOW - 10 * DAY, NOW - 2 * DAY), True),  # last heartbeat exactly the staleness ago
        ((NOW - 10 * DAY, NOW - 2 * DAY - 1), False),
        ((NOW - 5 * DAY + 2 * DAY, NOW), True),  # started exactly the staleness after the session
        ((NOW - 5 * DAY + 2 * DAY + 1, NOW), False),
    ],
)
def test_heartbeat_ownership_at_its_edges(heartbeat, owned):
    survey = survey_of()
    survey.heartbeats = [heartbeat]
    assert heartbeat_owned(row("z", "tui", 5, open_=True), survey, NOW, 2 * DAY) is owned


@pytest.mark.parametrize(
    ("r", "tails", "heartbeats", "reasons"),
    [
        (row("z", "telegram", 5, open_=True, session_key="k"), set(), [], [RECOVERABLE, why.GATEWAY_KEY]),
        (row("z", "cli", 5, open_=True, session_key="k"), set(), [], [RECOVERABLE]),
        (row("z", "telegram", 5, open_=True), set(), [], []),
        (row("z", "cli", 5, open_=True, pinned=True), set(), [], [why.PINNED]),
        (row("z", "cli", 5, open_=True), {"z"}, [], [why.PINNED_CHAIN]),
        (row("z", "cli", 5, open_=True), set(), [(NOW - 6 * DAY, NOW)], [why.HEARTBEAT]),
    ],
)
def test_zombie_blockers_name_what_blocks(r, tails, heartbeats, reasons):
    survey = survey_of(r)
    survey.heartbeats = heartbeats
    assert zombie_blockers(r, survey, Policy(), NOW, tails) == reasons


# --- Hermes's own auto-prune ----------------------------------------------------------------------

AUTO_CASES = [
    # (description, auto_prune, row kwargs, tails, Hermes deletes it)
    ("ended and idle past its retention", AUTO, {}, set(), True),
    ("no auto-prune", None, {}, set(), False),
    ("auto-prune off", AutoPrune(False, 30, 24, "default"), {}, set(), False),
    ("open", AUTO, {"open_": True}, set(), False),
    ("idle exactly its retention", AUTO, {"idle": 30}, set(), False),
    ("idle less than its retention", AUTO, {"idle": 3}, set(), False),
    ("pinned", AUTO, {"pinned": True}, set(), False),
    ("in a pinned chain", AUTO, {}, {"a"}, False),
    ("live compression lock", AUTO, {"lease_expires_at": NOW + 60}, set(), False),
    (
        "compression lock of a dead holder",
        AUTO,
        {"lease_expires_at": NOW + 60, "lease_holder_dead": True},
        set(),
        True,
    ),
    ("expired compression lock", AUTO, {"lease_expires_at": NOW - 60}, set(), True),
    ("live turn lease", AUTO, {"turn_lease_expires_at": NOW + 60}, set(), False),
    (
        "turn lease of a dead holder",
        AUTO,
        {"turn_lease_expires_at": NOW + 60, "turn_lease_holder_dead": True},
        set(),
        True,
    ),
    ("expired turn lease", AUTO, {"turn_lease_expires_at": NOW - 60}, set(), True),
]


@pytest.mark.parametrize(("desc", "ap", "kw", "tails", "deletes"), AUTO_CASES, ids=[c[0] for c in AUTO_CASES])
def test_which_sessions_hermes_auto_prune_deletes(desc, ap, kw, tails, deletes):
    survey = survey_of()
    survey.auto_prune = ap
    assert hermes_auto_prunes(row("a", "cli", 100, **kw), survey, NOW, tails) is deletes


def test_the_plan_names_what_hermes_will_delete_that_it_keeps_a_closed_zombie_among_them():
    rows = [
        row("t", "cli", 100, title="kept by its title"),
        row("z", "cli", 40, open_=True),  # closed by this run at its last activity, 40 days ago
        row("o", "cron", 100),  # pruned by this run: not Hermes's to delete
        row("f", "cli", 2),
    ]
    survey = survey_of(*rows)
    survey.auto_prune = AUTO
    plan = make_plan(survey, Policy(), NOW)
    assert plan.prune == ["o"] and [z.session_id for z in plan.zombies] == ["z"]
    assert plan.hermes_deletes_kept == ["t", "z"]
    assert plan.hermes_auto_prune == AUTO.to_dict() | {"next_run": NOW}
    assert plan.to_dict()["hermes_auto_prune"]["deletes_kept"] == 2


# --- what undoes a run ----------------------------------------------------------------------------

BLOCKED = (
    "state.db is in delete journal mode and open by pid 7 (hermes gateway); pid 8 (python),"
    " where every commit of it restarts a snapshot"
)
ARCHIVED = (
    ": every pruned session is archived and verified before it is deleted, and zombie closes are"
    " journaled with their previous values"
)
REFUSED = (
    ", and without the archive nothing would undo the deletes; run with the archive,"
    " or while Hermes is stopped"
)
SAFEGUARDS = [
    # (backup, archive, journal mode, holders, deletes, safeguard)
    (True, True, "wal", HOLDERS, False, Safeguard(NONE, "nothing is deleted: no snapshot needed")),
    (
        True,
        True,
        "wal",
        HOLDERS,
        True,
        Safeguard(SNAPSHOT, "a verified snapshot of state.db before the first change"),
    ),
    (
        True,
        True,
        "delete",
        [],
        True,
        Safeguard(SNAPSHOT, "a verified snapshot of state.db before the first change"),
    ),
    (True, True, "delete", HOLDERS, True, Safeguard(ARCHIVE, f"no snapshot ({BLOCKED}){ARCHIVED}")),
    (False, True, "wal", [], True, Safeguard(ARCHIVE, f"no snapshot (backup = false){ARCHIVED}")),
    (True, False, "delete", HOLDERS, True, Safeguard(REFUSE, BLOCKED + REFUSED)),
    (
        False,
        False,
        "wal",
        [],
        True,
        Safeguard(NONE, "no snapshot and no archive (backup = false, --no-archive): deletes are final"),
    ),
]


@pytest.mark.parametrize(("backup", "archive", "mode", "holders", "deletes", "expected"), SAFEGUARDS)
def test_what_makes_a_run_undoable(backup, archive, mode, holders, deletes, expected):
    got = safeguard(Policy(backup=backup, archive=archive), mode, holders, deletes)
    assert (got.kind, got.why) == (expected.kind, expected.why)


def test_the_plan_takes_its_safeguard_from_the_surveys_journal_mode_and_holders():
    survey = survey_of(row("a", "cron", 100))
    survey.schema.journal_mode, survey.holders = "delete", HOLDERS
    plan = make_plan(survey, Policy(), NOW)
    assert plan.safeguard == Safeguard(ARCHIVE, f"no snapshot ({BLOCKED}){ARCHIVED}")
    assert not plan.steps()[0].startswith("backup")


# --- decisions and their fields -------------------------------------------------------------------


def test_age_decisions_carry_source_unit_and_words():
    rows = [row("p", "cron", 100, end_reason="compression"), row("c", "cron", 99, parent_id="p")]
    plan = make_plan(survey_of(*rows), Policy(), NOW, db_bytes=6000)
    # 600 content bytes in a 6000-byte database: 10 bytes each
    assert plan.decisions["c"] == Decision(
        "c", "cron", "prune", why.retention(99 * DAY, 7 * DAY, "cron"), "p", 3, 3000
    )
    assert plan.decisions["c"].reason.text == "idle 99d > 7d (cron)"
    assert (plan.decisions["p"].unit, plan.decisions["p"].source) == ("p", "cron")


def test_retention_is_kept_up_to_and_including_its_last_second():
    plan = make_plan(survey_of(row("a", "cli", 90), row("b", "subagent", 90)), Policy(), NOW)
    assert plan.prune == ["b"]
    assert plan.decisions["a"].reason == why.within_retention(90 * DAY, "cli")


def test_a_subagent_exactly_at_its_own_retention_is_within_it():
    rows = [row("p", "cli", 7), row("d", "subagent", 7, parent_id="p", delegate_from="p")]
    plan = make_plan(survey_of(*rows), Policy(), NOW)
    assert plan.decisions["d"].reason == why.within_retention(7 * DAY, "subagent")


def test_units_without_messages_are_pruned_first():
    rows = [
        row("z", "cron", 100, messages=0, content_bytes=0),  # no first message: row 0
        row("a", "cron", 100, first_message_id=1),
    ]
    assert make_plan(survey_of(*rows), Policy(), NOW).prune == ["z", "a"]


def test_pruned_conversations_stay_apart():
    rows = [
        row("p", "cron", 100, end_reason="compression"),
        row("c", "cron", 99, parent_id="p"),
        row("x", "cron", 100),
    ]
    assert sorted(map(sorted, make_plan(survey_of(*rows), Policy(), NOW).prune_conversations())) == [
        ["c", "p"],
        ["x"],
    ]


# --- the disk budget ------------------------------------------------------------------------------


def _budget_rows():
    # 10 content bytes a session in a 100-byte-per-session database
    return [row(f"s{i}", "cli", 10 + i, content_bytes=10) for i in range(5)]


def test_no_budget_pruning_once_the_age_pruning_reaches_the_budget():
    rows = [row("old", "cron", 50, content_bytes=10), *_budget_rows()]
    # 600 bytes, the old cron session frees 100: exactly the budget left
    plan = make_plan(survey_of(*rows), Policy(max_db_bytes=500), NOW, db_bytes=600)
    assert plan.prune == ["old"]
    plan = make_plan(survey_of(*rows), Policy(max_db_bytes=550), NOW, db_bytes=600)
    assert plan.prune == ["old"]


def test_budget_decisions_carry_their_words_and_unit():
    plan = make_plan(survey_of(*_budget_rows()), Policy(max_db_bytes=450, low_water=0.8), NOW, db_bytes=500)
    assert plan.prune == ["s3", "s4"]  # 500 -> 300 <= 360, the oldest first
    d = plan.decisions["s4"]
    assert (d.action, d.unit, d.reason.text) == ("prune", "s4", "disk budget: oldest eligible (idle 14d)")
    assert plan.to_dict()["by_source"] == {"cli": {"prune": 2, "keep": 3, "bytes": 200, "messages": 6}}


def test_the_budget_skips_pruned_and_protected_units_and_looks_at_all_the_rest():
    rows = [
        row("old", "cron", 50, content_bytes=10),  # pruned by age: first in the survey
        row("t", "cli", 60, content_bytes=10, title="t"),  # protected: second
        *_budget_rows(),
    ]
    plan = make_plan(survey_of(*rows), Policy(max_db_bytes=500, low_water=0.6), NOW, db_bytes=700)
    # 700 - 100 = 600 > 500: down to 420, the oldest unprotected first
    assert plan.prune == ["old", "s2", "s3", "s4"]
    assert plan.est_freed_bytes == 400 and len(set(plan.prune)) == len(plan.prune)


# --- zombies --------------------------------------------------------------------------------------


def test_zombie_closes_carry_every_field_and_come_sorted():
    rows = [
        row("p", "tui", 20, end_reason="compression"),
        row("b", "tui", 10, open_=True, idle=1, parent_id="p", end_reason="user_exit"),  # exactly 1d idle
        row("a", "cli", 10, open_=True, idle=3),
    ]
    plan = make_plan(survey_of(*rows), Policy(), NOW)
    assert plan.zombies == [
        ZombieClose("a", "cli", NOW - 3 * DAY, 3 * DAY, "a", None),
        ZombieClose("b", "tui", NOW - DAY, DAY, "p", "user_exit"),
    ]


# --- files ----------------------------------------------------------------------------------------


def test_file_actions_in_full():
    old, fresh = NOW - 8 * DAY, NOW - DAY
    files = [
        SessionFile(Path("/h/sessions/saved/x.md"), "saved", 5, old),  # not the plan's: first in the list
        SessionFile(Path("/h/sessions/link.json"), "transcript", 6, old, "k", symlink=True),
        SessionFile(Path("/h/sessions/a.json"), "snapshot", 7, fresh, "a"),
        SessionFile(Path("/h/sessions/orphan.json"), "transcript", 8, old),
        SessionFile(Path("/h/sessions/edge.json"), "transcript", 9, NOW - 7 * DAY),  # exactly max_age
        SessionFile(Path("/h/sessions/kept.jsonl"), "transcript", 10, old, "k"),  # its session is kept
        SessionFile(Path("/h/sessions/request_dump_k_1.json"), "request_dump", 11, old, "k"),
        SessionFile(Path("/h/sessions/request_dump_k_2.json"), "request_dump", 12, fresh, "k"),
        SessionFile(Path("/h/sessions/request_dump_k_3.json"), "request_dump", 13, NOW - 7 * DAY, "k"),
    ]
    survey = survey_of(row("a", "cron", 100), row("k", "cli", 1), files=files)
    job = [
        Found("cron_output", ("cron", "output", "j", n), 14, NOW - age * DAY, group="j")
        for n, age in (("2.md", 1), ("1.md", 40))
    ]
    survey.folders = Folders(job)
    plan = make_plan(survey, Policy(), NOW)
    assert plan.files == [
        FileAction("/h/sessions/a.json", "snapshot", 7, "session pruned", "a"),
        FileAction("/h/sessions/orphan.json", "transcript", 8, "orphan older than 7d", None),
        FileAction(
            "/h/sessions/request_dump_k_1.json", "request_dump", 11, "request dump older than 7d", "k"
        ),
        FileAction("/h/cron/output/j/1.md", "cron_output", 14, "cron output older than 30d"),
    ]
    assert plan.kept_files == [FileAction("/h/sessions/link.json", "transcript", 6, SYMLINK, "k")]
    assert plan.files_by_kind() == {
        "cron_output": {"remove": 1, "bytes": 14, "kept": 0},
        "request_dump": {"remove": 1, "bytes": 11, "kept": 0},
        "snapshot": {"remove": 1, "bytes": 7, "kept": 0},
        "transcript": {"remove": 1, "bytes": 8, "kept": 1},
    }
    assert "remove 4 files" in plan.steps()
    verbose = plan.to_dict(verbose=True)
    assert verbose["file_actions"] == [asdict(f) for f in plan.files]
    assert verbose["kept_files"] == [asdict(f) for f in plan.kept_files]


# --- warnings -------------------------------------------------------------------------------------


def test_warnings_in_full(monkeypatch):
    monkeypatch.setattr(walreset, "LINKED", (3, 40, 1))  # a SQLite with the WAL-reset bug, wherever this runs
    rows = [
        row("f1", "cli", 1, idle=-1),
        row("f2", "cli", 1, idle=-1),
        row(
            "e", "cli", 1, last_message_at=NOW + FUTURE_SLACK_S, ended_at=NOW + FUTURE_SLACK_S
        ),  # not counted
        row("n", "cli", 1, idle=0),
    ]
    survey = survey_of(*rows)
    survey.routing_problem = "sessions/sessions.json: not JSON"
    survey.folders = Folders([], retired_wal=[Found("retired_wal", ("state.db-wal.retired.1",), 1, NOW)])
    survey.schema.journal_mode, survey.holders = "wal", HOLDERS[:1]
    warnings = make_plan(survey, Policy(), NOW).warnings
    assert warnings[:2] == [
        "sessions/sessions.json: not JSON: routing unknown, every session the gateway could route to is kept",
        "2 sessions dated in the future: kept, their age is unknown",
    ]
    assert warnings[2].startswith(
        "1 retired WAL generation of state.db needs recovery (state.db-wal.retired.1/)"
    )
    assert warnings[3] == walreset.wal_guard(survey.profile.db_path, "wal", HOLDERS[:1]).note()
    assert "pid 7 (hermes gateway) holds state.db" in warnings[3] and len(warnings) == 4


def test_a_plain_home_has_no_warnings():
    assert make_plan(survey_of(row("a", "cli", 1)), Policy(), NOW).warnings == []


# --- the compact step and the plan's JSON ---------------------------------------------------------


def test_the_compact_step_in_words():
    assert compact_step("incremental", 10**6, 60.0) == "incremental vacuum in budgeted steps"
    assert compact_step("none", 2 * 10**6, 60.0) == (
        f"one-time VACUUM to incremental auto-vacuum (~{units.size(2 * 10**6)} to copy): with Hermes"
        " stopped, or beside it if its measured stall estimate is at most 1m (a one-time wait of"
        " Hermes's writes, at a quiet moment if one comes); otherwise the freed pages stay in state.db,"
        " reclaimable"
    )


def test_the_plans_compact_step_follows_the_databases_auto_vacuum_and_what_is_left():
    survey = survey_of(row("a", "cron", 100, content_bytes=100), row("b", "cli", 1, content_bytes=200))
    plan = make_plan(survey, Policy(), NOW, db_bytes=3_000_000)
    assert plan.compact == compact_step(None, 2_000_000, Policy().live_vacuum_stall_s)
    survey.schema.auto_vacuum = "incremental"
    assert make_plan(survey, Policy(), NOW).compact == "incremental vacuum in budgeted steps"


def test_the_plans_json_in_full():
    rows = [
        row("a", "cron", 100, messages=4, content_bytes=100),
        row("t", "cli", 200, title="t", messages=5),
        row("w", "cli", 10, messages=6),
        row("v", "cli", 20, messages=7),
        row("z", "cli", 10, open_=True, idle=3, messages=1),
    ]
    survey = survey_of(*rows)
    survey.message_total = 30  # more than the rows say: the remaining count comes from the survey
    plan = make_plan(survey, Policy(compact=False), NOW, db_bytes=1300)
    out = plan.to_dict()
    assert out == {
        "profile": "default",
        "now": NOW,
        "zombies": [
            {
                "session_id": "z",
                "source": "cli",
                "ended_at": NOW - 3 * DAY,
                "idle_s": 3 * DAY,
                "lease_key": "z",
                "end_reason": None,
            }
        ],
        "prune": {"sessions": 1, "messages": 4, "est_bytes": 100},
        "files": {
            "remove": 0,
            "bytes": 0,
            "kept": 0,
            "by_kind": {},
            "not_in_state_db": plan.not_in_state_db.to_dict(),
        },
        "by_source": {"cli": {"keep": 4}, "cron": {"prune": 1, "bytes": 100, "messages": 4}},
        "keep_reasons": [
            {"code": "within_retention", "reason": "within retention (90d for cli)", "sessions": 2},
            {"code": "titled", "reason": "titled", "sessions": 1},
            {"code": "open", "reason": "open", "sessions": 1},
        ],
        "db_bytes": 1300,
        "compact": "",
        "remaining": {"sessions": 4, "messages": 26},
        "hermes_auto_prune": None,
        "warnings": [],
        "safeguard": {"kind": SNAPSHOT, "why": "a verified snapshot of state.db before the first change"},
        "archive_retention": None,
        "archive": True,
        "backup": None,  # its cost: filled in by Profile.plan, where the folder and the disk are known
        "steps": [
            "backup: a verified snapshot of state.db",
            "close 1 zombie session",
            "prune 1 session: archive and verify, then delete, in short transactions",
        ],
    }
    verbose = plan.to_dict(verbose=True)
    assert verbose == out | {
        "decisions": [plan.decisions[k].to_dict() for k in sorted(plan.decisions)],
        "file_actions": [],
        "hermes_deletes_kept": [],
        "kept_files": [],
    }
    assert verbose["decisions"][0] == {
        "session_id": "a",
        "source": "cron",
        "action": "prune",
        "reason": "idle 100d > 7d (cron)",
        "unit": "a",
        "messages": 4,
        "est_bytes": 100,
        "code": "retention",
    }


def test_a_plan_without_an_archive_says_its_deletes_are_final():
    plan = make_plan(survey_of(row("a", "cron", 100)), Policy(archive=False, compact=False), NOW)
    assert plan.steps() == [
        "backup: a verified snapshot of state.db",
        "prune 1 session: delete with NO archive (final), in short transactions",
    ]


def test_the_plans_json_gives_the_archive_retentions_drops_when_verbose():
    plan = make_plan(survey_of(row("a", "cli", 1)), Policy(), NOW)
    plan.archive_retention = RetentionPlan(
        keep_s=DAY, max_bytes=None, drops=[Drop(1, "x", "f", 10, "keep", True)]
    )
    assert plan.to_dict()["archive_retention"] == plan.archive_retention.to_dict()
    assert plan.to_dict(verbose=True)["archive_retention"]["drops"] == [
        asdict(d) for d in plan.archive_retention.drops
    ]


def test_the_backup_step_says_its_cost_where_the_run_measured_it():
    """The run sizes the backup before the plan is shown: the step says where it goes and the room."""
    plan = make_plan(survey_of(row("a", "cron", 100)), Policy(compact=False), NOW)
    plan.backup = {
        "est_bytes": 23_400_000,
        "folder": "/h/keeper/backups",
        "db_bytes": 58_500_000,
        "free_bytes": 12_000_000_000,
    }
    assert plan.steps()[0] == (
        "backup: a verified snapshot of state.db (~23.4 MB compressed into /h/keeper/backups,"
        " 58.5 MB more while it is made; 12.0 GB free there)"
    )
