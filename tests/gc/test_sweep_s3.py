"""Lite mark and sweep of a repository whose namespace is an S3 bucket prefix (moto): executors list
and read through the core's S3 block store; the deleted set equals the oracle's garbage."""

from __future__ import annotations

from collections.abc import Callable

from lakefs_core.compute.executor import LiteExecutor
from lakefs_core.kv.memory import MemoryKVStore
from lakefs_core.repos.graveler import Graveler, StoreRegistry
from lakefs_core.service.deleter import store_deleter
from lakefs_gc.mark.mark import run_mark
from lakefs_gc.sweep.sweep import SweepOptions, run_sweep
from tests.block.conftest import create_bucket, s3_settings
from tests.gc.mark_support import Clock, build_repo, stored_objects
from tests.gc.test_mark import Env, deleted_set, expected, options
from tests.support.moto import MotoServer


async def test_s3_mark_and_sweep(moto: Callable[[str], MotoServer], tmp_path: object) -> None:
    server = moto("us-east-1")
    await create_bucket(server, "gc-bucket")
    clock = Clock()
    g = Graveler(MemoryKVStore(), StoreRegistry(s3=s3_settings(server.endpoint)), clock=clock)
    try:
        built = await build_repo(g, clock, "repo1", "s3://gc-bucket/some/prefix", local_root=None)
        env = Env(g, clock, built, tmp_path)  # type: ignore[arg-type]
        with LiteExecutor(workers=2) as executor:
            result = await run_mark(g, built.repo, executor, options=options())
        marked = await deleted_set(g, built, result.run_id)
        live, garbage = await expected(env, ["c3", "d", "c1"])
        assert marked == garbage and not marked & live
        assert {built.addr["g1"], built.addr["t1"], "legacy-obj"} <= marked
        store = await g.namespace_store(built.ns)
        before = await stored_objects(store, built.ns)
        report = await run_sweep(
            g, built.repo, result.run_id, deleter=store_deleter(store), options=SweepOptions()
        )
        after = await stored_objects(store, built.ns)
        assert set(before) - set(after) == marked and report.deleted == len(marked)
        assert "dummy" in after
    finally:
        await g.stores.close()
