"""Where every byte of a Hermes home goes, and what its sessions look like.

``build_report`` turns a survey plus disk facts into a :class:`report_types.Report`, whose
``to_dict()`` is the shape of ``schemas/report.json``; ``cli/render.py`` draws it for people and
``docs/report.md`` explains every figure. Read-only throughout: a live Hermes keeps writing
meanwhile.
"""

from __future__ import annotations

import heapq
import os
import sqlite3
import stat
import time
from collections import Counter, defaultdict
from collections.abc import Iterable
from pathlib import Path

from hermes_keeper import units
from hermes_keeper.archive.retention import ArchiveSurvey, place_archive_usage, survey_archive
from hermes_keeper.archive.store import ARCHIVED
from hermes_keeper.errors import KeeperError
from hermes_keeper.facts import (
    Breakdown,
    Check,
    bounded_check,
    db_identity,
    last_check,
    ran_out_before,
    record_objects,
    record_ran_out,
    recorded_objects,
)
from hermes_keeper.fs import HomeFS
from hermes_keeper.model.policy import Policy
from hermes_keeper.place import Place
from hermes_keeper.report_types import (
    AutoPruneSection,
    CheckpointsRow,
    DatabaseSection,
    DiskSection,
    FilesSection,
    FolderRow,
    GrowthSection,
    HoldersSection,
    Largest,
    MalformedCopy,
    Projection,
    Report,
    RetiredWal,
    Runaway,
    SchemaSection,
    SessionsSection,
    SessionSummary,
    Usage,
    Vitals,
    Window,
    Zombies,
)
from hermes_keeper.run.files import (
    CHECKPOINTS_RULE,
    MALFORMED_COPY,
    WHERE,
    NotInStateDb,
    plan_folders,
    retired_wal_warning,
    rule,
)
from hermes_keeper.run.files import KINDS as FILE_KINDS
from hermes_keeper.run.message_stats import RECENT_DAYS
from hermes_keeper.run.plan import FUTURE_SLACK_S, hermes_auto_prunes, make_plan, pinned_tails
from hermes_keeper.run.survey import (
    SessionRow,
    Survey,
    schema_protections,
    shown,
    survey_database,
    survey_profile,
)
from hermes_keeper.run.transcripts import hold_only_copies
from hermes_keeper.sqlite.connect import connect_ro, interrupt_after, read_txn
from hermes_keeper.sqlite.fts import fts_index
from hermes_keeper.sqlite.holders import find_holders, gateway_pid, long_reads_stall_hermes
from hermes_keeper.sqlite.schema import CJK_INDEX, SchemaInfo, generation, inspect, timestamp_problems

REPORT_VERSION = 1
DAY = 86400.0
AGE_BUCKETS = (
    ("<1h", 3600),
    ("1-6h", 6 * 3600),
    ("6-24h", DAY),
    ("1-7d", 7 * DAY),
    ("7-30d", 30 * DAY),
    (">30d", float("inf")),
)
GROWTH_WINDOWS = RECENT_DAYS  # days: the survey counts each session's messages in them
PROJECTION_DAYS = (30, 365)
#: Folders besides sessions/ that Hermes fills and never (or rarely) cleans.
OTHER_DIRS = (
    "checkpoints",
    "state-snapshots",
    "backups",
    "cron/output",
    "logs",
    "session-exports",
    "moa-traces",
    "spawn-trees",
    "a2a_conversations",
    "pending_messages",
    "keeper",
)
#: Single files Hermes appends to without bound, or leaves behind, counted with the folders:
#: cron's per-fire usage audit, and the lock of its invalid-state.db quarantine.
OTHER_FILES = ("cron/usage_audit.jsonl", "state.db.quarantine.lock")
#: ``fts_cjk`` (Hermes's CJK index) only where the database has it.
GROUPS = ("messages", "fts", "fts_cjk", "sessions", "other", "free")
#: How long report's own ``quick_check`` may read (it reads every page: ~10 s per GB cold); past
#: it, the last full check on record (plan, compact) is shown with its age.
CHECK_BUDGET_S = 1.0
#: How long ``dbstat`` may read when the recorded breakdown is too far from today's size (it
#: reads every page too); past it, that breakdown is shown scaled, as an estimate with its age.
DBSTAT_BUDGET_S = 1.0


