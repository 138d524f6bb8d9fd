"""``dashboards/lakefs-gc.json`` stays in step with :mod:`lakefs_gc.metrics` (and the HTTP metrics
:func:`lakefs_core.service.http.build_app` registers), and the deployment artifacts of ``lakefs-gc``
(``deploy/gc-*.yaml``, ``deploy/ecs``, ``deploy/systemd``) with the daemon's command line and
configuration.

Dashboard (the mirror's checks, ``tests/mirror/test_dashboard.py``, whose generic PromQL helpers are
reused):

- well-formed Grafana JSON: unique panel ids, every query panel on the ``$datasource`` variable;
- every PromQL expression (panel targets and the ``repo`` variable's query) names only series a GC
  daemon exports, and filters only on labels those series carry (plus ``job``/``instance``);
- every declared metric family is shown somewhere (a new metric needs a panel);
- every selector of a per-repository series filters on ``repo=~"$repo"``;
- with ``promtool`` installed, every expression parses as PromQL.

Deployment:

- ``gc-aws.yaml`` and ``gc-local.yaml`` are valid for :func:`load_gc_config` (the AWS one with the
  ECS task's environment and placeholder secrets), with the Spark modes they document;
- the ECS task definition is a valid ``RegisterTaskDefinition`` request (botocore's ECS model), runs
  ``lakefs-gc run --config``, health-checks ``/_health`` on the mapped port, keeps secrets out of
  plain variables, and mounts the configured ``workdir``;
- the systemd unit has the settings docs/deployment.md promises (notify, restart policy, KillMode,
  hardening, a writable state directory holding ``workdir``), and ``systemd-analyze verify``
  accepts it when that tool is present.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry

from lakefs_core.service.http import ServiceSpec, build_app
from lakefs_core.service.http.metrics import RegionRegistry
from lakefs_gc.config import load_gc_config
from lakefs_gc.metrics import PREFIX, GCMetrics
from tests.mirror.test_dashboard import (
    LABEL_VALUES,
    MATCHER,
    SELECTOR,
    TARGET_LABELS,
    all_panels,
    check_promql,
    expressions,
    metric_names,
    unit_settings,
)
from tests.support.timing import scaled

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "dashboards" / "lakefs-gc.json"
ECS_TASK = ROOT / "deploy" / "ecs" / "lakefs-gc-task.json"
SYSTEMD_UNIT = ROOT / "deploy" / "systemd" / "lakefs-gc.service"
AWS_CONFIG = ROOT / "deploy" / "gc-aws.yaml"
LOCAL_CONFIG = ROOT / "deploy" / "gc-local.yaml"
GRAFANA_VARS = {
    "$__rate_interval": "1m",
    "$__interval": "1m",
    "$__range": "1h",
    "$repo": ".*",
    "$region": ".*",
}
SUFFIXES = {
    "counter": ["_total", "_created"],
    "gauge": [""],
    "histogram": ["_bucket", "_sum", "_count", "_created"],
}


def registry_series(registry: CollectorRegistry) -> dict[str, set[str]]:
    """Series name -> label names, for every metric registered in ``registry``."""
    out: dict[str, set[str]] = {}
    for collector in list(registry._collector_to_names):
        name, kind = getattr(collector, "_name", None), getattr(collector, "_type", None)
        if name is None or kind not in SUFFIXES:
            continue
        labels = set(getattr(collector, "_labelnames", ()))
        if isinstance(registry, RegionRegistry):
            labels.add("region")  # added to every sample at collection time
        for suffix in SUFFIXES[kind]:
            out[name + suffix] = labels | ({"le"} if suffix == "_bucket" else set())
    return out


def exported() -> dict[str, set[str]]:
    """Every series a GC daemon's ``/metrics`` carries: :class:`GCMetrics` plus the HTTP app's."""
    metrics = GCMetrics()
    spec = ServiceSpec(
        daemon="gc",
        region="r",
        version="0",
        title="t",
        description="d",
        routes=[],
        access_keys=[],
        registry=metrics.registry,
    )
    build_app(spec)
    return registry_series(metrics.registry)


def load() -> dict[str, Any]:
    dashboard: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return dashboard


def families(names: set[str]) -> set[str]:
    return {re.sub(r"_(total|created|bucket|sum|count)$", "", name) for name in names}


def test_exported_series_include_the_http_metrics() -> None:
    series = exported()
    # ``region`` is on every series: the registry adds it at collection time
    assert series[f"{PREFIX}_runs_total"] == {"region", "repo", "phase", "outcome"}
    assert series[f"{PREFIX}_consecutive_errors"] == {"region"}
    assert series[f"{PREFIX}_api_requests_total"] == {"region", "method", "route", "status"}
    assert series[f"{PREFIX}_api_request_duration_seconds_bucket"] == {"region", "method", "route", "le"}
    assert series[f"{PREFIX}_build_info"] == {"region", "version"}


def test_dashboard_is_well_formed() -> None:
    dashboard = load()
    assert (
        dashboard["uid"] == "lakefs-gc" and dashboard["title"] and isinstance(dashboard["schemaVersion"], int)
    )
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert set(variables) == {"datasource", "region", "repo"}
    assert (
        variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    )
    panels = list(all_panels(dashboard["panels"]))
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    queried = [p for p in panels if p["type"] != "row"]
    assert len(queried) >= 15
    for panel in queried:
        assert panel["title"] and panel["description"] and panel["targets"], panel["title"]
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["x"] + grid["w"] <= 24, panel["title"]
        ref_ids = [t["refId"] for t in panel["targets"]]
        assert len(ref_ids) == len(set(ref_ids)), panel["title"]
        for target in panel["targets"]:
            assert target["expr"].strip() and target["datasource"] == panel["datasource"], panel["title"]


def test_expressions_name_only_exported_metrics_and_labels() -> None:
    series = exported()
    used: set[str] = set()
    for expr in expressions(load()):
        names = metric_names(expr)
        assert names, f"no metric in {expr!r}"
        unknown = names - set(series)
        assert not unknown, f"{expr!r} names metrics a GC daemon does not export: {unknown}"
        used |= names
        for selector in SELECTOR.finditer(re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)):
            metric, matchers = selector.group(1), selector.group(2)
            labels = set(MATCHER.findall(matchers))
            allowed = series.get(metric, set()) | TARGET_LABELS
            assert labels <= allowed, f"{expr!r} filters {metric} on labels it lacks: {labels - allowed}"
    missing = families(set(series)) - families(used)
    assert not missing, f"metrics without a panel: {sorted(missing)}"


def test_repo_variable_filters_every_per_repository_query() -> None:
    dashboard = load()
    variable = {v["name"]: v for v in dashboard["templating"]["list"]}["repo"]
    query = variable["query"]
    match = LABEL_VALUES.match(query["query"] if isinstance(query, dict) else query)
    assert match and match.group(2) == "repo", variable
    assert variable["includeAll"] and variable["allValue"] == ".*"
    series = exported()
    per_repo = 0
    for panel in all_panels(dashboard["panels"]):
        for target in panel.get("targets", []):
            expr = target["expr"]
            for name in metric_names(expr):
                if "repo" not in series[name]:
                    continue
                per_repo += 1
                selectors = [s for s in SELECTOR.finditer(expr) if s.group(1) == name]
                assert selectors, f"{expr!r}: {name} without a selector"
                assert all('repo=~"$repo"' in s.group(2) for s in selectors), expr
    assert per_repo >= 15


def test_region_variable_filters_every_query() -> None:
    # every series a GC daemon exports carries `region` (RegionRegistry): one Prometheus scraping
    # every region's daemon shows one region, or all, and the repo list follows the choice
    dashboard = load()
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    match = LABEL_VALUES.match(variables["region"]["query"]["query"])
    assert match and match.group(2) == "region", variables["region"]
    assert variables["region"]["includeAll"] and variables["region"]["allValue"] == ".*"
    assert 'region=~"$region"' in variables["repo"]["query"]["query"]
    series = exported()
    assert all("region" in labels for labels in series.values())
    panel_exprs = [t["expr"] for p in all_panels(dashboard["panels"]) for t in p.get("targets", [])]
    assert len(panel_exprs) >= 20
    for expr in panel_exprs:
        for name in metric_names(expr):
            selectors = [s for s in SELECTOR.finditer(expr) if s.group(1) == name]
            assert selectors and all('region=~"$region"' in s.group(2) for s in selectors), expr


def test_expressions_parse_as_promql(tmp_path: Path) -> None:
    check_promql(expressions(load()), tmp_path, GRAFANA_VARS)


@pytest.mark.parametrize("expr", ["lakefs_gc_nope_total", "rate(lakefs_gc_objects_deleted[5m])"])
def test_unknown_names_are_caught(expr: str) -> None:
    assert metric_names(expr) - set(exported())


# -- deployment artifacts -------------------------------------------------------------------------------


def ecs_container() -> tuple[dict[str, Any], dict[str, Any]]:
    task: dict[str, Any] = json.loads(ECS_TASK.read_text())
    (container,) = task["containerDefinitions"]
    return task, container


def test_ecs_task_definition_is_valid_and_consistent() -> None:
    import botocore.session
    from botocore.validate import ParamValidator

    task, container = ecs_container()
    shape = botocore.session.get_session().get_service_model("ecs").operation_model("RegisterTaskDefinition")
    assert shape.input_shape is not None
    validation = ParamValidator().validate(task, shape.input_shape)
    assert not validation.has_errors(), validation.generate_report()
    assert task["requiresCompatibilities"] == ["FARGATE"] and task["networkMode"] == "awsvpc"
    command = container["command"]
    assert Path(command[0]).name == "lakefs-gc" and command[1:3] == ["run", "--config"]
    (port,) = [m["containerPort"] for m in container["portMappings"]]
    health = " ".join(container["healthCheck"]["command"])
    assert f"127.0.0.1:{port}/_health" in health
    assert 30 <= container["stopTimeout"] <= 120  # Fargate's maximum; time to stop the Spark child
    assert container["logConfiguration"]["logDriver"] == "awslogs"
    assert container["readonlyRootFilesystem"] is True
    assert all(
        s["valueFrom"].startswith(("arn:aws:ssm:", "arn:aws:secretsmanager:")) for s in container["secrets"]
    )
    plain = {e["name"]: e["value"] for e in container["environment"]}
    assert not [n for n in plain if re.search(r"SECRET|PASSWORD|DB_URL|TOKEN", n)]
    # The environment and the secrets complete deploy/gc-aws.yaml into a valid configuration.
    placeholders = {
        s["name"]: "postgresql://gc:pw@db.example/mirrors" if s["name"].endswith("DB_URL") else "x" * 16
        for s in container["secrets"]
    }
    config = load_gc_config(AWS_CONFIG, {**plain, **placeholders})
    assert config.listen_port == port and config.listen_host == "0.0.0.0"
    assert config.mirrors_db_url is not None and config.spark.mode == "submit"
    assert config.access_keys[0].secret_access_key.get_secret_value() == "x" * 16
    mounts = {m["containerPath"] for m in container["mountPoints"]}
    assert config.workdir is not None and any(config.workdir.is_relative_to(m) for m in mounts)
    assert "/tmp" in mounts  # the JVM's and Python's scratch files under a read-only root


def test_aws_config_without_its_secrets_is_rejected() -> None:
    """The YAML carries no secret: without the environment the access key's secret is missing."""
    from lakefs_core.errors import ConfigError

    with pytest.raises(ConfigError, match="secret_access_key"):
        load_gc_config(AWS_CONFIG, {})


