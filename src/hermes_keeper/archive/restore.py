"""Putting archived sessions back into ``state.db`` exactly as they were.

Ids, timestamps, every message (inactive ones too, with their original ids), model
usage and ``state_meta`` rows go back through the same budgeted :class:`Writer` as a
prune. A conversation (:mod:`conversations`, the set the plan pruned as one) comes back
whole, whichever member is asked for; a branch comes back alone, without its link if
its parent is not in state.db. If any member's archive row is damaged (or one linked
to it, whose kind of link cannot be told) the whole conversation is refused, never
restored in part. The session row is inserted hidden (``archived = 1`` where the
column exists) and revealed in its last step; after a crash, restoring again finishes
what is there (the archive row still says ``pruned``, the row in state.db holds only
archived message ids) instead of refusing it as already present. The shared
``system_prompts`` rows a session names go back with its row (or are reused when state.db
holds them: same hash, same text).
"""

from __future__ import annotations

import re
import sqlite3
import time
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from hermes_keeper.archive import store as arch
from hermes_keeper.archive.payload import FORMAT, PROMPT_REFS, decode_value, sql_placeholder
from hermes_keeper.archive.query import ENTRY_ADDRESS
from hermes_keeper.errors import KeeperError
from hermes_keeper.hermes_config import AutoPrune, read_auto_prune
from hermes_keeper.journal import Journal
from hermes_keeper.model.conversations import Facts, conversations, seconds
from hermes_keeper.place import Place
from hermes_keeper.run.plan import hermes_auto_prunes, pinned_tails
from hermes_keeper.run.survey import SessionRow, Survey
from hermes_keeper.sqlite.connect import connect_ro, read_txn
from hermes_keeper.sqlite.fts import MergeHold
from hermes_keeper.sqlite.holders import refuse_during_maintenance
from hermes_keeper.sqlite.schema import SchemaInfo, inspect
from hermes_keeper.sqlite.writer import Budget, Writer

TITLE_SUFFIX = " (restored)"
#: Why a member comes back beside the link kinds of :mod:`conversations`.
REQUESTED, PARENT = "requested", "parent"
#: Values that carry nothing when a column is dropped for an older schema.
_EMPTY = (None, 0, "", False)
#: A ``system_prompts.hash`` (sha256 hex); a ``tool_names`` value that is not one is inline JSON.
_PROMPT_HASH = re.compile(r"[0-9a-f]{64}")


def title_candidates(title: str) -> Iterator[str]:
    """``title``, ``title (restored)``, ``title (restored 2)``, ...: a visible, unique suffix."""
    yield title
    yield title + TITLE_SUFFIX
    n = 2
    while True:
        yield f"{title} (restored {n})"
        n += 1


def fit_row(row: dict, columns: list[str]) -> tuple[dict, list[str]]:
    """The row's columns this schema has, and the dropped ones that held a value."""
    kept = {k: v for k, v in row.items() if k in columns}
    dropped = [k for k, v in row.items() if k not in kept and v not in _EMPTY]
    return kept, dropped


def unresolved_prompts(payload: dict, in_db: Callable[[str], bool]) -> list[str]:
    """``sessions`` columns naming a system prompt that neither the payload nor state.db holds.

    Only a payload archived before the keeper archived prompts can have one (Hermes deleted the
    prompt once no session named it): its text is gone, so the session goes back without it.
    """
    archived = {r.get("hash") for r in payload.get("system_prompts", ())}
    s = payload["session"]
    return [
        c
        for c in PROMPT_REFS
        if isinstance(s.get(c), str)
        and _PROMPT_HASH.fullmatch(s[c])
        and s[c] not in archived
        and not in_db(s[c])
    ]


def session_row(payload: dict, schema: SchemaInfo) -> dict:
    """The session row this schema takes; a Hermes without ``system_prompts`` gets the archived
    prompt's text inline in ``sessions.system_prompt``, as it stored prompts itself."""
    session, _ = fit_row(payload["session"], schema.tables["sessions"])
    if not schema.has("system_prompts") and "system_prompt" in session and session["system_prompt"] is None:
        texts = {r.get("hash"): r.get("prompt") for r in payload.get("system_prompts", ())}
        session["system_prompt"] = texts.get(payload["session"].get("system_prompt_hash"))
    return session


