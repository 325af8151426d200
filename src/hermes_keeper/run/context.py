"""One profile run's shared state, built once and handed to every step.

The steps (backup, resume, zombies, prune, files, compact) need the same facts: the
policy, the schema (a full timestamp scan: read once), the journal, the one writer of
state.db, the FTS hold, and who else holds the database (a process-table scan: once at
the start, once more only where a full VACUUM is decided).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from hermes_keeper.interrupt import Stop
from hermes_keeper.journal import Journal
from hermes_keeper.model.policy import Policy
from hermes_keeper.place import Place
from hermes_keeper.sqlite.fts import MergeHold
from hermes_keeper.sqlite.holders import Holder, find_holders
from hermes_keeper.sqlite.schema import SchemaInfo, inspect
from hermes_keeper.sqlite.walreset import wal_guard
from hermes_keeper.sqlite.writer import Writer


@dataclass
class RunContext:
    profile: Place
    policy: Policy
    schema: SchemaInfo
    journal: Journal | None
    writer: Writer
    #: the FTS hold while the deletes run (:meth:`holding`); a step without one holds its own
    hold: MergeHold | None = None
    #: a signal to stop at the next step boundary (:mod:`interrupt`); one that never fires by default
    stop: Stop = field(default_factory=Stop)
    _holders: list[Holder] | None = None

    def holders(self) -> list[Holder]:
        """Processes holding state.db, scanned once per run; the VACUUM decision scans afresh."""
        if self._holders is None:
            self._holders = find_holders(self.profile.db_path)
        return self._holders

    @contextmanager
    def holding(self) -> Iterator[MergeHold]:
        """FTS5 automerge held for the block (settings restored and merged when it ends)."""
        with MergeHold(self.writer, self.schema, self.profile.keeper_dir, self.journal) as hold:
            self.hold = hold
            try:
                yield hold
            finally:
                self.hold = None


@contextmanager
def open_run(
    profile: Place,
    policy: Policy | None = None,
    schema: SchemaInfo | None = None,
    journal: Journal | None = None,
) -> Iterator[RunContext]:
    """The context of one run: ``schema`` the caller already inspected (else inspected here).

    The writer uses ``synchronous = NORMAL``: every change of a run can be redone (deleted
    rows sit verified in the archive first). The run's holder scan, made first, also decides
    whether the keeper may checkpoint (:func:`walreset.wal_guard`; journaled when it may not).
    """
    policy = policy or Policy()
    schema = schema or inspect(profile.db_path)
    schema.require_actionable()
    holders = find_holders(profile.db_path)
    guard = wal_guard(profile.db_path, schema.journal_mode, holders)
    if guard.hands_off and journal:
        journal.write("wal_guard", **guard.to_dict())
    with Writer(profile.db_path, policy.budget, synchronous="NORMAL", guard=guard) as w:
        yield RunContext(profile, policy, schema, journal, w, _holders=holders)
