"""The oldest supported Hermes (0.13.0, schema 11: no archived/active/session_key columns)."""

from __future__ import annotations

import json
import time

import pytest
from click.testing import CliRunner

from hermes_keeper.cli import main
from tests.hermes_env import Hermes

DAY = 86400.0


@pytest.fixture(scope="module")
def hermes13() -> Hermes:
    return Hermes("0.13.0")


def test_report_run_and_restore_on_hermes_0_13(tmp_path, hermes13):
    now = time.time()
    specs = [
        {
            "id": f"cron_{i}",
            "source": "cron",
            "started_at": now - (20 - i) * DAY,
            "messages": [["user", f"oldcron{i} hello", now - (20 - i) * DAY + 1]],
            "ended_at": now - (20 - i) * DAY + 5,
            "end_reason": "cron_complete",
        }
        for i in range(5)
    ] + [
        {"id": "fresh", "source": "cli", "started_at": now - 60, "messages": [["user", "freshcli", now - 30]]}
    ]
    hermes13.run(tmp_path, [{"op": "build", "sessions": specs}])
    runner = CliRunner()
    rep = json.loads(runner.invoke(main, ["report", "--home", str(tmp_path), "--json"]).output)["profiles"][0]
    assert rep["schema"]["schema_version"] == 11 and rep["sessions"]["total"] == 6

    res = runner.invoke(main, ["run", "--home", str(tmp_path), "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["profiles"][0]["pruned"] == 5
    count, hits, kept = hermes13.run(
        tmp_path,
        [
            {"op": "call", "method": "session_count"},
            {"op": "call", "method": "search_messages", "args": ["oldcron1"]},
            {"op": "call", "method": "search_messages", "args": ["freshcli"]},
        ],
    )
    assert count == 1 and not hits and kept

    res = runner.invoke(main, ["archive", "restore", "cron_1", "--home", str(tmp_path)])
    assert res.exit_code == 0, res.output
    count, hits = hermes13.run(
        tmp_path,
        [
            {"op": "call", "method": "session_count"},
            {"op": "call", "method": "search_messages", "args": ["oldcron1"]},
        ],
    )
    assert count == 2 and hits
    # Hermes's own prune still works on what the keeper left and restored.
    assert hermes13.call(tmp_path, "prune_sessions", older_than_days=10) == 1
    assert hermes13.call(tmp_path, "session_count") == 1
