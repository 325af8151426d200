"""Append-only JSONL record of what the keeper did: ``<home>/keeper/journal.jsonl``.

One line per action (never message content: ids, counts, bytes, reasons), fsynced
per line so the journal survives a crash of the run it describes (a burst of small
records, such as one per removed file, is fsynced once at its end).

Opening the journal is every writing command's first step in a home, so it is also where
the home is checked before anything is created: a folder that is not a Hermes home, or a
``keeper/`` holding a symlink, is refused in one line with nothing written.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from hermes_keeper.fs import HomeFS

JOURNAL_NAME = "journal.jsonl"


class Journal:
    def __init__(self, keeper_dir: Path, run_id: str | None = None):
        keeper_dir = Path(keeper_dir)
        fs = HomeFS(keeper_dir.parent)
        fs.require_home()
        fs.check_keeper_tree()
        self.path = fs.path(keeper_dir.name, JOURNAL_NAME)
        self.run_id = run_id or time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + f"-{os.getpid()}"
        self._fd = fs.open_private(
            keeper_dir.name, JOURNAL_NAME, flags=os.O_CREAT | os.O_WRONLY | os.O_APPEND, create_dirs=True
        )

    def write(self, action: str, /, *, durable: bool = True, **fields) -> None:
        """Append one record; ``durable=False`` leaves the fsync to a later :meth:`sync`."""
        record = {"ts": round(time.time(), 3), "run": self.run_id, "action": action, **fields}
        os.write(self._fd, (json.dumps(record, sort_keys=True, default=str) + "\n").encode("utf-8"))
        if durable:
            self.sync()

    def sync(self) -> None:
        os.fsync(self._fd)

    def close(self) -> None:
        os.close(self._fd)

    def __enter__(self) -> Journal:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def read_journal(keeper_dir: Path) -> list[dict]:
    keeper_dir = Path(keeper_dir)
    data = HomeFS(keeper_dir.parent).read_bytes(keeper_dir.name, JOURNAL_NAME)
    if data is None:
        return []
    return [json.loads(line) for line in data.decode("utf-8").splitlines() if line.strip()]
