"""Transcripts that are the only copy (issue 33): Hermes's diverted ``sessions/<sid>.jsonl`` is never
removed while a message in it is in neither state.db nor the archive; a mirror of stored rows goes."""

from __future__ import annotations

import json
import os
import sqlite3
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from hermes_keeper.cli import main
from hermes_keeper.fs import HomeFS
from hermes_keeper.run import transcripts
from hermes_keeper.run.files import FileAction, remove
from hermes_keeper.run.transcripts import Rows, parse_lines, stored_content
from tests.hermes_env import IOT, Hermes
from tests.test_report import report_json

DAY = 86400.0
NOW = time.time()


@pytest.fixture(scope="module")
def iot() -> Hermes:
    return Hermes(IOT)


def invoke(*args) -> dict:
    res = CliRunner().invoke(main, [str(a) for a in args])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)["profiles"][0]


def plan(home: Path) -> dict:
    return invoke("plan", "--json", "-v", "--home", home)


def run(home: Path) -> dict:
    return invoke("run", "--json", "--home", home)


def by_name(actions: list[dict]) -> dict[str, dict]:
    return {Path(a["path"]).name: a for a in actions}


def old_session(sid: str, age_days: float, messages: list[tuple[str, str]], source: str = "cli") -> dict:
    """A session ended ``age_days`` ago, past every default retention once over 90 days."""
    start = NOW - age_days * DAY
    return {
        "id": sid,
        "source": source,
        "started_at": start,
        "messages": [[role, text, start + 1 + i] for i, (role, text) in enumerate(messages)],
        "ended_at": start + 60,
        "end_reason": "user_exit",
    }


def age(path: Path, days: float) -> None:
    t = NOW - days * DAY
    os.utime(path, (t, t))


def test_a_diverted_transcript_stays_with_its_pruned_session_and_after_it(tmp_path, iot):
    """Made by Hermes's own divert_session_transcript_jsonl: its session is pruned, the file stays
    (the plan says why, the report counts it), and as an orphan past files.max_age it stays too."""
    t = NOW - 200 * DAY
    diverted = [
        {"role": "user", "content": "words the new state.db never got", "timestamp": t + 10},
        {"role": "assistant", "content": [{"type": "text", "text": "an answer"}], "timestamp": t + 11},
    ]
    path = iot.run(
        tmp_path,
        [
            {"op": "build", "sessions": [old_session("old", 200, [("user", "hi"), ("assistant", "hello")])]},
            {"op": "divert", "session_id": "old", "messages": diverted},
        ],
    )[1]
    transcript = Path(path)
    assert transcript == tmp_path / "sessions" / "old.jsonl"
    before = transcript.read_bytes()

    p = plan(tmp_path)
    assert p["decisions"][0]["session_id"] == "old" and p["decisions"][0]["action"] == "prune"
    assert "old.jsonl" not in by_name(p["file_actions"])
    kept = by_name(p["kept_files"])["old.jsonl"]
    assert kept["code"] == "only_copy" and kept["session_id"] == "old"
    assert kept["reason"] == "only copy: 2 of 2 messages in neither state.db nor the archive"
    expected = {"files": 1, "bytes": len(before), "messages": 2, "unread_files": 0, "unread_bytes": 0}
    assert p["files"]["not_in_state_db"] == expected
    (rep,) = report_json(tmp_path)
    assert rep["files"]["not_in_state_db"] == expected
    out = CliRunner().invoke(main, ["report", "--home", str(tmp_path)], terminal_width=200).output
    assert "not in state.db: 1 transcript" in out and "no command that imports them" in out
    assert "words the new state.db" not in out  # never message content

    done = run(tmp_path)
    assert done["pruned"] == 1 and done["files_removed"] == 0
    assert transcript.read_bytes() == before
    age(transcript, 30)  # now an orphan past files.max_age: archived rows hold none of its messages
    again = plan(tmp_path)
    assert by_name(again["kept_files"])["old.jsonl"]["code"] == "only_copy"
    run(tmp_path)
    assert transcript.read_bytes() == before
    journal = (tmp_path / "keeper" / "journal.jsonl").read_text()
    assert "words the new state.db" not in journal and "an answer" not in journal


