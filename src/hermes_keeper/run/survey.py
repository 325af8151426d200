"""A read-only survey of one profile: every session with what decides its fate, and its files.

The survey records facts only (timestamps, links, flags read from whatever tables and
columns exist); policy and plan decide. One read transaction gives one consistent
snapshot, so a live gateway can keep writing while we read. Not in a rollback-journal
database (DELETE mode), where a reader blocks every commit until it ends: there the
message statistics, the one long read, are taken in short steps (the run checks again,
session by session, before it changes anything).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sqlite3
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path

from hermes_keeper.errors import KeeperError
from hermes_keeper.facts import Check, checked_unless_it_stalls
from hermes_keeper.fs import HomeFS
from hermes_keeper.hermes_config import AutoPrune, read_auto_prune
from hermes_keeper.kept import KeptUnreadable, read_kept
from hermes_keeper.model.conversations import lineage_root, model_config_links, seconds
from hermes_keeper.model.gateway import (
    PEER_COLUMNS,
    Peer,
    fences,
    peer_of,
    recovery_candidate,
)
from hermes_keeper.model.policy import MESSAGING_SOURCES
from hermes_keeper.place import Place
from hermes_keeper.run.files import Folders, scan_folders
from hermes_keeper.run.message_stats import (
    Stats,
    StatsCache,
    add_counts,
    message_stats,
    message_stats_in_steps,
    recent_since,
)
from hermes_keeper.run.routing import launch_home_routes
from hermes_keeper.sqlite.connect import connect_ro, read_txn
from hermes_keeper.sqlite.holders import (
    Holder,
    find_holders,
    lease_holder_dead,
    process_gone,
)
from hermes_keeper.sqlite.schema import SchemaInfo, inspect, timestamp_problems

#: handoff states that mean a transfer is in flight.
LIVE_HANDOFF_STATES = frozenset({"pending", "running"})


#: What the database's schema lets the keeper protect: (protection, table, column or None).
SCHEMA_PROTECTIONS = (
    ("gateway routing", "gateway_routing", "entry_json"),
    ("gateway-recoverable rows", "sessions", "session_key"),
    ("gateway-recoverable by chat identity", "sessions", "chat_id"),
    ("live compression locks", "compression_locks", "expires_at"),
    ("live turn leases", "session_turn_leases", "expires_at"),
    ("gateway heartbeats (zombie closing)", "gateway_heartbeats", "last_heartbeat"),
    ("pinned sessions and chains", "sessions", "pinned"),
    ("handoffs in flight", "sessions", "handoff_state"),
    ("telegram topic bindings", "telegram_dm_topic_bindings", "session_id"),
    ("pending delegations", "async_delegations", "delivery_state"),
    ("live /loop and /heartbeat schedules", "state_meta", "value"),
    ("activity column for ages", "sessions", "last_activity_at"),
    ("conversation generations, never deleted", "conversation_generations", None),
)


def schema_protections(schema: SchemaInfo) -> list[str]:
    """The protections this schema generation has the tables and columns for."""
    return [name for name, table, column in SCHEMA_PROTECTIONS if schema.has(table, column)]


@dataclass(frozen=True)
class SessionRow:
    """One ``sessions`` row plus aggregates of its messages."""

    id: str
    source: str
    started_at: float
    ended_at: float | None = None
    end_reason: str | None = None
    parent_id: str | None = None
    title: str | None = None
    archived: bool = False
    pinned: bool = False
    hidden: bool = False  # hidden from Hermes's listing, still resumable: no effect on retention
    auto_archived: bool = False  # soft-archived by Hermes's idle sweep: still a session to keep or prune
    session_key: str | None = None
    delegate_from: str | None = None
    branched_from: str | None = None
    reset_from: str | None = None
    messages: int = 0
    inactive_messages: int = 0
    content_bytes: int = 0
    #: messages and their text bytes in each of the last :data:`RECENT_DAYS` (the report's growth)
    recent_messages: tuple[int, ...] = ()
    recent_bytes: tuple[int, ...] = ()
    first_message_at: float | None = None
    first_message_id: int | None = None  # where its rows sit in the messages b-tree
    last_message_at: float | None = None
    last_activity_at: float | None = None  # the column, where Hermes has it
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    # Facts that make a session untouchable regardless of age (see plan.protections).
    routed: bool = False
    lease_expires_at: float | None = None  # compression lock
    lease_holder_dead: bool = False
    turn_lease_expires_at: float | None = None  # session_turn_leases, keyed by the lineage root
    turn_lease_holder_dead: bool = False
    runtime_lease: bool = False  # runtime/active_sessions.json names it and its process runs
    restored_until: float | None = None  # keeper/kept.json: `archive restore` brought it back
    handoff_state: str | None = None
    topic_bound: bool = False
    pending_delegation: bool = False
    live_schedule: bool = False  # an active /loop or /heartbeat in state_meta
    maybe_routed: bool = False  # sessions.json unreadable and the gateway could route to it
    # What the gateway's stale-route recovery reads (model/gateway.py).
    message_count: int = 0  # Hermes's own column: recovery counts a row with it as one with messages
    peer: Peer | None = None  # its chat identity, where the database has the columns
    profile_name: str | None = None
    fenced_by_key: bool = False  # a later reset of the same key passes it over (schema 31+)
    fenced_by_chat: bool = False  # likewise for its chat

    @property
    def is_open(self) -> bool:
        return self.ended_at is None

    @property
    def odd_id(self) -> bool:
        """The id holds bytes that are not UTF-8 (see :func:`lossless_text`): never touched."""
        return shown(self.id) != self.id

    @property
    def nul_id(self) -> bool:
        """The id holds a NUL: SQLite's JSON and C-string paths, Hermes's file names and terminals
        cut it short, so no change could be sure to address exactly this row: never touched."""
        return "\x00" in self.id

    @cached_property  # read a hundred thousand times by a report on 20,000 sessions
    def last_activity(self) -> float:
        """Latest sign of life: a message, the activity column, the end, else the start."""
        stamps = [self.started_at, self.last_message_at, self.last_activity_at, self.ended_at]
        return max(s for s in stamps if s is not None)

    @property
    def gateway_recoverable(self) -> bool:
        """A row the gateway's stale-route recovery could resume (model/gateway.py): open, ended by
        an accident, or owned by a completed handoff; and found by its ``session_key``, or (with
        messages) by its chat's identity with no key at all; and not fenced by a later reset."""
        if not recovery_candidate(self.ended_at, self.end_reason, self.handoff_state):
            return False
        by_key = bool(self.session_key) and not self.fenced_by_key
        has_messages = self.messages > 0 or self.message_count > 0
        by_chat = self.peer is not None and self.peer.findable and has_messages and not self.fenced_by_chat
        return by_key or by_chat


