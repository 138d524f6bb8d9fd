"""``deploy/prometheus/lakefs-gc-rules.yml``: valid, unit-tested, and reading only real series.

- ``promtool check rules`` accepts the rules file;
- ``promtool test rules`` passes the unit tests next to it, and each alert has at least one case
  that fires and one that does not;
- every metric a rule reads is one a GC daemon exports (:class:`~lakefs_gc.metrics.GCMetrics` plus
  the HTTP metrics of :func:`lakefs_core.service.http.build_app`), a recording rule of the same file, or
  Prometheus's ``up``; every label a rule filters or groups on is one those series carry
  (``job``/``instance`` are added by Prometheus);
- every alert is described in docs/operations.md, and ``LakeFSGCDaemonDown`` watches the ``lakefs-gc``
  job that its scrape config names.

The PromQL helpers are the mirror's (``tests/mirror/test_dashboard.py``), the series introspection
this directory's ``test_gc_dashboard.py``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from tests.gc.test_gc_dashboard import exported
from tests.mirror.test_alert_rules import check_alert_cases, check_rule_series, promtool

DIR = Path(__file__).resolve().parents[2] / "deploy" / "prometheus"
OPERATIONS = DIR.parents[1] / "docs" / "operations.md"  # where the alerts and the scrape config are described
RULES = DIR / "lakefs-gc-rules.yml"
TESTS = DIR / "lakefs-gc-rules.test.yml"
ALERTS = {
    "LakeFSGCNoSuccessfulRun",
    "LakeFSGCDeleteFailures",
    "LakeFSGCSweepRefused",
    "LakeFSGCHardDeleteBacklog",
    "LakeFSGCHardDeleteFailing",
    "LakeFSGCPassesFailing",
    "LakeFSGCDaemonDown",
}


def rules() -> list[dict[str, Any]]:
    doc = yaml.safe_load(RULES.read_text())
    return [rule for group in doc["groups"] for rule in group["rules"]]


def test_promtool_checks_the_rules() -> None:
    assert f"SUCCESS: {len(rules())} rules found" in promtool("check", "rules", RULES.name, cwd=DIR)


def test_promtool_unit_tests_pass_and_cover_every_alert() -> None:
    check_alert_cases(rules(), TESTS, ALERTS)


def test_rules_read_only_exported_series_and_labels() -> None:
    check_rule_series(rules(), exported(), {"repo", "phase", "outcome"})


def test_every_alert_is_documented_and_the_daemon_job_matches_the_docs() -> None:
    readme = OPERATIONS.read_text(encoding="utf-8")
    for rule in rules():
        if "alert" in rule:
            assert rule["labels"]["severity"] in ("warning", "critical"), rule["alert"]
            assert rule["annotations"]["summary"] and rule["annotations"]["description"], rule["alert"]
            assert rule["alert"] in readme, f"{rule['alert']} is not described in docs/operations.md"
    (down,) = [r for r in rules() if r.get("alert") == "LakeFSGCDaemonDown"]
    job = re.search(r'job="([^"]+)"', down["expr"])
    assert job and f"job_name: {job.group(1)}" in readme
