"""Realistic sample homes: the same session specs feed our own builder and real Hermes.

:func:`generate` returns plain dicts (the format ``tests/hermes_driver.py``'s ``build``
op takes), shaped like the homes in the bug reports: ~73% cron sessions, zombies left
open by hard exits, compression chains, delegate subagents, gateway chats that are
months old but active today, a few 500+ message runaways, ages over 60 days, orphan
transcript files and request dumps. :func:`build_home` writes them with the schema real
Hermes 0.19.0 creates (``data/hermes_schema.sql``) without needing Hermes installed.
"""

from __future__ import annotations

import functools
import itertools
import json
import os
import random
import sqlite3
import time
from dataclasses import dataclass, field
from importlib.resources import files
from pathlib import Path
from typing import NamedTuple

from hermes_keeper.sqlite.connect import connect_file

DAY = 86400.0
#: The topics of the sample conversations: the most frequent words after English's own.
WORDS = tuple(
    (
        "deploy docker kubernetes python refactor test database index query backup cron report "
        "weather summary email invoice calendar meeting notes research paper model prompt token "
        "latency cache memory gateway telegram discord budget travel recipe garden music review"
    ).split()
)
_ENGLISH = tuple(
    (
        "the of and to a in is it you that he was for on are with as i his they be at one have "
        "this from or had by not word but what some we can out other were all there when up use "
        "your how said an each she which do their time if will way about many then them write "
        "would like so these her long make thing see him two has look more day could go come did "
        "number sound no most people my over know water than call first who may down side been "
        "now find any new work part take get place made live where after back little only round "
        "man year came show every good me give our under name very through just form sentence "
        "great think say help low line differ turn cause much mean before move right boy old too "
        "same tell does set three want air well also play small end put home read hand port large"
    ).split()
)
_ONSETS = ("", *"b c d f g h k l m n p r s t v w br ch cl cr dr fl gr pl pr sh sl st str th tr".split())
_NUCLEI = tuple("a e i o u ai ea ee io ou y".split())
_CODAS = ("", "", *"n r s t l m nd ng nt rk st ck x".split())


def _zipf(count: int) -> list[float]:
    """Cumulative Zipf weights of ``count`` ranks: rank r weighs 1 / (r + 2.7)."""
    return list(itertools.accumulate(1.0 / (rank + 2.7) for rank in range(count)))


class _Text(NamedTuple):
    words: tuple[str, ...]
    word_weights: list[float]
    phrases: tuple[str, ...]
    phrase_weights: list[float]


@functools.cache
def _text() -> _Text:
    """The text model, built on first use (not on import: ``report`` imports this module)."""
    words, word_weights = _vocabulary()
    return _Text(words, word_weights, *_phrases(words, word_weights))


def _vocabulary(size: int = 30_000) -> tuple[tuple[str, ...], list[float]]:
    """Words and their cumulative Zipf weights (:func:`_zipf`): English's most frequent
    words first, then the topics, then made-up words of 1-3 syllables. Real conversations have
    that shape: a few words in most messages and a long tail, so a full-text index holds a few
    very long doclists and many short ones. (Uniform draws from 47 words gave a 2 GB home a
    trigram index of 459 terms, 204 of them doclists of ~1,000 pages or more: no real home merges
    like that.)"""
    rng = random.Random(1)
    words = list(dict.fromkeys((*_ENGLISH[:12], *WORDS, *_ENGLISH[12:])))
    seen = set(words)
    while len(words) < size:
        syllables = rng.choice((1, 2, 2, 3))
        word = "".join(
            rng.choice(_ONSETS) + rng.choice(_NUCLEI) + rng.choice(_CODAS) for _ in range(syllables)
        )
        if len(word) > 1 and word not in seen:
            seen.add(word)
            words.append(word)
    return tuple(words), _zipf(len(words))


def _phrases(
    words: tuple[str, ...], weights: list[float], count: int = 20_000
) -> tuple[tuple[str, ...], list[float]]:
    """Phrases of 2-7 of ``words``, with Zipf weights of their own."""
    rng = random.Random(2)
    phrases = tuple(
        " ".join(rng.choices(words, cum_weights=weights, k=rng.randint(2, 7))) for _ in range(count)
    )
    return phrases, _zipf(count)


#: Changes whenever the same seed makes other text: homes built and cached from it (bench/homes.py)
#: name it, so a stale one is never measured as the new one.
TEXT_VERSION = 2
#: Share of tokens that are numbers, ids, paths and identifiers (tool output, code): the rarest terms.
TECHNICAL_SHARE = 0.06


