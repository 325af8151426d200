"""The fleet read from its repositories alone (issue 37): demo homes on three hosts (one with two
profiles) run with [offsite] to a local folder and to S3 on a moto server on 127.0.0.1; a fourth
host's newest report is three days old; a third repository opens with another password."""

from __future__ import annotations

import fcntl
import json
import os
import re
import sqlite3
import stat
import time
from importlib.resources import files
from pathlib import Path

import jsonschema
import pytest
from click.testing import CliRunner

from hermes_keeper import demo, fleet
from hermes_keeper.archive.index import SearchIndex
from hermes_keeper.archive.store import Archive
from hermes_keeper.backup.snapshot import sha256_file
from hermes_keeper.check import CRITICAL, OK, UNKNOWN
from hermes_keeper.cli import main
from hermes_keeper.errors import TryLater
from hermes_keeper.home import Fleet, Home
from hermes_keeper.journal import read_journal
from hermes_keeper.model.policy import config_problems, effective_policy
from hermes_keeper.offsite import cache, copies
from hermes_keeper.offsite.restic import Restic
from tests.offsite_repo import free_port, init_repository, moto_s3, offsite_toml, restic

DAY = 86400.0


def invoke(*args, env=None):
    return CliRunner().invoke(main, [str(a) for a in args], env=env)


def demo_home(path: Path, toml: str, profiles: tuple[str, ...] = (), sessions: int = 30) -> Path:
    demo.build_home(path, demo.generate(time.time(), sessions=sessions))
    for name in profiles:
        demo.build_home(path / "profiles" / name, demo.generate(time.time(), sessions=sessions, seed=11))
    (path / "keeper.toml").write_text(toml)
    return path


def ran(home: Path, env: dict) -> dict:
    """``run --all-profiles --json``: each profile's summary by name."""
    res = invoke("run", "--all-profiles", "--home", home, "--json", env=env)
    assert res.exit_code == 0, res.output
    return {p["profile"]: p for p in json.loads(res.stdout)["profiles"]}


@pytest.fixture(scope="module")
def fleet_of(tmp_path_factory):
    """Hosts a (default, work) -> local folder; b -> moto S3; c -> a repository with another
    password; d -> the local folder, its only report three days old. The operator's keeper.toml
    names all three repositories with the one password file a, b and d share."""
    t = tmp_path_factory.mktemp("fleet")
    local = str(t / "local-repo")
    pw = init_repository(local, t)  # PASSWORD
    other_dir = t / "other"
    other_dir.mkdir()
    other = str(t / "other-repo")
    other_pw = other_dir / "pw"
    other_pw.write_text("another password\n")
    restic(other, other_pw, "init")
    env = dict(os.environ)
    with moto_s3(env) as endpoint, pytest.MonkeyPatch.context() as mp:
        for key in (k for k in env if k.startswith("AWS_")):
            mp.setenv(key, env[key])  # restic reads them from the process's own environment
        s3 = f"s3:{endpoint}/fleet"
        restic(s3, pw, "init", env=env)
        a = demo_home(t / "a", offsite_toml(local, pw, "a"), profiles=("work",))
        b = demo_home(t / "b", offsite_toml(s3, pw, "b"))
        c = demo_home(t / "c", offsite_toml(other, other_pw, "c"))
        d = demo_home(t / "d", offsite_toml(local, pw, "d"), sessions=10)
        runs = {"a": ran(a, env), "b": ran(b, env), "c": ran(c, env)}
        stale = Home(d).profile()
        fleet.send_report(stale, stale.config(), {}, now=time.time() - 3 * DAY)
        operator = t / "operator.toml"
        repos = ", ".join(f'"{r}"' for r in (local, s3, other))
        operator.write_text(f'[fleet]\nrepositories = [{repos}]\npassword_file = "{pw}"\n')
        yield {"homes": {"a": a, "b": b, "c": c}, "runs": runs, "operator": operator, "env": env}


def by_key(rows) -> dict:
    return {(r.host, r.profile): r for r in rows}