@dataclass(frozen=True)
class SessionFile:
    """A file under ``sessions/`` and the session it belongs to, if any."""

    path: Path
    kind: str  # transcript | snapshot | request_dump | saved | routing | other
    size: int
    mtime: float
    session_id: str | None = None  # the existing session it matched
    symlink: bool = False

    @property
    def orphan(self) -> bool:
        return self.kind in ("transcript", "snapshot", "request_dump") and self.session_id is None


@dataclass
class Survey:
    profile: Place
    schema: SchemaInfo
    taken_at: float
    sessions: dict[str, SessionRow] = field(default_factory=dict)
    files: list[SessionFile] = field(default_factory=list)
    routing_problem: str | None = None  # sessions/sessions.json exists but cannot be read
    message_total: int = 0
    #: ``messages.timestamp`` values that are text, milliseconds, before 1973, over all sessions
    odd_message_stamps: tuple[int, int, int] = (0, 0, 0)
    #: (started_at, last_heartbeat) of every ``gateway_heartbeats`` row
    heartbeats: list[tuple[float, float]] = field(default_factory=list)
    #: protections whose table or file exists but could not be read: nothing is changed
    unreadable: list[str] = field(default_factory=list)
    #: Hermes's own startup auto-prune on this profile (config.yaml + state_meta)
    auto_prune: AutoPrune | None = None
    holders: list[Holder] = field(default_factory=list)  # processes with state.db open (Hermes)
    #: the growing folders beyond sessions/ (:mod:`files`)
    folders: Folders = field(default_factory=lambda: Folders([]))


