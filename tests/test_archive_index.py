"""The archive's search index (``archive/index.py``) narrows a search and never changes its answer.

Every search is run twice, with the index and by scanning every payload (``use_index=False``):
same hits in the same order, same totals (and whether they are complete), same damaged rows,
with limits and filters. Then what makes a cache go wrong: entries added, dropped and rewritten
after it was built, a damaged index file or one of an older layout, a home it cannot be written
in, a lock held by another search. And what makes it fast at 50,000 sessions: a common word
reads only the payloads it shows, an unchanged archive is not diffed.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import stat

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hermes_keeper import demo
from hermes_keeper.archive import index as ix
from hermes_keeper.archive.query import Filters, search
from hermes_keeper.archive.store import Archive, archive_paths
from hermes_keeper.home import select_profiles
from hermes_keeper.journal import read_journal
from tests import archive_home as ah
from tests.conftest import tiny_disk

TEXTS = [
    "Walrus tusks are teeth",
    "the WEATHER summary for Oslo",
    "kubernetes pod crash-loop: OOMKilled",
    'a "quoted" word and a back\\slash',
    "一个海象的长牙",  # CJK: no case, the index answers it
    "naïve café déjà vu",  # accented: scanned
    "line one\nline two",
    "Résumé of the ΣΊΣΥΦΟΣ myth",
    "the Ꭰ syllabary",  # Cherokee: Python and FTS5 fold it differently, so searches for it scan
]
QUERIES = [
    "walrus",
    "WALRUS",
    "tusks are",
    "weather summary",
    "OOMKilled",
    "crash-loop",
    '"quoted"',
    "back\\slash",
    "海象的",
    "naïve",
    "café",
    "one\nline",
    "no-such-text",
    "xy",
    "Σίσυφος",
    "ssa",
    "ꭰ syl",
    "turn",  # every session holds it
    "turn 3",
    "RÉSUMÉ of the",
    "ÜNKNOWN",
]
FILTERS = [
    Filters(sources=("cli",)),
    Filters(since=1.7e9 + 10 * 3600, until=1.7e9 + 30 * 3600),
    Filters(title="t1"),
    Filters().addressed(("s3", "s5", "#7")),
]


def _answer(r) -> tuple:
    hits = [(h.entry.entry, h.message_id, h.snippet, h.matches) for h in r.hits]
    return hits, r.total, r.complete, r.scanned, r.damaged


def _same(store, text, filters=None, limit=50):
    filters = filters or Filters()
    indexed = search(store, text, filters, limit)
    assert _answer(indexed) == _answer(search(store, text, filters, limit, use_index=False)), text
    return indexed


@pytest.fixture
def store(tmp_path):
    keeper = tmp_path / "home" / "keeper"
    keeper.parent.mkdir()
    with Archive.for_home(keeper) as store:
        store.put(
            [
                ah.payload(
                    f"s{i}",
                    "cli" if i % 2 else "cron",
                    1.7e9 + i * 3600,
                    title=f"T{i % 3}",
                    texts=(TEXTS[i % len(TEXTS)], f"turn {i}"),
                )
                for i in range(40)
            ]
        )
        # s3 archived again (a second entry, the same times) and a session as recent as s20.
        store.put([ah.payload("s3", "cli", 1.7e9 + 3 * 3600, texts=("walrus", "turn 3 again"))])
        store.put([ah.payload("s20b", "cron", 1.7e9 + 20 * 3600, texts=("turn 20b",))])
        yield store


@pytest.mark.parametrize("query", QUERIES)
def test_the_index_answers_exactly_what_the_scan_answers(store, query):
    _same(store, query)
    _same(store, query, limit=None)
    _same(store, query, limit=2)
    for filters in FILTERS:
        _same(store, query, filters, limit=3)


def test_the_search_stops_at_the_first_match_past_the_limit(store):
    everything = _same(store, "turn", limit=None)
    assert everything.total == 42 and everything.complete and len(everything.hits) == 42
    assert _same(store, "turn", limit=42).complete  # 42 shown, none left over
    shown = _same(store, "turn", limit=5)
    assert (shown.total, shown.complete) == (6, False)  # "more than 5"
    assert [h.entry.entry for h in shown.hits] == [h.entry.entry for h in everything.hits[:5]]


def test_a_common_word_reads_only_the_payloads_it_shows(store, monkeypatch):
    """At 50,000 sessions a word most of them hold must not decompress them all (bench/archive_search.py)."""
    search(store, "walrus")  # the index is built (reading every payload once)
    opened = []
    real = Archive._checked
    monkeypatch.setattr(
        Archive, "_checked", lambda self, sid, sha, blob: opened.append(sid) or real(self, sid, sha, blob)
    )
    result = search(store, "turn", limit=3)
    assert len(result.hits) == 3 and not result.complete
    assert sorted(opened) == ["s36", "s37", "s38", "s39"]  # the newest; the fourth says "more than 3"


def test_a_text_with_letters_folded_differently_is_narrowed_by_its_other_trigrams(store, monkeypatch):
    """``RÉSUMÉ of the``: ``É`` folds differently in FTS5, ``sum``, `` of``, ``the`` ... do not."""
    search(store, "walrus")
    opened = []
    real = Archive._checked
    monkeypatch.setattr(
        Archive, "_checked", lambda self, sid, sha, blob: opened.append(sid) or real(self, sid, sha, blob)
    )
    assert search(store, "RÉSUMÉ of the").total == 4
    assert sorted(opened) == ["s16", "s25", "s34", "s7"]  # a scan would open all 42


def test_an_unchanged_archive_is_not_diffed_again(store, monkeypatch):
    """Reading every (entry, sha256) of 50,000 entries costs more than a search should: the
    archive's fingerprint says whether anything changed."""
    search(store, "walrus")
    diffs = []
    real = Archive.hashes
    monkeypatch.setattr(Archive, "hashes", lambda self: diffs.append(1) or real(self))
    _same(store, "walrus")
    assert diffs == []
    store.put([ah.payload("late", "cli", 1.8e9, texts=("walrus again",))])
    assert _same(store, "walrus").hits[0].entry.session_id == "late"
    assert diffs == [1]