def test_status_shows_every_host_and_profile_with_its_figures(fleet_of):
    policy = effective_policy(fleet_of["operator"].parent, "", fleet_of["operator"])
    rows = by_key(Fleet(policy=policy).status())
    assert set(rows) == {("a", "default"), ("a", "work"), ("b", "default"), ("d", "default"), (None, None)}
    for host, home in fleet_of["homes"].items():
        if host == "c":
            continue
        for name, summary in fleet_of["runs"][host].items():
            row = rows[(host, name)]
            assert row.status == OK and row.check_status == "OK", (host, name, row.problem)
            assert time.time() - row.reported_at < 600
            for key in ("pruned", "archived", "zombies_closed", "files_removed", "freed_bytes", "remaining"):
                assert row.run[key] == summary[key], (host, name, key)
            assert row.run["pruned"] > 0
            assert row.newest_copy == summary["offsite"]["newest"]
            db = home if name == "default" else home / "profiles" / name
            assert row.db_bytes == (db / "state.db").stat().st_size
            assert row.growth_per_day is not None and row.growth_per_day >= 0


def test_a_host_that_stopped_reporting_is_critical(fleet_of):
    policy = effective_policy(fleet_of["operator"].parent, "", fleet_of["operator"])
    rows = by_key(Fleet(policy=policy).status())
    d = rows[("d", "default")]
    assert d.status == CRITICAL and d.problem.startswith("stopped reporting: newest report 3"), d.problem
    assert d.check_status == "CRITICAL"  # its own check also said so: it never ran
    # the same fleet two days on: every report is stale
    later = Fleet(policy=policy).status(now=time.time() + 2 * DAY + 60)
    assert {r.status for r in later if r.host} == {CRITICAL}


def test_a_repository_with_a_wrong_password_is_unknown_and_the_others_still_show(fleet_of):
    policy = effective_policy(fleet_of["operator"].parent, "", fleet_of["operator"])
    repos = policy.fleet["repositories"]
    rows = Fleet([repos[0], repos[2]], policy).status()
    assert [(r.host, r.profile, r.status) for r in rows] == [
        ("a", "default", OK),
        ("a", "work", OK),
        ("d", "default", CRITICAL),
        (None, None, UNKNOWN),
    ]
    assert rows[-1].problem == f"wrong restic password for {repos[2]}"
    only_a = Fleet([repos[2], repos[0]], policy).status(now=time.time())
    assert fleet.overall([r for r in only_a if r.host != "d"]) == UNKNOWN


def test_the_cli_table_json_and_metrics(fleet_of, tmp_path):
    op, env = fleet_of["operator"], fleet_of["env"]
    terminal_80 = {"COLUMNS": "80", "TTY_COMPATIBLE": "1", "TERM": "dumb"}  # rich's terminal, no colours
    res = invoke("fleet", "status", "--config", op, env=env | terminal_80)
    assert res.exit_code == CRITICAL, res.output
    lines = res.output.splitlines()
    assert all(len(line) <= 80 for line in lines if "-repo" not in line), res.output  # a path stays whole
    assert [line.split()[:3] for line in lines[2:6]] == [
        ["a", "│", "default"],
        ["a", "│", "work"],
        ["d", "│", "default"],
        ["b", "│", "default"],
    ]
    assert "wrong restic password for" in res.output
    out = invoke("fleet", "status", "--config", op, "--json", env=env)
    doc = json.loads(out.stdout)
    schema = json.loads(files("hermes_keeper").joinpath("schemas/fleet-status.json").read_text())
    jsonschema.validate(doc, schema)
    assert (doc["status"], doc["code"], out.exit_code) == ("CRITICAL", 2, 2)
    assert doc["line"].startswith("HERMES-KEEPER FLEET CRITICAL - d/default: stopped reporting")
    prom = tmp_path / "fleet.prom"
    assert invoke("fleet", "status", "--config", op, "--textfile", prom, env=env).exit_code == CRITICAL
    text = prom.read_text()
    assert 'hermes_keeper_fleet_status{host="b",profile="default"' in text
    assert "hermes_keeper_fleet_db_bytes{" in text and "hermes_keeper_fleet_copy_timestamp_seconds{" in text


def test_a_report_that_cannot_be_sent_never_fails_the_run(tmp_path):
    closed = f"rest:http://127.0.0.1:{free_port()}/"
    (tmp_path / "pw").write_text("x\n")
    home = demo_home(tmp_path / "home", offsite_toml(closed, tmp_path / "pw", "z", timeout="60s"))
    summary = ran(home, dict(os.environ))["default"]
    assert summary["pruned"] > 0 and summary["offsite"]["error"]
    [failed] = [r for r in read_journal(home / "keeper") if r["action"] == "offsite_report_failed"]
    assert failed["error"].startswith(f"restic repository {closed} unreachable")


