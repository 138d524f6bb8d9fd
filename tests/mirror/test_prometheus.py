"""The daemon's ``/metrics`` against the real Prometheus tools (Debian package ``prometheus``).

One test runs the demo's setup for real: two local "regions" (directories plus SQLite KV stores), a
shared SQLite mirrors database, one ``lakefs-mirror`` daemon subprocess per region, a mirror in
``active`` mode created through the source region's API, and a small workload, so that the
per-mirror/branch series exist. Then:

(a) the destination daemon's ``/metrics`` text is piped to ``promtool check metrics``, which must
    exit 0 and print nothing (no lint problem: naming, units, ``_total`` suffixes, help texts);
(b) a real ``prometheus`` server (own temporary config, TSDB and free port, never the system
    service) scrapes both daemons every second; its HTTP API must report ``up == 1`` for both
    targets, ``lakefs_mirror_promotions_total > 0`` and the ``lakefs_mirror_freshness_lag_seconds``
    series of the mirror branch, and every query of ``dashboards/lakefs-mirror.json`` (Grafana
    variables set to "all") must evaluate and return data. Prometheus is then stopped with SIGTERM
    and must exit 0.

Every process is started in its own session and killed in ``finally``; the whole test takes about
12 s (bounded by ``DEADLINE``).
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import yaml
from prometheus_client.parser import text_string_to_metric_families

from lakefs_mirror.demo import API, KEY, SECRET, free_port, workload, write_configs
from tests.support.env import require_tool
from tests.support.timing import scaled

T = TypeVar("T")
DASHBOARD = Path(__file__).resolve().parents[2] / "dashboards" / "lakefs-mirror.json"
# Seconds for the whole scenario (each wait gets what is left): it bounds a hang, the waits end as soon
# as their condition holds. About 12 s on a quiet machine; 30 s left a saturated one 2.5 times that.
DEADLINE = scaled(90)
JOB = "lakefs-mirror"


def http(
    method: str,
    url: str,
    body: dict[str, Any] | None = None,
    *,
    auth: bool = False,
    timeout: float = scaled(5),
) -> tuple[int, bytes]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method)
    if body is not None:
        request.add_header("Content-Type", "application/json")
    if auth:
        token = base64.b64encode(f"{KEY}:{SECRET}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return int(response.status), response.read()
    except urllib.error.HTTPError as e:
        with e:
            return int(e.code), e.read()


def answers(url: str) -> bool | None:
    """True once ``url`` answers 200 (None before)."""
    return True if http("GET", url)[0] == 200 else None


def wait_for(
    what: str, probe: Callable[[], T | None], until: float, procs: list[subprocess.Popen[bytes]]
) -> T:
    """Poll ``probe`` until it returns something other than None (or a process died / time ran out)."""
    last: BaseException | None = None
    while time.monotonic() < until:
        for proc in procs:
            if proc.poll() is not None:
                raise AssertionError(f"{what}: process {proc.args!r} exited with {proc.returncode}")
        try:
            value = probe()
        except (OSError, urllib.error.URLError) as e:  # not listening yet
            last, value = e, None
        if value is not None:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what} (last error: {last!r})")


def stop(proc: subprocess.Popen[bytes], timeout: float = scaled(15)) -> int:
    """SIGTERM the process group, then SIGKILL if it did not exit in time; returns the exit status."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        return proc.wait()


def start(cmd: list[str], log: Path, procs: list[subprocess.Popen[bytes]]) -> subprocess.Popen[bytes]:
    """Start ``cmd`` in its own session (so its whole group can be signalled), output to ``log``."""
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    procs.append(proc)
    return proc


def metric_samples(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, []).append((dict(sample.labels), float(sample.value)))
    return out


def dashboard_queries() -> list[str]:
    """The PromQL of every panel of the Grafana dashboard, its variables set to "everything"."""
    dashboard = json.loads(DASHBOARD.read_text())
    todo, exprs = list(dashboard["panels"]), []
    while todo:
        panel = todo.pop(0)
        todo.extend(panel.get("panels", []))
        exprs += [t["expr"] for t in panel.get("targets", [])]
    values = {"$__rate_interval": "15s", "$mirror": ".*", "$region": ".*"}
    return [re.sub(r"\$\w+", lambda m: values[m.group(0)], expr) for expr in exprs]


def tail(path: Path, lines: int = 20) -> str:
    if not path.exists():
        return f"({path.name}: no log)"
    text = path.read_text(errors="replace").splitlines()[-lines:]
    return f"-- {path.name} --\n" + "\n".join(text)


