"""Reading a snapshot of a repository prefix: the driver's plan and what each task does.

Planning (:func:`plan_read`, on the driver, once per DataFrame):

- the ref is resolved to ONE commit id (with ``uncommitted``, the branch's staged changes over its
  head are read too, as they are when planned); the files under the prefix are the entries of that
  commit's ranges overlapping the prefix (:meth:`~lakefs_core.repos.graveler.Graveler.list_entries`
  reads range files, never lists the object store);
- hive-style directories (``date=2026-11-01/``) become string columns (cast to the declared type when
  a schema is given); a prefix ending inside them reads only those partitions and keeps their
  columns (pruning by prefix); with ``filterPushdown`` (and Spark's
  ``spark.sql.python.filterPushdown.enabled``) equality filters on them prune files too. Names
  below the prefix starting with ``_`` or ``.`` (``_SUCCESS``, ``.crc``) are skipped as Spark does;
- files are packed in path order into partitions of about ``partition_bytes``, fewer bytes when
  that gives fewer than ``min_partitions`` partitions (:func:`split_bytes` and :func:`pack`, Spark's
  rule for its file sources: each file costs its size plus :data:`OPEN_COST_BYTES`); a file larger
  than that is a partition of its own.

A task (:func:`read_files`) opens the core from the configuration path, reads each object's bytes
through :class:`~lakefs_core.repos.objects.Objects` (so a purged object answers
:class:`~lakefs_core.errors.PurgedError` and a missing one :class:`~lakefs_core.errors.NotFoundError`,
both naming the object), parses them with pyarrow and yields Arrow batches cast exactly to the
declared schema (a value that does not fit is :class:`~lakefs_core.errors.BadInputError` naming the
file and column, never a silently wrong value).
"""

from __future__ import annotations

import copy
import io
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from lakefs_core.compute.partition import run_async
from lakefs_core.errors import BadInputError, ConflictError, NotFoundError
from lakefs_core.format.records import ValueRecord
from lakefs_core.repos.objects import ObjectStat
from lakefs_core.repos.uri import LakeFSURI
from lakefs_core.spark.options import CoreRef

if TYPE_CHECKING:
    import pyarrow as pa  # type: ignore[import-untyped]

    from lakefs_core.wiring import Core

FORMAT_OPTIONS = ("header", "sep", "delimiter", "quote", "escape")
OPEN_COST_BYTES = 4 << 20  # as spark.sql.files.openCostInBytes


class FileSpec(NamedTuple):
    """One object to read: its path in the repository, where its bytes are, its partition values
    (a named tuple: planning builds one per object, 100,000s of them)."""

    path: str
    address: str
    address_type: str
    size: int
    values: tuple[tuple[str, str], ...] = ()

    def stat(self) -> ObjectStat:
        return ObjectStat(self.path, self.address, self.address_type, self.size, "", "")


@dataclass(frozen=True)
class ReadPlan:
    core: CoreRef
    repo: str
    ref: str  # as the user wrote it
    commit_id: str
    prefix: str
    uncommitted: bool
    fmt: str
    format_options: Mapping[str, str]
    partition_columns: tuple[str, ...]
    files: tuple[FileSpec, ...] = field(repr=False)

    def describe(self) -> str:
        staged = " + uncommitted" if self.uncommitted else ""
        where = f"lakefs://{self.repo}/{self.commit_id}{staged}/{self.prefix}"
        return f"{where} ({self.fmt}, {len(self.files)} files)"


def partition_values(path: str, prefix: str = "") -> tuple[tuple[str, str], ...] | None:
    """``k=v`` directories of ``path`` (all of them: a prefix that ends inside the partition
    directories, ``events/date=2026-11-01/``, still gives the column); None for a file hidden below
    the prefix (``_SUCCESS``, ``.crc``)."""
    below = "/" + path[len(prefix) :]
    if "/_" in below or "/." in below:
        return None
    if "=" not in path:  # the common case, without a split
        return ()
    parts = path.split("/")
    values: list[tuple[str, str]] = []
    for directory in parts[:-1]:
        name, eq, value = directory.partition("=")
        if eq and name:
            values.append((name, value))
    return tuple(values)


async def _record_batches(
    core: Core, repo: str, ref: str, prefix: bytes, committed: str | None
) -> AsyncIterator[list[ValueRecord]]:
    """The entries under ``prefix`` in batches: with ``committed`` (a metarange id), the records of
    the ranges overlapping the prefix, one batch per range; else ``ref``'s with its staged changes."""
    if committed is None:
        batch: list[ValueRecord] = []
        async for record in core.graveler.list_entries(repo, ref, prefix=prefix):
            batch.append(record)
            if len(batch) >= 4096:
                yield batch
                batch = []
        yield batch
        return
    metarange = await core.graveler.metarange(await core.graveler.repository(repo), committed)
    for i, info in enumerate(metarange.ranges):
        if info.max_key < prefix:
            continue
        if info.min_key > prefix and not info.min_key.startswith(prefix):
            return  # this range and every later one lie after the prefix
        records = await metarange.range_records(i, prefix if info.min_key < prefix else None)
        yield [r for r in records if r.key.startswith(prefix)]


