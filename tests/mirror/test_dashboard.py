"""``dashboards/lakefs-mirror.json`` stays in step with :mod:`lakefs_mirror.metrics`, and the deployment
artifacts (``deploy/ecs``, ``deploy/systemd``) with the daemon's command line and configuration.

Dashboard:

- the file is well-formed Grafana dashboard JSON (unique panel ids, every query panel has targets on
  the ``$datasource`` variable);
- every PromQL expression (panel targets and template-variable queries) names only series the
  daemon exports (``MirrorMetrics``: gauges as declared, counters with ``_total``, histograms with
  ``_bucket``/``_sum``/``_count``), and filters only on labels those metrics carry (plus the
  ``job``/``instance`` labels Prometheus adds);
- every declared metric is shown somewhere (a new metric needs a panel);
- with ``promtool`` installed, every expression parses as PromQL (as recording rules, Grafana's
  ``$variables`` substituted).

Deployment:

- the ECS task definition is a valid ``RegisterTaskDefinition`` request (botocore's ECS model), runs
  ``lakefs-mirror run --config``, health-checks ``/_health`` on the mapped port, and its environment
  plus secrets (placeholders) turn ``deploy/mirror-aws.yaml`` into a valid configuration listening
  on that port;
- the systemd unit has the settings docs/deployment.md promises, and ``systemd-analyze verify``
  accepts it when that tool is present.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from lakefs_mirror.config import load_mirror_config
from lakefs_mirror.metrics import PREFIX, MirrorMetrics
from tests.support.env import require_tool
from tests.support.timing import scaled

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "dashboards" / "lakefs-mirror.json"
ECS_TASK = ROOT / "deploy" / "ecs" / "lakefs-mirror-task.json"
SYSTEMD_UNIT = ROOT / "deploy" / "systemd" / "lakefs-mirror.service"
AWS_CONFIG = ROOT / "deploy" / "mirror-aws.yaml"
TARGET_LABELS = {"job", "instance"}  # added by Prometheus at scrape time
# Identifiers that are PromQL syntax, not metric names (when not followed by "(").
KEYWORDS = {"and", "or", "unless", "bool", "offset", "inf", "nan", "atan2"}
GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
IDENT = re.compile(r"(?<![\w:.$])([a-zA-Z_:][\w:]*)(?!\w)(\s*\()?")
SELECTOR = re.compile(r"([a-zA-Z_:][\w:]*)\s*\{([^}]*)\}")
MATCHER = re.compile(r"([a-zA-Z_]\w*)\s*(?:=~|!~|!=|=)")
LABEL_VALUES = re.compile(r"^label_values\(\s*([a-zA-Z_:][\w:]*(?:\{[^}]*\})?)\s*,\s*(\w+)\s*\)$")
GRAFANA_VARS = {
    "$__rate_interval": "1m",
    "$__interval": "1m",
    "$__range": "1h",
    "$mirror": ".*",
    "$region": ".*",
}


def exported() -> dict[str, set[str]]:
    """Series name -> label names, for every metric a daemon's ``MirrorMetrics`` exports."""
    out: dict[str, set[str]] = {}
    metrics = MirrorMetrics(region="r")
    for attr in vars(metrics).values():
        name = getattr(attr, "_name", None)
        kind = getattr(attr, "_type", None)
        if name is None or kind is None:
            continue
        labels = set(attr._labelnames)
        suffixes = {
            "counter": ["_total", "_created"],
            "gauge": [""],
            "histogram": ["_bucket", "_sum", "_count", "_created"],
        }[kind]
        for suffix in suffixes:
            out[name + suffix] = labels | ({"le"} if suffix == "_bucket" else set())
    return out


def load() -> dict[str, Any]:
    dashboard: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return dashboard


def all_panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for panel in panels:
        yield panel
        yield from all_panels(panel.get("panels", []))


def expressions(dashboard: dict[str, Any]) -> list[str]:
    exprs = [t["expr"] for p in all_panels(dashboard["panels"]) for t in p.get("targets", [])]
    for var in dashboard["templating"]["list"]:
        if var["type"] == "query":
            query = var["query"]["query"] if isinstance(var["query"], dict) else var["query"]
            match = LABEL_VALUES.match(query)
            assert match, f"template variable {var['name']}: unsupported query {query!r}"
            exprs.append(match.group(1))
    return exprs


