"""The report of one profile as types: :class:`Report` and its sections.

Each class is one object of ``schemas/report.json`` (which describes every figure): its fields
are that object's keys, in the order ``report --json`` prints them, so :meth:`Section.to_dict`
(``dataclasses.asdict``, the one serializer) gives the JSON as it always was. Readers (the CLI's
tables, ``check``, the metrics, the history, the HTML page) use the attributes.

Mappings stay mappings where their keys are data: sources, kinds of file, folders, tables,
table groups, and the age buckets of :data:`report.AGE_BUCKETS` (``"<1h"`` is no attribute).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from hermes_keeper.archive.retention import ArchiveUsage
from hermes_keeper.run.files import NotInStateDb
from hermes_keeper.sqlite.holders import Holder


class Section:
    """A part of the report; its JSON is its fields, in order, nested sections included."""

    def to_dict(self) -> dict:
        return asdict(self)  # every subclass is a dataclass


@dataclass(frozen=True)
class SchemaSection(Section):
    """What kind of database state.db is, and its last quick_check."""

    status: str
    reason: str
    schema_version: int | None
    journal_mode: str | None
    auto_vacuum: str | None
    timestamp_problems: list[str]
    generation: str
    protections: list[str]
    quick_check: str  # "ok", the problems found, or "unknown"
    quick_check_at: float | None


@dataclass(frozen=True)
class AutoPruneSection(Section):
    """Hermes's own startup auto-prune (``hermes_config.AutoPrune``) and what its next pass deletes."""

    enabled: bool
    retention_days: float
    min_interval_hours: float
    origin: str
    last_run: float | None
    next_run: float | None
    deletes: int
    deletes_messages: int
    deletes_titled: int


@dataclass(frozen=True)
class DiskSection(Section):
    """File sizes of state.db and its -wal and -shm."""

    state_db: int
    wal: int
    shm: int


@dataclass(frozen=True)
class DatabaseSection(Section):
    """Inside state.db: pages, bytes by group and by object, free pages."""

    page_size: int
    page_count: int
    bytes: int
    per_object: bool
    objects_measured_at: float | None
    objects_estimated: bool
    groups: dict[str, int]  # report.GROUPS -> bytes
    objects: dict[str, int]  # table or index -> bytes, largest first
    reclaimable_bytes: int


@dataclass(frozen=True)
class Usage(Section):
    """Bytes and files of a group of files."""

    bytes: int
    files: int


@dataclass(frozen=True)
class MalformedCopy(Section):
    """One of Hermes's ``state.db.malformed-backup-*`` copies."""

    name: str
    bytes: int


@dataclass(frozen=True)
class RetiredWal(Section):
    """One of Hermes's ``state.db.retired-wal-*`` folders: a WAL generation it set aside, which may
    hold committed messages not in state.db (needs recovery; never removed)."""

    name: str
    bytes: int
    files: int


@dataclass(frozen=True)
class FolderRow(Section):
    """One kind of growing file: what is there, the rule, what a run removes or keeps of it."""

    kind: str
    where: str
    entries: int
    files: int
    bytes: int
    rule: str
    remove_entries: int
    remove_bytes: int
    kept: int


@dataclass(frozen=True)
class CheckpointsRow(Section):
    """``checkpoints/``'s row of the same table, never removed: the same figures, but ``bytes``
    before ``files`` (:func:`report.dir_usage`'s order), as ``report --json`` has always listed them."""

    kind: str
    where: str
    entries: int
    bytes: int
    files: int
    rule: str
    remove_entries: int = 0
    remove_bytes: int = 0
    kept: int = 0


