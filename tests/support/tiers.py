"""Test tiers and their time budgets, applied by table (tests/conftest.py) and checked at session end.

Tiers (pytest markers, one per test, from the test's file):

- ``unit``: in-process (memory, SQLite and local stores), seconds per file;
- ``integration``: real servers over sockets (moto, PostgreSQL, the daemons' HTTP apps) or real
  subprocesses of the command lines, under a minute per file;
- ``e2e``: whole scenarios of the tools (kill -9 at every fault point, Spark jobs, the demo, two
  regions, commands against every KV and store) and the long model and property runs, minutes per
  file. ``make test-fast`` leaves them out (with ``slow`` and ``spark``).

:data:`TIERS` maps path prefixes to tiers (the longest matching prefix wins; a file no prefix
matches is ``unit``, so a new slow file is caught by its budget, not hidden by a default). A file's
budget is :data:`FILE_BUDGETS`' recorded figure, else its tier's (:data:`TIER_BUDGETS`), times the
time factor (:mod:`tests.support.timing`); its time is the sum of its tests' setup, call and
teardown (module fixtures included), as ``--durations`` counts them. :class:`BudgetCheck` reports
every file over its budget at session end (``make test`` and CI show it) and, with
``--enforce-budgets``, fails the run: a file that outgrew its tier is moved up the table (or made
faster), so the markers ``make test-fast`` selects on stay true. Failing is opt-in because a wall-clock
budget on a machine shared with other jobs fails for the machine's load, not the test's (issue 38):
an enforcing run sets the time factor to the machine's slowdown.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import pytest

from tests.support.timing import TIME_FACTOR

Tier = Literal["unit", "integration", "e2e"]
TIER_NAMES: tuple[Tier, ...] = ("unit", "integration", "e2e")

# Seconds per file at time factor 1 (2 cores, one pytest-xdist worker per core).
TIER_BUDGETS: dict[Tier, float] = {"unit": 20.0, "integration": 60.0, "e2e": 240.0}

TIERS: dict[str, Tier] = {
    # unit: in-process
    "tests/format/": "unit",
    "tests/committed/": "unit",
    "tests/auth/": "unit",
    "tests/repos/": "unit",
    "tests/journal/": "unit",
    # integration: real servers, sockets or subprocesses
    "tests/block/": "integration",
    "tests/kv/": "integration",
    "tests/service/": "integration",
    "tests/compute/": "integration",
    "tests/cli/": "integration",
    "tests/mirror/": "integration",
    "tests/gc/": "integration",
    "tests/server/": "integration",  # the REST server and S3 gateway over sockets
    "tests/test_architecture.py": "integration",  # lint-imports on a copy of the tree
    "tests/test_cli_sst.py": "integration",
    "tests/test_docs.py": "integration",  # mkdocs build
    "tests/test_foundation_servers.py": "integration",
    "tests/test_suite_policy.py": "integration",  # pytest in subprocesses
    "tests/test_zygote.py": "integration",  # the kill tests' fork server, a process
    "tests/format/test_hostile_tables.py": "integration",  # a subprocess under RLIMIT_AS
    "tests/format/test_sstable_interop.py": "integration",  # sst_dump
    "tests/repos/test_import_guards.py": "integration",
    # unit-prefixed files that drive PostgreSQL, DynamoDB or S3 on moto (over their budget as unit;
    # the longer ones are e2e by cost, below)
    "tests/auth/test_store.py": "integration",
    "tests/gc/test_rules.py": "unit",
    "tests/gc/test_reports.py": "unit",
    "tests/gc/test_parquet.py": "integration",  # its spark cases share a local Spark session
    # e2e: whole scenarios, minutes
    "tests/spark/": "e2e",  # the Spark data source: a local[2] session, spark-submit
    "tests/gc/test_gc_kill.py": "e2e",
    "tests/gc/test_gc_model.py": "e2e",
    "tests/gc/test_gc_slowdown.py": "e2e",
    "tests/gc/test_mark_spark.py": "e2e",
    "tests/gc/test_import_spark.py": "e2e",
    "tests/gc/test_spark_submit.py": "e2e",
    "tests/gc/test_spark_executor.py": "e2e",
    "tests/cli/test_scenario.py": "e2e",
    "tests/cli/test_fs_bulk.py": "e2e",
    "tests/service/test_deleter.py": "e2e",
    "tests/mirror/test_crash.py": "e2e",
    "tests/mirror/test_e2e_moto.py": "e2e",
    "tests/mirror/test_failover_drill.py": "e2e",  # two regions, kill -9, outage, failback
    "tests/server/test_rest_import_cancel.py": "e2e",  # 60k-object source, kill -9, a minute stale
    "tests/mirror/test_readme_setup.py": "e2e",
    "tests/test_demo.py": "e2e",
    # e2e by cost: the files that took longest outside the tier above (make test-fast, 2 cores)
    "tests/cli/test_purge_cli.py": "e2e",
    "tests/cli/test_auth_cmds.py": "e2e",
    "tests/cli/test_repo_namespaces.py": "e2e",
    "tests/cli/test_download_symlinks.py": "e2e",
    "tests/gc/test_daemon_process.py": "e2e",
    "tests/gc/test_reconcile_process.py": "e2e",
    "tests/gc/test_reconcile_model.py": "e2e",
    "tests/gc/test_active.py": "e2e",  # hypothesis against the oracle, in-process but minutes
    "tests/journal/test_races.py": "e2e",
    "tests/block/test_gc_seams.py": "e2e",
    "tests/test_shipped_suites.py": "e2e",
    # e2e by cost, issue 33's `make test-fast` budget (< 3 min on 2 cores): the files that took 7.5 s
    # or more of a quiet 2-core `make test-fast` (its --budget-report at 3a9e20f..0e71112: 6:33 wall,
    # 695 file-seconds); each still runs in `make test` and CI, before the integration tier
    "tests/kv/test_contract.py": "e2e",  # 38.1 s
    "tests/repos/test_concurrency.py": "e2e",  # 32.4 s
    "tests/mirror/test_api.py": "e2e",  # 28.6 s
    "tests/block/test_contract.py": "e2e",  # 28.2 s
    "tests/repos/test_purge_reads.py": "e2e",  # 26.7 s
    "tests/mirror/test_validate.py": "e2e",  # 23.9 s
    "tests/gc/test_gc_alert_rules.py": "e2e",  # 21.4 s
    "tests/gc/test_daemon_writers.py": "e2e",  # 18.8 s
    "tests/mirror/test_startup_errors.py": "e2e",  # 17.2 s
    "tests/server/test_gateway_clients.py": "e2e",  # 15.9 s
    "tests/format/test_fastpath.py": "e2e",  # 15.1 s
    "tests/repos/test_namespaces.py": "e2e",  # 14.7 s
    "tests/server/test_gateway_boto3.py": "e2e",  # 14.6 s
    "tests/gc/test_sweep_tampering.py": "e2e",  # 14.5 s
    "tests/repos/test_import.py": "e2e",  # 12.9 s
    "tests/server/test_rest_contract.py": "e2e",  # 12.4 s
    "tests/service/test_lease.py": "e2e",  # 10.7 s
    "tests/cli/test_cli_errors.py": "e2e",  # 10.2 s
    "tests/mirror/test_prometheus.py": "e2e",  # 9.3 s
    "tests/gc/test_gc_prometheus.py": "e2e",  # 9.0 s
    "tests/journal/test_dynamodb_parts.py": "e2e",  # 8.9 s
    "tests/block/test_local_batch.py": "e2e",  # 8.4 s
    "tests/block/test_s3.py": "e2e",  # 8.1 s
    "tests/repos/test_purge_markers.py": "e2e",  # 8.0 s
    "tests/repos/test_upload_many.py": "e2e",  # 7.9 s
    "tests/gc/test_run_record_retention.py": "e2e",  # 7.9 s
}

# Recorded budgets of the files that need more than their tier's (seconds at time factor 1, about
# twice what CI's --durations measured).
FILE_BUDGETS: dict[str, float] = {
    "tests/gc/test_gc_kill.py": 300.0,
}


def tier_of(path: str) -> Tier:
    """The tier of the test file ``path`` (relative to the repository, ``/``-separated)."""
    best = ""
    for prefix in TIERS:
        if path.startswith(prefix) and len(prefix) > len(best):
            best = prefix
    return TIERS[best] if best else "unit"


def budget_of(path: str) -> float:
    """``path``'s budget in seconds, scaled by the time factor."""
    return FILE_BUDGETS.get(path, TIER_BUDGETS[tier_of(path)]) * TIME_FACTOR


