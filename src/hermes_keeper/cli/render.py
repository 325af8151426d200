"""Rich tables for people; every command also has ``--json`` for machines.

Everything fits an 100-column terminal: a report is read in a cron mail or over ssh.
"""

from __future__ import annotations

import time

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from hermes_keeper.cli.text import cell, term
from hermes_keeper.report import AGE_BUCKETS

GROUP_LABELS = {
    "messages": "messages (rows + indexes)",
    "fts": "full-text indexes (2 x FTS5)",
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
LARGEST_SHOWN = 5
RUNAWAYS_SHOWN = 5


def human_bytes(n: float) -> str:
    n = float(n)
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1024 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TB"


def _ago(ts: float, now: float) -> str:
    d = max(0.0, now - ts)
    if d < 3600:
        return f"{d / 60:.0f}m ago"
    if d < 86400:
        return f"{d / 3600:.0f}h ago"
    return f"{d / 86400:.0f}d ago"


def _duration(seconds: float) -> str:
    return f"{seconds / 86400:g}d" if seconds % 86400 == 0 else f"{seconds / 3600:g}h"


def _database_table(rep: dict) -> Table:
    db, disk = rep["database"], rep["disk"]
    t = Table(
        title=f"state.db: {human_bytes(db['bytes'])} in {db['page_count']} pages of {db['page_size']} B"
    )
    t.add_column("what")
    t.add_column("bytes", justify="right")
    t.add_column("share", justify="right")
    total = max(1, db["bytes"])
    for key, label in GROUP_LABELS.items():
        n = db["groups"][key]
        t.add_row(label, human_bytes(n), f"{100 * n / total:.0f}%")
    t.add_section()
    t.add_row("state.db-wal (write-ahead log)", human_bytes(disk["wal"]), "")
    t.add_row("state.db-shm (WAL index)", human_bytes(disk["shm"]), "")
    return t


def _files_table(files: dict) -> Table:
    t = Table(title="Files beside state.db")
    t.add_column("where")
    t.add_column("files", justify="right")
    t.add_column("bytes", justify="right")
    for kind, v in files["sessions_dir"].items():
        t.add_row(FILE_KIND_LABELS.get(kind, f"sessions/ {kind}"), str(v["files"]), human_bytes(v["bytes"]))
    o = files["orphans"]
    t.add_row("  of these: orphans (session gone)", str(o["files"]), human_bytes(o["bytes"]))
    for d, v in files["other"].items():
        if v["files"]:
            t.add_row(cell(f"{d}/"), str(v["files"]), human_bytes(v["bytes"]))
    if copies := files["malformed_copies"]:
        t.add_row(
            "state.db.malformed-backup-* (never removed)",
            str(len(copies)),
            human_bytes(sum(m["bytes"] for m in copies)),
        )
    return t


def _sources_table(s: dict) -> Table:
    t = Table(title=f"Sessions by source and last activity ({s['total']} sessions, {s['messages']} messages)")
    t.add_column("source")
    for name, _ in AGE_BUCKETS:
        t.add_column(name, justify="right")
    t.add_column("total", justify="right")
    t.add_column("zombies", justify="right")
    for src, row in s["by_source"].items():
        t.add_row(
            cell(src),
            *(str(row[b]) for b, _ in AGE_BUCKETS),
            str(row["total"]),
            str(s["zombies"]["by_source"].get(src, 0)),
        )
    return t


def _largest_table(s: dict, now: float) -> Table:
    """Top sessions by messages; token and cost columns only where Hermes recorded any."""
    rows = s["largest"]["messages"][:LARGEST_SHOWN]
    cells = {
        "id": lambda r: cell(r["id"]),
        "source": lambda r: cell(r["source"]),
        "messages": lambda r: str(r["messages"]),
        "text": lambda r: human_bytes(r["bytes"]),
        "tokens": lambda r: str(r["tokens"]),
        "cost": lambda r: f"${r['cost_usd']:.2f}",
        "last activity": lambda r: _ago(r["last_activity"], now),
    }
    if not any(r["tokens"] for r in rows):
        del cells["tokens"]
    if not any(r["cost_usd"] for r in rows):
        del cells["cost"]
    t = Table(title="Largest sessions (by messages)")
    for col in cells:
        t.add_column(col, justify="left" if col in ("id", "source") else "right", overflow="fold")
    for r in rows:
        t.add_row(*(fn(r) for fn in cells.values()))
    return t


def _growth_table(g: dict) -> Table:
    t = Table(title="Growth (by start of session / message time)")
    for col in ("window", "sessions/day", "messages/day", "state.db/day"):
        t.add_column(col, justify="right")
    for key in ("last_7d", "last_30d"):
        w = g[key]
        t.add_row(
            key.replace("_", " "),
            f"{w['sessions_per_day']:g}",
            f"{w['messages_per_day']:g}",
            human_bytes(w["bytes_per_day"]),
        )
    return t


def auto_prune_line(ap: dict, now: float, what: str) -> str:
    """One line on Hermes's own auto-prune: on or off (and why), and when it runs with ``what``
    it deletes without an archive."""
    if not ap["enabled"]:
        return f"Hermes's own auto-prune: off ({ap['origin']})"
    when = "at the next Hermes start" if ap["next_run"] <= now else f"after {_when(ap['next_run'])}"
    return (
        f"[yellow]Hermes's own auto-prune: on ({ap['origin']}), {ap['retention_days']:g} days; "
        f"{when} it deletes {what}, with no archive. `hermes-keeper adopt` hands retention to the keeper[/]"
    )


def _when(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(ts))


def render_report(rep: dict, console: Console | None = None) -> None:
    c = console or Console()
    now = rep["generated_at"]
    sch = rep["schema"]
    c.rule(f"[bold]{rep['profile']}[/] {rep['home']}")
    c.print(f"schema: {sch['reason']} · journal {sch['journal_mode']} · auto_vacuum {sch['auto_vacuum']}")
    c.print(f"Hermes: {sch['generation']} · protections: {', '.join(sch['protections']) or 'none'}")
    for p in sch["timestamp_problems"]:
        c.print(f"[red]timestamps: {p}[/]")
    if sch["timestamp_problems"]:
        c.print("[red]ages and growth below are unreliable; maintenance refuses this profile[/]")
    if sch["quick_check"] == "unknown":
        c.print(
            "[yellow]quick_check: not finished within report's time and none on record; "
            "`hermes-keeper plan` runs a full one[/]"
        )
    elif sch["quick_check_at"] is not None and now - sch["quick_check_at"] > 60:
        c.print(
            f"quick_check: {escape(sch['quick_check'])} at {_when(sch['quick_check_at'])} (last full check)"
        )
    if sch["quick_check"] not in ("ok", "unknown"):
        c.print(
            f"[red]state.db fails quick_check ({escape(sch['quick_check'])}): a damaged page; compact "
            "refuses to write; restore a backup (hermes-keeper restore --latest)[/]"
        )

    c.print(_database_table(rep))
    measured = rep["database"]["objects_measured_at"]
    if measured is not None and now - measured > 60:
        c.print(f"bytes per table as measured at {_when(measured)}, scaled to today's used pages")
    if not rep["database"]["per_object"]:
        c.print("[yellow]this SQLite has no dbstat: bytes per table unknown[/]")
    c.print(_files_table(rep["files"]))

    s = rep["sessions"]
    c.print(_sources_table(s))
    c.print(
        f"open {s['open']} · ended {s['ended']} · zombies {s['zombies']['total']} "
        f"(open, idle >= {_duration(s['zombie_after_s'])}) · routed {s['routed']} · "
        f"archived {s['archived']} (by Hermes's idle sweep {s['auto_archived']}) · hidden {s['hidden']} · "
        f"titled {s['titled']}"
    )
    if s["routing_unknown"]:
        c.print(
            f"[yellow]routing unknown: {escape(term(s['routing_unknown']))}; plan and run keep every "
            "session the gateway could route to[/]"
        )
    if s["future"]:
        c.print(f"[yellow]{s['future']} sessions dated in the future: kept, their age is unknown[/]")
    if s["largest"]["messages"]:
        c.print(_largest_table(s, now))
    for r in s["runaways"][:RUNAWAYS_SHOWN]:
        c.print(
            f"[yellow]runaway:[/] {escape(term(r['id']))} ({escape(term(r['source']))}): "
            f"{r['messages']} messages in {r['seconds']:.0f} s"
        )
    if len(s["runaways"]) > RUNAWAYS_SHOWN:
        c.print(f"[yellow]... and {len(s['runaways']) - RUNAWAYS_SHOWN} more runaways (--json lists all)[/]")

    g = rep["growth"]
    c.print(_growth_table(g))
    c.print(
        f"projected state.db: {human_bytes(g['projection']['in_30d_bytes'])} in 30 days, "
        f"{human_bytes(g['projection']['in_365d_bytes'])} in a year (if nothing is pruned)"
    )
    ap = rep["hermes_auto_prune"]
    what = f"{ap['deletes']} sessions ({ap['deletes_messages']} messages, {ap['deletes_titled']} titled)"
    c.print(auto_prune_line(ap, now, what))
    h = rep["holders"]
    who = [f"pid {p['pid']} ({escape(term(p['name']))})" for p in h["processes"]]
    if h["gateway_pid"] and h["gateway_pid"] not in {p["pid"] for p in h["processes"]}:
        who.append(f"gateway pid {h['gateway_pid']}")
    if who:
        c.print(f"[bold]Hermes is running:[/] {', '.join(who)}")
    else:
        c.print("no process holds state.db")
    c.print(f"[dim]report taken {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(now))}[/]")