def age_bucket(age_s: float) -> str:
    for name, limit in AGE_BUCKETS:
        if age_s < limit:
            return name
    return AGE_BUCKETS[-1][0]


def _size(path: Path) -> int:
    try:
        return path.lstat().st_size
    except OSError:
        return 0


def dir_usage(path: Path, home: Path) -> dict:
    """Bytes and files under ``path`` (a regular file counts as itself); symlinks count as
    themselves and are never followed.

    A folder that is itself a symlink, or reached through one, counts as empty: what lies
    outside the home is not Hermes's to account for.
    """
    total = files = 0
    fs, parts = HomeFS(home), path.relative_to(home).parts
    if fs.plain_dir(*parts):
        for dirpath, _dirs, names in os.walk(path, followlinks=False):
            for n in names:
                total += _size(Path(dirpath) / n)
                files += 1
    else:
        try:
            st = fs.lstat(*parts)
        except KeeperError:  # behind a symlink
            st = None
        if st is not None and stat.S_ISREG(st.st_mode):
            total, files = st.st_size, 1
    return {"bytes": total, "files": files}


def table_group(name: str) -> str:
    """Which group a table or index belongs to (FTS5 shadow tables share their table's prefix)."""
    index = fts_index(name)
    if index:
        return "fts_cjk" if index == CJK_INDEX else "fts"
    if name == "messages" or name.startswith(("idx_messages", "sqlite_autoindex_messages")):
        return "messages"
    if name == "sessions" or name.startswith(("idx_sessions", "sqlite_autoindex_sessions")):
        return "sessions"
    return "other"


def _object_sizes(conn: sqlite3.Connection, budget_s: float) -> dict[str, int] | None:
    """Bytes per table and index from ``dbstat``; None where it is not compiled in or
    ``budget_s`` ran out first.

    It reads every page of the file (seconds per GB): see :func:`object_sizes` for the reuse.
    One row per page, not the aggregate form: that walks a whole table in one step, which an
    interrupt does not stop (a 1 GB FTS index would be read to its end)."""
    if budget_s <= 0:
        return None
    try:
        with interrupt_after(conn, budget_s):
            rows = conn.execute("SELECT name, sum(pgsize) FROM dbstat GROUP BY name").fetchall()
    except sqlite3.OperationalError:  # no dbstat in this SQLite, or out of time
        return None
    return {name: int(size or 0) for name, size in rows}


def object_sizes(
    profile: Place,
    conn: sqlite3.Connection,
    used_bytes: int,
    now: float,
    measure: bool = True,
) -> Breakdown | None:
    """Bytes per object: a recent breakdown scaled to today's ``used_bytes`` while they changed
    little, else ``dbstat`` now within :data:`DBSTAT_BUDGET_S`, recorded; where it is not read
    (not ``measure``: it would stall a holder) or not in time, the recorded one scaled as an
    estimate; None with none on record. Not tried again on the same file once it ran out of time
    (``facts.ran_out_before``). The one path of ``report`` and ``history``."""
    recorded = recorded_objects(profile.fs, used_bytes, now)
    if recorded is not None and not recorded.estimate:
        return recorded
    measure = measure and not ran_out_before(profile.fs, "dbstat", profile.db_path, DBSTAT_BUDGET_S)
    identity = db_identity(profile.db_path)
    sizes = _object_sizes(conn, DBSTAT_BUDGET_S) if measure else None
    if sizes is None:
        if measure:  # out of time: not tried again on this same file with no more time
            record_ran_out(profile.fs, "dbstat", identity, DBSTAT_BUDGET_S)
        return recorded
    record_objects(profile.fs, sizes, used_bytes, now)
    return Breakdown(sizes, now)


def _message_windows(survey: Survey) -> dict:
    """Messages and text bytes written in each growth window, plus all text: the survey's sums."""
    rows = survey.sessions.values()
    out: dict = {"text_bytes": sum(s.content_bytes for s in rows), "messages": sum(s.messages for s in rows)}
    for i, days in enumerate(GROWTH_WINDOWS):
        out[days] = {
            "messages": sum(s.recent_messages[i] for s in rows if s.recent_messages),
            "text_bytes": sum(s.recent_bytes[i] for s in rows if s.recent_bytes),
        }
    return out


