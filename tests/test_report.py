"""``report``: counts match real Hermes, JSON matches the documented schema, rules table-driven."""

from __future__ import annotations

import json
import os
import time
from importlib.resources import files

import jsonschema
import pytest
from click.testing import CliRunner

from hermes_keeper import demo
from hermes_keeper.cli import main
from hermes_keeper.model.policy import Policy
from hermes_keeper.report import DAY, age_bucket, dir_usage, growth_section, runaway_reasons, table_group
from hermes_keeper.run.survey import SessionRow

SCHEMA = json.loads(files("hermes_keeper").joinpath("schemas/report.json").read_text())


def report_json(home, *extra, exit_code=0) -> list[dict]:
    res = CliRunner().invoke(main, ["report", "--json", "--home", str(home), *extra])
    assert res.exit_code == exit_code, res.output
    data = json.loads(res.stdout)
    jsonschema.validate(data, SCHEMA)
    return data["profiles"]


def test_schema_file_is_valid_draft_2020_12():
    jsonschema.Draft202012Validator.check_schema(SCHEMA)


def test_demo_home_report_shows_the_pain(tmp_path):
    home = tmp_path / "demo"
    spec = demo.generate(time.time(), sessions=200)
    demo.build_home(home, spec)
    (rep,) = report_json(home)
    s = rep["sessions"]
    assert s["total"] == len(spec.sessions)
    assert s["messages"] == sum(len(x["messages"]) for x in spec.sessions)
    assert s["by_source"]["cron"]["total"] / s["total"] > 0.6
    assert s["zombies"]["total"] >= 3 and s["open"] >= s["zombies"]["total"]
    assert [r["messages"] for r in s["runaways"]] == [561, 520]
    assert s["routed"] == 1 and s["titled"] > 0
    assert sum(row[">30d"] for row in s["by_source"].values()) > s["total"] / 3
    f = rep["files"]
    assert f["orphans"]["files"] >= 24  # 12 dead transcripts + 12 dead request dumps
    assert f["sessions_dir"]["request_dump"]["files"] >= 12
    assert f["malformed_copies"] == [
        {"name": "state.db.malformed-backup-20260101-000000", "bytes": 2_000_000}
    ]
    assert f["other"]["logs"] == {"bytes": 250_000, "files": 1}
    db = rep["database"]
    assert db["per_object"] and sum(db["groups"].values()) == db["bytes"]
    assert db["groups"]["fts"] > db["groups"]["messages"] > db["groups"]["sessions"] > 0
    assert db["objects"]["messages_fts_trigram_data"] > 0
    g = rep["growth"]
    assert g["last_30d"]["sessions"] >= g["last_7d"]["sessions"] > 0
    assert g["projection"]["in_365d_bytes"] > g["projection"]["in_30d_bytes"] >= db["bytes"]


def test_counts_equal_real_hermes(tmp_path, hermes):
    """Counts, archived, titles, tokens and cost read from a home Hermes itself wrote."""
    spec = demo.generate(time.time(), sessions=60)
    ids = [s["id"] for s in spec.sessions if s["source"] == "cli"]
    hermes.run(
        tmp_path,
        [
            {"op": "build", "sessions": spec.sessions},
            {"op": "call", "method": "set_session_archived", "args": [ids[0], True]},
            {
                "op": "call",
                "method": "update_token_counts",
                "args": [ids[1]],
                "kwargs": {"input_tokens": 90_000, "output_tokens": 5_000, "actual_cost_usd": 1.25},
            },
        ],
    )
    (rep,) = report_json(tmp_path)
    s = rep["sessions"]
    ops = [
        {"op": "call", "method": "session_count", "kwargs": {"source": src, "include_archived": True}}
        for src in s["by_source"]
    ]
    ops += [
        {"op": "call", "method": "message_count"},
        {"op": "call", "method": "session_count", "kwargs": {"archived_only": True}},
        {"op": "call", "method": "session_count"},
        {"op": "query", "sql": "SELECT max(version) FROM schema_version"},
    ]
    *per_source, messages, archived, visible, version = hermes.run(tmp_path, ops)
    assert per_source == [v["total"] for v in s["by_source"].values()]
    assert messages == s["messages"]
    assert archived == s["archived"] == 1 and visible == s["total"] - 1
    top = s["largest"]["tokens"][0]
    assert (top["id"], top["tokens"], top["cost_usd"]) == (ids[1], 95_000, 1.25)
    assert s["largest"]["cost"][0]["id"] == ids[1]
    assert rep["schema"]["schema_version"] == version[0][0] and rep["schema"]["timestamp_problems"] == []


