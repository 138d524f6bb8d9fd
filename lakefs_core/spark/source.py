"""The PySpark data sources ``lakefs`` and ``lakefs-changes`` (Python Data Source API, PySpark 4.0+).

This module imports PySpark and pyarrow; :func:`lakefs_core.spark.register` imports it. The work is
done by :mod:`.read`, :mod:`.write` and :mod:`.changes`, which know nothing of PySpark's classes.

Where each method runs: ``DataSource.__init__``/``schema``/``reader``/``writer`` and the writer's
``commit``/``abort`` run in a Python worker of the DRIVER; ``read``/``write`` in the executors' Python
workers. The data source object is created once per DataFrame and pickled into its plan, so the
commit a read resolves in ``__init__`` is the DataFrame's snapshot however the branch moves later.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa  # type: ignore[import-untyped]
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamReader,
    EqualTo,
    Filter,
    In,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema
from pyspark.sql.types import StructType

from lakefs_core.compute.partition import run_async
from lakefs_core.errors import BadInputError, ConflictError
from lakefs_core.repos.uri import Kind
from lakefs_core.spark import changes, read, write
from lakefs_core.spark.errors import one_line_errors, project_errors
from lakefs_core.spark.options import (
    DEFAULT_FILE_BYTES,
    DEFAULT_PARTITION_BYTES,
    MAX_MESSAGE,
    WRITE_FORMATS,
    CoreRef,
    config_path,
    file_format,
    flag,
    positive_int,
    source_uri,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

SOURCE_NAME = "lakefs"
CHANGES_NAME = "lakefs-changes"


SNAPSHOT_ATTEMPTS = 3  # snapshot(uncommitted): the branch may move between resolving and planning


def snapshot(
    spark: SparkSession, uri: str, schema: StructType | str | None = None, **options: object
) -> DataFrame:
    """``spark.read.format("lakefs").load(uri)`` whose plan shows the commit it reads.

    PySpark prints a Python data source's scan as ``BatchScan <format name>[columns] (Python)``: the
    name the reader was looked up by, nothing the source returns. So the ref is resolved HERE, in the
    caller's process, and the DataFrame is read through an alias of the source named
    ``lakefs@<commit id>`` (``lakefs@<commit id>+uncommitted`` with ``uncommitted``), registered once
    per name; the path given to it names the commit itself (with ``uncommitted``, the branch, and
    option ``expectedCommit`` refuses a branch that moved in between: resolved again, up to
    :data:`SNAPSHOT_ATTEMPTS` times). Errors are the project's (:func:`.errors.project_errors`).
    """
    opts = {k: str(v) for k, v in options.items()}
    parsed = source_uri(opts | {"path": uri})
    core = CoreRef(config_path(opts))
    staged = flag(opts, "uncommitted")
    for attempt in range(SNAPSHOT_ATTEMPTS):
        commit_id = run_async(lambda: read.resolve_commit(core, parsed))
        name = f"{SOURCE_NAME}@{commit_id}" + ("+uncommitted" if staged else "")
        _register_alias(spark, name)
        path = uri if staged else f"lakefs://{parsed.repo}/{commit_id}/{parsed.path}"
        reader = spark.read.format(name).options(**opts).option("expectedCommit", commit_id)
        if schema is not None:
            reader = reader.schema(schema)
        try:
            with project_errors():
                return reader.load(path)
        except ConflictError:
            if attempt + 1 == SNAPSHOT_ATTEMPTS:
                raise
    raise AssertionError("unreachable")


def _register_alias(spark: SparkSession, name: str) -> None:
    """Register ``LakeFSDataSource`` under ``name`` unless this session has it (every alias reads as
    the source does: only the name differs, so a case-insensitive clash of names is harmless)."""
    try:
        if spark._jsparkSession.sessionState().dataSourceManager().dataSourceExists(name):
            return
    except Exception:  # Spark Connect, another JVM: registering again is harmless
        pass
    alias = type("LakeFSSnapshotSource", (LakeFSDataSource,), {"name": classmethod(lambda cls: name)})
    spark.dataSource.register(alias)


class FilesPartition(InputPartition):
    def __init__(self, files: Sequence[read.FileSpec]) -> None:
        super().__init__(None)
        self.files = list(files)


class LakeFSDataSource(DataSource):
    """``spark.read.format("lakefs").load("lakefs://repo/ref/prefix/")`` and the matching write."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        self.core = CoreRef(config_path(options))
        self._plan: read.ReadPlan | None = None

    def plan(self) -> read.ReadPlan:
        """The read's snapshot: the ref resolved once, the files listed from its ranges."""
        if self._plan is None:
            uri = source_uri(self.options)
            with one_line_errors():
                planned = read.plan_read(self.core, uri, self.options, file_format(self.options))
                self._plan = asyncio.run(planned)
        return self._plan

    def schema(self) -> StructType:
        with one_line_errors():
            return from_arrow_schema(read.infer_schema(self.plan()))

    def reader(self, schema: StructType) -> DataSourceReader:
        pruning = flag(self.options, "filterPushdown")
        return (LakeFSPruningReader if pruning else LakeFSReader)(self.plan(), schema, self.options)

    @one_line_errors()
    def writer(self, schema: StructType, overwrite: bool) -> DataSourceArrowWriter:
        uri = source_uri(self.options)
        asyncio.run(write.check_target(self.core, uri))  # refused before any task runs
        if uri.path and not uri.path.endswith("/"):
            raise BadInputError("a write names a prefix: end the path with '/'", field="path")
        message = str(self.options.get("message") or f"Spark write to {uri.path or '/'}")[:MAX_MESSAGE]
        metadata = {
            k[len("metadata.") :]: str(v) for k, v in self.options.items() if k.startswith("metadata.")
        }
        plan = write.WritePlan(
            self.core, uri.repo, uri.ref, uri.path, file_format(self.options, WRITE_FORMATS), overwrite,
            message, metadata, positive_int(self.options, "fileBytes", DEFAULT_FILE_BYTES),
        )  # fmt: skip
        return LakeFSWriter(plan)


