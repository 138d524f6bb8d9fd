"""The ``spark-copy`` job (entry point ``lakefs_open.jobs``): copy a prefix of one ref into a branch
through the data sources, as ``python -m lakefs_core.compute.job`` or ``spark-submit`` runs it.

Arguments (JSON, hostile): ``source`` (``lakefs://repo/ref/prefix/``), ``dest``
(``lakefs://repo/branch/prefix/``), optional ``config`` (the configuration file's path), ``format``
(default parquet), ``mode`` (``append`` or ``overwrite``), ``message``. Result: the destination's
new head commit and the files under the destination prefix. A failure of a task or of the
planning is the project's typed error (:func:`~lakefs_core.spark.errors.project_errors`), so the
job's exit code is that error's.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from lakefs_core.compute.executor import Executor
from lakefs_core.errors import BadInputError, StartupError
from lakefs_core.repos.uri import Kind, parse_uri
from lakefs_core.spark.errors import project_errors
from lakefs_core.spark.options import CoreRef, file_format

JOB_NAME = "spark-copy"
_KEYS = frozenset({"source", "dest", "config", "format", "mode", "message"})


def _text(args: Mapping[str, Any], key: str, default: str | None = None) -> str:
    value = args.get(key, default)
    if not isinstance(value, str) or not value:
        raise BadInputError("must be a non-empty string", field=key)
    return value


def copy_job(executor: Executor, args: Mapping[str, Any]) -> dict[str, Any]:
    """Job ``spark-copy`` (see the module)."""
    unknown = sorted(set(args) - _KEYS)
    if unknown:
        raise BadInputError(f"unknown keys {unknown}", field="args")
    source, dest = _text(args, "source"), _text(args, "dest")
    parse_uri(source, Kind.PREFIX, field="source")
    target = parse_uri(dest, Kind.PREFIX, field="dest")
    mode = _text(args, "mode", "append")
    if mode not in ("append", "overwrite"):
        raise BadInputError("must be append or overwrite", field="mode")
    fmt = file_format({"format": str(args.get("format") or "parquet")})
    session = getattr(executor, "session", None)
    if session is None:
        raise StartupError("spark-copy needs the spark executor", key="spark")
    from lakefs_core.spark import register

    register(session)
    config = args.get("config")
    options = {"format": fmt} | ({"config": str(config)} if config else {})
    message = str(args.get("message") or f"spark-copy from {source}")
    with project_errors():  # the project's error (and the CLI's exit code), not Spark's wrapper
        df = session.read.format("lakefs").options(**options).load(source)
        df.write.format("lakefs").options(**options).option("message", message).mode(mode).save(dest)
    core = CoreRef(str(config) if config else None)

    async def written() -> tuple[str, int]:
        async with core.open() as opened:
            g = opened.graveler
            head = (await g.branch(target.repo, target.ref)).commit_id
            files = [r async for r in g.list_entries(target.repo, head, prefix=target.path.encode())]
            return head, len(files)

    head, files = asyncio.run(written())
    return {"job": JOB_NAME, "commit": head, "files": files}