def test_all_profiles_reports_the_healthy_ones_when_one_is_broken(tmp_path):
    demo.build_home(tmp_path, demo.generate(time.time(), sessions=20))
    demo.build_home(tmp_path / "profiles" / "work", demo.generate(time.time(), sessions=10, seed=3))
    (tmp_path / "profiles" / "empty").mkdir()
    (tmp_path / "profiles" / "junk").mkdir()
    (tmp_path / "profiles" / "junk" / "state.db").write_bytes(b"not a database" * 100)
    reps = report_json(tmp_path, "--all-profiles", exit_code=1)
    assert [r["profile"] for r in reps] == ["default", "empty", "junk", "work"]
    assert reps[1]["skipped_because"].startswith("no state.db yet") and "error" not in reps[1]
    assert reps[2]["error"].endswith("junk/state.db: not a SQLite database")
    assert reps[3]["sessions"]["total"] > 0 and reps[0]["sessions"]["total"] > reps[3]["sessions"]["total"]


def test_all_profiles_with_only_a_new_profile_beside_is_not_a_failure(tmp_path):
    """A profile folder Hermes just made (no state.db yet) is a note, and the exit stays 0."""
    demo.build_home(tmp_path, demo.generate(time.time(), sessions=10))
    (tmp_path / "profiles" / "fresh").mkdir(parents=True)
    res = CliRunner().invoke(main, ["report", "--home", str(tmp_path), "--all-profiles"])
    assert res.exit_code == 0, res.output
    assert "hermes-keeper: fresh: no state.db yet (a new profile), skipped" in res.stderr
    assert "Sessions by source" in res.stdout


def test_human_report_fits_100_columns(tmp_path):
    demo.build_home(tmp_path, demo.generate(time.time(), sessions=60))
    res = CliRunner().invoke(
        main,
        ["report", "--home", str(tmp_path), "--zombie-after", "6h"],
        env={"COLUMNS": "100", "TTY_COMPATIBLE": "1", "TERM": "dumb"},  # a terminal; piped, nothing wraps
    )
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert max(map(len, lines)) <= 100
    for heading in ("state.db:", "Files beside state.db", "Sessions by source", "Largest sessions", "Growth"):
        assert any(heading in line for line in lines), heading
    assert "idle >= 6h" in res.output and "runaway:" in res.output


@pytest.mark.parametrize(
    "age, bucket",
    [
        (-5, "<1h"),
        (0, "<1h"),
        (3599, "<1h"),
        (3600, "1-6h"),
        (6 * 3600, "6-24h"),
        (DAY, "1-7d"),
        (7 * DAY, "7-30d"),
        (30 * DAY, ">30d"),
        (400 * DAY, ">30d"),
    ],
)
def test_age_buckets(age, bucket):
    assert age_bucket(age) == bucket


