"""Code for a child process that SIGKILLs itself after the Nth call of the functions it wraps.

A test runs ``python -c (THEN_DIE + script) N ...`` for every N to hit each crash window of a
command; ``script`` wraps what it wants counted with ``then_die`` and reads its own arguments
from ``sys.argv[2:]``.
"""

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
