"""Off-host copies through real restic (issue 36): the run pushes, a wiped home comes back from
the repository alone, and every fault is one line, its exit code, nothing local lost, caught up
by the next run. Repositories: a local folder, and S3 on a moto server on 127.0.0.1."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from hermes_keeper import demo
from hermes_keeper.backup import dump
from hermes_keeper.cli import main
from hermes_keeper.journal import read_journal
from hermes_keeper.offsite.restic import INSTALL
from tests.hermes_env import IOT, Hermes
from tests.offsite_repo import free_port, init_repository, local_offsite, moto_s3, offsite_toml, restic

CONTENT = "SELECT id, session_id, role, content, timestamp FROM messages ORDER BY id"
HOST = "old-machine"


def invoke(*args, env=None):
    return CliRunner().invoke(main, [str(a) for a in args], env=env)


def hermes_view(hermes: Hermes, home: Path) -> tuple[int, int, str]:
    """Sessions, messages and a hash of every message, as Hermes itself reads them."""
    rows, sessions = hermes.run(
        home, [{"op": "query", "sql": CONTENT}, {"op": "query", "sql": "SELECT count(*) FROM sessions"}]
    )
    return sessions[0][0], len(rows), hashlib.sha256(json.dumps(rows).encode()).hexdigest()


def built_home(hermes: Hermes, home: Path, sessions: int = 60) -> Path:
    home.mkdir()
    hermes.run(home, [{"op": "build", "sessions": demo.generate(time.time(), sessions=sessions).sessions}])
    return home


def archived_view(home: Path) -> tuple[list[str], int]:
    """The pruned session ids, and how many sessions ``archive search`` finds by a word of one."""
    listed = json.loads(invoke("archive", "list", "--home", home, "--json").stdout)["profiles"][0]["sessions"]
    shown = json.loads(invoke("archive", "show", listed[0]["session_id"], "--home", home, "--json").stdout)
    word = shown["profiles"][0]["archived"]["messages"][0]["content"].split()[0]
    found = json.loads(invoke("archive", "search", word, "--home", home, "--json").stdout)
    return sorted(s["session_id"] for s in listed), found["profiles"][0]["total"]


def journal(home: Path, action: str) -> list[dict]:
    return [r for r in read_journal(home / "keeper") if r.get("action") == action]


def run_summary(home: Path, env=None) -> dict:
    res = invoke("run", "--home", home, "--json", env=env)
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)["profiles"][0]


def round_trip(hermes: Hermes, home: Path, toml: str, env=None, sent: str = "state.sql.d") -> None:
    """Run (prune + push), wipe the home, restore onto a fresh folder from the repository alone.
    ``sent``: how state.db went (the dump, or the page copy where no dump can go)."""
    (home / "keeper.toml").write_text(toml)
    ran = run_summary(home, env)
    assert ran["pruned"] > 0 and ran["offsite"]["state"] and ran["offsite"]["archive"], ran["offsite"]
    assert ran["offsite"]["state_file"] == sent
    archived = archived_view(home)
    # What the off-host state.db must hold: the newest local backup (the run's, before its deletes)
    local = Path(shutil.copytree(home, home.parent / "local-restore"))
    backup = local / "keeper" / "backups" / ran["backup"]
    assert invoke("restore", backup, "--yes", "--home", local).exit_code == 0
    before = hermes_view(hermes, local)
    shutil.rmtree(home)  # the dead disk
    fresh = home.parent / "new-machine"
    fresh.mkdir()
    (fresh / "keeper.toml").write_text(toml)
    restored = invoke("restore", "--from", "offsite", "--yes", "--home", fresh, env=env)
    assert restored.exit_code == 0, restored.output
    assert "restored the off-host copy" in restored.output
    pulled = invoke("archive", "pull", "--from", "offsite", "--home", fresh, env=env)
    assert pulled.exit_code == 0 and "added archive.db" in pulled.output, pulled.output
    assert hermes_view(hermes, fresh) == before
    assert archived_view(fresh) == archived
    assert (fresh / "state.db").stat().st_mode & 0o777 == 0o600


@pytest.mark.parametrize("spec", ["0.19.0", IOT])
def test_round_trip_through_a_local_repository(tmp_path, spec):
    hermes = Hermes(spec)
    home = built_home(hermes, tmp_path / "home")
    repo = str(tmp_path / "repo")
    pw = init_repository(repo, tmp_path)
    round_trip(hermes, home, offsite_toml(repo, pw, HOST))


def test_a_page_copy_sent_where_no_dump_can_go_restores_the_same(tmp_path, hermes, monkeypatch):
    """Hermes's CJK index (a tokenizer library in the home) cannot be rebuilt from a dump on
    another machine: such a state.db goes as its page copy, and comes back the same way."""
    monkeypatch.setattr(dump, "dumpable", lambda db: False)
    home = built_home(hermes, tmp_path / "home", sessions=40)
    repo = str(tmp_path / "repo")
    round_trip(hermes, home, offsite_toml(repo, init_repository(repo, tmp_path), HOST), sent="state.db")


def test_round_trip_through_s3_on_a_local_endpoint(tmp_path, hermes):
    home = built_home(hermes, tmp_path / "home")
    env = dict(os.environ)
    with moto_s3(env) as endpoint:
        repo = f"s3:{endpoint}/hermes-offsite"
        pw = tmp_path / "pw"
        pw.write_text("s3 secret\n")
        subprocess.run(
            ["restic", "-r", repo, "--password-file", str(pw), "init"],
            env=env,
            check=True,
            capture_output=True,
        )
        round_trip(hermes, home, offsite_toml(repo, pw, HOST), env=env)


@pytest.fixture
def pushed(tmp_path, hermes):
    """A home whose keeper.toml names a local repository, after one run pushed to it."""
    home = built_home(hermes, tmp_path / "home", sessions=40)
    repo, pw = local_offsite(home, tmp_path)
    assert run_summary(home)["offsite"]["state"]
    return home, repo, pw


def _state_copies(repo: str, pw: Path) -> list[dict]:
    out = restic(repo, pw, "snapshots", "--json", "--tag", "kind=state").stdout
    return json.loads(out)


def test_a_run_without_news_sends_no_second_state_copy_and_checks_once(pushed):
    home, repo, pw = pushed
    assert [r["ok"] for r in journal(home, "offsite_checked")] == [True]  # the first push checked
    toml = home / "keeper.toml"
    toml.write_text("backup = false\n" + toml.read_text())  # this run takes no new backup
    again = run_summary(home)["offsite"]
    assert again["state"] is None and again["checked"] is None  # already there; check not due
    assert "state.db already there" in again["summary"]
    assert len(_state_copies(repo, pw)) == 1
    assert invoke("check", "--home", home, "--json").stdout.count('"offsite_age"') == 1


def test_wrong_password_is_one_line_and_the_next_run_catches_up(pushed, tmp_path):
    home, repo, pw = pushed
    good = (home / "keeper.toml").read_text()
    bad = tmp_path / "bad-password"
    bad.write_text("not it\n")
    (home / "keeper.toml").write_text(good.replace(str(pw), str(bad)))
    res = invoke("backups", "--offsite", "--home", home)
    assert res.exit_code == 2 and res.output.strip() == f"hermes-keeper: wrong restic password for {repo}"
    new_backup = invoke("backup", "--home", home)  # a local backup the failed push cannot send
    assert new_backup.exit_code == 0
    ran = run_summary(home)
    assert ran["offsite"] == {
        "error": f"wrong restic password for {repo}",
        "summary": f"off-host copy failed: wrong restic password for {repo}",
    }
    assert journal(home, "offsite_failed")[-1]["error"].startswith("wrong restic password")
    (home / "keeper.toml").write_text(good)
    assert run_summary(home)["offsite"]["state"]  # caught up
    assert len(_state_copies(repo, pw)) == 2


def test_unreachable_endpoint_is_try_later(tmp_path, hermes):
    home = built_home(hermes, tmp_path / "home", sessions=20)
    closed = f"rest:http://127.0.0.1:{free_port()}/"
    (home / "keeper.toml").write_text(offsite_toml(closed, tmp_path / "pw", HOST, timeout="60s"))
    (tmp_path / "pw").write_text("x\n")
    res = invoke("backups", "--offsite", "--home", home)
    assert res.exit_code == 75, res.output
    assert res.output.startswith(f"hermes-keeper: restic repository {closed} unreachable (")
    assert res.output.count("\n") == 1
    ran = run_summary(home)
    assert ran["offsite"]["error"].startswith(f"restic repository {closed} unreachable")
    assert ran["backup"] and (home / "keeper" / "backups" / ran["backup"]).is_file()  # nothing local lost


def test_a_repository_that_refuses_writes(pushed, tmp_path):
    """A read-only repository (a tmpfs remounted read-only: the bucket that refuses writes)."""
    home, _repo, _pw = pushed
    mount = tmp_path / "ro"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(mount)], check=True)
    try:
        repo = str(mount / "repo")
        pw = init_repository(repo, tmp_path)
        subprocess.run(["mount", "-o", "remount,ro", str(mount)], check=True)
        (home / "keeper.toml").write_text(offsite_toml(repo, pw, HOST))
        assert invoke("backup", "--home", home).exit_code == 0
        ran = run_summary(home)
        assert ran["offsite"]["error"].startswith(f"restic repository {repo} refuses writes ("), ran[
            "offsite"
        ]
        assert "read-only file system" in ran["offsite"]["error"]
    finally:
        subprocess.run(["umount", "--lazy", str(mount)], check=True)


def test_a_repository_locked_by_another_restic(pushed):
    """Another restic holds the repository (here a backup reading its stdin): the rotation's
    exclusive lock is refused, exit 75; the next run catches up once it is gone."""
    home, repo, pw = pushed
    other = subprocess.Popen(
        ["restic", "-r", repo, "--password-file", str(pw), "backup", "--stdin", "--stdin-filename", "x"],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        _wait_for_lock(Path(repo))
        res = invoke("backups", "--offsite", "--prune", "--home", home)
        assert res.exit_code == 75, res.output
        locked = f"restic repository {repo} is locked by another restic; nothing lost, try again later"
        assert res.output == f"hermes-keeper: {locked}\n"
        assert invoke("backup", "--home", home).exit_code == 0
        ran = run_summary(home)
        assert "locked by another restic" in ran["offsite"]["error"]
    finally:
        other.stdin.close()
        other.wait(timeout=60)
    assert run_summary(home)["offsite"]["state"] is None  # the locked run had sent it; rotation now ran
    assert "error" not in run_summary(home)["offsite"]


def _wait_for_lock(repo: Path) -> None:
    """Until the other restic's lock file exists: restic writes it before reading stdin (bounded)."""
    deadline = time.monotonic() + 30
    while not any((repo / "locks").iterdir()):
        assert time.monotonic() < deadline, "the other restic took no lock"
        time.sleep(0.05)


