"""The report's message statistics through ``keeper/stats.db`` equal a fresh read, whatever changed."""

from __future__ import annotations

import sqlite3
import stat
import time

import pytest

from hermes_keeper import demo
from hermes_keeper.home import select_profiles
from hermes_keeper.model.policy import DAY
from hermes_keeper.report import build_report
from hermes_keeper.run import message_stats
from hermes_keeper.run.survey import survey_profile
from hermes_keeper.sqlite.schema import inspect

NOW = 1_780_000_000.0


def _home(tmp_path, mode="wal"):
    home = tmp_path / "home"
    demo.build_home(home, demo.generate(NOW, sessions=40, days=60))
    conn = sqlite3.connect(home / "state.db")
    assert conn.execute(f"PRAGMA journal_mode={mode}").fetchone()[0] == mode
    conn.close()
    profile = select_profiles(home, env={})[0]
    profile.fs.private_dir("keeper")
    return profile


def _same(profile, now):
    """The cached survey equals a fresh one (counts, bytes, windows, first/last); the sessions."""
    cached = survey_profile(profile, now=now, cached=True)
    fresh = survey_profile(profile, now=now)
    assert cached.sessions == fresh.sessions and cached.message_total == fresh.message_total
    return fresh.sessions


def _full(reads) -> bool:
    """Whether one of the ``reads`` read all messages (in one read, or from the first id in steps)."""
    return any(w == "WHERE id <= ?" or (w == "WHERE id BETWEEN ? AND ?" and p[0] == 1) for w, p in reads)


def _cached(profile, now, reads):
    """The cached survey's sessions, and whether it read every message to make them."""
    reads.clear()
    sessions = survey_profile(profile, now=now, cached=True).sessions
    return sessions, _full(reads)


def _db(profile):
    return sqlite3.connect(profile.db_path, isolation_level=None)


def _append(conn, sid, n, ts, text="more words here"):
    for i in range(n):
        conn.execute(
            "INSERT INTO messages (session_id, role, content, timestamp) VALUES (?, 'user', ?, ?)",
            (sid, f"{text} {i}", ts + i),
        )
    conn.execute("UPDATE sessions SET message_count = message_count + ? WHERE id = ?", (n, sid))


@pytest.fixture
def reads(monkeypatch):
    """The ``where`` of every aggregate read of ``messages`` (to see what the refresh reads)."""
    seen = []
    real = message_stats.message_stats

    def spy(conn, schema, since, where="", params=()):
        seen.append((where, params))
        return real(conn, schema, since, where, params)

    monkeypatch.setattr(message_stats, "message_stats", spy)
    return seen


@pytest.mark.parametrize("mode", ["wal", "delete"])
def test_cached_statistics_follow_appends_deletes_rewrites_and_time(tmp_path, mode, reads):
    profile = _home(tmp_path, mode)
    sessions = _same(profile, NOW)
    cache = profile.fs.path("keeper", message_stats.CACHE_NAME)
    assert stat.S_IMODE(cache.stat().st_mode) == 0o600
    busy = max(sessions.values(), key=lambda s: s.messages)
    quiet = [s for s in sessions.values() if s.messages and s.id != busy.id]

    conn = _db(profile)
    _append(conn, busy.id, 5, NOW - 60)
    conn.execute("INSERT INTO sessions (id, source, started_at) VALUES ('fresh', 'cli', ?)", (NOW - 30,))
    _append(conn, "fresh", 3, NOW - 20)
    after, full = _cached(profile, NOW, reads)
    assert not full and after == _same(profile, NOW)  # only the new ids read
    assert after[busy.id].messages == busy.messages + 5 and after["fresh"].messages == 3

    gone = quiet[0]
    conn.execute("DELETE FROM messages WHERE session_id = ?", (gone.id,))
    conn.execute("DELETE FROM sessions WHERE id = ?", (gone.id,))
    assert gone.id not in _same(profile, NOW)
    held = sqlite3.connect(cache).execute("SELECT count(*) FROM sessions WHERE sid = ?", (gone.id.encode(),))
    assert held.fetchone()[0] == 0

    # rewritten in place: three messages deleted, three others added, message_count as before
    rewritten = quiet[1]
    ids = [r[0] for r in conn.execute("SELECT id FROM messages WHERE session_id = ? LIMIT 3", [rewritten.id])]
    conn.execute(f"DELETE FROM messages WHERE id IN ({','.join('?' * len(ids))})", ids)
    conn.execute("UPDATE sessions SET message_count = message_count - 3 WHERE id = ?", (rewritten.id,))
    _append(conn, rewritten.id, 3, NOW - 10, text="a much longer replacement text than before")
    assert _same(profile, NOW)[rewritten.id].messages == rewritten.messages

    # deleted in place only, message_count following (as Hermes's rewind does)
    trimmed = quiet[2]
    conn.execute(
        "DELETE FROM messages WHERE id = (SELECT max(id) FROM messages WHERE session_id = ?)", (trimmed.id,)
    )
    conn.execute("UPDATE sessions SET message_count = message_count - 1 WHERE id = ?", (trimmed.id,))
    assert _same(profile, NOW)[trimmed.id].messages == trimmed.messages - 1
    conn.close()

    # time moves on: messages leave the 7- and 30-day windows, read from the cache alone
    before = _same(profile, NOW)
    later, full = _cached(profile, NOW + 6 * DAY, reads)  # within the week: no full read
    assert not full and later == survey_profile(profile, now=NOW + 6 * DAY).sessions
    week = [sum(s.recent_messages[0] for s in run.values()) for run in (before, later)]
    assert 0 < week[1] < week[0]
    _same(profile, NOW + 31 * DAY)