def db_usage(objects: Breakdown | None, schema: SchemaInfo) -> DatabaseSection:
    """Bytes per group and per object, and the free pages a vacuum would give back."""
    sizes = objects.sizes if objects else {}
    groups: Counter = Counter()
    for name, size in sizes.items():
        groups[table_group(name)] += size
    groups["free"] = schema.free_bytes
    return DatabaseSection(
        page_size=schema.page_size,
        page_count=schema.page_count,
        bytes=schema.db_bytes,
        per_object=objects is not None,
        objects_measured_at=objects.at if objects else None,
        objects_estimated=bool(objects and objects.estimate),
        groups={k: int(groups.get(k, 0)) for k in GROUPS if k != "fts_cjk" or schema.has(CJK_INDEX)},
        objects=dict(sorted(sizes.items(), key=lambda kv: -kv[1])),
        reclaimable_bytes=schema.free_bytes,
    )


def files_usage(
    home: Path, survey: Survey, policy: Policy, now: float, not_in_state_db: NotInStateDb | None = None
) -> FilesSection:
    """``sessions/`` by kind, Hermes's other growing folders and files, its malformed copies and
    retired WAL generations, the rules a run applies, and the transcripts it keeps as the only
    copy of their messages (``not_in_state_db``: :func:`transcripts.hold_only_copies`)."""
    kinds: dict[str, Counter] = defaultdict(Counter)
    orphans: Counter = Counter()
    for f in survey.files:
        kinds[f.kind].update(bytes=f.size, files=1)
        if f.orphan:
            orphans.update(bytes=f.size, files=1)
    other = {d: Usage(**dir_usage(home / d, home)) for d in OTHER_DIRS + OTHER_FILES}
    malformed = [
        MalformedCopy(f.parts[-1], f.bytes) for f in survey.folders.found if f.kind == MALFORMED_COPY
    ]
    retired = [RetiredWal(f.parts[-1], f.bytes, f.files) for f in survey.folders.retired_wal]
    warning = retired_wal_warning(survey.folders)
    return FilesSection(
        sessions_dir={k: Usage(c["bytes"], c["files"]) for k, c in sorted(kinds.items())},
        orphans=Usage(orphans["bytes"], orphans["files"]),
        other=other,
        malformed_copies=sorted(malformed, key=lambda m: m.name),
        policy=folders_policy(survey, policy, now, other["checkpoints"]),
        not_in_state_db=not_in_state_db or NotInStateDb(),
        retired_wal=retired,
        warnings=[warning] if warning else [],
    )


def folders_policy(
    survey: Survey, policy: Policy, now: float, checkpoints: Usage
) -> list[FolderRow | CheckpointsRow]:
    """Each kind of growing file: what is there, the rule, and what a run would remove or keep from
    it (the plan's own :func:`plan_folders`); ``checkpoints/`` last, never removed."""
    remove, kept = plan_folders(survey.folders, policy, survey.profile.home, now)
    rows: list[FolderRow | CheckpointsRow] = []
    for kind in FILE_KINDS:
        found = [f for f in survey.folders.found if f.kind == kind]
        gone = [a for a in remove if a.kind == kind]
        rows.append(
            FolderRow(
                kind=kind,
                where=WHERE[kind],
                entries=len(found),
                files=sum(f.files for f in found),
                bytes=sum(f.bytes for f in found),
                rule=rule(kind, policy),
                remove_entries=len(gone),
                remove_bytes=sum(a.bytes for a in gone),
                kept=sum(1 for a in kept if a.kind == kind),
            )
        )
    rows.append(
        CheckpointsRow(
            kind="checkpoints",
            where="checkpoints/",
            entries=checkpoints.files,
            bytes=checkpoints.bytes,
            files=checkpoints.files,
            rule=CHECKPOINTS_RULE,
        )
    )
    return rows


def _summary_fields(s: SessionRow) -> dict:
    """What a top list shows of ``s``: :class:`SessionSummary`'s fields (a runaway's too)."""
    return {
        "id": shown(s.id),
        "source": s.source,
        "messages": s.messages,
        "bytes": s.content_bytes,
        "tokens": s.input_tokens + s.output_tokens,
        "cost_usd": round(s.cost_usd, 4),
        "started_at": s.started_at,
        "last_activity": s.last_activity,
        "open": s.is_open,
    }


