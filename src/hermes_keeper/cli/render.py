"""Rich tables for people; every command also has ``--json`` for machines.

Everything fits an 80-column terminal: a report is read in a cron mail or over ssh. An id, a
name or a path is never cut or wrapped: a table folds its other columns first (:func:`table`,
:func:`show`); piped (or in a cron mail), nothing wraps at all. Under a locale that is not UTF-8
(``LANG=C``) the output is ASCII: see :func:`console`.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from contextlib import nullcontext

from rich.cells import cell_len
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from hermes_keeper import units
from hermes_keeper.archive.retention import ArchiveUsage
from hermes_keeper.cli.text import ascii_only, ascii_text, cell, term
from hermes_keeper.report import AGE_BUCKETS, OTHER_FILES
from hermes_keeper.report_types import (
    CheckpointsRow,
    DatabaseSection,
    FilesSection,
    FolderRow,
    GrowthSection,
    HoldersSection,
    Report,
    SchemaSection,
    SessionsSection,
)
from hermes_keeper.run.files import CHECKPOINTS_NOTE

GROUP_LABELS = {
    "messages": "messages (rows + indexes)",
    "fts": "full-text indexes (2 x FTS5)",
    "fts_cjk": "CJK full-text index (FTS5)",
    "sessions": "sessions (rows + indexes)",
    "other": "other tables",
    "free": "free pages (reclaimable)",
}
FILE_KIND_LABELS = {
    "transcript": "sessions/ <id>.json(l) transcripts",
    "snapshot": "sessions/ session_<id>.json snapshots",
    "request_dump": "sessions/ request_dump_* (API errors)",
    "saved": "sessions/saved/ (CLI /save)",
    "routing": "sessions/sessions.json (gateway routing)",
    "other": "sessions/ other",
}
RUNAWAYS_SHOWN = 5
#: A word longer than this (a long path in a folded column) is folded inside it.
FOLD_WORD = 10
#: A cell this short (``182.6 kB``, ``3d ago``, ``120ms``) is never split over lines.
ATOM = 8
#: Piped output has no width limit (rich would wrap at 80): an id or file name is copied whole.
PIPED_WIDTH = 100_000


class AsciiFile:
    """A text stream for a locale that is not UTF-8: what is written goes out as ASCII
    (:func:`text.ascii_text`); its ``encoding`` makes rich draw its boxes and rules in ASCII."""

    encoding = "ascii"

    def __init__(self, stream) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        return self._stream.write(ascii_text(text))

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


def word_lines(text: Text, width: int) -> list[Text]:
    """``text`` wrapped between words at ``width``; a longer word (a path, an id) alone on its
    line, whole (rich would fold or crop it)."""
    out = []
    for para in text.split("\n", allow_blank=True):
        plain, start, end = para.plain, 0, 0  # the line's start, the end of its last word
        for m in re.finditer(r"\S+", plain):
            if m.end() - start > width and end > start:
                out.append(para[start:end])
                start = m.start()
            end = m.end()
        out.append(para[start:end] if end else para)
    return out


class KeeperConsole(Console):
    """A console whose text lines wrap between words only: a word longer than the terminal (a
    path, an id, the ``next:`` command) stays whole on a line of its own, never folded or cut."""

    def on_broken_pipe(self) -> None:
        """A reader that left is the error boundary's to end (``cli._end_of_pipe``), not rich's exit 1."""
        raise BrokenPipeError

    def print(self, *objects, **kwargs) -> None:
        if (
            self.soft_wrap
            or kwargs.get("soft_wrap")
            or len(objects) != 1
            or not isinstance(objects[0], str | Text)
        ):
            return super().print(*objects, **kwargs)
        text = objects[0]
        if isinstance(text, str):
            text = self.render_str(
                text, markup=kwargs.pop("markup", None), highlight=kwargs.pop("highlight", None)
            )
        return super().print(Text("\n").join(word_lines(text, self.width)), soft_wrap=True, **kwargs)


def console(stderr: bool = False, **kwargs) -> Console:
    """The one console every command prints through: on a terminal rich's own width (``COLUMNS``);
    piped, no wrap at all, whatever ``COLUMNS`` says, so a session id or a file name a user
    copies into the next command is never split over lines. ASCII under a non-UTF-8 locale."""
    if ascii_only():
        kwargs["file"] = AsciiFile(sys.stderr if stderr else sys.stdout)
    c = KeeperConsole(stderr=stderr, **kwargs)
    if not c.is_terminal:
        c.width, c.soft_wrap = PIPED_WIDTH, True
    return c


class KeeperTable(Table):
    """A rich table that knows which of its columns hold ids, names and paths (:func:`table`)."""

    whole: frozenset[str] = frozenset()


def table(
    title: str | Text, columns: Sequence[str], whole: Sequence[str] = (), right: Sequence[str] = (), **kw
) -> KeeperTable:
    """A table whose ``whole`` columns (ids, names, paths, sources) never cut or wrap a word
    (a label there may break between words); every other column folds first when the terminal
    is narrow. Print it with :func:`print_table`."""
    t = KeeperTable(title=title, **kw)
    t.whole = frozenset(whole)
    for col in columns:
        t.add_column(col, justify="right" if col in right else "left", overflow="fold")
    return t


def _plain(x) -> str:
    return Text.from_markup(x).plain if isinstance(x, str) else x.plain if isinstance(x, Text) else ""


def _widths(t: KeeperTable, room: int) -> list[int]:
    """Each column's width in ``room`` cells: its widest line if all fit; else at least its
    longest word (in a ``whole`` column any long, else at most :data:`FOLD_WORD`) and a share of
    what is left by how much more it would take. May exceed ``room``: never an id cut."""
    most, least = [], []
    for col in t.columns:
        lines = [line for x in (col.header, *col.cells) for line in _plain(x).splitlines() or [""]]
        most.append(max(cell_len(line) for line in lines))
        # a short line (``4.8 MB``, ``3d ago``) is one word: split only where longer
        words = [cell_len(w) for line in lines for w in ([line] if cell_len(line) <= ATOM else line.split())]
        longest = max(words, default=1)
        least.append(longest if col.header in t.whole else min(FOLD_WORD, longest))
    if sum(most) <= room:
        return most
    widths, spare = list(least), room - sum(least)
    while spare > 0 and (short := [i for i, w in enumerate(widths) if w < most[i]]):
        share = max(1, spare // len(short))
        for i in short:
            grow = min(share, most[i] - widths[i], spare)
            widths[i], spare = widths[i] + grow, spare - grow
    return widths


def print_table(c: Console, t: KeeperTable, drop: Sequence[str] = ()) -> None:
    """Print ``t`` with each of its ``whole`` columns (ids, names, paths) as wide as its longest
    word, the others folded into what is left, between words where a word fits. Where
    that is too wide, the ``drop`` columns go, in that order, and a line says so; where even
    that is, wider than the terminal (whose own wrap then breaks the line, not an id)."""
    dropped = []
    while True:
        extra = t._extra_width + sum(t._get_padding_width(i) for i in range(len(t.columns)))
        widths = _widths(t, c.width - extra)
        left = [name for name in drop if name not in dropped]
        gone = next((col for name in left for col in t.columns if col.header == name), None)
        if sum(widths) + extra <= c.width or gone is None:
            break
        t.columns.remove(gone)
        dropped.append(str(gone.header))
    for col, width in zip(t.columns, widths, strict=True):
        col.width = width
    width = c.width
    c.width = max(width, sum(widths) + extra)
    try:
        c.print(t)
    finally:
        c.width = width
    if dropped:
        c.print(f"(not shown at this width: {', '.join(dropped)}; --json has every column)", markup=False)


def busy(text: str, quiet: bool = False):
    """A spinner on stderr while a step with no countable progress runs (a backup's VACUUM
    INTO, compact's VACUUM, an export); nothing when piped, in cron or with ``--json``."""
    err = console(stderr=True)
    if quiet or not err.is_terminal:
        return nullcontext()
    return err.status(text, spinner="line" if ascii_only() else "dots")


def heading(c: Console, text: str) -> None:
    """A rule on a terminal; piped, one short line (a rule would be ``PIPED_WIDTH`` wide)."""
    if c.is_terminal:
        c.rule(text)
    else:
        c.print(f"== {text} ==")


def _database_table(rep: Report) -> KeeperTable:
    db, disk = rep.database, rep.disk
    title = f"state.db: {units.size(db.bytes)} in {db.page_count} pages of {db.page_size} B"
    t = table(title, ("what", "bytes", "share"), right=("bytes", "share"))
    total = max(1, db.bytes)
    for key, label in GROUP_LABELS.items():
        if key not in db.groups:  # the CJK index, where Hermes has none
            continue
        n = db.groups[key]
        t.add_row(label, units.size(n), f"{100 * n / total:.0f}%")
    t.add_section()
    t.add_row("state.db-wal (write-ahead log)", units.size(disk.wal), "")
    t.add_row("state.db-shm (WAL index)", units.size(disk.shm), "")
    return t


def _files_table(files: FilesSection) -> KeeperTable:
    t = table("Files beside state.db", ("where", "files", "bytes"), right=["files", "bytes"])
    for kind, v in files.sessions_dir.items():
        t.add_row(FILE_KIND_LABELS.get(kind, f"sessions/ {kind}"), str(v.files), units.size(v.bytes))
    o = files.orphans  # transcripts, snapshots and request dumps alike: not a part of one row
    t.add_row("  of all sessions/ files above: orphans (session gone)", str(o.files), units.size(o.bytes))
    for d, v in files.other.items():
        if v.files:
            t.add_row(cell(d if d in OTHER_FILES else f"{d}/"), str(v.files), units.size(v.bytes))
    if copies := files.malformed_copies:
        t.add_row(
            "state.db.malformed-backup-* (Hermes's copies of a damaged state.db)",
            str(len(copies)),
            units.size(sum(m.bytes for m in copies)),
        )
    if retired := files.retired_wal:
        t.add_row(
            "state.db.retired-wal-*/ (needs recovery; never removed)",
            str(sum(r.files for r in retired)),
            units.size(sum(r.bytes for r in retired)),
        )
    return t


def _only_copies_lines(files: FilesSection, c: Console) -> None:
    """The transcripts a run keeps as the only copy of their messages, how to get them back, and
    what else needs a person (retired WAL generations)."""
    n = files.not_in_state_db
    if n.files:
        c.print(
            f"[yellow]not in state.db: {units.plural(n.files, 'transcript')} ({units.size(n.bytes)}),"
            f" {units.plural(n.messages, 'message')} Hermes diverted to sessions/<id>.jsonl when state.db"
            " was replaced under it.[/] Hermes has no command that imports them back; the keeper never"
            " removes such a file: keep it (docs/report.md shows how to append its lines with Hermes's"
            " own SessionDB)"
        )
    if n.unread_files:
        c.print(
            f"[yellow]{units.plural(n.unread_files, 'transcript')} ({units.size(n.unread_bytes)}) not read"
            " whole (over the read cap, or a line that is not JSON): kept, they may be the only copy[/]"
        )
    for w in files.warnings:
        c.print(f"[yellow]warning: {escape(term(w))}[/]")


def _folders_table(rows: list[FolderRow | CheckpointsRow]) -> KeeperTable:
    """Each kind of growing file with the policy's rule and what `run` would remove of it."""
    cols = ("where", "entries", "bytes", "policy", "run removes")
    title = "Files that grow, and what `run` does with them (\\[files] in keeper.toml)"
    t = table(title, cols, whole=["where"], right=["entries", "bytes"])
    for r in rows:
        removes = f"{r.remove_entries} ({units.size(r.remove_bytes)})" if r.remove_entries else "-"
        if r.kept:
            removes += f"; keeps {r.kept} (symlink, last readable)"
        t.add_row(cell(r.where), str(r.entries), units.size(r.bytes), cell(r.rule), removes)
    return t


def _sources_table(s: SessionsSection) -> KeeperTable:
    counts = (*(name for name, _ in AGE_BUCKETS), "total", "zombies")
    sessions, messages = units.plural(s.total, "session"), units.plural(s.messages, "message")
    title = f"Sessions by source and last activity ({sessions}, {messages})"
    t = table(title, ("source", *counts), whole=["source"], right=counts)
    for src, row in s.by_source.items():
        t.add_row(
            cell(src),
            *(str(row[b]) for b, _ in AGE_BUCKETS),
            str(row["total"]),
            str(s.zombies.by_source.get(src, 0)),
        )
    return t


def _largest_table(s: SessionsSection, now: float) -> KeeperTable:
    """Top sessions by messages (as many as ``--top`` asked); token and cost columns only where
    Hermes recorded any."""
    rows = s.largest.messages
    cells = {
        "id": lambda r: cell(r.id),
        "source": lambda r: cell(r.source),
        "messages": lambda r: str(r.messages),
        "text": lambda r: units.size(r.bytes),
        "tokens": lambda r: str(r.tokens),
        "cost": lambda r: f"${r.cost_usd:.2f}",
        "last activity": lambda r: units.ago(r.last_activity, now),
    }
    if not any(r.tokens for r in rows):
        del cells["tokens"]
    if not any(r.cost_usd for r in rows):
        del cells["cost"]
    right = [col for col in cells if col not in ("id", "source")]
    t = table("Largest sessions (by messages)", list(cells), whole=["id", "source"], right=right)
    for r in rows:
        t.add_row(*(fn(r) for fn in cells.values()))
    return t


def _growth_table(g: GrowthSection) -> KeeperTable:
    cols = ("window", "sessions/day", "messages/day", "state.db/day")
    t = table("Growth (by start of session / message time)", cols, right=cols)
    for label, w in (("last 7d", g.last_7d), ("last 30d", g.last_30d)):
        t.add_row(
            label,
            f"{w.sessions_per_day:g}",
            f"{w.messages_per_day:g}",
            units.size(w.bytes_per_day),
        )
    return t


def auto_prune_line(ap: dict, now: float, what: str) -> str:
    """:func:`auto_prune_text` of the plan's ``hermes_auto_prune`` (its JSON: a dict)."""
    return auto_prune_text(ap["enabled"], ap["origin"], ap["retention_days"], ap["next_run"], now, what)


def auto_prune_text(
    enabled: bool, origin: str, retention_days: float, next_run: float | None, now: float, what: str
) -> str:
    """One line on Hermes's own auto-prune: on or off (and why), and when it runs with ``what``
    it deletes without an archive."""
    if not enabled:
        return f"Hermes's own auto-prune: off ({origin})"
    when = "at the next Hermes start" if next_run <= now else f"after {units.when(next_run)}"
    return (
        f"[yellow]Hermes's own auto-prune: on ({origin}), {retention_days:g} days; "
        f"{when} it deletes {what}, with no archive. `hermes-keeper adopt` hands retention to the keeper[/]"
    )


def _archive_line(a: ArchiveUsage, now: float, c: Console) -> None:
    """The archive's size against ``[archive] max_bytes`` / ``keep``; red when over its budget."""
    if a.problem:
        c.print(f"[yellow]archive: {escape(term(a.problem))}[/]")
    if not a.files:
        return
    budget = f" of a {units.size(a.budget)} budget" if a.budget is not None else ""
    oldest = f", oldest active {units.ago(a.oldest, now)}" if a.oldest is not None else ""
    c.print(
        f"archive: {units.size(a.bytes)}{budget} in {units.plural(a.files, 'file')}, "
        f"{units.plural(a.entries, 'entry', 'entries')}{oldest}",
        markup=False,
    )
    if a.over_budget:
        c.print(
            "[red]archive over its budget (archive.max_bytes): the next run drops the oldest conversations[/]"
        )
    if a.expired:
        c.print(f"[yellow]{a.expired} archive entries older than archive.keep: the next run drops them[/]")


def render_report(rep: Report, c: Console | None = None) -> None:
    """The report for people: each part of :class:`Report` in its table or lines, in order."""
    c = c or console()
    now = rep.generated_at
    heading(c, f"[bold]{rep.profile}[/] {escape(term(rep.home))}")
    _schema_lines(rep.schema, now, c)
    print_table(c, _database_table(rep))
    _breakdown_lines(rep.database, now, c)
    print_table(c, _files_table(rep.files))
    print_table(c, _folders_table(rep.files.policy))
    _only_copies_lines(rep.files, c)
    if rep.files.checkpoints.files:
        c.print(CHECKPOINTS_NOTE)
    _sessions_lines(rep.sessions, now, c)
    g = rep.growth
    print_table(c, _growth_table(g))
    c.print(
        f"projected state.db: {units.size(g.projection.in_30d_bytes)} in 30 days, "
        f"{units.size(g.projection.in_365d_bytes)} in a year (if nothing is pruned)"
    )
    _archive_line(rep.archive, now, c)
    ap = rep.hermes_auto_prune
    messages = units.plural(ap.deletes_messages, "message")
    what = f"{units.plural(ap.deletes, 'session')} ({messages}, {ap.deletes_titled} titled)"
    c.print(auto_prune_text(ap.enabled, ap.origin, ap.retention_days, ap.next_run, now, what))
    _holders_line(rep.holders, c)
    c.print(f"[dim]report taken {units.when(now, seconds=True)}[/]")


def _schema_lines(sch: SchemaSection, now: float, c: Console) -> None:
    """What Hermes wrote this database and what it lets the keeper protect; in red what makes
    the report unreliable or the database damaged, and the age of a quick_check on record."""
    c.print(f"schema: {sch.reason} · journal {sch.journal_mode} · auto_vacuum {sch.auto_vacuum}")
    c.print(f"Hermes: {sch.generation} · protections: {', '.join(sch.protections) or 'none'}")
    for p in sch.timestamp_problems:
        c.print(f"[red]timestamps: {p}[/]")
    if sch.timestamp_problems:
        c.print("[red]ages and growth below are unreliable; maintenance refuses this profile[/]")
    if sch.quick_check == "unknown":
        c.print(
            "[yellow]quick_check: not finished within report's time and none on record; "
            "`hermes-keeper plan` runs a full one[/]"
        )
    elif sch.quick_check_at is not None and now - sch.quick_check_at > 60:
        c.print(
            f"quick_check: {escape(sch.quick_check)} at {units.when(sch.quick_check_at)} (last full check)"
        )
    if sch.quick_check not in ("ok", "unknown"):
        c.print(
            f"[red]state.db fails quick_check ({escape(sch.quick_check)}): a damaged page; compact "
            "refuses to write; restore a backup (hermes-keeper restore --latest)[/]"
        )


def _breakdown_lines(db: DatabaseSection, now: float, c: Console) -> None:
    """Where the bytes per table come from when not measured now: an estimate, an earlier
    measurement, or none at all (and why)."""
    measured = db.objects_measured_at
    if db.objects_estimated:
        c.print(
            f"[yellow]bytes per table estimated: measured at {units.when(measured)}"
            f" ({units.ago(measured, now)}), when the used pages differed by more than 10%, scaled to"
            " today's; not read again: that takes longer than report's time (or would hold the writes"
            " of a process holding this DELETE-mode state.db)[/]"
        )
    elif measured is not None and now - measured > 60:
        c.print(f"bytes per table as measured at {units.when(measured)}, scaled to today's used pages")
    if not db.per_object:
        c.print(
            "[yellow]bytes per table unknown: none on record, and this SQLite has no dbstat, reading"
            " every page takes longer than report's time, or a process holds this DELETE-mode"
            " state.db and that read would hold its writes[/]"
        )


def _sessions_lines(s: SessionsSection, now: float, c: Console) -> None:
    """Sessions by source and age, their states, the largest, the first runaways."""
    print_table(c, _sources_table(s))
    c.print(
        f"open {s.open} · ended {s.ended} · "
        + (f"[yellow]zombies {s.zombies.total}[/]" if s.zombies.total else "zombies 0")
        + " "
        f"(open, idle >= {units.duration(s.zombie_after_s)}) · routed {s.routed} · "
        f"titled {s.titled} · Hermes's own soft hide, not the keeper's archive: hidden (archived flag) "
        f"{s.archived - s.keeper_hidden}, by its idle sweep {s.auto_archived}, "
        f"left out of its listing {s.hidden}"
        + (
            f" · {units.plural(s.keeper_hidden, 'session')} hidden by a keeper run that was stopped"
            " (archived and verified; the next run finishes them)"
            if s.keeper_hidden
            else ""
        )
    )
    if s.routing_unknown:
        c.print(
            f"[yellow]routing unknown: {escape(term(s.routing_unknown))}; plan and run keep every "
            "session the gateway could route to[/]"
        )
    if s.future:
        c.print(
            f"[yellow]{units.plural(s.future, 'session')} dated in the future: kept, their age is unknown[/]"
        )
    if s.largest.messages:
        print_table(c, _largest_table(s, now))
    for r in s.runaways[:RUNAWAYS_SHOWN]:
        c.print(
            f"[yellow]runaway:[/] {escape(term(r.id))} ({escape(term(r.source))}): "
            f"{escape(term('; '.join(r.why)))}" + (" [yellow](open: only reported)[/]" if r.open else "")
        )
    if len(s.runaways) > RUNAWAYS_SHOWN:
        c.print(f"[yellow]... and {len(s.runaways) - RUNAWAYS_SHOWN} more runaways (--json lists all)[/]")


def _holders_line(h: HoldersSection, c: Console) -> None:
    """Who holds state.db: the processes found, and the gateway by its pid file if not among them."""
    who = [f"pid {p.pid} ({escape(term(p.name))})" for p in h.processes if not p.is_keeper]
    if h.gateway_pid and h.gateway_pid not in {p.pid for p in h.processes}:
        who.append(f"gateway pid {h.gateway_pid}")
    keepers = [f"pid {p.pid}" for p in h.processes if p.is_keeper]
    if who:
        c.print(f"[bold]Hermes is running:[/] {', '.join(who)}")
    elif not keepers:
        c.print("no process holds state.db")
    if keepers:
        c.print(f"another hermes-keeper holds state.db: {', '.join(keepers)}")