def _has_prompt(conn: sqlite3.Connection, prompt_hash: str) -> bool:
    return conn.execute("SELECT 1 FROM system_prompts WHERE hash = ?", (prompt_hash,)).fetchone() is not None


@dataclass
class Member:
    payload: dict
    why: str
    existing: frozenset[int] | None = None  # message ids already back: finishing an interrupted restore
    detach: bool = False  # its parent is gone for good: restored without the link
    entry: int = 0  # the archive entry it comes from

    @property
    def session_id(self) -> str:
        return self.payload["session"]["id"]

    def to_dict(self) -> dict:
        return {
            "session_id": self.session_id,
            "why": self.why,
            "messages": len(self.payload["messages"]),
            "resume": self.existing is not None,
            "detach": self.detach,
        }


@dataclass
class Group:
    """One conversation to restore; members parents first."""

    requested: list[str]
    members: list[Member]


@dataclass
class RestorePlan:
    groups: list[Group] = field(default_factory=list)
    refused: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


class _Target:
    """What the plan needs to know about state.db, read in one snapshot."""

    def __init__(self, conn: sqlite3.Connection, schema: SchemaInfo):
        self.conn = conn
        self.required = {
            t: {r[1] for r in conn.execute(f"PRAGMA table_info({t})") if r[3] and r[4] is None and not r[5]}
            for t in ("sessions", "messages", "session_model_usage")
            if schema.has(t)
        }

    def row(self, sid: str) -> tuple | None:
        return self.conn.execute("SELECT started_at FROM sessions WHERE id = ?", (sid,)).fetchone()

    def message_ids(self, sid: str) -> set[int]:
        return {r[0] for r in self.conn.execute("SELECT id FROM messages WHERE session_id = ?", (sid,))}

    def taken_message_ids(self, ids: list[int]) -> list[int]:
        out = []
        for i in range(0, len(ids), 500):
            chunk = ids[i : i + 500]
            out += [
                r[0]
                for r in self.conn.execute(
                    f"SELECT id FROM messages WHERE id IN ({','.join('?' * len(chunk))})", chunk
                )
            ]
        return out


def _restorable_messages(payload: dict, schema: SchemaInfo) -> list[dict]:
    """Messages that go back: all of them, unless this Hermes has no notion of inactive ones."""
    if schema.has("messages", "active"):
        return payload["messages"]
    return [m for m in payload["messages"] if m.get("active") != 0]


