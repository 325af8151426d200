"""Archive retention (opt-in): ``[archive] keep`` and ``max_bytes``, oldest first, journaled.

Shown in ``plan`` (with a loud warning for conversations that exist nowhere else), done by
``run``, a whole month file deleted as a file, and an archive over its budget in ``report``.
"""

from __future__ import annotations

import json
import os

import pytest

from hermes_keeper.archive.retention import (
    ArchiveSurvey,
    FileFacts,
    apply_retention,
    plan_retention,
    survey_archive,
)
from hermes_keeper.archive.store import ARCHIVE_NAME, ARCHIVED, PRUNED, Archive, Entry, period_of
from hermes_keeper.home import select_profiles
from tests.archive_home import payload
from tests.test_archive_rollover import _age_archive
from tests.test_dataloss import DAY, NOW, _bring_back, _cli, _home, _run, _spec


def _journal(home, action: str) -> list[dict]:
    lines = (home / "keeper" / "journal.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r["action"] == action]


def _config(home, text: str) -> None:
    (home / "keeper.toml").write_text(text)


def _archived_ids(home) -> list[str]:
    listed = json.loads(_cli("archive", "list", "--home", str(home), "--json").stdout)["profiles"][0][
        "sessions"
    ]
    return sorted(r["session_id"] for r in listed)


def test_by_age_shown_in_plan_done_by_run_and_a_whole_month_file_goes(tmp_path):
    big = "walrus " + os.urandom(20000).hex()  # incompressible: its entry fills pages of its own
    home = _home(tmp_path, _spec("ancient", big, age_days=400), _spec("old", "otter", age_days=120))
    _run(home)
    keeper = home / "keeper"
    _age_archive(keeper / ARCHIVE_NAME, 62)  # archive.db is a month two months back
    _bring_back(home / "state.db", "newer", "narwhal")  # last active 100 days ago
    _run(home)  # archived into this month's file
    assert _archived_ids(home) == ["ancient", "newer", "old"]

    _config(home, '[archive]\nkeep = "365d"\n')
    (plan,) = json.loads(_cli("plan", "--home", str(home), "--json").stdout)["profiles"]
    r = plan["archive_retention"]
    assert (r["drop_entries"], r["gone_for_good"], r["delete_files"]) == (1, 1, [])
    assert r["vacuum_files"] == [ARCHIVE_NAME]  # not the newest file: its free pages go back now
    assert any(
        "1 archived sessions that are not in state.db" in w and "gone for good" in w for w in plan["warnings"]
    )
    text = _cli("plan", "--home", str(home), "-v").output
    assert "drop ancient" in text and "last copy" in text and "gone for good" in text
    assert _archived_ids(home) == ["ancient", "newer", "old"]  # plan changes nothing

    size = os.path.getsize(keeper / ARCHIVE_NAME)
    (ran,) = json.loads(_cli("run", "--home", str(home), "--json").stdout)["profiles"]
    assert ran["archive_retention"]["entries"] == 1 and ran["archive_retention"]["files_deleted"] == 0
    assert _archived_ids(home) == ["newer", "old"]
    assert os.path.getsize(keeper / ARCHIVE_NAME) < size  # vacuumed
    (line,) = _journal(home, "archive_retention")
    assert (
        line["file"] == ARCHIVE_NAME
        and line["sessions"] == ["ancient"]
        and line["gone_for_good"] == ["ancient"]
    )
    assert len(line["entries"]) == 1 and line["bytes"] > 0 and not line["file_deleted"]

    # Every entry of archive.db now expired: the file goes whole; the newest file stays.
    _config(home, '[archive]\nkeep = "110d"\n')
    _cli("run", "--home", str(home), "--quiet")
    assert not (keeper / ARCHIVE_NAME).exists()
    assert [p.name for p in keeper.glob("archive*.db")] == [f"archive-{period_of(NOW)}.db"]
    assert _archived_ids(home) == ["newer"]
    last = _journal(home, "archive_retention")[-1]
    assert last["file_deleted"] and last["sessions"] == ["old"] and last["bytes"] > 0
    # What is left is still whole and restorable.
    assert json.loads(_cli("archive", "verify", "--home", str(home), "--json").stdout)["profiles"][0]["ok"]
    assert _cli("archive", "restore", "newer", "--home", str(home)).exit_code == 0


def _filled(home, months: int = 3, per_month: int = 6) -> list[int]:
    """Archive entries straight into a profile's archive, one month file each; their entries, oldest first."""
    out = []
    with Archive.for_home(home / "keeper") as store:
        for m in range(months):
            at = NOW - (months - m) * 31 * DAY
            for i in range(per_month):
                p = payload(f"s{m}_{i}", "cli", at + i * 60, texts=(os.urandom(2000).hex(),))
                (e,) = store.put([p], now=at)
                store.set_state([e], PRUNED)
                out.append(e)
    return out


def test_by_bytes_oldest_first_until_under_budget_and_report_says_over(tmp_path):
    home = _home(tmp_path)
    entries = _filled(home)
    profile = select_profiles(str(home))[0]
    before = survey_archive(profile)
    assert len(before.files) == 3
    oldest = before.files[0]
    budget = before.bytes - (oldest.bytes - oldest.base_bytes) // 2  # half of the oldest month's entries
    _config(home, f'[archive]\nmax_bytes = "{budget}B"\n')

    rep = json.loads(_cli_report(home))["profiles"][0]["archive"]
    assert rep["over_budget"] and rep["budget"] == budget and rep["bytes"] == before.bytes
    assert rep["entries"] == len(entries) and rep["files"] == 3
    assert "archive over its budget" in _cli("report", "--home", str(home)).output
    usage = profile.archive.usage()
    assert usage.over_budget and usage.oldest == min(e.last_activity for f in before.files for e in f.entries)

    plan = profile.plan()
    dropped = [d.entry for d in plan.archive_retention.drops]
    assert (
        dropped == entries[: len(dropped)] and 0 < len(dropped) < 6
    )  # the oldest, in order, in the oldest file
    assert {d.reason for d in plan.archive_retention.drops} == {"archive over archive.max_bytes"}
    profile.run()
    (line,) = _journal(home, "archive_retention")
    assert line["entries"] == dropped and line["file"] == ARCHIVE_NAME
    assert line["reasons"] == {"archive over archive.max_bytes": len(dropped)}
    after = profile.archive.usage()
    assert not after.over_budget and after.entries == len(entries) - len(dropped)

    # A budget below two months: the two oldest files go whole, the newest keeps what fits.
    left = survey_archive(profile)
    _config(home, f'[archive]\nmax_bytes = "{left.files[-1].bytes}B"\n')
    profile.run()
    assert [f.name for f in survey_archive(profile).files] == [left.files[-1].name]
    assert not profile.archive.usage().over_budget
    deleted = [r for r in _journal(home, "archive_retention") if r["file_deleted"]]
    assert sorted(r["file"] for r in deleted) == sorted(f.name for f in left.files[:-1])


def _cli_report(home) -> str:
    res = _cli("report", "--home", str(home), "--json")
    assert res.exit_code == 0, res.output
    return res.stdout


def _entry(n: int, sid: str, last: float, state: str = PRUNED, stored: int = 100) -> Entry:
    return Entry(sid, "cli", None, None, last, last, last, 1, stored, stored, "x", 22, None, state, last, n)


def test_the_plan_keeps_in_flight_entries_and_says_which_are_the_last_copy():
    old = NOW - 500 * DAY
    files = (
        FileFacts(
            "archive.db", 4000, (_entry(1, "a", old), _entry(2, "b", old, ARCHIVED), _entry(3, "c", old))
        ),
        FileFacts("archive-x.db", 1000, (_entry(4, "d", NOW),)),
    )
    plan = plan_retention(ArchiveSurvey(files, frozenset({"c"})), 365 * DAY, None, NOW)
    assert [(d.entry, d.gone_for_good) for d in plan.drops] == [(1, True), (3, False)]  # b: a prune in flight
    assert plan.delete_files == [] and plan.vacuum_files == ["archive.db"]  # b keeps its file
    assert plan.warning().startswith("archive retention deletes 1 archived sessions that are not in state.db")
    assert plan_retention(ArchiveSurvey(files, frozenset()), None, None, NOW).drops == []
    # The newest file is never deleted whole, even with everything in it expired.
    plan = plan_retention(ArchiveSurvey(files[1:], frozenset()), 0.0, None, NOW + DAY)
    assert (
        [d.entry for d in plan.drops] == [4]
        and plan.delete_files == []
        and plan.vacuum_files == ["archive-x.db"]
    )


def test_apply_rechecks_what_changed_since_the_plan(tmp_path):
    home = _home(tmp_path)
    entries = _filled(home, months=2, per_month=2)
    profile = select_profiles(str(home))[0]
    plan = plan_retention(survey_archive(profile), 1.0, None, NOW)
    assert plan.delete_files == [ARCHIVE_NAME]
    with Archive.for_home(home / "keeper") as store:
        store.set_state([entries[0]], ARCHIVED)  # a run started pruning it again meanwhile
    done = apply_retention(profile, plan)
    assert (home / "keeper" / ARCHIVE_NAME).exists() and done["files_deleted"] == 0
    with Archive.for_home(home / "keeper", create=False) as store:
        assert [e.entry for e in store.entries("ORDER BY entry")] == [entries[0]]


def test_a_report_with_an_unreadable_archive_says_so_and_shows_the_rest(tmp_path):
    home = _home(tmp_path, _spec("old", "otter", age_days=120))
    _run(home)
    (home / "keeper" / ARCHIVE_NAME).write_bytes(b"not an archive\n" * 100)
    (rep,) = json.loads(_cli_report(home))["profiles"]
    assert "cannot open the archive" in rep["archive"]["problem"] and rep["archive"]["files"] == 0
    assert rep["sessions"]["total"] >= 1  # everything else is reported as before


def test_the_archive_key_and_the_archive_table_live_side_by_side(tmp_path):
    from hermes_keeper.errors import KeeperError
    from hermes_keeper.model.policy import effective_policy

    (tmp_path / "keeper.toml").write_text(
        'archive = true\n[profiles.work.archive]\nkeep = "30d"\nmax_bytes = "1GB"\n'
        "[profiles.off]\narchive = false\n"
    )
    default = effective_policy(tmp_path, "default")
    assert (default.archive, default.archive_keep_s, default.archive_max_bytes) == (True, None, None)
    work = effective_policy(tmp_path, "work")
    assert (work.archive, work.archive_keep_s, work.archive_max_bytes) == (
        True,
        30 * DAY,
        10**9,
    )  # sizes are decimal: 1GB = 10^9 bytes
    assert effective_policy(tmp_path, "off").archive is False
    (tmp_path / "keeper.toml").write_text("[archive]\nkeep = 30\n")
    with pytest.raises(KeeperError, match="archive.keep: a duration needs a unit"):
        effective_policy(tmp_path, "default")
