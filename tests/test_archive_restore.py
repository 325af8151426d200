"""Prune with the keeper, restore with the keeper: real Hermes sees exactly what it had."""

from __future__ import annotations

import json
import shutil
import time

import pytest
from click.testing import CliRunner

from hermes_keeper.archive import restore as unarchive
from hermes_keeper.archive.store import PRUNED as STATE_PRUNED
from hermes_keeper.archive.store import RESTORED, Archive
from hermes_keeper.cli import main
from hermes_keeper.journal import read_journal
from hermes_keeper.sqlite.writer import Budget, Writer
from tests import archive_home as ah
from tests.conftest import tree_digest
from tests.hermes_env import Hermes


def _restore(home, *args):
    return CliRunner().invoke(main, ["archive", "restore", *args, "--home", str(home)])


def test_prune_then_restore_is_exact(tmp_path, hermes):
    home = ah.build(hermes, tmp_path / "home")
    before = ah.snapshot(hermes, home, ah.PRUNED)
    ah.prune(home)
    assert hermes.call(home, "get_session", "old_a") is None
    assert hermes.call(home, "search_messages", "narwhal") == []
    # the goal, loop and heartbeat keys went with their sessions, into the archive
    assert hermes.run(
        home, [{"op": "query", "sql": f"SELECT key FROM state_meta WHERE {ah.SESSION_META}"}]
    ) == [[]]
    with Archive.for_home(home / "keeper") as store:
        kept = {r["key"] for sid in ("old_a", "old_c") for r in store.get(sid)["state_meta"]}
    assert kept == {"goal:old_a", "heartbeat:old_a", "loop:old_c"}

    # One member of the chain brings the chain and its delegate; all messages, usage, goal back.
    res = CliRunner().invoke(
        main, ["archive", "restore", "old_c", "old_a", "cron_x", "--home", str(home), "--json"]
    )
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)["profiles"][0]
    assert sorted(out["restored"]) == sorted(ah.PRUNED) and out["refused"] == {}
    assert {m["session_id"]: m["why"] for m in out["members"]}["old_d"] == "delegate"
    assert out["max_txn_ms"] < 1000
    assert ah.snapshot(hermes, home, ah.PRUNED) == before  # get_messages, inactive ones, export_session
    found = hermes.call(home, "search_messages", "narwhal")
    assert {m["session_id"] for m in found} == {"old_b", "old_c", "old_d"}
    assert hermes.run(home, [{"op": "fts_integrity"}])[0] == {
        "messages_fts": "ok",
        "messages_fts_trigram": "ok",
    }
    with Archive.for_home(home / "keeper") as store:
        assert {e.state for e in store.entries()} == {RESTORED}

    journal = read_journal(home / "keeper")
    restored = [r for r in journal if r["action"] == "restored"]
    assert sum(len(r["sessions"]) for r in restored) == len(ah.PRUNED)
    text = json.dumps(journal).lower()
    assert "walrus" not in text and "narwhal" not in text  # ids and counts only, never content

    again = _restore(home, "old_a")
    assert again.exit_code == 1 and "already in state.db" in again.output


def test_title_collision_gets_a_visible_suffix(tmp_path, hermes):
    home = ah.build(hermes, tmp_path / "home")
    ah.prune(home)
    hermes.run(
        home,
        [
            {"op": "call", "method": "create_session", "args": ["newcomer", "cli"]},
            {"op": "call", "method": "set_session_title", "args": ["newcomer", "Walrus facts"]},
        ],
    )
    res = _restore(home, "old_a")
    assert res.exit_code == 0, res.output
    assert "restored as 'Walrus facts (restored)'" in res.output
    assert hermes.call(home, "get_session", "old_a")["title"] == "Walrus facts (restored)"
    assert hermes.call(home, "get_session", "newcomer")["title"] == "Walrus facts"


