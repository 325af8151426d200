"""SIGINT and SIGTERM as step boundaries: a run stops between two steps, never inside one.

Before a run changes anything a signal stops it at once (:class:`Interrupted`, nothing
changed). Once it changes state.db (:meth:`Stop.defer`), the handler only notes the signal;
the executor looks between steps (:meth:`Stop.check`) and ends the run cleanly: FTS settings
and the hold file put back, hidden sessions shown again, the stop journaled and recorded.
A second signal is the user insisting: its default action (what the journal and the hold file
are there for: the next run finishes the work).
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

#: The signals a run treats as "stop now, cleanly": Ctrl-C and a service manager's stop.
SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(Exception):
    """A run stopped by a signal; ``result``: what it did before (a ``RunResult``, or None: nothing).

    Not a refusal (``KeeperError``): it ends every profile of the command, not just this one.
    """

    def __init__(self, signum: int):
        self.signum = signum
        self.result = None
        super().__init__(f"interrupted by {signal.Signals(signum).name}")

    @property
    def exit_code(self) -> int:
        """The shell's convention for a command a signal ended: 128 + its number (130, 143)."""
        return 128 + self.signum


class Stop:
    """What the handlers noted: the signal to stop at the next step boundary (None: none yet)."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self.deferred = False

    def defer(self) -> None:
        """From here on a signal waits for :meth:`check` (the run is changing things)."""
        self.deferred = True
        self.check()

    def check(self) -> None:
        """A step boundary: raise :class:`Interrupted` if a signal came."""
        if self.signum is not None:
            raise Interrupted(self.signum)


@contextmanager
def stop_on_signals() -> Iterator[Stop]:
    """:data:`SIGNALS` handled as :class:`Stop` says for the block, the previous handlers back
    after it. Off the main thread (where Python runs no handler) a :class:`Stop` that never fires."""
    stop = Stop()
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return

    def note(signum, _frame) -> None:
        if not stop.deferred:
            raise Interrupted(signum)
        stop.signum = signum
        signal.signal(signum, previous[signum])  # a second one: its default action

    previous = {s: signal.signal(s, note) for s in SIGNALS}
    try:
        yield stop
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
