"""Shared fixtures: real servers over real sockets on 127.0.0.1.

- ``moto_regions``: session-wide registry of moto_server processes, one per region name.
- ``moto``: per-test accessor that resets every region it hands out (isolation), e.g.
  ``moto("us-east-1").endpoint``.
- ``pg_database``: a fresh PostgreSQL database for the session (skip locally when unreachable,
  fail when ``CI`` is set).
- ``sqlite_url``, ``local_root``: embedded-default stores in the test's tmp dir.
- ``shared_fixtures``: the ``../shared/fixtures`` folder (skip when absent, fail under CI).

Suite-wide policy (docs/development.md): the hypothesis profiles (tests/support/profiles.py,
``HYPOTHESIS_PROFILE``), the time factor every limit scales with (tests/support/timing.py,
``LAKEFS_TEST_TIME_FACTOR``: pytest-timeout's limit too), and the tiers ``unit`` / ``integration`` /
``e2e`` applied from a table with a per-file time budget checked at session end
(tests/support/tiers.py), and the order the files run in, longest first (``run_order``).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from lakefs_core import offloop
from tests.support import spark_jvm
from tests.support.env import skip_or_fail
from tests.support.moto import ACCESS_KEY, SECRET_KEY, MotoRegions, MotoServer
from tests.support.pg import PgDatabase, create_database, drop_database, unreachable_reason
from tests.support.profiles import register_profiles
from tests.support.tiers import BudgetCheck, Tier, apply_tier_markers, tier_of
from tests.support.timing import scaled

register_profiles()  # before pytest's hypothesis plugin applies --hypothesis-profile

# pytest keeps a test module's assertion-rewritten code in __pycache__ only where bytecode may be
# written. With PYTHONDONTWRITEBYTECODE set (CI's machines, the project's sandboxes) every pytest
# process (each xdist worker, each run) parsed, rewrote and compiled all ~210 test modules again:
# most of a collection's CPU (29.6 s cold against 13.3 s cached, one process, 2 loaded cores). This
# process writes that cache from here on (test modules and conftests, git-ignored); the processes the
# tests start keep the environment's setting.
sys.dont_write_bytecode = False

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED = REPO_ROOT.parent / "shared"

# Credentials for the moto servers; botocore must never look at the real machine's.
os.environ["AWS_ACCESS_KEY_ID"] = ACCESS_KEY
os.environ["AWS_SECRET_ACCESS_KEY"] = SECRET_KEY
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
os.environ.pop("AWS_PROFILE", None)

# Every JVM the suite starts runs with the test-only options of tests/support/spark_jvm.py (C1 only,
# the serial collector, and the class-data sharing archive once it exists): set here for the JVMs of
# this process's first tests, and again before each test (`_spark_jvm_options`) for the archive that a
# background build (started when collection ends, `pytest_collection_finish`) writes during the run.
spark_jvm.apply()


# The order the files run in: `make test` keeps the collection order for pytest-xdist
# (--no-loadscope-reorder; by default it sends the files with the most tests first, which left the
# few-test files that take minutes to the end, one worker running them for minutes after the other had
# finished everything else). Longest first, so the run ends on files of seconds and both workers finish
# together: the files below (CI's --durations), then the rest of the e2e tier, then integration, then
# unit (tests/support/tiers.py), each in its directory order.
SLOW_FILES_FIRST = (
    "tests/gc/test_gc_kill.py",
    "tests/gc/test_gc_model.py",
    "tests/gc/test_gc_slowdown.py",
    "tests/gc/test_mark_spark.py",
    "tests/gc/test_import_spark.py",
    "tests/spark/test_datasource.py",
    "tests/spark/test_spark_submit.py",
    "tests/cli/test_scenario.py",
    "tests/service/test_deleter.py",
    "tests/mirror/test_crash.py",
    "tests/gc/test_spark_submit.py",
    "tests/cli/test_fs_bulk.py",
)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("lakefs", "lakefs-open test tiers (tests/support/tiers.py)")
    group.addoption(
        "--enforce-budgets",
        action="store_true",
        help="fail the run when a test file is over its time budget (tests/support/tiers.py)",
    )
    group.addoption(
        "--budget-report",
        metavar="PATH",
        help="write every test file's seconds, tier and budget as JSON (give it as --budget-report=PATH)",
    )


def pytest_configure(config: pytest.Config) -> None:
    if hasattr(config, "workerinput"):
        return  # a pytest-xdist worker: its reports reach the controller, which checks the budgets
    report = config.getoption("--budget-report")
    enforce = bool(config.getoption("--enforce-budgets"))
    config.pluginmanager.register(BudgetCheck(enforce, Path(report) if report else None), "lakefs-budgets")


def default_timeout(config: pytest.Config) -> float:
    """pytest-timeout's limit for a test that sets none, before the time factor: ``--timeout``, else
    pyproject's ``timeout`` (0: no limit)."""
    value = config.getoption("timeout", None)
    return float(config.getini("timeout") if value is None else value or 0)