def strip(expr: str) -> str:
    """The expression without strings, ranges, label matchers and grouping label lists."""
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    expr = re.sub(r"\[[^\]]*\]", "", expr)
    expr = re.sub(r"\{[^}]*\}", "", expr)
    return GROUPING.sub("", expr)


def metric_names(expr: str) -> set[str]:
    names = set()
    for match in IDENT.finditer(strip(expr)):
        ident, call = match.group(1), match.group(2)
        if call or ident.lower() in KEYWORDS:
            continue  # a function or aggregation, or an operator keyword
        names.add(ident)
    return names


def test_dashboard_is_well_formed() -> None:
    dashboard = load()
    assert dashboard["uid"] and dashboard["title"] and isinstance(dashboard["schemaVersion"], int)
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    panels = list(all_panels(dashboard["panels"]))
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    queried = [p for p in panels if p["type"] != "row"]
    assert len(queried) >= 10
    for panel in queried:
        assert panel["title"] and panel["targets"], panel["title"]
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["x"] + grid["w"] <= 24, panel["title"]
        ref_ids = [t["refId"] for t in panel["targets"]]
        assert len(ref_ids) == len(set(ref_ids)), panel["title"]
        for target in panel["targets"]:
            assert target["expr"].strip(), panel["title"]


def test_expressions_name_only_exported_metrics_and_labels() -> None:
    series = exported()
    assert f"{PREFIX}_promotions_total" in series  # the introspection works
    used: set[str] = set()
    for expr in expressions(load()):
        names = metric_names(expr)
        assert names, f"no metric in {expr!r}"
        unknown = names - set(series)
        assert not unknown, f"{expr!r} names metrics lakefs_mirror/metrics.py does not export: {unknown}"
        used |= names
        for selector in SELECTOR.finditer(re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)):
            metric, matchers = selector.group(1), selector.group(2)
            labels = set(MATCHER.findall(matchers))
            allowed = series.get(metric, set()) | TARGET_LABELS
            assert labels <= allowed, f"{expr!r} filters {metric} on labels it lacks: {labels - allowed}"
    families = {re.sub(r"_(total|created|bucket|sum|count)$", "", name) for name in series}
    shown = {re.sub(r"_(total|created|bucket|sum|count)$", "", name) for name in used}
    assert families <= shown, f"metrics without a panel: {sorted(families - shown)}"


def test_region_and_mirror_name_variables_filter_every_query() -> None:
    """Every series carries ``region`` and per-mirror ones the mirror's name: the dashboard offers both
    as variables and every query filters on them (one Prometheus can scrape every region)."""
    dashboard = load()
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    for name, label in (("region", "region"), ("mirror", "mirror")):
        query = variables[name]["query"]
        match = LABEL_VALUES.match(query["query"] if isinstance(query, dict) else query)
        assert match and match.group(2) == label, variables[name]
        assert variables[name]["includeAll"] and variables[name]["allValue"] == ".*"
    series = exported()
    assert all("region" in labels for labels in series.values())
    panel_exprs = [t["expr"] for p in all_panels(dashboard["panels"]) for t in p.get("targets", [])]
    for expr in panel_exprs:
        for selector in SELECTOR.finditer(expr):
            metric, matchers = selector.group(1), selector.group(2)
            assert 'region=~"$region"' in matchers, expr
            if "mirror" in series[metric]:
                assert 'mirror=~"$mirror"' in matchers, expr


def test_metric_name_extraction() -> None:
    expr = (
        'histogram_quantile(0.9, sum by (le, mirror) (rate(a_seconds_bucket{mirror=~"$m", x="y{z}"}'
        "[$__rate_interval]))) / ignoring (branch) b_total offset 5m and time() - c_gauge"
    )
    assert metric_names(expr) == {"a_seconds_bucket", "b_total", "c_gauge"}


def test_expressions_parse_as_promql(tmp_path: Path) -> None:
    check_promql(expressions(load()), tmp_path)


def check_promql(exprs: Iterable[str], tmp_path: Path, variables: dict[str, str] | None = None) -> None:
    """Every dashboard expression, Grafana's variables substituted, parses (``promtool check rules``;
    shared with the GC daemon's dashboard)."""
    promtool = require_tool("promtool", "prometheus")
    rules = []
    for n, expr in enumerate(exprs):
        text = expr
        for var, value in (GRAFANA_VARS if variables is None else variables).items():
            text = text.replace(var, value)
        assert "$" not in text, f"unsubstituted Grafana variable in {expr!r}"
        rules.append({"record": f"dashboard:expr_{n}", "expr": text})
    path = tmp_path / "rules.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    done = subprocess.run(
        [promtool, "check", "rules", str(path)], capture_output=True, timeout=scaled(60), check=False
    )
    assert done.returncode == 0, (done.stdout + done.stderr).decode(errors="replace")