class LakeFSReader(DataSourceReader):
    def __init__(self, plan: read.ReadPlan, schema: StructType, options: Mapping[str, str]) -> None:
        self.plan = plan
        self.arrow_schema = to_arrow_schema(schema)
        self.partition_bytes = positive_int(options, "partitionBytes", DEFAULT_PARTITION_BYTES)
        # The planning worker cannot ask Spark its default parallelism: the driver's cores stand in.
        self.min_partitions = positive_int(options, "minPartitions", os.cpu_count() or 2, maximum=1 << 20)
        self.wanted: dict[str, set[str]] = {}

    def partitions(self) -> list[InputPartition]:
        files = read.prune(self.plan.files, self.wanted)
        target = read.split_bytes(files, self.partition_bytes, self.min_partitions)
        return [FilesPartition(group) for group in read.pack(files, target, read.OPEN_COST_BYTES)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        files = partition.files if isinstance(partition, FilesPartition) else []
        with one_line_errors():
            yield from read.read_files(self.plan, files, self.arrow_schema)


class LakeFSPruningReader(LakeFSReader):
    """The reader when ``spark.sql.python.filterPushdown.enabled`` is on (option ``filterPushdown``:
    PySpark refuses a reader with ``pushFilters`` while that setting is off)."""

    def pushFilters(self, filters: list[Filter]) -> Iterator[Filter]:
        """Equality on a partition column prunes files by their directory; Spark still applies
        every filter to the rows (they are all yielded back), so pruning never changes a result."""
        columns = set(self.plan.partition_columns)
        for f in filters:
            if isinstance(f, EqualTo) and len(f.attribute) == 1 and f.attribute[0] in columns:
                self.wanted.setdefault(f.attribute[0], set()).add(str(f.value))
            elif isinstance(f, In) and len(f.attribute) == 1 and f.attribute[0] in columns:
                self.wanted.setdefault(f.attribute[0], set()).update(str(v) for v in f.value)
            yield f


@dataclass
class FilesWritten(WriterCommitMessage):
    files: write.TaskFiles


class LakeFSWriter(DataSourceArrowWriter):
    def __init__(self, plan: write.WritePlan) -> None:
        self.plan = plan

    @one_line_errors()
    def write(self, iterator: Iterator[pa.RecordBatch]) -> FilesWritten:
        from pyspark import TaskContext

        context = TaskContext.get()
        partition = context.partitionId() if context is not None else 0
        # The job's ids are local properties of its tasks; the driver's commit worker cannot see them.
        ids = {k: context.getLocalProperty(k) for k in write.SPARK_IDS} if context is not None else {}
        return FilesWritten(write.write_task(self.plan, partition, iterator, ids))

    @one_line_errors()
    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        write.commit_job(self.plan, [m.files for m in messages if isinstance(m, FilesWritten)])

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """Nothing is committed; the files written are left to the hard-delete reconciler."""


# -- the change feed ------------------------------------------------------------------------------


class CommitPartition(InputPartition):
    def __init__(self, step: changes.CommitStep) -> None:
        super().__init__(step.commit_id)
        self.step = step


class LakeFSChangesDataSource(DataSource):
    """``spark.readStream.format("lakefs-changes").load("lakefs://repo/branch")`` (and batch reads
    over ``startingCommit``/``endingCommit``)."""

    @classmethod
    def name(cls) -> str:
        return CHANGES_NAME

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        self.core = CoreRef(config_path(options))
        self.uri = source_uri(options, Kind.REF)

    def schema(self) -> str:
        return changes.SCHEMA_DDL

    @one_line_errors()
    def reader(self, schema: StructType) -> DataSourceReader:
        start = self.options.get("startingCommit") or None
        end = self.options.get("endingCommit") or self.uri.ref
        steps = changes.commits_after(self.core, self.uri.repo, start, end, changes.MAX_WALK)
        return ChangesReader(self.core, self.uri.repo, steps)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        limit = positive_int(self.options, "maxCommitsPerTrigger", 1000)
        return ChangesStreamReader(
            self.core, self.uri.repo, self.uri.ref, self.options.get("startingCommit"), limit
        )


class ChangesReader(DataSourceReader):
    def __init__(self, core: CoreRef, repo: str, steps: list[changes.CommitStep]) -> None:
        self.core, self.repo, self.steps = core, repo, steps

    def partitions(self) -> list[InputPartition]:
        return [CommitPartition(s) for s in self.steps] or [InputPartition(None)]

    def read(self, partition: InputPartition) -> Iterator[tuple[object, ...]]:
        if isinstance(partition, CommitPartition):
            with one_line_errors():
                yield from changes.change_rows(self.core, self.repo, partition.step)


class ChangesStreamReader(DataSourceStreamReader):
    def __init__(self, core: CoreRef, repo: str, branch: str, start: str | None, limit: int) -> None:
        self.core, self.repo, self.branch, self.start, self.limit = core, repo, branch, start, limit

    def initialOffset(self) -> dict[str, Any]:
        return {"commit": self.start or changes.head_of(self.core, self.repo, self.branch)}

    def latestOffset(self, start: dict[str, Any] | None = None, limit: Any = None) -> dict[str, Any]:
        head = changes.head_of(self.core, self.repo, self.branch)
        if start is None:
            return {"commit": head}
        steps = changes.commits_after(self.core, self.repo, start["commit"], head, self.limit)
        return {"commit": steps[-1].commit_id if steps else start["commit"]}

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        steps = changes.commits_after(self.core, self.repo, start["commit"], end["commit"], changes.MAX_WALK)
        return [CommitPartition(s) for s in steps]

    def read(self, partition: InputPartition) -> Iterator[tuple[object, ...]]:
        if isinstance(partition, CommitPartition):
            with one_line_errors():
                yield from changes.change_rows(self.core, self.repo, partition.step)

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to release: offsets are commit ids, kept by the query's checkpoint."""
