"""SQLite connections to a live ``state.db``: read-only by URI, writes in short transactions.

Hermes writers wait 1 s per attempt (15 attempts), so every keeper write transaction
must stay far below that; callers size their work, this module only opens, begins
and commits. Never open the database file with plain file I/O in a process that has
it open in SQLite: closing such a descriptor drops SQLite's POSIX locks.
"""

from __future__ import annotations

import os
import sqlite3
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote

BUSY_TIMEOUT_S = 2.0
#: Hermes's CJK search tokenizer, a loadable SQLite extension in the home (``hermes_state_fts.py``
#: ``load_fts5_cjk_extension``): an FTS5 table using it cannot be read or written, nor can a row
#: its triggers index be deleted, on a connection without it.
CJK_TOKENIZER = "cjk_unicode61"
CJK_LIBRARY = ("lib", "libfts5_cjk.so")
#: Longest one read of a scan in steps (:func:`id_steps`), and the first step's rows (the next are
#: sized from the time it took).
STEP_READ_MS, FIRST_STEP_ROWS = 20.0, 2000


def is_busy(exc: BaseException) -> bool:
    """SQLITE_BUSY / SQLITE_LOCKED: another connection holds the lock (a reason to wait, not to fail)."""
    return isinstance(exc, sqlite3.OperationalError) and any(
        word in str(exc).lower() for word in ("locked", "busy")
    )


def uri(path: Path, mode: str) -> str:
    """The ``file:`` URI of ``path``, quoted: in a URI a ``?`` starts the query, ``#`` the
    fragment and ``%`` an escape, so a home named ``we?ird#home`` would be another file."""
    return f"file:{quote(str(Path(path).resolve()))}?mode={mode}"


def connect_ro(path: Path, query_only: bool = True) -> sqlite3.Connection:
    """A read-only connection that can never create, write or take the write lock.

    ``query_only=False`` only for ``VACUUM INTO``, which writes a *different* file.
    """
    conn = sqlite3.connect(uri(path, "ro"), uri=True, timeout=BUSY_TIMEOUT_S, isolation_level=None)
    try:
        conn.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall()
    except sqlite3.OperationalError as exc:
        if "unable to open" not in str(exc) or os.access(Path(path).parent, os.W_OK):
            raise
        # A WAL database in a read-only folder: SQLite cannot create its -shm index. Nothing can
        # write there either, so reading it as immutable is safe (and still never writes).
        conn.close()
        conn = sqlite3.connect(uri(path, "ro") + "&immutable=1", uri=True, isolation_level=None)
    if query_only:
        conn.execute("PRAGMA query_only=1")
    load_tokenizer(conn, path)
    return conn


def connect_rw(path: Path, busy_timeout_s: float = BUSY_TIMEOUT_S) -> sqlite3.Connection:
    """A writer that refuses to create a missing database (``mode=rw``)."""
    conn = sqlite3.connect(uri(path, "rw"), uri=True, timeout=busy_timeout_s, isolation_level=None)
    conn.execute("PRAGMA foreign_keys=ON")
    load_tokenizer(conn, path)
    return conn


def cjk_library(db_path: Path) -> Path:
    """Where Hermes loads its CJK tokenizer from: ``<home>/lib/libfts5_cjk.so``."""
    return Path(db_path).parent.joinpath(*CJK_LIBRARY)


def load_tokenizer(conn: sqlite3.Connection, db_path: Path) -> bool:
    """Hermes's CJK tokenizer loaded into ``conn`` where its library is in the home, as Hermes
    loads it; False where it is not (:func:`tokenizer_problem` says why). Not loaded, nothing
    changes: what does not construct a table using it (``sqlite_master``, FTS5 shadow tables)
    still reads.
    """
    library = cjk_library(db_path)
    return library.exists() and _load(conn, library) is None


def _load(conn: sqlite3.Connection, library: Path) -> str | None:
    """``library`` loaded into ``conn``; else why not and what to do, as the end of a sentence
    on the library ("which ...")."""
    try:
        st = library.stat()
    except OSError:
        return "is missing (hermes-agent's native/fts5_cjk/build.sh builds it)"
    if st.st_uid not in (0, os.geteuid()) or st.st_mode & 0o002:
        return "is another user's or writable by anyone (the keeper loads no such code)"
    if not hasattr(conn, "enable_load_extension"):
        return (
            f"this Python ({sys.executable}) cannot load, its sqlite3 module having no extension loading"
            " (run the keeper with a Python that can load SQLite extensions, such as Debian's python3)"
        )
    try:
        conn.enable_load_extension(True)
        try:
            conn.load_extension(str(library))
        finally:
            conn.enable_load_extension(False)
    except sqlite3.Error as exc:
        return f"could not be loaded: {exc} (rebuild it for this machine)"
    return None