def test_damaged_member_refuses_the_whole_conversation(tmp_path, hermes):
    home = ah.build(hermes, tmp_path / "home")
    ah.prune(home)
    ah.flip_byte(home, "old_b")
    before = tree_digest(home)
    res = _restore(home, "old_d")
    assert res.exit_code == 1
    assert "old_d: not restored: archive row damaged: old_b" in res.output
    assert (
        hermes.call(home, "get_session", "old_c") is None
        and hermes.call(home, "get_session", "old_d") is None
    )
    assert {k: v for k, v in tree_digest(home).items() if "state.db" in k} == {
        k: v for k, v in before.items() if "state.db" in k
    }
    ok = _restore(home, "old_a")
    assert ok.exit_code == 0 and hermes.call(home, "get_session", "old_a")["title"] == "Walrus facts"


def _restore_killed_at(home, ids, crash_at, monkeypatch):
    """A restore killed between two transactions, just before its ``crash_at``-th one."""
    real_step, steps = Writer.step, []

    def dying_step(self, fn, batch=None, units=1, **kw):
        steps.append(1)
        if len(steps) == crash_at:
            raise KeyboardInterrupt
        return real_step(self, fn, batch, units, **kw)

    monkeypatch.setattr(Writer, "step", dying_step)
    with pytest.raises(KeyboardInterrupt):
        unarchive.restore_sessions(ah.profile(home), ids, budget=Budget(pause_ms=0))
    monkeypatch.setattr(Writer, "step", real_step)


@pytest.mark.parametrize("crash_at", [2, 5, 9, 11])
def test_an_interrupted_restore_is_finished_by_the_next(tmp_path, hermes, monkeypatch, crash_at):
    home = ah.build(hermes, tmp_path / "home")
    ids = ["old_a", *ah.CHAIN]
    before = ah.snapshot(hermes, home, ids)
    ah.prune(home)
    _restore_killed_at(home, ["old_c", "old_a"], crash_at, monkeypatch)
    with Archive.for_home(home / "keeper") as store:
        # Only finished conversations are marked restored; the interrupted one still says pruned.
        states = {e.session_id: e.state for e in store.entries() if e.session_id in ids}
    assert STATE_PRUNED in states.values()
    res = CliRunner().invoke(main, ["archive", "restore", "old_c", "old_a", "--home", str(home), "--json"])
    out = json.loads(res.stdout)["profiles"][0]
    done_before = {sid for sid, state in states.items() if state == RESTORED}
    assert set(out["restored"]) == set(ids) - done_before
    assert set(out["refused"]) == {sid for sid in ("old_c", "old_a") if sid in done_before}
    assert ah.snapshot(hermes, home, ids) == before


def test_pruning_a_half_restored_session_keeps_the_whole_archive_copy(tmp_path, hermes, monkeypatch):
    """Crash mid-restore, then a run prunes the (old, hidden) partial session again: nothing lost."""
    home = ah.build(hermes, tmp_path / "home")
    before = ah.snapshot(hermes, home, ["old_a"])
    ah.prune(home)
    _restore_killed_at(home, ["old_a"], 3, monkeypatch)  # row and messages in; usage, goal, reveal not
    assert hermes.call(home, "get_session", "old_a")["archived"] == 1  # hidden while incomplete
    ah.prune(home, ["old_a"])
    with Archive.for_home(home / "keeper") as store:
        assert store.entry("old_a").state == STATE_PRUNED and len(store.get("old_a")["model_usage"]) == 1
    assert _restore(home, "old_a").exit_code == 0
    assert ah.snapshot(hermes, home, ["old_a"]) == before