def runaway_reasons(s: SessionRow, limits: dict) -> list[str]:
    """Why ``s`` is a runaway under the policy's ``[runaway]`` ``limits`` (empty: it is not).

    A burst (``min_messages`` at ``min_rate``/s from first to last message: an agent loop
    writes that fast, a person does not) or a budget passed: messages, text bytes, tokens or
    cost, the last two only where Hermes's schema records them (else they read 0).
    """
    why = []
    if (
        s.messages >= limits["min_messages"]
        and s.first_message_at is not None
        and s.last_message_at is not None
    ):
        span = max(s.last_message_at - s.first_message_at, 1.0)
        if s.messages / span >= limits["min_rate"]:
            why.append(f"{units.plural(s.messages, 'message')} in {units.took(span)}")
    tokens = s.input_tokens + s.output_tokens
    for value, limit, what in (
        (s.messages, limits["max_messages"], f"{s.messages} messages"),
        (s.content_bytes, limits["max_bytes"], f"{s.content_bytes} bytes of text"),
        (tokens, limits["max_tokens"], f"{tokens} tokens"),
        (s.cost_usd, limits["max_cost_usd"], f"${s.cost_usd:.2f}"),
    ):
        if value > limit:
            why.append(f"{what} > {limit:.10g}")
    return why


def _largest(rows: list[SessionRow], top: int) -> Largest:
    """The ``top`` largest sessions by messages, text bytes, tokens and cost (none with 0)."""

    def by(fn) -> list[SessionSummary]:
        return [
            SessionSummary(**_summary_fields(s))
            for s in heapq.nlargest(top, rows, key=fn)  # sorted(..., reverse=True)[:top], in O(n)
            if fn(s) > 0
        ]

    return Largest(
        messages=by(lambda s: s.messages),
        bytes=by(lambda s: s.content_bytes),
        tokens=by(lambda s: s.input_tokens + s.output_tokens),
        cost=by(lambda s: s.cost_usd),
    )


def _runaways(rows: list[SessionRow], limits: dict) -> list[Runaway]:
    """Sessions past a ``[runaway]`` limit, most messages first, with their span and each limit passed."""
    runaways = [
        Runaway(
            **_summary_fields(s),
            seconds=round((s.last_message_at or s.started_at) - (s.first_message_at or s.started_at), 1),
            why=why,
        )
        for s in rows
        if (why := runaway_reasons(s, limits))
    ]
    return sorted(runaways, key=lambda r: -r.messages)


def sessions_section(
    survey: Survey,
    now: float,
    zombie_after_s: float,
    top: int,
    runaway: dict | None = None,
    pending: frozenset[str] = frozenset(),
) -> SessionsSection:
    """``pending``: ids whose archive entry a killed run left "archived" (hidden, not yet deleted)."""
    rows = list(survey.sessions.values())
    by_source: dict[str, Counter] = defaultdict(Counter)
    zombies: Counter = Counter()
    for s in rows:
        by_source[s.source][age_bucket(now - s.last_activity)] += 1
        if s.is_open and now - s.last_activity >= zombie_after_s:
            zombies[s.source] += 1
    return SessionsSection(
        total=len(rows),
        messages=survey.message_total,
        open=sum(s.is_open for s in rows),
        ended=sum(not s.is_open for s in rows),
        archived=sum(s.archived for s in rows),
        auto_archived=sum(s.auto_archived for s in rows),
        hidden=sum(s.hidden for s in rows),
        keeper_hidden=sum(bool(s.archived) and s.id in pending for s in rows),
        titled=sum(bool(s.title) for s in rows),
        routed=sum(s.routed for s in rows),
        routing_unknown=survey.routing_problem,
        future=sum(s.last_activity > now + FUTURE_SLACK_S for s in rows),
        zombie_after_s=zombie_after_s,
        zombies=Zombies(total=sum(zombies.values()), by_source=dict(sorted(zombies.items()))),
        by_source={
            src: {b: int(c.get(b, 0)) for b, _ in AGE_BUCKETS} | {"total": sum(c.values())}
            for src, c in sorted(by_source.items(), key=lambda kv: (-sum(kv[1].values()), kv[0]))
        },
        largest=_largest(rows, top),
        runaways=_runaways(rows, Policy().runaway if runaway is None else runaway),
    )