def test_an_interrupted_first_build_keeps_what_it_indexed(store, monkeypatch):
    """At 50,000 sessions the first build takes tens of seconds: a Ctrl-C must not throw it all away."""
    monkeypatch.setattr(ix, "CHUNK", 10)
    real, chunks = ix.SearchIndex._add, []

    def add(self, store, entries):
        chunks.append(len(entries))
        if len(chunks) == 3:
            raise KeyboardInterrupt
        return real(self, store, entries)

    monkeypatch.setattr(ix.SearchIndex, "_add", add)
    with pytest.raises(KeyboardInterrupt):
        search(store, "walrus")
    conn = sqlite3.connect(store.path.parent / ix.INDEX_NAME)
    assert conn.execute("SELECT count(*) FROM doc").fetchone()[0] == 20  # two chunks of ten kept
    chunks[:] = [0, 0, 0]  # no more interruptions
    assert _same(store, "walrus").total == 6
    assert chunks[3:] == [10, 10, 2]  # only the 22 left were indexed
    assert conn.execute("SELECT count(*) FROM doc").fetchone()[0] == 42
    conn.close()


def test_an_index_of_the_older_layout_is_made_anew(store):
    conn = sqlite3.connect(store.path.parent / ix.INDEX_NAME)
    conn.executescript(
        "CREATE TABLE doc (docid INTEGER PRIMARY KEY, entry INTEGER NOT NULL, sha256 TEXT NOT NULL,"
        " damaged INTEGER NOT NULL);"
        "CREATE VIRTUAL TABLE body USING fts5(text, content='', detail=none, tokenize='trigram');"
        "INSERT INTO doc VALUES (1, 1, 'x', 0);"
    )
    conn.close()
    assert _same(store, "walrus").total == 6
    conn = sqlite3.connect(store.path.parent / ix.INDEX_NAME)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == ix.LAYOUT
    assert conn.execute("SELECT count(*) FROM doc").fetchone()[0] == 42
    conn.close()


def test_the_index_is_a_private_file_beside_the_archive_and_not_part_of_it(store):
    search(store, "walrus")
    path = store.path.parent / ix.INDEX_NAME
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path not in archive_paths(store.path)


def test_only_candidates_are_decompressed(store, monkeypatch):
    search(store, "walrus")  # the index is built (reading every payload once)
    opened = []
    real = Archive._checked
    monkeypatch.setattr(
        Archive, "_checked", lambda self, sid, sha, blob: opened.append(sid) or real(self, sid, sha, blob)
    )
    result = search(store, "kubernetes")
    assert result.total == 5 and len(opened) == 5  # 5 of 42 entries hold the text; no other is opened
    assert result.scanned == 42


def test_entries_added_dropped_and_rewritten_after_the_index_was_built(store):
    assert _same(store, "narwhal").total == 0
    store.put([ah.payload("late", "cli", 1.8e9, texts=("a narwhal at last",))])
    assert [h.entry.session_id for h in _same(store, "narwhal").hits] == ["late"]
    dropped = [e.entry for e in store.entries() if e.session_id in ("s0", "s8")]
    store.files[0].delete(dropped)
    assert {h.entry.session_id for h in _same(store, "walrus").hits}.isdisjoint({"s0", "s8"})
    # An entry whose payload changed under the same number: its new text is found, the old is not.
    f = store.files[0]
    (entry,) = [e.entry for e in store.entries() if e.session_id == "late"]
    with f.conn:
        f.conn.execute("DELETE FROM archived_sessions WHERE entry = ?", (entry,))
    store.put([ah.payload("late", "cli", 1.8e9, texts=("an orca instead",))])
    assert _same(store, "narwhal").total == 0 and _same(store, "orca").total == 1


def test_an_index_mostly_of_dropped_entries_is_rebuilt(store):
    search(store, "walrus")
    store.files[0].delete([e.entry for e in store.entries()][:5])
    _same(store, "walrus")
    store.files[0].delete([e.entry for e in store.entries()][:25])
    _same(store, "walrus")
    conn = sqlite3.connect(store.path.parent / ix.INDEX_NAME)
    assert conn.execute("SELECT count(*) FROM doc").fetchone()[0] == 12  # started again, only the live ones
    assert conn.execute("SELECT value FROM state WHERE key = 'orphans'").fetchone()[0] == 0
    conn.close()


