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

import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path

import orjson

from hermes_keeper.archive.store import Archive
from hermes_keeper.fs import SQLITE_SIDES, HomeFS
from hermes_keeper.sqlite.connect import connect_file, write_txn

INDEX_NAME = "search-index.db"
#: Rebuild when more than this share of the indexed documents are gone from the archive.
DEAD_SHARE = 0.25
#: Entries indexed per transaction (about a second's work).
CHUNK = 2000
#: ``PRAGMA user_version`` of the layout below; an index of another layout is made anew.
LAYOUT = 2
#: The entry's columns a search filters and orders by (``query.Filters.where`` runs on ``doc``
#: as on the archive): the candidates come out of the index in the output's order, so a search
#: reads payloads only until it has its hits. None of them changes in place in the archive.
META = ("session_id", "source", "title", "started_at", "last_activity")
_SCHEMA = f"""
DROP TABLE IF EXISTS doc;
DROP TABLE IF EXISTS state;
DROP TABLE IF EXISTS body;
CREATE TABLE doc (
    docid INTEGER PRIMARY KEY AUTOINCREMENT, entry INTEGER NOT NULL UNIQUE, sha256 TEXT NOT NULL,
    damaged INTEGER NOT NULL, session_id TEXT NOT NULL, source TEXT NOT NULL, title TEXT,
    started_at REAL, last_activity REAL
);
CREATE INDEX doc_recent ON doc(last_activity DESC, session_id, entry DESC);
CREATE TABLE state (key TEXT PRIMARY KEY, value);
CREATE VIRTUAL TABLE body USING fts5(text, content='', detail=none, tokenize='trigram');
PRAGMA user_version = {LAYOUT}
"""
#: What the index holds of a message: the fields a search looks in (``query.searchable_fields``,
#: passed in: the query sits above this module).
Fields = Callable[[dict], list[str]]


def _alike(c: str) -> bool:
    """``c`` folds to one same character in Python and in FTS5: ASCII, or without case (CJK,
    digits, punctuation). Other letters fold differently (``ß``, Cherokee)."""
    return c.isascii() or c.lower() == c.upper()


def grams(text: str) -> set[str]:
    """The trigrams of ``text`` (lower-cased) made of :func:`_alike` characters only: every text
    holding ``text`` holds them, in the index as in Python (``ÜNKNOWN``: ``nkn``, ``kno``, ...)."""
    return {text[i : i + 3].lower() for i in range(len(text) - 2) if all(map(_alike, text[i : i + 3]))}


def indexable(text: str) -> bool:
    """The index can narrow a search for ``text``: it has three :func:`_alike` characters in a
    row; a shorter text, or one of other letters only, is searched by scanning."""
    return bool(grams(text))


def trigram_query(text: str) -> str:
    """FTS5's query for ``text``: each of its :func:`grams` as its own phrase, all required."""
    return " AND ".join('"' + g.replace('"', '""') + '"' for g in sorted(grams(text)))


