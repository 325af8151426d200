"""Which engine for the archive's search index: SQLite FTS5 (used), DuckDB, tantivy, same data.

Takes the archive of bench/archive_search.py (``--sessions``, built once and cached), pulls out
each entry's searchable text (what ``query.searchable_fields`` gives, the text every engine
indexes; the time to pull it out is printed apart, every engine pays it), and for each engine
prints its index build time, its size on disk and, median of 3, the time of the three searches
of issue 37 (a common word, a rare one, a text no session holds) plus a phrase of two common
words: the newest 51 matching entries (``archive search``'s default ``--limit 50`` and the one
that says "more than 50") and the count of matching entries.

- **SQLite FTS5** (what ``archive/index.py`` keeps): trigram, contentless, ``detail=none``;
  it only narrows, so the figure that counts is the keeper's own ``search()``, confirm included.
- **DuckDB**: the text in a DuckDB table and in a zstd Parquet file, searched with
  ``contains(lower(text), ...)``: DuckDB's ``fts`` extension is not in the wheel and cannot be
  downloaded offline (the error is printed), and it is a word index (stemmed BM25), not a
  substring search.
- **tantivy**: words (its default tokenizer, with positions: a phrase query), a word index with a
  different meaning (``kubernetes`` does not find ``kubernetes-operator``'s prefix the same way
  a substring search does); and trigrams without positions (``basic``: narrows as ours does).

An engine that is not importable is skipped, saying why: the keeper's venv does not carry them.
Run them from a private venv's packages, e.g.::

    python3 -m venv /tmp/venv-engines && /tmp/venv-engines/bin/pip install duckdb tantivy
    PYTHONPATH=src:/tmp/venv-engines/lib/python3.11/site-packages \\
        .venv/bin/python bench/search_engines.py --sessions 50000
"""

from __future__ import annotations

import argparse
import importlib
import shutil
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from archive_search import build, median_s  # noqa: E402

from hermes_keeper.archive.index import trigram_query  # noqa: E402
from hermes_keeper.archive.query import search, searchable_fields  # noqa: E402
from hermes_keeper.archive.store import Archive  # noqa: E402

QUERIES = ("kubernetes", "20261", "no-such-word-anywhere", "weather summary")
SHOWN = 51


def load(name: str):
    """The engine's module, or None after saying why it is skipped."""
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        print(f"{name}: skipped, not importable here ({exc})")
        return None


def folder_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in ([path] if path.is_file() else path.rglob("*")) if p.is_file())


def extract(store: Archive) -> list[tuple[int, float, str]]:
    """(entry, last activity, searchable text) of every entry, as the index holds it."""
    return [
        (
            e.entry,
            e.last_activity or 0.0,
            "\n".join(f for m in orjson.loads(raw)["messages"] for f in searchable_fields(m)),
        )
        for e, raw in store.payloads()
    ]


def report(name: str, built: float, size: int, queries: dict) -> None:
    print(f"{name}: built in {built:.1f} s, {size / 1e6:.1f} MB on disk")
    for query, (secs, newest, count) in queries.items():
        print(f"    {query!r:24} {secs * 1000:8.1f} ms  newest {len(newest):>2}, {count} entries")


def timed(fn) -> tuple[float, tuple]:
    secs, (newest, count) = median_s(fn)
    return secs, newest, count


def fts5(docs, work: Path, store: Archive) -> None:
    """Ours at the engine level (candidates, ordered, counted: a superset), then the keeper's search."""
    conn = sqlite3.connect(work / "fts5.db")
    conn.executescript(
        "CREATE TABLE doc (docid INTEGER PRIMARY KEY, last_activity REAL);"
        "CREATE INDEX doc_recent ON doc(last_activity DESC);"
        "CREATE VIRTUAL TABLE body USING fts5(text, content='', detail=none, tokenize='trigram');"
    )
    t0 = time.perf_counter()
    with conn:
        conn.executemany("INSERT INTO doc VALUES (?, ?)", ((d[0], d[1]) for d in docs))
        conn.executemany("INSERT INTO body(rowid, text) VALUES (?, ?)", ((d[0], d[2]) for d in docs))
    built = time.perf_counter() - t0
    match = "docid IN (SELECT rowid FROM body WHERE body MATCH ?)"

    def query(text):
        q = trigram_query(text)
        newest = conn.execute(
            f"SELECT docid FROM doc WHERE {match} ORDER BY last_activity DESC LIMIT ?", (q, SHOWN)
        )
        return [r[0] for r in newest], conn.execute(
            f"SELECT count(*) FROM doc WHERE {match}", (q,)
        ).fetchone()[0]

    report(
        "SQLite FTS5 trigram detail=none (candidates: a superset)",
        built,
        folder_bytes(work / "fts5.db"),
        {q: timed(lambda q=q: query(q)) for q in QUERIES},
    )
    conn.close()
    search(store, QUERIES[0])  # its own index, built or brought up to date

    def keeper(text):
        r = search(store, text, limit=SHOWN - 1)
        return [h.entry.entry for h in r.hits], f"{'' if r.complete else 'more than '}{len(r.hits)}"

    print("  the keeper's archive search (index + confirm in the payloads, --limit 50, warm):")
    for q in QUERIES:
        secs, newest, count = timed(lambda q=q: keeper(q))
        print(f"    {q!r:24} {secs * 1000:8.1f} ms  {count} sessions")


