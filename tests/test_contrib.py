"""``contrib/``: the Prometheus alerting rules and the Grafana dashboard speak the metrics the
keeper really writes. The series come from ``report``, ``run`` and ``check --textfile`` on a demo
home; the rules are checked and unit-tested by Debian's ``promtool`` (``./run test`` installs it)."""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from ruamel.yaml import YAML

from hermes_keeper import demo
from hermes_keeper.model.policy import Policy
from tests.keeper_proc import keeper_cmd

CONTRIB = Path(__file__).resolve().parent.parent / "contrib"
RULES = CONTRIB / "prometheus" / "hermes-keeper.rules.yml"
RULES_TEST = CONTRIB / "prometheus" / "hermes-keeper.rules.test.yml"
DASHBOARD = CONTRIB / "grafana" / "hermes-keeper.json"
#: Labels Prometheus adds at scrape time, not the keeper.
TARGET_LABELS = {"instance", "job"}
METRIC = re.compile(r"\bhermes_keeper_[a-z_]+\b")


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> dict[str, set[frozenset[str]]]:
    """metric name -> the label-name sets the keeper writes it with (report, run and check, two profiles)."""
    tmp = tmp_path_factory.mktemp("contrib")
    home = tmp / "home"
    demo.build_home(home, demo.generate(time.time(), sessions=60))
    demo.build_home(home / "profiles" / "work", demo.generate(time.time(), sessions=10, seed=3))
    out: dict[str, set[frozenset[str]]] = {}
    for command in ("report", "run", "check"):
        prom = tmp / f"{command}.prom"
        done = subprocess.run(
            keeper_cmd(home, command, "--all-profiles", "--quiet", "--textfile", str(prom)),
            capture_output=True,
            text=True,
        )
        assert prom.exists(), done.stderr
        for family in text_string_to_metric_families(prom.read_text()):
            for s in family.samples:
                out.setdefault(s.name, set()).add(frozenset(s.labels))
    return out


def rule_exprs() -> list[str]:
    groups = YAML(typ="safe").load(RULES.read_text())["groups"]
    return [rule["expr"] for group in groups for rule in group["rules"]]


def dashboard_exprs() -> list[str]:
    dash = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for panel in dash["panels"] for t in panel["targets"]]
    exprs += [v["definition"] for v in dash["templating"]["list"] if "definition" in v]
    return exprs


def labels_used(expr: str) -> set[str]:
    """Label names an expression groups by or matches on."""
    names = set()
    for group in re.findall(r"\bby\s*\(([^)]*)\)", expr):
        names |= {n.strip() for n in group.split(",") if n.strip()}
    for matchers in re.findall(r"\{([^}]*)\}", expr):
        names |= set(re.findall(r"([a-z_]+)\s*(?:=~|!~|!=|=)", matchers))
    return names


@pytest.mark.parametrize("source", ["rules", "dashboard"])
def test_every_expression_names_metrics_and_labels_the_keeper_writes(written, source):
    exprs = rule_exprs() if source == "rules" else dashboard_exprs()
    assert len(exprs) >= 9
    for expr in exprs:
        names = set(METRIC.findall(expr))
        assert names, expr
        assert names <= set(written), f"{expr}: not written by the keeper: {names - set(written)}"
        keeper_labels = set().union(*(set().union(*written[n]) for n in names))
        assert labels_used(expr) <= keeper_labels | TARGET_LABELS, expr


def test_rule_tests_feed_series_shaped_as_the_keeper_writes_them(written):
    tests = YAML(typ="safe").load(RULES_TEST.read_text())["tests"]
    series = [s["series"] for t in tests for s in t["input_series"]]
    assert series
    for text in series:
        name, labels = re.fullmatch(r"(\w+)\{(.*)\}", text).groups()
        keys = frozenset(re.findall(r"(\w+)=", labels)) - TARGET_LABELS
        assert keys in written.get(name, set()), f"{text}: the keeper writes {name} with {written.get(name)}"


def test_promtool_checks_and_unit_tests_the_rules():
    for args in (["check", "rules", RULES.name], ["test", "rules", RULES_TEST.name]):
        done = subprocess.run(["promtool", *args], cwd=RULES.parent, capture_output=True, text=True)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "SUCCESS" in done.stdout


#: alert -> the ``[check]`` default its threshold repeats.
SAME_AS_CHECK = {
    "HermesKeeperNoRecentRun": "last_run_warn",
    "HermesKeeperDiskFullSoon": "full_in_crit",
    "HermesKeeperFastGrowth": "growth_warn",
    "HermesKeeperBigWal": "wal_crit",
    "HermesKeeperBackupOld": "backup_warn",
}


def test_the_rules_thresholds_are_the_keepers_check_defaults():
    """A page and ``check`` agree: each rule's number is the policy's default."""
    groups = YAML(typ="safe").load(RULES.read_text())["groups"]
    rules = {r["alert"]: r["expr"] for g in groups for r in g["rules"]}
    defaults = Policy().check
    for alert, key in SAME_AS_CHECK.items():
        bound = re.split(r"[<>]", rules[alert])[-1]
        assert re.fullmatch(r"[\d.e *]+", bound), rules[alert]
        assert eval(bound) == defaults[key], (alert, bound, defaults[key])  # digits, "e", "*" only
