"""GC test fixtures.

- ``spark``: ONE local ``SparkSession`` (``local[2]``) per test process, i.e. per pytest-xdist
  worker (a JVM start costs 5-6 s); skipped locally without PySpark or java, a failure under CI.
- ``make_namespace``: builds a storage namespace with real objects in ``data/<slice>/`` through the
  core's block store (local directory or an S3 bucket on moto) and returns the expected listing.
"""

from __future__ import annotations

import importlib.util
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from lakefs_core.block import BlockStore
from lakefs_core.compute.partition import StoreRef
from lakefs_core.keys import new_object_id, new_slice_id
from lakefs_core.kv.memory import MemoryKVStore
from lakefs_core.namespace import StorageNamespace
from lakefs_core.repos.graveler import Graveler, StoreRegistry
from tests.gc.mark_support import Clock, Env, build_repo
from tests.support import spark_jvm
from tests.support.env import require_tool, skip_or_fail

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkSession]:
    if importlib.util.find_spec("pyspark") is None:
        skip_or_fail("PySpark is not installed (the 'dev' and 'spark' extras install it)")
    require_tool("java", "default-jre-headless")
    from lakefs_core.compute.session import spark_session, stop_spark_session

    spark_jvm.apply()  # this fixture's JVM starts before the tests' autouse fixtures run

    local_dir = tmp_path_factory.mktemp("spark-local")
    session = spark_session(
        "local[2]",
        app_name="lakefs-gc-tests",
        conf={"spark.sql.shuffle.partitions": "4", "spark.local.dir": str(local_dir)},
    )
    try:
        yield session
    finally:
        stop_spark_session()


@dataclass(frozen=True)
class BuiltNamespace:
    ref: StoreRef
    slices: dict[str, int]  # slice id -> objects
    addresses: dict[str, int]  # relative address -> size


MakeNamespace = Callable[..., Awaitable[BuiltNamespace]]


async def _fill(store: BlockStore, ns: StorageNamespace, slices: int, per_slice: int) -> BuiltNamespace:
    now = datetime.now(UTC)
    counts: dict[str, int] = {}
    addresses: dict[str, int] = {}
    for h in range(slices):
        slice_id = new_slice_id(now - timedelta(hours=h))
        counts[slice_id] = per_slice
        for i in range(per_slice):
            object_id = new_object_id()
            body = b"x" * (i % 7 + 1)
            await store.put(ns.data_key(slice_id, object_id), body)
            addresses[ns.relative_address(slice_id, object_id)] = len(body)
    await store.put(ns.dummy_key(), b"")
    return BuiltNamespace(StoreRef(ns.uri), counts, addresses)


@pytest.fixture
def make_namespace(tmp_path: Path) -> MakeNamespace:
    """``await make_namespace(slices=3, per_slice=100, ref=None)``: a local namespace under tmp_path
    (or the namespace of ``ref``, e.g. an S3 one) filled with objects."""

    async def make(slices: int = 3, per_slice: int = 100, ref: StoreRef | None = None) -> BuiltNamespace:
        ref = ref or StoreRef(f"local://{tmp_path / 'ns'}")
        store = await ref.open()
        try:
            built = await _fill(store, ref.ns, slices, per_slice)
        finally:
            await store.close()
        return BuiltNamespace(ref, built.slices, built.addresses)

    return make


@pytest.fixture
async def env(tmp_path: Path) -> AsyncIterator[Env]:
    """The mark and sweep tests' repository: built by the real core, memory KV, local namespace."""
    clock = Clock()
    g = Graveler(MemoryKVStore(), StoreRegistry(), clock=clock)
    root = tmp_path / "ns"
    built = await build_repo(g, clock, "repo1", f"local://{root}", local_root=str(root))
    try:
        yield Env(g, clock, built, root)
    finally:
        await g.stores.close()