@dataclass(frozen=True)
class FilesSection(Section):
    """Files beside state.db: ``sessions/`` by kind, the other folders, the rules a run applies,
    the transcripts a run keeps as the only copy of their messages, Hermes's retired WAL
    generations and what needs a person."""

    sessions_dir: dict[str, Usage]  # kind -> usage
    orphans: Usage
    other: dict[str, Usage]  # folder or file (report.OTHER_DIRS, report.OTHER_FILES) -> usage
    malformed_copies: list[MalformedCopy]
    policy: list[FolderRow | CheckpointsRow]
    not_in_state_db: NotInStateDb
    retired_wal: list[RetiredWal]
    warnings: list[str]

    @property
    def checkpoints(self) -> Usage:
        return self.other["checkpoints"]


@dataclass(frozen=True)
class SessionSummary(Section):
    """One session in a top list."""

    id: str
    source: str
    messages: int
    bytes: int
    tokens: int
    cost_usd: float
    started_at: float
    last_activity: float
    open: bool


@dataclass(frozen=True)
class Runaway(SessionSummary):
    """A session past a ``[runaway]`` limit: its first-to-last-message span, and each limit passed."""

    seconds: float
    why: list[str]


@dataclass(frozen=True)
class Zombies(Section):
    """Open sessions idle at least ``zombie_after_s``."""

    total: int
    by_source: dict[str, int]


@dataclass(frozen=True)
class Largest(Section):
    """The largest sessions four ways (at most ``--top`` each, none with 0)."""

    messages: list[SessionSummary]
    bytes: list[SessionSummary]
    tokens: list[SessionSummary]
    cost: list[SessionSummary]


@dataclass(frozen=True)
class SessionsSection(Section):
    """The sessions table: counts, ages by source, zombies, the largest, the runaways."""

    total: int
    messages: int
    open: int
    ended: int
    archived: int
    auto_archived: int
    hidden: int
    keeper_hidden: (
        int  # of ``archived``: a killed keeper run's, pending in the archive (the next run finishes them)
    )
    titled: int
    routed: int
    routing_unknown: str | None
    future: int
    zombie_after_s: float
    zombies: Zombies
    by_source: dict[str, dict[str, int]]  # source -> {age bucket: sessions, "total": sessions}
    largest: Largest
    runaways: list[Runaway]


@dataclass(frozen=True)
class Window(Section):
    """Growth over one window ending at the report's time."""

    sessions: int
    messages: int
    sessions_per_day: float
    messages_per_day: float
    bytes_per_day: int


@dataclass(frozen=True)
class Projection(Section):
    """state.db's size if nothing is pruned, linear at the 30-day rate."""

    bytes_per_text_byte: float
    in_30d_bytes: int
    in_365d_bytes: int
    method: str


@dataclass(frozen=True)
class GrowthSection(Section):
    """How fast the home grows (report.GROWTH_WINDOWS) and where that leads."""

    last_7d: Window
    last_30d: Window
    projection: Projection


@dataclass(frozen=True)
class HoldersSection(Section):
    """Processes with state.db open, and the gateway's pid."""

    processes: list[Holder]
    gateway_pid: int | None


@dataclass(frozen=True)
class Report(Section):
    """The report of one profile: ``Profile.report()``; ``to_dict()`` is one entry of
    ``report --json`` (``schemas/report.json``)."""

    report_version: int
    profile: str
    home: str
    generated_at: float
    schema: SchemaSection
    hermes_auto_prune: AutoPruneSection
    disk: DiskSection
    database: DatabaseSection
    files: FilesSection
    sessions: SessionsSection
    growth: GrowthSection
    holders: HoldersSection
    archive: ArchiveUsage


@dataclass(frozen=True)
class Vitals:
    """What ``check`` reads of a report, as the report computes it, without what takes seconds on
    a big home and that no check measures: the files under ``sessions/`` and the plan's only
    copies, the holders, ``dbstat``, ``quick_check``."""

    disk: DiskSection
    reclaimable_bytes: int  # free pages in state.db (the report's ``database.reclaimable_bytes``)
    growth: GrowthSection
    sessions: SessionsSection
    hermes_auto_prune: AutoPruneSection
    archive: ArchiveUsage