class _Planner:
    def __init__(self, store: arch.Archive, target: _Target):
        self.store = store
        self.target = target
        self.entries = {e.session_id: e for e in store.entries("ORDER BY entry")}  # the newest of each
        self.children: dict[str, list[str]] = {}
        for e in self.entries.values():
            if e.parent_session_id:
                self.children.setdefault(e.parent_session_id, []).append(e.session_id)
        self.payloads: dict[str, dict | None] = {}  # None: damaged
        self.planned: set[str] = set()  # members of groups planned so far

    def pin(self, entry: arch.Entry) -> None:
        """Restore this entry of its session rather than the newest (an address ``#N``)."""
        self.entries[entry.session_id] = entry
        self.payloads.pop(entry.session_id, None)

    def payload(self, sid: str) -> dict | None:
        if sid not in self.payloads:
            try:
                self.payloads[sid] = self.store.get_entry(self.entries[sid].entry)
            except arch.ArchiveDamaged:
                self.payloads[sid] = None
        return self.payloads[sid]

    def conversation(self, sid: str) -> tuple[dict[str, str], list[str]]:
        """Archived members of ``sid``'s conversation that must go back (-> why), parents first,
        and the damaged rows linked to it."""
        facts: dict[str, Facts] = {}
        broken: set[str] = set()
        todo = [sid]
        while todo:  # every archived session linked to sid, whatever the link: the model decides
            cur = todo.pop()
            if cur in facts or cur in broken:  # only archived ones are queued (sid too: plan_restore)
                continue
            p = self.payload(cur)
            if p is None:
                broken.add(cur)
                continue
            f = facts[cur] = Facts.of_row(p["session"])
            todo += [
                n for n in (f.parent_id, f.delegate_from, *self.children.get(cur, ())) if n in self.entries
            ]
        if sid in broken:
            return {sid: REQUESTED}, [sid]
        convs = conversations(facts.values())
        conv = convs.members[convs.root[sid]]
        members = {
            m: REQUESTED if m == sid else convs.kind(m) or PARENT for m in conv if m == sid or self.needed(m)
        }
        near = set(conv) | {facts[m].parent_id for m in conv}
        damaged = [
            d
            for d in sorted(broken)
            if (d in near or self.entries[d].parent_session_id in near) and self.needed(d)
        ]
        return members, damaged

    def needed(self, sid: str) -> bool:
        """Not in state.db (nor planned by an earlier group), or there only in part from a crash."""
        self.payload(sid)
        if sid in self.planned:
            return False
        return self.target.row(sid) is None or self._resume_ids(sid) is not None

    def _resume_ids(self, sid: str) -> frozenset[int] | None:
        """Message ids in state.db when ``sid`` is there because a restore of it was interrupted."""
        row, p, e = self.target.row(sid), self.payloads.get(sid), self.entries.get(sid)
        if row is None or p is None or e is None or e.state != arch.PRUNED:
            return None
        have = self.target.message_ids(sid)
        if row[0] != p["session"].get("started_at") or not have <= {m["id"] for m in p["messages"]}:
            return None
        return frozenset(have)

    def group(self, requested: str, schema: SchemaInfo, plan: RestorePlan) -> Group | None:
        members, damaged = self.conversation(requested)
        if damaged:
            plan.refused[requested] = (
                f"archive row damaged: {', '.join(sorted(damaged))} (the conversation is restored whole or "
                "not at all; see `hermes-keeper archive verify`)"
            )
            return None
        out: list[Member] = []
        for sid, why in members.items():
            p = self.payloads[sid]
            if p.get("format", FORMAT) > FORMAT:
                plan.refused[requested] = f"{sid}: archived by a newer hermes-keeper (format {p['format']})"
                return None
            existing = None
            if self.target.row(sid) is not None:
                existing = self._resume_ids(sid)
                if existing is None:
                    plan.refused[requested] = f"{sid} is already in state.db"
                    return None
            problem = self._fit_problem(p, schema, existing)
            if problem:
                plan.refused[requested] = problem
                return None
            parent = p["session"].get("parent_session_id")
            detach = (
                bool(parent)
                and parent not in members
                and parent not in self.planned
                and self.target.row(parent) is None
            )
            out.append(Member(p, why, existing, detach, self.entries[sid].entry))
            if existing is None and schema.has("system_prompts"):
                for col in unresolved_prompts(p, lambda h: _has_prompt(self.target.conn, h)):
                    plan.warnings.append(
                        f"{sid}: the system prompt its {col} names was deleted by Hermes and this archive "
                        "row (from an older hermes-keeper) lacks its text; restored without it"
                    )
        self.planned.update(members)
        return Group([requested], out)

    def _fit_problem(self, p: dict, schema: SchemaInfo, existing: frozenset[int] | None) -> str | None:
        sid = p["session"]["id"]
        for table, rows in (
            ("sessions", [p["session"]]),
            ("messages", p["messages"]),
            ("session_model_usage", p["model_usage"]),
        ):
            lacking = {c for r in rows for c in self.target.required.get(table, ()) if c not in r}
            if rows and lacking and schema.has(table):
                need = ", ".join(f"{table}.{c}" for c in sorted(lacking))
                return f"{sid}: this Hermes needs {need}, which the archived row lacks"
        ids = [
            m["id"] for m in _restorable_messages(p, schema) if existing is None or m["id"] not in existing
        ]
        taken = self.target.taken_message_ids(ids)
        if taken:
            return (
                f"{sid}: {len(taken)} of its message ids are used by other sessions in state.db "
                f"(e.g. {taken[0]}; was state.db rebuilt?)"
            )
        return None


