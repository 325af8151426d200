"""``archive list`` and ``archive show``: find a pruned conversation and read it."""

from __future__ import annotations

import json
from datetime import datetime

import pytest
from click.testing import CliRunner

from hermes_keeper.archive.query import Filters, list_entries, parse_when, render_conversation
from hermes_keeper.archive.store import Archive
from hermes_keeper.cli import main
from tests import archive_home as ah

T0 = 1_770_000_000.0  # 2026-02-02
DAY = ah.DAY


def _cli(*args):
    return CliRunner().invoke(main, ["archive", *args])


@pytest.fixture(scope="module")
def pruned_home(tmp_path_factory, hermes):
    home = ah.build(hermes, tmp_path_factory.mktemp("list") / "home")
    ah.prune(home)
    return home


@pytest.fixture
def store(tmp_path):
    rows = [
        ah.payload("c1", "cron", T0, texts=("a", "b", "c")),
        ah.payload("c2", "cron", T0 + 10 * DAY),
        ah.payload("t1", "telegram", T0 + 5 * DAY, title="Trip to Oslo"),
        ah.payload("t2", "cli", T0 + 20 * DAY, title="oslo notes"),
    ]
    with Archive(tmp_path / "keeper" / "archive.db") as s:
        s.put(rows)
        yield s


@pytest.mark.parametrize(
    "filters, ids",
    [
        (Filters(), ["t2", "c2", "t1", "c1"]),  # newest first
        (Filters(sources=("cron",)), ["c2", "c1"]),
        (Filters(sources=("cron", "cli")), ["t2", "c2", "c1"]),
        (Filters(since=T0 + 5 * DAY), ["t2", "c2", "t1"]),
        (Filters(until=T0 + 5 * DAY), ["c1"]),
        (Filters(since=T0 + DAY, until=T0 + 15 * DAY), ["c2", "t1"]),
        (Filters(title="OSLO"), ["t2", "t1"]),
        (Filters(title="oslo", sources=("telegram",)), ["t1"]),
        (Filters(ids=("c1", "t2", "nope")), ["t2", "c1"]),
    ],
)
def test_filters(store, filters, ids):
    assert [e.session_id for e in list_entries(store, filters)] == ids


def test_entries_carry_what_list_shows(store):
    (c1,) = list_entries(store, Filters(ids=("c1",)))
    assert (c1.source, c1.message_count, c1.started_at, c1.state) == ("cron", 3, T0, "archived")
    assert c1.last_activity == T0 + 60 and c1.stored_bytes > 0 and c1.raw_bytes > 0


@pytest.mark.parametrize(
    "text, end_of_day, expected",
    [
        ("2026-02-02", False, datetime(2026, 2, 2).timestamp()),
        ("2026-02-02", True, datetime(2026, 2, 3).timestamp()),
        ("2026-02-02T10:30", False, datetime(2026, 2, 2, 10, 30).timestamp()),
        ("2026-02-02T00:00:00Z", False, T0 - T0 % 86400),  # UTC midnight
        ("30d", False, T0 - 30 * DAY),
        ("12h", False, T0 - 12 * 3600),
        ("2w", False, T0 - 14 * DAY),
        ("3 days", False, T0 - 3 * DAY),  # as keeper.toml reads a duration (units.parse_duration)
        ("90m", False, T0 - 90 * 60),
    ],
)
def test_parse_when(text, end_of_day, expected):
    assert parse_when(text, now=T0, end_of_day=end_of_day) == pytest.approx(expected)


@pytest.mark.parametrize("bad", ["yesterday", "3 fortnights", "2026-13-01", ""])
def test_parse_when_refuses(bad):
    with pytest.raises(ValueError, match="not a date"):
        parse_when(bad, now=T0)


