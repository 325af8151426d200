"""Backup rotation as a pure function (restic ``forget`` semantics), fixed timestamps."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from hermes_keeper import demo
from hermes_keeper.backup import snapshot
from hermes_keeper.backup.rotation import Candidate, plan_rotation
from hermes_keeper.backup.snapshot import apply_rotation, backup_dir, list_backups, take_backup
from hermes_keeper.home import select_profiles

#: Only the newest backup: every calendar rule off.
LAST_ONE = dict(keep_last=1, keep_daily=0, keep_weekly=0, keep_monthly=0)


def ts(s: str) -> float:
    return datetime.fromisoformat(s).replace(tzinfo=UTC).timestamp()


def kept(decisions):
    return [d.id for d in decisions if d.keep]


CASES = [
    (
        "keep-last only",
        ["2026-12-01T10:00", "2026-12-01T11:00", "2026-12-01T12:00", "2026-12-01T13:00"],
        dict(keep_last=2, keep_daily=0, keep_weekly=0, keep_monthly=0),
        ["2026-12-01T13:00", "2026-12-01T12:00"],
    ),
    (
        "daily keeps newest of each day",
        ["2026-11-29T01:00", "2026-11-29T23:00", "2026-11-30T05:00", "2026-12-01T08:00", "2026-12-01T09:00"],
        dict(keep_last=0, keep_daily=2, keep_weekly=0, keep_monthly=0),
        ["2026-12-01T09:00", "2026-11-30T05:00"],
    ),
    # 2026-12-31 (Thu) and 2027-01-03 (Sun) are both ISO week 2026-W53; 2027-01-04 is 2027-W01.
    (
        "ISO week across new year",
        ["2026-12-28T00:00", "2026-12-31T12:00", "2027-01-03T12:00", "2027-01-04T00:00"],
        dict(keep_last=0, keep_daily=0, keep_weekly=2, keep_monthly=0),
        ["2027-01-04T00:00", "2027-01-03T12:00"],
    ),
    (
        "month boundary",
        ["2026-10-31T23:59", "2026-11-01T00:00", "2026-11-30T23:59", "2026-12-01T00:01"],
        dict(keep_last=0, keep_daily=0, keep_weekly=0, keep_monthly=2),
        ["2026-12-01T00:01", "2026-11-30T23:59"],
    ),
    (
        "OR semantics",
        ["2026-10-15T00:00", "2026-11-20T00:00", "2026-12-01T00:00", "2026-12-01T01:00"],
        dict(keep_last=1, keep_daily=1, keep_weekly=0, keep_monthly=3),
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
    d = {x.id: x for x in plan_rotation(backups, **LAST_ONE)}
    assert d["old-good"].keep and "newest verified backup" in d["old-good"].reasons
    assert d["new-bad"].keep and d["new-bad"].reasons == ["last 1 (#1)"]


def test_plain_tuples_and_no_backups():
    assert plan_rotation([]) == []
    [d] = plan_rotation([("only", ts("2026-06-01T00:00"), False)], **(LAST_ONE | {"keep_last": 0}))
    assert not d.keep  # nothing verified to protect, no rule keeps it


def test_a_backup_from_the_future_is_kept_and_takes_no_slot():
    now = ts("2026-12-02T12:00")
    backups = [
        ("skewed", ts("2027-03-01T00:00"), True),  # the clock was wrong when this was taken
        ("today", ts("2026-12-02T10:00"), True),
        ("yesterday", ts("2026-12-01T10:00"), True),
    ]
    d = {x.id: x for x in plan_rotation(backups, now=now, **LAST_ONE)}
    assert d["skewed"].keep and d["skewed"].reasons == ["dated in the future (clock skew): kept"]
    assert d["today"].reasons == ["last 1 (#1)", "newest verified backup"]
    assert not d["yesterday"].keep


def nightly(rules: dict, nights: int = 400) -> list[list[Candidate]]:
    """What rotation keeps after each of ``nights`` nightly backups (rotated as a run does)."""
    kept_now: list[Candidate] = []
    out = []
    for i in range(nights):
        now = ts("2026-01-01T03:00") + i * 86400
        kept_now.append(Candidate(str(i), now, True, 100))
        keep = set(kept(plan_rotation(kept_now, now=now, **rules)))
        kept_now = [b for b in kept_now if b.id in keep]
        out.append(list(kept_now))
    return out


def test_defaults_keep_a_bounded_window_of_nightly_backups():
    """Last 3, daily 7, weekly 4, no monthly: from the 25th night on 9 backups (10 one night a
    week), none older than 21 days (12 monthly kept up to 21 backups, 11 months of them)."""
    steady = nightly({})[24:]
    assert {len(k) for k in steady} == {9, 10}
    assert max((k[-1].created_at - k[0].created_at) / 86400 for k in steady) == 21
    assert max(len(k) for k in nightly({"keep_monthly": 12})[300:]) == 21  # the old default
    assert all(k[-1].id == str(24 + i) for i, k in enumerate(steady))  # tonight's is always kept


def test_max_bytes_drops_the_oldest_kept_never_the_newest_verified():
    backups = [Candidate(str(i), ts("2026-12-01T03:00") + i * 86400, i != 9, 100) for i in range(10)]
    d = {x.id: x for x in plan_rotation(backups, now=ts("2026-12-11T00:00"), max_bytes=350)}
    assert [i for i in d if d[i].keep] == ["9", "8", "7"]  # 9 fails to verify: 8 is kept whatever
    tiny = {x.id: x for x in plan_rotation(backups, now=ts("2026-12-11T00:00"), max_bytes=0)}
    assert [i for i in tiny if tiny[i].keep] == ["8"] and tiny["8"].reasons[-1] == "newest verified backup"


def test_apply_rotation_per_home_in_a_shared_folder(tmp_path, unmarked):
    dest = tmp_path / "shared"
    homes = {}
    for name in ("a", "b"):
        homes[name] = tmp_path / name
        demo.build_home(homes[name], demo.generate(ts("2026-11-01T00:00"), sessions=5))
    a, b = (select_profiles(homes[n])[0] for n in ("a", "b"))
    only_b = take_backup(b, dest, now=ts("2026-11-01T00:00"))
    of_a = [take_backup(a, dest, now=ts(f"2026-11-0{day}T00:00")) for day in (2, 3, 4)]
    removed = apply_rotation(dest, **LAST_ONE)
    assert removed == sorted(r.name for r in of_a[:2])
    assert [r.name for r in list_backups(dest)] == [only_b.name, of_a[-1].name]  # b's old one stays
    assert sorted(p.name for p in dest.glob("*.zst")) == sorted([only_b.name, of_a[-1].name])


def test_a_new_backup_does_not_rehash_the_earlier_ones(tmp_path, monkeypatch, unmarked):
    """Rotation trusts the manifest's size; only the backup being written is hashed."""
    home = tmp_path / "home"
    demo.build_home(home, demo.generate(ts("2026-11-01T00:00"), sessions=5))
    [p] = select_profiles(home)
    for day in (1, 2, 3):
        take_backup(p, now=ts(f"2026-11-0{day}T00:00"))
    hashed = []
    monkeypatch.setattr(snapshot, "sha256_file", lambda path: hashed.append(path) or "x")
    removed = apply_rotation(backup_dir(p), p.home, **LAST_ONE)
    assert len(removed) == 2 and hashed == []
    assert [r.name for r, _, ok in snapshot.rotation(backup_dir(p), p.home) if ok] == []  # listing verifies
    assert len(hashed) == 1
