"""The executor contract, run on BOTH executors: same inputs, same outputs.

The lite executor needs no JVM (runs in ``make test-fast``); the Spark one uses the shared session.
"""

from __future__ import annotations

import hashlib
import os
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from functools import partial
from pathlib import Path

import pytest

from lakefs_core.block import S3BlockStore
from lakefs_core.compute.executor import Executor, LiteExecutor, SparkExecutor
from lakefs_core.compute.partition import StoreRef, part_name, stream_async
from lakefs_core.errors import BadInputError
from lakefs_gc.mark.slices import Listed, list_slices, list_slices_partition
from tests.gc.conftest import MakeNamespace
from tests.support.moto import MotoServer


@pytest.fixture(params=["lite", pytest.param("spark", marks=pytest.mark.spark)])
def executor(request: pytest.FixtureRequest) -> Iterator[Executor]:
    if request.param == "lite":
        with LiteExecutor(workers=2) as lite:
            yield lite
    else:
        yield SparkExecutor(request.getfixturevalue("spark"))


# Partition functions are top-level: Spark ships them to its Python workers by reference.


def repeat_each(times: int, items: Iterator[int]) -> Iterator[str]:
    for item in items:
        for k in range(times):
            yield f"{item}-{k % 2}"


def mark_run(marks: str, items: Iterator[str]) -> Iterator[str]:
    """Leaves one file per evaluation of a partition (counted across worker processes)."""
    Path(marks, uuid.uuid4().hex).touch()
    yield from items


async def _numbers(n: int) -> AsyncIterator[list[int]]:
    for start in range(0, n, 10):
        yield list(range(start, min(start + 10, n)))


def async_pages(items: Iterator[int]) -> Iterator[int]:
    for n in items:
        for page in stream_async(lambda n=n: _numbers(n)):  # type: ignore[misc]
            yield from page


def test_parallelize_and_flat_map_keep_order(executor: Executor) -> None:
    ds = executor.parallelize(range(10), 3)
    assert ds.num_partitions == 3
    assert ds.collect() == list(range(10))
    out = ds.flat_map_partitions(partial(repeat_each, 2))
    assert out.collect() == [f"{i}-{k}" for i in range(10) for k in (0, 1)]
    assert out.count() == 20


def test_distinct_repartition_anti_join(executor: Executor) -> None:
    words = executor.parallelize(range(50), 4).flat_map_partitions(partial(repeat_each, 3))
    all_words = [f"{i}-{k % 2}" for i in range(50) for k in range(3)]
    distinct = words.distinct(5)
    assert distinct.num_partitions == 5
    assert sorted(distinct.collect()) == sorted({f"{i}-{k}" for i in range(50) for k in (0, 1)})

    again = words.repartition(7)
    assert again.num_partitions == 7
    assert Counter(again.collect()) == Counter(all_words)

    right = executor.parallelize([f"{i}-0" for i in range(0, 50, 2)] + ["absent"], 2)
    left_only = executor.anti_join(words, right, 3)
    expected = Counter(w for w in all_words if not (w.endswith("-0") and int(w[:-2]) % 2 == 0))
    assert Counter(left_only.collect()) == expected  # left duplicates kept, as subtractByKey
    assert left_only.num_partitions == 3
    assert left_only.count() == sum(expected.values())


def test_persist_evaluates_each_partition_once(executor: Executor, tmp_path: Path) -> None:
    marks = tmp_path / "marks"
    marks.mkdir()
    ds = executor.parallelize([str(i) for i in range(100)], 4).flat_map_partitions(
        partial(mark_run, str(marks))
    )
    persisted = ds.persist()
    assert persisted.count() == 100
    assert sorted(persisted.collect(), key=int) == [str(i) for i in range(100)]
    assert len(os.listdir(marks)) == 4  # computed once, then read back
    persisted.unpersist()


def test_async_io_inside_partitions(executor: Executor) -> None:
    ds = executor.parallelize([5, 25, 0, 12], 2).flat_map_partitions(async_pages)
    assert ds.collect() == [*range(5), *range(25), *range(12)]


def _read_parts(directory: Path) -> dict[str, list[str]]:
    return {p.name: p.read_text().splitlines() for p in sorted(directory.iterdir())}


