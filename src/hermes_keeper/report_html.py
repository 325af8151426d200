"""``report --html FILE``: one self-contained page of charts, drawn as inline SVG right here.

No script, no stylesheet or font from anywhere, a Content-Security-Policy that forbids every
fetch: the page works offline, in a mail attachment, years later. Every string that comes from
a database (sources, profile names, paths) is escaped: it is HTML. Charts: disk use over time by
component (the history), sessions by source and age (the report), growth with and without the
keeper's policy (the report's growth and the plan's prune set), what each run freed.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass
from html import escape
from pathlib import Path

from hermes_keeper import units
from hermes_keeper.errors import KeeperError
from hermes_keeper.fs import check_export_target, open_private
from hermes_keeper.history import Entry
from hermes_keeper.model.policy import Policy
from hermes_keeper.report import AGE_BUCKETS
from hermes_keeper.report_types import Report

DAY = 86400.0
PROJECTION_DAYS = 365
WIDTH, HEIGHT, LEFT, BOTTOM, TOP = 760, 260, 80, 40, 16
PALETTE = (
    "#4e79a7",
    "#f28e2b",
    "#e15759",
    "#76b7b2",
    "#59a14f",
    "#edc948",
    "#b07aa1",
    "#ff9da7",
    "#9c755f",
    "#bab0ac",
    "#1f3b5a",
    "#8cd17d",
)
#: Components in stacking order: the database's parts, then what lies beside it.
COMPONENT_ORDER = (
    "messages",
    "fts:messages_fts",
    "fts:messages_fts_trigram",
    "fts:messages_fts_cjk",
    "sessions",
    "other",
    "free",
    "wal",
    "files",
    "backups",
    "archive",
)
STYLE = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 24px; color: #222; background: #fff; }
h1 { font-size: 22px; } h2 { font-size: 18px; margin-top: 28px; } h3 { font-size: 15px; }
table { border-collapse: collapse; } td, th { padding: 2px 10px; text-align: right; }
td:first-child, th:first-child { text-align: left; }
svg { display: block; margin: 8px 0; } svg text { font: 11px system-ui, sans-serif; fill: #333; }
.note { color: #666; font-size: 12px; max-width: 760px; }
"""


@dataclass(frozen=True)
class ProfilePage:
    """What one profile's section is drawn from."""

    report: Report
    plan: dict  # Plan.to_dict()
    retention_days: float  # the policy's longest retention: how long new text can stay
    max_db_bytes: int | None  # the disk budget's low-water mark, where a run prunes down to
    history: list[Entry]

    @classmethod
    def of(cls, report: Report, policy: Policy, plan: dict, history: list[Entry]) -> ProfilePage:
        """The page of a fresh ``report`` beside the profile's policy, plan and history."""
        return cls(
            report,
            plan,
            max(policy.retention_s.values()) / DAY,
            policy.max_db_bytes and int(policy.max_db_bytes * policy.low_water),
            history,
        )


