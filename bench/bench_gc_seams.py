"""GC's block-store seams against the raw filesystem and today's APIs, in the same run (gc.md §4).

Usage: ``python -m bench.bench_gc_seams [--size N] [--s3-keys M]`` (defaults 100,000 and 5,000).

1. Listing: ``N`` objects written through ``LocalBlockStore.put`` (with their sidecars) under
   ``data/<slice>/<id>`` (2,000 per slice), then listed three ways, best of 3 (``list``: once, it is
   slow): raw ``os.scandir`` + ``stat`` (the baseline), ``list_keys``, ``list``.
2. Deleting: three disjoint thirds of those slices are deleted with raw ``os.unlink`` (the baseline),
   with ``delete_batch`` (1,000 keys a call) and with today's ``delete_many`` (once each: deleting
   is destructive).
3. S3 requests per deleted key: ``M`` objects on moto_server behind the counting, throttling proxy of
   ``tests/support/s3proxy.py``, deleted through ``BatchDeleter`` with no throttling and with 30 % of
   the ``DeleteObjects`` answered 503 SlowDown (Retry-After 0.05 s).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from bench.common import machine, report
from lakefs_core.block import LocalBlockStore, S3BlockStore, S3Settings
from lakefs_core.keys import new_object_id, new_slice_id
from lakefs_core.service.deleter import BatchDeleter
from lakefs_core.service.limiter import RateLimiter

PER_SLICE = 2000


def raw_scan(top: str) -> int:
    """The baseline listing: recursive ``os.scandir`` plus one ``stat`` per file."""
    n = 0
    stack = [top]
    while stack:
        with os.scandir(stack.pop()) as it:
            for entry in it:
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
                else:
                    entry.stat()
                    n += 1
    return n


async def build(store: LocalBlockStore, n: int) -> list[str]:
    slices = [new_slice_id(seq=i) for i in range((n + PER_SLICE - 1) // PER_SLICE)]
    keys = [f"data/{slices[i // PER_SLICE]}/{new_object_id()}" for i in range(n)]
    sem = asyncio.Semaphore(16)

    async def one(key: str) -> None:
        async with sem:
            await store.put(key, key.encode())

    for i in range(0, n, 5000):
        await asyncio.gather(*(one(k) for k in keys[i : i + 5000]))
    return sorted(keys)


async def timed(fn: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    best, out = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = await fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


async def bench_listing(store: LocalBlockStore, n: int) -> None:
    top = str(store.root / "data")

    async def raw() -> int:
        return raw_scan(top)

    async def lean() -> int:
        return sum([1 async for _ in store.list_keys("data/")])

    async def today() -> int:
        return sum([1 async for _ in store.list("data/")])

    t_raw, c_raw = await timed(raw, 3)
    t_keys, c_keys = await timed(lean, 3)
    t_list, c_list = await timed(today, 1)
    assert c_raw == c_keys == c_list == n, (c_raw, c_keys, c_list)
    report(
        "gc_seams.listing",
        objects=n,
        raw_per_s=round(n / t_raw),
        list_keys_per_s=round(n / t_keys),
        list_per_s=round(n / t_list),
        list_keys_to_raw=round(t_raw / t_keys, 3),
        list_keys_to_list=round(t_list / t_keys, 2),
        repeat={"raw": 3, "list_keys": 3, "list": 1},
    )


async def bench_deletes(store: LocalBlockStore, keys: list[str]) -> None:
    third = len(keys) // 3
    raw_keys, batch_keys, many_keys = keys[:third], keys[third : 2 * third], keys[2 * third : 3 * third]
    root = store.root
    t0 = time.perf_counter()
    for k in raw_keys:
        os.unlink(root / k)
    t_raw = time.perf_counter() - t0
    t0 = time.perf_counter()
    for i in range(0, len(batch_keys), 1000):
        result = await store.delete_batch(batch_keys[i : i + 1000])
        assert not result.failed
    t_batch = time.perf_counter() - t0
    t0 = time.perf_counter()
    await store.delete_many(many_keys)
    t_many = time.perf_counter() - t0
    report(
        "gc_seams.local_delete",
        keys_each=third,
        unlink_per_s=round(third / t_raw),
        delete_batch_per_s=round(third / t_batch),
        delete_many_per_s=round(third / t_many),
        delete_batch_to_unlink=round(t_raw / t_batch, 3),
        delete_batch_to_delete_many=round(t_many / t_batch, 2),
    )


async def _keys(keys: list[str]) -> AsyncIterator[str]:
    for k in keys:
        yield k


async def bench_s3(m: int) -> None:
    from tests.support.moto import ACCESS_KEY, SECRET_KEY, MotoServer
    from tests.support.s3proxy import ThrottlingProxy

    logs = Path(tempfile.mkdtemp(prefix="bench-moto-"))
    server = MotoServer("us-east-1")
    server.start(logs)
    try:
        for share in (0.0, 0.3):
            async with ThrottlingProxy(
                server.endpoint, throttle_share=share, retry_after=0.05, seed=1
            ) as proxy:
                settings = S3Settings(
                    region="us-east-1",
                    endpoint_url=proxy.endpoint,
                    access_key_id=ACCESS_KEY,
                    secret_access_key=SECRET_KEY,
                    max_pool_connections=32,
                )
                async with S3BlockStore("bench-gc", settings=settings) as store:
                    client = await store._client()  # bench setup only
                    if share == 0.0:
                        await client.create_bucket(Bucket="bench-gc")
                    keys = [f"ns/data/s{i % 5}/o{i:06d}" for i in range(m)]
                    sem = asyncio.Semaphore(32)

                    async def put(k: str, s: S3BlockStore = store, sem: asyncio.Semaphore = sem) -> None:
                        async with sem:
                            await s.put(k, b"x")

                    await asyncio.gather(*(put(k) for k in keys))
                    proxy.reset_counts()
                    d = BatchDeleter(store, RateLimiter(start=100_000, cap=1_000_000), backoff_initial=0.01)
                    t0 = time.perf_counter()
                    deleted = sum([len(r.deleted) async for r in d.run(_keys(keys))])
                    elapsed = time.perf_counter() - t0
                    left = sum([1 async for _ in store.list_keys("ns/")])
                report(
                    "gc_seams.s3_requests_per_key",
                    keys=m,
                    slowdown_share=share,
                    deleted=deleted,
                    left=left,
                    delete_requests=proxy.requests["DeleteObjects"],
                    other_requests=sum(proxy.requests.values()) - proxy.requests["DeleteObjects"],
                    throttled=proxy.throttled,
                    requests_per_deleted_key=round(proxy.requests["DeleteObjects"] / max(deleted, 1), 6),
                    target=round(1 / 900, 6),
                    seconds=round(elapsed, 2),
                )
    finally:
        server.stop()
        shutil.rmtree(logs, ignore_errors=True)


async def main_async(args: argparse.Namespace) -> None:
    report("gc_seams.machine", **machine())
    work = Path(tempfile.mkdtemp(prefix="bench-gc-seams-"))
    try:
        store = LocalBlockStore(work / "ns", fsync=False, tmp_grace_seconds=None)
        t0 = time.perf_counter()
        keys = await build(store, args.size)
        os.sync()  # no writeback of the build running under the timed parts
        report("gc_seams.build", objects=args.size, seconds=round(time.perf_counter() - t0, 1))
        await bench_listing(store, args.size)
        await bench_deletes(store, keys)
        await store.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.s3_keys:
        await bench_s3(args.s3_keys)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--size", type=int, default=100_000, help="local objects (default 100,000)")
    parser.add_argument("--s3-keys", type=int, default=5000, help="S3 keys to delete, 0 to skip")
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
