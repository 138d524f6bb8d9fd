"""The registry of named jobs that ``python -m lakefs_core.compute.job NAME`` (and ``spark-submit``) runs.

A job is ``fn(executor, args) -> result``: ``args`` is the parsed JSON object of ``--args FILE``
(hostile: the job checks every field), the result a JSON-able ``dict`` written to ``--result FILE``.

Where a name is found, first match wins:

1. :func:`register_job` (tests, plug-ins in the same process);
2. the entry points of group :data:`ENTRY_POINT_GROUP` (``lakefs_open.jobs``): every installed
   distribution declares its jobs there as ``name = "module:function"`` (this project's
   ``pyproject.toml``: the core's ``core-import``, GC's ``gc-mark`` and ``count-objects``), imported
   only when run, so the entry point stays light and the core names no daemon's module;
3. a name of the form ``module:function`` is that function itself (a deployment that ships the
   project's source without its installed metadata still runs any job this way).
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Mapping
from importlib.metadata import entry_points
from typing import Any

from lakefs_core.compute.executor import Executor
from lakefs_core.errors import BadInputError

JobFn = Callable[[Executor, Mapping[str, Any]], dict[str, Any]]

ENTRY_POINT_GROUP = "lakefs_open.jobs"
_registered: dict[str, JobFn] = {}
_NAME = re.compile(r"[a-z][a-z0-9-]{0,62}")
_TARGET = re.compile(r"[A-Za-z_][\w.]{0,254}:[A-Za-z_]\w{0,127}")


def register_job(name: str, fn: JobFn) -> None:
    """Make ``fn`` runnable as ``name`` in this process."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise BadInputError(f"{name!r} is not a job name (lower-case letters, digits, '-')", field="job")
    _registered[name] = fn


def installed_jobs() -> dict[str, str]:
    """``name -> "module:function"`` of every job the installed distributions declare."""
    return {ep.name: ep.value for ep in entry_points(group=ENTRY_POINT_GROUP)}


def job_names() -> list[str]:
    return sorted(set(installed_jobs()) | set(_registered))


def get_job(name: str) -> JobFn:
    """The job called ``name``; :class:`BadInputError` (naming the known ones) otherwise."""
    fn = _registered.get(name)
    if fn is not None:
        return fn
    target = installed_jobs().get(name)
    if target is None and isinstance(name, str) and _TARGET.fullmatch(name):
        target = name
    if target is None:
        raise BadInputError(f"unknown job {name!r} (known: {', '.join(job_names())})", field="job")
    module, _, attr = target.partition(":")
    try:
        found: JobFn = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as e:
        raise BadInputError(f"job {name!r} names {target}, which cannot be imported: {e}", field="job") from e
    if not callable(found):
        raise BadInputError(f"job {name!r} names {target}, which is not a function", field="job")
    return found