def test_metrics_pass_promtool_and_a_real_prometheus_scrapes_them(tmp_path: Path) -> None:
    promtool = require_tool("promtool", "prometheus")
    prometheus = require_tool("prometheus", "prometheus")
    until = time.monotonic() + DEADLINE
    root = tmp_path
    configs = write_configs(root)  # us-east (source) and eu-west (destination), poll 0.5 s
    asyncio.run(workload(root, 0))  # the source repository "origin"
    src_port, dst_port = configs["us-east"][1], configs["eu-west"][1]
    procs: list[subprocess.Popen[bytes]] = []
    logs = [root / "daemon-us-east.log", root / "daemon-eu-west.log", root / "prometheus.log"]
    try:
        for name, (path, _) in configs.items():
            cmd = [sys.executable, "-m", "lakefs_mirror", "run", "--config", str(path)]
            start(cmd, root / f"daemon-{name}.log", procs)
        for port in (src_port, dst_port):
            health = f"http://127.0.0.1:{port}/_health"
            wait_for(f"daemon on port {port} to be healthy", partial(answers, health), until, procs)

        # A mirror in active mode (local directories have no replication), then a small workload.
        mirrors = f"http://127.0.0.1:{src_port}{API}/origin/mirrors"
        ns = f"local://{root / 'eu-west' / 'storage' / 'origin-mirror'}"
        status, body = http(
            "POST",
            mirrors,
            {"name": "origin-mirror", "region": "eu-west", "storage_namespace": ns},
            auth=True,
        )
        assert status == 201, body
        mirror_id = json.loads(body)["id"]
        series = {"region": "eu-west", "mirror": "origin-mirror", "branch": "main"}  # labelled by name
        status, body = http("PATCH", f"{mirrors}/{mirror_id}", {"mode": "active"}, auth=True)
        assert status == 200, body
        head = asyncio.run(workload(root, 1))
        assert head

        def promoted() -> str | None:
            status, body = http("GET", f"http://127.0.0.1:{dst_port}/metrics")
            if status != 200:
                return None
            text = body.decode()
            samples = metric_samples(text)
            promotions = [
                v for labels, v in samples.get("lakefs_mirror_promotions_total", []) if labels == series
            ]
            lag = [labels for labels, _ in samples.get("lakefs_mirror_freshness_lag_seconds", [])]
            if promotions and promotions[0] >= 1 and series in lag:
                return text
            return None

        text = wait_for("the mirror branch to be promoted", promoted, until, procs)
        samples = metric_samples(text)
        assert samples["lakefs_mirror_lease_held"] == [({"region": "eu-west"}, 1.0)]
        assert samples["lakefs_mirror_commits_copied_total"][0][1] >= 1
        assert any(n.startswith("lakefs_mirror_validation_duration_seconds") for n in samples)

        # (a) promtool lints both daemons' expositions: exit 0, nothing printed.
        status, source_text = http("GET", f"http://127.0.0.1:{src_port}/metrics")
        assert status == 200
        for exposition in (text.encode(), source_text):
            lint = subprocess.run(
                [promtool, "check", "metrics"],
                input=exposition,
                capture_output=True,
                timeout=scaled(30),
                check=False,
            )
            printed = (lint.stdout + lint.stderr).decode(errors="replace").strip()
            assert lint.returncode == 0 and not printed, (
                f"promtool check metrics ({lint.returncode}):\n{printed}"
            )

        # (b) a real Prometheus server scrapes both daemons every second.
        prom_port = free_port()
        prom_config = root / "prometheus.yml"
        prom_config.write_text(
            yaml.safe_dump(
                {
                    "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
                    "scrape_configs": [
                        {
                            "job_name": JOB,
                            "metrics_path": "/metrics",
                            "static_configs": [
                                {"targets": [f"127.0.0.1:{src_port}", f"127.0.0.1:{dst_port}"]}
                            ],
                        }
                    ],
                },
                sort_keys=False,
            )
        )
        checked = subprocess.run(
            [promtool, "check", "config", str(prom_config)],
            capture_output=True,
            timeout=scaled(30),
            check=False,
        )
        assert checked.returncode == 0, checked.stdout + checked.stderr
        cmd = [
            prometheus,
            f"--config.file={prom_config}",
            f"--storage.tsdb.path={root / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{prom_port}",
            "--log.level=warn",
        ]
        server = start(cmd, root / "prometheus.log", procs)
        base = f"http://127.0.0.1:{prom_port}"

        def query(expr: str) -> list[dict[str, Any]]:
            url = f"{base}/api/v1/query?{urllib.parse.urlencode({'query': expr})}"
            status, body = http("GET", url)
            assert status == 200, body
            answer = json.loads(body)
            assert answer["status"] == "success", answer
            result: list[dict[str, Any]] = answer["data"]["result"]
            return result

        def scraped() -> bool | None:
            ups = query(f'up{{job="{JOB}"}}')
            if len(ups) != 2 or any(float(r["value"][1]) != 1 for r in ups):
                return None
            promotions = query(f'lakefs_mirror_promotions_total{{job="{JOB}",mirror="origin-mirror"}} > 0')
            lag = query(
                f'lakefs_mirror_freshness_lag_seconds{{job="{JOB}",mirror="origin-mirror",branch="main"}}'
            )
            return True if promotions and lag else None

        wait_for("Prometheus to be ready", partial(answers, f"{base}/-/ready"), until, procs)
        wait_for("Prometheus to scrape the daemons", scraped, until, procs)
        targets = {r["metric"]["instance"] for r in query(f'up{{job="{JOB}"}}')}
        assert targets == {f"127.0.0.1:{src_port}", f"127.0.0.1:{dst_port}"}
        # Only the destination region's daemon mirrors: the lease gauge of both is exported.
        assert len(query("lakefs_mirror_lease_held")) == 2

        # Every query of dashboards/lakefs-mirror.json evaluates, with data, on the real server.
        def dashboard_answers() -> bool | None:
            empty = [expr for expr in dashboard_queries() if not query(expr)]
            return True if not empty else None

        try:
            wait_for("every dashboard query to return data", dashboard_answers, until, procs)
        except AssertionError:
            empty = [expr for expr in dashboard_queries() if not query(expr)]
            raise AssertionError(f"dashboard queries without data: {empty}") from None
        assert stop(server) == 0, tail(root / "prometheus.log")
    except BaseException:
        print("\n\n".join(tail(log) for log in logs), file=sys.stderr)
        raise
    finally:
        for proc in procs:
            stop(proc)