async def _list_files(core: Core, repo: str, ref: str, prefix: str, committed: str | None) -> list[FileSpec]:
    from lakefs_core.format.proto import catalog_pb2
    from lakefs_core.format.records import decode_entry

    files: list[FileSpec] = []
    names = catalog_pb2.Entry.AddressType.Name
    async for batch in _record_batches(core, repo, ref, prefix.encode(), committed):
        for record in batch:
            path = record.key.decode("utf-8", "surrogateescape")
            values = partition_values(path, prefix)
            if values is None:
                continue
            entry = decode_entry(record.data)
            files.append(FileSpec(path, entry.address, names(entry.address_type), entry.size, values))
    return files


def _columns(files: Sequence[FileSpec]) -> tuple[str, ...]:
    """The partition columns: the same names in the same order in every file, else an error."""
    if not files:
        return ()
    first = tuple(name for name, _ in files[0].values)
    for spec in files:
        if tuple(name for name, _ in spec.values) != first:
            raise BadInputError(
                f"{spec.path!r} has partition directories {[n for n, _ in spec.values]}, "
                f"{files[0].path!r} has {list(first)}",
                field="path",
            )
    return first


async def plan_read(core_ref: CoreRef, uri: LakeFSURI, options: Mapping[str, str], fmt: str) -> ReadPlan:
    """Resolve the ref once and list the files of the prefix from the commit's ranges."""
    from lakefs_core.spark.options import flag

    uncommitted = flag(options, "uncommitted")
    async with core_ref.open() as core:
        repo = await core.graveler.repository(uri.repo)
        resolved = await core.graveler.resolve(repo, uri.ref)
        if uncommitted and resolved.branch is None:
            raise BadInputError(f"{uri.ref!r} is not a branch: only a branch has uncommitted changes",
                                field="uncommitted")  # fmt: skip
        commit_id = resolved.commit.id
        expected = options.get("expectedCommit")
        if expected and expected != commit_id:  # snapshot(): the branch moved since it resolved it
            raise ConflictError(f"{uri.ref!r} is now {commit_id}, not the expected {str(expected)[:64]}")
        # Committed data only from the pinned commit's ranges; staged changes through the branch.
        committed = None if uncommitted else resolved.commit.metarange_id
        files = await _list_files(core, uri.repo, uri.ref, uri.path, committed)
    format_options = {k: str(options[k]) for k in FORMAT_OPTIONS if k in options}
    return ReadPlan(
        core_ref, uri.repo, uri.ref, commit_id, uri.path, uncommitted, fmt, format_options,
        _columns(files), tuple(files),
    )  # fmt: skip


async def resolve_commit(core_ref: CoreRef, uri: LakeFSURI) -> str:
    """The commit id ``uri``'s ref names now (:func:`lakefs_core.spark.snapshot`'s first step)."""
    async with core_ref.open() as core:
        return (await core.graveler.resolve(await core.graveler.repository(uri.repo), uri.ref)).commit.id