async def test_write_text_parts_deterministic_and_idempotent(
    executor: Executor, make_namespace: MakeNamespace
) -> None:
    built = await make_namespace(slices=1, per_slice=1)
    ns_dir = Path(built.ref.ns.store_uri.removeprefix("local://"))
    lines = [f"data/s/{i:03d}" for i in range(30)]
    ds = executor.parallelize(lines, 4)
    empty = executor.parallelize([], 2)

    assert ds.write_text_parts(built.ref, "_lakefs/gc/run1/deleted.text") == 30
    parts = _read_parts(ns_dir / "_lakefs/gc/run1/deleted.text")
    assert list(parts) == [part_name(i) for i in range(4)]
    assert sorted(line for part in parts.values() for line in part) == lines

    # A retry (the same partitions again) overwrites its own parts: same names, same content.
    assert ds.write_text_parts(built.ref, "_lakefs/gc/run1/deleted.text") == 30
    assert _read_parts(ns_dir / "_lakefs/gc/run1/deleted.text") == parts

    # The digested flavour: each part's lines, bytes and SHA-256, taken as it was written.
    written = ds.write_text_parts_digested(built.ref, "_lakefs/gc/run4/deleted.text")
    assert [w.lines for w in written] == [len(part) for part in parts.values()]
    for i, w in enumerate(written):
        data = (ns_dir / "_lakefs/gc/run4/deleted.text" / part_name(i)).read_bytes()
        assert (w.size, w.sha256) == (len(data), hashlib.sha256(data).hexdigest())

    assert empty.write_text_parts(built.ref, "_lakefs/gc/run2/deleted.text") == 0
    assert _read_parts(ns_dir / "_lakefs/gc/run2/deleted.text") == {"part-00000": [], "part-00001": []}

    bad = executor.parallelize(["two\nlines"], 1)
    with pytest.raises(Exception) as info:
        bad.write_text_parts(built.ref, "_lakefs/gc/run3/deleted.text")
    assert "not a single line" in str(info.value)  # Spark wraps the worker's error in its own


async def test_listing_on_executors_local(executor: Executor, make_namespace: MakeNamespace) -> None:
    built = await make_namespace(slices=3, per_slice=40)
    ns_dir = Path(built.ref.ns.store_uri.removeprefix("local://"))
    first = next(iter(built.slices))
    (ns_dir / "data" / first / ".lakefs-tmp-leftover").write_bytes(b"partial")  # a writer's temp file
    slices = list_slices(built.ref)
    assert sorted(slices) == sorted(built.slices)
    rows = executor.parallelize(slices, 2).flat_map_partitions(partial(list_slices_partition, built.ref))
    listed: list[Listed] = rows.collect()
    assert {r.address: r.size for r in listed} == built.addresses
    assert all(r.mtime > 0 for r in listed)
    # A slice that vanished between the driver's listing and the executor's is empty, not an error.
    gone = executor.parallelize(["00000000zz"], 1).flat_map_partitions(
        partial(list_slices_partition, built.ref)
    )
    assert gone.collect() == []


async def test_listing_on_executors_s3(
    executor: Executor, make_namespace: MakeNamespace, moto: Callable[[str], MotoServer]
) -> None:
    server = moto("us-east-1")
    ref = StoreRef("s3://gc-listing/repos/r1", region="us-east-1", endpoint_url=server.endpoint)
    store = await ref.open()
    assert isinstance(store, S3BlockStore)
    from tests.block.conftest import create_bucket

    await create_bucket(server, "gc-listing")
    await store.close()
    built = await make_namespace(slices=2, per_slice=30, ref=ref)
    slices = list_slices(ref)
    assert sorted(slices) == sorted(built.slices)
    # The executors reach S3 with credentials from their own environment, never from the job.
    rows = executor.parallelize(slices, 2).flat_map_partitions(partial(list_slices_partition, ref))
    assert {r.address: r.size for r in rows.collect()} == built.addresses
    assert written_to_s3(executor, ref) == ["data/a", "data/b"]


def written_to_s3(executor: Executor, ref: StoreRef) -> list[str]:
    """Parts written to S3 by the executors, read back through the store."""
    executor.parallelize(["data/a", "data/b"], 1).write_text_parts(ref, "_lakefs/gc/s3run")

    async def read() -> list[str]:
        store = await ref.open()
        try:
            return (await store.get(ref.ns.key("_lakefs/gc/s3run/part-00000"))).decode().splitlines()
        finally:
            await store.close()

    from lakefs_core.compute.partition import run_async

    return run_async(read)


def test_inputs_are_checked(executor: Executor) -> None:
    with pytest.raises(BadInputError):
        executor.parallelize([1], 0)
    with pytest.raises(BadInputError):
        StoreRef("s3://b/p", endpoint_url="http://key:secret@127.0.0.1:9000")
    with pytest.raises(BadInputError, match="credentials"):
        StoreRef.from_json({"namespace": "s3://b/p", "secret_access_key": "x"})
    other = LiteExecutor(workers=1)
    try:
        with pytest.raises(BadInputError):
            executor.anti_join(other.parallelize(["a"], 1), executor.parallelize(["b"], 1))
    finally:
        other.close()
