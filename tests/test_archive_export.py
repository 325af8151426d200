"""``archive export --format hermes-jsonl``: Hermes's own export shape, imported by Hermes's own import."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from click.testing import CliRunner

from hermes_keeper.archive import hermes_import
from hermes_keeper.archive.export import parents_first
from hermes_keeper.archive.store import Entry
from hermes_keeper.cli import main
from tests import archive_home as ah


@pytest.fixture(scope="module")
def exported(tmp_path_factory, hermes):
    """A pruned home, Hermes's export_session of each pruned session from before, and our export file."""
    tmp = tmp_path_factory.mktemp("export")
    home = ah.build(hermes, tmp / "home")
    before = hermes.run(
        home, [{"op": "call", "method": "export_session", "args": [sid]} for sid in ah.PRUNED]
    )
    ah.prune(home)
    out = tmp / "export.jsonl"
    res = CliRunner().invoke(main, ["archive", "export", "--home", str(home), "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert "exported 5 sessions" in res.output and hermes_import.__file__ in res.output
    return home, dict(zip(ah.PRUNED, before, strict=True)), out


def _import(hermes, home, path):
    """Run hermes_import.py with Hermes's own Python, as docs/archive.md tells a user to."""
    home.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")} | {"HERMES_HOME": str(home)}
    proc = subprocess.run(
        [str(hermes.python), hermes_import.__file__, str(path)], env=env, capture_output=True, text=True
    )
    return proc.returncode, json.loads(proc.stdout) if proc.stdout else proc.stderr


def test_lines_equal_hermes_export_session(exported):
    _, before, out = exported
    assert out.stat().st_mode & 0o777 == 0o600
    lines = out.read_text(encoding="utf-8").splitlines()
    sessions = [json.loads(line) for line in lines]
    by_id = {s["id"]: s for s in sessions}
    assert by_id == before  # every column, active messages only, content/tool_calls decoded
    assert len(by_id["old_a"]["messages"]) == 6  # the 2 rewound ones are not in Hermes's export
    order = [s["id"] for s in sessions]
    assert order.index("old_b") < order.index("old_c") < order.index("old_d")  # parents first
    assert lines[0] == json.dumps(sessions[0], ensure_ascii=False)  # as `hermes sessions export` writes


def test_imports_into_a_fresh_hermes_with_its_own_import(exported, hermes, tmp_path):
    _, before, out = exported
    fresh = tmp_path / "fresh"
    code, summary = _import(hermes, fresh, out)
    assert code == 0, summary
    assert summary == {"imported": 5, "skipped": 0, "detached": 0, "failed": {}}
    msgs, c, d, found = hermes.run(
        fresh,
        [
            {"op": "call", "method": "get_messages", "args": ["old_a"]},
            {"op": "call", "method": "get_session", "args": ["old_c"]},
            {"op": "call", "method": "get_session", "args": ["old_d"]},
            {"op": "call", "method": "search_messages", "args": ["narwhal"]},
        ],
    )
    assert [(m["role"], m["content"], m["timestamp"]) for m in msgs] == [
        (m["role"], m["content"], m["timestamp"]) for m in before["old_a"]["messages"]
    ]
    assert msgs[1]["tool_calls"] == ah.TOOL_CALLS and msgs[4]["content"] == ah.IMAGE
    assert c["parent_session_id"] == "old_b" and d["parent_session_id"] == "old_c"
    assert {m["session_id"] for m in found} == set(ah.CHAIN)
    code, again = _import(hermes, fresh, out)
    assert code == 0 and again["skipped"] == 5 and again["imported"] == 0


def test_a_taken_title_fails_only_that_session(exported, hermes, tmp_path):
    out = exported[2]
    fresh = tmp_path / "fresh"
    hermes.run(
        fresh,
        [
            {"op": "call", "method": "create_session", "args": ["mine", "cli"]},
            {"op": "call", "method": "set_session_title", "args": ["mine", "Walrus facts"]},
        ],
    )
    code, summary = _import(hermes, fresh, out)
    assert code == 1 and list(summary["failed"]) == ["old_a"] and summary["imported"] == 4


def test_ids_and_filters_to_stdout(exported):
    home = exported[0]
    res = CliRunner().invoke(main, ["archive", "export", "old_a", "cron_x", "--home", str(home)])
    assert res.exit_code == 0, res.output
    assert sorted(json.loads(line)["id"] for line in res.stdout.splitlines()) == ["cron_x", "old_a"]
    res = CliRunner().invoke(main, ["archive", "export", "--source", "subagent", "--home", str(home)])
    assert [json.loads(line)["id"] for line in res.stdout.splitlines()] == ["old_d"]


def test_split_files_each_fit_one_import_call(exported, hermes, tmp_path, monkeypatch):
    """The dashboard's Sessions page sends a whole file to one import_sessions call."""
    monkeypatch.setattr(hermes_import, "MAX_SESSIONS", 2)
    out = tmp_path / "part.jsonl"
    res = CliRunner().invoke(
        main, ["archive", "export", "--split", "-o", str(out), "--home", str(exported[0])]
    )
    assert res.exit_code == 0, res.output
    parts = sorted(tmp_path.glob("part-*.jsonl"))
    assert [p.name for p in parts] == ["part-001.jsonl", "part-002.jsonl", "part-003.jsonl"]
    assert all(p.stat().st_mode & 0o777 == 0o600 for p in parts)
    batches = [[json.loads(line) for line in p.read_text().splitlines()] for p in parts]
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    results = hermes.run(fresh, [{"op": "call", "method": "import_sessions", "args": [b]} for b in batches])
    assert [r["imported"] for r in results] == [2, 2, 1] and sum(r["detached"] for r in results) == 0


def test_a_damaged_row_is_left_out_and_said(exported, tmp_path):
    home = exported[0]
    ah.flip_byte(home, "cron_x")
    out = tmp_path / "x.jsonl"
    res = CliRunner().invoke(main, ["archive", "export", "--home", str(home), "-o", str(out)])
    assert res.exit_code == 1 and "cron_x: archive row damaged, not exported" in res.output
    assert "cron_x" not in {json.loads(line)["id"] for line in out.read_text().splitlines()}


def _entry(sid, parent=None, started=0.0):
    return Entry(sid, "cli", None, parent, started, None, None, 0, 0, 0, "", 22, None, "pruned", 0.0, 0)


@pytest.mark.parametrize(
    "entries, order",
    [
        ([_entry("c", "p", 1), _entry("p", None, 2)], ["p", "c"]),  # a child older than its parent
        ([_entry("a", "b", 1), _entry("b", "a", 2)], ["b", "a"]),  # a cycle: nothing lost
        ([_entry("x", "gone", 1), _entry("y", None, 0)], ["y", "x"]),
    ],
)
def test_parents_first(entries, order):
    assert [e.session_id for e in parents_first(entries)] == order


def test_import_batches_respect_hermes_limits():
    sessions = [{"id": f"s{i}", "messages": [{"role": "user", "content": "x"}] * 300} for i in range(400)]
    batches = list(hermes_import.import_batches(sessions))
    assert [len(b) for b in batches] == [166, 166, 68]  # 50,000 messages per call at most
    small = [{"id": f"t{i}", "messages": []} for i in range(1200)]
    assert [len(b) for b in hermes_import.import_batches(small)] == [500, 500, 200]
    big = [{"id": f"b{i}", "messages": [{"role": "user", "content": "y" * 1_000_000}] * 4} for i in range(8)]
    batches = list(hermes_import.import_batches(big))
    assert all(sum(hermes_import.session_bytes(s) for s in b) <= hermes_import.MAX_BYTES for b in batches)
    assert sum(len(b) for b in batches) == 8 and len(batches) == 2


@pytest.mark.parametrize(
    "session, reason",
    [
        ({"id": "a", "messages": [{}] * 10_001}, "more than 10,000 messages"),
        ({"id": "b", "messages": [{"content": "z" * (6 << 20)}]}, "larger than 5 MiB"),
        ({"id": "c", "messages": [{}] * 10_000}, None),
    ],
)
def test_too_big_for_hermes_import(session, reason):
    assert hermes_import.too_big(session) == reason


@pytest.mark.parametrize("command", [["archive", "export"], ["fleet", "export"]])
def test_split_without_a_file_is_refused_before_any_work(command, tmp_path):
    """Both exports take --split from one place: without -o it is a usage error (2), and nothing
    was read (the home here is not even a Hermes home, the fleet's file names no repository)."""
    (tmp_path / "keeper.toml").write_text("")
    where = (
        ["--config", str(tmp_path / "keeper.toml")] if command[0] == "fleet" else ["--home", str(tmp_path)]
    )
    res = CliRunner().invoke(main, [*command, "--split", *where])
    assert res.exit_code == 2, res.output
    assert "--split needs -o FILE" in res.output
