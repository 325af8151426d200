"""Archive, verify, then delete: the prune pipeline that a running Hermes does not notice.

Two threads. The archiver reads each batch of whole conversations in one read snapshot,
writes it to ``archive.db`` (zstd, sha256, ``synchronous=FULL``), commits and reads it back,
on the other core and ahead of the deletes (in a rollback-journal database, between the
deleter's steps: :meth:`Writer.reading`). The deleter, the only thread that writes
state.db, takes verified batches in order and deletes their messages through :class:`Writer`:

- one ``DELETE ... WHERE id IN (...)`` statement per transaction. FTS5 writes out its
  pending changes at every statement that opens a savepoint, so a statement per session
  (or per message) means a segment per statement; one statement, one segment per index;
- each transaction sized in *cost units* (the bytes the FTS triggers tokenize, plus a
  fixed share per row) to the time budget, crossing session and batch boundaries;
- a batch's sessions marked ``archived = 1`` in the transaction that deletes its first
  messages; a conversation finished (dependent rows, session rows) in the one that deletes
  its last;
- only ids in the verified payload are deleted, and a conversation is looked at again in the
  transaction that finishes it (:func:`changed_since_plan`): one whose session gained a message,
  was reopened, titled, pinned, routed or leased since the plan is put back whole, as it was;
- FTS5 automerge held off for the run (:class:`fts.MergeHold`), merges in budgeted steps.

A crash at any moment leaves every session either whole in state.db, or with a verified
archive row in state ``archived``; :func:`resume_pending` finishes those first.
"""

from __future__ import annotations

import json
import queue
import sqlite3
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from contextlib import nullcontext
from dataclasses import dataclass, field

from hermes_keeper.archive import store as arch
from hermes_keeper.archive.payload import (
    PROMPT_REFS,
    canonical_bytes,
    decode_value,
    read_payload,
    session_meta_keys,
    sql_placeholder,
)
from hermes_keeper.interrupt import Interrupted
from hermes_keeper.journal import Journal
from hermes_keeper.model.conversations import Facts, conversations
from hermes_keeper.place import Place
from hermes_keeper.run.context import RunContext
from hermes_keeper.run.message_stats import message_size_sql
from hermes_keeper.sqlite.connect import connect_ro, read_txn
from hermes_keeper.sqlite.fts import MergeHold
from hermes_keeper.sqlite.holders import live_guards
from hermes_keeper.sqlite.schema import SchemaInfo
from hermes_keeper.sqlite.writer import Writer, background_thread

#: Sessions archived per archive transaction (bounded by message volume too). Each batch is read
#: in one read transaction: in a rollback-journal (DELETE mode) database that blocks Hermes's
#: commits while it lasts, so there batches hold a tenth of the messages.
ARCHIVE_BATCH_SESSIONS = 50
ARCHIVE_BATCH_MESSAGES = 5000
ROLLBACK_BATCH_MESSAGES = 500
#: Verified batches the archiver may run ahead of the deletes.
ARCHIVE_AHEAD = 3
#: Cost units of one deleted row beside its text (measured: the b-tree and shadow-table
#: deletes of a row cost about what tokenizing 64 bytes of it does).
ROW_COST = 64
DELETE_START_UNITS = 20_000

Progress = Callable[[str, int], None]
WOKE = "new activity during prune"
GUARDED = "a live lease taken during prune"
REOPENED = "reopened during prune"
TITLED = "titled during prune"
PINNED = "pinned during prune"
ROUTED = "routed by the gateway during prune"
#: Float slack when comparing an activity stamp with the plan's (``now - idle_s``, recomputed).
STAMP_SLACK_S = 1e-3


@dataclass(frozen=True)
class Planned:
    """What the plan decided each session from, for the deleter to look at again.

    ``last``: sid -> the newest activity of its conversation as the plan saw it (activity newer
    than that is a change); ``keep_titled``: the policy's (a title set since is a change).
    Whatever else the plan required (ended, not pinned, not routed, no live lease) holds for every
    session it prunes, so it is checked as such. Without a plan (ids chosen by the caller) neither
    activity nor a title is looked at: only what no prune may ever take (open, pinned, routed,
    leased).
    """

    last: dict[str, float] = field(default_factory=dict)
    keep_titled: bool = True