def split_bytes(files: Sequence[FileSpec], partition_bytes: int, min_partitions: int) -> int:
    """Spark's own rule for file sources: at most ``partition_bytes`` per partition, but small enough
    to give ``min_partitions`` partitions (every core busy), and never below the cost of opening a
    file (:data:`OPEN_COST_BYTES`)."""
    total = sum(f.size + OPEN_COST_BYTES for f in files)
    return min(partition_bytes, max(OPEN_COST_BYTES, -(-total // max(min_partitions, 1))))


def pack(files: Sequence[FileSpec], target_bytes: int, open_cost: int = 0) -> list[list[FileSpec]]:
    """Files in path order into groups of about ``target_bytes`` (at least one file each), each file
    counting its size plus ``open_cost`` as Spark's file sources count it: :func:`split_bytes`'
    target includes the open cost, so packing without it filled one partition with 7 of 8 files of
    5 MB and left the other core one file."""
    groups: list[list[FileSpec]] = []
    size = 0
    for spec in files:
        if not groups or (size + spec.size > target_bytes and groups[-1]):
            groups.append([])
            size = 0
        groups[-1].append(spec)
        size += spec.size + open_cost
    return groups


def prune(files: Sequence[FileSpec], equal: Mapping[str, set[str]]) -> list[FileSpec]:
    """The files whose partition values are among the wanted ones (pushed-down filters)."""
    if not equal:
        return list(files)
    return [f for f in files if all(v in equal[n] for n, v in f.values if n in equal)]


# -- tasks --------------------------------------------------------------------------------------------


async def _fetch(core: Core, repo: str, spec: FileSpec) -> bytes:
    try:
        chunks = [c async for c in core.objects.read_stat(repo, spec.stat())]
    except NotFoundError as e:
        # The project's error first, naming the object (PurgedError keeps its class and audit id).
        named = copy.copy(e)  # the same class and fields (a PurgedError keeps its audit id)
        named.args = (f"lakefs://{repo}/{spec.path} (address {spec.address}): {e}", *e.args[1:])
        raise named from e
    return b"".join(chunks)


def parse(data: bytes, spec: FileSpec, fmt: str, options: Mapping[str, str]) -> pa.Table:
    """One object's rows as an Arrow table (before the cast to the declared schema)."""
    import pyarrow as pa

    try:
        if fmt == "parquet":
            import pyarrow.parquet as pq  # type: ignore[import-untyped]

            return pq.read_table(pa.BufferReader(data))
        if fmt == "csv":
            from pyarrow import csv

            header = str(options.get("header", "false")).lower() == "true"
            sep = options.get("sep") or options.get("delimiter") or ","
            read = csv.ReadOptions(autogenerate_column_names=not header)
            table = csv.read_csv(
                io.BytesIO(data), read_options=read, parse_options=csv.ParseOptions(delimiter=sep)
            )
            if not header:  # Spark's names for headerless CSV
                table = table.rename_columns([f"_c{i}" for i in range(table.num_columns)])
            return table
        if fmt == "json":
            from pyarrow import json

            return json.read_json(io.BytesIO(data))
        if fmt == "text":
            lines = data.decode("utf-8", "replace").splitlines()
            return pa.table({"value": pa.array(lines, pa.string())})
        return pa.table(
            {
                "path": pa.array([spec.path], pa.string()),
                "size": pa.array([spec.size], pa.int64()),
                "content": pa.array([data], pa.binary()),
            }
        )
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, OSError) as e:
        raise BadInputError(f"{spec.path!r} is not readable as {fmt}: {e}", field="format") from e


def conform(table: pa.Table, spec: FileSpec, schema: pa.Schema) -> pa.Table:
    """``table`` plus the file's partition columns, cast exactly to ``schema`` (missing columns are
    nulls; a value that does not fit is an error naming the file and column)."""
    import pyarrow as pa

    values = dict(spec.values)
    columns = []
    for target in schema:
        if target.name in values:
            column = pa.array([values[target.name]] * table.num_rows, pa.string())
        elif target.name in table.column_names:
            column = table.column(target.name)
        else:
            column = pa.nulls(table.num_rows, target.type)
        try:
            columns.append(column.cast(target.type, safe=True))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
            raise BadInputError(
                f"column {target.name!r} of {spec.path!r} does not fit {target.type}: {e}", field="schema"
            ) from e
    return pa.Table.from_arrays(columns, schema=schema)


def read_files(
    plan: ReadPlan, files: Sequence[FileSpec], schema: pa.Schema, batch_rows: int = 65536
) -> Iterator[pa.RecordBatch]:
    """A task: the files' rows as Arrow batches of ``schema`` (one core per task)."""

    async def fetch_all() -> list[bytes]:
        async with plan.core.open() as core:
            return [await _fetch(core, plan.repo, spec) for spec in files]

    # Bytes fetched first, parsed after: one event loop per task, bounded by the partition size.
    blobs = run_async(fetch_all)
    for spec, data in zip(files, blobs, strict=True):
        table = conform(parse(data, spec, plan.fmt, plan.format_options), spec, schema)
        yield from table.to_batches(max_chunksize=batch_rows)


def infer_schema(plan: ReadPlan) -> pa.Schema:
    """The first file's columns (plus the partition columns as strings)."""
    import pyarrow as pa

    if plan.fmt == "text":
        base = pa.schema([("value", pa.string())])
    elif plan.fmt == "binaryFile":
        base = pa.schema([("path", pa.string()), ("size", pa.int64()), ("content", pa.binary())])
    elif not plan.files:
        raise BadInputError(f"no files under {plan.describe()}: give a schema", field="schema")
    else:
        first = plan.files[0]

        async def fetch() -> bytes:
            async with plan.core.open() as core:
                return await _fetch(core, plan.repo, first)

        base = parse(run_async(fetch), first, plan.fmt, plan.format_options).schema
    fields: list[Any] = [f for f in base if f.name not in plan.partition_columns]
    fields += [pa.field(name, pa.string()) for name in plan.partition_columns]
    return pa.schema(fields)
