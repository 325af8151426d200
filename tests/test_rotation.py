"""Backup rotation as a pure function (restic ``forget`` semantics), fixed timestamps."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from hermes_keeper.rotation import Candidate, plan_rotation


def ts(s: str) -> float:
    return datetime.fromisoformat(s).replace(tzinfo=timezone.utc).timestamp()


def kept(decisions):
    return [d.id for d in decisions if d.keep]


CASES = [
    (
        "keep-last only",
        ["2026-12-01T10:00", "2026-12-01T11:00", "2026-12-01T12:00", "2026-12-01T13:00"],
        dict(keep_last=2, daily=0, weekly=0, monthly=0),
        ["2026-12-01T13:00", "2026-12-01T12:00"],
    ),
    (
        "daily keeps newest of each day",
        ["2026-11-29T01:00", "2026-11-29T23:00", "2026-11-30T05:00", "2026-12-01T08:00", "2026-12-01T09:00"],
        dict(keep_last=0, daily=2, weekly=0, monthly=0),
        ["2026-12-01T09:00", "2026-11-30T05:00"],
    ),
    # 2026-12-31 (Thu) and 2027-01-03 (Sun) are both ISO week 2026-W53; 2027-01-04 is 2027-W01.
    (
        "ISO week across new year",
        ["2026-12-28T00:00", "2026-12-31T12:00", "2027-01-03T12:00", "2027-01-04T00:00"],
        dict(keep_last=0, daily=0, weekly=2, monthly=0),
        ["2027-01-04T00:00", "2027-01-03T12:00"],
    ),
    (
        "month boundary",
        ["2026-10-31T23:59", "2026-11-01T00:00", "2026-11-30T23:59", "2026-12-01T00:01"],
        dict(keep_last=0, daily=0, weekly=0, monthly=2),
        ["2026-12-01T00:01", "2026-11-30T23:59"],
    ),
    (
        "OR semantics",
        ["2026-10-15T00:00", "2026-11-20T00:00", "2026-12-01T00:00", "2026-12-01T01:00"],
        dict(keep_last=1, daily=1, weekly=0, monthly=3),
        ["2026-12-01T01:00", "2026-11-20T00:00", "2026-10-15T00:00"],
    ),
]


@pytest.mark.parametrize("desc, stamps, rules, expected", CASES, ids=[c[0] for c in CASES])
def test_rules(desc, stamps, rules, expected):
    decisions = plan_rotation([Candidate(s, ts(s)) for s in stamps], **rules)
    assert kept(decisions) == expected
    assert all(d.reasons for d in decisions if d.keep) and all(not d.reasons for d in decisions if not d.keep)


def test_never_deletes_the_newest_verified():
    backups = [
        Candidate("old-good", ts("2026-01-01T00:00"), True),
        Candidate("new-bad", ts("2026-12-01T00:00"), False),
    ]
    d = {x.id: x for x in plan_rotation(backups, keep_last=1, daily=0, weekly=0, monthly=0)}
    assert d["old-good"].keep and "newest verified backup" in d["old-good"].reasons
    assert d["new-bad"].keep and d["new-bad"].reasons == ("last 1 (#1)",)


def test_defaults_on_a_year_of_daily_backups():
    stamps = [ts("2026-01-01T03:00") + i * 86400 for i in range(365)]
    decisions = plan_rotation([Candidate(str(i), t) for i, t in enumerate(stamps)])
    # last 3 + 7 daily (overlapping) + 4 weekly + 12 monthly, sharing the newest ones.
    assert 15 <= len(kept(decisions)) <= 26
    assert kept(decisions)[0] == "364"
