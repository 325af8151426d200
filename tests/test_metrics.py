"""``--textfile``: node_exporter textfile-collector metrics, read back with prometheus_client's
own parser."""

from __future__ import annotations

import subprocess
import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

from hermes_keeper import demo
from tests.keeper_proc import keeper_cmd


@pytest.fixture
def home(tmp_path):
    home = tmp_path / "home"
    demo.build_home(home, demo.generate(time.time(), sessions=40))
    (demo.build_home(home / "profiles" / "work", demo.generate(time.time(), sessions=10, seed=3)))
    return home


def samples(path) -> dict[tuple, float]:
    """(metric name, sorted labels) -> value, every family a gauge with the keeper's prefix."""
    out = {}
    for family in text_string_to_metric_families(path.read_text()):
        assert family.name.startswith("hermes_keeper_") and family.type == "gauge"
        for s in family.samples:
            assert set(s.labels) >= {"profile"}
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def keeper(home, *args):
    return subprocess.run(keeper_cmd(home, *args), capture_output=True, text=True)


def test_report_textfile(home, tmp_path):
    prom = tmp_path / "hermes.prom"
    assert keeper(home, "report", "--all-profiles", "--quiet", "--textfile", str(prom)).returncode == 0
    got = samples(prom)
    db = (home / "state.db").stat().st_size
    assert got[("hermes_keeper_db_bytes", (("profile", "default"),))] == db
    assert (
        got[("hermes_keeper_db_bytes", (("profile", "work"),))]
        == (home / "profiles/work/state.db").stat().st_size
    )
    cron = got[("hermes_keeper_sessions", (("profile", "default"), ("source", "cron")))]
    assert cron > 0
    runaways = sum(
        v
        for (n, labels), v in got.items()
        if n == "hermes_keeper_runaway_sessions" and ("profile", "default") in labels
    )
    assert runaways == 2
    assert got[("hermes_keeper_growth_bytes_per_second", (("profile", "default"),))] > 0


def test_run_and_check_textfiles(home, tmp_path):
    run_prom, check_prom = tmp_path / "run.prom", tmp_path / "check.prom"
    assert keeper(home, "run", "--quiet", "--textfile", str(run_prom)).returncode == 0
    got = samples(run_prom)
    key = (("profile", "default"),)
    assert got[("hermes_keeper_run_zombies_closed", key)] >= 3
    assert got[("hermes_keeper_run_timestamp_seconds", key)] == pytest.approx(time.time(), abs=600)
    # the demo's runaways ended 10-50 days ago: counted by check only as recent as that
    code = keeper(home, "check", "-t", "runaway_recent=60d", "--textfile", str(check_prom)).returncode
    got = samples(check_prom)
    assert got[("hermes_keeper_check_status", key)] == code
    assert got[("hermes_keeper_check_last_run_age_seconds", key)] >= 0
    assert got[("hermes_keeper_check_measure_status", (("measure", "runaways"), ("profile", "default")))] == 2


def test_bad_textfile_path_refused_before_any_change(home, tmp_path):
    out = keeper(home, "run", "--textfile", str(tmp_path / "metrics.txt"))
    assert out.returncode == 2 and len(out.stderr.splitlines()) == 1 and "*.prom" in out.stderr
    assert not (home / "keeper").exists()
    out = keeper(home, "check", "--textfile", str(tmp_path / "nowhere" / "m.prom"))
    assert out.returncode == 3 and out.stdout.startswith("HERMES-KEEPER UNKNOWN")