def safe_filename_component(session_id: str) -> str:
    """Hermes's ``_safe_session_filename_component`` (run_agent.py), byte for byte."""
    raw = str(session_id or "").strip()
    sanitized = re.sub(r"[^\w-]", "_", raw).strip("._")
    sanitized = sanitized[:96] or "session"
    if raw and sanitized == raw:
        return sanitized
    digest = hashlib.sha256(raw.encode("utf-8", errors="surrogatepass")).hexdigest()[:12]
    return f"{sanitized}_{digest}"


_DUMP = re.compile(r"^request_dump_(?P<sid>.+)_(?P<ts>\d{8}_\d{6}(?:_\d+)?)\.json$")


def lossless_text(data: bytes) -> str:
    """Decode TEXT that may not be UTF-8 (another writer, a damaged row) without losing a byte.

    Bytes that are not UTF-8 become lone surrogates (``surrogateescape``): such a session id
    still matches itself, and :attr:`SessionRow.odd_id` keeps the session out of every change.
    """
    return data.decode("utf-8", "surrogateescape")


def shown(text: str | None) -> str | None:
    """``text`` safe to print: bytes that were not UTF-8 shown as U+FFFD."""
    if text is None or text.isascii():
        return text
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def _routed_from_db(conn: sqlite3.Connection, schema: SchemaInfo) -> set[str]:
    ids: set[str] = set()
    if not schema.has("gateway_routing", "entry_json"):
        return ids
    for (raw,) in conn.execute("SELECT entry_json FROM gateway_routing"):
        ids |= _session_ids_in(raw)
    return ids


def _session_ids_in(raw: str | None) -> set[str]:
    try:
        entry = json.loads(raw) if isinstance(raw, str) else raw
    except ValueError:
        return set()
    if isinstance(entry, dict) and isinstance(entry.get("session_id"), str):
        return {entry["session_id"]}
    return set()


class RoutingUnknown(Exception):
    """``sessions.json`` is there but unreadable: which sessions it routes to is unknown."""


def routed_from_sessions_json(sessions_dir: Path) -> set[str]:
    """Session ids the gateway's ``sessions.json`` mirror routes to (no file: none).

    A file that cannot be read or is not the mirror's shape raises :class:`RoutingUnknown`:
    reading it as "routes nothing" would let a routed session be closed or pruned.
    """
    path = sessions_dir / "sessions.json"
    try:
        raw = HomeFS(sessions_dir).read_hermes("sessions.json")  # never blocks on a FIFO
        if raw is None:
            return set()
        data = json.loads(raw)
    except KeeperError as exc:
        raise RoutingUnknown(str(exc)) from None
    except (OSError, ValueError) as exc:
        raise RoutingUnknown(f"{path} unreadable ({type(exc).__name__})") from None
    if not isinstance(data, dict):
        raise RoutingUnknown(f"{path} is not a JSON object")
    ids: set[str] = set()
    for key, entry in data.items():
        if not key.startswith("_"):
            ids |= _session_ids_in(entry)
    return ids


def _select_sessions(conn: sqlite3.Connection, schema: SchemaInfo) -> list[dict]:
    cols = schema.tables["sessions"]

    def col(name: str, default: str = "NULL") -> str:
        return name if name in cols else f"{default} AS {name}"

    cost = (
        "coalesce(actual_cost_usd, estimated_cost_usd, 0)"
        if "actual_cost_usd" in cols and "estimated_cost_usd" in cols
        else "0"
    )
    sql = f"""
        SELECT id, source, started_at, ended_at, end_reason, parent_session_id, title,
               {col("archived", "0")}, {col("pinned", "0")}, {col("hidden", "0")},
               {col("auto_archived", "0")}, {col("session_key")},
               {col("model_config")}, {col("last_activity_at")},
               {col("input_tokens", "0")}, {col("output_tokens", "0")}, {cost} AS cost_usd,
               {col("handoff_state")}, {col("message_count")}, {col("profile_name")},
               {", ".join(col(c) for c in PEER_COLUMNS)}
        FROM sessions
    """
    cur = conn.execute(sql)
    names = [d[0] for d in cur.description]
    return [dict(zip(names, r, strict=True)) for r in cur]  # a third of sqlite3.Row's dict(r)


def _ids(
    conn: sqlite3.Connection, schema: SchemaInfo, table: str, column: str, where: str = "", params: tuple = ()
) -> set[str]:
    if not schema.has(table, column):
        return set()
    return {r[0] for r in conn.execute(f"SELECT {column} FROM {table} {where}", params) if r[0]}