@pytest.mark.parametrize("expr", ["lakefs_mirror_nope_total", "rate(lakefs_mirror_promotions[5m])"])
def test_unknown_names_are_caught(expr: str) -> None:
    assert metric_names(expr) - set(exported())


# -- deployment artifacts -------------------------------------------------------------------------------


def test_ecs_task_definition_is_valid_and_consistent() -> None:
    import botocore.session
    from botocore.validate import ParamValidator

    task = json.loads(ECS_TASK.read_text())
    shape = botocore.session.get_session().get_service_model("ecs").operation_model("RegisterTaskDefinition")
    assert shape.input_shape is not None
    validation = ParamValidator().validate(task, shape.input_shape)
    assert not validation.has_errors(), validation.generate_report()
    assert task["requiresCompatibilities"] == ["FARGATE"] and task["networkMode"] == "awsvpc"
    (container,) = task["containerDefinitions"]
    command = container["command"]
    assert Path(command[0]).name == "lakefs-mirror" and command[1:3] == ["run", "--config"]
    (port,) = [m["containerPort"] for m in container["portMappings"]]
    health = " ".join(container["healthCheck"]["command"])
    assert f"127.0.0.1:{port}/_health" in health
    assert 30 <= container["stopTimeout"] <= 120  # Fargate's maximum; time for the pass in flight
    assert container["logConfiguration"]["logDriver"] == "awslogs"
    assert all(
        s["valueFrom"].startswith(("arn:aws:ssm:", "arn:aws:secretsmanager:")) for s in container["secrets"]
    )
    # Nothing secret in plain environment variables.
    plain = {e["name"]: e["value"] for e in container["environment"]}
    assert not [n for n in plain if re.search(r"SECRET|PASSWORD|DB_URL|TOKEN", n)]
    # The environment and the secrets complete deploy/mirror-aws.yaml into a valid configuration.
    placeholders = {
        s["name"]: "postgresql://mirror:pw@db.example/mirrors" if s["name"].endswith("DB_URL") else "x" * 16
        for s in container["secrets"]
    }
    config = load_mirror_config(AWS_CONFIG, {**plain, **placeholders})
    assert config.listen_port == port and config.region in config.regions
    assert str(config.state_dir) in {m["containerPath"] for m in container["mountPoints"]}


def unit_settings(text: str) -> dict[str, list[str]]:
    settings: dict[str, list[str]] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if line and not line.startswith(("#", ";", "[")) and "=" in line:
            key, _, value = line.partition("=")
            settings.setdefault(key.strip(), []).append(value.strip())
    return settings


def test_systemd_unit_settings(tmp_path: Path) -> None:
    text = SYSTEMD_UNIT.read_text()
    unit = unit_settings(text)
    assert unit["Type"] == ["notify"]
    assert unit["ExecStart"] == ["/opt/lakefs/.venv/bin/lakefs-mirror run --config /etc/lakefs/mirror.yaml"]
    assert unit["Restart"] == ["always"] and unit["KillSignal"] == ["SIGTERM"]
    assert (
        unit["EnvironmentFile"] and unit["NoNewPrivileges"] == ["yes"] and unit["ProtectSystem"] == ["strict"]
    )
    state_dir = str(yaml.safe_load(AWS_CONFIG.read_text())["state_dir"])
    assert state_dir in unit["ReadWritePaths"]
    assert "User" in unit or unit.get("DynamicUser") == ["yes"]
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed")
    # verify insists that ExecStart is executable: point it at this environment's entry point.
    exe = Path(sys.executable).with_name("lakefs-mirror")
    local = tmp_path / SYSTEMD_UNIT.name
    local.write_text(
        text.replace("/opt/lakefs/.venv/bin/lakefs-mirror", str(exe if exe.exists() else sys.executable))
    )
    done = subprocess.run(
        [analyze, "verify", str(local)], capture_output=True, timeout=scaled(60), check=False
    )
    report = (done.stdout + done.stderr).decode(errors="replace")
    problems = [line for line in report.splitlines() if SYSTEMD_UNIT.name in line]
    assert not problems, report
    if done.returncode != 0:
        pytest.skip(f"systemd-analyze verify cannot run here: {report[-500:]}")