def test_reports_are_bounded_per_host_and_profile(tmp_path, monkeypatch):
    repo = str(tmp_path / "repo")
    pw = init_repository(repo, tmp_path)
    home = demo_home(tmp_path / "home", offsite_toml(repo, pw, "e"), sessions=5)
    monkeypatch.setattr(copies, "REPORTS_KEPT", 2)
    profile = Home(home).profile()
    for age in (3, 2, 1):
        fleet.send_report(profile, profile.config(), {}, now=time.time() - age * 3600)
    reports = [s for s in copies.every_snapshot(Restic(repo, str(pw))) if s.kind == copies.REPORT]
    assert len(reports) == 2 and time.time() - reports[-1].time < 3700


@pytest.mark.parametrize(
    "value, error",
    [
        ('"/srv/restic"', "expected a list of strings"),
        ("[]", "expected a list of strings"),
        ('["/srv/a", ""]', "fleet.repositories[1]: expected a non-empty string"),
    ],
)
def test_fleet_repositories_must_be_a_list_of_repositories(tmp_path, value, error):
    toml = tmp_path / "keeper.toml"
    toml.write_text(f"[fleet]\nrepositories = {value}\n")
    [problem] = config_problems(toml)[0]
    assert error in problem, problem


def test_no_repository_at_all_is_said(tmp_path):
    (tmp_path / "keeper.toml").write_text("")
    res = invoke("fleet", "status", "--config", tmp_path / "keeper.toml")
    assert res.exit_code == UNKNOWN
    assert res.output.startswith("HERMES-KEEPER UNKNOWN - no repositories: set [fleet] repositories")


def test_a_host_with_copies_but_no_report_is_critical(tmp_path):
    """A keeper from before fleet reports pushed copies only: the host shows, CRITICAL, with its copy."""
    repo = str(tmp_path / "repo")
    pw = init_repository(repo, tmp_path)
    home = demo_home(tmp_path / "home", offsite_toml(repo, pw, "old"), sessions=10)
    summary = ran(home, dict(os.environ))["default"]
    reports = [s.id for s in copies.every_snapshot(Restic(repo, str(pw))) if s.kind == copies.REPORT]
    restic(repo, pw, "forget", *reports)
    [row] = Fleet([repo], Home(home).profile().config()).status()
    assert (row.host, row.profile, row.status) == ("old", "default", CRITICAL)
    assert row.problem.startswith("no report yet") and row.reported_at is None
    assert row.newest_copy == summary["offsite"]["newest"]


# --- the fleet's archives: sync, search, show, export (issue 37) ------------------------------


def schema(name: str) -> dict:
    return json.loads(files("hermes_keeper").joinpath(f"schemas/{name}.json").read_text())


def operator_fleet(fleet_of, cache_dir: Path) -> Fleet:
    op = fleet_of["operator"]
    return Fleet(policy=effective_policy(op.parent, "", op), cache_dir=cache_dir)


def counted(monkeypatch) -> list[tuple[str, ...]]:
    """Every restic command run from now on (its arguments after the global ones)."""
    calls, run = [], Restic._run

    def _run(self, args, cwd, feed):
        calls.append(args)
        return run(self, args, cwd, feed)

    monkeypatch.setattr(Restic, "_run", _run)
    return calls


def cached_db(fleet_: Fleet, host: str, profile: str, name: str = "archive.db") -> Path:
    [a] = fleet_.archives(host, profile)
    return a.folder / name


def new_month_on_b(home: Path) -> str:
    """Host b archives one more session, in next month's file, and pushes its archive again
    (no report: the status tests read the reports of the fixture's runs); the session's id."""
    profile = Home(home).profile()
    with Archive.for_home(profile.keeper_dir) as store:
        payload = store.get_entry(next(iter(store.entries())).entry)
        payload["session"]["id"] = "b-quagga-session"
        for m in payload["messages"]:
            m["session_id"] = "b-quagga-session"
        payload["messages"][0]["content"] = "the quagga migration plan, second draft"
        store.put([payload], now=time.time() + 40 * DAY)
    policy = profile.config()
    copies.push(profile, policy.offsite, policy.rotation, policy.backup_dest, None)
    return "b-quagga-session"


