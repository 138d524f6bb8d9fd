"""A full lite mark + sweep of a repository on moto S3 through the throttling proxy
(tests/support/s3proxy.py), with ~3,000 garbage objects (build_repo's plus old unreferenced ones):

- with 30% of the ``DeleteObjects`` calls answered ``503 SlowDown`` (and ``Retry-After``), the run
  completes, nothing live is deleted, all the oracle's garbage is deleted, and the throttles were seen
  and counted (proxy and sweep report agree);
- without throttling, the sweep sends at most one ``DeleteObjects`` per 900 deleted keys.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import pytest

from lakefs_core.compute.executor import LiteExecutor
from lakefs_core.keys import new_object_id, new_slice_id
from lakefs_core.kv.memory import MemoryKVStore
from lakefs_core.repos.graveler import Graveler, StoreRegistry
from lakefs_core.service.deleter import store_deleter
from lakefs_gc.mark.mark import run_mark
from lakefs_gc.sweep.sweep import SweepOptions, SweepReport, run_sweep
from tests.block.conftest import create_bucket, s3_settings
from tests.gc.mark_support import REAL_NOW, Built, Clock, Env, build_repo, stored_objects
from tests.gc.test_mark import deleted_set, expected, options
from tests.support.moto import MotoServer
from tests.support.moto_seed import seed_objects
from tests.support.s3proxy import ThrottlingProxy

EXTRA_GARBAGE = 2990  # with build_repo's few: <= 3,000 keys, three full-ish batches


@dataclass
class S3Repo:
    g: Graveler
    built: Built
    proxy: ThrottlingProxy
    live: set[str]
    garbage: set[str]
    before: set[str]


@pytest.fixture
async def s3_repo(moto: Callable[[str], MotoServer], tmp_path: Path) -> AsyncIterator[S3Repo]:
    server = moto("us-east-1")
    await create_bucket(server, "gc-bucket")
    async with ThrottlingProxy(server.endpoint, seed=11, retry_after=0.05) as proxy:
        clock = Clock()
        g = Graveler(MemoryKVStore(), StoreRegistry(s3=s3_settings(proxy.endpoint)), clock=clock)
        try:
            built = await build_repo(g, clock, "repo1", "s3://gc-bucket/some/prefix", local_root=None)
            store = await g.namespace_store(built.ns)
            old_slice = new_slice_id(REAL_NOW - timedelta(days=10))
            keys = [built.ns.data_key(old_slice, new_object_id()) for _ in range(EXTRA_GARBAGE)]
            # Straight to moto, by plain PUTs: the throttling proxy (in this process) is for the GC
            # run, and relaying 3,000 setup PUTs through it, or signing them with botocore, cost
            # more CPU than the run itself (tests/support/moto_seed.py).
            await seed_objects(server, "gc-bucket", keys)
            live, garbage = await expected(Env(g, clock, built, tmp_path), ["c3", "d", "c1"])
            before = set(await stored_objects(store, built.ns))
            assert len(garbage) > EXTRA_GARBAGE and len(garbage) <= 3000
            yield S3Repo(g, built, proxy, live, garbage, before)
        finally:
            await g.stores.close()


async def mark_and_sweep(r: S3Repo) -> tuple[set[str], SweepReport]:
    with LiteExecutor(workers=2) as executor:
        result = await run_mark(r.g, r.built.repo, executor, options=options())
    marked = await deleted_set(r.g, r.built, result.run_id)
    assert marked == r.garbage and not marked & r.live
    store = await r.g.namespace_store(r.built.ns)
    r.proxy.reset_counts()
    report = await run_sweep(
        r.g, r.built.repo, result.run_id, deleter=store_deleter(store), options=SweepOptions()
    )
    after = set(await stored_objects(store, r.built.ns))
    assert not r.live - after, f"live objects deleted: {sorted(r.live - after)[:5]}"
    assert r.before - after == r.garbage, "the sweep did not delete exactly the garbage"
    assert report.deleted == len(r.garbage) and report.failed == 0
    return marked, report


async def test_sweep_completes_under_slowdown(s3_repo: S3Repo) -> None:
    s3_repo.proxy.throttle_share = 0.3
    s3_repo.proxy.throttle_next = 1  # three batches: make sure at least one SlowDown is answered
    _, report = await mark_and_sweep(s3_repo)
    proxy = s3_repo.proxy
    assert proxy.throttled > 0 and report.throttled == proxy.throttled
    # Every throttled request was retried: the accepted ones named every key exactly once.
    assert proxy.requests["DeleteObjects"] > proxy.throttled


async def test_requests_per_deleted_key(s3_repo: S3Repo) -> None:
    _, report = await mark_and_sweep(s3_repo)
    proxy = s3_repo.proxy
    deletes = proxy.requests["DeleteObjects"]
    assert proxy.throttled == 0 and report.throttled == 0
    assert deletes / report.deleted <= 1 / 900, f"{deletes} DeleteObjects for {report.deleted} keys"
    assert proxy.delete_keys_sent == report.deleted
    total = sum(proxy.requests.values())
    print(
        f"sweep of {report.deleted} keys: {deletes} DeleteObjects, {total} requests in all",
        dict(proxy.requests),
    )
