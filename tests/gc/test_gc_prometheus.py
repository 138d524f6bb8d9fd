"""A real ``lakefs-gc run`` daemon's ``/metrics`` against the real Prometheus tools (Debian package
``prometheus``).

The daemon (a subprocess, ``spark.mode: lite``) collects :func:`tests.gc.mark_support.build_repo`'s
repository on a SQLite + local core; once its ``/metrics`` shows the run's deletions:

(a) the exposition is piped to ``promtool check metrics``, which must exit 0 and print nothing;
(b) a real ``prometheus`` server (own temporary configuration, TSDB and free port, never the system
    service) scrapes it every second with ``deploy/prometheus/lakefs-gc-rules.yml`` loaded. Its HTTP
    API must report ``up == 1``, ``lakefs_gc_objects_deleted_total{repo="repo1"}`` equal to the
    garbage the run deleted, the recording rule of the last success, and no firing alert; every query
    of ``dashboards/lakefs-gc.json`` (``$repo`` = all) must evaluate, and those of the retention-GC
    and daemon panels must return data (hard delete is off and nothing is purged here, so their
    panels may stay empty). Prometheus is then stopped with SIGTERM and must exit 0.

Every process runs in its own session and is killed in ``finally`` (the mirror's helpers,
``tests/mirror/test_prometheus.py``); the whole test takes a few seconds, bounded by ``DEADLINE``.
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import urllib.parse
from functools import partial
from pathlib import Path
from typing import Any

import yaml

from lakefs_mirror.demo import free_port
from tests.gc.daemon_support import gc_config, sqlite_repo, write_config
from tests.mirror.test_prometheus import answers, http, metric_samples, start, stop, tail, wait_for
from tests.support.env import require_tool
from tests.support.timing import scaled

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "dashboards" / "lakefs-gc.json"
RULES = ROOT / "deploy" / "prometheus" / "lakefs-gc-rules.yml"
DEADLINE = scaled(120)  # the whole scenario's hang bound (each wait ends as soon as its condition holds)
JOB = "lakefs-gc"
# Panels whose series exist after one successful retention run (no hard delete, no purge here).
WITH_DATA = (
    "lakefs_gc_runs_total",
    "lakefs_gc_last_success_timestamp_seconds",
    "lakefs_gc_run_in_progress",
    "lakefs_gc_objects_deleted_total",
    "lakefs_gc_delete_failures_total",
    "lakefs_gc_consecutive_errors",
    "lakefs_gc_api_requests_total",
    "lakefs_gc_build_info",
)


def dashboard_queries() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    todo, exprs = list(dashboard["panels"]), []
    while todo:
        panel = todo.pop(0)
        todo.extend(panel.get("panels", []))
        exprs += [t["expr"] for t in panel.get("targets", [])]
    values = {"$__rate_interval": "15s", "$repo": ".*", "$region": ".*"}
    return [re.sub(r"\$\w+", lambda m: values[m.group(0)], expr) for expr in exprs]


async def _repository(tmp_path: Path) -> tuple[str, int]:
    """The mark tests' repository; returns the KV URL and the number of garbage objects."""
    repo = await sqlite_repo(tmp_path)
    try:
        _, garbage = await repo.live_and_garbage()
        return repo.kv_url, len(garbage)
    finally:
        await repo.close()


def prometheus_config(path: Path, targets: list[str]) -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
                "rule_files": [str(RULES)],
                "scrape_configs": [{"job_name": JOB, "static_configs": [{"targets": targets}]}],
            },
            sort_keys=False,
        )
    )
    return path


