"""Transcripts that may be the only copy: ``sessions/<sid>.jsonl`` as Hermes diverts it.

When state.db is replaced (or quarantined) under a live process, today's Hermes appends the
messages it could not write to ``sessions/<sid>.jsonl`` (``hermes_state.divert_session_transcript_jsonl``,
the raw session id in the name): the gateway's queued message dicts as it held them
(``gateway/session_transcript.py``), or the agent's flush rows (``agent/session_persistence.py``),
one JSON object per line. Nothing in Hermes reads them back. Hermes 0.13's gateway wrote the same
file as a mirror of every message it also stored (``gateway/session.py``, timestamps as ISO text);
0.19 no longer does. Both are the ``transcript`` kind the survey finds.

The plan removes a transcript with its pruned session, or as an orphan past ``files.max_age``.
:func:`hold_only_copies` reads each ``.jsonl`` the plan removes (no other file is read: a big home
is not read whole) and keeps it, with its reason, unless every message in it is a row of that
session in state.db or in the keeper's archive.

The matching rule, from how Hermes writes a row (``hermes_state_messages``): a line is a message
when it is a JSON object with a ``role`` or a ``content`` (blank lines and ``{}`` hold none). It
matches a ``messages`` row of the same session with the same ``role`` (``"unknown"`` when absent,
as Hermes writes it) and the same ``content`` as Hermes stores it (``_encode_content``: text as is,
a list or dict as ``"\\x00json:" + json.dumps``), and, where the line's ``timestamp`` is a number
Hermes would store as given (``_coerce_timestamp``), the same ``timestamp``; other timestamps
(0.13's ISO text, none) are not compared, as Hermes stamped such rows itself. Each row, in
state.db or in one archived copy of the session, vouches for one line only. Tool calls and the
other columns are not compared: a diverted message with the role, text and time of a stored one is
that message.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import sqlite3
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path

import orjson

from hermes_keeper import units
from hermes_keeper.archive.store import Archive, archive_exists
from hermes_keeper.errors import KeeperError
from hermes_keeper.fs import HomeFS
from hermes_keeper.place import Place
from hermes_keeper.run import reasons as why
from hermes_keeper.run.files import FileAction, NotInStateDb
from hermes_keeper.run.plan import Plan
from hermes_keeper.run.survey import lossless_text
from hermes_keeper.sqlite.connect import connect_ro

#: A transcript larger than this is kept unread (said in its reason): a legacy mirror of a long
#: chat stays until someone looks, rather than a run reading without bound.
READ_CAP = 32 * 1024 * 1024
#: Hermes's ``SessionDB._CONTENT_JSON_PREFIX``: list/dict content is stored as this + its JSON.
CONTENT_JSON_PREFIX = "\x00json:"


def stored_content(content):
    """``content`` as Hermes's ``_encode_content`` stores it and SQLite (a TEXT column) gives it back."""
    if content is None:
        return None
    if isinstance(content, str) and not content.startswith(CONTENT_JSON_PREFIX):
        return content
    if isinstance(content, (int, float)) and not isinstance(content, bool):
        return str(content)  # TEXT affinity turns the number into its text
    if isinstance(content, bool):
        return str(int(content))
    return CONTENT_JSON_PREFIX + json.dumps(content)  # a reserved-prefix string is wrapped the same way


def stored_stamp(value) -> float | None:
    """A ``timestamp`` Hermes stores as given (a number, or text of one); None for any other."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return None
    try:
        ts = float(value)
    except ValueError:
        return None
    return ts + 0.0 if math.isfinite(ts) else None  # -0.0 reads back as 0.0


def _key(*parts) -> bytes:
    return hashlib.blake2b(repr(parts).encode("utf-8", "surrogatepass"), digest_size=16).digest()


@dataclass
class Lines:
    """A transcript's messages as keys: (with its timestamp, without) for a line that has one that
    counts, else without only; ``problem`` says why it was not read whole (kept unread)."""

    stamped: list[tuple[bytes, bytes]] = field(default_factory=list)
    loose: list[bytes] = field(default_factory=list)
    size: int = 0
    problem: str = ""

    @property
    def messages(self) -> int:
        return len(self.stamped) + len(self.loose)


def parse_lines(data: bytes) -> Lines:
    """The messages of a transcript's bytes (never logged: only their keys are kept)."""
    out = Lines(size=len(data))
    for n, raw in enumerate(data.split(b"\n"), 1):
        if not raw.strip():
            continue
        try:
            record = json.loads(raw)
        except ValueError:  # also a line Hermes is still writing
            out.problem = f"line {n} is not JSON"
            return out
        if not isinstance(record, dict):
            out.problem = f"line {n} is not a JSON object"
            return out
        if "role" not in record and "content" not in record:
            continue  # holds no message
        role, content = record.get("role", "unknown"), stored_content(record.get("content"))
        loose = _key(role, content)
        ts = stored_stamp(record.get("timestamp"))
        if ts is None:
            out.loose.append(loose)
        else:
            out.stamped.append((_key(role, content, ts), loose))
    return out