@dataclass
class PruneResult:
    pruned: list[str] = field(default_factory=list)
    archived: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)  # id -> why it was left in place
    messages_deleted: int = 0
    prompts_deleted: int = 0  # system_prompts rows the pruned sessions named and no session names now


def message_costs(conn: sqlite3.Connection, schema: SchemaInfo, session_ids: list[str]) -> dict[int, int]:
    """Cost units of deleting each message of these sessions: its text bytes (what Hermes's FTS
    triggers tokenize, near enough) plus :data:`ROW_COST`. Computed by SQLite, not in Python."""
    sql, arg = _in(session_ids)
    size = message_size_sql(schema)
    return dict(conn.execute(f"SELECT id, {ROW_COST} + {size} FROM messages WHERE session_id {sql}", arg))


def _in(ids: list) -> tuple[str, tuple[str]]:
    """``IN (...)`` over any number of ids with one bound parameter."""
    return "IN (SELECT value FROM json_each(?))", (json.dumps(ids),)


@dataclass
class _Pending:
    """One session of a verified batch on its way out of state.db."""

    payload: dict
    ids: list[int]
    costs: list[int]
    unit: str = ""  # the conversation it belongs to (see :func:`conversations`)
    entry: int | None = None  # its verified archive entry (None: not archived, ``archive=False``)
    batch: int = -1  # set by the deleter when it takes the batch
    done: int = 0  # messages of it deleted so far

    @property
    def sid(self) -> str:
        return self.payload["session"]["id"]

    @classmethod
    def of(cls, payload: dict, costs: dict[int, int], units: dict[str, str], entry: int | None) -> _Pending:
        ids = [m["id"] for m in payload["messages"]]
        sid = payload["session"]["id"]
        return cls(payload, ids, [costs.get(i, ROW_COST) for i in ids], units.get(sid, sid), entry)