def _technical(rng: random.Random) -> str:
    kind = rng.randrange(5)
    if kind == 0:
        return f"{rng.getrandbits(32):08x}"
    if kind == 1:
        return str(rng.randrange(100_000))
    if kind == 2:
        return f"{rng.uniform(0, 1000):.2f}"
    text = _text()
    a, b = rng.choices(text.words, cum_weights=text.word_weights, k=2)
    return f"/{a}/{b}.py" if kind == 3 else f"{a}_{b}()"


@dataclass
class DemoSpec:
    now: float
    sessions: list[dict] = field(default_factory=list)
    #: files under the home: (relative path, size in bytes, mtime)
    files: list[tuple[str, int, float]] = field(default_factory=list)
    routed: dict[str, str] = field(default_factory=dict)  # session_key -> session id


def _sentence(rng: random.Random, n: int) -> str:
    """About ``n`` words: phrases (people repeat themselves, tools repeat their output) and now
    and then a number, id or path."""
    text, parts, words = _text(), [], 0
    while words < n:
        if rng.random() < TECHNICAL_SHARE:
            parts.append(_technical(rng))
            words += 1
        else:
            phrase = rng.choices(text.phrases, cum_weights=text.phrase_weights)[0]
            parts.append(phrase)
            words += phrase.count(" ") + 1
    return " ".join(parts)


def _local_id(rng: random.Random, ts: float) -> str:
    return time.strftime("%Y%m%d_%H%M%S", time.gmtime(ts)) + f"_{rng.getrandbits(24):06x}"


def _messages(rng: random.Random, start: float, count: int, span: float, words: int) -> list[list]:
    out = []
    for i in range(count):
        ts = start + span * (i + 1) / (count + 1)
        role = ("user", "assistant", "tool")[i % 3] if i % 5 else "user"
        out.append([role, _sentence(rng, max(3, int(rng.gauss(words, words / 3)))), ts])
    return out


#: Share of cron sessions, and their length relative to ``messages_per_session`` (cron runs are short).
CRON_SHARE, CRON_LENGTH = 0.73, 0.5


def messages_per_session_for(total_messages: int, sessions: int) -> int:
    """The ``messages_per_session`` with which :func:`generate` makes about ``total_messages``."""
    return max(2, round(total_messages / (sessions * (1 - CRON_SHARE * (1 - CRON_LENGTH)))))


def generate(
    now: float,
    sessions: int = 300,
    messages_per_session: int = 20,
    words_per_message: int = 40,
    days: int = 75,
    seed: int = 7,
    folders: bool = False,
) -> DemoSpec:
    """A deterministic home of ``sessions`` sessions spread over ``days`` days before ``now``;
    ``folders`` adds the other folders that grow (:func:`_add_folders`)."""
    rng = random.Random(seed)
    spec = DemoSpec(now=now)
    n_cron = int(sessions * CRON_SHARE)
    chat_sources = ["cli", "cli", "tui", "telegram", "discord", "slack", "subagent", "api_server"]
    for i in range(sessions):
        age = rng.uniform(0.01, days) * DAY
        start = now - age
        if i < n_cron:
            job = f"job{i % 4}"
            sid = f"cron_{job}_{_local_id(rng, start)[:15]}_{i}"
            count = max(2, int(rng.gauss(messages_per_session * CRON_LENGTH, 3)))
            s = {
                "id": sid,
                "source": "cron",
                "started_at": start,
                "messages": _messages(rng, start, count, 90, words_per_message),
                "ended_at": start + 120,
                "end_reason": "cron_complete",
            }
        else:
            source = rng.choice(chat_sources)
            sid = _local_id(rng, start)
            count = max(2, int(rng.gauss(messages_per_session, messages_per_session / 2)))
            s = {
                "id": sid,
                "source": source,
                "started_at": start,
                "messages": _messages(rng, start, count, 1800, words_per_message),
                "ended_at": start + 1900,
                "end_reason": "user_exit",
            }
            if rng.random() < 0.25:
                s["title"] = f"{_sentence(rng, 3)} #{i}"
            if source in ("telegram", "discord", "slack"):
                s["kwargs"] = {
                    "session_key": f"agent:main:{source}:dm:{i}",
                    "user_id": f"u{i}",
                    "chat_id": f"c{i}",
                    "chat_type": "dm",
                }
        spec.sessions.append(s)
    _add_special_cases(rng, spec, words_per_message)
    _add_files(rng, spec)
    if folders:
        _add_folders(spec)
    return spec


