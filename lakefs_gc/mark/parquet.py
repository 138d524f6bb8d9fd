"""The mark's ``deleted/`` report as Parquet, column ``address``: the shape lakeFS's GC writes.

lakeFS (``GarbageCollection.writeReports``) writes the addresses to delete with Spark's
``df.write.parquet(<run>/deleted)``: part files ``part-*.snappy.parquet`` holding one nullable
string column ``address``, plus an empty ``_SUCCESS`` marker, and reads a mark back with
``spark.read.parquet(<run>/deleted)`` (sweep-only mode). Readers (Spark, pyarrow.dataset, DuckDB)
ignore files whose names start with ``_`` or ``.``, so ``_SUCCESS`` never shows as data.

Contract:

- :func:`write_parquet_part` is an executor-side partition writer (the same shape as
  :func:`~lakefs_core.compute.partition.write_text_part`, run by
  :meth:`~lakefs_core.compute.executor.Dataset.write_parts` in both executors): partition ``i`` becomes
  ``<relative_dir>/part-<i>.snappy.parquet``. The name depends only on the partition index, so a
  retried task overwrites its own part; the store's put is atomic. An empty partition writes a
  valid file with zero rows (so a reader infers the schema even when nothing is deleted).
- Memory is bounded: rows go to a local temporary file in batches of at most :data:`ROW_GROUP` rows
  and :data:`BATCH_BYTES` bytes, and the file is streamed to the store in 1 MiB chunks.
- pandas is never imported: ``pa.array``/``pa.table`` import it (when installed) to ask whether
  their input is a DataFrame, a second of start-up for every ``lakefs-gc mark`` process; a batch is
  built from its UTF-8 buffers instead (:func:`_string_array`).
- pyarrow (~0.13 s of CPU, and threads of its own) is imported by the first part written, not with
  the module: a process that imports the mark but never writes a part (a run killed before its
  report) does not pay for it, and the kill tests' pre-imported ``lakefs-gc``
  (``tests/support/zygote.py``) forks from a process that has started no thread (pyarrow starts
  jemalloc's background thread when imported).
- :func:`write_success_marker` is the driver's last step, after every part is written (Spark's job
  commit); the run's real commit point stays ``summary.json``.
- Values are the namespace-relative addresses of ``deleted.text/``: the same set, line for line.
"""

from __future__ import annotations

import os
import tempfile
from array import array
from collections.abc import AsyncIterator, Iterable, Iterator
from functools import cache
from typing import Any

from lakefs_core.block.base import BlockStore
from lakefs_core.compute.partition import StoreRef, part_name, run_async
from lakefs_core.errors import BadInputError
from lakefs_core.repos.graveler import StorageNamespace

COLUMN = "address"
SUFFIX = ".snappy.parquet"  # Spark's naming: codec, then format
SUCCESS = "_SUCCESS"
ROW_GROUP = 65_536  # rows per batch handed to the writer (bounded memory per partition)
BATCH_BYTES = 64 << 20  # UTF-8 bytes per batch: bounded memory, and int32 offsets never overflow
CHUNK = 1 << 20  # bytes per streamed put chunk


@cache
def _arrow() -> tuple[Any, Any, Any]:
    """pyarrow, pyarrow.parquet and the report's schema, imported at first use (module docstring)."""
    import pyarrow as pa  # type: ignore[import-untyped]
    import pyarrow.parquet as pq  # type: ignore[import-untyped]

    return pa, pq, pa.schema([pa.field(COLUMN, pa.string(), nullable=True)])  # Spark's StringType


def parquet_part_name(index: int) -> str:
    """``part-00000.snappy.parquet``: the file partition ``index`` writes."""
    return part_name(index) + SUFFIX


def _relative_dir(relative_dir: str) -> str:
    if not isinstance(relative_dir, str) or not relative_dir.strip("/"):
        raise BadInputError("must be a non-empty relative path", field="relative_dir")
    return relative_dir.strip("/")


def _string_array(encoded: list[bytes]) -> Any:
    """A ``string`` column of the UTF-8 values ``encoded``, from its offsets and data buffers."""
    pa = _arrow()[0]
    offsets = array("i", [0])  # Arrow's string offsets are int32
    end = 0
    for value in encoded:
        end += len(value)
        offsets.append(end)
    return pa.StringArray.from_buffers(len(encoded), pa.py_buffer(offsets), pa.py_buffer(b"".join(encoded)))


def _batch(encoded: list[bytes]) -> Any:
    pa, _, schema = _arrow()
    return pa.Table.from_arrays([_string_array(encoded)], schema=schema)


def _write_local(path: str, addresses: Iterable[str]) -> int:
    """Write ``addresses`` to a local Parquet file; returns the number of rows."""
    count = 0
    batch: list[bytes] = []
    size = 0
    _, pq, schema = _arrow()
    with pq.ParquetWriter(path, schema, compression="snappy") as writer:
        for address in addresses:
            if not isinstance(address, str) or not address:
                raise BadInputError(f"{address!r} is not an address", field="address")
            try:
                value = address.encode()
            except UnicodeEncodeError as e:  # a lone surrogate: not a string Parquet can hold
                raise BadInputError(f"{address!r} is not valid UTF-8", field="address") from e
            batch.append(value)
            size += len(value)
            if len(batch) >= ROW_GROUP or size >= BATCH_BYTES:
                writer.write_table(_batch(batch))
                count += len(batch)
                batch, size = [], 0
        if batch or count == 0:  # an empty part still holds the schema
            writer.write_table(_batch(batch))
            count += len(batch)
    return count


async def _chunks(path: str) -> AsyncIterator[bytes]:
    with open(path, "rb") as f:  # noqa: ASYNC230 - a local temp file, read in 1 MiB steps
        while chunk := f.read(CHUNK):
            yield chunk


def write_parquet_part(target: StoreRef, relative_dir: str, index: int, addresses: Iterable[str]) -> int:
    """Write ``addresses`` as ``<relative_dir>/part-<index>.snappy.parquet`` of ``target``'s
    namespace (overwriting it: idempotent per partition). Returns the number of rows."""
    key = target.ns.key(f"{_relative_dir(relative_dir)}/{parquet_part_name(index)}")
    fd, path = tempfile.mkstemp(prefix="lakefs-gc-part-", suffix=".parquet")
    os.close(fd)
    try:
        count = _write_local(path, addresses)

        async def upload() -> None:
            store = await target.open()
            try:
                await store.put(key, _chunks(path), content_type="application/vnd.apache.parquet")
            finally:
                await store.close()

        run_async(upload)
        return count
    finally:
        os.unlink(path)


def write_parquet_part_indexed(
    target: StoreRef, relative_dir: str, index: int, addresses: Iterator[str]
) -> Iterator[int]:
    """:func:`write_parquet_part` shaped for ``mapPartitionsWithIndex``: yields the row count."""
    yield write_parquet_part(target, relative_dir, index, addresses)


async def write_success_marker(store: BlockStore, ns: StorageNamespace, run_id: str) -> None:
    """The empty ``deleted/_SUCCESS`` Spark's committer leaves once every part is in place."""
    await store.put(ns.gc_path(run_id, "deleted", SUCCESS), b"")
