"""The sweep's safety re-checks, each shown to matter on its own (mutation audit M1*).

On the repository of :mod:`tests.gc.mark_support` (real core, memory KV, local namespace):

- the re-verification rescans STAGING: an address the mark condemned and that is staged afterwards
  is rescued, not deleted;
- it re-reads the PIN SOURCE, not only the pins the mark recorded: a commit pinned after the mark
  keeps its objects;
- a read-only repository (a mirror) is refused before anything is deleted.

And the :class:`~lakefs_core.service.deleter.BatchDeleter` on a fault-injecting wrapper around the real memory
store (fake clocks, no real waiting):

- a store that throttles forever is given up on after ``max_throttled`` throttles, with every key
  reported failed (a wrapper that stops answering after many calls turns a hang into a failure);
- the backoff between failed attempts is the deleter's own sleep (exponential, full jitter), told
  apart from the limiter's pacing by giving each its own recorder.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Mapping, Sequence
from typing import cast

import pytest

from lakefs_core.block import BlockStore, DeleteResult, FailedKey, MemoryBlockStore
from lakefs_core.compute.executor import LiteExecutor
from lakefs_core.errors import ReadOnlyError
from lakefs_core.format.records import ValueRecord, make_entry
from lakefs_core.repos.objects import Objects
from lakefs_core.service.deleter import BatchDeleter, store_deleter
from lakefs_core.service.limiter import RateLimiter
from lakefs_core.testing.block import listing, put_all
from lakefs_gc.mark.mark import run_mark
from lakefs_gc.pins import PinSource, StaticPins
from lakefs_gc.runs.layout import RunLayout
from lakefs_gc.sweep.sweep import SweepOptions, SweepReport, run_sweep
from tests.gc.mark_support import T0, Env, stored_objects
from tests.gc.test_mark import deleted_set, options

# -- the sweep's re-verification and refusals --------------------------------------------------------


async def mark(env: Env, *, pins: PinSource | None = None, **kw: object) -> str:
    with LiteExecutor(workers=2) as executor:
        result = await run_mark(env.g, env.built.repo, executor, options=options(**kw), pins=pins)
    return result.run_id


async def sweep(env: Env, mark_id: str, *, pins: PinSource | None = None) -> SweepReport:
    store = await env.g.namespace_store(env.built.ns)
    return await run_sweep(
        env.g, env.built.repo, mark_id, deleter=store_deleter(store), options=SweepOptions(), pins=pins
    )


async def test_an_address_staged_after_the_mark_is_rescued(env: Env) -> None:
    b = env.built
    store = await env.g.namespace_store(b.ns)
    mark_id = await mark(env)
    marked = await deleted_set(env.g, b, mark_id)
    revived = b.addr["g1"]  # only the deleted branch "gone" had it: garbage at mark time
    assert revived in marked
    # Between mark and sweep, a writer stages an entry at that very address (no commit).
    identity, data = make_entry(revived, len(b"body of g1"), "0" * 32, last_modified=T0)
    await env.g.set_entry(b.repo, "main", ValueRecord(b"staged-again", identity, data))
    report = await sweep(env, mark_id)
    assert report.rescued == 1 and report.deleted == len(marked) - 1 and report.failed == 0
    assert await store.exists(b.ns.key(revived))
    assert await Objects(env.g).read_all(b.repo, "main", "staged-again") == b"body of g1"
    assert not (marked - {revived}) & set(await stored_objects(store, b.ns))  # the rest went


async def test_a_commit_pinned_after_the_mark_is_rescued(env: Env) -> None:
    b = env.built
    store = await env.g.namespace_store(b.ns)
    # The mark saw no pins (and ignored tags): c1's a1 and a2 are garbage to it.
    mark_id = await mark(env, pins=StaticPins(), tags_policy="ignore")
    marked = await deleted_set(env.g, b, mark_id)
    c1_only = {b.addr["a1"], b.addr["a2"]}
    assert c1_only <= marked
    # Then a mirror pins c1: the sweep must ask the pin source again, not trust run.json's (empty) pins.
    report = await sweep(env, mark_id, pins=StaticPins([b.commits["c1"]]))
    assert report.rescued == 2 and report.deleted == len(marked) - 2
    left = set(await stored_objects(store, b.ns))
    assert c1_only <= left
    objects = Objects(env.g)
    for path in ("a1", "a2", "a3"):  # everything of the pinned commit still reads
        assert await objects.read_all(b.repo, b.commits["c1"], path)


async def test_a_read_only_repository_is_never_swept(env: Env) -> None:
    b = env.built
    store = await env.g.namespace_store(b.ns)
    mark_id = await mark(env)
    marked = await deleted_set(env.g, b, mark_id)
    assert marked
    before = await stored_objects(store, b.ns)
    await env.g.set_read_only(b.repo, True)  # it became a mirror after the mark
    with pytest.raises(ReadOnlyError):
        await sweep(env, mark_id)
    with pytest.raises(ReadOnlyError):
        await run_sweep(env.g, b.repo, mark_id, deleter=None, options=SweepOptions(dry_run=True))
    assert await stored_objects(store, b.ns) == before  # nothing deleted
    layout = RunLayout(b.ns, mark_id)
    assert not await store.exists(layout.sweep_report) and not await store.exists(layout.checkpoint)
    # The refusal was the read-only flag's: writable again, the same mark is swept.
    await env.g.set_read_only(b.repo, False)
    assert (await sweep(env, mark_id)).deleted == len(marked)


# -- the deleter's bounds ------------------------------------------------------------------------------


class Recorder:
    """A fake sleep recording its own waits; it moves a fake clock (its own, or ``time``'s when
    several recorders share one clock). Nothing really waits."""

    def __init__(self, time: Recorder | None = None) -> None:
        self._time = time or self
        self.now = 0.0
        self.slept: list[float] = []

    def clock(self) -> float:
        return self._time.now

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self._time.now += seconds


class FaultyStore:
    """The real memory store behind ``delete_batch`` faults: ``throttle_forever`` answers every request
    503 SlowDown; ``fail_forever`` fails every key with a transient InternalError. More than
    ``give_up_after`` requests raise: a deleter that never stops fails the test instead of hanging it
    (the fake sleeps never yield to the event loop, so no timeout could interrupt it)."""

    def __init__(self, inner: MemoryBlockStore, *, give_up_after: int = 200) -> None:
        self.inner = inner
        self.throttle_forever = False
        self.fail_forever = False
        self.give_up_after = give_up_after
        self.calls: list[list[str]] = []

    async def delete_batch(
        self, keys: Sequence[str], *, if_match: Mapping[str, str] | None = None
    ) -> DeleteResult:
        self.calls.append(list(keys))
        if len(self.calls) > self.give_up_after:
            raise AssertionError(f"the deleter sent {len(self.calls)} requests: it never gives up")
        if self.throttle_forever:
            return DeleteResult(failed=[FailedKey(k, "SlowDown", True) for k in keys], throttled=True)
        if self.fail_forever:
            return DeleteResult(failed=[FailedKey(k, "InternalError", True) for k in keys])
        return await self.inner.delete_batch(keys)


def mem() -> MemoryBlockStore:
    return MemoryBlockStore(f"rechecks-{uuid.uuid4().hex[:10]}")


@pytest.mark.timeout(30)
async def test_a_store_that_throttles_forever_is_given_up_on() -> None:
    inner = mem()
    keys = [f"data/t/{i}" for i in range(5)]
    await put_all(inner, keys)
    store = FaultyStore(inner)
    store.throttle_forever = True
    t = Recorder()
    d = BatchDeleter(
        cast(BlockStore, store),
        RateLimiter(clock=t.clock, sleep=t.sleep),
        max_throttled=3,
        sleep=t.sleep,
        rng=random.Random(1),
    )
    r = await d.delete_keys(keys)
    assert (r.requests, r.throttled) == (4, 4)  # the first request and max_throttled more
    assert r.deleted == [] and sorted(r.failed) == sorted(FailedKey(k, "SlowDown", True) for k in keys)
    assert len(store.calls) == 4 and await listing(inner) == sorted(keys)  # nothing lost, nothing gone
    assert (d.stats.keys, d.stats.failed, d.stats.throttled) == (5, 5, 4)


async def test_failed_attempts_back_off_exponentially_with_jitter() -> None:
    inner = mem()
    keys = ["data/b/x", "data/b/y"]
    await put_all(inner, keys)
    store = FaultyStore(inner)
    store.fail_forever = True
    backoff = Recorder()  # who slept: the deleter's backoff or the limiter's pacing (one clock)
    pacing = Recorder(backoff)
    limiter = RateLimiter(start=1e9, cap=1e9, clock=backoff.clock, sleep=pacing.sleep)
    d = BatchDeleter(
        cast(BlockStore, store),
        limiter,
        max_attempts=4,
        backoff_initial=0.5,
        backoff_max=1.5,
        sleep=backoff.sleep,
        rng=random.Random(7),
    )
    r = await d.delete_keys(keys)
    assert r.requests == 4 and sorted(f.key for f in r.failed) == keys
    # Full jitter over 0.5, 1, then capped at 1.5 s: one draw after each failed attempt but the last.
    rng = random.Random(7)
    assert backoff.slept == [rng.uniform(0, 0.5), rng.uniform(0, 1.0), rng.uniform(0, 1.5)]
    assert all(s > 0 for s in backoff.slept)
    assert pacing.slept == []  # an unpaced limiter: every wait above is the backoff's
