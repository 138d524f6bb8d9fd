"""``dashboards/lakefs-mirror.json`` stays in step with :mod:`lakefs_mirror.metrics`.

- the file is well-formed Grafana dashboard JSON (unique panel ids, every query panel has targets on
  the ``$datasource`` variable);
- every PromQL expression (panel targets and template-variable queries) names only series the
  daemon exports (``MirrorMetrics``: gauges as declared, counters with ``_total``, histograms with
  ``_bucket``/``_sum``/``_count``), and filters only on labels those metrics carry (plus the
  ``job``/``instance`` labels Prometheus adds);
- every declared metric is shown somewhere (a new metric needs a panel);
- with ``promtool`` installed, every expression parses as PromQL (as recording rules, Grafana's
  ``$variables`` substituted).
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from lakefs_mirror.metrics import PREFIX, MirrorMetrics
from tests.support.env import require_tool

DASHBOARD = Path(__file__).resolve().parents[2] / "dashboards" / "lakefs-mirror.json"
TARGET_LABELS = {"job", "instance"}  # added by Prometheus at scrape time
# Identifiers that are PromQL syntax, not metric names (when not followed by "(").
KEYWORDS = {"and", "or", "unless", "bool", "offset", "inf", "nan", "atan2"}
GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
IDENT = re.compile(r"(?<![\w:.$])([a-zA-Z_:][\w:]*)(?!\w)(\s*\()?")
SELECTOR = re.compile(r"([a-zA-Z_:][\w:]*)\s*\{([^}]*)\}")
MATCHER = re.compile(r"([a-zA-Z_]\w*)\s*(?:=~|!~|!=|=)")
LABEL_VALUES = re.compile(r"^label_values\(\s*([a-zA-Z_:][\w:]*)\s*,\s*(\w+)\s*\)$")
GRAFANA_VARS = {"$__rate_interval": "1m", "$__interval": "1m", "$__range": "1h", "$mirror": ".*"}


def exported() -> dict[str, set[str]]:
    """Series name -> label names, for every metric a daemon's ``MirrorMetrics`` exports."""
    out: dict[str, set[str]] = {}
    metrics = MirrorMetrics()
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


def test_metric_name_extraction() -> None:
    expr = (
        'histogram_quantile(0.9, sum by (le, mirror) (rate(a_seconds_bucket{mirror=~"$m", x="y{z}"}'
        "[$__rate_interval]))) / ignoring (branch) b_total offset 5m and time() - c_gauge"
    )
    assert metric_names(expr) == {"a_seconds_bucket", "b_total", "c_gauge"}


def test_expressions_parse_as_promql(tmp_path: Path) -> None:
    promtool = require_tool("promtool", "prometheus")
    rules = []
    for n, expr in enumerate(expressions(load())):
        text = expr
        for var, value in GRAFANA_VARS.items():
            text = text.replace(var, value)
        assert "$" not in text, f"unsubstituted Grafana variable in {expr!r}"
        rules.append({"record": f"dashboard:expr_{n}", "expr": text})
    path = tmp_path / "rules.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    done = subprocess.run(
        [promtool, "check", "rules", str(path)], capture_output=True, timeout=60, check=False
    )
    assert done.returncode == 0, (done.stdout + done.stderr).decode(errors="replace")


@pytest.mark.parametrize("expr", ["lakefs_mirror_nope_total", "rate(lakefs_mirror_promotions[5m])"])
def test_unknown_names_are_caught(expr: str) -> None:
    assert metric_names(expr) - set(exported())