def tokenizer_problem(db_path: Path) -> str | None:
    """Why this process cannot use the CJK tokenizer of ``db_path``'s home (None: it can), as
    :func:`_load` says it, or a library that registers no tokenizer of that name."""
    conn = sqlite3.connect(":memory:")
    try:
        problem = _load(conn, cjk_library(db_path))
        if problem is None:
            conn.execute(f"CREATE VIRTUAL TABLE temp.t USING fts5(x, tokenize='{CJK_TOKENIZER}')")
        return problem
    except sqlite3.Error as exc:
        return (
            f"registered no {CJK_TOKENIZER} tokenizer: {exc} (rebuild it from hermes-agent's native/fts5_cjk)"
        )
    finally:
        conn.close()


def connect_file(
    path: Path,
    mode: str = "rwc",
    timeout: float = 5.0,
    isolation_level: str | None = None,
    check_same_thread: bool = True,
) -> sqlite3.Connection:
    """A connection to one of the keeper's own files (history, caches, the archive, copies it made).

    ``mode`` is SQLite's: ``ro``, ``rw`` (the file must exist) or ``rwc`` (created when missing).
    The path is the caller's, checked through the filesystem door where it is in a home; the
    other arguments are :func:`sqlite3.connect`'s (its defaults, but autocommit).
    """
    return sqlite3.connect(
        uri(path, mode),
        uri=True,
        timeout=timeout,
        isolation_level=isolation_level,
        check_same_thread=check_same_thread,
    )


@contextmanager
def write_txn(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """``BEGIN IMMEDIATE`` ... ``COMMIT``: the write lock is taken up front, like Hermes does.

    A COMMIT that fails (busy in DELETE mode, where it waits for readers) rolls back too, so
    the connection never stays inside a transaction.
    """
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:  # an interrupted or SQLITE_FULL statement already rolled it back
            conn.execute("ROLLBACK")
        raise


def id_steps(
    conn: sqlite3.Connection, table: str, low: int | None = None, high: int | None = None
) -> Iterator[tuple[int, int]]:
    """Ranges ``(first, last)`` of ``table``'s integer ``id`` covering ``low..high`` (default: all),
    each sized from the time the caller's read of the one before took to about
    :data:`STEP_READ_MS`. In a rollback-journal database a reader blocks every commit: one
    statement over a table of millions of rows held Hermes's writes 0.5 s at 2 GB, 1.9 s cold.
    """
    # (min and max in one statement scan the table; apart, each is one b-tree descent)
    first = conn.execute(f"SELECT min(id) FROM {table}").fetchone()[0]
    last = conn.execute(f"SELECT max(id) FROM {table}").fetchone()[0]
    if first is None:
        return
    low = first if low is None else max(low, first)
    high = last if high is None else min(high, last)
    rows = FIRST_STEP_ROWS
    while low <= high:
        t0 = time.perf_counter()
        yield low, min(high, low + rows - 1)
        took_ms = (time.perf_counter() - t0) * 1000
        low += rows
        rows = max(100, min(rows * 4, int(rows * STEP_READ_MS / max(took_ms, 0.1))))


@contextmanager
def read_txn(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """One consistent snapshot for several SELECTs (WAL readers never block writers)."""
    conn.execute("BEGIN")
    try:
        yield conn
    finally:
        conn.execute("COMMIT")


def checkpoint_passive(conn: sqlite3.Connection) -> tuple[int, int, int]:
    """PASSIVE checkpoint: copies what it can without waiting for or blocking anyone."""
    row = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
    return tuple(row) if row else (0, 0, 0)


@contextmanager
def time_limit(conn: sqlite3.Connection, ms: float | None) -> Iterator[None]:
    """Abort a statement still running after ``ms`` (SQLite rolls its transaction back)."""
    if ms is None:
        yield
        return
    deadline = time.perf_counter() + ms / 1000.0
    conn.set_progress_handler(lambda: time.perf_counter() > deadline, 1000)
    try:
        yield
    finally:
        conn.set_progress_handler(None, 0)


@contextmanager
def interrupt_after(conn: sqlite3.Connection, budget_s: float | None) -> Iterator[None]:
    """``conn.interrupt()`` once ``budget_s`` has passed (None: never), for a read of every page.

    A progress handler cannot bound one: ``quick_check`` is a single VDBE opcode. The statement
    then fails with ``interrupted`` (:func:`was_interrupted`); a read transaction around it stays.
    """
    timer = threading.Timer(budget_s, conn.interrupt) if budget_s is not None else None
    if timer:
        timer.start()
    try:
        yield
    finally:
        if timer:
            timer.cancel()


def was_interrupted(exc: BaseException) -> bool:
    return isinstance(exc, sqlite3.OperationalError) and "interrupted" in str(exc)
