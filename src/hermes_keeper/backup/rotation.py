"""Which backups to keep, in the style of restic ``forget``: a pure function, calendar buckets.

Rules combine with OR: a backup is kept if any rule keeps it, and every reason is
reported. ``keep_last`` keeps the newest N; ``keep_daily``/``keep_weekly``/``keep_monthly``
keep the newest backup of each of the last N UTC days / ISO weeks / months that have one. The
newest *verified* backup is never deleted, whatever the rules say. Given ``now``, a
backup dated after it (the clock was wrong when it was taken) is kept and takes no
rule's slot, so it cannot push good backups out. Given ``max_bytes`` (what ``[keeper] max_bytes``
leaves for backups), the kept backups over it are dropped, oldest first, down to that newest
verified one.

The defaults (last 3, daily 7, weekly 4, no monthly) keep 9 backups at steady state with
nightly runs (10 one night a week), none older than 21 days: ``bench/nights.py`` and
docs/backup.md say why.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import NamedTuple


class Candidate(NamedTuple):
    """One backup as rotation sees it; a plain ``(id, created_at, verified)`` tuple works too."""

    id: str
    created_at: float
    verified: bool = True
    bytes: int = 0  # its size on disk, for ``max_bytes``


@dataclass(frozen=True)
class Decision:
    id: str
    keep: bool
    reasons: list[str] = field(default_factory=list)


def _utc(ts: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(ts, tz=dt.UTC)


BUCKETS: dict[str, Callable[[dt.datetime], str]] = {
    "daily": lambda d: d.strftime("%Y-%m-%d"),
    "weekly": lambda d: "{:04d}-W{:02d}".format(*d.isocalendar()[:2]),
    "monthly": lambda d: d.strftime("%Y-%m"),
}


def plan_rotation(
    backups: Iterable[tuple],
    keep_last: int = 3,
    keep_daily: int = 7,
    keep_weekly: int = 4,
    keep_monthly: int = 0,
    now: float | None = None,
    max_bytes: int | None = None,
) -> list[Decision]:
    """One decision per backup, newest first (the counts: keeper.toml's ``[backups] keep_*``)."""
    if min(keep_last, keep_daily, keep_weekly, keep_monthly) < 0:
        raise ValueError("rotation counts must not be negative")
    ordered = sorted((Candidate(*b) for b in backups), key=lambda b: (b.created_at, b.id), reverse=True)
    reasons: dict[str, list[str]] = {b.id: [] for b in ordered}
    future = [b for b in ordered if now is not None and b.created_at > now]
    for b in future:
        reasons[b.id].append("dated in the future (clock skew): kept")
    ranked = [b for b in ordered if b not in future]
    for i, b in enumerate(ranked[:keep_last]):
        reasons[b.id].append(f"last {keep_last} (#{i + 1})")
    for rule, count in (("daily", keep_daily), ("weekly", keep_weekly), ("monthly", keep_monthly)):
        seen: list[str] = []
        for b in ranked:
            bucket = BUCKETS[rule](_utc(b.created_at))
            if bucket in seen:
                continue
            if len(seen) >= count:
                break
            seen.append(bucket)
            reasons[b.id].append(f"{rule} {bucket}")
    newest_verified = next((b for b in ranked if b.verified), None)
    if newest_verified is not None:
        reasons[newest_verified.id].append("newest verified backup")
    if max_bytes is not None:
        _over_budget(ranked, reasons, max_bytes, newest_verified)
    return [Decision(b.id, bool(reasons[b.id]), reasons[b.id]) for b in ordered]


def _over_budget(
    ranked: list[Candidate], reasons: dict[str, list[str]], max_bytes: int, keep: Candidate | None
) -> None:
    """Newest first, the kept backups past ``max_bytes`` lose their reasons (``keep`` never)."""
    total = keep.bytes if keep is not None else 0
    for b in ranked:
        if b is keep or not reasons[b.id]:
            continue
        total += b.bytes
        if total > max_bytes:
            reasons[b.id].clear()
