"""The ``count-objects`` job: count a namespace's data objects, listing every slice on the executors.

It exercises the whole path a GC mark takes (driver lists slices, executors list them through the
core's block stores or ``os.scandir``, results come back small) and serves as the smoke test of a
cluster deployment.

Arguments (JSON object): ``store`` (a :class:`~lakefs_core.compute.partition.StoreRef`: ``namespace`` plus
optional ``region``, ``endpoint_url``, ``addressing_style``; never credentials) and optional
``partitions`` (default: the executor's parallelism). Result::

    {"job": "count-objects", "executor": "spark", "namespace": "...", "slices": 3,
     "objects": 300, "bytes": 12345, "per_slice": {"<slice>": {"objects": 100, "bytes": 4115}, ...}}
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from functools import partial
from typing import Any

from lakefs_core.compute.executor import Executor
from lakefs_core.compute.partition import StoreRef
from lakefs_core.errors import BadInputError
from lakefs_gc.mark.slices import list_slice, list_slices

NAME = "count-objects"


def count_slices(ref: StoreRef, slice_ids: Iterator[str]) -> Iterator[tuple[str, int, int]]:
    """Partition function: ``(slice, objects, bytes)`` per slice of the partition."""
    for slice_id in slice_ids:
        objects = size = 0
        for row in list_slice(ref, slice_id):
            objects += 1
            size += row.size
        yield slice_id, objects, size


def parse_args(args: Mapping[str, Any]) -> tuple[StoreRef, int | None]:
    unknown = sorted(set(args) - {"store", "partitions"})
    if unknown:
        raise BadInputError(f"unknown keys {unknown}", field="args")
    ref = StoreRef.from_json(args.get("store"), field="store")
    partitions = args.get("partitions")
    if partitions is not None and (
        not isinstance(partitions, int) or isinstance(partitions, bool) or not 1 <= partitions <= 100_000
    ):
        raise BadInputError("must be an int between 1 and 100000", field="partitions")
    return ref, partitions


def run(executor: Executor, args: Mapping[str, Any]) -> dict[str, Any]:
    ref, partitions = parse_args(args)
    slices = list_slices(ref)
    n = max(1, min(partitions or executor.default_parallelism, len(slices) or 1))
    rows = executor.parallelize(slices, n).flat_map_partitions(partial(count_slices, ref)).collect()
    per_slice = {s: {"objects": o, "bytes": b} for s, o, b in sorted(rows)}
    return {
        "job": NAME,
        "executor": executor.name,
        "namespace": ref.namespace,
        "slices": len(slices),
        "objects": sum(o for _, o, _ in rows),
        "bytes": sum(b for _, _, b in rows),
        "per_slice": per_slice,
    }