def pruned_entries(archived: ArchiveSurvey | None, survey: Survey) -> list:
    """The archive's newest entry of each session no longer in state.db: what a run pruned,
    still part of how fast the home grows."""
    if archived is None:
        return []
    newest: dict = {}
    for f in archived.files:
        for e in f.entries:
            if e.session_id not in archived.in_state and e.session_id not in survey.sessions:
                newest[e.session_id] = e
    return list(newest.values())


def growth_section(
    started: Iterable[float], windows: dict, now: float, db_bytes: int, free_bytes: int, pruned=()
) -> GrowthSection:
    """Growth over the last 7 and 30 days and a linear projection of state.db's size.

    SQLite does not attribute pages to rows, so disk bytes per day are the message text
    written per day (by message timestamp, so a months-old chat active today counts) times
    the used database bytes per byte of all text (FTS copies, indexes, page slack). The
    file only grows once its free pages are used up, hence max(file, used + days * rate).
    Sessions a run ``pruned`` (archive entries) count too, so growth does not drop after a
    prune: by their start, their messages by their last activity at state.db's text per message.
    """
    started = [*started, *(e.started_at for e in pruned if e.started_at is not None)]
    used = max(0, db_bytes - free_bytes)
    per_text_byte = used / windows["text_bytes"] if windows["text_bytes"] else 0.0
    total_messages = windows.get("messages", 0)
    text_per_message = windows["text_bytes"] / total_messages if total_messages else 0.0
    out: dict[str, Window] = {}
    for days in GROWTH_WINDOWS:
        n = sum(1 for t in started if t >= now - days * DAY)
        gone = sum(e.message_count for e in pruned if (e.last_activity or 0) >= now - days * DAY)
        messages, text = (
            windows[days]["messages"] + gone,
            windows[days]["text_bytes"] + gone * text_per_message,
        )
        out[f"last_{days}d"] = Window(
            sessions=n,
            messages=messages,
            sessions_per_day=round(n / days, 2),
            messages_per_day=round(messages / days, 1),
            bytes_per_day=int(text * per_text_byte / days),
        )
    rate = out[f"last_{GROWTH_WINDOWS[-1]}d"].bytes_per_day
    projection = Projection(
        bytes_per_text_byte=round(per_text_byte, 2),
        **{f"in_{d}d_bytes": int(max(db_bytes, used + d * rate)) for d in PROJECTION_DAYS},
        method=(
            f"linear at the last-{GROWTH_WINDOWS[-1]}-day rate: message text written per day x "
            "used db bytes per text byte; free pages are filled first"
        ),
    )
    return GrowthSection(**out, projection=projection)


def auto_prune_section(survey: Survey, now: float) -> AutoPruneSection:
    """Hermes's own startup auto-prune: its settings, when it may next run, what it will delete
    (with no archive) and how many of those sessions are titled."""
    ap = survey.auto_prune
    tails = pinned_tails(survey)
    doomed = [s for s in survey.sessions.values() if hermes_auto_prunes(s, survey, now, tails)]
    return AutoPruneSection(
        **ap.to_dict(),
        next_run=ap.next_run(now),
        deletes=len(doomed),
        deletes_messages=sum(s.messages for s in doomed),
        deletes_titled=sum(1 for s in doomed if s.title),
    )


def _schema_section(schema: SchemaInfo, check: Check | None) -> SchemaSection:
    """What kind of database state.db is, and its quick_check: this report's own, or the last on
    record ("unknown" with none)."""
    return SchemaSection(
        status=schema.status,
        reason=schema.reason,
        schema_version=schema.schema_version,
        journal_mode=schema.journal_mode,
        auto_vacuum=schema.auto_vacuum,
        timestamp_problems=schema.timestamp_problems,
        generation=generation(schema.schema_version),
        protections=schema_protections(schema),
        quick_check=check.result if check else "unknown",
        quick_check_at=check.at if check else None,
    )


def _disk_section(db_path: Path) -> DiskSection:
    wal, shm = (db_path.with_name(db_path.name + s) for s in ("-wal", "-shm"))
    return DiskSection(state_db=_size(db_path), wal=_size(wal), shm=_size(shm))