@pytest.fixture(scope="module")
def synced(fleet_of, tmp_path_factory):
    """The operator's first sync into a cache of its own; (fleet, its result)."""
    fleet_ = operator_fleet(fleet_of, tmp_path_factory.mktemp("cache") / "fleet")
    return fleet_, fleet_.sync()


def test_sync_brings_every_hosts_archive_and_says_the_repository_it_cannot_read(fleet_of, synced):
    fleet_, res = synced
    other = effective_policy(fleet_of["operator"].parent, "", fleet_of["operator"]).fleet["repositories"][2]
    assert res.errors == [f"wrong restic password for {other}"]
    done = {(r.host, r.profile): r for r in res.rows if r.host}
    assert set(done) == {("a", "default"), ("a", "work"), ("b", "default")}  # d pushed no archive
    for (host, name), row in done.items():
        home = fleet_of["homes"][host]
        keeper = (home if name == "default" else home / "profiles" / name) / "keeper"
        assert (row.fetched, row.unchanged, row.repaired) == (1, 0, 0)
        assert row.fetched_bytes == (keeper / "archive.db").stat().st_size
        db = cached_db(fleet_, host, name)
        assert sha256_file(db) == sha256_file(keeper / "archive.db")  # the archive itself
        assert (db.parent / "search-index.db").is_file()  # built at sync: a search only reads
        for p in (db.parent, db.parent.parent, db.parent.parent.parent):
            assert stat.S_IMODE(p.stat().st_mode) == 0o700, p
        for p in db.parent.iterdir():
            assert stat.S_IMODE(p.stat().st_mode) == 0o600, p
    totals = res.totals()
    assert (totals["hosts"], totals["archives"], totals["errors"], totals["files_fetched"]) == (2, 3, 1, 3)


def test_a_second_sync_fetches_nothing_then_only_what_one_host_changed(fleet_of, synced, monkeypatch):
    fleet_, _ = synced
    calls = counted(monkeypatch)
    again = fleet_.sync().totals()
    assert (again["files_fetched"], again["bytes_fetched"], again["files_unchanged"]) == (0, 0, 3)
    assert [c[0] for c in calls] == ["snapshots"] * 3  # one per repository, none per host
    sid = new_month_on_b(fleet_of["homes"]["b"])
    calls.clear()
    res = fleet_.sync()
    b = next(r for r in res.rows if r.host == "b")
    assert (b.fetched, b.unchanged) == (1, 1)  # the new month's file; archive.db stays
    month = next(n for n in os.listdir(cached_db(fleet_, "b", "default").parent) if n.startswith("archive-"))
    assert b.fetched_bytes == cached_db(fleet_, "b", "default", month).stat().st_size
    assert res.totals()["files_fetched"] == 1 and res.totals()["files_unchanged"] == 3
    assert [c[0] for c in calls].count("restore") == 1
    [hit] = [f for f in fleet_.search("quagga migration") if f.result.total]
    assert (hit.archive.host, hit.result.hits[0].entry.session_id) == ("b", sid)


def test_a_tampered_cache_file_is_said_by_search_and_fetched_again(fleet_of, synced):
    fleet_, _ = synced
    db = cached_db(fleet_, "a", "work")
    good = sha256_file(db)
    with open(db, "r+b") as fh:
        fh.write(b"tampered")  # over SQLite's header
    where = ("--config", fleet_of["operator"], "--cache", fleet_.cache_dir)
    said = invoke("fleet", "search", "the", *where, "--json")
    assert said.exit_code == 1, said.output
    doc = json.loads(said.stdout)
    jsonschema.validate(doc, schema("fleet-search"))
    rows = {(r["host"], r["profile"]): r for r in doc["profiles"]}
    assert "cannot open the archive" in rows[("a", "work")]["error"]
    assert rows[("a", "default")]["total"] > 0 and rows[("b", "default")]["total"] > 0  # the others searched
    res = fleet_.sync()
    row = next(r for r in res.rows if (r.host, r.profile) == ("a", "work"))
    assert (row.fetched, row.repaired) == (1, 1)
    assert sha256_file(db) == good