def _guard_rows(
    conn: sqlite3.Connection, schema: SchemaInfo, table: str, columns: tuple[str, ...], unreadable: list[str]
) -> list[tuple]:
    """Rows of a protection table; a table that exists but lacks ``columns`` or fails to read is
    recorded in ``unreadable`` (the plan then changes nothing: when unsure, keep)."""
    if not schema.has(table):
        return []
    if not all(schema.has(table, c) for c in columns):
        unreadable.append(f"{table} (unexpected columns)")
        return []
    try:
        return conn.execute(f"SELECT {', '.join(columns)} FROM {table}").fetchall()
    except sqlite3.DatabaseError as exc:
        unreadable.append(f"{table} ({exc})")
        return []


def runtime_leases(home: Path) -> set[str] | None:
    """Session ids ``runtime/active_sessions.json`` leases to a process that still runs
    (upstream's open chat surfaces, idle CLI/TUI included); ``None`` when the file exists but
    cannot be read. Only a pid proven gone releases an entry."""
    try:
        raw = HomeFS(home).read_hermes("runtime", "active_sessions.json")  # never blocks on a FIFO
        if raw is None:
            return set()
        data = json.loads(raw.decode("utf-8-sig"))
    except (OSError, ValueError, KeeperError):
        return None
    entries = data.get("entries") if isinstance(data, dict) else data
    if not isinstance(entries, list):
        return None
    ids: set[str] = set()
    for e in entries:
        if not isinstance(e, dict) or process_gone(e.get("pid")):
            continue
        meta = e.get("metadata") if isinstance(e.get("metadata"), dict) else {}
        ids |= {str(v) for v in (e.get("session_id"), meta.get("live_session_id")) if v}
    return ids


def scan_files(fs: HomeFS, known_ids: set[str]) -> list[SessionFile]:
    """Classify every file under the home's ``sessions/`` (symlinks reported, never followed).

    A ``sessions/`` that is itself a symlink (moved to another disk) is listed, but every
    file in it counts as reached through a link: reported and kept, never removed.
    """
    sessions_dir = fs.path("sessions")
    if not sessions_dir.is_dir():
        return []
    through_link = not fs.plain_dir("sessions")
    by_safe = {safe_filename_component(sid): sid for sid in known_ids}
    out = []
    # one lstat a file (scandir's), not three: 20,000 transcripts are 60,000 stat calls otherwise
    with os.scandir(sessions_dir) as it:
        listing = sorted((e.name, e.stat(follow_symlinks=False)) for e in it)
    for name, st in listing:
        entry = sessions_dir / name
        link = through_link or stat.S_ISLNK(st.st_mode)
        is_dir = stat.S_ISDIR(st.st_mode)  # lstat's: only ever asked of what is not a link
        if name == "saved" and is_dir and not link:
            for sub in sorted(p for p in entry.rglob("*") if p.is_file() or p.is_symlink()):
                sst = sub.lstat()
                out.append(SessionFile(sub, "saved", sst.st_size, sst.st_mtime, symlink=sub.is_symlink()))
            continue
        if is_dir and not link:
            size = sum(p.lstat().st_size for p in entry.rglob("*") if p.is_file())
            out.append(SessionFile(entry, "other", size, st.st_mtime))
            continue
        kind, sid = "other", None
        if name == "sessions.json":
            kind = "routing"
        elif (m := _DUMP.match(name)) is not None:
            claimed = m.group("sid")  # the id, or the sanitised id, its name carries
            kind, sid = "request_dump", by_safe.get(claimed) or (claimed if claimed in known_ids else None)
        elif name.startswith("session_") and name.endswith(".json") and name[8:-5] in by_safe:
            kind, sid = "snapshot", by_safe[name[8:-5]]
        elif name.endswith((".json", ".jsonl")):
            stem = name.rsplit(".", 1)[0]
            if stem in known_ids:
                kind, sid = "transcript", stem
            else:
                kind = "snapshot" if name.startswith("session_") and name.endswith(".json") else "transcript"
        out.append(SessionFile(entry, kind, st.st_size, st.st_mtime, sid, link))
    return out