def test_a_damaged_index_file_is_made_anew(store):
    search(store, "walrus")
    path = store.path.parent / ix.INDEX_NAME
    path.write_bytes(b"not a database at all" * 100)
    for side in ("-wal", "-shm"):
        (store.path.parent / (ix.INDEX_NAME + side)).unlink(missing_ok=True)
    assert _same(store, "walrus").total == 6
    assert path.read_bytes().startswith(b"SQLite format 3")


def test_a_damaged_payload_is_listed_as_the_scan_lists_it(store):
    search(store, "walrus")  # indexed while whole
    f = store.files[0]
    (entry,) = [e.entry for e in store.entries() if e.session_id == "s0"]
    blob = bytearray(
        f.conn.execute("SELECT payload FROM archived_sessions WHERE entry = ?", (entry,)).fetchone()[0]
    )
    blob[-3] ^= 0xFF
    with f.conn:
        f.conn.execute("UPDATE archived_sessions SET payload = ? WHERE entry = ?", (bytes(blob), entry))
    assert _same(store, "walrus").damaged == ["s0"]
    # Damaged before it was ever indexed: listed too.
    (store.path.parent / ix.INDEX_NAME).unlink()
    assert _same(store, "tusks").damaged == ["s0"]


def _home(folder):
    (folder / "home").mkdir()
    return folder / "home"


def test_a_full_disk_means_a_scan_with_the_same_answer(tmp_path):
    """The index cannot grow on a full disk: the search scans, nothing fails, nothing is lost."""
    with tiny_disk(tmp_path / "disk", "4M") as disk, Archive.for_home(_home(disk) / "keeper") as store:
        store.put([ah.payload(f"s{i}", "cli", 1.7e9 + i, texts=(TEXTS[i % len(TEXTS)],)) for i in range(40)])
        search(store, "walrus")
        store.put(
            [
                ah.payload(f"n{i}", "cli", 1.8e9 + i, texts=("walrus " + os.urandom(3000).hex(),))
                for i in range(20)
            ]
        )
        filler = disk / "filler"
        with filler.open("wb") as f, contextlib.suppress(OSError):
            while True:
                f.write(os.urandom(1 << 16))
                f.flush()
        assert _same(store, "walrus").total == 25


def test_a_lock_held_by_another_search_means_a_scan_not_a_wait(store):
    search(store, "walrus")
    other = sqlite3.connect(store.path.parent / ix.INDEX_NAME)
    other.execute("BEGIN IMMEDIATE")
    try:
        store.put([ah.payload("new", "cli", 1.9e9, texts=("walrus again",))])  # the index must be written
        result = _same(store, "walrus")
        assert result.total == 7
    finally:
        other.rollback()
        other.close()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.text(alphabet=st.sampled_from('abcAB Xé海"\\\n-'), min_size=1, max_size=6).filter(lambda t: t.strip()),
    st.one_of(st.none(), st.integers(0, 8)),
)
def test_any_text_gets_the_scans_answer(store, text, limit):
    _same(store, text, limit=limit)


@pytest.mark.parametrize(
    "query", ["kubernetes", "\u212aubernetes", "istanbul", "stanbul", "STRASSE", "straße", "ünknown", "NKN"]
)
def test_letters_that_fold_oddly_get_the_scans_answer(tmp_path, query):
    """The Kelvin sign folds to ``k`` in Python and FTS5 alike, ``İ`` to two characters in Python,
    ``ß`` to itself (``ss`` only in casefold): the index narrows by trigrams both fold alike."""
    keeper = tmp_path / "home" / "keeper"
    keeper.parent.mkdir()
    texts = ["\u212aubernetes pods", "İstanbul trip", "Straße und STRASSE", "ÜNKNOWN error", "kubernetes"]
    with Archive.for_home(keeper) as store:
        store.put([ah.payload(f"s{i}", "cli", 1.7e9 + i, texts=(t,)) for i, t in enumerate(texts)])
        _same(store, query)


def test_the_nightly_run_leaves_the_archive_indexed(tmp_path, monkeypatch):
    """The run brings the index up to date after it archived: the next search builds nothing."""
    home = tmp_path / "home"
    demo.build_home(home, demo.generate(1_790_000_000.0, sessions=60))
    assert select_profiles(home)[0].run().prune.archived
    done = [r for r in read_journal(home / "keeper") if r.get("action") == "archive_indexed"]
    conn = sqlite3.connect(home / "keeper" / ix.INDEX_NAME)
    assert done and done[-1]["entries"] == conn.execute("SELECT count(*) FROM doc").fetchone()[0] > 0
    conn.close()
    monkeypatch.setattr(ix.SearchIndex, "_add", lambda *a: pytest.fail("the search indexed again"))
    store = Archive.for_home(home / "keeper")
    try:
        assert search(store, "the", Filters(), limit=1).hits
    finally:
        store.close()