def test_a_full_cache_disk_is_that_hosts_error_and_the_others_sync(fleet_of, tmp_path, monkeypatch):
    fetch = cache.HostCache.fetch

    def full(self, restic, snapshot, names):
        if self.parts[-1] == "work":
            raise OSError(28, "No space left on device")
        return fetch(self, restic, snapshot, names)

    monkeypatch.setattr(cache.HostCache, "fetch", full)
    policy = effective_policy(fleet_of["operator"].parent, "", fleet_of["operator"])
    res = Fleet(policy.fleet["repositories"][:1], policy, tmp_path).sync()
    assert [(r.host, r.profile, r.fetched, r.error) for r in res.rows] == [
        ("a", "default", 1, None),
        ("a", "work", 0, "cache: [Errno 28] No space left on device"),
    ]


def test_an_index_that_cannot_be_written_at_sync_is_left_to_the_search(fleet_of, tmp_path, monkeypatch):
    def full(self, store):
        raise sqlite3.OperationalError("database or disk is full")

    policy = effective_policy(fleet_of["operator"].parent, "", fleet_of["operator"])
    fleet_ = Fleet(policy.fleet["repositories"][:1], policy)
    with monkeypatch.context() as mp:
        mp.setattr(SearchIndex, "refresh", full)
        res = fleet_.sync(cache_dir=tmp_path)  # then the cache this fleet reads
    assert [(r.profile, r.fetched, r.error) for r in res.rows] == [("default", 1, None), ("work", 1, None)]
    sid, text = a_work_session(fleet_of)
    [found] = fleet_.search(text, "a", "work")
    assert sid in [h.entry.session_id for h in found.result.hits]