def survey_profile(
    profile: Place,
    schema: SchemaInfo | None = None,
    now: float | None = None,
    holders: list[Holder] | None = None,
    db_check: Callable[[], Check | None] | None = None,
    check_budget_s: float | None = None,
    cached: bool = False,
) -> Survey:
    """Read everything the plan and the report need, in one snapshot; changes nothing.

    ``holders``: a run's own scan of the processes holding state.db, so it is not made twice.
    ``db_check``: state.db's quick_check where Hermes's malformed copies need it (a caller that
    has one passes it; default: a full one now, unless that would stall a holder), and
    ``check_budget_s`` how long the copies' own checks may read (None: in full); see
    :func:`files.scan_folders`. ``cached``: message statistics through ``keeper/stats.db``
    (:class:`StatsCache`, only read what changed; for the report and the ``plan`` preview);
    without it they are read fresh (a run's plan deletes on them).
    """
    survey = survey_database(profile, schema, now, cached)
    _scan_beside_db(survey, holders, db_check, check_budget_s)
    return survey


def stamp_problems(survey: Survey) -> list[str]:
    """The timestamp columns holding anything but unix seconds, ``messages``' from the survey's
    statistics (no scan of the biggest table: 1.8 s at 5 GB), as the report has them."""
    conn = connect_ro(survey.profile.db_path)
    try:
        with read_txn(conn):
            return timestamp_problems(conn, survey.schema.tables, survey.odd_message_stamps)
    finally:
        conn.close()


def survey_database(
    profile: Place, schema: SchemaInfo | None = None, now: float | None = None, cached: bool = False
) -> Survey:
    """The survey's sessions with their statistics and protections, without the files under
    ``sessions/``, the holders and the other folders: what ``check`` measures, every minute."""
    schema = schema or inspect(profile.db_path)
    schema.require_readable()
    survey = Survey(profile, schema, time.time() if now is None else now)
    rows, stats, around = _read_db(survey, cached)
    _read_beside_db(survey, around)
    for r in rows:
        _add_session(survey, r, stats.get(r["id"], Stats()), around)
    _add_turn_leases(survey, around.turns)
    _add_recovery_fences(survey)
    return survey


@dataclass
class _Around:
    """What protects a session besides its own row: the protection tables, read in the survey's
    transaction, and the files beside state.db (read after it)."""

    routed: set[str]  # gateway_routing, then sessions/sessions.json
    locks: dict[str, tuple]  # compression_locks: session -> (holder, expires_at)
    turns: dict[str, tuple]  # session_turn_leases: lineage root -> (holder, expires_at)
    topic: set[str]  # telegram_dm_topic_bindings
    pending: set[str]  # async_delegations not yet delivered
    last_auto_prune: float | None  # state_meta
    leased: set[str] | None = None  # runtime/active_sessions.json; None: unreadable
    kept: dict[str, float] = field(default_factory=dict)  # keeper/kept.json
    scheduled: set[str] = field(default_factory=set)  # state_meta: a live /loop or /heartbeat


def _read_db(survey: Survey, cached: bool) -> tuple[list[dict], dict[str, Stats], _Around]:
    """The sessions, their message statistics and the protection tables in one read transaction;
    in a rollback-journal database the statistics after it, in short steps: a reader there holds
    every commit of Hermes's while it reads."""
    profile, schema = survey.profile, survey.schema
    conn = connect_ro(profile.db_path)
    conn.text_factory = lossless_text
    try:
        stepped = schema.journal_mode != "wal"
        with read_txn(conn):
            rows = _select_sessions(conn, schema)
            stats = {} if stepped else _read_stats(survey, conn, rows, cached, stepped)
            around = _read_protections(conn, survey)
        if stepped:
            stats = _read_stats(survey, conn, rows, cached, stepped)
    finally:
        conn.close()
    return rows, stats, around


def _read_stats(
    survey: Survey, conn: sqlite3.Connection, rows: list[dict], cached: bool, stepped: bool
) -> dict[str, Stats]:
    """Each session's message statistics: through ``keeper/stats.db`` when ``cached`` (the
    report), else read fresh (the plan deletes on them)."""
    profile, schema, taken_at = survey.profile, survey.schema, survey.taken_at
    if cached:
        counts = {r["id"]: r["message_count"] for r in rows}
        return StatsCache(profile.fs, profile.db_path).stats(conn, schema, counts, taken_at, stepped)
    read = message_stats_in_steps if stepped else message_stats
    return read(conn, schema, recent_since(taken_at))