SHIM = """#!{python}
import os, signal, subprocess, sys, time
args = sys.argv[1:]
if "backup" not in args or not any("kind=state" in a for a in args):
    os.execv({restic!r}, [{restic!r}, *args])
# The state copy's backup, slowed to 1 KiB/s: killed once it holds the repository's lock, with
# part of the copy sent; then this restic dies too, as a killed push does.
proc = subprocess.Popen([{restic!r}, "--limit-upload", "1", *args])
locks, deadline = os.path.join({repo!r}, "locks"), time.monotonic() + 60
while proc.poll() is None and not os.listdir(locks) and time.monotonic() < deadline:
    time.sleep(0.01)
proc.kill()
proc.wait()
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_push_killed_midway_loses_nothing_and_the_next_run_sends_it(tmp_path, hermes):
    home = built_home(hermes, tmp_path / "home", sessions=40)
    repo, pw = local_offsite(home, tmp_path)
    shim = tmp_path / "bin" / "restic"
    shim.parent.mkdir()
    shim.write_text(SHIM.format(python=sys.executable, restic=shutil.which("restic"), repo=repo))
    shim.chmod(0o755)
    env = {"PATH": f"{shim.parent}:{os.environ['PATH']}"}
    ran = run_summary(home, env)
    assert ran["offsite"]["error"] == "restic was stopped (SIGKILL); nothing lost, the next run sends it"
    assert ran["backup"] and (home / "keeper" / "backups" / ran["backup"]).is_file()
    assert _state_copies(repo, pw) == []
    toml = home / "keeper.toml"
    toml.write_text("backup = false\n" + toml.read_text())  # no newer backup: the same one goes
    caught_up = run_summary(home)["offsite"]
    assert caught_up.get("backup") == ran["backup"], caught_up  # the next run sends that backup
    restic(repo, pw, "check")


def test_without_restic_everything_else_works(tmp_path, hermes):
    home = built_home(hermes, tmp_path / "home", sessions=20)
    (home / "keeper.toml").write_text(offsite_toml("/nowhere", tmp_path / "pw", HOST))
    env = {"PATH": str(tmp_path / "empty-bin")}
    for args in (["backups", "--offsite"], ["restore", "--from", "offsite", "--yes"]):
        res = invoke(*args, "--home", home, env=env)
        assert (res.exit_code, res.output) == (2, f"hermes-keeper: {INSTALL}\n")
    ran = run_summary(home, env)
    assert ran["offsite"]["error"] == INSTALL and ran["backup"]
    assert invoke("backups", "--home", home, env=env).exit_code == 0


def test_check_reports_the_age_of_the_newest_off_host_copy(tmp_path, hermes):
    home = built_home(hermes, tmp_path / "home", sessions=20)
    local_offsite(home, tmp_path)

    def offsite_age():
        out = json.loads(invoke("check", "--home", home, "--json").stdout)["profiles"][0]
        return next(m for m in out["measures"] if m["label"] == "offsite_age")

    assert (offsite_age()["status"], offsite_age()["problem"]) == ("CRITICAL", "no off-host copy yet")
    ran = run_summary(home)
    assert offsite_age()["status"] == "OK"
    taken = json.loads(invoke("backups", "--home", home, "--json").stdout)["profiles"][0]["backups"][0]
    assert taken["name"] == ran["backup"] and offsite_age()["value"] >= 0


def test_forget_rotates_off_host_by_the_same_rules(pushed):
    home, repo, pw = pushed
    for _ in range(2):
        assert invoke("backup", "--home", home).exit_code == 0
        assert run_summary(home)["offsite"]["state"]
    listed = json.loads(invoke("backups", "--offsite", "--home", home, "--json").stdout)["profiles"][0]
    assert [c["kind"] for c in listed["copies"]].count("state") == 3
    dry = invoke("backups", "--offsite", "--prune", "--dry-run", "--keep-last", "1", "--home", home)
    assert dry.exit_code == 0 and "would forget" in dry.output
    assert len(_state_copies(repo, pw)) == 3
    args = ("backups", "--offsite", "--prune", "--keep-last", "1", "--keep-daily", "0", "--keep-weekly", "0")
    pruned = json.loads(invoke(*args, "--keep-monthly", "0", "--home", home, "--json").stdout)["profiles"][0]
    assert len(pruned["removed"]) == 2 + 2  # the two older state copies and the two older archive copies
    assert [c["kind"] for c in pruned["copies"]] == ["archive", "state"]
    assert len(_state_copies(repo, pw)) == 1


def test_a_failed_restic_check_is_critical_in_check(pushed):
    """A damaged pack in the repository: the run's periodic ``restic check --read-data-subset``
    fails, the run itself does not, and ``check`` goes CRITICAL until a check passes."""
    home, repo, _pw = pushed
    toml = home / "keeper.toml"
    toml.write_text(toml.read_text() + 'check_every = "0s"\ncheck_subset = "100%"\n')
    pack = max((p for p in (Path(repo) / "data").rglob("*") if p.is_file()), key=lambda p: p.stat().st_size)
    pack.chmod(0o600)
    with open(pack, "r+b") as fh:
        fh.seek(pack.stat().st_size // 2)
        fh.write(b"\0" * 64)
    ran = run_summary(home)
    assert ran["offsite"]["checked"] is False, ran["offsite"]
    problem = journal(home, "offsite_checked")[-1]["problem"]
    out = json.loads(invoke("check", "--home", home, "--json").stdout)["profiles"][0]
    (measure,) = [m for m in out["measures"] if m["label"] == "offsite_check"]
    assert (
        measure["status"] == "CRITICAL" and measure["problem"] == f"the last restic check failed: {problem}"
    )