class _Deleter:
    """The only writer of state.db in a prune: budgeted transactions over a stream of verified batches."""

    def __init__(
        self,
        ctx: RunContext,
        store: arch.Archive | None,
        result: PruneResult,
        hold: MergeHold,
        progress: Progress | None,
        on_pruned: Callable[[list[str]], None] | None = None,
        planned: Planned | None = None,
    ):
        self.planned = planned or Planned(keep_titled=False)
        self.stop = ctx.stop
        self.w, self.schema, self.store, self.result = ctx.writer, ctx.schema, store, result
        self.journal, self.hold, self.progress, self.on_pruned = ctx.journal, hold, progress, on_pruned
        self.units = ctx.writer.batch(start=DELETE_START_UNITS, fill=0.9)
        self.units.maximum = 1 << 30
        self.queue: deque[_Pending] = deque()
        self.queued = 0  # cost units of the messages in the queue not yet deleted
        self.to_mark: list[str] = []
        self.batches: dict[int, list[_Pending]] = {}  # batch number -> its sessions
        self.members: dict[str, list[_Pending]] = {}  # unit -> its sessions still to finish
        self.waiting: dict[str, int] = {}  # unit -> members whose messages are not all deleted yet
        self.outcome: dict[str, bool] = {}  # sid -> gone (False: its unit woke up and was put back)
        self.why: dict[str, str] = {}  # sid -> why it was put back

    def run(self, feed: Iterator[list[_Pending]]) -> None:
        """Delete every batch ``feed`` yields (blocking only when there is nothing else to do).

        A signal stops it between two steps (:mod:`interrupt`): what it hid and has not finished
        is shown again first (:meth:`_show_unfinished`)."""
        try:
            self._run(iter(feed))
        except Interrupted:
            self._show_unfinished()
            raise

    def _show_unfinished(self) -> None:
        """The conversations it finished are recorded (pruned, or put back where one woke up).
        Every session hidden (``archived = 1``) whose conversation is not finished gets its
        deleted messages back and its own ``archived`` value: Hermes lists it as before. Its
        verified archive entry stays pending, so the next run resumes it (:func:`resume_pending`)."""
        for items in self.batches.values():  # the units it did finish are recorded as such
            if done := [p for p in items if p.sid in self.outcome]:
                self._settle(done)
        marked = set(self.to_mark)  # taken, not marked yet: nothing to put back
        for unit in self.members.values():
            for p in unit:
                if p.done and p.payload["messages"]:
                    _reinsert_messages(self.w, self.schema, p.payload)
                if p.sid not in marked:
                    unmark(self.w, self.schema, p.sid, int(p.payload["session"].get("archived") or 0))
        if self.journal and self.members:
            self.journal.write("shown_again", sessions=[p.sid for u in self.members.values() for p in u])

    def _run(self, feed: Iterator[list[_Pending]]) -> None:
        exhausted = False
        n = 0
        while True:
            self.stop.check()
            while not exhausted and (not self.queue or self.queued < self.units.size):
                items = next(feed, None) if not self.queue else _poll(feed)
                if items is _NOT_READY:
                    break
                if items is None:
                    exhausted = True
                    break
                self._take(n, items)
                n += 1
            if not self.queue and not self.to_mark:
                return
            self._step()

    def _take(self, n: int, items: list[_Pending]) -> None:
        if not items:  # every session of the batch was gone already
            return
        for i in items:
            i.batch = n
            self.members.setdefault(i.unit, []).append(i)
            self.waiting[i.unit] = self.waiting.get(i.unit, 0) + 1
        self.batches[n] = items
        self.queue.extend(items)
        self.queued += sum(sum(i.costs) + ROW_COST for i in items)
        if self.schema.has("sessions", "archived"):
            self.to_mark += [i.sid for i in items]

    def _step(self) -> None:
        """One transaction: mark new batches, delete up to the budget, finish completed units.

        A conversation (:mod:`conversations`) is finished as a whole, in the transaction that
        deletes the last message of its last member: its session rows stay (hidden) until then,
        so one that woke up can be put back whole, links included.
        """
        self.hold.engage()
        room = self.units.size
        ids: list[int] = []
        finish: list[list[_Pending]] = []
        while self.queue and room > 0:
            p = self.queue[0]
            while p.done < len(p.ids) and room > 0:
                ids.append(p.ids[p.done])
                room -= p.costs[p.done]
                p.done += 1
            if p.done == len(p.ids):
                self.queue.popleft()
                room -= ROW_COST
                self.waiting[p.unit] -= 1
                if not self.waiting[p.unit]:
                    del self.waiting[p.unit]
                    finish.append(self.members.pop(p.unit))
        mark, self.to_mark = self.to_mark, []
        self.queued -= self.units.size - room
        woke, prompts = self.w.step(
            lambda c: self._work(c, mark, ids, finish),
            self.units,
            units=self.units.size - room,
            kind="delete",
        )
        self.result.prompts_deleted += prompts
        for unit in finish:
            alive = [p.sid for p in unit if p.sid in woke]
            for p in unit:
                self.outcome[p.sid] = not alive
                if alive:
                    first = alive[0]
                    self.why[p.sid] = woke.get(p.sid) or f"conversation member {first} had {woke[first]}"
        for n in sorted({p.batch for u in finish for p in u}):
            if all(i.sid in self.outcome for i in self.batches[n]):
                self._settle(self.batches.pop(n))

    def _work(
        self, c: sqlite3.Connection, mark: list[str], ids: list[int], units: list[list[_Pending]]
    ) -> tuple[dict[str, str], int]:
        """Returns the sessions that woke up (a message the archive does not have, a turn lease or
        compression lock Hermes took after the plan, or a change :func:`changed_since_plan` finds)
        and why, and the prompts deleted."""
        if mark:
            sql, arg = _in(mark)
            c.execute(f"UPDATE sessions SET archived = 1 WHERE id {sql}", arg)
        if ids:
            sql, arg = _in(ids)
            c.execute(f"DELETE FROM messages WHERE id {sql}", arg)
        if not units:
            return {}, 0
        finish = [[p.sid for p in u] for u in units]
        sids = [sid for unit in finish for sid in unit]
        sql, arg = _in(sids)
        woke = dict.fromkeys(live_guards(c, self.schema, sids), GUARDED)
        woke.update(changed_since_plan(c, self.schema, self.planned, [p for u in units for p in u]))
        woke.update(
            (r[0], WOKE)
            for r in c.execute(f"SELECT DISTINCT session_id FROM messages WHERE session_id {sql}", arg)
        )
        done = [sid for unit in finish if not woke.keys() & set(unit) for sid in unit]
        return woke, _finish_sessions(c, self.schema, done) if done else 0

    def _settle(self, items: list[_Pending]) -> None:
        """Record a finished batch: pruned, or put back as it was where a session woke up."""
        if self.store is not None:
            self.store.set_state([p.entry for p in items if self.outcome[p.sid]], arch.PRUNED)
        gone = [p.payload for p in items if self.outcome[p.sid]]
        self.result.pruned += [p["session"]["id"] for p in gone]
        self.result.messages_deleted += sum(len(p["messages"]) for p in gone)
        if self.journal and gone:
            self.journal.write(
                "pruned",
                durable=False,  # the archive rows say the same; synced when the prune ends
                sessions=[p["session"]["id"] for p in gone],
                messages=sum(len(p["messages"]) for p in gone),
            )
        if self.on_pruned and gone:
            self.on_pruned([p["session"]["id"] for p in gone])
        for p in items:
            if not self.outcome[p.sid]:
                self._put_back(p, self.why[p.sid])  # the whole conversation goes back
        if self.progress:
            self.progress("prune", len(items))

    def _put_back(self, p: _Pending, why: str) -> None:
        """New messages arrived after archiving: the conversation is alive. Put it back as it was."""
        sid, payload = p.sid, p.payload
        if payload["messages"]:
            _reinsert_messages(self.w, self.schema, payload)
        unmark(self.w, self.schema, sid, int(payload["session"].get("archived") or 0))
        if self.store is not None:
            self.store.set_state([p.entry], arch.RESTORED)
        self.result.skipped[sid] = why
        if self.journal:
            self.journal.write("skipped", session=sid, reason=why)


