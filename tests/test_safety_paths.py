"""Each safety path alone between the user and a loss: these tests fail when that one path is
removed (docs/testing.md lists the mutants they kill)."""

from __future__ import annotations

import hashlib
import json
import sqlite3
import time
from pathlib import Path

import pytest
import zstandard

from hermes_keeper import demo
from hermes_keeper import home as home_mod
from hermes_keeper.archive import store as store_mod
from hermes_keeper.errors import KeeperError
from hermes_keeper.home import Home
from hermes_keeper.run import compact as compact_mod
from tests.sessions import session

DAY = 86400.0
NOW = time.time()
OLD = NOW - 200 * DAY  # past every default retention
KEY = "agent:main:telegram:dm:7"


def ids(db: Path, sql: str = "SELECT id FROM sessions") -> set:
    conn = sqlite3.connect(db)
    try:
        return {r[0] for r in conn.execute(sql)}
    finally:
        conn.close()


def build(path: Path, sessions: list[dict], routed: dict | None = None) -> Path:
    demo.build_home(path, demo.DemoSpec(now=NOW, sessions=sessions, routed=routed or {}))
    return path


def decisions(home: Path) -> dict[str, tuple[str, str]]:
    plan = Home(home).profile().plan()
    return {sid: (d.action, d.reason.code) for sid, d in plan.decisions.items()}


# --- the archive is read back before anything is deleted ---------------------------------------


def test_a_payload_that_does_not_read_back_is_never_deleted(tmp_path, monkeypatch):
    """The archive's own write succeeded but the stored bytes are damaged: only the read-back
    (``prune._archive_verified``) stands between the run and a delete with no good copy."""
    home = build(tmp_path / "home", [session(f"s{i}", OLD + i * 3600) for i in range(6)])
    put = store_mod.Archive.put

    def damaging_put(self, payloads, *args, **kwargs):
        entries = put(self, payloads, *args, **kwargs)
        marks = ",".join("?" * len(entries))
        for f in self.files:  # the bytes on disk no longer match their sha256
            f.conn.execute(
                f"UPDATE archived_sessions SET payload = zeroblob(length(payload)) WHERE entry IN ({marks})",
                entries,
            )
        return entries

    monkeypatch.setattr(store_mod.Archive, "put", damaging_put)
    with pytest.raises(KeeperError):
        Home(home).profile().run()
    assert ids(home / "state.db") == {f"s{i}" for i in range(6)}


# --- each routing source alone keeps a routed session -------------------------------------------


@pytest.mark.parametrize("source", ["gateway_routing", "sessions.json"])
def test_each_routing_source_alone_keeps_its_session(tmp_path, source):
    """An old, ended telegram session the gateway routes to, known from one source only, beside
    its twin that nobody routes: the route is the only difference, so it alone keeps it."""
    sessions = [
        session("routed", OLD, source="telegram", key=KEY),
        session("twin", OLD, source="telegram", key=KEY + "-gone"),
    ]
    home = build(tmp_path / "home", sessions, routed={KEY: "routed"})
    if source == "gateway_routing":
        (home / "sessions" / "sessions.json").write_text("{}", encoding="utf-8")
    else:
        conn = sqlite3.connect(home / "state.db")
        conn.execute("DELETE FROM gateway_routing")
        conn.commit()
        conn.close()
    assert decisions(home) == {"routed": ("keep", "routed"), "twin": ("prune", "retention")}
    Home(home).profile().run()
    assert ids(home / "state.db") == {"routed"}


# --- a zombie that woke up after the plan stays open -------------------------------------------


def test_a_zombie_that_got_a_message_after_the_plan_is_not_closed(tmp_path, monkeypatch):
    """Hermes writes to the session between the plan and the close: the close's own guard (no
    message newer than the planned end) is all that keeps the live session open."""
    home = build(
        tmp_path / "home",
        [session("zombie", NOW - 3 * DAY, ended=False), session("other", NOW - 3 * DAY, ended=False)],
    )
    plan = home_mod.make_plan

    def plan_then_hermes_writes(*args, **kwargs):
        made = plan(*args, **kwargs)
        assert {z.session_id for z in made.zombies} == {"zombie", "other"}
        conn = sqlite3.connect(home / "state.db")
        conn.execute(
            "INSERT INTO messages (session_id, role, content, timestamp) VALUES ('zombie', 'user', 'hi', ?)",
            (time.time(),),
        )
        conn.commit()
        conn.close()
        return made

    monkeypatch.setattr(home_mod, "make_plan", plan_then_hermes_writes)
    Home(home).profile().run()
    open_ = ids(home / "state.db", "SELECT id FROM sessions WHERE ended_at IS NULL")
    assert open_ == {"zombie"}  # "other" closed: the close itself ran