def test_list_cli(pruned_home):
    res = _cli("list", "--home", str(pruned_home), "--json")
    assert res.exit_code == 0, res.output
    rows = {r["session_id"]: r for r in json.loads(res.stdout)["profiles"][0]["sessions"]}
    assert set(rows) == set(ah.PRUNED)
    a = rows["old_a"]
    assert (a["source"], a["title"], a["message_count"], a["state"]) == ("cli", "Walrus facts", 8, "pruned")
    assert a["started_at"] == pytest.approx(ah.NOW - 30 * DAY) and a["raw_bytes"] > a["stored_bytes"] > 0

    def ids(*args):
        out = json.loads(_cli("list", "--home", str(pruned_home), "--json", *args).stdout)
        return {r["session_id"] for r in out["profiles"][0]["sessions"]}

    assert ids("--source", "cron") == {"cron_x"}
    assert ids("--source", "subagent", "--source", "cron") == {"old_d", "cron_x"}
    assert ids("--title", "walrus") == {"old_a"}
    assert ids("--since", "35d") == {"old_a", "cron_x"}
    assert ids("--until", "35d") == set(ah.CHAIN)
    table = _cli("list", "--home", str(pruned_home)).output
    assert "5 archived sessions" in table and "Walrus" in table and "subagent" in table
    bad = _cli("list", "--home", str(pruned_home), "--since", "someday")
    assert bad.exit_code == 2 and "not a date" in bad.output


def test_show_renders_the_conversation(pruned_home):
    res = _cli("show", "old_a", "--home", str(pruned_home))
    assert res.exit_code == 0, res.output
    out = res.output
    assert out.splitlines()[0] == "old_a  [cli]  Walrus facts"
    assert "2 inactive hidden (--inactive shows them)" in out
    assert "] user\n    Tell me about walrus tusks" in out
    assert '▸ tool call web_search({"q": "walrus"})' in out  # tool call folded to one line
    assert "] tool (web_search) ▸ 47 chars: Walrus tusks grow up to one metre. Second line." in out
    assert "look at this walrus photo [image_url]" in out  # structured content read as text
    assert "seals" not in out  # rewound: Hermes's own views hide it too
    stamp = datetime.fromtimestamp(ah.NOW - 30 * DAY + 10).strftime("%Y-%m-%d %H:%M")
    assert f"[{stamp}] user" in out

    everything = _cli("show", "old_a", "--inactive", "--full", "--home", str(pruned_home)).output
    assert "user (inactive)\n    oops, a wrong turn about seals" in everything
    assert "    Walrus tusks grow up to one metre.\n    Second line." in everything


def test_show_json_prefix_and_errors(pruned_home):
    raw = json.loads(_cli("show", "old_a", "--json", "--home", str(pruned_home)).stdout)["profiles"][0][
        "archived"
    ]
    with Archive.for_home(pruned_home / "keeper", create=False) as store:
        assert raw == store.get("old_a")
    assert len(raw["messages"]) == 8 and raw["model_usage"][0]["model"] == "m1"
    assert _cli("show", "cron", "--home", str(pruned_home)).output.startswith("cron_x  [cron]")
    ambiguous = _cli("show", "old_", "--home", str(pruned_home))
    assert ambiguous.exit_code == 2 and "matches several" in ambiguous.output
    missing = _cli("show", "nope", "--home", str(pruned_home))
    assert missing.exit_code == 2 and "not in the archive" in missing.output


def test_no_archive_yet_is_one_line(tmp_path, hermes):
    hermes.call(tmp_path, "create_session", "s1", "cli")
    res = _cli("list", "--home", str(tmp_path))
    assert res.exit_code == 2 and "no archive for profile default" in res.output
    assert len(res.output.strip().splitlines()) == 1


def test_render_folds_long_text():
    p = ah.payload("s", "cli", T0, texts=("word " * 400,))
    p["messages"].append(
        {"id": 2, "role": "tool", "tool_name": "t", "content": "x" * 5000, "timestamp": T0 + 2, "active": 1}
    )
    lines = render_conversation(p, width=50)
    assert max(len(line) for line in lines) < 200
    assert lines[-1].endswith("…") and "5,000 chars" in lines[-1]
    assert any(len(line) > 1000 for line in render_conversation(p, full=True))
