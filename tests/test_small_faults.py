"""Issue 34's smaller points: each a case met, what the keeper does now (docs/reliability.md)."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time

from click.testing import CliRunner

from hermes_keeper import demo
from hermes_keeper.cli import main
from hermes_keeper.cli.text import term
from hermes_keeper.hermes_config import ADOPT_COMMENT, read_auto_prune

NOW = time.time()
SEPARATORS = "\u2028\u2029\x85"  # LINE SEPARATOR, PARAGRAPH SEPARATOR, NEXT LINE (NEL)


def keeper(*args):
    return subprocess.run([sys.executable, "-m", "hermes_keeper", *args], capture_output=True, text=True)


def test_unicode_line_separators_never_reach_the_terminal_raw(tmp_path):
    """Was: U+2028 and U+2029 in an id, title or source went out raw (a line break to many
    terminals and pagers); U+0085 was already escaped with the C1 controls."""
    home = tmp_path / "home"
    start = NOW - 400 * 86400
    spec = {
        "id": f"id{SEPARATORS}x",
        "source": f"cli{SEPARATORS}",
        "started_at": start,
        "ended_at": start + 60,
        "title": f"t{SEPARATORS}end",
        "messages": [["user", f"walrus {SEPARATORS}", start + 10] for _ in range(30)],
    }
    demo.build_home(home, demo.DemoSpec(NOW, sessions=[spec]))
    (home / "keeper.toml").write_text("keep_titled = false\n")
    runner = CliRunner()
    outputs = [
        runner.invoke(main, [*args, "--home", str(home)]).output for args in (["report"], ["plan", "-v"])
    ]
    assert runner.invoke(main, ["run", "--home", str(home), "--quiet"]).exit_code == 0
    for args in (["list"], ["show", "id"], ["search", "walrus"]):
        res = runner.invoke(main, ["archive", *args, "--home", str(home)])
        assert res.exit_code == 0, res.output
        outputs.append(res.output)
    for out in outputs:
        assert not any(c in out for c in SEPARATORS), out
    assert all("\\u2028\\u2029\\x85" in out for out in outputs[1:])  # plan -v and the archive name the id
    assert term(f"a{SEPARATORS}b") == "a\\u2028\\u2029\\x85b"


def test_compact_says_its_failure_on_stderr(tmp_path, hold_open):
    """compact exits 75 when Hermes holds a database it cannot switch to incremental: that line
    goes to stderr (also with --quiet), stdout stays empty (was: stdout, and nothing with --quiet)."""
    home = tmp_path / "home"
    demo.build_home(home, demo.generate(NOW, sessions=60))
    (home / "keeper.toml").write_text('live_vacuum_stall = "10ms"\n')
    conn = sqlite3.connect(home / "state.db")
    conn.execute("DELETE FROM messages WHERE session_id IN (SELECT id FROM sessions WHERE source = 'cron')")
    conn.commit()
    conn.close()
    hold_open(home / "state.db", via_hermes=False)
    for quiet in ([], ["--quiet"]):
        res = keeper("compact", "--home", str(home), *quiet)
        assert res.returncode == 75, res.stderr
        assert res.stdout == ""
        (line,) = res.stderr.splitlines()
        assert line.startswith("hermes-keeper: default: freed") and "auto_vacuum none -> none" in line
        assert "when no process holds the database" in line


def test_run_into_a_closed_pipe_does_not_say_nothing_changed(tmp_path):
    """``run | true``: the reader is gone before the summary line. Was exit 2, the code of "refused,
    nothing changed", after the run had pruned everything; now ended by SIGPIPE as git is (the
    shell's 141), with nothing on stderr: the journal has what was done."""
    home = tmp_path / "home"
    demo.build_home(home, demo.generate(NOW, sessions=30))
    proc = subprocess.Popen(
        [sys.executable, "-m", "hermes_keeper", "run", "--home", str(home)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    proc.stdout.close()  # the reader went away: the summary's write gets EPIPE
    err = proc.stderr.read().decode()
    assert proc.wait() == -signal.SIGPIPE, err
    assert err == ""
    listed = keeper("archive", "list", "--home", str(home), "--json")
    assert '"session_id"' in listed.stdout  # the run did prune and archive


def test_an_id_that_is_not_utf8_keeps_the_json_valid(tmp_path):
    """``plan --json -v`` with a session id whose bytes are not UTF-8 (``id\\xffA``). Was: the raw
    0xff byte written into the document, which no JSON reader takes. Now JSON's ``\\udcff``
    escape (Python's ``surrogateescape`` of the byte): valid UTF-8, and it reads back as the same
    name the keeper takes on its command line (``os.fsdecode(b"id\\xffA")``)."""
    home = tmp_path / "home"
    demo.build_home(home, demo.generate(NOW, sessions=10))
    conn = sqlite3.connect(home / "state.db")
    t0 = NOW - 200 * 86400
    conn.execute(
        "INSERT INTO sessions (id, source, started_at, ended_at, end_reason)"
        " VALUES (CAST(X'6964ff41' AS TEXT), 'cron', ?, ?, 'cron_complete')",
        (t0, t0 + 100),
    )
    conn.commit()
    conn.close()
    res = subprocess.run(
        [sys.executable, "-m", "hermes_keeper", "plan", "--json", "-v", "--home", str(home)],
        capture_output=True,
    )
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout.decode("utf-8"))  # strict: was UnicodeDecodeError at the 0xff
    (odd,) = [d for d in doc["profiles"][0]["decisions"] if d["session_id"] == os.fsdecode(b"id\xffA")]
    assert odd["reason"] == "id is not valid UTF-8" and b'"id\\udcffA"' in res.stdout
    assert keeper("run", "--home", str(home), "--quiet").returncode == 0  # an archive to look in
    named = keeper("archive", "show", os.fsdecode(b"id\xffA"), "--home", str(home))
    assert (
        named.returncode == 2 and "'id\\udcffA' is not in the archive" in named.stderr
    )  # was: unexpected error


HERMES_STYLE_CONFIG = """\
model:
    default: "anthropic/claude-opus-4"
    provider: auto
toolsets:
  - hermes-cli
  - web
terminal:
    backend: local
    env:
      - FOO=1
display:
  extra:   [a,  b]
sessions:
    auto_prune: true   # prune old ones
    retention_days: 30
"""


def test_adopt_changes_only_the_auto_prune_line(tmp_path):
    """Was: 7 unrelated lines re-indented (ruamel's dump: lists under a key, 4-space blocks, the
    spacing in a flow list). Now the one line is changed, or added, and every other byte stays."""
    home = tmp_path / "home"
    demo.build_home(home, demo.generate(NOW, sessions=5))
    config = home / "config.yaml"
    config.write_text(HERMES_STYLE_CONFIG)
    assert keeper("adopt", "--home", str(home), "--yes").returncode == 0
    before, after = HERMES_STYLE_CONFIG.splitlines(), config.read_text().splitlines()
    changed = [(b, a) for b, a in zip(before, after, strict=True) if b != a]
    assert changed == [
        ("    auto_prune: true   # prune old ones", f"    auto_prune: false  # {ADOPT_COMMENT}")
    ]
    without = HERMES_STYLE_CONFIG.replace("    auto_prune: true   # prune old ones\n", "")
    config.write_text(without)
    assert keeper("adopt", "--home", str(home), "--yes").returncode == 0
    assert config.read_text() == without.replace(
        "sessions:\n", f"sessions:\n    auto_prune: false  # {ADOPT_COMMENT}\n"
    )
    assert not read_auto_prune(home, 31).enabled


def test_sessions_with_cyclic_parents_are_restored_with_their_links(tmp_path):
    """Parents in a cycle (``a`` under ``b`` under ``a``; three in a ring; one its own parent),
    rows Hermes does not make but a damaged or hand-edited state.db holds. Was: archived by a run,
    then every restore stopped by state.db (``FOREIGN KEY constraint failed``: no order puts a
    parent first). Now each goes back, its link set once the whole cycle is in."""
    home = tmp_path / "home"
    demo.build_home(home, demo.generate(NOW, sessions=5))
    links = {"two_a": "two_b", "two_b": "two_a", "ring_a": "ring_c", "ring_b": "ring_a", "ring_c": "ring_b"}
    links["self_a"] = "self_a"
    conn = sqlite3.connect(home / "state.db")
    t0 = NOW - 200 * 86400
    for sid, parent in links.items():
        conn.execute(
            "INSERT INTO sessions (id, source, started_at, ended_at, end_reason, parent_session_id)"
            " VALUES (?, 'cli', ?, ?, 'compression', ?)",
            (sid, t0, t0 + 100, parent),
        )
        conn.execute(
            "INSERT INTO messages (session_id, role, content, timestamp) VALUES (?, 'user', 'hi', ?)",
            (sid, t0 + 1),
        )
    conn.commit()
    conn.close()
    assert keeper("run", "--home", str(home), "--quiet").returncode == 0
    for sid in ("two_a", "ring_b", "self_a"):
        res = subprocess.run(
            [
                sys.executable,
                "-m",
                "hermes_keeper",
                "archive",
                "restore",
                sid,
                "--force",
                "--home",
                str(home),
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert res.returncode == 0, res.stderr
    conn = sqlite3.connect(home / "state.db")
    marks = ",".join("?" * len(links))
    back = dict(
        conn.execute(f"SELECT id, parent_session_id FROM sessions WHERE id IN ({marks})", list(links))
    )
    conn.close()
    assert back == links


def test_backups_follow_a_home_that_was_moved(tmp_path):
    """Backups were matched by the home's absolute path: after ``mv ~/.hermes /new/place`` they
    vanished (``check`` CRITICAL "no verified backup", ``restore --latest`` "no backups of").
    Those in the home's own keeper/backups, whose recorded home holds no state.db any more, are
    its own; a backup of a home that is still there stays that home's."""
    old, new, other = tmp_path / "old", tmp_path / "new", tmp_path / "other"
    for home in (old, other):
        demo.build_home(home, demo.generate(NOW, sessions=20))
        assert keeper("backup", "--home", str(home), "--quiet").returncode == 0
    old.rename(new)
    doc = json.loads(keeper("check", "--home", str(new), "--json").stdout)
    (backup_age,) = [m for m in doc["profiles"][0]["measures"] if m["label"] == "backup_age"]
    assert backup_age["value"] is not None and "no verified backup" not in doc["line"]
    res = keeper("restore", "--latest", "--dry-run", "--home", str(new))
    assert res.returncode == 0 and f"{new}/keeper/backups/state-" in res.stdout, res.stderr
    # another home's backup copied into this folder is not taken for this home's
    other_record = json.loads((other / "keeper" / "backups" / "manifest.json").read_text())["backups"][0]
    manifest = new / "keeper" / "backups" / "manifest.json"
    body = json.loads(manifest.read_text())
    manifest.write_text(
        json.dumps(body | {"backups": [other_record | {"created_at": NOW + 60}, *body["backups"]]})
    )
    listed = json.loads(keeper("backups", "--home", str(new), "--json").stdout)["profiles"][0]["backups"]
    assert [b["home"] for b in listed] == [str(old)]
