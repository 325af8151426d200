"""Which backups to keep, in the style of restic ``forget``: a pure function, calendar buckets.

Rules combine with OR: a backup is kept if any rule keeps it, and every reason is
reported. ``keep_last`` keeps the newest N; ``daily``/``weekly``/``monthly`` keep the
newest backup of each of the last N UTC days / ISO weeks / months that have one. The
newest *verified* backup is never deleted, whatever the rules say.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Candidate:
    id: str
    created_at: float
    verified: bool = True


@dataclass(frozen=True)
class Decision:
    id: str
    keep: bool
    reasons: tuple[str, ...]


def _utc(ts: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(ts, tz=dt.timezone.utc)


BUCKETS: dict[str, Callable[[dt.datetime], str]] = {
    "daily": lambda d: d.strftime("%Y-%m-%d"),
    "weekly": lambda d: f"{d.isocalendar()[0]:04d}-W{d.isocalendar()[1]:02d}",
    "monthly": lambda d: d.strftime("%Y-%m"),
}


def plan_rotation(
    backups: Sequence[Candidate], keep_last: int = 3, daily: int = 7, weekly: int = 4, monthly: int = 12
) -> list[Decision]:
    """One decision per backup, newest first."""
    ordered = sorted(backups, key=lambda b: (b.created_at, b.id), reverse=True)
    reasons: dict[str, list[str]] = {b.id: [] for b in ordered}
    for i, b in enumerate(ordered[:keep_last]):
        reasons[b.id].append(f"last {keep_last} (#{i + 1})")
    for rule, count in (("daily", daily), ("weekly", weekly), ("monthly", monthly)):
        seen: list[str] = []
        for b in ordered:
            bucket = BUCKETS[rule](_utc(b.created_at))
            if bucket in seen:
                continue
            if len(seen) >= count:
                break
            seen.append(bucket)
            reasons[b.id].append(f"{rule} {bucket}")
    newest_verified = next((b for b in ordered if b.verified), None)
    if newest_verified is not None:
        reasons[newest_verified.id].append("newest verified backup")
    return [Decision(b.id, bool(reasons[b.id]), tuple(reasons[b.id])) for b in ordered]
