"""One clock for every time of a GC run (issue 38): :class:`lakefs_gc.clock.RunClock`.

The repository's Graveler clock stands 34 days behind the wall clock and the run clock adds 36 days
of offset, so the run's clock reads ``MARK_NOW`` (2 days AHEAD of the wall clock) and stands still
unless the test moves it. Every time a run records (``run.json``, ``summary.json``, the run record,
``sweep.json``, the run id) must be exactly that clock's: a time taken from the wall clock anywhere
(``datetime.now``) would be two days off and fail the equality. A second test reads the source of
``lakefs_gc`` so that no call to the wall clock comes back unnoticed in code the first one misses.
"""

from __future__ import annotations

import ast
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from pydantic import ValidationError

import lakefs_gc
from lakefs_core.compute.executor import LiteExecutor
from lakefs_core.errors import BadInputError
from lakefs_core.service.deleter import store_deleter
from lakefs_gc.clock import RunClock
from lakefs_gc.config import GCConfig
from lakefs_gc.mark.mark import MarkOptions, _job_options, run_mark
from lakefs_gc.runner import CoreRunExecutor
from lakefs_gc.runs.record import RunRecords
from lakefs_gc.runs.runs import RunProgress, RunRequest, run_id_time
from lakefs_gc.sweep.sweep import SweepOptions, run_sweep
from tests.gc.daemon_support import OFFSET_SECONDS, gc_config, sqlite_repo
from tests.gc.mark_support import MARK_NOW, MIN_AGE, REAL_NOW
from tests.gc.test_mark import Env, deleted_set

OFFSET = timedelta(days=36)  # the Graveler clock (day 6 of build_repo: REAL_NOW - 34 d) + 36 d = MARK_NOW