def _read_protections(conn: sqlite3.Connection, survey: Survey) -> _Around:
    """The tables that protect sessions (and the gateway's heartbeats, into ``survey``); a table
    that exists but cannot be read goes to ``survey.unreadable``: the plan then changes nothing."""
    schema, unreadable = survey.schema, survey.unreadable
    routed = _routed_from_db(conn, schema)
    guard = ("holder", "expires_at")
    locks = {
        r[0]: r[1:]
        for r in _guard_rows(conn, schema, "compression_locks", ("session_id", *guard), unreadable)
    }
    turns = {
        r[0]: r[1:]
        for r in _guard_rows(conn, schema, "session_turn_leases", ("conversation_id", *guard), unreadable)
    }
    last_auto_prune = None
    if schema.has("state_meta", "value"):
        row = conn.execute("SELECT value FROM state_meta WHERE key = 'last_auto_prune'").fetchone()
        last_auto_prune = seconds(row[0]) if row else None
    survey.heartbeats = [
        (seconds(a) or 0.0, seconds(b) or 0.0)
        for a, b in _guard_rows(
            conn, schema, "gateway_heartbeats", ("started_at", "last_heartbeat"), unreadable
        )
    ]
    topic = _ids(conn, schema, "telegram_dm_topic_bindings", "session_id")
    pending = set()
    if schema.has("async_delegations", "delivery_state"):
        for col in ("origin_session", "origin_session_id", "parent_session_id"):
            pending |= _ids(
                conn,
                schema,
                "async_delegations",
                col,
                "WHERE delivery_state NOT IN ('delivered', 'failed', 'expired')",
            )
    around = _Around(routed, locks, turns, topic, pending, last_auto_prune)
    around.scheduled = _live_schedules(conn, schema)
    return around


#: The ``state_meta`` prefixes of a session's wakeup schedules (hermes_cli/loops.py, heartbeat.py).
SCHEDULE_PREFIXES = ("loop:", "heartbeat:")


def schedule_is_live(raw) -> bool:
    """A ``loop:``/``heartbeat:`` value that still fires: status ``active``, or one that cannot be
    read (unknown: Hermes's own ``store_has_active_*`` count it too). An empty value is a
    schedule Hermes stopped (a gateway reset blanks it)."""
    if not raw:
        return False
    try:
        state = json.loads(raw)
    except (TypeError, ValueError):
        return True
    return not isinstance(state, dict) or state.get("status", "active") == "active"


def _live_schedules(conn: sqlite3.Connection, schema: SchemaInfo) -> set[str]:
    """Sessions whose ``/loop`` or ``/heartbeat`` is live: Hermes's idle reaper never closes the
    session that drives one (``_session_owns_live_wakeup_schedule``), and deleting it stops it."""
    if not schema.has("state_meta", "value"):
        return set()
    out = set()
    where = " OR ".join(f"substr(key, 1, {len(p)}) = '{p}'" for p in SCHEDULE_PREFIXES)
    for key, value in conn.execute(f"SELECT key, value FROM state_meta WHERE {where}"):
        if isinstance(key, str) and schedule_is_live(value):
            out.add(key.split(":", 1)[1])
    return out


def _read_beside_db(survey: Survey, around: _Around) -> None:
    """The files beside state.db that protect sessions or say what Hermes will do: the gateway's
    routing mirror and a multiplexed gateway's routes for this profile in its launch home (:mod:`routing`),
    Hermes's auto-prune settings, runtime leases, the keeper's restored sessions."""
    profile = survey.profile
    problems = []
    try:
        around.routed |= routed_from_sessions_json(profile.sessions_dir)
    except RoutingUnknown as exc:
        problems.append(str(exc))
    routed, unknown = launch_home_routes(profile)  # a multiplexed gateway's routes for this profile
    around.routed |= routed
    survey.routing_problem = "; ".join(problems + unknown) or None
    survey.auto_prune = read_auto_prune(profile.home, survey.schema.schema_version, around.last_auto_prune)
    around.leased = runtime_leases(profile.home)
    if around.leased is None:
        survey.unreadable.append("runtime/active_sessions.json")
    try:
        around.kept = read_kept(profile)
    except KeptUnreadable as exc:
        survey.unreadable.append(str(exc))