_TIER_ORDER: dict[Tier, int] = {"e2e": 0, "integration": 1, "unit": 2}
_SLOW_RANK = {path: i for i, path in enumerate(SLOW_FILES_FIRST)}


def run_order(path: str) -> tuple[int, int]:
    """Where the test file ``path`` runs: SLOW_FILES_FIRST in its order, then e2e, integration, unit."""
    if path in _SLOW_RANK:
        return (0, _SLOW_RANK[path])
    return (1 + _TIER_ORDER[tier_of(path)], 0)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    items.sort(key=lambda item: run_order(item.nodeid.split("::", 1)[0]))  # stable: directory order within
    apply_tier_markers(items)
    default = default_timeout(config)
    for item in items:  # every per-test limit times the time factor (prepended: the closest marker)
        own = item.get_closest_marker("timeout")
        seconds = float(own.args[0]) if own is not None and own.args else default
        if seconds > 0:
            item.add_marker(pytest.mark.timeout(scaled(seconds)), append=False)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Start building the test JVMs' class-data sharing archive when this run has Spark tests and it
    is missing (tests/support/spark_jvm.py: detached, one build per machine at a time)."""
    if not session.config.option.collectonly:
        spark_jvm.start_build(session.items)


@pytest.fixture(autouse=True)
def _spark_jvm_options() -> None:
    """The JVMs this test starts map the class-data sharing archive once it exists."""
    spark_jvm.apply()


@pytest.fixture(autouse=True)
def _restore_switch_interval(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Iterator[None]:
    """A daemon's ``serve_api`` shortens the GIL switch interval for its whole process
    (lakefs_core.offloop.favour_the_loop). The suite keeps CPython's default: the short interval
    makes the daemon tests' threads (aiosqlite, to_thread, CPU workers) hand the GIL over 25 times
    as often for nothing. Tests about the latency it buys are marked ``favour_the_loop``."""
    before = sys.getswitchinterval()
    if request.node.get_closest_marker("favour_the_loop") is None:
        monkeypatch.setattr(offloop, "LOOP_SWITCH_INTERVAL", before)  # favour_the_loop: no change
    yield
    sys.setswitchinterval(before)


@pytest.fixture(scope="session")
def shared_fixtures() -> Path:
    path = SHARED / "fixtures"
    if not path.is_dir():
        skip_or_fail(f"shared fixtures folder {path} is absent (clone with ../shared beside the repo)")
    return path


@pytest.fixture(scope="session")
def moto_regions(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MotoRegions]:
    regions = MotoRegions(tmp_path_factory.mktemp("moto-logs"))
    try:
        yield regions
    finally:
        regions.stop_all()


@pytest.fixture
def moto(moto_regions: MotoRegions) -> Callable[[str], MotoServer]:
    """``moto(region)`` returns that region's server, reset once at first use in this test."""
    reset_done: set[str] = set()

    def get(region: str = "us-east-1") -> MotoServer:
        server = moto_regions.get(region)
        if region not in reset_done:
            server.reset()
            reset_done.add(region)
        return server

    return get


@pytest.fixture(scope="session")
def pg_database() -> Iterator[PgDatabase]:
    reason = unreachable_reason()
    if reason is not None:
        skip_or_fail(f"PostgreSQL is unreachable at LAKEFS_TEST_PG_URL or 127.0.0.1:5432 ({reason})")
    db = create_database()
    try:
        yield db
    finally:
        drop_database(db)


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'kv.sqlite3'}"


@pytest.fixture
def local_root(tmp_path: Path) -> Path:
    root = tmp_path / "objects"
    root.mkdir()
    return root