class SearchIndex:
    """``keeper/search-index.db`` (0600): brought up to date with the archive before each search."""

    def __init__(self, keeper_dir: Path, fields: Fields):
        keeper_dir = Path(keeper_dir)
        self.path = HomeFS(keeper_dir.parent).sqlite_file(keeper_dir.name, INDEX_NAME, create=True)
        self.fields = fields
        self.conn = connect_file(self.path, timeout=2)
        try:
            self.conn.execute("PRAGMA journal_mode=WAL")
            if self._layout() != LAYOUT:  # new, or an older layout
                with write_txn(self.conn):
                    if self._layout() != LAYOUT:  # another search may have made it meanwhile
                        for statement in _SCHEMA.split(";"):
                            self.conn.execute(statement)
        except sqlite3.DatabaseError:
            self.conn.close()
            raise

    def close(self) -> None:
        self.conn.close()

    def candidates(self, store: Archive, text: str) -> set[int]:
        """Entries of ``store`` that may contain ``text`` (:func:`indexable` only), after indexing
        what the archive gained since the last search; damaged payloads always (the search lists
        them, as the scan does)."""
        return set(self.ordered(store, text))

    def ordered(self, store: Archive, text: str, where: tuple[str, tuple] = ("", ())) -> Iterator[int]:
        """:meth:`candidates` chosen and ordered by ``where`` (``query.Filters.where``: its clauses
        and ORDER BY, run on the index's copy of the entries' columns), read as they are taken: a
        search that stops at its limit reads a few of a common word's 50,000 (a list of them all
        was half of such a search at 50,000 sessions). Read them before :meth:`close`."""
        self.refresh(store)
        sql = (
            "SELECT entry FROM (SELECT * FROM doc WHERE damaged OR docid IN"
            f" (SELECT rowid FROM body WHERE body MATCH ?)) {where[0]}"
        )
        return (entry for (entry,) in self.conn.execute(sql, (trigram_query(text), *where[1])))

    def count(self, where: tuple[str, tuple] = ("", ())) -> int:
        """How many entries ``where`` chooses (after :meth:`candidates`: as the archive would say)."""
        return self.conn.execute(f"SELECT count(*) FROM doc {where[0]}", where[1]).fetchone()[0]

    def refresh(self, store: Archive) -> int:
        """Index every entry of ``store`` the index does not hold (by entry and sha256), forget
        the ones it no longer has; returns how many were indexed. Nothing is read but the
        archive's fingerprint when it has not changed. A damaged payload is held as such, with
        no text.

        A transaction per :data:`CHUNK` entries, each diffing the archive afresh under the
        index's lock: a first build of 50,000 sessions (tens of seconds) that is interrupted
        keeps what it did, and another search waits for one chunk, not the whole build."""
        if self._state("fingerprint") == store.fingerprint():
            return 0
        added, seen = 0, (None, set())
        while True:
            with write_txn(self.conn):
                mark = store.fingerprint()  # before the diff: a change after it is seen next time
                if self._state("fingerprint") == mark:  # another search brought it up to date
                    return added
                if seen[0] != mark:  # the archive changed since the last chunk (or this is the first)
                    seen = (mark, store.hashes())
                new = sorted(self._forget(seen[1]))
                done = self._add(store, new[:CHUNK]) if new else 0
                if done == len(new):  # all there is: up to date with the archive as it was at ``mark``
                    self.conn.execute("INSERT OR REPLACE INTO state VALUES ('fingerprint', ?)", (mark,))
                    return added + done
            if not done:  # dropped from the archive meanwhile: the next search sees them gone
                return added
            added += done

    def _forget(self, live: set[tuple[int, str]]) -> set[int]:
        """Drop the documents of entries the archive no longer has (all of them, when that
        leaves too many unreachable trigrams); the entries it has and the index does not."""
        held = set(self.conn.execute("SELECT entry, sha256 FROM doc"))
        dead = held - live
        # Contentless FTS5 cannot forget a document without its text: a dropped entry's trigrams
        # stay, unreachable (no doc row), until they are too many and the index starts again.
        orphans = (self._state("orphans") or 0) + len(dead)
        if orphans > DEAD_SHARE * (len(held) - len(dead) + orphans):
            self.conn.execute("DELETE FROM doc")
            self.conn.execute("INSERT INTO body(body) VALUES ('delete-all')")
            held, dead, orphans = set(), set(), 0
        self.conn.executemany("DELETE FROM doc WHERE entry = ?", [(entry,) for entry, _ in dead])
        self.conn.execute("INSERT OR REPLACE INTO state VALUES ('orphans', ?)", (orphans,))
        return {entry for entry, _ in live - held}

    def _add(self, store: Archive, entries: list[int]) -> int:
        """Index these entries (sorted); how many the archive still had."""
        wanted = set(entries)
        cols = ", ".join(META)
        done = 0
        # Only the rows between the lowest and the highest are read off disk.
        for entry, raw in store.payloads(
            "WHERE entry BETWEEN ? AND ?", (entries[0], entries[-1]), keep=lambda e: e.entry in wanted
        ):
            docid = self.conn.execute(
                f"INSERT INTO doc(entry, sha256, damaged, {cols}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (entry.entry, entry.sha256, raw is None, *(getattr(entry, c) for c in META)),
            ).lastrowid
            if raw is not None:
                text = "\n".join(f for m in orjson.loads(raw)["messages"] for f in self.fields(m))
                self.conn.execute("INSERT INTO body(rowid, text) VALUES (?, ?)", (docid, text))
            done += 1
        return done

    def _state(self, key: str):
        row = self.conn.execute("SELECT value FROM state WHERE key = ?", (key,)).fetchone()
        return row[0] if row else None

    def _layout(self) -> int:
        return self.conn.execute("PRAGMA user_version").fetchone()[0]


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