def _add_session(survey: Survey, r: dict, msgs: Stats, around: _Around) -> None:
    """One ``sessions`` row with its message statistics and every protection found for it."""
    sid = r["id"]
    lock_holder, lock_expires = around.locks.get(sid, (None, None))
    delegate, branch, reset = model_config_links(r.get("model_config"))
    recent_messages, recent_bytes = msgs.windows(survey.taken_at)
    survey.message_total += msgs.messages
    if any(msgs.odd_stamps):
        survey.odd_message_stamps = add_counts(survey.odd_message_stamps, msgs.odd_stamps)
    survey.sessions[sid] = SessionRow(
        id=sid,
        source=shown(r["source"]) or "unknown",
        started_at=seconds(r["started_at"]) or 0.0,
        ended_at=seconds(r["ended_at"]),
        end_reason=shown(r["end_reason"]),
        parent_id=r["parent_session_id"],
        title=shown(r["title"]),
        archived=bool(r["archived"]),
        pinned=bool(r["pinned"]),
        hidden=bool(r["hidden"]),
        auto_archived=bool(r["auto_archived"]),
        session_key=r["session_key"],
        delegate_from=delegate,
        branched_from=branch,
        reset_from=reset,
        messages=msgs.messages,
        inactive_messages=msgs.inactive,
        content_bytes=msgs.bytes,
        recent_messages=recent_messages,
        recent_bytes=recent_bytes,
        first_message_at=seconds(msgs.first_at),
        first_message_id=msgs.first_id,
        last_message_at=seconds(msgs.last_at),
        last_activity_at=seconds(r["last_activity_at"]),
        input_tokens=r["input_tokens"] or 0,
        output_tokens=r["output_tokens"] or 0,
        cost_usd=float(r["cost_usd"] or 0),
        routed=sid in around.routed,
        lease_expires_at=seconds(lock_expires),
        lease_holder_dead=lock_expires is not None and lease_holder_dead(lock_holder),
        runtime_lease=sid in (around.leased or ()),
        restored_until=around.kept.get(sid),
        handoff_state=r["handoff_state"],
        topic_bound=sid in around.topic,
        pending_delegation=sid in around.pending,
        live_schedule=sid in around.scheduled,
        maybe_routed=survey.routing_problem is not None
        and (bool(r["session_key"]) or shown(r["source"]) in MESSAGING_SOURCES),
        message_count=r["message_count"] if isinstance(r["message_count"], int) else 0,
        peer=peer_of(r, r["source"]) if survey.schema.has("sessions", "chat_id") else None,
        profile_name=r["profile_name"],
    )


def _add_recovery_fences(survey: Survey) -> None:
    """Rows a later reset boundary of the same key or chat passes over (model/gateway.py)."""
    for sid, fence in fences(survey.sessions.values(), survey.schema.schema_version).items():
        survey.sessions[sid] = replace(
            survey.sessions[sid], fenced_by_key=fence.by_key, fenced_by_chat=fence.by_chat
        )


def _add_turn_leases(survey: Survey, turns: dict[str, tuple]) -> None:
    """A turn lease is keyed by the lineage's root: every session of that lineage holds it."""
    for sid, row in survey.sessions.items():
        turn_holder, turn_expires = turns.get(lineage_root(sid, survey.sessions), (None, None))
        if turn_expires is not None:
            survey.sessions[sid] = replace(
                row,
                turn_lease_expires_at=seconds(turn_expires),
                turn_lease_holder_dead=lease_holder_dead(turn_holder),
            )


def _scan_beside_db(
    survey: Survey,
    holders: list[Holder] | None,
    db_check: Callable[[], Check | None] | None,
    check_budget_s: float | None,
) -> None:
    """The files under ``sessions/``, the processes holding state.db, the growing folders."""
    profile = survey.profile
    survey.files = scan_files(profile.fs, set(survey.sessions))
    survey.holders = find_holders(profile.db_path) if holders is None else holders
    if db_check is None:

        def db_check() -> Check | None:
            return checked_unless_it_stalls(
                profile.fs, profile.db_path, survey.schema.journal_mode, survey.holders
            )

    survey.folders = scan_folders(profile.fs, db_check, check_budget_s)
