"""``archive search``: the text of pruned conversations, found again with a snippet."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from hermes_keeper.archive.query import Filters, needles, search, snippet
from hermes_keeper.archive.store import Archive
from hermes_keeper.cli import main
from tests import archive_home as ah

QUERIES = ["walrus", "narwhal", "weather", "tusks", "web_search"]


@pytest.fixture(scope="module")
def searched(tmp_path_factory, hermes):
    """A pruned home, and the pruned sessions Hermes's own search_messages found before the prune."""
    home = ah.build(hermes, tmp_path_factory.mktemp("search") / "home")
    found = hermes.run(home, [{"op": "call", "method": "search_messages", "args": [q]} for q in QUERIES])
    before = {
        q: {m["session_id"] for m in hits} & set(ah.PRUNED) for q, hits in zip(QUERIES, found, strict=True)
    }
    ah.prune(home)
    return home, before


def _search(home, *args):
    res = CliRunner().invoke(main, ["archive", "search", *args, "--home", str(home), "--json"])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)["profiles"][0]


@pytest.mark.parametrize("query", QUERIES)
def test_finds_what_hermes_found_before_the_prune(searched, query):
    home, before = searched
    out = _search(home, query)
    assert before[query], query  # the query means something in this home
    assert {h["session"]["session_id"] for h in out["hits"]} == before[query]
    assert out["scanned"] == len(ah.PRUNED) and out["damaged"] == []


@pytest.mark.parametrize(
    "query, session, fragment",
    [
        ("WALRUS TUSKS", "old_a", "Tell me about walrus tusks"),
        ("ÜNÏCØDÉ", "old_a", 'ünïcødé "quoted"'),  # non-ASCII, case-folded
        ('ünïcødé "quoted"', "old_a", "haul out"),  # quotes are JSON-escaped in the payload
        ("walrus photo", "old_a", "look at this walrus photo"),  # inside structured content
        ('{"q": "walrus"}', "old_a", "web_search"),  # inside tool_calls JSON (escaped twice)
        ("Second line", "old_a", "one metre. Second line."),  # a newline folded in the snippet
    ],
)
def test_matching_and_snippets(searched, query, session, fragment):
    out = _search(searched[0], query)
    assert [h["session"]["session_id"] for h in out["hits"]] == [session]
    assert fragment in out["hits"][0]["snippet"]


def test_rewound_messages_are_found_and_marked(searched):
    (hit,) = _search(searched[0], "seals")["hits"]
    assert hit["session"]["session_id"] == "old_a" and hit["inactive"] is True


def test_filters_limit_and_text_output(searched):
    home = searched[0]
    assert {h["session"]["session_id"] for h in _search(home, "narwhal", "--source", "subagent")["hits"]} == {
        "old_d"
    }
    assert _search(home, "weather", "--source", "cli")["hits"] == []
    assert _search(home, "narwhal", "--since", "35d")["hits"] == []
    limited = _search(home, "narwhal", "--limit", "1")  # it stops at the second match: "more than 1"
    assert limited["total"] == 2 and limited["complete"] is False and len(limited["hits"]) == 1
    assert _search(home, "narwhal", "--limit", "3")["complete"] is True
    text = (
        CliRunner().invoke(main, ["archive", "search", "narwhal", "--limit", "1", "--home", str(home)]).output
    )
    assert "more than 1 of 5 archived sessions match, showing the newest 1" in text
    text = CliRunner().invoke(main, ["archive", "search", "tusks", "--home", str(home)]).output
    assert "old_a [cli]" in text and "walrus tusks" in text and "1 of 5 archived sessions match" in text


def test_damaged_rows_are_reported_not_searched(tmp_path):
    with Archive(tmp_path / "archive.db") as store:
        store.put([ah.payload("a", "cli", 1.7e9, texts=("needle here",)), ah.payload("b", "cli", 1.7e9 + 9)])
        blob = bytearray(
            store.files[0]
            .conn.execute("SELECT payload FROM archived_sessions WHERE session_id='a'")
            .fetchone()[0]
        )
        blob[-3] ^= 0xFF
        store.files[0].conn.execute(
            "UPDATE archived_sessions SET payload = ? WHERE session_id = 'a'", (bytes(blob),)
        )
        result = search(store, "needle", Filters())
    assert result.damaged == ["a"] and result.hits == [] and result.scanned == 2


def test_empty_query_is_refused(searched):
    res = CliRunner().invoke(main, ["archive", "search", "  ", "--home", str(searched[0])])
    assert res.exit_code == 2 and "empty" in res.output


@pytest.mark.parametrize(
    "text, expected",
    [
        ("Docker", ("docker",)),
        ('say "hi"', ('say "hi"', 'say \\"hi\\"', 'say \\\\\\"hi\\\\\\"')),
        ("ü", ("ü", "\\\\u00fc")),
    ],
)
def test_needles(text, expected):
    assert needles(text) == expected


@pytest.mark.parametrize(
    "text, needle, width, expected",
    [
        ("abc NEEDLE def", "needle", 3, "…bc NEEDLE de…"),
        ("needle", "needle", 10, "needle"),
        ("a\n\nb needle", "needle", 60, "a b needle"),
    ],
)
def test_snippet(text, needle, width, expected):
    assert snippet(text, needle, width) == expected
