"""Import an ``archive export --format hermes-jsonl`` file with Hermes's own ``SessionDB.import_sessions``.

Run it with the Python that runs Hermes (the first line of the ``hermes`` launcher),
so the import is Hermes's own code on Hermes's own database::

    HERMES_HOME=~/.hermes  <hermes python>  hermes_import.py  export.jsonl

Standalone on purpose: it needs only the standard library and ``hermes_state``. One
``import_sessions`` call takes at most 500 sessions, 50,000 messages and 25 MiB, and
is all-or-nothing; :func:`import_batches` cuts the file into calls that fit, and a
batch that fails as a whole (a title already taken) is retried one session at a time
so only the offending session is left out. Existing ids are skipped by Hermes.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Iterator

# SessionDB._IMPORT_MAX_* in hermes_state 0.19.0
MAX_SESSIONS = 500
MAX_MESSAGES = 50_000
MAX_BYTES = 25 * 1024 * 1024
MAX_SESSION_MESSAGES = 10_000
MAX_SESSION_BYTES = 5 * 1024 * 1024


def session_bytes(session: dict) -> int:
    """The size Hermes's import measures (compact JSON, UTF-8)."""
    return len(json.dumps(session, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))


def too_big(session: dict) -> str | None:
    """Why Hermes's import would reject this session on its own, if it would."""
    if len(session.get("messages") or []) > MAX_SESSION_MESSAGES:
        return f"more than {MAX_SESSION_MESSAGES:,} messages"
    if session_bytes(session) > MAX_SESSION_BYTES:
        return f"larger than {MAX_SESSION_BYTES // (1024 * 1024)} MiB"
    return None


def import_batches(sessions: Iterable[dict]) -> Iterator[list[dict]]:
    """Consecutive lists of sessions that each fit one ``import_sessions`` call (order kept)."""
    batch: list[dict] = []
    msgs = size = 0
    for s in sessions:
        n, b = len(s.get("messages") or []), session_bytes(s)
        if batch and (len(batch) >= MAX_SESSIONS or msgs + n > MAX_MESSAGES or size + b > MAX_BYTES):
            yield batch
            batch, msgs, size = [], 0, 0
        batch.append(s)
        msgs, size = msgs + n, size + b
    if batch:
        yield batch


def import_file(db, lines: Iterable[str]) -> dict:
    """Import every session in ``lines`` into ``db`` (a ``SessionDB``); a summary dict."""
    summary = {"imported": 0, "skipped": 0, "detached": 0, "failed": {}}
    sessions = []
    for line in lines:
        if line.strip():
            s = json.loads(line)
            reason = too_big(s)
            if reason:
                summary["failed"][s.get("id")] = f"Hermes cannot import it: {reason}"
            else:
                sessions.append(s)

    def one_call(batch: list[dict]) -> bool:
        try:
            res = db.import_sessions(batch)
        except Exception as exc:  # the whole call was rolled back (e.g. a duplicate title)
            res = {"ok": False, "errors": [{"session_id": batch[0].get("id"), "error": f"{exc}"}]}
        if res.get("ok"):
            for key in ("imported", "skipped", "detached"):
                summary[key] += res.get(key, 0)
            return True
        if len(batch) == 1:
            for err in res.get("errors") or [{"error": "rejected"}]:
                summary["failed"][batch[0].get("id")] = err.get("error")
        return False

    for batch in import_batches(sessions):
        if not one_call(batch) and len(batch) > 1:
            for s in batch:
                one_call([s])
    return summary


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: HERMES_HOME=... <hermes python> hermes_import.py EXPORT.jsonl", file=sys.stderr)
        return 2
    import hermes_state  # Hermes's own code; only this step needs it

    db = hermes_state.SessionDB()
    try:
        with open(argv[0], encoding="utf-8") as fh:
            summary = import_file(db, fh)
    finally:
        db.close()
    print(json.dumps(summary, indent=2, ensure_ascii=False))
    return 1 if summary["failed"] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
