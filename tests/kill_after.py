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