# --- the VACUUM beside Hermes is decided by its measured stall ---------------------------------


@pytest.mark.parametrize("estimate_s, vacuumed", [(60.0, False), (0.01, True)])
def test_the_vacuum_beside_hermes_follows_its_estimated_stall(
    tmp_path, hold_open, monkeypatch, estimate_s, vacuumed
):
    """With a process holding state.db, the one-time VACUUM runs only when the measured stall
    fits ``live_vacuum_stall`` (5 s): the estimate alone decides here."""
    home = tmp_path / "home"
    demo.build_home(home, demo.generate(NOW, sessions=40))
    conn = sqlite3.connect(home / "state.db")
    conn.execute("DELETE FROM messages WHERE id % 2 = 0")  # free pages for compact to give back
    conn.commit()
    conn.close()
    monkeypatch.setattr(compact_mod, "estimate_vacuum_s", lambda *args: estimate_s)
    hold_open(home / "state.db", via_hermes=False)
    res = Home(home).profile().compact().to_dict()
    assert res["vacuumed"] is vacuumed, json.dumps(res)


# --- restore checks the database inside a backup, not only its file -----------------------------


def test_a_backup_whose_checksum_holds_but_whose_database_is_damaged_is_not_restored(tmp_path):
    """The file matches the manifest's size and sha256 (it was damaged before it was written, as a
    bad page copied by the snapshot would be): only restore's integrity_check refuses it."""
    home = tmp_path / "home"
    demo.build_home(home, demo.generate(NOW, sessions=30))
    profile = Home(home).profile()
    record = profile.backup().record
    damaged = tmp_path / "damaged.db"
    damaged.write_bytes(zstandard.ZstdDecompressor().stream_reader(record.path.read_bytes()).read())
    conn = sqlite3.connect(damaged)  # an index that no longer matches its table: every read works
    conn.execute("PRAGMA writable_schema=ON")
    conn.execute(
        "UPDATE sqlite_master SET sql = 'CREATE INDEX idx_sessions_source ON sessions(title)'"
        " WHERE name = 'idx_sessions_source'"
    )
    conn.commit()
    conn.close()
    raw = damaged.read_bytes()
    packed = zstandard.ZstdCompressor().compress(raw)
    record.path.write_bytes(packed)
    manifest = record.path.parent / "manifest.json"
    data = json.loads(manifest.read_text())
    for r in data["backups"]:
        if r["name"] == record.name:
            r["bytes"], r["sha256"] = len(packed), hashlib.sha256(packed).hexdigest()
    manifest.write_text(json.dumps(data))
    before = (home / "state.db").read_bytes()
    with pytest.raises(KeeperError, match="damaged database"):
        profile.restore(record.name)
    assert (home / "state.db").read_bytes() == before


# --- the deletes go in transactions of the policy's budget ---------------------------------------


def test_the_deletes_follow_the_write_budget(tmp_path):
    """The same prune with a 1 ms budget and a 1 s one: the short budget cuts the deletes into
    many more transactions (counted, not timed: the machine's speed only moves both)."""
    runs = {}
    for budget in (1, 1000):
        home = tmp_path / f"b{budget}"
        demo.build_home(home, demo.generate(NOW, sessions=120))
        (home / "keeper.toml").write_text(
            f"budget_ms = {budget}\npause_ms = 0\nbackup = false\ncompact = false\n"
        )
        runs[budget] = Home(home).profile().run().to_dict()
    assert runs[1]["messages_deleted"] == runs[1000]["messages_deleted"] > 0
    assert runs[1]["writer"]["transactions"] >= 4 * runs[1000]["writer"]["transactions"], runs
