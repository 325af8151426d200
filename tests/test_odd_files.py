"""Odd files where Hermes keeps its own (issue 34): FIFOs, a torn journal line, an empty FTS hold
file, config.yaml read with Hermes's YAML semantics. Every command returns within seconds."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time

import pytest

from hermes_keeper import demo
from hermes_keeper.hermes_config import adopt_change, read_auto_prune
from hermes_keeper.journal import read_journal

#: Seconds a command may take on a 40-session home (a FIFO read blocking would take forever).
LIMIT = 30


def keeper(*args):
    return subprocess.run(
        [sys.executable, "-m", "hermes_keeper", *args], capture_output=True, text=True, timeout=LIMIT
    )


@pytest.fixture
def home(tmp_path):
    home = tmp_path / "home"
    demo.build_home(home, demo.generate(time.time(), sessions=40))
    return home


FIFOS = [
    "sessions/sessions.json",
    "config.yaml",
    "runtime/active_sessions.json",
    "keeper.toml",
    "active_profile",
    "gateway.pid",
]
#: The files a command cannot do without are refused in one line (exit 2; check: UNKNOWN); the others
#: are said to be unreadable and the run keeps what they could protect.
REFUSED = {"keeper.toml", "active_profile"}


@pytest.mark.parametrize("name", FIFOS)
@pytest.mark.parametrize("command", ["plan", "report", "check", "run"])
def test_a_fifo_where_hermes_keeps_a_file_never_blocks(home, name, command):
    path = home / name
    path.parent.mkdir(exist_ok=True)
    path.unlink(missing_ok=True)
    os.mkfifo(path)
    res = keeper(command, "--home", str(home))  # TimeoutExpired: blocked on the FIFO
    assert "Traceback" not in res.stderr
    if name in REFUSED:
        out = res.stdout if command == "check" else res.stderr
        assert res.returncode == (3 if command == "check" else 2), res.stderr
        assert f"{path} is a FIFO (named pipe), not a regular file" in out
        if command != "check":
            assert len(res.stderr.strip().splitlines()) == 1
    else:
        assert res.returncode in (0, 1, 2), res.stderr  # the command ran (check: a status)
    assert stat.S_ISFIFO(os.lstat(path).st_mode)  # never replaced or removed
    assert not (home / "keeper.lock").exists() or command == "run"


def test_a_fifo_config_yaml_is_named_in_the_auto_prune_origin(home):
    os.mkfifo(home / "config.yaml")
    res = keeper("report", "--json", "--home", str(home))
    assert res.returncode == 0, res.stderr
    origin = json.loads(res.stdout)["profiles"][0]["hermes_auto_prune"]["origin"]
    assert "config.yaml unreadable" in origin and "FIFO" in origin


@pytest.mark.parametrize(
    ("text", "enabled"),
    [
        ("sessions:\n  auto_prune: true\n  auto_prune: false\n", False),  # the last one wins (PyYAML)
        ("sessions:\n  auto_prune: false\n  auto_prune: true\n", True),
        ("sessions:\n  auto_prune: false\nsessions:\n  auto_prune: true\n", True),
        ("sessions:\n  auto_prune: off\n", False),  # YAML 1.1 booleans
        ("sessions:\n  auto_prune: Off\n", False),
        ("sessions:\n  auto_prune: no\n", False),
        ("sessions:\n  auto_prune: on\n", True),
        ("sessions:\n  auto_prune: yes\n", True),
        ("\ufeffsessions:\n  auto_prune: false\n", False),  # a BOM, as Hermes reads it (utf-8-sig)
    ],
)
def test_config_yaml_is_read_as_hermes_reads_it(tmp_path, text, enabled):
    (tmp_path / "config.yaml").write_text(text, encoding="utf-8")
    auto = read_auto_prune(tmp_path, schema_version=30)
    assert auto.enabled is enabled and auto.origin == "config.yaml sessions.auto_prune"


def test_adopt_takes_auto_prune_off_as_off_and_keeps_comments(tmp_path):
    text = "# mine\nsessions:\n  auto_prune: off  # I said so\n"
    (tmp_path / "config.yaml").write_text(text)
    assert adopt_change(tmp_path) == (text, text)  # already off for Hermes: nothing to change
    text = "# mine\nsessions:\n  auto_prune: on  # I said so\nmodel: x  # kept\n"
    (tmp_path / "config.yaml").write_text(text)
    before, after = adopt_change(tmp_path)
    assert before == text and "auto_prune: false" in after and "# mine" in after and "# kept" in after


def _status(res) -> str:
    return res.stdout.split(" - ")[0]


def test_a_torn_journal_line_is_skipped_reported_then_sealed(home):
    assert keeper("run", "--home", str(home)).returncode in (0, 1), "a first run to journal"
    journal = home / "keeper" / "journal.jsonl"
    records = len(read_journal(home / "keeper"))
    with journal.open("ab") as fh:
        fh.write(b'{"ts": 1796522420.9, "run": "x", "action": "file_rem')  # power cut mid-line
    skipped = []
    assert len(read_journal(home / "keeper", skipped)) == records
    assert [str(s) for s in skipped] == [
        f"keeper/journal.jsonl line {records + 1} skipped (torn: not JSON, no newline)"
    ]
    res = keeper("check", "--home", str(home))
    assert "UNKNOWN" not in _status(res), res.stdout + res.stderr
    assert "1 journal line(s) skipped: keeper/journal.jsonl line" in res.stdout
    assert keeper("run", "--home", str(home)).returncode in (0, 1)
    after = read_journal(home / "keeper")
    assert any(r["action"] == "journal_sealed" for r in after)
    assert after[-1]["action"] == "summary"  # the next records are whole lines, not glued to the torn one
    assert "journal line" not in keeper("check", "--home", str(home)).stdout


def test_a_journal_line_that_is_json_but_no_record_is_skipped(home):
    (home / "keeper").mkdir(mode=0o700)
    (home / "keeper" / "journal.jsonl").write_bytes(
        b'{"ts": 1, "action": "summary"}\n[1, 2]\n{"action": "x"}\n'
    )
    skipped = []
    assert read_journal(home / "keeper", skipped) == [{"ts": 1, "action": "summary"}]
    assert [s.reason for s in skipped] == ["not a record", "no time"]