def test_dry_run_and_unknown_ids_change_nothing(tmp_path, hermes):
    home = ah.build(hermes, tmp_path / "home")
    ah.prune(home)

    def state():  # state.db and its WAL (readers touch -shm), the archive and the keeper's files
        return {
            k: v for k, v in tree_digest(home).items() if not k.endswith(("-shm", "journal.jsonl", ".lock"))
        }

    before = state()
    res = CliRunner().invoke(
        main, ["archive", "restore", "old_b", "--dry-run", "--home", str(home), "--json"]
    )
    assert res.exit_code == 0, res.output
    planned = json.loads(res.stdout)["profiles"][0]
    assert planned["dry_run"] and {m["session_id"] for m in planned["members"]} == set(ah.CHAIN)
    assert planned["restored"] == []
    res = _restore(home, "no_such_session")
    assert res.exit_code == 1 and "no_such_session: not restored: not in the archive" in res.output
    assert state() == before
    assert hermes.call(home, "get_session", "old_b") is None


def test_newer_payload_into_older_hermes_keeps_what_it_cannot_hold(tmp_path, hermes):
    """A 0.19 archive restored into a 0.13 state.db (schema 11: no active/archived columns)."""
    hermes13 = Hermes("0.13.0")
    src = ah.build(hermes, tmp_path / "src")
    active = ah.snapshot(hermes, src, ["old_a"])[0]
    ah.prune(src, ["old_a"])
    old = tmp_path / "old"
    hermes13.run(old, [{"op": "call", "method": "create_session", "args": ["other", "cli"]}])
    shutil.copytree(src / "keeper", old / "keeper")
    res = _restore(old, "old_a")
    assert res.exit_code == 0, res.output
    assert "2 inactive (rewound/compacted) messages stay in the archive only" in res.output
    assert "sessions.archived" not in res.output  # 0 carries nothing; only real values are reported
    got = hermes13.call(old, "get_messages", "old_a")
    assert [(m["id"], m["role"], m["timestamp"]) for m in got] == [
        (m["id"], m["role"], m["timestamp"]) for m in active
    ]
    assert hermes13.call(old, "get_session", "old_a")["title"] == "Walrus facts"
    assert hermes13.call(old, "search_messages", "tusks")


@pytest.mark.parametrize(
    "row, columns, kept, dropped",
    [
        ({"a": 1, "b": 2}, ["a", "b"], {"a": 1, "b": 2}, []),
        ({"a": 1, "pinned": 1, "rewind_count": 0, "x": None}, ["a"], {"a": 1}, ["pinned"]),
    ],
)
def test_fit_row(row, columns, kept, dropped):
    assert unarchive.fit_row(row, columns) == (kept, dropped)


def test_title_candidates():
    gen = unarchive.title_candidates("T")
    assert [next(gen) for _ in range(4)] == ["T", "T (restored)", "T (restored 2)", "T (restored 3)"]


def test_a_restored_session_is_kept_by_the_next_runs_then_ages_again(tmp_path, hermes):
    """The night after `archive restore`, the run does not prune it again: reason `restored`."""
    home = ah.build(hermes, tmp_path / "home")
    ah.prune(home)
    res = _restore(home, "old_a")
    assert res.exit_code == 0 and "kept until " in res.output, res.output
    kept = json.loads((home / "keeper" / "kept.json").read_text())
    assert list(kept) == ["old_a"] and kept["old_a"] > time.time() + 29 * 86400
    assert oct((home / "keeper" / "kept.json").stat().st_mode & 0o777) == "0o600"
    # old_a is 30 days old and titled: with this policy nothing else would keep it
    (home / "keeper.toml").write_text('keep_titled = false\n[retention]\ncli = "1d"\n')

    def old_a():
        out = CliRunner().invoke(main, ["plan", "-v", "--json", "--home", str(home)]).output
        return {d["session_id"]: d for d in json.loads(out)["profiles"][0]["decisions"]}["old_a"]

    d = old_a()
    assert d["action"] == "keep" and d["code"] == "restored" and d["reason"].startswith("restored from")
    assert CliRunner().invoke(main, ["run", "--home", str(home)]).exit_code == 0
    assert hermes.call(home, "get_session", "old_a") is not None
    (home / "keeper" / "kept.json").write_text(json.dumps({"old_a": time.time() - 1}))  # the period ended
    assert old_a()["action"] == "prune"