_NOT_READY = object()


def _routed(c: sqlite3.Connection, schema: SchemaInfo, sids: list[str]) -> set[str]:
    """Of ``sids``, those a ``gateway_routing`` row names now (a scan of a table of one row per
    chat; a row that is not JSON names nothing, as the survey reads it)."""
    if not schema.has("gateway_routing", "entry_json"):
        return set()
    sql, arg = _in(sids)
    sid = "CASE WHEN json_valid(entry_json) THEN json_extract(entry_json, '$.session_id') END"
    return {r[0] for r in c.execute(f"SELECT {sid} FROM gateway_routing WHERE {sid} {sql}", arg)}


def _activity(row: sqlite3.Row | tuple, payload: dict) -> float:
    """The newest stamp of a session: its row's now, the archived messages' (those that came
    between the plan and the archive's read are deleted with the rest, so they count here)."""
    stamps = [t for t in row if isinstance(t, int | float)]
    stamps += [m["timestamp"] for m in payload["messages"] if isinstance(m.get("timestamp"), int | float)]
    return max(stamps, default=0.0)


def changed_since_plan(
    c: sqlite3.Connection, schema: SchemaInfo, planned: Planned, items: list[_Pending]
) -> dict[str, str]:
    """The sessions of ``items`` that are no longer what the plan decided on, and why: reopened
    (``ended_at IS NULL``), newer activity than planned (a message archived after the plan, the
    ``last_activity_at`` or ``ended_at`` column), titled (where ``keep_titled``), pinned, or named
    by the gateway's routing. Read in the deleting transaction, by primary key."""
    sids = [p.sid for p in items]
    sql, arg = _in(sids)
    titled = "title IS NOT NULL AND title <> ''" if planned.keep_titled else "0"
    pinned = "coalesce(pinned, 0) <> 0" if schema.has("sessions", "pinned") else "0"
    stamps = ", ".join(col for col in ("ended_at", "last_activity_at") if schema.has("sessions", col))
    rows = {
        r[0]: r[1:]
        for r in c.execute(
            f"SELECT id, ended_at IS NULL, {titled}, {pinned}, {stamps} FROM sessions WHERE id {sql}", arg
        )
    }
    out = dict.fromkeys(_routed(c, schema, sids), ROUTED)
    for p in items:
        row = rows.get(p.sid)
        if row is None:
            continue
        reopened, title, pin, *when = row
        last = planned.last.get(p.sid)
        newer = last is not None and _activity(when, p.payload) > last + STAMP_SLACK_S
        for hit, why in ((pin, PINNED), (title, TITLED), (newer, WOKE), (reopened, REOPENED)):
            if hit:
                out[p.sid] = why
    return out


