"""A multiplexed gateway's routes for a profile in another home (run/routing.py); the real-Hermes
case is in tests/test_hermes_iot.py (test_a_multiplexed_gateways_routes_...)."""

from __future__ import annotations

import json
import sqlite3

from hermes_keeper.place import Place
from hermes_keeper.run.routing import launch_home_routes, launch_homes


def _routing(db, rows):
    with sqlite3.connect(db) as c:
        c.execute(
            "CREATE TABLE gateway_routing (scope TEXT, session_key TEXT, entry_json TEXT, updated_at REAL)"
        )
        c.executemany("INSERT INTO gateway_routing VALUES ('', ?, ?, 0)", rows)
    c.close()


def test_every_other_home_of_the_root_is_read_not_one_through_a_link(tmp_path):
    root = tmp_path / "root"
    for name in ("a", "b"):
        (root / "profiles" / name).mkdir(parents=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (root / "profiles" / "linked").symlink_to(elsewhere)
    a = Place("a", root / "profiles" / "a", root)
    assert launch_homes(a) == [root, root / "profiles" / "b"]
    assert launch_homes(Place("default", root, root)) == [root / "profiles" / "a", root / "profiles" / "b"]


def test_routes_naming_the_profile_count_and_unreadable_routing_is_said(tmp_path):
    root = tmp_path
    coder = root / "profiles" / "coder"
    coder.mkdir(parents=True)
    _routing(
        root / "state.db",
        [
            ("agent:coder:telegram:dm:1", json.dumps({"session_id": "s1"})),
            ("agent:main:telegram:dm:1", json.dumps({"session_id": "s2"})),  # the default profile's
            ("agent:coder:telegram:dm:2", "not json"),
            (None, json.dumps({"session_id": "s3"})),
        ],
    )
    place = Place("coder", coder, root)
    assert launch_home_routes(place) == ({"s1"}, [])
    other = root / "profiles" / "other"
    (other / "sessions").mkdir(parents=True)
    (other / "sessions" / "sessions.json").write_text(json.dumps(["not", "the", "mirror"]))
    (other / "state.db").write_bytes(b"not a database at all" * 100)
    ids, problems = launch_home_routes(place)
    assert ids == {"s1"} and len(problems) == 2
    assert "profiles/other/state.db routing unreadable" in problems[0]
    assert "profiles/other/sessions/sessions.json unreadable (ValueError)" in problems[1]
