"""``archive verify``: every payload decompressed, its sha256 recomputed; damage reported, never restored."""

from __future__ import annotations

import json
import shutil
import sqlite3

from click.testing import CliRunner

from hermes_keeper.archive.store import ARCHIVE_NAME
from hermes_keeper.cli import main
from tests import archive_home as ah


def _cli(*args):
    return CliRunner().invoke(main, ["archive", *args])


def test_damaged_row_reported_by_verify_and_refused_by_restore(tmp_path, hermes):
    home = ah.build(hermes, tmp_path / "home")
    ah.prune(home)
    clean = _cli("verify", "--home", str(home), "--json")
    assert clean.exit_code == 0 and json.loads(clean.stdout)["profiles"][0] == {
        "profile": "default",
        "checked": 5,
        "damaged": {},
        "database": "ok",
        "ok": True,
    }

    ah.flip_byte(home, "old_a")
    res = _cli("verify", "--home", str(home), "--json")
    assert res.exit_code == 1
    report = json.loads(res.stdout)["profiles"][0]
    assert report["checked"] == 5 and list(report["damaged"]) == ["old_a"]
    assert report["damaged"]["old_a"].startswith("old_a: ")
    text = _cli("verify", "--home", str(home)).output
    assert "checked 5 archived sessions, 1 damaged" in text and "damaged: old_a" in text

    res = _cli("restore", "old_a", "--home", str(home))
    assert res.exit_code == 1 and "old_a: not restored: archive row damaged: old_a" in res.output
    assert hermes.call(home, "get_session", "old_a") is None
    shown = _cli("show", "old_a", "--home", str(home))
    assert shown.exit_code == 2 and "damaged" in shown.output

    # The others are untouched by the damage and come back.
    res = _cli("restore", "cron_x", "old_b", "--home", str(home))
    assert res.exit_code == 0, res.output
    assert hermes.call(home, "get_messages", "cron_x")[0]["content"] == "weather summary for tuesday"
    assert hermes.call(home, "get_session", "old_d")["parent_session_id"] == "old_c"


def test_truncated_and_wrong_payloads_and_other_profiles(tmp_path, hermes):
    home = ah.build(hermes, tmp_path / "home")
    ah.prune(home)
    work = home / "profiles" / "work"
    work.mkdir(parents=True)
    shutil.copy(home / "state.db", work / "state.db")
    shutil.copytree(home / "keeper", work / "keeper")
    conn = sqlite3.connect(work / "keeper" / ARCHIVE_NAME)
    conn.execute("UPDATE archived_sessions SET payload = substr(payload, 1, 10) WHERE session_id = 'cron_x'")
    conn.execute("UPDATE archived_sessions SET sha256 = 'x' || substr(sha256, 2) WHERE session_id = 'old_b'")
    conn.commit()
    conn.close()
    res = _cli("verify", "--home", str(home), "--all-profiles", "--json")
    assert res.exit_code == 1
    report = {r["profile"]: r for r in json.loads(res.stdout)["profiles"]}
    assert report["default"]["ok"] and report["default"]["checked"] == 5
    damaged = report["work"]["damaged"]
    assert set(damaged) == {"cron_x", "old_b"}
    assert "does not decompress" in damaged["cron_x"] and "sha256 mismatch" in damaged["old_b"]


def test_a_broken_archive_file_is_one_line(tmp_path, hermes):
    hermes.call(tmp_path, "create_session", "s1", "cli")
    (tmp_path / "keeper").mkdir()
    (tmp_path / "keeper" / ARCHIVE_NAME).write_bytes(b"this is not sqlite" * 100)
    res = _cli("verify", "--home", str(tmp_path))
    assert res.exit_code == 2 and "cannot open the archive" in res.output
    assert len(res.output.strip().splitlines()) == 1


def test_all_profiles_reports_a_damaged_archive_whose_state_db_is_gone(tmp_path, hermes):
    """Not skipped as "a new profile": the archive is what verify checks, and it is damaged."""
    home = ah.build(hermes, tmp_path / "home")
    ah.prune(home)
    lost = home / "profiles" / "lost"
    lost.mkdir(parents=True)
    shutil.copytree(home / "keeper", lost / "keeper")
    conn = sqlite3.connect(lost / "keeper" / ARCHIVE_NAME)
    conn.execute("UPDATE archived_sessions SET sha256 = 'x' || substr(sha256, 2) WHERE session_id = 'old_a'")
    conn.commit()
    conn.close()
    res = _cli("verify", "--home", str(home), "--all-profiles", "--json")
    assert res.exit_code == 1
    report = {r["profile"]: r for r in json.loads(res.stdout)["profiles"]}
    assert report["default"]["ok"] and list(report["lost"]["damaged"]) == ["old_a"]