def test_local_config_is_valid_and_needs_no_jvm() -> None:
    config = load_gc_config(LOCAL_CONFIG, {})
    assert config.spark.mode in ("lite", "local")
    kv_url = config.core.kv_url
    assert kv_url is not None and kv_url.get_secret_value().startswith("sqlite:")
    assert config.listen_host == "127.0.0.1" and config.workdir is not None
    # Next to mirror-local.yaml's two daemons (8008, 8009) on the same machine.
    assert config.listen_port not in (8008, 8009)


def test_systemd_unit_settings(tmp_path: Path) -> None:
    text = SYSTEMD_UNIT.read_text()
    unit = unit_settings(text)
    assert unit["Type"] == ["notify"]
    assert unit["ExecStart"] == ["/opt/lakefs/.venv/bin/lakefs-gc run --config /etc/lakefs/gc.yaml"]
    assert unit["Restart"] == ["always"] and unit["KillSignal"] == ["SIGTERM"]
    assert unit["KillMode"] == ["mixed"]  # SIGTERM to the daemon alone; SIGKILL to the whole cgroup
    assert unit["RestartPreventExitStatus"] == ["9 64"]
    assert unit["EnvironmentFile"] and unit["NoNewPrivileges"] == ["yes"]
    assert unit["ProtectSystem"] == ["strict"]
    assert "User" in unit or unit.get("DynamicUser") == ["yes"]
    # The configured workdir is under the unit's state directory, which is writable.
    workdir = Path(str(yaml.safe_load(AWS_CONFIG.read_text())["workdir"]))
    (state,) = unit["StateDirectory"]
    assert workdir.is_relative_to(Path("/var/lib") / state)
    assert any(workdir.is_relative_to(p) for p in " ".join(unit["ReadWritePaths"]).split())
    assert "MemoryDenyWriteExecute" not in unit  # the JVM's JIT
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed")
    exe = Path(sys.executable).with_name("lakefs-gc")
    local = tmp_path / SYSTEMD_UNIT.name
    local.write_text(
        text.replace("/opt/lakefs/.venv/bin/lakefs-gc", str(exe if exe.exists() else sys.executable))
    )
    done = subprocess.run(
        [analyze, "verify", str(local)], capture_output=True, timeout=scaled(60), check=False
    )
    report = (done.stdout + done.stderr).decode(errors="replace")
    problems = [line for line in report.splitlines() if SYSTEMD_UNIT.name in line]
    assert not problems, report
    if done.returncode != 0:
        pytest.skip(f"systemd-analyze verify cannot run here: {report[-500:]}")
