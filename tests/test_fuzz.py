"""Readers of files another program wrote, fuzzed: each parses, or says why in one line
(KeeperError), or gives a clear "unknown" state. Never a traceback.

``sessions/sessions.json`` and ``gateway.pid`` are Hermes's; ``keeper.toml`` is the user's;
a backup folder's ``manifest.json`` may be edited, truncated or shared between machines.
"""

from __future__ import annotations

import json
import string

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hermes_keeper.backup.snapshot import MANIFEST, BackupRecord, list_backups
from hermes_keeper.errors import KeeperError
from hermes_keeper.model.policy import Policy, effective_policy
from hermes_keeper.run.survey import RoutingUnknown, routed_from_sessions_json
from hermes_keeper.sqlite.holders import gateway_pid

FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats()
    | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=12,
)
#: Raw file bodies: JSON of any shape, its text cut short, or bytes that are not even UTF-8.
json_files = (
    json_values.map(lambda v: json.dumps(v).encode())
    | json_values.map(lambda v: json.dumps(v).encode()).flatmap(
        lambda b: st.integers(0, len(b)).map(lambda n: b[:n])
    )
    | st.binary(max_size=64)
)


@FAST
@given(
    body=json_files
    | st.dictionaries(st.text(max_size=8), json_values, max_size=4).map(
        lambda d: json.dumps({"agent:main:telegram:dm:1": d, **{"_meta": 1}}).encode()
    )
)
def test_sessions_json(tmp_path, body):
    (tmp_path / "sessions.json").write_bytes(body)
    try:
        ids = routed_from_sessions_json(tmp_path)
    except RoutingUnknown as exc:
        assert "sessions.json" in str(exc)
        return
    assert isinstance(ids, set) and all(isinstance(i, str) for i in ids)


@FAST
@given(
    routes=st.dictionaries(
        st.text(min_size=1, max_size=12).filter(lambda k: not k.startswith("_")),
        st.tuples(
            st.text(min_size=1, max_size=12), st.dictionaries(st.text(max_size=6), json_values, max_size=3)
        ),
        max_size=5,
    )
)
def test_sessions_json_routes_every_session_it_names(tmp_path, routes):
    """Whatever else an entry holds, its ``session_id`` is routed: a reader that returned "routes
    nothing" for a mirror it did read would let a routed session be closed or pruned."""
    mirror = {key: {**extra, "session_id": sid} for key, (sid, extra) in routes.items()}
    (tmp_path / "sessions.json").write_text(json.dumps({**mirror, "_meta": {"session_id": "not a route"}}))
    assert routed_from_sessions_json(tmp_path) == {sid for sid, _ in routes.values()}


@FAST
@given(body=json_files | st.integers(min_value=-(2**80), max_value=2**80).map(lambda n: str(n).encode()))
def test_gateway_pid(tmp_path, body):
    (tmp_path / "gateway.pid").write_bytes(body)
    pid = gateway_pid(tmp_path)
    assert pid is None or (isinstance(pid, int) and pid > 0)


_KEYS = [
    "zombie_after",
    "keep_titled",
    "archive",
    "backup",
    "compact",
    "budget_ms",
    "pause_ms",
    "retention",
    "disk",
    "files",
    "profiles",
    "cron",
    "max_db_bytes",
    "low_water",
    "max_age",
    "x",
]
toml_scalars = (
    st.integers(min_value=-(2**64), max_value=2**64).map(str)
    | st.sampled_from(
        [
            "nan",
            "inf",
            "-inf",
            "1e400",
            "true",
            "false",
            '"7d"',
            '"-3d"',
            '"2GB"',
            '"x"',
            '"nan d"',
            "[]",
            "{}",
            '"1e999d"',
            '"0"',
            "0.0",
        ]
    )
    | st.text(string.printable, max_size=8).map(json.dumps)
)
toml_files = st.lists(
    st.tuples(
        st.sampled_from(
            [
                "",
                "[retention]\n",
                "[disk]\n",
                "[files]\n",
                "[profiles.default]\n",
                "[profiles.default.retention]\n",
                "[profiles]\n",
            ]
        ),
        st.sampled_from(_KEYS),
        toml_scalars,
    ),
    max_size=6,
).map(lambda rows: "".join(f"{head}{k} = {v}\n" for head, k, v in rows).encode()) | st.binary(max_size=64)


@FAST
@given(body=toml_files)
def test_keeper_toml(tmp_path, body):
    (tmp_path / "keeper.toml").write_bytes(body)
    try:
        policy = effective_policy(tmp_path, "default")
    except KeeperError as exc:
        assert "\n" not in str(exc).strip()
        return
    assert isinstance(policy, Policy)


_RECORD = {
    "name": "state-20260101T000000Z.db.zst",
    "profile": "default",
    "home": "/home/u/.hermes",
    "created_at": 1.7e9,
    "bytes": 10,
    "raw_bytes": 20,
    "sha256": "0" * 64,
    "schema_version": 22,
    "source_bytes": 30,
}
records = st.fixed_dictionaries({}, optional={k: st.just(v) | json_values for k, v in _RECORD.items()}) | (
    st.sampled_from(sorted(_RECORD)).flatmap(  # a whole record with one field gone wrong
        lambda k: (json_values | st.sampled_from(["../../x", "/etc/passwd", ".", ""])).map(
            lambda v: {**_RECORD, k: v}
        )
    )
)
manifests = (
    st.lists(records, max_size=3).map(lambda rs: json.dumps({"format": 1, "backups": rs}).encode())
    | json_files
)


@FAST
@given(body=manifests)
def test_backup_manifest(tmp_path, body):
    (tmp_path / MANIFEST).write_bytes(body)
    try:
        found = list_backups(tmp_path)
    except KeeperError as exc:
        assert MANIFEST in str(exc)
        return
    for r in found:  # what is listed is usable: names stay in the folder, numbers are numbers
        assert isinstance(r, BackupRecord) and r.path.parent == tmp_path
        assert isinstance(r.created_at, (int, float)) and isinstance(r.bytes, int)
        r.to_dict()