def _poll(feed):
    """The next batch if the archiver has one ready, else ``_NOT_READY`` (never waits)."""
    poll = getattr(feed, "poll", None)
    return poll() if poll else next(feed, None)


def _finish_sessions(c: sqlite3.Connection, schema: SchemaInfo, sids: list[str]) -> int:
    """Delete what else names these (now message-less) sessions, then the sessions themselves, then
    the ``system_prompts`` rows they named that no session names any more (Hermes's
    ``_delete_unreferenced_system_prompts`` after its own prune, over these sessions' prompts: the
    archive holds their text, and a restore puts it back). Returns how many prompts went."""
    sql, arg = _in(sids)
    if schema.has("session_model_usage"):
        c.execute(f"DELETE FROM session_model_usage WHERE session_id {sql}", arg)
    if schema.has("state_meta"):
        keys = json.dumps([key for sid in sids for key in session_meta_keys(sid)])
        c.execute("DELETE FROM state_meta WHERE key IN (SELECT value FROM json_each(?))", (keys,))
    if schema.has("compression_locks"):
        c.execute(
            f"DELETE FROM compression_locks WHERE session_id {sql} AND expires_at <= ?", (*arg, time.time())
        )
    refs = [col for col in PROMPT_REFS if schema.has("sessions", col)] if schema.has("system_prompts") else []
    named = [  # only a hash (hex sha256): an older row's inline tools[] JSON names no prompt row
        h
        for col in refs
        for (h,) in c.execute(
            f"SELECT {col} FROM sessions WHERE id {sql} AND typeof({col}) = 'text' AND length({col}) = 64"
            f" AND {col} NOT GLOB '*[^0-9a-f]*'",
            arg,
        )
    ]
    c.execute(f"UPDATE sessions SET parent_session_id = NULL WHERE parent_session_id {sql}", arg)
    c.execute(f"DELETE FROM sessions WHERE id {sql}", arg)
    if not named:
        return 0
    unnamed = " AND ".join(
        f"NOT EXISTS (SELECT 1 FROM sessions WHERE sessions.{col} = system_prompts.hash)" for col in refs
    )
    hashes = json.dumps(sorted(set(named)))
    cur = c.execute(
        f"DELETE FROM system_prompts WHERE hash IN (SELECT value FROM json_each(?)) AND {unnamed}", (hashes,)
    )
    return cur.rowcount


def unmark(w: Writer, schema: SchemaInfo, sid: str, was_archived: int) -> None:
    if schema.has("sessions", "archived"):
        w.step(lambda c: c.execute("UPDATE sessions SET archived = ? WHERE id = ?", (was_archived, sid)))


def _reinsert_messages(w: Writer, schema: SchemaInfo, payload: dict) -> None:
    """Put back the archived messages of a session that turned out to be alive."""
    cols = [c for c in payload["messages"][0] if schema.has("messages", c)]
    rows = [[decode_value(m.get(c)) for c in cols] for m in payload["messages"]]
    batch = w.batch(start=200)
    done = 0
    while done < len(rows):
        chunk = rows[done : done + batch.size]

        def ins(c, chunk=chunk):
            for r in chunk:
                ph = ",".join(sql_placeholder(v) for v in r)
                c.execute(f"INSERT OR IGNORE INTO messages ({','.join(cols)}) VALUES ({ph})", r)

        w.step(ins, batch, units=len(chunk))
        done += len(chunk)


def _batches(
    convs: list[list[str]], sizes: dict[str, int], max_messages: int = ARCHIVE_BATCH_MESSAGES
) -> list[list[str]]:
    """Archive batches in plan order, a conversation never split between two."""
    out, cur, msgs = [], [], 0
    for group in convs:
        n = sum(sizes.get(sid, 0) for sid in group)
        if cur and (len(cur) >= ARCHIVE_BATCH_SESSIONS or msgs + n > max_messages):
            out.append(cur)
            cur, msgs = [], 0
        cur += group
        msgs += n
    if cur:
        out.append(cur)
    return out


