"""``demo``: a realistic home that real Hermes opens, built only where nothing is lost."""

from __future__ import annotations

import sqlite3
import tempfile
import time

import zstandard
from click.testing import CliRunner

from hermes_keeper import demo
from hermes_keeper.cli import main
from tests.conftest import tree_digest


def run_demo(*args):
    # a 100-column terminal (rich's TTY_COMPATIBLE), without colour codes; piped, nothing wraps
    return CliRunner().invoke(
        main, ["demo", *args], env={"COLUMNS": "100", "TTY_COMPATIBLE": "1", "TERM": "dumb"}
    )


def test_demo_builds_into_dir_and_reports(tmp_path):
    home = tmp_path / "d"
    res = run_demo(str(home), "--sessions", "80")
    assert res.exit_code == 0, res.output
    assert res.output.startswith(f"demo home: {home}")
    assert "Sessions by source" in res.output and "runaway:" in res.output
    assert (home / "state.db").is_file() and (home / "sessions" / "sessions.json").is_file()
    assert res.output.splitlines()[-1] == f"next: hermes-keeper plan --home {home}"
    assert max(len(line) for line in res.output.splitlines() if str(home) not in line) <= 100


def test_demo_without_dir_uses_a_new_temp_folder(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    res = run_demo("--sessions", "30")
    assert res.exit_code == 0, res.output
    (made,) = tmp_path.iterdir()
    assert made.name.startswith("hermes-demo-") and (made / "state.db").is_file()
    assert str(made) in res.output.splitlines()[0]


def test_demo_refuses_a_folder_with_a_database(tmp_path):
    (tmp_path / "state.db").write_bytes(b"precious")
    (tmp_path / "notes.txt").write_text("mine")
    before = tree_digest(tmp_path)
    res = run_demo(str(tmp_path))
    assert res.exit_code == 2
    assert "is not empty (notes.txt, state.db)" in res.output and len(res.output.strip().splitlines()) == 1
    assert tree_digest(tmp_path) == before


def test_demo_spec_looks_like_the_bug_reports():
    now = 1.8e9
    spec = demo.generate(now, sessions=300)
    assert spec.sessions == demo.generate(now, sessions=300).sessions  # deterministic
    sessions = spec.sessions
    cron = sum(s["source"] == "cron" for s in sessions)
    assert 0.66 < cron / len(sessions) < 0.76
    assert sum("ended_at" not in s for s in sessions) >= 10  # zombies and the live chat
    assert sum(len(s["messages"]) >= 500 for s in sessions) == 2
    assert max(now - s["started_at"] for s in sessions) > 60 * 86400
    assert len({s["id"] for s in sessions}) == len(sessions)


def test_demo_text_indexes_like_conversations(tmp_path):
    """The benches' big homes are this text: its full-text indexes must have a real index's shape,
    a few long doclists and a long tail. FTS5 writes a term's whole doclist in one merge step: with
    47 equally common words (the earlier text) the 2 GB home's trigram index held 459 terms, 204
    of them over ~1,000 pages, so most merge steps were that long, and the bench measured stalls
    no real home has."""
    spec = demo.generate(1.8e9, sessions=100)
    conn = sqlite3.connect(demo.build_home(tmp_path / "h", spec))
    for table, min_terms in (("messages_fts", 5_000), ("messages_fts_trigram", 5_000)):
        conn.execute(f"CREATE VIRTUAL TABLE temp.vocab_{table} USING fts5vocab(main, {table}, 'row')")
        terms, postings, top = conn.execute(
            f"SELECT count(*), sum(cnt), max(cnt) FROM temp.vocab_{table}"
        ).fetchone()
        assert terms >= min_terms
        assert top / postings < 0.06  # "the" is ~5% of English words; " th" ~1.5% of its trigrams
    text = " ".join(m[1] for s in spec.sessions for m in s.get("messages", []))
    ratio = len(text) / len(zstandard.ZstdCompressor(level=3).compress(text.encode()))
    assert 2.5 < ratio < 8  # people and tools repeat themselves, but not 47 words over and over


def test_demo_home_opens_in_real_hermes(tmp_path, hermes):
    home = tmp_path / "d"
    spec = demo.generate(time.time(), sessions=80)
    demo.build_home(home, spec)
    word = spec.sessions[0]["messages"][0][1].split()[0]
    total, messages, cron, hits, exported, fts = hermes.run(
        home,
        [
            {"op": "call", "method": "session_count", "kwargs": {"include_archived": True}},
            {"op": "call", "method": "message_count"},
            {"op": "call", "method": "session_count", "kwargs": {"source": "cron"}},
            {"op": "call", "method": "search_messages", "args": [word], "kwargs": {"limit": 50}},
            {"op": "call", "method": "export_session", "args": [spec.sessions[0]["id"]]},
            {"op": "fts_integrity"},
        ],
    )
    assert total == len(spec.sessions)
    assert messages == sum(len(s["messages"]) for s in spec.sessions)
    assert cron == sum(s["source"] == "cron" for s in spec.sessions)
    ids = {s["id"] for s in spec.sessions}
    assert hits and all(h["session_id"] in ids and word in h["snippet"] for h in hits)
    assert len(exported["messages"]) == len(spec.sessions[0]["messages"])
    assert fts == {"messages_fts": "ok", "messages_fts_trigram": "ok"}