def _ms(when: datetime) -> datetime:
    return when.replace(microsecond=when.microsecond // 1000 * 1000)


async def test_every_time_of_a_mark_and_its_sweep_is_the_run_clock(env: Env) -> None:
    clock = RunClock(env.g.clock, OFFSET.total_seconds())
    assert clock.now() == MARK_NOW and MARK_NOW - datetime.now(UTC) > timedelta(days=1)
    with LiteExecutor(workers=2) as executor:
        marked = await run_mark(
            env.g, env.built.repo, executor, options=MarkOptions(min_age=MIN_AGE, clock=clock)
        )
    manifest, summary = marked.manifest, marked.summary
    assert manifest.now == manifest.start_time == summary.start_time == MARK_NOW  # retention now too
    assert summary.cutoff_time == MARK_NOW - MIN_AGE
    assert run_id_time(marked.run_id) == _ms(MARK_NOW)
    records = RunRecords(env.g, env.built.repo)
    found = await records.read(marked.run_id)
    assert found is not None and found[1].start_time == found[1].end_time == MARK_NOW

    env.clock.now += timedelta(hours=1)  # the sweep an hour later, on the same run clock
    store = await env.g.namespace_store(env.built.ns)
    garbage = await deleted_set(env.g, env.built, marked.run_id)
    report = await run_sweep(
        env.g, env.built.repo, marked.run_id, deleter=store_deleter(store), options=SweepOptions(clock=clock)
    )
    assert report.deleted == len(garbage) > 0
    later = (MARK_NOW + timedelta(hours=1)).isoformat().replace("+00:00", "Z")
    assert report.start_time == report.end_time == later
    found = await records.read(marked.run_id)
    assert found is not None and found[1].state == "swept" and found[1].start_time == MARK_NOW


async def test_run_ids_sort_by_the_run_clock_and_never_go_back(env: Env) -> None:
    clock = RunClock(env.g.clock, OFFSET.total_seconds())
    first = clock.new_run_id()
    second = RunClock(env.g.clock, OFFSET.total_seconds()).new_run_id()  # standing still, same sequence
    env.clock.now -= timedelta(days=3)  # a clock stepping back
    third = clock.new_run_id()
    assert first < second < third
    assert run_id_time(first) == _ms(MARK_NOW) and run_id_time(third) == _ms(MARK_NOW) + timedelta(
        milliseconds=2
    )
    env.clock.now += timedelta(days=10)
    assert run_id_time(clock.new_run_id()) == _ms(MARK_NOW + timedelta(days=7))
    # Each clock has its own sequence: a clock far ahead never drags another's ids along.
    assert run_id_time(RunClock(env.g.clock).new_run_id()) == _ms(REAL_NOW - timedelta(days=27))


def test_a_child_mark_gets_the_offset_and_refuses_a_bad_one() -> None:
    options, offset = _job_options({"clock_offset_seconds": 86400, "repository": "r"})
    assert offset == 86400.0 and options.clock is None  # the child builds the clock on its core
    for bad in (float("inf"), float("nan"), True, "1", 1e12):
        with pytest.raises(BadInputError) as e:
            _job_options({"clock_offset_seconds": bad})
        assert e.value.field == "clock_offset_seconds"
    with pytest.raises(BadInputError):
        RunClock(lambda: datetime(2030, 1, 1)).now()  # a naive clock
    for bad in (float("inf"), 1e12):  # the daemon's configuration refuses them too
        with pytest.raises(ValidationError, match="clock_offset_seconds"):
            GCConfig.model_validate(gc_config("sqlite:///kv.sqlite3", Path("/w"), clock_offset_seconds=bad))


async def test_a_mark_in_a_child_process_runs_on_the_parents_clock(tmp_path: Path) -> None:
    """The daemon's ``submit`` mode: the child gets the offset (not a time) and applies it to its
    own clock, so the run id (the parent's), retention now and ``start_time`` agree."""
    repo = await sqlite_repo(tmp_path)
    try:
        settings = GCConfig.model_validate(gc_config(repo.kv_url, tmp_path / "work")).core
        clock = RunClock(lambda: datetime.now(UTC), OFFSET_SECONDS)  # the daemon's: the real clock
        executor = CoreRunExecutor(
            settings, spark_lite=True, submit=True, workdir=tmp_path / "work", clock=clock
        )
        request = RunRequest(repository="repo1", mode="mark", run_id=clock.new_run_id(), min_age=MIN_AGE)
        result = await executor(repo.g, request, RunProgress(request, requested_at=clock.now()))
        assert result.summary is not None and result.summary["success"] is True
        wall = datetime.now(UTC)
        start = datetime.fromisoformat(result.summary["start_time"].replace("Z", "+00:00"))
        cutoff = datetime.fromisoformat(result.summary["cutoff_time"].replace("Z", "+00:00"))
        at = run_id_time(request.run_id)
        assert at is not None and timedelta(days=1) < at - wall < timedelta(days=3)
        assert timedelta(days=1) < start - wall < timedelta(days=3) and start >= at
        assert cutoff == start - MIN_AGE  # retention now is the child's run clock, as start_time
    finally:
        await repo.close()


# Only lakefs_gc/clock.py reads time; these are the other uses of the wall clock, each on purpose.
ALLOWED = {
    # the store's modification times are wall-clock times of the object store
    ("reconcile.py", "time.time"),
}
FORBIDDEN = {"datetime.now", "datetime.utcnow", "date.today", "time.time", "time.time_ns", "new_run_id"}


def _name(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_name(node.value)}.{node.attr}"
    return "?"


def test_no_wall_clock_in_gc_outside_the_run_clock() -> None:
    """``datetime.now()``, ``time.time()``, the module-level ``new_run_id()`` (the wall clock) and a
    direct ``<x>.clock()`` call (the core's clock without the offset) appear nowhere in ``lakefs_gc``
    but ``clock.py``, except :data:`ALLOWED`."""
    root = Path(lakefs_gc.__file__).parent
    found = set()
    for path in sorted(root.rglob("*.py")):
        if path.name == "clock.py" and path.parent == root:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.Call):
                continue
            name = _name(node.func)
            last_two = ".".join(name.split(".")[-2:])
            bad = last_two in FORBIDDEN or name in ("new_run_id", "utcnow") or name.endswith(".clock")
            if bad and (path.name, last_two) not in ALLOWED:
                found.add(f"{path.relative_to(root)}:{node.lineno}: {name}()")
    assert not found, sorted(found)
