"""``report``: counts match real Hermes, JSON matches the documented schema."""

from __future__ import annotations

import json
import time
from importlib.resources import files

import jsonschema
import pytest
from click.testing import CliRunner

from hermes_keeper import demo
from hermes_keeper.cli import main
from hermes_keeper.report import age_bucket, is_runaway
from hermes_keeper.survey import SessionRow

SCHEMA = json.loads(files("hermes_keeper").joinpath("data/report.schema.json").read_text())


def report_json(home) -> dict:
    res = CliRunner().invoke(main, ["report", "--json", "--home", str(home)])
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    jsonschema.validate(data, SCHEMA)
    return data["profiles"][0]


def test_demo_home_report_validates_and_shows_the_pain(tmp_path):
    home = tmp_path / "demo"
    demo.build_home(home, demo.generate(time.time(), sessions=200))
    rep = report_json(home)
    s = rep["sessions"]
    assert s["by_source"]["cron"]["total"] / s["total"] > 0.6
    assert s["zombies"]["total"] >= 3
    assert len(s["runaways"]) == 2
    assert rep["files"]["orphans"]["files"] >= 12
    assert rep["files"]["sessions_dir"]["request_dump"]["files"] >= 12
    assert rep["files"]["malformed_copies"][0]["bytes"] == 2_000_000
    groups = rep["database"]["groups"]
    assert groups["fts"] > groups["messages"] > 0
    assert sum(groups.values()) <= rep["database"]["bytes"]


def test_counts_per_source_equal_real_hermes(tmp_path, hermes):
    spec = demo.generate(time.time(), sessions=60)
    hermes.run(tmp_path, [{"op": "build", "sessions": spec.sessions}])
    rep = report_json(tmp_path)
    by_source = rep["sessions"]["by_source"]
    ops = [
        {"op": "call", "method": "session_count", "kwargs": {"source": src, "include_archived": True}}
        for src in by_source
    ]
    ops.append({"op": "call", "method": "message_count"})
    *counts, messages = hermes.run(tmp_path, ops)
    assert counts == [v["total"] for v in by_source.values()]
    assert messages == rep["sessions"]["messages"]
    assert rep["schema"]["schema_version"] == 22


def test_demo_home_opens_in_real_hermes(tmp_path, hermes):
    res = CliRunner().invoke(main, ["demo", str(tmp_path / "d"), "--sessions", "80"])
    assert res.exit_code == 0, res.output
    rep = report_json(tmp_path / "d")
    total, messages, hits = hermes.run(
        tmp_path / "d",
        [
            {"op": "call", "method": "session_count", "kwargs": {"include_archived": True}},
            {"op": "call", "method": "message_count"},
            {"op": "call", "method": "search_messages", "args": ["docker"]},
        ],
    )
    assert total == rep["sessions"]["total"]
    assert messages == rep["sessions"]["messages"]
    assert hits


def test_demo_refuses_a_folder_with_a_database(tmp_path):
    (tmp_path / "state.db").write_bytes(b"precious")
    res = CliRunner().invoke(main, ["demo", str(tmp_path)])
    assert res.exit_code == 2
    assert (tmp_path / "state.db").read_bytes() == b"precious"


@pytest.mark.parametrize(
    "age, bucket",
    [
        (0, "<1h"),
        (3599, "<1h"),
        (3600, "1-6h"),
        (6 * 3600, "6-24h"),
        (86400, "1-7d"),
        (7 * 86400, "7-30d"),
        (30 * 86400, ">30d"),
        (400 * 86400, ">30d"),
    ],
)
def test_age_buckets(age, bucket):
    assert age_bucket(age) == bucket


@pytest.mark.parametrize(
    "messages, span, runaway",
    [(602, 107, True), (199, 10, False), (300, 600, False), (300, 299, True)],
)
def test_runaway_rule(messages, span, runaway):
    s = SessionRow(
        id="x",
        source="cli",
        started_at=1.7e9,
        messages=messages,
        first_message_at=1.7e9,
        last_message_at=1.7e9 + span,
    )
    assert is_runaway(s) is runaway
