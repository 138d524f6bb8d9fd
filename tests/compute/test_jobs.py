"""The job registry of the compute layer: installed entry points, in-process registrations and
``module:function`` targets; the core names no daemon's job."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from lakefs_core.compute import jobs
from lakefs_core.compute.executor import Executor
from lakefs_core.errors import BadInputError
from tests.support.timing import scaled

ROOT = Path(__file__).resolve().parents[2]


def test_installed_jobs_come_from_each_package_s_entry_points() -> None:
    installed = jobs.installed_jobs()
    assert installed["core-import"] == "lakefs_core.compute.import_job:import_job"
    assert installed["gc-mark"] == "lakefs_gc.mark.mark:mark_job"
    assert installed["count-objects"] == "lakefs_gc.mark.count_objects:run"
    from lakefs_gc.mark.mark import mark_job

    assert jobs.get_job("gc-mark") is mark_job


def test_the_registry_names_no_daemon_module() -> None:
    source = (ROOT / "lakefs_core" / "compute" / "jobs.py").read_text()
    assert "lakefs_gc" not in source and "lakefs_mirror" not in source


def _echo(executor: Executor, args: Mapping[str, Any]) -> dict[str, Any]:
    return {"executor": executor.name, "args": dict(args)}


def test_register_job_and_module_function_targets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jobs, "_registered", {})
    jobs.register_job("echo-test", _echo)
    assert jobs.get_job("echo-test") is _echo
    assert "echo-test" in jobs.job_names()
    assert jobs.get_job(f"{__name__}:_echo") is _echo


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("no-such-job", "unknown job"),
        ("lakefs_core.no_such_module:run", "cannot be imported"),
        ("lakefs_core.errors:no_such_function", "cannot be imported"),
        ("lakefs_core.errors:LAKEFS_NOT_CALLABLE", "cannot be imported"),
        ("lakefs_core.compute.jobs:ENTRY_POINT_GROUP", "not a function"),
        ("os:system; rm -rf /", "unknown job"),
    ],
)
def test_bad_job_names_are_one_typed_error(name: str, why: str) -> None:
    with pytest.raises(BadInputError, match=why):
        jobs.get_job(name)


def test_the_job_entry_runs_a_daemon_s_job_by_its_installed_name(tmp_path: Path) -> None:
    """``python -m lakefs_core.compute.job count-objects`` (a GC job) in a fresh process: found
    through the entry points alone, GC's modules imported only then."""
    args = tmp_path / "args.json"
    args.write_text('{"store": {"namespace": "mem://nothing"}}')
    proc = subprocess.run(
        [sys.executable, "-m", "lakefs_core.compute.job", "count-objects", "--executor", "lite",
         "--args", str(args), "--result", str(tmp_path / "result.json")],
        cwd=ROOT, capture_output=True, text=True, timeout=scaled(120), check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert '"job": "count-objects"' in (tmp_path / "result.json").read_text()
