"""``deploy/prometheus/``: the recording and alerting rules are valid, tested, and name real series.

- ``promtool check rules`` accepts the rules file;
- ``promtool test rules`` passes the unit tests next to it (each alert has at least one case that
  fires and one that does not);
- every metric a rule reads is one the daemon exports (:class:`~lakefs_mirror.metrics.MirrorMetrics`,
  or a recording rule of the same file, or Prometheus's ``up``), and every label it filters or groups
  on is one those series carry (``job``/``instance`` are added by Prometheus).

The firing of ``LakeFSMirrorFailing`` for the series a really failing mirror exports is tested in
``test_mirror_errors.py``.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import yaml

from tests.mirror.test_dashboard import GROUPING, SELECTOR, TARGET_LABELS, exported, metric_names
from tests.support.env import require_tool
from tests.support.timing import scaled

DIR = Path(__file__).resolve().parents[2] / "deploy" / "prometheus"
RULES = DIR / "lakefs-mirror-rules.yml"
TESTS = DIR / "lakefs-mirror-rules.test.yml"
ALERTS = {"LakeFSMirrorLagHigh", "LakeFSMirrorFailing", "LakeFSMirrorNoLeaseHolder", "LakeFSMirrorDaemonDown"}


def rules() -> list[dict[str, Any]]:
    doc = yaml.safe_load(RULES.read_text())
    return [rule for group in doc["groups"] for rule in group["rules"]]


def promtool(*args: str, cwd: Path = DIR) -> str:
    tool = require_tool("promtool", "prometheus")
    done = subprocess.run([tool, *args], capture_output=True, timeout=scaled(60), check=False, cwd=cwd)
    output = (done.stdout + done.stderr).decode(errors="replace")
    assert done.returncode == 0, output
    return output


def test_promtool_checks_the_rules() -> None:
    assert "SUCCESS: 8 rules found" in promtool("check", "rules", RULES.name)


def check_alert_cases(all_rules: list[dict[str, Any]], tests: Path, alerts: set[str]) -> None:
    """Every alert of ``alerts`` (exactly the file's) has a case that fires and one that does not,
    and ``promtool test rules`` passes (shared with the GC daemon's rules)."""
    assert {r["alert"] for r in all_rules if "alert" in r} == alerts
    cases: dict[str, list[bool]] = {}
    for test in yaml.safe_load(tests.read_text())["tests"]:
        for case in test["alert_rule_test"]:
            cases.setdefault(case["alertname"], []).append(bool(case["exp_alerts"]))
    for alert in alerts:
        assert True in cases.get(alert, []) and False in cases.get(alert, []), alert
    assert "SUCCESS" in promtool("test", "rules", tests.name, cwd=tests.parent)


def check_rule_series(
    all_rules: list[dict[str, Any]], series: dict[str, set[str]], recorded_labels: set[str]
) -> None:
    """Every rule reads only exported (or recorded, or ``up``) series and labels they carry."""
    recorded = {r["record"] for r in all_rules if "record" in r}
    known = set(series) | recorded | {"up"}
    for rule in all_rules:
        expr = rule["expr"]
        names = metric_names(expr)
        assert names and names <= known, f"{expr!r} reads series nobody exports: {names - known}"
        labels: set[str] = set()
        for selector in SELECTOR.finditer(re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)):
            labels |= set(re.findall(r"(\w+)\s*(?:=~|!~|!=|=)", selector.group(2)))
        for grouping in GROUPING.finditer(expr):
            labels |= set(re.findall(r"\w+", grouping.group(0).split("(", 1)[1]))
        carried = set().union(*(series.get(n, set()) for n in names)) | TARGET_LABELS
        if names & recorded:
            carried |= recorded_labels
        assert labels <= carried, f"{expr!r} uses labels its series lack: {labels - carried}"


def test_promtool_unit_tests_pass_and_cover_every_alert() -> None:
    check_alert_cases(rules(), TESTS, ALERTS)


def test_rules_read_only_exported_series_and_labels() -> None:
    check_rule_series(rules(), exported(), {"region", "mirror", "kind"})
