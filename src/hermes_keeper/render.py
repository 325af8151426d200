"""Rich tables for people; every command also has ``--json`` for machines."""

from __future__ import annotations

import time

from rich.console import Console
from rich.table import Table

from .report import AGE_BUCKETS


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
        return f"{d / 60:.0f}m"
    if d < 86400:
        return f"{d / 3600:.0f}h"
    return f"{d / 86400:.0f}d"


def render_report(rep: dict, console: Console | None = None) -> None:
    c = console or Console()
    now = rep["generated_at"]
    sch = rep["schema"]
    c.rule(f"[bold]{rep['profile']}[/] {rep['home']}")
    c.print(f"schema: {sch['reason']} · journal {sch['journal_mode']} · auto_vacuum {sch['auto_vacuum']}")
    for p in sch["timestamp_problems"]:
        c.print(f"[red]timestamps: {p} (maintenance will refuse this profile)[/]")

    db, disk = rep["database"], rep["disk"]
    t = Table(title="Where the bytes go", show_lines=False)
    t.add_column("what")
    t.add_column("bytes", justify="right")
    t.add_column("share", justify="right")
    total = max(1, db["bytes"])
    labels = {
        "messages": "messages (rows + indexes)",
        "fts": "full-text indexes (2 x FTS5)",
        "sessions": "sessions",
        "other": "other tables",
        "free": "free pages (reclaimable)",
    }
    for key, label in labels.items():
        n = db["groups"][key]
        t.add_row(label, human_bytes(n), f"{100 * n / total:.0f}%")
    t.add_row(
        "state.db / -wal / -shm",
        f"{human_bytes(disk['state_db'])} / {human_bytes(disk['wal'])} / {human_bytes(disk['shm'])}",
        "",
    )
    files = rep["files"]
    for kind, v in sorted(files["sessions_dir"].items()):
        t.add_row(f"sessions/ {kind}", human_bytes(v["bytes"]), f"{v['files']} files")
    t.add_row(
        "sessions/ orphans (no session row)",
        human_bytes(files["orphans"]["bytes"]),
        f"{files['orphans']['files']} files",
    )
    for d, v in files["other"].items():
        if v["files"]:
            t.add_row(f"{d}/", human_bytes(v["bytes"]), f"{v['files']} files")
    for m in files["malformed_copies"]:
        t.add_row(m["name"], human_bytes(m["bytes"]), "never cleaned by Hermes")
    c.print(t)

    s = rep["sessions"]
    t = Table(title=f"Sessions by source and last activity ({s['total']} sessions, {s['messages']} messages)")
    t.add_column("source")
    for name, _ in AGE_BUCKETS:
        t.add_column(name, justify="right")
    t.add_column("total", justify="right")
    t.add_column("zombies", justify="right")
    for src, row in s["by_source"].items():
        t.add_row(
            src,
            *(str(row[b]) for b, _ in AGE_BUCKETS),
            str(row["total"]),
            str(s["zombies"]["by_source"].get(src, 0)),
        )
    c.print(t)
    c.print(
        f"open {s['open']} · ended {s['ended']} · zombies {s['zombies']['total']} "
        f"(open, idle > {s['zombie_after_s'] / 3600:.0f}h) · routed {s['routed']} · "
        f"archived {s['archived']} · titled {s['titled']}"
    )

    t = Table(title="Largest sessions (by messages)")
    for col in ("id", "source", "messages", "bytes", "tokens", "last activity"):
        t.add_column(col, justify="right" if col in ("messages", "bytes", "tokens") else "left")
    for r in s["largest"]["messages"][:5]:
        t.add_row(
            r["id"],
            r["source"],
            str(r["messages"]),
            human_bytes(r["bytes"]),
            str(r["tokens"]),
            _ago(r["last_activity"], now) + " ago",
        )
    c.print(t)
    for r in s["runaways"]:
        c.print(
            f"[yellow]runaway:[/] {r['id']} ({r['source']}): {r['messages']} messages in {r['seconds']:.0f} s"
        )

    g = rep["growth"]
    c.print(
        f"growth: {g['last_7d']['sessions_per_day']} sessions/day (7d), "
        f"{g['last_30d']['sessions_per_day']}/day (30d), ~{human_bytes(g['last_30d']['bytes_per_day'])}/day; "
        f"projected state.db {human_bytes(g['projection']['in_30d_bytes'])} in 30 days, "
        f"{human_bytes(g['projection']['in_365d_bytes'])} in a year"
    )
    h = rep["holders"]
    if h["processes"] or h["gateway_pid"]:
        who = ", ".join(f"pid {p['pid']} ({p['name']})" for p in h["processes"])
        c.print(f"[bold]Hermes is running:[/] {who or 'gateway pid ' + str(h['gateway_pid'])}")
    else:
        c.print("no process holds state.db")
    c.print(f"[dim]report taken {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(now))}[/]")
