"""One demo session as ``demo.DemoSpec`` takes it: the shape the safety tests build homes from."""

from __future__ import annotations


def session(sid, start, *, source="cli", ended=True, key=None, end="user_exit") -> dict:
    """A session of two messages starting at ``start`` (ended half an hour later unless open;
    ``key``: its gateway ``session_key``)."""
    msgs = [("user", f"question {sid}", start + 10), ("assistant", f"answer {sid}", start + 20)]
    return {
        "id": sid,
        "source": source,
        "started_at": start,
        "ended_at": start + 1800 if ended else None,
        "end_reason": end if ended else None,
        "kwargs": {"session_key": key} if key else {},
        "messages": msgs,
    }