def test_one_sync_at_a_time_per_cache(synced):
    fleet_, _ = synced
    fd = os.open(fleet_.cache_dir / cache.LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # a sync in progress
        with pytest.raises(TryLater, match="another fleet sync is updating"):
            fleet_.sync()
    finally:
        os.close(fd)


def test_a_repository_that_fails_keeps_its_cache_and_the_others_sync(fleet_of, tmp_path):
    c = Home(fleet_of["homes"]["c"]).profile().config()  # the other repository, its own password
    other = c.offsite["repository"]
    res = Fleet([other], c, tmp_path).sync()
    assert [(r.host, r.fetched, r.error) for r in res.rows] == [("c", 1, None)]
    op = operator_fleet(fleet_of, tmp_path)  # the other repository opens with another password
    failed = op.sync()
    assert failed.errors == [f"wrong restic password for {other}"]
    assert [r.host for r in failed.rows if not r.error] == ["a", "a", "b"]
    assert [a.host for a in op.archives()] == ["a", "a", "b", "c"]  # c's cache stays, searchable
    assert op.search("the", host="c")[0].result.total > 0


def a_work_session(fleet_of) -> tuple[str, str]:
    """A session a/work pruned (its archive) and a text of its first user message."""
    keeper = fleet_of["homes"]["a"] / "profiles" / "work" / "keeper"
    with Archive.for_home(keeper, create=False) as store:
        for entry in store.entries():
            payload = store.get_entry(entry.entry)
            said = [m["content"] for m in payload["messages"] if m["role"] == "user" and m.get("content")]
            if said and len(said[0]) > 20:
                return entry.session_id, said[0][:20]
    raise AssertionError("a/work archived no session with a user message")


def test_the_cli_search_json_is_archive_searchs_with_host_and_profile(fleet_of, synced):
    fleet_, _ = synced
    sid, text = a_work_session(fleet_of)
    where = ("--config", fleet_of["operator"], "--cache", fleet_.cache_dir)
    res = invoke("fleet", "search", text, *where, "--json", env=fleet_of["env"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    jsonschema.validate(doc, schema("fleet-search"))
    rows = {(r["host"], r["profile"]): r for r in doc["profiles"]}
    assert set(rows) == {("a", "default"), ("a", "work"), ("b", "default")}
    assert sid in [h["session"]["session_id"] for h in rows[("a", "work")]["hits"]]
    home = fleet_of["homes"]["a"]
    one = invoke("archive", "search", text, "--home", home, "--profile", "work", "--json")
    [mine] = json.loads(one.stdout)["profiles"]
    row = rows[("a", "work")]
    assert set(row) == set(mine) | {"host", "repository", "snapshot"}
    assert set(row["hits"][0]) == set(mine["hits"][0]) | {"host", "profile"}
    assert [h["session"] for h in row["hits"]] == [h["session"] for h in mine["hits"]]
    narrowed = invoke("fleet", "search", text, *where, "--host", "a", "--profile", "work")
    assert narrowed.exit_code == 0, narrowed.output
    heads = [line for line in narrowed.output.splitlines() if not line.startswith(" ")]
    assert {line.split(":")[0] for line in heads} == {"a/work"}
    assert sid in narrowed.output
    assert [f.result.total for f in fleet_.search(text, source="no-such-source")] == [0, 0, 0]
    # The text too is archive search's, line for line, a word past --limit included ("more than").
    took = re.compile(r" \(\d+(\.\d+)?m?s\)$")
    lines = [
        [took.sub("", line.removeprefix("a/work: ")) for line in res.output.splitlines()]
        for res in (
            invoke("fleet", "search", "the", "--limit", "1", *where, "--host", "a", "--profile", "work"),
            invoke("archive", "search", "the", "--limit", "1", "--home", home, "--profile", "work"),
        )
    ]
    assert lines[0] == lines[1] and "more than 1 of" in lines[0][-1], lines
    since = fleet_.search(
        text, "a", "work", source=rows[("a", "work")]["hits"][0]["session"]["source"], since=0
    )
    assert since[0].result.total >= 1
    assert fleet_.search(text, "a", "work", since=time.time() + DAY)[0].result.total == 0


def test_the_cli_show_and_export_are_archive_show_and_export(fleet_of, synced, tmp_path):
    fleet_, _ = synced
    sid, _ = a_work_session(fleet_of)
    where = ("--config", fleet_of["operator"], "--cache", fleet_.cache_dir)
    home = fleet_of["homes"]["a"]
    shown = invoke("fleet", "show", "a", sid, "--profile", "work", *where, env=fleet_of["env"])
    assert shown.exit_code == 0, shown.output
    assert shown.output == invoke("archive", "show", sid, "--home", home, "--profile", "work").output
    raw = json.loads(invoke("fleet", "show", "a", sid, "--profile", "work", *where, "--json").stdout)
    jsonschema.validate(raw, schema("fleet-show"))
    assert (raw["profiles"][0]["host"], raw["profiles"][0]["archived"]["session"]["id"]) == ("a", sid)
    several = invoke("fleet", "show", "a", sid, *where)  # a has two profiles: which one is asked
    assert several.exit_code != 0 and "host a has 2 cached profiles (default, work)" in several.output
    out = invoke("fleet", "export", *where, "--host", "a", "--profile", "work", "-o", tmp_path / "f.jsonl")
    assert out.exit_code == 0, out.output
    invoke("archive", "export", "--home", home, "--profile", "work", "-o", tmp_path / "a.jsonl")
    assert (tmp_path / "f.jsonl").read_text() == (tmp_path / "a.jsonl").read_text() != ""
    md = invoke("fleet", "export", *where, "--format", "markdown", "-o", tmp_path / "md")
    assert md.exit_code == 0, md.output
    assert (tmp_path / "md" / "a" / "work" / f"{sid}.md").is_file()
    assert {p.name for p in (tmp_path / "md").iterdir()} == {"a", "b"}


def test_the_cli_sync_says_each_host_and_the_repository_it_cannot_read(fleet_of, synced):
    where = ("--config", fleet_of["operator"], "--cache", synced[0].cache_dir)
    res = invoke("fleet", "sync", *where, env=fleet_of["env"] | {"COLUMNS": "80"})
    assert res.exit_code == 1, res.output
    assert all(len(line) <= 80 for line in res.stdout.splitlines()), res.stdout
    assert res.stderr.startswith("wrong restic password for ") and len(res.stderr.splitlines()) == 1
    assert "a/work " in res.stdout and "b/default " in res.stdout
    doc = json.loads(invoke("fleet", "sync", *where, "--json", env=fleet_of["env"]).stdout)
    jsonschema.validate(doc, schema("fleet-sync"))
    assert (doc["files_fetched"], doc["bytes_fetched"], doc["errors"]) == (0, 0, 1)
