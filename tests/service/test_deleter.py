"""The sweep's BatchDeleter and FailedKeysLog: on the memory and local stores (with a fault-injecting
wrapper around the real memory store for failures the store cannot produce on demand), and through a
real throttling proxy in front of moto_server."""

from __future__ import annotations

import random
import uuid
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from pathlib import Path
from typing import cast

import pytest

from lakefs_core.block import (
    BlockStore,
    DeleteResult,
    FailedKey,
    LocalBlockStore,
    MemoryBlockStore,
    S3BlockStore,
)
from lakefs_core.errors import BadInputError, CorruptDataError
from lakefs_core.service.deleter import BatchDeleter, BatchResult, FailedKeysLog, read_failed_keys
from lakefs_core.service.limiter import RateLimiter
from lakefs_core.testing.block import listing, put_all
from tests.block.conftest import BUCKET, create_bucket, s3_settings
from tests.support.moto import MotoServer
from tests.support.moto_seed import seed_objects
from tests.support.s3proxy import ThrottlingProxy


class FakeTime:
    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


class FlakyStore:
    """The real memory store, with failures injected into ``delete_batch``: ``fail[key]`` lists the
    codes of the next attempts at that key (``!`` prefix: final); ``throttle`` the Retry-After of the
    next whole-batch throttles."""

    def __init__(self, inner: MemoryBlockStore) -> None:
        self.inner = inner
        self.fail: dict[str, list[str]] = {}
        self.throttle: list[float | None] = []
        self.calls: list[list[str]] = []

    async def delete_batch(
        self, keys: Sequence[str], *, if_match: Mapping[str, str] | None = None
    ) -> DeleteResult:
        self.calls.append(list(keys))
        if self.throttle:
            ra = self.throttle.pop(0)
            return DeleteResult(
                failed=[FailedKey(k, "SlowDown", True) for k in keys], throttled=True, retry_after=ra
            )
        failed, rest = [], []
        for k in keys:
            codes = self.fail.get(k)
            if codes:
                code = codes.pop(0)
                failed.append(FailedKey(k, code.lstrip("!"), not code.startswith("!")))
            else:
                rest.append(k)
        result = await self.inner.delete_batch(rest)
        result.failed += failed
        return result


def mem() -> MemoryBlockStore:
    return MemoryBlockStore(f"del-{uuid.uuid4().hex[:10]}")


def deleter(store: object, t: FakeTime, **kw: object) -> BatchDeleter:
    lim = RateLimiter(clock=t.clock, sleep=t.sleep)
    return BatchDeleter(cast(BlockStore, store), lim, sleep=t.sleep, rng=random.Random(1), **kw)  # type: ignore[arg-type]


async def agen(keys: list[str]) -> AsyncIterator[str]:
    for k in keys:
        yield k


async def collect(d: BatchDeleter, keys: object) -> list[BatchResult]:
    return [r async for r in d.run(keys)]  # type: ignore[arg-type]


# -- batching and pacing ----------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["memory", "local"])
async def test_deletes_everything_in_batches(kind: str, local_root: Path) -> None:
    store: BlockStore = mem() if kind == "memory" else LocalBlockStore(local_root)
    keys = [f"data/s{i % 4}/o{i:05d}" for i in range(2500)]
    await put_all(store, [*keys, "data/keep"])
    t = FakeTime()
    d = deleter(store, t)
    results = await collect(d, agen(keys))
    assert [len(r.deleted) for r in results] == [1000, 1000, 500]
    assert all(r.failed == [] and r.requests == 1 for r in results)
    assert await listing(store) == ["data/keep"]
    assert (d.stats.keys, d.stats.deleted, d.stats.requests, d.stats.failed) == (2500, 2500, 3, 0)
    assert t.slept == [2.0, 2.0]  # 500 keys/s: paced, the first batch at once
    again = await collect(d, keys[:10])  # a plain iterable; deleting again is idempotent
    assert again[0].deleted == keys[:10]