class Rows:
    """A session's message rows as the keys :func:`parse_lines` makes, counted."""

    def __init__(self) -> None:
        self.full: Counter = Counter()
        self.loose: Counter = Counter()

    def add(self, role, content, timestamp) -> None:
        self.loose[_key(role, content)] += 1
        if isinstance(timestamp, (int, float)) and not isinstance(timestamp, bool):
            self.full[_key(role, content, timestamp + 0.0)] += 1

    def merge(self, other: Rows) -> Rows:
        """The rows either holds, each as often as the one that holds it more often."""
        out = Rows()
        out.full, out.loose = self.full | other.full, self.loose | other.loose
        return out

    def missing(self, lines: Lines) -> int:
        """How many of ``lines`` no row vouches for (each row for one line)."""
        full, loose = Counter(self.full), Counter(self.loose)
        miss = 0
        for key, loose_key in lines.stamped:  # first: each can match only its own timestamp's rows
            if full[key] > 0:
                full[key] -= 1
                loose[loose_key] = max(0, loose[loose_key] - 1)
            else:
                miss += 1
        for key in lines.loose:
            if loose[key] > 0:
                loose[key] -= 1
            else:
                miss += 1
        return miss


class Sources:
    """Where a message may already be: the session's rows in state.db, and its archived copies
    (each opened once, on first need, read-only)."""

    def __init__(self, place: Place):
        self.place = place
        self._conn: sqlite3.Connection | None = None
        self._archive: Archive | None = None
        self._no_archive = not archive_exists(place.keeper_dir)

    def db_rows(self, session_id: str) -> Rows:
        if self._conn is None:
            self._conn = connect_ro(self.place.db_path)
            self._conn.text_factory = lossless_text
        rows = Rows()
        sql = "SELECT role, content, timestamp FROM messages WHERE session_id = ?"
        for role, content, ts in self._conn.execute(sql, (session_id,)):
            rows.add(role, content, ts)
        return rows

    def archived_rows(self, session_id: str) -> Rows:
        """Every archived copy of the session, merged (a damaged one vouches for nothing)."""
        out = Rows()
        if self._no_archive:
            return out
        try:
            if self._archive is None:
                self._archive = Archive.for_home(self.place.keeper_dir, create=False)
            for _entry, raw in self._archive.payloads("WHERE session_id = ?", (session_id,)):
                rows = Rows()
                for m in orjson.loads(raw)["messages"] if raw is not None else ():
                    rows.add(m.get("role"), m.get("content"), m.get("timestamp"))
                out = out.merge(rows)
        except (KeeperError, sqlite3.DatabaseError):  # an archive that cannot be read vouches for nothing
            self._no_archive = True
            return Rows()
        return out

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
        if self._archive is not None:
            self._archive.close()


def read_transcript(fs: HomeFS, parts: tuple[str, ...], cap: int) -> Lines:
    """The transcript's messages, read through the door (never a symlink); unread past ``cap``."""
    try:
        fd = fs.open_private(*parts, flags=os.O_RDONLY)
    except (OSError, KeeperError) as exc:
        return Lines(problem=f"cannot be read: {getattr(exc, 'strerror', None) or exc}")
    with os.fdopen(fd, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        if size > cap:
            return Lines(size=size, problem=f"{units.size(size)}, over the {units.size(cap)} read cap")
        return parse_lines(fh.read(cap + 1))


def divert_target(f: FileAction) -> bool:
    """A removal this module checks first: a ``.jsonl`` transcript (Hermes diverts to no other name)."""
    return f.kind == "transcript" and f.path.endswith(".jsonl")


def _session_of(f: FileAction) -> str:
    """The session a ``<sid>.jsonl`` is named after (an orphan's too: the raw id is its name)."""
    return f.session_id or Path(f.path).name[: -len(".jsonl")]


def check(place: Place, f: FileAction, sources: Sources, cap: int) -> tuple[FileAction, bool, Lines, int]:
    """(the action as decided, whether the file goes, its lines, messages nowhere else)."""
    parts = Path(f.path).relative_to(place.home).parts
    lines = read_transcript(place.fs, parts, cap)
    if lines.problem:
        reason = why.transcript_unread(lines.problem)
        return replace(f, reason=reason.text, code=reason.code), False, lines, 0
    sid = _session_of(f)
    try:
        rows = sources.db_rows(sid) if lines.messages else Rows()
    except sqlite3.DatabaseError as exc:
        reason = why.transcript_unread(f"state.db could not be read: {exc}")
        return replace(f, reason=reason.text, code=reason.code), False, replace(lines, problem=reason.text), 0
    missing = rows.missing(lines)
    if missing:
        missing = rows.merge(sources.archived_rows(sid)).missing(lines)
    if missing:
        reason = why.only_copy(missing, lines.messages)
        return replace(f, bytes=lines.size, reason=reason.text, code=reason.code), False, lines, missing
    return replace(f, bytes=lines.size), True, lines, 0


def hold_only_copies(place: Place, plan: Plan, cap: int | None = None) -> NotInStateDb:
    """Read each ``.jsonl`` transcript ``plan`` removes; keep (into ``plan.kept_files``, with its
    reason) each that holds a message in neither state.db nor the archive, or that was not read
    whole (``cap``: :data:`READ_CAP`). The ones that go are removed only while their size is the one
    read (:func:`files.remove`). Sets and returns ``plan.not_in_state_db``."""
    found, cap = NotInStateDb(), READ_CAP if cap is None else cap
    if not any(divert_target(f) for f in plan.files):
        plan.not_in_state_db = found
        return found
    sources = Sources(place)
    files: list[FileAction] = []
    try:
        for f in plan.files:
            if not divert_target(f):
                files.append(f)
                continue
            decided, goes, lines, missing = check(place, f, sources, cap)
            if goes:
                files.append(decided)
                continue
            plan.kept_files.append(decided)
            if lines.problem:
                found.unread_files, found.unread_bytes = found.unread_files + 1, found.unread_bytes + f.bytes
            else:
                found.files, found.bytes = found.files + 1, found.bytes + lines.size
                found.messages += missing
    finally:
        sources.close()
    plan.files = files
    plan.not_in_state_db = found
    return found