def _add_special_cases(rng: random.Random, spec: DemoSpec, words: int) -> None:
    now = spec.now
    # Zombies: open sessions abandoned by hard exits, days or weeks ago.
    for _ in range(max(3, len(spec.sessions) // 30)):
        start = now - rng.uniform(2, 40) * DAY
        spec.sessions.append(
            {
                "id": _local_id(rng, start),
                "source": rng.choice(["cli", "tui", "cron"]),
                "started_at": start,
                "messages": _messages(rng, start, 6, 600, words),
            }
        )
    # A months-old Telegram chat, routed by the gateway and active an hour ago.
    start = now - 70 * DAY
    msgs = _messages(rng, start, 30, 69 * DAY, words)
    msgs.append(["user", _sentence(rng, 12), now - 3600])
    key = "agent:main:telegram:dm:owner"
    spec.sessions.append(
        {
            "id": _local_id(rng, start),
            "source": "telegram",
            "started_at": start,
            "messages": msgs,
            "title": "Daily assistant",
            "kwargs": {"session_key": key, "user_id": "owner", "chat_id": "owner", "chat_type": "dm"},
        }
    )
    spec.routed[key] = spec.sessions[-1]["id"]
    # Runaways: 500+ messages in a couple of minutes (the report saw 602 in 107 s).
    for k in range(2):
        start = now - rng.uniform(10, 50) * DAY
        spec.sessions.append(
            {
                "id": _local_id(rng, start),
                "source": "cli",
                "started_at": start,
                "messages": _messages(rng, start, 520 + 41 * k, 107, words // 2),
                "ended_at": start + 120,
                "end_reason": "max_iterations",
            }
        )
    # A compression chain: one conversation in three rows.
    start = now - 45 * DAY
    parent = None
    for part in range(3):
        sid = _local_id(rng, start + part * 3600)
        s = {
            "id": sid,
            "source": "cli",
            "started_at": start + part * 3600,
            "messages": _messages(rng, start + part * 3600, 12, 3000, words),
            "ended_at": start + part * 3600 + 3500,
            "end_reason": "compression" if part < 2 else "user_exit",
        }
        if parent:
            s["kwargs"] = {"parent_session_id": parent}
        spec.sessions.append(s)
        parent = sid
    # A delegate subagent under an old CLI session.
    head = spec.sessions[-1]["id"]
    start = now - 44 * DAY
    spec.sessions.append(
        {
            "id": _local_id(rng, start),
            "source": "subagent",
            "started_at": start,
            "messages": _messages(rng, start, 8, 300, words),
            "ended_at": start + 400,
            "end_reason": "delegate_done",
            "kwargs": {"parent_session_id": head, "model_config": {"_delegate_from": head}},
        }
    )


def _add_files(rng: random.Random, spec: DemoSpec) -> None:
    for s in spec.sessions:
        if s["source"] in ("telegram", "discord", "slack") or rng.random() < 0.15:
            spec.files.append((f"sessions/{s['id']}.jsonl", 200 * len(s["messages"]), s["started_at"]))
        if rng.random() < 0.05:
            stamp = "20260101_000000_000000"
            spec.files.append((f"sessions/request_dump_{s['id']}_{stamp}.json", 40_000, s["started_at"]))
    for k in range(12):  # transcripts whose sessions are long gone
        ts = spec.now - rng.uniform(60, 120) * DAY
        spec.files.append((f"sessions/20250901_1200{k:02d}_dead{k:02x}.json", 150_000, ts))
        spec.files.append(
            (
                f"sessions/request_dump_20250901_1200{k:02d}_dead{k:02x}_20250901_120000_000001.json",
                60_000,
                ts,
            )
        )
    spec.files.append(("state.db.malformed-backup-20260101-000000", 2_000_000, spec.now - 90 * DAY))
    spec.files.append(("cron/output/job0/latest.md", 4_000, spec.now - DAY))
    spec.files.append(("logs/agent.log", 250_000, spec.now))


def _stamp(ts: float, fmt: str = "%Y%m%d-%H%M%S") -> str:
    return time.strftime(fmt, time.gmtime(ts))


#: Ages in days of each cron job's output files, and how many state snapshots there are.
CRON_OUTPUT_AGES, STATE_SNAPSHOTS = (1, 5, 20, 40, 60, 90), 22


def _add_folders(spec: DemoSpec) -> None:
    """Small copies of what grows beside state.db (issue 15): per-run cron output, state snapshots,
    a second malformed-db copy, the keeper's pre-restore copies and a killed restore's temp file,
    and a ``checkpoints/`` store."""
    now = spec.now
    for job in ("job0", "job1", "job2"):
        for age in CRON_OUTPUT_AGES:
            ts = now - age * DAY
            spec.files.append((f"cron/output/{job}/{_stamp(ts, '%Y-%m-%d_%H-%M-%S')}.md", 3_000, ts))
    for k in range(STATE_SNAPSHOTS):
        ts = now - (k + 1) * 3 * DAY
        spec.files.append((f"state-snapshots/{_stamp(ts)}/state.db", 8_000, ts))
        spec.files.append((f"state-snapshots/{_stamp(ts)}/config.yaml", 300, ts))
    spec.files.append(("state.db.malformed-backup-20260101-000000-wal", 100_000, now - 90 * DAY))
    spec.files.append(
        (f"state.db.malformed-backup-{_stamp(now - 3 * DAY, '%Y%m%d_%H%M%S')}", 2_000_000, now - 3 * DAY)
    )
    for age in (60, 2):
        name = f"state.db.keeper-before-restore-{_stamp(now - age * DAY, '%Y%m%dT%H%M%SZ')}"
        spec.files += [(name, 1_500_000, now - age * DAY), (f"{name}-wal", 0, now - age * DAY)]
    spec.files.append((".state.db.keeper-restore.tmp", 1_000_000, now - 10 * DAY))
    spec.files += [("checkpoints/store/HEAD", 40, now), ("checkpoints/store/objects/pack.pack", 60_000, now)]


def hermes_schema_sql() -> str:
    return files("hermes_keeper").joinpath("data/hermes_schema.sql").read_text(encoding="utf-8")


def insert_sessions(conn: sqlite3.Connection, sessions: list[dict]) -> None:
    """Spec sessions and their messages as Hermes stores them (the caller holds the transaction)."""
    for s in sessions:
        kw = s.get("kwargs", {})
        msgs = s.get("messages", [])
        conn.execute(
            "INSERT INTO sessions (id, source, user_id, session_key, chat_id, chat_type, model, model_config,"
            " parent_session_id, started_at, ended_at, end_reason, message_count, tool_call_count, title)"
            " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (
                s["id"],
                s["source"],
                kw.get("user_id"),
                kw.get("session_key"),
                kw.get("chat_id"),
                kw.get("chat_type"),
                "demo-model",
                json.dumps(kw["model_config"]) if kw.get("model_config") else None,
                kw.get("parent_session_id"),
                s["started_at"],
                s.get("ended_at"),
                s.get("end_reason"),
                len(msgs),
                sum(1 for m in msgs if m[0] == "tool"),
                s.get("title"),
            ),
        )
        conn.executemany(
            "INSERT INTO messages (session_id, role, content, timestamp) VALUES (?,?,?,?)",
            [(s["id"], role, content, ts) for role, content, ts in msgs],
        )


def build_home(home: Path, spec: DemoSpec) -> Path:
    """Write ``spec`` as a Hermes home at ``home`` (which must not hold a state.db yet)."""
    home.mkdir(parents=True, exist_ok=True)
    db_path = home / "state.db"
    if db_path.exists():
        raise FileExistsError(db_path)
    conn = connect_file(db_path)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=OFF")
    conn.executescript(hermes_schema_sql())
    conn.execute("BEGIN")
    insert_sessions(conn, spec.sessions)
    for key, sid in spec.routed.items():
        conn.execute(
            "INSERT INTO gateway_routing (scope, session_key, entry_json, updated_at) VALUES ('', ?, ?, ?)",
            (key, json.dumps({"session_key": key, "session_id": sid}), spec.now),
        )
    conn.execute("COMMIT")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    write_files(home, spec)
    return db_path


def write_files(home: Path, spec: DemoSpec) -> None:
    """The non-database part of the home: transcripts, dumps, logs, ``sessions.json``."""
    for rel, size, mtime in spec.files:
        path = home / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"{}" + b" " * max(0, size - 2))
        os.utime(path, (mtime, mtime))
    sessions_dir = home / "sessions"
    sessions_dir.mkdir(exist_ok=True)
    mirror = {key: {"session_key": key, "session_id": sid} for key, sid in spec.routed.items()}
    (sessions_dir / "sessions.json").write_text(json.dumps(mirror, indent=2), encoding="utf-8")