def _warnings(plan: RestorePlan, schema: SchemaInfo) -> None:
    dropped: dict[str, set[str]] = {}
    inactive = 0
    for g in plan.groups:
        for m in g.members:
            p = m.payload
            for table, rows in (
                ("sessions", [p["session"]]),
                ("messages", p["messages"]),
                ("session_model_usage", p["model_usage"]),
            ):
                if schema.has(table):
                    for r in rows:
                        dropped.setdefault(table, set()).update(fit_row(r, schema.tables[table])[1])
            inactive += len(p["messages"]) - len(_restorable_messages(p, schema))
            if m.detach:
                parent = p["session"].get("parent_session_id")
                plan.warnings.append(
                    f"{m.session_id}: its parent {parent} is not in state.db; restored without that link"
                )
    # messages.active: said below, with the count
    cols = [
        f"{t}.{c}"
        for t, cs in sorted(dropped.items())
        for c in sorted(cs)
        if (t, c) != ("messages", "active")
    ]
    if cols:
        plan.warnings.append(
            f"this Hermes (schema {schema.schema_version}) has no column for {', '.join(cols)}: those values "
            "stay in the archive only"
        )
    if inactive:
        plan.warnings.append(
            f"{inactive} inactive (rewound/compacted) messages stay in the archive only: this Hermes has no "
            "messages.active, they would come back as live history"
        )


def plan_restore(store: arch.Archive, db_path: Path, schema: SchemaInfo, ids: list[str]) -> RestorePlan:
    """Which sessions go back for ``ids`` (whole conversations), which are refused and why."""
    plan = RestorePlan()
    conn = connect_ro(db_path)
    try:
        with read_txn(conn):
            planner = _Planner(store, _Target(conn, schema))
            covered: dict[str, Group] = {}
            wanted: list[str] = []
            for text in dict.fromkeys(ids):
                if ENTRY_ADDRESS.match(text) and text not in planner.entries:
                    entry = store.by_entry(int(text[1:]))
                    if entry is None:
                        plan.refused[text] = "no such archive entry"
                        continue
                    planner.pin(entry)
                    text = entry.session_id
                wanted.append(text)
            # Oldest first: a branch asked for with its parent keeps its link (the parent goes in first).
            first = {e: planner.entries[e].started_at or 0.0 for e in wanted if e in planner.entries}
            for sid in sorted(dict.fromkeys(wanted), key=lambda e: first.get(e, 0.0)):
                if sid in covered:
                    covered[sid].requested.append(sid)
                elif sid not in planner.entries:
                    plan.refused[sid] = "not in the archive"
                elif (g := planner.group(sid, schema, plan)) is not None:
                    plan.groups.append(g)
                    covered.update((m.session_id, g) for m in g.members)
    finally:
        conn.close()
    _warnings(plan, schema)
    return plan


@dataclass
class RestoreResult:
    restored: list[str] = field(default_factory=list)
    refused: dict[str, str] = field(default_factory=dict)
    retitled: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    members: list[dict] = field(default_factory=list)  # every session of the plan and why it came
    messages: int = 0
    transactions: int = 0
    max_txn_ms: float = 0.0
    dry_run: bool = False
    kept_until: float | None = None  # the keeper keeps what came back until then (keeper/kept.json)

    def to_dict(self) -> dict:
        return self.__dict__.copy()


def _insert(c: sqlite3.Connection, table: str, row: dict, verb: str = "INSERT") -> None:
    cols = list(row)
    values = [decode_value(row[k]) for k in cols]
    marks = ",".join(sql_placeholder(v) for v in values)
    c.execute(f"{verb} INTO {table} ({','.join(cols)}) VALUES ({marks})", values)


def _insert_kept(c: sqlite3.Connection, schema: SchemaInfo, table: str, rows: list[dict]) -> None:
    """Archived rows of a table beside ``sessions``, where this Hermes has it, fitted to its columns.

    OR IGNORE: a row Hermes wrote meanwhile (or an interrupted restore wrote) wins.
    """
    if schema.has(table):
        for row in rows:
            _insert(c, table, fit_row(row, schema.tables[table])[0], "INSERT OR IGNORE")


def _free_title(c: sqlite3.Connection, title: str, sid: str) -> str:
    """The first candidate no other session holds (there always is one: the candidates never end)."""
    return next(
        t
        for t in title_candidates(title)
        if not c.execute("SELECT 1 FROM sessions WHERE title = ? AND id != ?", (t, sid)).fetchone()
    )


