"""Prometheus metrics for node_exporter's textfile collector (``--textfile PATH``).

The official ``prometheus_client`` writes them: one registry per command, every figure a
gauge named ``hermes_keeper_*`` in base units (bytes, seconds, per second) with a ``profile``
label (and ``source`` where the figure is per session source), ``write_to_textfile`` replacing
the file atomically so the collector never reads half of it. Counts and sizes only: no ids,
titles or message text.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Gauge, write_to_textfile

from hermes_keeper.errors import KeeperError

if TYPE_CHECKING:
    from hermes_keeper.report_types import Report

PREFIX = "hermes_keeper_"
DAY = 86400.0
#: check measure label -> (metric name, factor to base units)
_CHECK_NAMES = {"growth_per_day": ("check_growth_bytes_per_second", 1 / DAY)}
_UNIT_SUFFIX = {"B": "_bytes", "s": "_seconds", "": ""}


class Metrics:
    """Gauges filled from reports, runs and checks, written once with :meth:`write`."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self._gauges: dict[str, Gauge] = {}

    def set(self, name: str, help: str, value: float, **labels: str) -> None:
        gauge = self._gauges.get(name)
        if gauge is None:
            gauge = Gauge(PREFIX + name, help, sorted(labels), registry=self.registry)
            self._gauges[name] = gauge
        (gauge.labels(**labels) if labels else gauge).set(value)

    def report(self, rep: Report) -> None:
        """The figures of ``report`` (``build_report``'s :class:`Report`) for one profile."""
        p = rep.profile
        self.set("report_timestamp_seconds", "When the report was made.", rep.generated_at, profile=p)
        self.set("db_bytes", "state.db file size.", rep.disk.state_db, profile=p)
        self.set("wal_bytes", "state.db-wal file size.", rep.disk.wal, profile=p)
        for group, n in rep.database.groups.items():
            self.set("db_group_bytes", "state.db bytes per table group.", n, profile=p, group=group)
        self.set(
            "reclaimable_bytes", "Free pages inside state.db.", rep.database.reclaimable_bytes, profile=p
        )
        s = rep.sessions
        self.set("messages", "Messages in state.db.", s.messages, profile=p)
        for source, ages in s.by_source.items():
            self.set("sessions", "Sessions in state.db by source.", ages["total"], profile=p, source=source)
        for source in s.by_source:
            n = s.zombies.by_source.get(source, 0)
            self.set("zombie_sessions", "Open sessions idle past zombie_after.", n, profile=p, source=source)
            n = sum(r.source == source for r in s.runaways)
            self.set("runaway_sessions", "Sessions past a [runaway] limit.", n, profile=p, source=source)
        per_day = rep.growth.last_7d.bytes_per_day
        self.set("growth_bytes_per_second", "state.db growth, last 7 days' rate.", per_day / DAY, profile=p)
        for kind, f in rep.files.sessions_dir.items():
            self.set("session_files_bytes", "sessions/ bytes by kind.", f.bytes, profile=p, kind=kind)

    def run(self, result) -> None:
        """A ``run`` (``RunResult``): finished, or stopped by a signal (``run_interrupted``)."""
        d, p = result.to_dict(), result.profile
        self.set("run_timestamp_seconds", "When the last run finished.", time.time(), profile=p)
        for key, help in (
            ("zombies_closed", "Zombie sessions the run closed."),
            ("pruned", "Sessions the run archived and pruned."),
            ("files_removed", "Stale files the run removed."),
        ):
            self.set(f"run_{key}", help, d[key], profile=p)
        self.set("run_freed_bytes", "Bytes the run gave back to the disk.", d["freed_bytes"], profile=p)
        net = "Bytes the home got back: freed less what keeper/ gained (negative: it grew)."
        self.set("run_net_freed_bytes", net, d["net_freed_bytes"], profile=p)
        self.set("reclaimable_bytes", "Free pages inside state.db.", d["reclaimable_bytes"], profile=p)
        self.set(
            "run_remaining_sessions", "Sessions left after the run.", d["remaining"]["sessions"], profile=p
        )
        self.set(
            "run_interrupted",
            "1 if a signal stopped the last run between two steps.",
            bool(d["interrupted"]),
            profile=p,
        )

    def check(self, result) -> None:
        """A ``CheckResult``: the overall status, each measure's status and value."""
        p = result.profile
        self.set("check_status", "0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN.", result.status, profile=p)
        for m in result.measures:
            self.set("check_measure_status", "Status of one measure.", m.status, profile=p, measure=m.label)
            if m.value is None:
                continue
            name, factor = _CHECK_NAMES.get(m.label, (f"check_{m.label}{_UNIT_SUFFIX[m.uom]}", 1))
            self.set(name, f"check measure {m.label}.", m.value * factor, profile=p)

    def fleet(self, rows) -> None:
        """``fleet status`` (``fleet.FleetRow`` each): per host and profile of each repository."""
        for r in rows:
            labels = {"repository": r.repository, "host": r.host or "", "profile": r.profile or ""}
            self.set("fleet_status", "0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN.", r.status, **labels)
            for name, help, value in (
                ("fleet_report_timestamp_seconds", "When the host's newest report was made.", r.reported_at),
                ("fleet_db_bytes", "state.db size, as the newest report says.", r.db_bytes),
                ("fleet_copy_timestamp_seconds", "Newest off-host state.db's time.", r.newest_copy),
            ):
                if value is not None:
                    self.set(name, help, value, **labels)
            if r.growth_per_day is not None:
                per_s = r.growth_per_day / DAY
                self.set("fleet_growth_bytes_per_second", "state.db growth, as reported.", per_s, **labels)

    def write(self, path: str | os.PathLike) -> None:
        """Replace ``path`` atomically: a temporary file beside it, then a rename."""
        write_to_textfile(str(path), self.registry)


def textfile_target(path: str | os.PathLike) -> Path:
    """``--textfile``'s path, checked before any work: node_exporter reads only ``*.prom`` files
    in a folder that exists."""
    path = Path(path)
    if path.suffix != ".prom":
        raise KeeperError(f"--textfile {path}: node_exporter's textfile collector reads only *.prom files")
    if not path.parent.is_dir():
        raise KeeperError(f"--textfile {path}: folder {path.parent} does not exist")
    return path