def test_an_orphan_diverted_transcript_past_max_age_stays(tmp_path, iot):
    """state.db was replaced by one without the session at all: the file is all that is left."""
    iot.run(
        tmp_path,
        [
            {"op": "build", "sessions": [old_session("other", 1, [("user", "unrelated")])]},
            {"op": "divert", "session_id": "gone", "messages": [{"role": "user", "content": "lost"}]},
        ],
    )
    orphan = tmp_path / "sessions" / "gone.jsonl"
    age(orphan, 30)
    p = plan(tmp_path)
    assert by_name(p["kept_files"])["gone.jsonl"]["code"] == "only_copy"
    assert p["files"]["not_in_state_db"]["messages"] == 1
    run(tmp_path)
    assert orphan.exists()


def test_a_transcript_whose_messages_are_all_archived_goes(tmp_path, iot):
    """A session the keeper pruned and archived; later its messages turn up diverted (as when the
    replaced state.db is put back): every one of them is an archived row, so the file goes, and one
    with a message the archive lacks stays."""
    rows = [("user", "question"), ("assistant", "answer"), ("user", "question")]
    iot.run(tmp_path, [{"op": "build", "sessions": [old_session("arch", 200, rows)]}])
    assert run(tmp_path)["archived"] == 1
    start = NOW - 200 * DAY
    same = [{"role": r, "content": c, "timestamp": start + 1 + i} for i, (r, c) in enumerate(rows)]
    iot.run(
        tmp_path,
        [
            {"op": "divert", "session_id": "arch", "messages": same},
            {"op": "divert", "session_id": "arch2", "messages": same},
        ],
    )
    # arch2 claims the same messages under another session: not its rows, so not a duplicate
    for name in ("arch.jsonl", "arch2.jsonl"):
        age(tmp_path / "sessions" / name, 30)
    p = plan(tmp_path)
    assert by_name(p["file_actions"])["arch.jsonl"]["reason"] == "orphan older than 7d"
    assert by_name(p["kept_files"])["arch2.jsonl"]["code"] == "only_copy"
    run(tmp_path)
    assert not (tmp_path / "sessions" / "arch.jsonl").exists()
    assert (tmp_path / "sessions" / "arch2.jsonl").exists()
    # the same question twice in the file needs both rows; a third copy is one the archive lacks
    iot.run(tmp_path, [{"op": "divert", "session_id": "arch", "messages": [*same, same[0]]}])
    age(tmp_path / "sessions" / "arch.jsonl", 30)
    kept = by_name(plan(tmp_path)["kept_files"])["arch.jsonl"]
    assert kept["reason"] == "only copy: 1 of 4 messages in neither state.db nor the archive"


def test_hermes_0_13_s_legacy_mirror_of_stored_rows_goes_with_its_session(tmp_path):
    """Hermes 0.13's gateway wrote every message to state.db and to sessions/<id>.jsonl (ISO
    timestamps, a session_meta line): a duplicate, removed with its pruned session as before."""
    h13 = Hermes("0.13.0")
    t = NOW - 200 * DAY
    iso = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(t))
    messages = [
        {"role": "session_meta", "tools": [], "model": "m", "platform": "telegram", "timestamp": iso},
        {"role": "user", "content": "hello there", "timestamp": iso},
        {"role": "assistant", "content": "hi", "timestamp": iso},
    ]
    h13.run(
        tmp_path,
        [
            {"op": "clock", "t": t},
            {"op": "call", "method": "create_session", "args": ["leg", "telegram"]},
            {"op": "gateway_transcript", "session_id": "leg", "messages": messages},
            {"op": "call", "method": "end_session", "args": ["leg", "user_exit"]},
        ],
    )
    mirror = tmp_path / "sessions" / "leg.jsonl"
    assert len(mirror.read_text().splitlines()) == 3
    p = plan(tmp_path)
    assert by_name(p["file_actions"])["leg.jsonl"]["reason"] == "session pruned"
    assert p["files"]["not_in_state_db"]["files"] == 0
    run(tmp_path)
    assert not mirror.exists()


def test_a_transcript_over_the_read_cap_is_kept_unread(tmp_path, iot, monkeypatch):
    iot.run(tmp_path, [{"op": "build", "sessions": [old_session("big", 200, [("user", "x")])]}])
    (tmp_path / "sessions").mkdir(exist_ok=True)
    big = tmp_path / "sessions" / "big.jsonl"
    big.write_text(json.dumps({"role": "user", "content": "x" * 200}) + "\n")
    monkeypatch.setattr(transcripts, "READ_CAP", 100)
    p = plan(tmp_path)
    kept = by_name(p["kept_files"])["big.jsonl"]
    assert kept["code"] == "transcript_unread" and "read cap" in kept["reason"]
    assert p["files"]["not_in_state_db"] == {
        "files": 0,
        "bytes": 0,
        "messages": 0,
        "unread_files": 1,
        "unread_bytes": big.stat().st_size,
    }
    run(tmp_path)
    assert big.exists()


