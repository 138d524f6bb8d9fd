"""Writing a DataFrame into a branch: tasks store files, the driver makes ONE commit.

- :func:`check_target` (driver, before any task): the URI must name a branch of a writable
  repository; a tag, a commit id, a ref expression or a read-only (mirror) repository is refused.
- :func:`write_task` (a task attempt): its Arrow batches become files of about ``file_bytes``
  (parquet, CSV or JSON lines) at FRESH physical addresses of the namespace, stored create-only
  through the block store. With the repository's hard-delete journal on, each file's intent is
  recorded first (a batch of one, ``pending``), so a file that is never committed (a failed or
  speculative attempt, a killed job) is deleted by the reconciler. The attempt returns its entries
  and batches; nothing is staged.
- :func:`commit_job` (the driver, once all tasks succeeded): the entries of the winning attempts in
  one commit on the branch head (:meth:`~lakefs_core.repos.graveler.Graveler.commit_entries`),
  retried on a moved head; ``overwrite`` removes the prefix's other entries in the same commit.
  A job that fails commits nothing.

Spark's application and query ids reach the commit through the tasks: the driver's commit runs in a
Python worker that sees neither (no task context, no Spark variable in its environment), but each
task sees its job's local properties (``spark.app.id``, ``spark.sql.execution.query.id``,
``spark.sql.execution.id``) and returns them with its files (:data:`SPARK_IDS`).
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator, Mapping
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from lakefs_core.errors import BadInputError, NotFoundError, ReadOnlyError
from lakefs_core.faults import fault_point
from lakefs_core.format.records import ValueRecord
from lakefs_core.repos.uri import LakeFSURI
from lakefs_core.spark.options import CoreRef

if TYPE_CHECKING:
    import pyarrow as pa  # type: ignore[import-untyped]

    from lakefs_core.refs.model import Commit
    from lakefs_core.wiring import Core

EXTENSIONS = {"parquet": "parquet", "csv": "csv", "json": "json"}
CONTENT_TYPES = {
    "parquet": "application/vnd.apache.parquet",
    "csv": "text/csv",
    "json": "application/x-ndjson",
}


@dataclass(frozen=True)
class WritePlan:
    core: CoreRef
    repo: str
    branch: str
    prefix: str
    fmt: str
    overwrite: bool
    message: str
    metadata: Mapping[str, str] = field(default_factory=dict)
    file_bytes: int = 128 << 20
    job: str = field(default_factory=lambda: uuid.uuid4().hex)


# Spark's local property -> the commit metadata key recording it (what a task sees of its job).
SPARK_IDS = {
    "spark.app.id": "lakefs_spark.app_id",
    "spark.sql.execution.query.id": "lakefs_spark.query_id",  # PySpark 4.1+: a UUID per query
    "spark.sql.execution.id": "lakefs_spark.execution_id",  # the SQL tab's execution number
}
MAX_ID = 200  # a local property is the job's own input: bounded before it enters a commit


@dataclass(frozen=True)
class TaskFiles:
    """What one successful task attempt wrote: entries (key, identity, data), journal batches, and
    the Spark ids the task saw (commit metadata key, value)."""

    records: tuple[tuple[bytes, bytes, bytes], ...]
    batches: tuple[tuple[str, float], ...]
    spark_ids: tuple[tuple[str, str], ...] = ()


def spark_ids(properties: Mapping[str, str | None]) -> tuple[tuple[str, str], ...]:
    """The commit metadata for Spark's ids among a task's local properties (absent ones skipped)."""
    found = ((SPARK_IDS[k], properties.get(k)) for k in SPARK_IDS)
    return tuple((key, str(value)[:MAX_ID]) for key, value in found if value)


async def check_target(core_ref: CoreRef, uri: LakeFSURI) -> None:
    """Refuse what no job may write to, before any task runs."""
    from lakefs_core.refs.ids import is_commit_id, validate_branch_id

    async with core_ref.open() as core:
        g = core.graveler
        repo = await g.repository(uri.repo)
        if repo.read_only:
            raise ReadOnlyError(f"repository {uri.repo!r} is read-only (a mirror): writes are refused")
        try:
            validate_branch_id(uri.ref)
            await g.branch(uri.repo, uri.ref)
        except (BadInputError, NotFoundError) as e:
            what = "a commit id" if is_commit_id(uri.ref) else None
            if what is None:
                try:
                    await g.tag(uri.repo, uri.ref)
                    what = "a tag"
                except (NotFoundError, BadInputError):
                    what = "not a branch"
            raise BadInputError(f"{uri.ref!r} is {what}: writes go to a branch", field="path") from e


def _encode(fmt: str, batches: list[pa.RecordBatch], schema: pa.Schema) -> bytes:
    import pyarrow as pa

    sink = pa.BufferOutputStream()
    if fmt == "parquet":
        import pyarrow.parquet as pq  # type: ignore[import-untyped]

        # one table, not a row group per Arrow batch (Spark sends batches of 10,000 rows)
        pq.write_table(pa.Table.from_batches(batches, schema), sink, row_group_size=1 << 20)
    elif fmt == "csv":
        from pyarrow import csv

        with csv.CSVWriter(sink, schema) as writer:
            for batch in batches:
                writer.write_batch(batch)
    else:
        for batch in batches:
            for row in batch.to_pylist():
                sink.write((json.dumps(row, default=str, separators=(",", ":")) + "\n").encode())
    return bytes(sink.getvalue().to_pybytes())  # one copy: the block store takes bytes


def _files(fmt: str, batches: Iterator[pa.RecordBatch], file_bytes: int) -> Iterator[bytes]:
    """The batches as files of about ``file_bytes`` each (by in-memory size); none for no rows."""
    pending: list[pa.RecordBatch] = []
    size = 0
    schema = None
    for batch in batches:
        schema = batch.schema
        if batch.num_rows == 0:
            continue
        pending.append(batch)
        size += batch.nbytes
        if size >= file_bytes:
            yield _encode(fmt, pending, schema)
            pending, size = [], 0
    if pending and schema is not None:
        yield _encode(fmt, pending, schema)


async def _store(
    core: Core, plan: WritePlan, key: str, data: bytes
) -> tuple[ValueRecord, tuple[str, float] | None]:
    from lakefs_core.keys import new_relative_address
    from lakefs_core.namespace import StorageNamespace
    from lakefs_core.repos.journal import Intent, new_batch_id
    from lakefs_core.repos.objects import new_entry

    g = core.graveler
    repo = await g.recent_repository(plan.repo)
    ns = StorageNamespace.parse(repo.storage_namespace)
    store = await g.namespace_store(ns)
    address = new_relative_address(g.clock())
    batch: tuple[str, float] | None = None
    if await g.journal_enabled(repo):
        intent = Intent(address, plan.branch, key.encode(), g.clock().timestamp(), batch=new_batch_id())
        journal = await g.journal(plan.repo)
        await journal.record_intents([intent])  # before the PUT: the reconciler learns of the file
        batch = (intent.batch or "", intent.t)
    info = await store.put(ns.key(address), data, if_none_match=True, content_type=CONTENT_TYPES[plan.fmt])
    record, _ = new_entry(key.encode(), address, info, None, info.last_modified or g.clock())
    return record, batch


def write_task(
    plan: WritePlan,
    partition: int,
    batches: Iterator[pa.RecordBatch],
    ids: Mapping[str, str | None] | None = None,
) -> TaskFiles:
    """A task attempt: its rows as files at fresh addresses (see the module). ``partition`` names
    the files (``part-<partition>-<job>-c<n>``): a retried or speculative attempt writes the same
    names at other addresses, and only one attempt's entries are committed. ``ids``: the task's
    local properties (:func:`spark_ids`)."""
    loop = asyncio.new_event_loop()
    records: list[tuple[bytes, bytes, bytes]] = []
    journal: list[tuple[str, float]] = []
    try:
        stack = AsyncExitStack()
        core = loop.run_until_complete(stack.enter_async_context(plan.core.open()))
        try:
            for n, data in enumerate(_files(plan.fmt, batches, plan.file_bytes)):
                key = f"{plan.prefix}part-{partition:05d}-{plan.job}-c{n:03d}.{EXTENSIONS[plan.fmt]}"
                record, batch = loop.run_until_complete(_store(core, plan, key, data))
                records.append((record.key, record.identity, record.data))
                if batch is not None:
                    journal.append(batch)
        finally:
            loop.run_until_complete(stack.aclose())
    finally:
        loop.close()
    return TaskFiles(tuple(records), tuple(journal), spark_ids(ids or {}))


def commit_job(plan: WritePlan, tasks: list[TaskFiles], extra: Mapping[str, str] | None = None) -> Commit:
    """The driver: one commit of every task's entries (see the module). The metadata: the job's id,
    the Spark ids its tasks saw (every task of a job sees the same), then the user's."""
    records = [ValueRecord(*r) for t in tasks for r in t.records]
    batches = [b for t in tasks for b in t.batches]
    seen = {key: value for t in reversed(tasks) for key, value in t.spark_ids}
    metadata: dict[str, Any] = {"lakefs_spark.job": plan.job, **seen, **plan.metadata, **(extra or {})}

    async def commit() -> Commit:
        fault_point("spark-write:before-commit")  # crash tests: every task wrote, nothing committed
        async with plan.core.open() as core:
            return await core.graveler.commit_entries(
                plan.repo, plan.branch, records,
                committer=plan.core.author(), message=plan.message, metadata=metadata,
                replace_prefix=plan.prefix.encode() if plan.overwrite else None,
                batches=batches, job_token=f"spark-{plan.job}",
            )  # fmt: skip

    return asyncio.run(commit())
