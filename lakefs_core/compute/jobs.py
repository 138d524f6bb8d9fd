"""The registry of named jobs that ``python -m lakefs_core.compute.job NAME`` (and ``spark-submit``) runs.

A job is ``fn(executor, args) -> result``: ``args`` is the parsed JSON object of ``--args FILE``
(hostile: the job checks every field), the result a JSON-able ``dict`` written to ``--result FILE``.
Built-in jobs are named here as ``"module:function"`` and imported only when run, so the entry point
stays light; :func:`register_job` adds one at run time (tests, plug-ins in the same process).
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Mapping
from typing import Any

from lakefs_core.compute.executor import Executor
from lakefs_core.errors import BadInputError

JobFn = Callable[[Executor, Mapping[str, Any]], dict[str, Any]]

BUILTIN_JOBS: dict[str, str] = {
    "count-objects": "lakefs_gc.mark.count_objects:run",
    "gc-mark": "lakefs_gc.mark.mark:mark_job",
    "core-import": "lakefs_core.compute.import_job:import_job",
}
_registered: dict[str, JobFn] = {}
_NAME = re.compile(r"[a-z][a-z0-9-]{0,62}")


def register_job(name: str, fn: JobFn) -> None:
    """Make ``fn`` runnable as ``name`` in this process."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise BadInputError(f"{name!r} is not a job name (lower-case letters, digits, '-')", field="job")
    _registered[name] = fn


def job_names() -> list[str]:
    return sorted(set(BUILTIN_JOBS) | set(_registered))


def get_job(name: str) -> JobFn:
    """The job called ``name``; :class:`BadInputError` (naming the known ones) otherwise."""
    fn = _registered.get(name)
    if fn is not None:
        return fn
    target = BUILTIN_JOBS.get(name)
    if target is None:
        raise BadInputError(f"unknown job {name!r} (known: {', '.join(job_names())})", field="job")
    module, _, attr = target.partition(":")
    found: JobFn = getattr(importlib.import_module(module), attr)
    return found