def test_metrics_pass_promtool_and_a_real_prometheus_scrapes_them(tmp_path: Path) -> None:
    import time

    promtool = require_tool("promtool", "prometheus")
    prometheus = require_tool("prometheus", "prometheus")
    until = time.monotonic() + DEADLINE
    kv_url, garbage = asyncio.run(_repository(tmp_path))
    assert garbage > 0
    port = free_port()
    config = write_config(
        tmp_path / "gc.yaml", gc_config(kv_url, tmp_path / "work", listen=f"127.0.0.1:{port}")
    )
    procs: list[subprocess.Popen[bytes]] = []
    logs = [tmp_path / "daemon.log", tmp_path / "prometheus.log"]
    try:
        start([sys.executable, "-m", "lakefs_gc.cli", "run", "--config", str(config)], logs[0], procs)
        wait_for(
            "the daemon to be healthy", partial(answers, f"http://127.0.0.1:{port}/_health"), until, procs
        )

        def swept() -> str | None:
            status, body = http("GET", f"http://127.0.0.1:{port}/metrics")
            text = body.decode()
            deleted = metric_samples(text).get("lakefs_gc_objects_deleted_total", [])
            return (
                text
                if status == 200 and ({"region": "default", "repo": "repo1"}, float(garbage)) in deleted
                else None
            )

        text = wait_for("the scheduled run to sweep", swept, until, procs)
        samples = metric_samples(text)
        assert ({"region": "default", "repo": "repo1", "phase": "run", "outcome": "success"}, 1.0) in samples[
            "lakefs_gc_runs_total"
        ]

        # (a) promtool lints the exposition: exit 0, nothing printed.
        lint = subprocess.run(
            [promtool, "check", "metrics"],
            input=text.encode(),
            capture_output=True,
            timeout=scaled(30),
            check=False,
        )
        printed = (lint.stdout + lint.stderr).decode(errors="replace").strip()
        assert lint.returncode == 0 and not printed, f"promtool check metrics ({lint.returncode}):\n{printed}"

        # (b) a real Prometheus server scrapes the daemon every second, with the GC rules loaded.
        prom_config = prometheus_config(tmp_path / "prometheus.yml", [f"127.0.0.1:{port}"])
        checked = subprocess.run(
            [promtool, "check", "config", str(prom_config)],
            capture_output=True,
            timeout=scaled(30),
            check=False,
        )
        assert checked.returncode == 0, checked.stdout + checked.stderr
        prom_port = free_port()
        cmd = [
            prometheus,
            f"--config.file={prom_config}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{prom_port}",
            "--log.level=warn",
        ]
        server = start(cmd, logs[1], procs)
        base = f"http://127.0.0.1:{prom_port}"

        def query(expr: str) -> list[dict[str, Any]]:
            status, body = http("GET", f"{base}/api/v1/query?{urllib.parse.urlencode({'query': expr})}")
            assert status == 200, body
            answer = json.loads(body)
            assert answer["status"] == "success", answer
            result: list[dict[str, Any]] = answer["data"]["result"]
            return result

        def scraped() -> bool | None:
            up = query(f'up{{job="{JOB}"}} == 1')
            deleted = query(f'lakefs_gc_objects_deleted_total{{job="{JOB}",repo="repo1"}} == {garbage}')
            recorded = query('repo:lakefs_gc_last_success_timestamp_seconds:max{repo="repo1"}')
            return True if up and deleted and recorded else None

        wait_for("Prometheus to be ready", partial(answers, f"{base}/-/ready"), until, procs)
        wait_for("Prometheus to scrape the daemon and record", scraped, until, procs)
        assert not query('ALERTS{alertstate="firing"}')

        def dashboard_answers() -> bool | None:
            empty = [e for e in dashboard_queries() if any(n in e for n in WITH_DATA) and not query(e)]
            return True if not empty else None

        try:
            wait_for("the dashboard's queries to return data", dashboard_answers, until, procs)
        except AssertionError:
            empty = [e for e in dashboard_queries() if any(n in e for n in WITH_DATA) and not query(e)]
            raise AssertionError(f"dashboard queries without data: {empty}") from None
        for expr in dashboard_queries():
            query(expr)  # every query evaluates
        assert stop(server) == 0, tail(logs[1])
    except BaseException:
        print("\n\n".join(tail(log) for log in logs), file=sys.stderr)
        raise
    finally:
        for proc in procs:
            stop(proc)