def _restore_member(
    w: Writer, schema: SchemaInfo, m: Member, result: RestoreResult, later: Collection[str] = ()
) -> int:
    """``later``: the members of its conversation restored after it."""
    p, sid = m.payload, m.session_id
    session = session_row(p, schema)
    hidden = schema.has("sessions", "archived")
    if m.existing is None:
        if m.detach or session.get("parent_session_id") in later:  # later: a cycle of parents (_relink)
            session["parent_session_id"] = None
        if hidden:
            session["archived"] = 1

        def first(c: sqlite3.Connection) -> None:
            if isinstance(session.get("title"), str):
                title = _free_title(c, session["title"], sid)
                if title != session["title"]:
                    result.retitled[sid] = title
                    session["title"] = title
            if schema.has("system_prompts"):
                # Same transaction as the row naming them: Hermes's cleanup cannot slip in between.
                _insert_kept(c, schema, "system_prompts", p.get("system_prompts", []))
                for col in unresolved_prompts(p, lambda h: _has_prompt(c, h)):
                    session[col] = None
            _insert(c, "sessions", session)

        w.step(first)
    todo = [
        fit_row(msg, schema.tables["messages"])[0]
        for msg in _restorable_messages(p, schema)
        if m.existing is None or msg["id"] not in m.existing
    ]
    batch = w.batch(start=200)
    done = 0
    while done < len(todo):
        chunk = todo[done : done + batch.size]

        def insert_messages(c: sqlite3.Connection, chunk=chunk) -> None:
            for msg in chunk:
                _insert(c, "messages", msg)

        w.step(insert_messages, batch, units=len(chunk))
        done += len(chunk)

    def finish(c: sqlite3.Connection) -> None:
        _insert_kept(c, schema, "session_model_usage", p["model_usage"])
        _insert_kept(c, schema, "state_meta", p["state_meta"])
        if hidden:
            c.execute(
                "UPDATE sessions SET archived = ? WHERE id = ?", (int(p["session"].get("archived") or 0), sid)
            )

    w.step(finish)
    return len(todo)


def _relink(w: Writer, g: Group) -> None:
    """The parent links a cycle of parents (``a`` under ``b`` under ``a``: no order puts a parent
    first) kept out of the inserts, set once every member is in. Only where still unset, so a
    rerun after a crash sets what is missing and a resumed member's link is not touched."""
    ids = {m.session_id for m in g.members}
    links = [  # a detached member's parent is no member: never linked here
        (parent, m.session_id)
        for m in g.members
        if (parent := m.payload["session"].get("parent_session_id")) in ids
    ]
    if links:
        w.step(
            lambda c: c.executemany(
                "UPDATE sessions SET parent_session_id = ? WHERE id = ? AND parent_session_id IS NULL", links
            )
        )


def apply_restore(
    w: Writer, schema: SchemaInfo, store: arch.Archive, plan: RestorePlan, journal: Journal | None = None
) -> RestoreResult:
    """Restore every planned conversation, one member after the other, parents first."""
    result = RestoreResult(refused=dict(plan.refused), warnings=list(plan.warnings))
    result.members = [m.to_dict() for g in plan.groups for m in g.members]
    for g in plan.groups:
        ids = [m.session_id for m in g.members]
        try:
            n = sum(_restore_member(w, schema, m, result, ids[i + 1 :]) for i, m in enumerate(g.members))
            _relink(w, g)
        except sqlite3.DatabaseError as exc:
            # A row Hermes wrote meanwhile, a full disk: what went in stays hidden; a rerun finishes it.
            for r in g.requested:
                result.refused[r] = f"stopped by state.db ({exc}); run the restore again to finish it"
            if journal:
                journal.write("restore-failed", sessions=ids, error=str(exc))
            continue
        store.set_state([m.entry for m in g.members], arch.RESTORED)
        result.restored += ids
        result.messages += n
        if journal:
            journal.write(
                "restored",
                sessions=ids,
                requested=g.requested,
                messages=n,
                retitled=sorted(set(ids) & set(result.retitled)),
            )
    result.transactions = w.stats.transactions
    result.max_txn_ms = round(w.stats.max_txn_ms, 2)
    return result


def open_archive(profile: Place) -> arch.Archive:
    """The profile's existing archive, or a one-line refusal."""
    path = profile.keeper_dir / arch.ARCHIVE_NAME
    if not arch.archive_exists(profile.keeper_dir):
        raise KeeperError(f"no archive for profile {profile.name} ({path})")
    try:
        return arch.Archive.for_home(profile.keeper_dir, create=False)
    except sqlite3.DatabaseError as exc:
        raise KeeperError(f"{path}: cannot open the archive ({exc})") from None