class _Archiver(threading.Thread):
    """Reads, archives and verifies batches ahead of the deletes; hands them over in order.

    Iterating it yields each verified batch (a list of payloads), waiting for it when
    needed; :meth:`poll` returns one only if it is ready. An error in the thread is raised
    in the consumer at the batch where it happened: every batch before it is safe to delete.
    """

    def __init__(
        self,
        ctx: RunContext,
        batches: list[list[str]],
        units: dict[str, str],
        archive: bool,
        result: PruneResult,
    ):
        super().__init__(name="keeper-archiver", daemon=True)
        self.profile, self.schema, self.batches, self.units = ctx.profile, ctx.schema, batches, units
        self.archive, self.journal, self.result, self.writer = archive, ctx.journal, result, ctx.writer
        self.out: queue.Queue = queue.Queue(maxsize=ARCHIVE_AHEAD)
        self.stop = threading.Event()
        self._done = False

    def run(self) -> None:
        if self.schema.journal_mode == "wal":  # else its read locks hold Hermes's commits: no lower priority
            background_thread()
        try:
            store = arch.Archive.for_home(self.profile.keeper_dir) if self.archive else None
            conn = connect_ro(self.profile.db_path)
            try:
                for ids in self.batches:
                    if self.stop.is_set():
                        return
                    with self.writer.reading(), read_txn(conn):
                        payloads = [p for p in (read_payload(conn, self.schema, s) for s in ids) if p]
                        costs = message_costs(conn, self.schema, ids)
                    entries = [None] * len(payloads)
                    if store is not None:
                        entries = _archive_verified(store, payloads, self.result, self.journal)
                    self._put(
                        [_Pending.of(p, costs, self.units, e) for p, e in zip(payloads, entries, strict=True)]
                    )
            finally:
                conn.close()
                if store is not None:
                    store.close()
            self._put(None)
        except BaseException as exc:  # handed to the consumer, raised there
            self._put(exc)

    def _put(self, item) -> None:
        while not self.stop.is_set():
            try:
                self.out.put(item, timeout=0.1)
                return
            except queue.Full:
                continue

    def _take(self, block: bool):
        item = self.out.get(block=block)
        if item is None:
            self._done = True
        if isinstance(item, BaseException):
            self._done = True
            raise item
        return item

    def __iter__(self) -> Iterator[list[_Pending]]:
        return self

    def __next__(self) -> list[_Pending]:
        if self._done:
            raise StopIteration
        item = self._take(block=True)
        if item is None:
            raise StopIteration
        return item

    def poll(self):
        if self._done:
            return None
        try:
            return self._take(block=False)
        except queue.Empty:
            return _NOT_READY

    def close(self) -> None:
        self.stop.set()
        self.join()


def _state_store(profile: Place) -> arch.Archive:
    """The deleter's connection to the archive, which only moves rows between states.

    Not fsynced per commit: a state lost to a power cut is found again by the next run
    (:func:`resume_pending` re-checks every ``archived`` row against state.db), while the
    archiver's own connection keeps ``synchronous=FULL`` for the payloads themselves.
    """
    return arch.Archive.for_home(profile.keeper_dir, synchronous="NORMAL")


def _archive_verified(
    store: arch.Archive, payloads: list[dict], result: PruneResult, journal: Journal | None
) -> list[int]:
    """Archive a batch and read every entry back; nothing of it may be deleted unless all verify."""
    entries = store.put(payloads, reason="retention")
    bad = [e for e in entries if not store.verify(e)]
    if bad:  # never delete what we could not read back
        raise arch.ArchiveDamaged(f"archive read-back failed for {len(bad)} sessions")
    result.archived.extend(p["session"]["id"] for p in payloads)
    if journal:
        journal.write(
            "archived",
            sessions=[p["session"]["id"] for p in payloads],
            messages=sum(len(p["messages"]) for p in payloads),
        )
    return entries