def duck(docs, work: Path) -> None:
    duckdb = load("duckdb")
    if duckdb is None:
        return
    con = duckdb.connect(str(work / "text.duckdb"))
    try:
        con.execute("INSTALL fts; LOAD fts")
        print("duckdb: the fts extension installed")
    except duckdb.Error as exc:
        print(f"duckdb {duckdb.__version__}: no fts extension offline: {str(exc).splitlines()[0][:160]}")
    lines = work / "docs.ndjson"
    lines.write_bytes(
        b"\n".join(orjson.dumps({"entry": e, "last_activity": a, "text": t}) for e, a, t in docs)
    )
    t0 = time.perf_counter()
    con.execute(f"CREATE TABLE t AS SELECT * FROM read_json('{lines}', format='newline_delimited')")
    con.execute("CHECKPOINT")
    built = time.perf_counter() - t0
    parquet = work / "text.parquet"
    t0 = time.perf_counter()
    con.execute(f"COPY t TO '{parquet}' (FORMAT parquet, COMPRESSION zstd)")
    exported = time.perf_counter() - t0

    def query(source, text):
        where = f"FROM {source} WHERE contains(lower(text), ?)"
        newest = con.execute(
            f"SELECT entry {where} ORDER BY last_activity DESC LIMIT {SHOWN}", [text.lower()]
        )
        return [r[0] for r in newest.fetchall()], con.execute(
            f"SELECT count(*) {where}", [text.lower()]
        ).fetchone()[0]

    report(
        "DuckDB table, contains(lower(text)) (exact)",
        built,
        folder_bytes(work / "text.duckdb"),
        {q: timed(lambda q=q: query("t", q)) for q in QUERIES},
    )
    report(
        "DuckDB over zstd Parquet (exact)",
        exported,
        folder_bytes(parquet),
        {q: timed(lambda q=q: query(f"'{parquet}'", q)) for q in QUERIES},
    )
    con.close()


def tantivy_engines(docs, work: Path) -> None:
    tantivy = load("tantivy")
    if tantivy is None:
        return
    trigrams = (
        tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.ngram(3, 3, False))
        .filter(tantivy.Filter.lowercase())
        .build()
    )
    for name, tokenizer, option in (
        ("words, positions", "default", "position"),
        ("trigrams, basic", "tri", "basic"),
    ):
        sb = tantivy.SchemaBuilder()
        sb.add_integer_field("entry", stored=True, fast=True)
        sb.add_float_field("last_activity", fast=True)
        sb.add_text_field("text", tokenizer_name=tokenizer, index_option=option)
        schema = sb.build()
        folder = work / f"tantivy-{tokenizer}"
        folder.mkdir()
        index = tantivy.Index(schema, path=str(folder))
        index.register_tokenizer("tri", trigrams)
        t0 = time.perf_counter()
        writer = index.writer(heap_size=200_000_000, num_threads=1)
        for e, a, t in docs:
            writer.add_document(tantivy.Document(entry=e, last_activity=a, text=t))
        writer.commit()
        writer.wait_merging_threads()
        built = time.perf_counter() - t0
        index.reload()
        searcher = index.searcher()

        def query(text, schema=schema, searcher=searcher, tokenizer=tokenizer):
            low = text.lower()
            if tokenizer == "default":
                words = [w for w in "".join(c if c.isalnum() else " " for c in low).split()]
                q = (
                    tantivy.Query.phrase_query(schema, "text", words)
                    if len(words) > 1
                    else tantivy.Query.term_query(schema, "text", words[0])
                )
            else:
                grams = sorted({low[i : i + 3] for i in range(len(low) - 2)})
                q = tantivy.Query.boolean_query(
                    [(tantivy.Occur.Must, tantivy.Query.term_query(schema, "text", g)) for g in grams]
                )
            found = searcher.search(q, limit=SHOWN, count=True, order_by_field="last_activity")
            return [searcher.doc(addr)["entry"][0] for _, addr in found.hits], found.count

        meaning = "word semantics" if tokenizer == "default" else "candidates: a superset"
        report(
            f"tantivy {name} ({meaning})",
            built,
            folder_bytes(folder),
            {q: timed(lambda q=q: query(q)) for q in QUERIES},
        )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sessions", type=int, default=10_000)
    args = ap.parse_args()
    path = build(args.sessions)
    with Archive(path, create=False) as store:
        t0 = time.perf_counter()
        docs = extract(store)
        print(
            f"{len(docs)} archived sessions, {sum(len(d[2]) for d in docs) / 1e6:.1f} M characters of"
            f" searchable text (pulled out of the archive in {time.perf_counter() - t0:.1f} s;"
            " every engine below starts from it)"
        )
        work = Path(tempfile.mkdtemp(prefix="search-engines-"))
        try:
            fts5(docs, work, store)
            duck(docs, work)
            tantivy_engines(docs, work)
        finally:
            shutil.rmtree(work)


if __name__ == "__main__":
    main()