@pytest.mark.parametrize(
    "messages, span, runaway",
    [(602, 107, True), (199, 10, False), (300, 600, False), (300, 299, True), (250, 0, True)],
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
    assert bool(runaway_reasons(s, Policy().runaway)) is runaway


def test_runaway_needs_message_times():
    assert not runaway_reasons(
        SessionRow(id="x", source="cli", started_at=1.7e9, messages=900), Policy().runaway
    )


@pytest.mark.parametrize(
    "field, value, why",
    [
        ("messages", 2001, "2001 messages > 2000"),
        ("content_bytes", 30 << 20, "31457280 bytes of text > 20000000"),
        ("input_tokens", 22_000_000, "22000000 tokens > 5000000"),
        ("cost_usd", 40.0, "$40.00 > 25"),
    ],
)
def test_budget_runaways(field, value, why):
    """A budget passed is a runaway at any speed (the original report: 22M tokens in ~2 h)."""
    s = SessionRow(id="x", source="cli", started_at=1.7e9, **{field: value})
    assert runaway_reasons(s, Policy().runaway) == [why]


@pytest.mark.parametrize(
    "name, group",
    [
        ("messages", "messages"),
        ("idx_messages_session", "messages"),
        ("messages_fts", "fts"),
        ("messages_fts_data", "fts"),
        ("messages_fts_trigram_content", "fts"),
        ("sessions", "sessions"),
        ("sqlite_autoindex_sessions_1", "sessions"),
        ("idx_sessions_title_unique", "sessions"),
        ("gateway_routing", "other"),
        ("sqlite_schema", "other"),
    ],
)
def test_table_groups(name, group):
    assert table_group(name) == group


NOW = 1.8e9


@pytest.mark.parametrize(
    "started, windows, db_bytes, free, expect",
    [
        # 14 sessions in the last week, none before: 2/day (7d), 14/30 per day (30d).
        (
            [NOW - i * 0.5 * DAY for i in range(14)],
            {
                "text_bytes": 1000,
                7: {"messages": 70, "text_bytes": 700},
                30: {"messages": 70, "text_bytes": 700},
            },
            10_000,
            0,
            {"spd7": 2.0, "spd30": 0.47, "bpd7": 1000, "bpd30": 233, "p30": 10_000 + 30 * 233},
        ),
        # Free pages are filled before the file grows: 3000 used of 10000, +100/day.
        (
            [NOW - 40 * DAY],
            {"text_bytes": 300, 7: {"messages": 0, "text_bytes": 0}, 30: {"messages": 3, "text_bytes": 300}},
            10_000,
            7_000,
            {"spd7": 0.0, "spd30": 0.0, "bpd7": 0, "bpd30": 100, "p30": 10_000, "p365": 3000 + 36_500},
        ),
        # An empty home does not divide by zero.
        (
            [],
            {"text_bytes": 0, 7: {"messages": 0, "text_bytes": 0}, 30: {"messages": 0, "text_bytes": 0}},
            4096,
            0,
            {"spd7": 0.0, "bpd30": 0, "p30": 4096, "p365": 4096},
        ),
    ],
)
def test_growth_and_projection(started, windows, db_bytes, free, expect):
    g = growth_section(started, windows, NOW, db_bytes, free).to_dict()
    got = {
        "spd7": g["last_7d"]["sessions_per_day"],
        "spd30": g["last_30d"]["sessions_per_day"],
        "bpd7": g["last_7d"]["bytes_per_day"],
        "bpd30": g["last_30d"]["bytes_per_day"],
        "p30": g["projection"]["in_30d_bytes"],
        "p365": g["projection"]["in_365d_bytes"],
    }
    assert {k: got[k] for k in expect} == expect


def test_dir_usage_never_follows_symlinks_out_of_the_home(tmp_path):
    home, outside = tmp_path / "home", tmp_path / "outside"
    (home / "logs").mkdir(parents=True)
    outside.mkdir()
    (outside / "big.log").write_bytes(b"x" * 10_000)
    (home / "logs" / "agent.log").write_bytes(b"y" * 100)
    (home / "logs" / "link.log").symlink_to(outside / "big.log")
    (home / "checkpoints").symlink_to(outside)
    (home / "cron").symlink_to(outside)
    (outside / "output").mkdir()
    (outside / "output" / "x.md").write_bytes(b"z" * 5000)
    link_size = os.lstat(home / "logs" / "link.log").st_size
    assert dir_usage(home / "logs", home) == {"bytes": 100 + link_size, "files": 2}
    assert dir_usage(home / "checkpoints", home) == {"bytes": 0, "files": 0}
    assert dir_usage(home / "cron" / "output", home) == {"bytes": 0, "files": 0}
    assert dir_usage(home / "missing", home) == {"bytes": 0, "files": 0}