def projection(page: ProfilePage, days: int = PROJECTION_DAYS) -> dict[str, list[tuple[float, float]]]:
    """state.db bytes over the next ``days``: without the keeper (the report's linear projection:
    the file, free pages filled first) and, at most, with its policy (the plan's prune set gone
    after the next run; new text stays no longer than the longest retention; the disk budget)."""
    db = page.report.database
    used = max(0, db.bytes - db.reclaimable_bytes)
    rate = page.report.growth.last_30d.bytes_per_day
    after = max(0, used - page.plan["prune"]["est_bytes"])
    steps = sorted({0, *range(0, days + 1, max(1, days // 60)), min(days, int(page.retention_days)), days})
    without = [(d, float(max(db.bytes, used + d * rate))) for d in steps]
    kept = []
    for d in steps:
        size = after + rate * min(d, page.retention_days)
        kept.append((d, float(min(size, page.max_db_bytes) if page.max_db_bytes else size)))
    return {"without the keeper": without, "with the keeper's policy (at most)": kept}


def _nice_max(value: float, scaled: bool = True) -> float:
    """A round top for a four-tick axis at or above ``value``: round in the unit
    :func:`units.size` shows (powers of 1000), or plainly for counts."""
    if value <= 0:
        return 1.0
    unit = 1.0
    while scaled and value / unit >= 1000:
        unit *= 1000
    quarter = value / unit / 4
    mag = 10 ** math.floor(math.log10(quarter))
    step = next(m * mag for m in (1, 1.5, 2, 2.5, 3, 4, 5, 7.5, 10) if m * mag >= quarter)
    return 4 * step * unit


def _svg(title: str, body: list[str], height: int = HEIGHT) -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
        f'viewBox="0 0 {WIDTH} {height}" role="img" aria-label="{escape(title)}">'
        f"<title>{escape(title)}</title>" + "".join(body) + "</svg>"
    )


def _y_axis(top: float, fmt, height: int = HEIGHT) -> list[str]:
    out = []
    for i in range(5):
        value = top * i / 4
        y = height - BOTTOM - (height - BOTTOM - TOP) * i / 4
        out.append(f'<line x1="{LEFT}" x2="{WIDTH - 10}" y1="{y:.1f}" y2="{y:.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">{escape(fmt(value))}</text>')
    return out


def _legend_rows(names: list[str]) -> list[list[str]]:
    """The legend's entries, wrapped to the chart's width."""
    rows: list[list[str]] = [[]]
    x = LEFT
    for name in names:
        w = 24 + 7 * len(name)
        if rows[-1] and x + w > WIDTH:
            rows.append([])
            x = LEFT
        rows[-1].append(name)
        x += w
    return rows


def _legend(names: list[str], y: float) -> list[str]:
    """Colour keys below a chart, in the palette's order of ``names``; wraps onto more lines."""
    out = []
    i = 0
    for r, row in enumerate(_legend_rows(names)):
        x = LEFT
        for name in row:
            colour = PALETTE[i % len(PALETTE)]
            out.append(f'<rect x="{x}" y="{y + 16 * r - 9}" width="10" height="10" fill="{colour}"/>')
            out.append(f'<text x="{x + 14}" y="{y + 16 * r}">{escape(name)}</text>')
            x += 24 + 7 * len(name)
            i += 1
    return out


def _day(ts: float) -> str:
    return time.strftime("%Y-%m-%d", time.localtime(ts))


def _moment(ts: float) -> str:
    return time.strftime("%m-%d %H:%M", time.localtime(ts))


def stacked_columns(title: str, columns: list[tuple[str, dict[str, float]]], fmt=units.size) -> str:
    """One column per (label, {series: value}), series stacked in a fixed order, with a legend."""
    names: list[str] = []
    for _label, values in columns:
        names += [k for k in values if k not in names]
    names.sort(key=lambda n: COMPONENT_ORDER.index(n) if n in COMPONENT_ORDER else len(COMPONENT_ORDER))
    height = HEIGHT + 16 * len(_legend_rows(names))
    plot_h = HEIGHT - BOTTOM - TOP
    top = _nice_max(max((sum(v.values()) for _l, v in columns), default=0))
    body = _y_axis(top, fmt)
    slot = (WIDTH - 10 - LEFT) / max(1, len(columns))
    width = max(1.0, min(40.0, slot * 0.8))
    for i, (label, values) in enumerate(columns):
        x, y = LEFT + slot * i + (slot - width) / 2, HEIGHT - BOTTOM
        for j, name in enumerate(names):
            h = plot_h * values.get(name, 0) / top
            if h <= 0:
                continue
            y -= h
            tip = f"{label}: {name} {fmt(values[name])}"
            body.append(
                f'<rect x="{x:.1f}" y="{y:.1f}" width="{width:.1f}" height="{h:.1f}" '
                f'fill="{PALETTE[j % len(PALETTE)]}"><title>{escape(tip)}</title></rect>'
            )
        if len(columns) <= 12 or i in (0, len(columns) - 1):
            cx = x + width / 2
            body.append(
                f'<text x="{cx:.1f}" y="{HEIGHT - BOTTOM + 14}" text-anchor="middle">{escape(label)}</text>'
            )
    body += _legend(names, HEIGHT - 6)
    return _svg(title, body, height)


def horizontal_bars(title: str, bars: list[tuple[str, dict[str, float]]], series: list[str]) -> str:
    """One stacked bar per (label, {series: count}), e.g. sessions of a source by age."""
    row_h = 22
    height = TOP + row_h * max(1, len(bars)) + 24 + 16 * len(_legend_rows(series))
    top = _nice_max(max((sum(v.values()) for _l, v in bars), default=0), scaled=False)
    span = WIDTH - 10 - LEFT - 90  # room for the total after the bar
    body = []
    for i, (label, values) in enumerate(bars):
        y, x = TOP + row_h * i, float(LEFT + 40)
        shown = label if len(label) <= 16 else label[:15] + "…"
        body.append(f'<text x="{LEFT + 34}" y="{y + 14}" text-anchor="end">{escape(shown)}</text>')
        for j, name in enumerate(series):
            w = span * values.get(name, 0) / top
            if w <= 0:
                continue
            tip = f"{label} {name}: {values[name]:g}"
            body.append(
                f'<rect x="{x:.1f}" y="{y + 3}" width="{w:.1f}" height="{row_h - 6}" '
                f'fill="{PALETTE[j % len(PALETTE)]}"><title>{escape(tip)}</title></rect>'
            )
            x += w
        body.append(f'<text x="{x + 4:.1f}" y="{y + 14}">{sum(values.values()):g}</text>')
    body += _legend(series, TOP + row_h * max(1, len(bars)) + 22)
    return _svg(title, body, height)


def lines(title: str, series: dict[str, list[tuple[float, float]]], x_label: str) -> str:
    """Polylines over a shared x (days from now) and a bytes axis."""
    top = _nice_max(max((y for pts in series.values() for _x, y in pts), default=0))
    right = max((x for pts in series.values() for x, _y in pts), default=1) or 1
    plot_w, plot_h = WIDTH - 10 - LEFT, HEIGHT - BOTTOM - TOP
    body = _y_axis(top, units.size)
    for tick in range(0, int(right) + 1, max(1, int(right) // 6)):
        x = LEFT + plot_w * tick / right
        body.append(f'<text x="{x:.1f}" y="{HEIGHT - BOTTOM + 14}" text-anchor="middle">{tick}</text>')
    body.append(
        f'<text x="{WIDTH - 10}" y="{HEIGHT - BOTTOM + 28}" text-anchor="end">{escape(x_label)}</text>'
    )
    for i, (name, pts) in enumerate(series.items()):
        path = " ".join(
            f"{LEFT + plot_w * x / right:.1f},{HEIGHT - BOTTOM - plot_h * y / top:.1f}" for x, y in pts
        )
        body.append(
            f'<polyline points="{path}" fill="none" stroke="{PALETTE[i % len(PALETTE)]}" stroke-width="2.5">'
            f"<title>{escape(f'{name}: {units.size(pts[-1][1])} in {pts[-1][0]:g} days')}</title></polyline>"
        )
    body += _legend(list(series), HEIGHT - 6)
    return _svg(title, body, HEIGHT + 16 * (len(_legend_rows(list(series))) - 1))


def _section(page: ProfilePage) -> str:
    rep = page.report
    sessions = rep.sessions
    out = [f"<h2>Profile {escape(rep.profile)}</h2>"]
    out.append(f'<p class="note">{escape(rep.home)} · report of {escape(_day(rep.generated_at))}</p>')
    facts = [
        ("state.db", units.size(rep.disk.state_db)),
        ("WAL", units.size(rep.disk.wal)),
        ("free pages (reclaimable)", units.size(rep.database.reclaimable_bytes)),
        ("sessions", f"{sessions.total:,}"),
        ("messages", f"{sessions.messages:,}"),
        ("zombies", f"{sessions.zombies.total:,}"),
        ("runaways", f"{len(sessions.runaways):,}"),
        ("growth (30-day rate)", units.size(rep.growth.last_30d.bytes_per_day) + "/day"),
        (
            "the next run prunes",
            f"{page.plan['prune']['sessions']:,} sessions, ~{units.size(page.plan['prune']['est_bytes'])}",
        ),
    ]
    out.append(
        "<table>"
        + "".join(f"<tr><td>{escape(k)}</td><td>{escape(v)}</td></tr>" for k, v in facts)
        + "</table>"
    )

    disk = [(_moment(e.ts), e.figures["components"]) for e in page.history if "components" in e.figures]
    out.append("<h3>Disk use over time, by component</h3>")
    out.append(stacked_columns("disk use over time by component", disk))
    out.append(
        '<p class="note">One column per recorded report or run (keeper/history.db, thinned with age).</p>'
    )

    ages = [b for b, _ in AGE_BUCKETS]
    bars = [(src, {b: counts.get(b, 0) for b in ages}) for src, counts in sessions.by_source.items()]
    out.append("<h3>Sessions by source and age of last activity</h3>")
    out.append(horizontal_bars("sessions by source and age", bars, ages))

    out.append("<h3>Growth projection, with and without the keeper's policy</h3>")
    out.append(lines("growth projection", projection(page), "days from now"))
    out.append(
        '<p class="note">Without: the report\'s linear projection at the 30-day rate. With: after the '
        "next run removes the plan's prune set, new text stays at most the longest retention "
        f"({page.retention_days:g} days), within the disk budget if one is set: an upper bound.</p>"
    )

    runs = [(_moment(e.ts), run_columns(e.figures)) for e in page.history if e.kind == "run"]
    out.append("<h3>What each run freed, and where it went</h3>")
    out.append(stacked_columns("bytes each run freed", runs) if runs else "<p>No run recorded yet.</p>")
    return "".join(out)


def run_columns(figures: dict) -> dict[str, float]:
    """One run's column: what the home got back, what went into ``keeper/`` (its backup, the
    archive), and how much the home grew when ``keeper/`` gained more than Hermes's files lost.
    A row from before the keeper counted itself has only ``freed``."""
    freed = float(figures.get("freed_bytes", 0))
    if "net_freed_bytes" not in figures:
        return {"freed": freed}
    net = float(figures["net_freed_bytes"])
    return {
        "home shrank": max(0.0, net),
        "went into keeper/": freed - max(0.0, net),
        "home grew": max(0.0, -net),
    }


def render_html(pages: list[ProfilePage], now: float | None = None) -> str:
    """The whole page for these profiles."""
    now = time.time() if now is None else now
    csp = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"
    head = (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{csp}">'
        '<link rel="icon" href="data:,">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>hermes-keeper report</title><style>{STYLE}</style></head><body>"
    )
    stamp = time.strftime("%Y-%m-%d %H:%M", time.localtime(now))
    body = f'<h1>hermes-keeper report</h1><p class="note">{escape(stamp)}</p>'
    return head + body + "".join(_section(p) for p in pages) + "</body></html>\n"


def html_target(path: str | os.PathLike) -> Path:
    """The file the page may be written to, checked before the report runs: never a Hermes or
    keeper file, in a folder that exists (one line and exit 2 otherwise)."""
    out = check_export_target(path)
    if not out.parent.is_dir():
        raise KeeperError(f"--html {path}: the folder {out.parent} does not exist; nothing written")
    return out


def write_html(path: str | os.PathLike, text: str) -> Path:
    """Write the page (0600: it describes a private store)."""
    out = html_target(path)
    fd = open_private(out, flags=os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
    return out
