"""Append-only JSONL record of what the keeper did: ``<home>/keeper/journal.jsonl``.

One line per action (never message content: ids, counts, bytes, reasons), fsynced
per line so the journal survives a crash of the run it describes (a burst of small
records, such as one per removed file, is fsynced once at its end).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from hermes_keeper.fs import private_dir

JOURNAL_NAME = "journal.jsonl"


class Journal:
    def __init__(self, keeper_dir: Path, run_id: str | None = None):
        private_dir(keeper_dir)
        self.path = keeper_dir / JOURNAL_NAME
        self.run_id = run_id or time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + f"-{os.getpid()}"
        self._fd = os.open(self.path, os.O_CREAT | os.O_WRONLY | os.O_APPEND, 0o600)

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
    path = keeper_dir / JOURNAL_NAME
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
