"""Import on the executors: job ``core-import`` (see :mod:`lakefs_core.repos.importing`).

The driver plans the source's chunks (contiguous key intervals), the executors list their chunks
and write the entries' ranges straight into the destination namespace's tables through the core's
block stores (S3 with aioboto3 inside the partition, never ``s3a://``; credentials from the
executors' environment or role), and return only range descriptors. The driver splices them over
the branch head's metarange and commits once (compare-and-swap on the branch). A killed job leaves
no commit; a re-run finds its ranges already stored.

Job arguments: ``{"config": <core config file>, "repository", "branch", "source", "path",
"committer"?, "message"?, "partitions"?}`` (the configuration is a path: its secrets never travel as
job arguments).
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from lakefs_core.committed.tables import TableCache, TableStore
from lakefs_core.compute.executor import Executor
from lakefs_core.compute.partition import StoreRef, run_async, store_ref
from lakefs_core.errors import BadInputError
from lakefs_core.format.records import RangeInfo
from lakefs_core.format.splitter import SplitPolicy
from lakefs_core.repos.graveler import Graveler
from lakefs_core.repos.importing import (
    Chunk,
    ImportResult,
    build_chunk_ranges,
    finish_import,
    plan_chunks,
    prepare_import,
)

JOB_NAME = "core-import"
_JOB_KEYS = frozenset(
    {"config", "repository", "branch", "source", "path", "committer", "message", "partitions"}
)


def _range_json(info: RangeInfo) -> list[Any]:
    return [info.id, info.min_key.hex(), info.max_key.hex(), info.count, info.estimated_size]


def _range_of(row: list[Any]) -> RangeInfo:
    try:
        rid, lo, hi, count, size = row
        return RangeInfo(str(rid), bytes.fromhex(lo), bytes.fromhex(hi), int(count), int(size))
    except (TypeError, ValueError) as e:
        raise BadInputError(f"an executor returned a bad range: {type(e).__name__}", field="ranges") from None


async def _chunk_ranges(conf: Mapping[str, Any], chunk: Chunk) -> tuple[list[RangeInfo], int]:
    source, dest = StoreRef.from_json(conf["source"]), StoreRef.from_json(conf["dest"])
    src_store, dst_store = await source.open(strict_names=True), await dest.open()
    try:
        tables = TableStore(dst_store, dest.ns, TableCache(ram_bytes=16 << 20))
        return await build_chunk_ranges(
            src_store,
            source.ns,
            tables,
            chunk,
            dest_prefix=conf["dest_prefix"],
            policy=SplitPolicy(**conf["policy"]),
        )
    finally:
        await src_store.close()
        await dst_store.close()


def import_partition(conf: Mapping[str, Any], chunks: Iterator[dict[str, Any]]) -> Iterable[dict[str, Any]]:
    """One partition: build the ranges of its chunks (top-level and picklable: Spark ships it)."""
    for doc in chunks:
        chunk = Chunk.from_json(doc)
        ranges, n = run_async(functools.partial(_chunk_ranges, conf, chunk))
        yield {"index": chunk.index, "count": n, "ranges": [_range_json(r) for r in ranges]}


async def import_with_executor(
    g: Graveler,
    executor: Executor,
    repo_id: str,
    branch_id: str,
    *,
    dest_path: str,
    source_uri: str,
    committer: str,
    message: str | None = None,
    partitions: int | None = None,
) -> ImportResult:
    """Plan here, build ranges on ``executor``, splice and commit here."""
    target = await prepare_import(
        g.context, repo_id, branch_id, dest_path, source_uri, committer=committer, message=message
    )
    wanted = partitions or executor.default_parallelism * 4
    chunks = await plan_chunks(await g.source_store(target.source), target.source, wanted)
    conf = {
        "source": store_ref(g.stores.s3, target.source).to_json(),
        "dest": store_ref(g.stores.s3, target.namespace).to_json(),
        "dest_prefix": target.dest_prefix,
        "policy": dataclasses.asdict(g.settings.split_policy),
    }
    n = max(1, min(len(chunks), wanted))
    rows = await asyncio.to_thread(
        lambda: (
            executor.parallelize([c.to_json() for c in chunks], n)
            .flat_map_partitions(functools.partial(import_partition, conf))
            .collect()
        )
    )
    rows.sort(key=lambda r: int(r["index"]))
    ranges = [_range_of(row) for r in rows for row in r["ranges"]]
    entries = sum(int(r["count"]) for r in rows)
    return await finish_import(
        g.context, target, ranges, entries=entries, chunks=len(chunks), committer=committer, message=message
    )


def import_job(executor: Executor, args: Mapping[str, Any]) -> dict[str, Any]:
    """Job ``core-import`` (see the module)."""
    from lakefs_core.coreconfig import default_kv_url, load_core_config
    from lakefs_core.wiring import open_core

    unknown = sorted(set(args) - _JOB_KEYS)
    if unknown:
        raise BadInputError(f"unknown keys {unknown}", field="args")
    names = ("config", "repository", "branch", "source", "path")
    values = [args.get(k) for k in names]
    if not all(isinstance(v, str) for v in values):
        raise BadInputError(f"{', '.join(names)} must be strings", field="args")
    config, repo, branch, source, path = (str(v) for v in values)
    partitions = args.get("partitions")
    if partitions is not None and (
        not isinstance(partitions, int) or isinstance(partitions, bool) or partitions < 1
    ):
        raise BadInputError("must be an integer >= 1", field="partitions")
    settings = load_core_config(Path(config))

    async def go() -> ImportResult:
        async with await open_core(settings, default_kv_url=default_kv_url()) as core:
            return await import_with_executor(
                core.graveler, executor, repo, branch, dest_path=path, source_uri=source,
                committer=str(args.get("committer") or "lakefs-import"), message=args.get("message"),
                partitions=partitions,
            )  # fmt: skip

    result = asyncio.run(go())
    return {"job": JOB_NAME, "executor": executor.name, **result.to_json()}