def apply_tier_markers(items: list[pytest.Item]) -> None:
    """Mark every collected test with its file's tier."""
    for item in items:
        item.add_marker(getattr(pytest.mark, tier_of(item.nodeid.split("::", 1)[0])))


@dataclass(eq=False)  # a pytest plugin: hashable by identity
class BudgetCheck:
    """Sums each file's test durations; at session end, reports (and may fail on) the files over
    budget. ``report``: a JSON file of every file's seconds, tier and budget (``--budget-report``)."""

    enforce: bool
    report: Path | None = None
    seconds: dict[str, float] = field(default_factory=lambda: defaultdict(float))

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.seconds[report.nodeid.split("::", 1)[0]] += report.duration

    def over_budget(self) -> list[tuple[str, float, float]]:
        out = [(path, s, budget_of(path)) for path, s in self.seconds.items()]
        return sorted((o for o in out if o[1] > o[2]), key=lambda o: o[2] - o[1])

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if self.report is not None:
            rows = {
                path: {"seconds": round(s, 2), "tier": tier_of(path), "budget": budget_of(path)}
                for path, s in sorted(self.seconds.items(), key=lambda kv: -kv[1])
            }
            self.report.write_text(json.dumps(rows, indent=1) + "\n")
        over = self.over_budget()
        if not over:
            return
        terminalreporter.section("test files over their tier's time budget (tests/support/tiers.py)")
        for path, s, budget in over:
            terminalreporter.write_line(f"{path}: {s:.1f} s > {budget:.0f} s ({tier_of(path)})")

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if self.enforce and self.over_budget() and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
