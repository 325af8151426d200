"""A search index beside the archive: which entries may hold a text.

FTS5's trigram tokenizer, contentless, with ``detail=none``: about a third of the message text
on disk (the full trigram index with positions was 4.5 times the archive, ``docs/archive.md``).
Without positions a query is the AND of its trigrams, so the index only narrows a search: every
candidate is confirmed in its own payload (``query.match_payload``), and a search answers
exactly what the scan of every payload answers, only sooner.

It is a cache, never a source of truth: it holds (entry, sha256) pairs, so an entry the archive
dropped or rewrote is simply not a candidate any more, and it is rebuilt from the archive when
it is missing, damaged, or mostly made of entries the archive no longer has. A home it cannot be
written in (read-only, a full disk) searches by scanning, as before.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from pathlib import Path

from hermes_keeper.archive.store import Archive
from hermes_keeper.fs import SQLITE_SIDES, HomeFS
from hermes_keeper.sqlite.connect import connect_file, write_txn

INDEX_NAME = "search-index.db"
#: Trigrams: a shorter text has none, and is searched by scanning.
MIN_CHARS = 3
#: Rebuild when more than this share of the indexed documents are gone from the archive.
DEAD_SHARE = 0.25
_SCHEMA = """
CREATE TABLE IF NOT EXISTS doc (
    docid INTEGER PRIMARY KEY, entry INTEGER NOT NULL, sha256 TEXT NOT NULL, damaged INTEGER NOT NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS doc_entry ON doc(entry, sha256);
CREATE VIRTUAL TABLE IF NOT EXISTS body USING fts5(text, content='', detail=none, tokenize='trigram');
"""
#: What the index holds of a message: the fields a search looks in (``query.searchable_fields``,
#: passed in: the query sits above this module).
Fields = Callable[[dict], list[str]]


def indexable(text: str) -> bool:
    """The index answers ``text`` exactly as the scan does: three characters or more, each ASCII
    or without case (CJK, digits, punctuation). Other letters fold differently in Python and in
    FTS5, so those searches scan."""
    return len(text) >= MIN_CHARS and all(c.isascii() or c.lower() == c.upper() for c in text)


def trigram_query(text: str) -> str:
    """FTS5's query for ``text``: each distinct trigram as its own phrase, all required."""
    low = text.lower()
    grams = sorted({low[i : i + 3] for i in range(len(low) - 2)})
    return " AND ".join('"' + g.replace('"', '""') + '"' for g in grams)


class SearchIndex:
    """``keeper/search-index.db`` (0600): brought up to date with the archive before each search."""

    def __init__(self, keeper_dir: Path, fields: Fields):
        keeper_dir = Path(keeper_dir)
        self.path = HomeFS(keeper_dir.parent).sqlite_file(keeper_dir.name, INDEX_NAME, create=True)
        self.fields = fields
        self.held = 0
        self.conn = connect_file(self.path, timeout=2)
        try:
            self.conn.execute("PRAGMA journal_mode=WAL")
            self.conn.executescript(_SCHEMA)
        except sqlite3.DatabaseError:
            self.conn.close()
            raise

    def close(self) -> None:
        self.conn.close()

    def candidates(self, store: Archive, text: str) -> set[int]:
        """Entries of ``store`` that may contain ``text`` (:func:`indexable` only), after indexing
        what the archive gained since the last search; damaged payloads always (the search lists
        them, as the scan does)."""
        self.refresh(store)
        sql = "SELECT doc.entry FROM body JOIN doc ON doc.docid = body.rowid WHERE body MATCH ?"
        found = {entry for (entry,) in self.conn.execute(sql, (trigram_query(text),))}
        return found | {entry for (entry,) in self.conn.execute("SELECT entry FROM doc WHERE damaged")}

    def refresh(self, store: Archive) -> int:
        """Index every entry of ``store`` the index does not hold (by entry and sha256); returns
        how many. A damaged payload is held as such, with no text."""
        live = store.hashes()
        self.held = len(live)  # what the archive holds now: the share a search's candidates are of
        held = set(self.conn.execute("SELECT entry, sha256 FROM doc"))
        if held and len(held - live) > DEAD_SHARE * len(held):
            self._clear()
            held = set()
        new = live - held
        if not new:
            return 0
        wanted = {entry for entry, _ in new}
        with write_txn(self.conn):
            # New entries are the highest numbers: only rows from the lowest one are read off disk.
            since = ("WHERE entry >= ?", (min(wanted),))
            for entry, raw in store.payloads(*since, keep=lambda e: e.entry in wanted):
                docid = self.conn.execute(
                    "INSERT INTO doc(entry, sha256, damaged) VALUES (?, ?, ?)",
                    (entry.entry, entry.sha256, raw is None),
                ).lastrowid
                if raw is not None:
                    text = "\n".join(f for m in json.loads(raw)["messages"] for f in self.fields(m))
                    self.conn.execute("INSERT INTO body(rowid, text) VALUES (?, ?)", (docid, text))
        return len(new)

    def _clear(self) -> None:
        """Start again: contentless FTS5 cannot forget a document without its text."""
        with write_txn(self.conn):
            self.conn.execute("DELETE FROM doc")
            self.conn.execute("INSERT INTO body(body) VALUES ('delete-all')")


def open_index(store: Archive, fields: Fields) -> SearchIndex | None:
    """The archive's search index, or None where it cannot be kept now (a read-only home, a full
    disk, another search holding it: the search then scans). An index file SQLite cannot read is
    a cache gone bad: it is made anew."""
    keeper_dir = store.path.parent
    for attempt in range(2):
        try:
            return SearchIndex(keeper_dir, fields)
        except (OSError, sqlite3.OperationalError):
            return None
        except sqlite3.DatabaseError:  # not a database, malformed
            if attempt:
                return None
            door = HomeFS(keeper_dir.parent)
            for side in ("", *SQLITE_SIDES):
                door.unlink(keeper_dir.name, INDEX_NAME + side)
    return None
