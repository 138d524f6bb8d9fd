"""lakefs-server's deployment files: the Prometheus rules (promtool check and unit tests, every alert
with a case that fires and one that does not, only exported series and labels), the Grafana
dashboard (only exported series), the systemd unit (Type=notify with a watchdog) and the ECS task
(the command and ports the configuration names), and the example configurations validate."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

from lakefs_core.service.http import ServiceSpec, build_app
from lakefs_server.config import inspect_server_config
from lakefs_server.metrics import ServerMetrics
from tests.gc.test_gc_dashboard import families, registry_series
from tests.mirror.test_alert_rules import check_alert_cases, check_rule_series, promtool

ROOT = Path(__file__).resolve().parents[2]
DIR = ROOT / "deploy" / "prometheus"
RULES = DIR / "lakefs-server-rules.yml"
ALERTS = {"LakeFSServerErrors", "LakeFSServerAuthFailures", "LakeFSServerSweepFailing", "LakeFSServerDown"}


def exported() -> dict[str, set[str]]:
    metrics = ServerMetrics("r")
    spec = ServiceSpec("server", "r", "0", "t", "d", routes=[], access_keys=[], registry=metrics.registry)
    build_app(spec)
    return registry_series(metrics.registry)


def rules() -> list[dict[str, Any]]:
    doc = yaml.safe_load(RULES.read_text())
    return [rule for group in doc["groups"] for rule in group["rules"]]


def test_promtool_checks_and_unit_tests_the_rules() -> None:
    assert f"SUCCESS: {len(rules())} rules found" in promtool("check", "rules", RULES.name, cwd=DIR)
    check_alert_cases(rules(), DIR / "lakefs-server-rules.test.yml", ALERTS)


def test_rules_and_dashboard_read_only_exported_series() -> None:
    series = exported()
    check_rule_series(rules(), series, {"region", "operation", "status"})
    dashboard = json.loads((ROOT / "dashboards" / "lakefs-server.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    names = {n for e in exprs for n in re.findall(r"\b(lakefs_server_\w+)", e)}
    assert names and families(names) <= families(set(series)), families(names) - families(set(series))


def test_systemd_unit_and_ecs_task() -> None:
    unit = (ROOT / "deploy" / "systemd" / "lakefs-server.service").read_text()
    assert "Type=notify" in unit and "WatchdogSec=" in unit and "RestartPreventExitStatus=9 64" in unit
    task = json.loads((ROOT / "deploy" / "ecs" / "lakefs-server-task.json").read_text())
    (container,) = task["containerDefinitions"]
    assert container["command"][1:4] == ["run", "--config", "/etc/lakefs/server.yaml"]
    assert {p["containerPort"] for p in container["portMappings"]} == {8000, 8010}


def test_example_configurations_validate() -> None:
    env = {"LAKEFS_SERVER__AUTH__ENCRYPT__SECRET_KEY": "s"}
    for name in ("server-aws.yaml", "server-local.yaml"):
        report = inspect_server_config(ROOT / "deploy" / name, env)
        assert report.problems == [], (name, report.problems)
