"""The suite's own policy (tests/conftest.py, tests/support/{timing,profiles,tiers}.py) holds: the time
factor scales every test's limit, the hypothesis profile is the one asked for, every test carries its
file's tier, the tier table names files that exist, and a file over its budget fails an enforcing run.
Selection by environment and option runs pytest itself in a subprocess on this file."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import settings

from tests.conftest import REPO_ROOT, SLOW_FILES_FIRST, default_timeout
from tests.support.profiles import BASE_EXAMPLES, examples
from tests.support.tiers import FILE_BUDGETS, TIER_BUDGETS, TIERS, BudgetCheck, budget_of, tier_of
from tests.support.timing import ENV, TIME_FACTOR, parse_time_factor, scaled

EXPECT = "LAKEFS_TEST_EXPECT_PROFILE"  # set by the subprocess runs below


def test_the_time_factor_parses_strictly() -> None:
    assert parse_time_factor(None) == parse_time_factor("") == 1.0
    assert parse_time_factor("2.5") == 2.5
    for bad in ("fast", "0", "-1", "inf", "nan"):
        with pytest.raises(ValueError, match=ENV):
            parse_time_factor(bad)


def test_this_test_carries_its_tier_and_a_scaled_limit(request: pytest.FixtureRequest) -> None:
    assert request.node.get_closest_marker("integration") is not None  # pytest in subprocesses
    assert request.node.get_closest_marker("unit") is None
    limit = request.node.get_closest_marker("timeout")
    assert default_timeout(request.config) == 300  # pyproject's
    assert limit is not None and limit.args[0] == 300 * TIME_FACTOR == scaled(300)


@pytest.mark.timeout(7)
def test_a_limit_the_test_sets_is_scaled_too(request: pytest.FixtureRequest) -> None:
    limit = request.node.get_closest_marker("timeout")
    assert limit is not None and limit.args[0] == 7 * TIME_FACTOR


def test_the_loaded_hypothesis_profile_is_the_one_asked_for() -> None:
    expected = os.environ.get(EXPECT, "ci")
    assert settings.get_current_profile_name() == expected
    assert settings().max_examples == BASE_EXAMPLES[expected]
    assert examples(3) == 3 * BASE_EXAMPLES[expected]  # e.g. 300 under ci, CI's count before
    assert examples(0.0001) == 1


def test_the_tier_table_names_existing_files_and_directories() -> None:
    missing = [prefix for prefix in [*TIERS, *FILE_BUDGETS] if not (REPO_ROOT / prefix).exists()]
    assert not missing, missing
    assert {tier_of(path) for path in SLOW_FILES_FIRST} == {"e2e"}  # the files that take minutes
    assert tier_of("tests/gc/test_gc_kill.py") == "e2e"  # the longest prefix wins
    assert tier_of("tests/gc/test_sweep.py") == "integration"
    assert tier_of("tests/no_such_dir/test_new.py") == "unit"  # unlisted: the tightest budget
    assert budget_of("tests/format/test_ids.py") == TIER_BUDGETS["unit"] * TIME_FACTOR


def _pytest(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:xdist", "-p", "no:cacheprovider", "-q", *args],
        cwd=REPO_ROOT, env={**os.environ, **env}, capture_output=True, text=True, timeout=scaled(120),
        check=False,
    )  # fmt: skip


HERE = "tests/test_suite_policy.py"
# The in-process checks above (never the subprocess tests themselves: that would recurse).
SELF_CHECKS = "carries_its_tier or limit_the_test_sets or loaded_hypothesis_profile"


def test_the_environment_selects_factor_and_profile(tmp_path: Path) -> None:
    nightly = {ENV: "3", "HYPOTHESIS_PROFILE": "nightly", EXPECT: "nightly"}
    done = _pytest(tmp_path, HERE, "-k", SELF_CHECKS, **nightly)
    assert done.returncode == 0 and "3 passed" in done.stdout, done.stdout[-3000:] + done.stderr[-2000:]
    done = _pytest(tmp_path, HERE, "-k", SELF_CHECKS, "--hypothesis-profile", "dev", **{EXPECT: "dev"})
    assert done.returncode == 0 and "3 passed" in done.stdout, done.stdout[-3000:] + done.stderr[-2000:]
    done = _pytest(tmp_path, HERE, "-k", SELF_CHECKS, **{"HYPOTHESIS_PROFILE": "weekly"})
    assert done.returncode != 0 and "HYPOTHESIS_PROFILE='weekly'" in done.stdout + done.stderr


class _Terminal:
    """Collects what the check writes at session end (pytest's TerminalReporter interface)."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def section(self, title: str) -> None:
        self.lines.append(f"== {title}")

    def write_line(self, line: str) -> None:
        self.lines.append(line)


class _Session:
    exitstatus: int | pytest.ExitCode = pytest.ExitCode.OK


def _report(nodeid: str, when: str, seconds: float) -> pytest.TestReport:
    return pytest.TestReport(nodeid, (nodeid, 0, ""), {}, "passed", None, when, duration=seconds)


@pytest.mark.parametrize("enforce", [False, True])
def test_a_file_over_its_budget_is_reported_and_fails_an_enforcing_run(enforce: bool, tmp_path: Path) -> None:
    check = BudgetCheck(enforce, tmp_path / "budgets.json")
    unit_budget = budget_of("tests/format/test_ids.py")
    for when in ("setup", "call", "teardown"):  # a file's time is all its tests' phases
        check.pytest_runtest_logreport(_report("tests/format/test_ids.py::test_a", when, unit_budget / 2))
    check.pytest_runtest_logreport(_report("tests/gc/test_gc_kill.py::test_b", "call", 250.0 * TIME_FACTOR))
    terminal, session = _Terminal(), _Session()
    check.pytest_terminal_summary(terminal)  # type: ignore[arg-type]
    check.pytest_sessionfinish(session)  # type: ignore[arg-type]
    assert [line.split(":")[0] for line in terminal.lines[1:]] == ["tests/format/test_ids.py"]
    assert "(unit)" in terminal.lines[1]  # gc_kill is within its recorded 300 s
    assert session.exitstatus == (pytest.ExitCode.TESTS_FAILED if enforce else pytest.ExitCode.OK)
    assert '"tier": "e2e"' in (tmp_path / "budgets.json").read_text()