async def test_refuses_metadata_keys_before_sending() -> None:
    store = mem()
    await put_all(store, ["data/a", "ns/_lakefs/range1", "_lakefs/dummy"])
    t = FakeTime()
    d = deleter(store, t, batch_size=2)
    with pytest.raises(BadInputError, match="_lakefs"):
        await collect(d, ["data/a", "ns/_lakefs/range1"])
    with pytest.raises(BadInputError):
        await d.delete_keys(["_lakefs/dummy"])
    assert await listing(store) == ["_lakefs/dummy", "data/a", "ns/_lakefs/range1"]
    with pytest.raises(BadInputError):
        await d.delete_keys([f"k{i}" for i in range(3)])  # over batch_size
    with pytest.raises(BadInputError):
        BatchDeleter(store, RateLimiter(), batch_size=1001)


# -- failures ---------------------------------------------------------------------------------------


async def test_transient_failures_are_retried_final_ones_are_not() -> None:
    inner = mem()
    keys = [f"data/x/{i}" for i in range(6)]
    await put_all(inner, keys)
    store = FlakyStore(inner)
    store.fail = {
        keys[0]: ["InternalError"],
        keys[1]: ["InternalError", "InternalError"],
        keys[2]: ["!AccessDenied"],
    }
    t = FakeTime()
    d = deleter(store, t)
    r = await d.delete_keys(keys)
    assert sorted(r.deleted) == sorted(k for k in keys if k != keys[2])
    assert r.failed == [FailedKey(keys[2], "AccessDenied", False)]
    assert store.calls == [keys, [keys[0], keys[1]], [keys[1]]]  # only what failed is sent again
    assert r.requests == 3 and d.stats.retried_keys == 3
    assert await listing(inner) == [keys[2]]


async def test_gives_up_after_max_attempts_and_the_log_keeps_the_keys() -> None:
    inner = mem()
    keys = ["data/y/a", "data/y/b\tc\nd\\e"]  # hostile names survive the log
    await put_all(inner, keys)
    store = FlakyStore(inner)
    store.fail = {k: ["InternalError"] * 10 for k in keys}
    t = FakeTime()
    d = deleter(store, t, max_attempts=3)
    r = await d.delete_keys(keys)
    assert r.deleted == [] and sorted(r.failed) == sorted(FailedKey(k, "InternalError", True) for k in keys)
    assert r.requests == 3 and len(t.slept) == 2  # backoff between the failed attempts, not after

    log_key = "ns/_lakefs/retention/gc/unified/run1/sweep/failed.text"
    log = await FailedKeysLog.open(inner, log_key)
    await log([(f.key, f.code) for f in r.failed])
    await log.flush()
    assert sorted(await read_failed_keys(inner, log_key)) == sorted((k, "InternalError") for k in keys)
    # a resumed sweep keeps the earlier failures and adds its own
    log2 = await FailedKeysLog.open(inner, log_key)
    await log2.add([FailedKey("data/y/z", "SlowDown", True)])
    await log2.flush()
    assert len(await read_failed_keys(inner, log_key)) == 3

    # the next run retries them (the store has recovered)
    store.fail.clear()
    retry = [k for k, _ in await read_failed_keys(inner, log_key)]
    r2 = await deleter(store, FakeTime()).delete_keys(retry)
    assert sorted(r2.deleted) == sorted(retry) and r2.failed == []
    assert await listing(inner) == [log_key]


async def test_throttles_halve_the_rate_and_retry_after_is_honoured() -> None:
    inner = mem()
    keys = [f"data/z/{i:04d}" for i in range(1000)]
    await put_all(inner, keys)
    store = FlakyStore(inner)
    store.throttle = [3.0, None]
    t = FakeTime()
    d = deleter(store, t)
    r = await d.delete_keys(keys)
    assert len(r.deleted) == 1000 and r.failed == []
    assert (r.requests, r.throttled) == (3, 2)
    assert d.limiter.rate == 125 and d.limiter.throttles == 2
    # 1st send at once; Retry-After 3 s (beyond the 2 s booked); then 1000 keys at 250/s = 4 s
    assert t.slept == [3.0, 4.0]


async def test_a_forgotten_key_is_never_assumed_deleted() -> None:
    class Forgetful(FlakyStore):
        async def delete_batch(
            self, keys: Sequence[str], *, if_match: Mapping[str, str] | None = None
        ) -> DeleteResult:
            self.calls.append(list(keys))
            result = await self.inner.delete_batch(keys[1:])
            result.deleted.append("not/asked")
            return result

    inner = mem()
    await put_all(inner, ["a", "b"])
    r = await deleter(Forgetful(inner), FakeTime(), max_attempts=2).delete_keys(["a", "b"])
    assert r.deleted == ["b"] and r.failed == [FailedKey("a", "NoOutcome", True)]