def archived_row(payload: dict) -> SessionRow:
    """The ``sessions`` row a payload puts back, as a survey of state.db would read it afterwards
    (its end, its activity, its pin and links: what Hermes's auto-prune looks at)."""
    row, f = payload["session"], Facts.of_row(payload["session"])
    stamps = [t for m in payload["messages"] if (t := seconds(m.get("timestamp"))) is not None]
    return SessionRow(
        id=f.id,
        source=f.source or "unknown",
        started_at=f.started_at or 0.0,
        ended_at=f.ended_at,
        end_reason=f.end_reason,
        parent_id=f.parent_id,
        pinned=bool(row.get("pinned")),
        session_key=f.session_key,
        delegate_from=f.delegate_from,
        branched_from=f.branched_from,
        reset_from=f.reset_from,
        messages=len(payload["messages"]),
        last_message_at=max(stamps, default=None),
        last_activity_at=seconds(row.get("last_activity_at")),
    )


def undone_by_hermes(
    profile: Place, schema: SchemaInfo, plan: RestorePlan, now: float
) -> tuple[AutoPrune, list[str]]:
    """Hermes's auto-prune settings, and the planned sessions its next pass would delete again
    (without an archive): run/plan.py's :func:`hermes_auto_prunes` on each as it will be in state.db.

    Pins are read from the restored rows only: a member whose pinned compression parent stayed in
    state.db counts as unpinned (a refusal ``--force`` overrides, never a loss)."""
    auto = read_auto_prune(profile.home, schema.schema_version)
    rows = {m.session_id: archived_row(m.payload) for g in plan.groups for m in g.members}
    survey = Survey(profile, schema, now, sessions=rows, auto_prune=auto)
    tails = pinned_tails(survey)
    return auto, sorted(sid for sid, r in rows.items() if hermes_auto_prunes(r, survey, now, tails))


def _refuse_if_undone(profile: Place, schema: SchemaInfo, plan: RestorePlan, force: bool) -> None:
    """Refuse (:class:`KeeperError`, nothing changed) a restore Hermes's auto-prune would undo;
    with ``force``, restore anyway and say so in the plan's warnings."""
    auto, doomed = undone_by_hermes(profile, schema, plan, time.time())
    if not doomed:
        return
    shown = ", ".join(doomed[:3]) + (f" and {len(doomed) - 3} more" if len(doomed) > 3 else "")
    what = (
        f"Hermes's own auto-prune ({auto.origin}: on, retention {auto.retention_days:g} days) would"
        f" delete {shown} again at its next pass, without an archive"
    )
    if not force:
        raise KeeperError(
            f"not restored: {what}; run `hermes-keeper adopt` first (the keeper then owns retention),"
            " or --force to restore anyway"
        )
    plan.warnings.append(f"{what}: `hermes-keeper adopt` keeps them")


def restore_sessions(
    profile: Place,
    ids: list[str],
    *,
    journal: Journal | None = None,
    budget: Budget | None = None,
    dry_run: bool = False,
    force: bool = False,
) -> RestoreResult:
    """Plan, then (unless ``dry_run``) restore ``ids`` and their conversations into the profile's state.db.

    Refused whole while Hermes's own auto-prune would delete a restored session again
    (:func:`undone_by_hermes`), unless ``force``."""
    schema = inspect(profile.db_path)
    schema.require_actionable()
    with open_archive(profile) as store:
        plan = plan_restore(store, profile.db_path, schema, ids)
        _refuse_if_undone(profile, schema, plan, force)
        if journal and plan.refused and not dry_run:
            journal.write("restore-refused", refused=plan.refused)
        if dry_run or not plan.groups:  # nothing to write: state.db is not even opened for writing
            members = [m.to_dict() for g in plan.groups for m in g.members]
            return RestoreResult(
                refused=plan.refused, warnings=plan.warnings, members=members, dry_run=dry_run
            )
        refuse_during_maintenance(schema)
        with (
            Writer(profile.db_path, budget) as w,
            MergeHold(w, schema, profile.keeper_dir, journal) as hold,
        ):
            hold.engage()  # every restored message is an FTS insert: merges on our schedule
            result = apply_restore(w, schema, store, plan, journal)
            if w.guard.hands_off:
                result.warnings.append(w.guard.note())
            return result