def _read_inside(
    profile: Place, schema: SchemaInfo, survey: Survey, now: float, stalls: bool
) -> Breakdown | None:
    """The bytes per object, and (into ``schema``) the columns' timestamp problems, messages'
    from the survey's statistics: one read transaction, apart from the survey's."""
    conn = connect_ro(profile.db_path)
    try:
        with read_txn(conn):
            objects = object_sizes(profile, conn, schema.used_bytes, now, measure=not stalls)
            schema.timestamp_problems = timestamp_problems(conn, schema.tables, survey.odd_message_stamps)
    finally:
        conn.close()
    return objects


def _only_copies(profile: Place, survey: Survey, policy: Policy, now: float) -> NotInStateDb:
    """The transcripts a run would keep as the only copy: the plan's own removals, read as a run
    reads them (a pruned session's ``.jsonl``, an orphan's past ``files.max_age``; no other)."""
    return hold_only_copies(profile, make_plan(survey, policy, now))


def build_report(
    profile: Place,
    now: float | None = None,
    zombie_after_s: float = DAY,
    top: int = 10,
    policy: Policy | None = None,
) -> Report:
    """The whole report for one profile (raises KeeperError if state.db is not readable);
    ``policy`` (default: the defaults) says what a run would do with the files and which
    sessions are runaways.

    Beside a process that holds a rollback-journal state.db, nothing reads the whole file
    (quick_check, dbstat): that would hold its commits; what is on record stands in."""
    now = time.time() if now is None else now
    policy = policy or Policy()
    schema = inspect(profile.db_path, check_timestamps=False)  # messages' from the survey's statistics
    schema.require_readable()
    holders = find_holders(profile.db_path)
    stalls = long_reads_stall_hermes(schema.journal_mode, holders)
    check = last_check(profile.fs) if stalls else bounded_check(profile.fs, profile.db_path, CHECK_BUDGET_S)
    survey = survey_profile(profile, schema, now, holders, lambda: check, CHECK_BUDGET_S, cached=True)
    objects = _read_inside(profile, schema, survey, now, stalls)
    windows = _message_windows(survey)
    db = db_usage(objects, schema)
    disk = _disk_section(profile.db_path)
    started = (s.started_at for s in survey.sessions.values())
    try:
        archived = survey_archive(profile)
    except KeeperError:  # the archive line says why
        archived = None
    return Report(
        report_version=REPORT_VERSION,
        profile=profile.name,
        home=str(profile.home),
        generated_at=now,
        schema=_schema_section(schema, check),
        hermes_auto_prune=auto_prune_section(survey, now),
        disk=disk,
        database=db,
        files=files_usage(profile.home, survey, policy, now, _only_copies(profile, survey, policy, now)),
        sessions=sessions_section(survey, now, zombie_after_s, top, policy.runaway, pending_ids(archived)),
        growth=growth_section(
            started, windows, now, db.bytes, db.reclaimable_bytes, pruned_entries(archived, survey)
        ),
        holders=HoldersSection(processes=list(survey.holders), gateway_pid=gateway_pid(profile.home)),
        archive=place_archive_usage(profile, policy, now, archived),
    )


def pending_ids(archived: ArchiveSurvey | None) -> frozenset[str]:
    """Sessions a killed run archived and began to delete: the next run finishes them."""
    if archived is None:
        return frozenset()
    return frozenset(e.session_id for f in archived.files for e in f.entries if e.state == ARCHIVED)


def build_vitals(profile: Place, now: float, zombie_after_s: float, policy: Policy) -> Vitals:
    """The figures ``check`` measures, each as :func:`build_report` has it: the same survey (its
    message statistics through the cache), less what lies beside the database."""
    schema = inspect(profile.db_path, check_timestamps=False)
    schema.require_readable()
    survey = survey_database(profile, schema, now, cached=True)
    started = (s.started_at for s in survey.sessions.values())
    return Vitals(
        disk=_disk_section(profile.db_path),
        reclaimable_bytes=schema.free_bytes,
        growth=growth_section(started, _message_windows(survey), now, schema.db_bytes, schema.free_bytes),
        sessions=sessions_section(survey, now, zombie_after_s, 0, policy.runaway),
        hermes_auto_prune=auto_prune_section(survey, now),
        archive=place_archive_usage(profile, policy, now),
    )