def test_a_damaged_cache_warns_and_the_report_stays_right(tmp_path, capsys):
    profile = _home(tmp_path)
    fresh = build_report(profile, now=NOW).to_dict()
    profile.fs.path("keeper", message_stats.CACHE_NAME).write_bytes(b"not a database at all" * 100)
    capsys.readouterr()
    again = build_report(profile, now=NOW).to_dict()
    assert "stats.db unreadable" in capsys.readouterr().err
    assert again["sessions"] == fresh["sessions"] and again["growth"] == fresh["growth"]
    _same(profile, NOW)  # written anew, and right
    assert capsys.readouterr().err == ""


def test_no_keeper_folder_no_cache(tmp_path):
    home = tmp_path / "home"
    demo.build_home(home, demo.generate(NOW, sessions=10))
    profile = select_profiles(home, env={})[0]
    _same(profile, NOW)
    assert not profile.fs.path("keeper").exists()


def test_a_cache_older_than_a_week_is_read_again_in_full(tmp_path, reads):
    profile = _home(tmp_path)
    _same(profile, NOW)
    conn = _db(profile)  # deactivated in place, message_count left as it was: not seen...
    conn.execute("UPDATE messages SET active = 0 WHERE id = (SELECT min(id) FROM messages)")
    conn.close()
    soon = survey_profile(profile, now=NOW + DAY, cached=True)
    assert sum(s.inactive_messages for s in soon.sessions.values()) == 0
    late, full = _cached(profile, NOW + message_stats.FULL_EVERY_S + DAY, reads)
    assert full and sum(s.inactive_messages for s in late.values()) == 1  # ... until a week old


def test_real_hermes_appends_are_folded_in(tmp_path, hermes, hermes_home):
    home = hermes_home(tmp_path / "home", sessions=12, messages_per_session=6)
    profile = select_profiles(home, env={})[0]
    profile.fs.private_dir("keeper")
    before = _same(profile, time.time())
    sid = max(before.values(), key=lambda s: s.messages).id
    hermes.run(
        home,
        [
            {"op": "call", "method": "append_message", "args": [sid, "user", "one more question"]},
            {"op": "call", "method": "append_message", "args": [sid, "assistant", "one more answer"]},
            {"op": "call", "method": "create_session", "args": ["brand-new", "cli"]},
            {"op": "call", "method": "append_message", "args": ["brand-new", "user", "hello"]},
        ],
    )
    after = _same(profile, time.time() + 60)
    assert after["brand-new"].messages == 1 and after[sid].messages == before[sid].messages + 2
    assert after[sid].recent_messages[0] == before[sid].recent_messages[0] + 2


def test_the_reports_timestamp_problems_come_from_the_cache_and_match_a_full_check(tmp_path):
    profile = _home(tmp_path)
    assert build_report(profile, now=NOW).to_dict()["schema"]["timestamp_problems"] == []
    conn = _db(profile)
    sid = conn.execute("SELECT id FROM sessions LIMIT 1").fetchone()[0]
    _append(conn, sid, 2, NOW * 1000)  # milliseconds, as another writer might store them
    conn.execute(
        "INSERT INTO messages (session_id, role, content, timestamp) VALUES (?, 'user', 'x', '2026-01-01')",
        (sid,),
    )
    conn.close()
    problems = build_report(profile, now=NOW).to_dict()["schema"]["timestamp_problems"]
    assert problems == inspect(profile.db_path).timestamp_problems
    assert [p.split(":")[0] for p in problems] == ["messages.timestamp", "messages.timestamp"]


def test_a_message_count_that_never_matches_is_not_reread_on_every_report(tmp_path, reads):
    profile = _home(tmp_path)
    conn = _db(profile)
    conn.execute("UPDATE sessions SET message_count = 0")  # as an import that never set it
    _same(profile, NOW)
    reads.clear()
    assert _cached(profile, NOW, reads)[1] is False
    assert not any("session_id IN" in w for w, _ in reads)
    sid = conn.execute("SELECT id FROM sessions LIMIT 1").fetchone()[0]
    conn.execute("UPDATE sessions SET message_count = 1 WHERE id = ?", (sid,))  # it moved: read again
    conn.close()
    _cached(profile, NOW, reads)
    assert [p[:-1] for w, p in reads if "session_id IN" in w] == [(sid,)]


def test_ids_that_are_not_utf8_are_kept_byte_for_byte(tmp_path):
    profile = _home(tmp_path)
    _same(profile, NOW)
    conn = _db(profile)
    odd = "CAST(X'6f6464ff6964' AS TEXT)"  # 'odd\xffid'
    conn.execute(
        f"INSERT INTO sessions (id, source, started_at, message_count) VALUES ({odd}, 'cli', ?, 2)", (NOW,)
    )
    for ts in (NOW - 5, NOW - 4):
        conn.execute(
            f"INSERT INTO messages (session_id, role, content, timestamp) VALUES ({odd}, 'user', 'hi', ?)",
            (ts,),
        )
    conn.close()
    first = _same(profile, NOW)
    (sid,) = [s for s in first if s.startswith("odd")]
    assert first[sid].messages == 2 and first[sid].odd_id
    assert _same(profile, NOW + 60)[sid].messages == 2  # read back from the cache
