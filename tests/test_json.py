"""One JSON shape for every command, each validated by its own schema (src/hermes_keeper/schemas/)."""

from __future__ import annotations

import json
import time
from importlib.resources import files

import jsonschema
import pytest
from click.testing import CliRunner

from hermes_keeper import demo
from hermes_keeper.cli import main
from hermes_keeper.model.policy import effective_policy, policy_schema
from tests.offsite_repo import local_offsite
from tests.test_docs import _commands


def schema(command: str) -> dict:
    name = command.replace(" ", "-")
    return json.loads(files("hermes_keeper").joinpath(f"schemas/{name}.json").read_text())


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    home = tmp_path_factory.mktemp("json") / "home"
    demo.build_home(home, demo.generate(time.time(), sessions=60))
    (home / "profiles" / "fresh").mkdir(parents=True)  # a new profile: a skipped row
    local_offsite(home, home.parent)  # the run pushes to it; the offsite commands read it
    return home


def test_every_command_on_the_demo_home_matches_its_schema(home, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))  # schedule --via systemd: units in tmp
    runner, seen = CliRunner(), set()

    def check(*args: str, code: int | None = 0) -> dict:
        """``code`` None: the exit code is the JSON's own ``code`` (check, a Nagios plugin)."""
        res = runner.invoke(main, [*args, "--home", str(home), "--json"])
        assert res.stdout.startswith("{"), (args, res.output)
        out = json.loads(res.stdout)
        assert res.exit_code == (out["code"] if code is None else code), (args, res.output)
        jsonschema.validate(out, schema(out["command"]))
        assert all(row["profile"] for row in out["profiles"])
        seen.add(out["command"])
        return out

    for args in (
        ["report"],
        ["report", "--all-profiles"],
        ["plan"],
        ["plan", "-v"],
        ["run", "--dry-run"],
        ["config", "show"],
        ["backup", "--dry-run"],
        ["backup"],
        ["backups"],
        ["compact", "--dry-run"],
        ["restore", "--latest", "--dry-run"],
        ["run"],
        ["compact"],
        ["archive", "list"],
        ["archive", "search", "the"],
        ["archive", "verify", "--all-profiles"],
        ["history", "--all", "--all-profiles"],
    ):
        check(*args)
    skipped = check("backups", "--all-profiles")["profiles"]
    assert {"profile": "fresh", "home": str(home / "profiles" / "fresh")} | {
        "skipped_because": skipped[-1]["skipped_because"]
    } in skipped
    assert {e["kind"] for e in check("history")["profiles"][0]["entries"]} == {"run"}
    nagios = check("check", "--all-profiles", code=None)
    assert nagios["line"].startswith(f"HERMES-KEEPER {nagios['status']} - ")
    assert [r.get("skipped_because") is None for r in nagios["profiles"]] == [True, False]
    planned = check("schedule", "install", "--via", "systemd", "--dry-run", "--all-profiles")["profiles"]
    assert [(r["profile"], r["dry_run"]) for r in planned] == [("all-profiles", True)]
    assert [c["action"] for c in planned[0]["changes"]] == ["installed", "installed"]
    [shown] = check("schedule", "show", "--via", "systemd")["profiles"]
    assert (shown["profile"], shown["changes"], shown["last_recorded_run"]["kind"]) == ("default", [], "run")
    removed = check("schedule", "remove", "--via", "systemd", "--dry-run")["profiles"]
    assert [c["action"] for c in removed[0]["changes"]] == ["absent"] and not any(tmp_path.iterdir())
    sid = check("archive", "list")["profiles"][0]["sessions"][0]["session_id"]
    assert check("archive", "show", sid)["profiles"][0]["archived"]["session"]["id"] == sid
    assert check("archive", "restore", sid, "--dry-run")["profiles"][0]["dry_run"] is True
    assert check("restore", "--latest", "--yes")["profiles"][0]["safety_copy"]
    copies = check("backups", "--offsite")["profiles"][0]["copies"]
    assert {c["kind"] for c in copies} == {"state", "archive"}
    newest = next(c for c in copies if c["kind"] == "state")
    assert check("restore", "--from", "offsite", "--dry-run")["profiles"][0]["id"] == newest["id"]
    assert check("archive", "pull", "--from", "offsite")["profiles"][0]["same"] == ["archive.db"]
    # the fleet as this host's own [offsite] repository shows it: the run above reported there
    res = runner.invoke(main, ["fleet", "status", "--config", str(home / "keeper.toml"), "--json"])
    fleet = json.loads(res.stdout)
    jsonschema.validate(fleet, schema(fleet["command"]))
    assert [(r["profile"], r["run"]["pruned"] > 0) for r in fleet["profiles"]] == [("default", True)]
    assert res.exit_code == fleet["code"]
    seen.add(fleet["command"])
    cache = ["--config", str(home / "keeper.toml"), "--cache", str(tmp_path / "fleet-cache")]
    for args in (["sync"], ["search", "the"], ["show", "old-machine", sid]):
        res = runner.invoke(main, ["fleet", *args, *cache, "--json"])
        doc = json.loads(res.stdout)
        jsonschema.validate(doc, schema(doc["command"]))
        assert res.exit_code == 0 and doc["profiles"][0]["host"] == "old-machine", res.output
        seen.add(doc["command"])
    with_json = {" ".join(w) for w, cmd in _commands() if any(p.name == "as_json" for p in cmd.params)}
    assert seen == with_json  # every command with --json is here, and has its schema


def test_plan_json_keeps_reasons_with_codes(home):
    out = json.loads(CliRunner().invoke(main, ["plan", "--home", str(home), "--json"]).stdout)
    reasons = out["profiles"][0]["keep_reasons"]
    assert reasons and all(set(r) == {"code", "reason", "sessions"} for r in reasons)
    assert all(r["code"].isidentifier() for r in reasons)


def test_config_show_schema_is_the_one_settings_make():
    """schemas/config-show.json's row is SETTINGS': a key added, renamed or retyped there must show
    here (``PYTHONPATH=src python tools/config_schema.py`` writes it)."""
    assert schema("config show")["$defs"]["result0"] == policy_schema()


def test_a_policy_with_every_kind_of_value_matches_its_schema(tmp_path):
    """Switched off (null), set where unset by default, a retention source of its own, a profile's."""
    (tmp_path / "keeper.toml").write_text(
        'backup = false\nbusy_wait = "30s"\n[retention]\nfoo = "3d"\n[disk]\nmax_db_bytes = "2GB"\n'
        '[files]\ncron_output_age = "off"\ncron_output_keep = 3\n[archive]\nkeep = "365d"\n'
        '[backups]\ndest = "/tmp/b"\nkeep_daily = 0\n[profiles.default.runaway]\nmax_bytes = "1000B"\n'
    )
    policy = effective_policy(tmp_path, "default")
    row = {"profile": "default"} | policy.to_dict()
    jsonschema.validate(row, policy_schema())
    assert row["retention_s"]["foo"] == 3 * 86400 and row["files"]["cron_output_age_s"] is None
    assert row["rotation"]["keep_daily"] == 0 and row["runaway"]["max_bytes"] == 1000