def test_a_transcript_written_to_after_the_plan_read_it_is_kept(tmp_path):
    (tmp_path / "sessions").mkdir(exist_ok=True)
    f = tmp_path / "sessions" / "s.jsonl"
    f.write_text('{"role": "user", "content": "a"}\n')
    action = FileAction(str(f), "transcript", f.stat().st_size, "session pruned", "s")
    with f.open("a") as fh:
        fh.write('{"role": "user", "content": "b"}\n')  # Hermes appends a diverted message
    assert remove(HomeFS(tmp_path), action) is None and f.exists()
    size = f.stat().st_size
    assert remove(HomeFS(tmp_path), FileAction(str(f), "transcript", size, "x", "s")) == size


def _rows(*rows) -> Rows:
    out = Rows()
    for r in rows:
        out.add(*r)
    return out


@pytest.mark.parametrize(
    "lines, rows, missing",
    [
        # a numeric timestamp must match; a row's own time counts as the same number
        ([{"role": "user", "content": "a", "timestamp": 5}], [("user", "a", 5.0)], 0),
        ([{"role": "user", "content": "a", "timestamp": "5.0"}], [("user", "a", 5.0)], 0),
        ([{"role": "user", "content": "a", "timestamp": 6}], [("user", "a", 5.0)], 1),
        # text that is no number (0.13's ISO time) or none: role and content only
        ([{"role": "user", "content": "a", "timestamp": "2025-01-01T00:00:00"}], [("user", "a", 9.0)], 0),
        ([{"role": "user", "content": "a"}], [("user", "a", 9.0)], 0),
        ([{"content": "a"}], [("unknown", "a", 1.0)], 0),  # Hermes writes a missing role as unknown
        ([{"role": "user", "content": "a"}], [("assistant", "a", 1.0)], 1),
        # list content is stored as Hermes's "\x00json:" + its JSON
        (
            [{"role": "user", "content": [{"type": "text", "text": "t"}]}],
            [("user", "\x00json:" + json.dumps([{"type": "text", "text": "t"}]), 1.0)],
            0,
        ),
        # each row vouches for one line
        ([{"role": "user", "content": "a"}] * 2, [("user", "a", 1.0)], 1),
        (
            [{"role": "user", "content": "a", "timestamp": 1}, {"role": "user", "content": "a"}],
            [("user", "a", 1.0)],
            1,
        ),
        # lines that hold no message
        ([{}], [], 0),
    ],
)
def test_the_matching_rule(lines, rows, missing):
    data = b"\n".join(json.dumps(x).encode() for x in lines) + b"\n\n"
    assert _rows(*rows).missing(parse_lines(data)) == missing


@pytest.mark.parametrize(
    "data, problem",
    [(b'{"role": "user"}\n[1, 2]\n', "line 2 is not a JSON object"), (b'{"role": "us', "line 1 is not JSON")],
)
def test_a_line_that_is_not_a_json_object_leaves_the_file_unread(data, problem):
    assert parse_lines(data).problem == problem


def test_stored_content_is_hermes_s_encoding():
    assert stored_content("plain") == "plain"
    assert stored_content(None) is None
    assert stored_content("\x00json:x") == "\x00json:" + json.dumps("\x00json:x")


def test_a_diverted_message_hermes_stored_since_is_no_reason_to_keep_the_file(tmp_path, iot):
    """Every message of the file is a row of its session in state.db: it goes with the session."""
    iot.run(tmp_path, [{"op": "build", "sessions": [old_session("s", 200, [("user", "x")])]}])
    (tmp_path / "sessions").mkdir(exist_ok=True)
    (tmp_path / "sessions" / "s.jsonl").write_text('{"role": "user", "content": "x"}\n')
    with sqlite3.connect(tmp_path / "state.db") as c:
        assert c.execute("SELECT count(*) FROM messages WHERE session_id = 's'").fetchone() == (1,)
    assert "s.jsonl" in by_name(plan(tmp_path)["file_actions"])  # its one message is a row
