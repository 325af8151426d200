"""Code for a child process that SIGKILLs itself after the Nth call of the functions it wraps.

A test runs ``python -c (THEN_DIE + script) N ...`` for every N to hit each crash window of a
command; ``script`` wraps what it wants counted with ``then_die`` and reads its own arguments
from ``sys.argv[2:]``. Also a Hermes write killed before its commit (:data:`HOT_JOURNAL`), and a
database opened after a crash as Hermes opens it (:func:`opened_as_hermes_would`).
"""

import shutil
import sqlite3
import subprocess
import sys

THEN_DIE = """
import os, signal, sys

n, calls = int(sys.argv[1]), [0]


def then_die(fn):
    def step(*args, **kwargs):
        out = fn(*args, **kwargs)
        calls[0] += 1
        if calls[0] == n:
            os.kill(os.getpid(), signal.SIGKILL)
        return out
    return step
"""

#: A Hermes write killed before its commit, in DELETE journal mode: ``python -c HOT_JOURNAL DB``
#: begins a write, rewrites more pages than its cache holds (so they reach ``DB`` itself), then
#: SIGKILLs itself, leaving a hot ``DB-journal`` that the next read-write open rolls back.
HOT_JOURNAL = """
import os, signal, sqlite3, sys
c = sqlite3.connect(sys.argv[1], isolation_level=None)
c.execute("PRAGMA journal_mode=delete")
c.execute("PRAGMA cache_size=2")
c.execute("BEGIN IMMEDIATE")
c.execute("UPDATE messages SET content = content || 'not committed, rolled back'")
c.execute("DELETE FROM sessions WHERE rowid % 2 = 0")
os.kill(os.getpid(), signal.SIGKILL)
"""


def leave_hot_journal(db) -> None:
    subprocess.run([sys.executable, "-c", HOT_JOURNAL, str(db)])
    assert db.with_name(db.name + "-journal").stat().st_size > 0


def opened_as_hermes_would(home, name: str, tmp_path) -> set[str]:
    """The sessions of ``name`` with its sidecars (same names plus ``-journal``/``-wal``/``-shm``),
    copied aside and opened plainly read-write as Hermes opens it (a hot journal is rolled back,
    a -wal replayed): it must pass integrity_check."""
    folder = tmp_path / f"open-{name}"
    folder.mkdir()
    for suffix in ("", "-journal", "-wal", "-shm"):
        if (home / f"{name}{suffix}").exists():
            shutil.copy(home / f"{name}{suffix}", folder / f"copy.db{suffix}")
    conn = sqlite3.connect(folder / "copy.db")
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        return {r[0] for r in conn.execute("SELECT id FROM sessions")}
    finally:
        conn.close()
        shutil.rmtree(folder)