async def test_failed_keys_file_is_read_strictly() -> None:
    store = mem()
    key = "f/failed.text"
    assert await read_failed_keys(store, key) == []
    for bad in [b"k\tc", b"no-tab\n", b"\tcode\n", b"a\tb\tc\n", b"k\\x\tc\n", b"\xff\tc\n"]:
        await store.put(key, bad)
        with pytest.raises(CorruptDataError, match=r"failed\.text"):
            await read_failed_keys(store, key)


async def test_log_rewrites_are_amortised() -> None:
    store = mem()
    puts: list[int] = []
    real_put = store.put

    async def counting_put(key: str, body: bytes, **kw: object) -> object:
        puts.append(body.count(b"\n"))
        return await real_put(key, body, **kw)  # type: ignore[arg-type]

    store.put = counting_put  # type: ignore[method-assign]
    log = FailedKeysLog(store, "f/failed.text")
    for i in range(20):
        await log.add([(f"k{i}-{j}", "X") for j in range(500)])
    await log.flush()
    assert puts == [1000, 2000, 4000, 8000, 10000]  # each rewrite doubles: O(n) bytes in all
    assert len(await read_failed_keys(store, "f/failed.text")) == 10000


# -- S3 through a throttling proxy ------------------------------------------------------------------


async def _s3_run(
    moto: Callable[[str], MotoServer], n: int, **proxy_kw: float
) -> tuple[ThrottlingProxy, list[BatchResult], S3BlockStore, float]:
    server = moto("us-east-1")
    await create_bucket(server)
    keys = [f"ns/data/s{i % 7}/o{i:05d}" for i in range(n)]
    # Straight to moto, by plain PUTs: the deleter's requests are what goes through the proxy;
    # relaying the set-up's 2,500 PUTs through it and signing them cost more CPU than the deletes.
    await seed_objects(server, BUCKET, [*keys, "ns/_lakefs/keep"])
    proxy = await ThrottlingProxy(server.endpoint, seed=7, **proxy_kw).start()  # type: ignore[arg-type]
    store = await S3BlockStore(BUCKET, settings=s3_settings(proxy.endpoint, max_pool_connections=32)).open()
    proxy.reset_counts()  # what opening the store sent: the deleter's requests are counted
    d = BatchDeleter(store, RateLimiter(start=100_000, cap=1_000_000), backoff_initial=0.01)
    results = await collect(d, agen(keys))
    return proxy, results, store, d.limiter.rate


async def test_s3_sweep_through_a_throttling_proxy(moto: Callable[[str], MotoServer]) -> None:
    proxy, results, store, rate = await _s3_run(moto, 2500, throttle_share=0.4, retry_after=0.05)
    try:
        deleted = sum(len(r.deleted) for r in results)
        assert deleted == 2500 and all(r.failed == [] for r in results)
        assert await listing(store) == ["ns/_lakefs/keep"]
        assert proxy.throttled > 0 and sum(r.throttled for r in results) == proxy.throttled
        assert proxy.requests["DeleteObjects"] == 3 + proxy.throttled  # each throttle costs one request
        assert rate < 100_000  # the limiter backed off
        print(f"requests per deleted key under 40% SlowDown: {proxy.requests['DeleteObjects'] / deleted:.5f}")
    finally:
        await store.close()
        await proxy.close()


async def test_s3_requests_per_deleted_key(moto: Callable[[str], MotoServer]) -> None:
    proxy, results, store, _ = await _s3_run(moto, 2500)
    try:
        deleted = sum(len(r.deleted) for r in results)
        assert deleted == 2500
        assert proxy.requests == {"DeleteObjects": 3}  # nothing else: no listing, no HEAD
        assert proxy.requests["DeleteObjects"] / deleted <= 1 / 900 + 1 / 2500  # one partial batch
        assert proxy.delete_keys_sent == 2500
    finally:
        await store.close()
        await proxy.close()
