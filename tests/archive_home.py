"""A home made by real Hermes with everything an archive must carry, pruned by the keeper.

Shared by the archive tests: tool calls and results, structured (multimodal) content,
rewound (inactive) messages, a model usage row, the ``goal:``, ``loop:`` and ``heartbeat:``
state_meta keys (a paused heartbeat, a finished loop: neither keeps its session), a title, a
compression chain with a delegate subagent under it, a cron run, and a fresh session
that is never pruned.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

from hermes_keeper.archive.store import ARCHIVE_NAME
from hermes_keeper.home import Profile, select_profiles
from hermes_keeper.model.conversations import conversations
from hermes_keeper.model.policy import Policy
from hermes_keeper.run.context import open_run
from hermes_keeper.run.execute import prune_sessions
from hermes_keeper.run.survey import survey_profile

DAY = 86400.0
#: The per-session state_meta keys (``goal:``, ``loop:``, ``heartbeat:`` + the id), as SQL.
SESSION_META = "key LIKE 'goal:%' OR key LIKE 'loop:%' OR key LIKE 'heartbeat:%'"
NOW = time.time()
PRUNED = ["old_a", "old_b", "old_c", "old_d", "cron_x"]
CHAIN = ["old_b", "old_c", "old_d"]  # compression parent, continuation, delegate subagent
TOOL_CALLS = [
    {"id": "c1", "type": "function", "function": {"name": "web_search", "arguments": '{"q": "walrus"}'}}
]
IMAGE = [
    {"type": "text", "text": "look at this walrus photo"},
    {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
]


def _call(method: str, *args, **kwargs) -> dict:
    return {"op": "call", "method": method, "args": list(args), "kwargs": kwargs}


def _session(sid: str, source: str, t0: float, turns: list, end_reason: str = "user_exit", **create) -> list:
    ops = [{"op": "clock", "t": t0}, _call("create_session", sid, source, **create)]
    for i, (role, content, extra) in enumerate(turns):
        ops.append(_call("append_message", sid, role, content, timestamp=t0 + 10 * (i + 1), **extra))
    ops += [{"op": "clock", "t": t0 + 900}, _call("end_session", sid, end_reason)]
    return ops


def build(hermes, home: Path) -> Path:
    """Create the sessions through Hermes's own SessionDB; returns the home."""
    home.mkdir(parents=True, exist_ok=True)
    a, b, cron = NOW - 30 * DAY, NOW - 40 * DAY, NOW - 20 * DAY
    ops = _session(
        "old_a",
        "cli",
        a,
        [
            ("user", "Tell me about walrus tusks", {}),
            ("assistant", "", {"tool_calls": TOOL_CALLS}),
            (
                "tool",
                "Walrus tusks grow up to one metre.\nSecond line.",
                {"tool_name": "web_search", "tool_call_id": "c1"},
            ),
            ("assistant", 'Walruses use tusks to haul out: ünïcødé "quoted"', {}),
            ("user", IMAGE, {}),
            ("assistant", "A fine walrus.", {}),
            ("user", "oops, a wrong turn about seals", {}),
            ("assistant", "Seals are not walruses.", {}),
        ],
    )
    ops += [
        _call("set_session_title", "old_a", "Walrus facts"),
        _call(
            "update_token_counts", "old_a", input_tokens=120, output_tokens=30, model="m1", api_call_count=2
        ),
        _call("set_meta", "goal:old_a", "learn about walruses"),
        _call(
            "set_meta",
            "heartbeat:old_a",
            '{"prompt": "walrus news?", "interval_seconds": 600, "status": "paused"}',
        ),
    ]
    ops += _session("old_b", "cli", b, [("user", "narwhal part one", {})], end_reason="compression")
    ops += _session("old_c", "cli", b + 3600, [("user", "narwhal part two", {})], parent_session_id="old_b")
    ops += _session(
        "old_d",
        "subagent",
        b + 3700,
        [("user", "narwhal research task", {}), ("assistant", "narwhal findings", {})],
        end_reason="delegate_done",
        parent_session_id="old_c",
        model_config={"_delegate_from": "old_c"},
    )
    ops.append(_call("set_meta", "loop:old_c", '{"prompt": "more narwhals", "status": "done"}'))
    ops += _session("cron_x", "cron", cron, [("user", "weather summary for tuesday", {})], "cron_complete")
    ops += [{"op": "clock", "t": None}, _call("create_session", "fresh", "cli")]
    ops.append(_call("append_message", "fresh", "user", "penguin colonies walrus-free"))
    hermes.run(home, ops)
    rewind_from = hermes.run(
        home,
        [
            {
                "op": "query",
                "sql": "SELECT min(id) FROM messages WHERE session_id='old_a' AND content LIKE 'oops%'",
            }
        ],
    )[0][0][0]
    hermes.call(home, "rewind_to_message", "old_a", rewind_from)
    return home


def profile(home: Path) -> Profile:
    return select_profiles(str(home))[0]


def prune(home: Path, ids: list[str] = PRUNED) -> None:
    """The keeper's own archive-then-delete (what ``hermes-keeper run`` does for these ids, cut
    into their conversations as the plan cuts them)."""
    prof = profile(home)
    convs = conversations(survey_profile(prof).sessions.values())
    units = [[m for m in convs.children_first(r) if m in ids] for r in convs.members]
    with open_run(prof, Policy(pause_ms=0)) as ctx:
        result = prune_sessions(ctx, [u for u in units if u])
    assert sorted(result.pruned) == sorted(ids), result


def snapshot(hermes, home: Path, ids: list[str]) -> list:
    """Everything Hermes shows of these sessions, through its own SessionDB."""
    ops = []
    for sid in ids:
        ops += [
            _call("get_messages", sid),
            _call("get_messages", sid, include_inactive=True),
            _call("export_session", sid),
        ]
    ops.append({"op": "query", "sql": "SELECT * FROM session_model_usage ORDER BY session_id, model"})
    keys = [f"{prefix}:{sid}" for sid in ids for prefix in ("goal", "loop", "heartbeat")]
    marks = ",".join("?" * len(keys))
    ops.append(
        {
            "op": "query",
            "sql": f"SELECT * FROM state_meta WHERE key IN ({marks}) ORDER BY key",
            "params": keys,
        }
    )
    return hermes.run(home, ops)


def flip_byte(home: Path, sid: str) -> None:
    """Damage one archive row the way a bad disk would: one byte of its compressed payload."""
    conn = sqlite3.connect(home / "keeper" / ARCHIVE_NAME)
    blob = bytearray(
        conn.execute("SELECT payload FROM archived_sessions WHERE session_id = ?", (sid,)).fetchone()[0]
    )
    blob[len(blob) // 2] ^= 0xFF
    conn.execute("UPDATE archived_sessions SET payload = ? WHERE session_id = ?", (bytes(blob), sid))
    conn.commit()
    conn.close()


def payload(
    sid: str, source: str, started: float, title: str | None = None, texts=("hello",), parent=None
) -> dict:
    """A minimal archive payload (no Hermes needed) for table-driven tests of the archive logic."""
    msgs = [
        {
            "id": i + 1,
            "session_id": sid,
            "role": "user",
            "content": t,
            "timestamp": started + i + 1,
            "active": 1,
        }
        for i, t in enumerate(texts)
    ]
    session = {"id": sid, "source": source, "started_at": started, "ended_at": started + 60, "title": title}
    session |= {"parent_session_id": parent, "end_reason": "user_exit"}
    return {
        "format": 1,
        "schema_version": 22,
        "session": session,
        "messages": msgs,
        "model_usage": [],
        "state_meta": [],
    }