def _delete_all(
    ctx: RunContext,
    store: arch.Archive | None,
    feed: Iterable[list[_Pending]],
    result: PruneResult,
    progress: Progress | None,
    on_pruned: Callable[[list[str]], None] | None = None,
    planned: Planned | None = None,
) -> None:
    """Run the deleter over ``feed`` with automerge held (the run's hold, else one of its own)."""
    held = nullcontext(ctx.hold) if ctx.hold is not None else ctx.holding()
    try:
        with held as h:
            deleter = _Deleter(ctx, store, result, h, progress, on_pruned, planned)
            deleter.run(iter(feed))
    finally:
        if ctx.journal:
            if result.prompts_deleted:
                ctx.journal.write("prompts_deleted", durable=False, prompts=result.prompts_deleted)
            ctx.journal.sync()


def prune_sessions(
    ctx: RunContext,
    convs: list[list[str]],
    *,
    message_counts: dict[str, int] | None = None,
    progress: Progress | None = None,
    on_pruned: Callable[[list[str]], None] | None = None,
    planned: Planned | None = None,
    result: PruneResult | None = None,
) -> PruneResult:
    """Archive (unless the policy says ``archive = false``), verify, then delete these conversations.

    ``convs``: the plan's conversations (:meth:`Plan.prune_conversations`), each deleted as a
    whole or put back whole; no linking of its own, so what goes is exactly what was decided.
    Through the run's writer and FTS hold (``ctx``; without a hold, one of its own);
    ``on_pruned``: called with the ids of each batch as soon as they are gone; ``planned``: what
    the plan decided from, looked at again as each conversation is deleted (:class:`Planned`);
    ``result``: filled as it goes (what a run stopped by a signal had done).
    """
    result = PruneResult() if result is None else result
    if not convs:
        return result
    profile, archive = ctx.profile, ctx.policy.archive
    # Opened (and created) here, before the archiver opens its own connection to the same file.
    store = _state_store(profile) if archive else None
    units = {sid: conv[0] for conv in convs for sid in conv}
    wal = ctx.schema.journal_mode == "wal"
    batches = _batches(
        convs, message_counts or {}, ARCHIVE_BATCH_MESSAGES if wal else ROLLBACK_BATCH_MESSAGES
    )
    archiver = _Archiver(ctx, batches, units, archive, result)
    archiver.start()
    try:
        _delete_all(ctx, store, archiver, result, progress, on_pruned, planned)
    finally:
        archiver.close()
        if store is not None:
            store.close()
    return result


def resume_pending(ctx: RunContext) -> int:
    """Finish prunes a crash interrupted: archived (verified) rows whose session is still in state.db."""
    profile, schema, journal = ctx.profile, ctx.schema, ctx.journal
    if not arch.archive_exists(profile.keeper_dir):
        return 0
    with _state_store(profile) as store:
        pending = list(store.entries("WHERE state = ? ORDER BY entry", (arch.ARCHIVED,)))
        if not pending:
            return 0
        conn = connect_ro(profile.db_path)
        try:
            with read_txn(conn):
                ids = [e.session_id for e in pending]
                current = {sid: read_payload(conn, schema, sid) for sid in dict.fromkeys(ids)}
                costs = message_costs(conn, schema, ids)
        finally:
            conn.close()
        items = []
        for e in pending:
            now = current[e.session_id]
            if now is None:
                store.set_state([e.entry], arch.PRUNED)
                continue
            try:
                archived = store.get_entry(e.entry)
            except arch.ArchiveDamaged:
                # The archive copy is bad: the session must stay in state.db, visible again.
                unmark(ctx.writer, schema, e.session_id, 0)
                store.set_state([e.entry], arch.RESTORED)
                continue
            # Only rows whose content the entry holds go: a reused id with other content stays,
            # and so puts the conversation back whole (the deleter sees it as woken up).
            held = arch.message_keys(archived)
            same = [m for m in now["messages"] if canonical_bytes(m) in held]
            payload = {**archived, "messages": same}
            items.append((payload, e.entry))
        result = PruneResult()
        if items:
            # The crashed run's conversations, by the same model over the rows it archived.
            units = conversations(Facts.of_row(p["session"]) for p, _ in items).root
            feed = [[_Pending.of(p, costs, units, entry) for p, entry in items]]
            # A crashed run's plan is gone; its policy's titles still keep (when unsure, keep).
            _delete_all(ctx, store, feed, result, None, planned=Planned(keep_titled=ctx.policy.keep_titled))
    if journal and pending:
        journal.write("resumed", sessions=len(result.pruned), skipped=len(result.skipped))
    return len(result.pruned)
