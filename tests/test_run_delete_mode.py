"""A rollback-journal (DELETE mode) home that Hermes holds open: the default run is live-safe there.

Newer Hermes uses ``journal_mode=DELETE`` on SQLite builds with the WAL-reset bug. There a
snapshot's read transaction would block Hermes's commits for the whole copy, so the run
takes none and says what undoes it instead: the verified archive and the journal.
"""

from __future__ import annotations

import json
import sqlite3
import time

import pytest
from click.testing import CliRunner

from hermes_keeper import demo
from hermes_keeper.archive.store import PRUNED, Archive
from hermes_keeper.cli import main
from hermes_keeper.home import select_profiles
from hermes_keeper.journal import read_journal
from hermes_keeper.model.policy import Policy
from hermes_keeper.run import survey
from hermes_keeper.run.plan import ARCHIVE, NONE, REFUSE, SNAPSHOT, safeguard
from hermes_keeper.sqlite import connect
from hermes_keeper.sqlite.holders import Holder
from tests.conftest import tree_digest

NOW = time.time()


@pytest.fixture
def held_delete_home(tmp_path, hold_open):
    home = tmp_path / "home"
    demo.build_home(home, demo.generate(time.time(), sessions=60))
    conn = sqlite3.connect(home / "state.db")
    assert conn.execute("PRAGMA journal_mode=DELETE").fetchone()[0] == "delete"
    conn.close()
    return home, hold_open(home / "state.db", via_hermes=False)


def _invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def test_the_default_run_prunes_with_the_archive_as_its_safeguard(held_delete_home):
    home, proc = held_delete_home
    shown = _invoke("plan", "--home", home)
    assert shown.exit_code == 0, shown.output
    line = next(x for x in shown.output.splitlines() if x.startswith("safeguard:"))
    assert f"delete journal mode and open by pid {proc.pid}" in line and "archived and verified" in line
    plan = json.loads(_invoke("plan", "--home", home, "--json", "-v").output)["profiles"][0]
    assert plan["safeguard"]["kind"] == ARCHIVE and plan["prune"]["sessions"] > 0 and plan["zombies"]
    pruned = {d["session_id"] for d in plan["decisions"] if d["action"] == "prune"}

    res = _invoke("run", "--home", home, "--json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)["profiles"][0]
    assert out["safeguard"] == ARCHIVE and out["backup"] is None
    assert out["pruned"] == len(pruned) and out["zombies_closed"] == len(plan["zombies"])
    assert not (home / "keeper" / "backups").exists()
    conn = sqlite3.connect(home / "state.db")
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    left = {r[0] for r in conn.execute("SELECT id FROM sessions")}
    conn.close()
    assert not pruned & left
    with Archive.for_home(home / "keeper") as store:  # every deleted session sits there, verified
        assert {e.session_id for e in store.entries() if e.state == PRUNED} == pruned
        assert all(store.verify(store.entry(sid).entry) for sid in pruned)
    # Zombie closes: their previous values are journaled, fsynced, before the first close.
    journal = read_journal(home / "keeper")
    actions = [r["action"] for r in journal]
    assert actions.index("zombies_closing") < actions.index("zombies_closed")
    previous = next(r for r in journal if r["action"] == "zombies_closing")["previous"]
    assert previous == {z["session_id"]: {"ended_at": None, "end_reason": None} for z in plan["zombies"]}


def test_without_the_archive_it_refuses_and_changes_nothing(held_delete_home):
    home, proc = held_delete_home
    before = {k: v for k, v in tree_digest(home).items() if k.startswith("state.db")}
    res = _invoke("run", "--home", home, "--no-archive")
    assert res.exit_code == 2 and len(res.output.strip().splitlines()) == 1
    assert f"open by pid {proc.pid}" in res.output and "nothing would undo the deletes" in res.output
    assert {k: v for k, v in tree_digest(home).items() if k.startswith("state.db")} == before


HERMES = [Holder(4242, "python", "hermes gateway")]


@pytest.mark.parametrize(
    ("policy", "mode", "holders", "deletes", "kind"),
    [
        ({}, "wal", HERMES, True, SNAPSHOT),  # WAL: the copy never blocks a writer
        ({}, "delete", [], True, SNAPSHOT),  # DELETE, nobody holds it: nobody to block
        ({}, "delete", HERMES, True, ARCHIVE),
        ({}, "delete", HERMES, False, NONE),  # only zombie closes: journaled either way
        ({"backup": False}, "wal", [], True, ARCHIVE),
        ({"archive": False}, "delete", HERMES, True, REFUSE),
        ({"archive": False}, "wal", HERMES, True, SNAPSHOT),
        ({"archive": False, "backup": False}, "delete", HERMES, True, NONE),
    ],
)
def test_safeguard(policy, mode, holders, deletes, kind):
    assert safeguard(Policy(**policy), mode, holders, deletes).kind == kind


def test_the_stepped_survey_of_a_delete_mode_home_sees_what_one_snapshot_sees(tmp_path, monkeypatch):
    homes = {}
    for mode in ("wal", "delete"):
        home = tmp_path / mode
        demo.build_home(home, demo.generate(NOW, sessions=60))
        conn = sqlite3.connect(home / "state.db")
        assert conn.execute(f"PRAGMA journal_mode={mode}").fetchone()[0] == mode
        conn.close()
        homes[mode] = home
    monkeypatch.setattr(connect, "FIRST_STEP_ROWS", 7)  # many steps, sessions split across them
    monkeypatch.setattr(connect, "STEP_READ_MS", 0.0)
    seen = {m: survey.survey_profile(select_profiles(h)[0], now=NOW).sessions for m, h in homes.items()}
    assert seen["delete"] == seen["wal"] and sum(r.messages for r in seen["wal"].values()) > 100
