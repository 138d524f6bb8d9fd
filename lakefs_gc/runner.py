"""The daemon's real run executor: mark on the configured executor, then sweep (see
:class:`lakefs_gc.runs.runs.RunExecutor` for the seam it fills).

It sits above :mod:`lakefs_gc.mark` and :mod:`lakefs_gc.sweep` (which both read and write the run files
of :mod:`lakefs_gc.runs`), so the run registry never imports the phases it reports on.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from lakefs_core.errors import BadInputError, CorruptDataError
from lakefs_core.repos.graveler import Graveler, StorageNamespace
from lakefs_gc.clock import RunClock
from lakefs_gc.pins import PinSource, pinned_now
from lakefs_gc.runs.layout import RunLayout
from lakefs_gc.runs.reports import Summary, iso_instant, read_summary
from lakefs_gc.runs.runs import RunProgress, RunRequest, RunResult

__all__ = ["CoreRunExecutor"]


def _reveal(value: Any) -> Any:
    """A settings dump with secrets revealed and paths as strings (for the child's private file)."""
    from pydantic import SecretStr

    if isinstance(value, SecretStr):
        return value.get_secret_value()
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, Mapping):
        return {k: _reveal(v) for k, v in value.items() if v is not None}
    if isinstance(value, (list, tuple)):
        return [_reveal(v) for v in value]
    return value


@dataclass
class CoreRunExecutor:
    """Mark with :func:`lakefs_gc.mark.mark.run_mark`, sweep with :func:`lakefs_gc.sweep.sweep.run_sweep`.

    ``spark_lite`` runs the mark in-process without a JVM; otherwise PySpark on ``spark_master``,
    in this process, or with ``submit`` as a child process in its own process group
    (:func:`lakefs_core.compute.child.run_spark_job`), which reads the core's settings from a private
    (0600) file written for it under ``workdir`` (its secrets never travel as job arguments).
    ``pins`` (mirror heads) are read by the daemon and passed to the child as commit ids.
    ``clock`` is the run clock (default: the Graveler's, no offset): the mark and the sweep take
    their times and run ids from it; a child gets its offset (and an explicit ``now``, if any).
    """

    core_settings: Any  # lakefs_core.settings.CoreSettings
    spark_master: str = "local[*]"
    spark_lite: bool = False
    submit: bool = False
    spark_conf: Mapping[str, str] = field(default_factory=dict)
    partitions: int | None = None
    pins: PinSource | None = None
    workdir: Path | None = None
    job_timeout: float = 6 * 3600.0
    clock: RunClock | None = None

    async def __call__(self, graveler: Graveler, request: RunRequest, progress: RunProgress) -> RunResult:
        result = RunResult(request.run_id)
        if request.mode != "sweep":
            progress.phase = "mark"
            await self._mark(graveler, request, result)
        if request.mode in ("full", "sweep"):
            progress.phase = "sweep"
            await self._sweep(graveler, request, result)
        return result

    def _clock(self, graveler: Graveler) -> RunClock:
        return self.clock or RunClock(graveler.clock)

    async def _mark(self, graveler: Graveler, request: RunRequest, result: RunResult) -> None:
        if self.submit:
            summary = await self._mark_child(graveler, request)
            result.pinned_commits = None
        else:
            summary, pins = await self._mark_here(graveler, request)
            result.pinned_commits = pins
        result.summary = json.loads(summary.to_bytes())
        result.listed = summary.listed or 0
        result.marked = summary.num_deleted_objects

    async def _mark_here(self, graveler: Graveler, request: RunRequest) -> tuple[Summary, int]:
        from lakefs_core.compute.executor import Executor, LiteExecutor
        from lakefs_gc.mark.mark import MarkOptions, run_mark

        executor: Executor
        if self.spark_lite:
            executor = LiteExecutor(spill_dir=self.workdir)
        else:
            from lakefs_core.compute.executor import SparkExecutor
            from lakefs_core.compute.session import spark_session

            session = await asyncio.to_thread(spark_session, self.spark_master, conf=dict(self.spark_conf))
            executor = SparkExecutor(session)
        options = MarkOptions(
            now=request.now,
            min_age=request.min_age,
            tags_policy=request.tags,
            mode=_mark_mode(request),
            run_id=request.run_id,
            partitions=self.partitions,
            workdir=self.workdir,
            clock=self._clock(graveler),
        )
        try:
            marked = await run_mark(graveler, request.repository, executor, options=options, pins=self.pins)
        finally:
            if self.spark_lite:
                executor.close()  # the Spark session is the process's, kept for the next run
        return marked.summary, len(marked.manifest.pins)

    async def _mark_child(self, graveler: Graveler, request: RunRequest) -> Summary:
        import os
        import tempfile

        from lakefs_core.compute.child import run_spark_job
        from lakefs_core.fileperm import make_private_dir

        pins = sorted(await pinned_now(self.pins, request.repository))
        args: dict[str, Any] = {
            "repository": request.repository,
            "min_age_seconds": int(request.min_age.total_seconds()),
            "tags": request.tags,
            "mode": _mark_mode(request),
            "run_id": request.run_id,
            "pins": pins,
            "clock_offset_seconds": self._clock(graveler).offset_seconds,
        }
        if request.now is not None:
            args["now"] = iso_instant(request.now)
        if self.partitions is not None:
            args["partitions"] = self.partitions
        if self.workdir is not None:
            make_private_dir(self.workdir)
        with tempfile.TemporaryDirectory(prefix="lakefs-gc-core-", dir=self.workdir) as tmp:
            config = Path(tmp) / "core.json"  # JSON is YAML: the child's load_core_config reads it
            fd = os.open(config, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(_reveal(self.core_settings.model_dump()), f)
            args["config"] = str(config)
            await run_spark_job(
                "gc-mark",
                args,
                master=self.spark_master,
                timeout=self.job_timeout,
                # lite: a plain Python child; Spark: spark-submit (StartupError when it is missing)
                launcher="python" if self.spark_lite else "spark-submit",
                executor="lite" if self.spark_lite else "spark",
                conf=self.spark_conf,
                work_dir=self.workdir,
            )
        repo = await graveler.repository(request.repository)
        ns = StorageNamespace(repo.storage_namespace)
        store = await graveler.namespace_store(ns)
        summary = await read_summary(store, RunLayout(ns, request.run_id).summary)
        if summary is None:
            raise CorruptDataError("the mark child reported success but wrote no summary.json")
        return summary

    async def _sweep(self, graveler: Graveler, request: RunRequest, result: RunResult) -> None:
        from lakefs_core.service.deleter import store_deleter
        from lakefs_gc.sweep.sweep import SweepOptions, run_sweep

        repo = await graveler.repository(request.repository)
        store = await graveler.namespace_store(StorageNamespace(repo.storage_namespace))
        report = await run_sweep(
            graveler,
            request.repository,
            request.run_id,
            deleter=None if request.dry_run else store_deleter(store),
            options=SweepOptions(dry_run=request.dry_run, workdir=self.workdir, clock=self._clock(graveler)),
            pins=self.pins,
        )
        result.sweep = report.model_dump(mode="json")
        result.deleted, result.delete_failures = report.deleted, report.failed
        result.throttled, result.rescued = report.throttled, report.rescued


def _mark_mode(request: RunRequest) -> Literal["full", "mark", "dry-run"]:
    """The mode recorded in the mark's ``run.json`` (a dry-run mark is never swept)."""
    if request.mode == "sweep":
        raise BadInputError("a sweep run has no mark", field="mode")
    return request.mode
