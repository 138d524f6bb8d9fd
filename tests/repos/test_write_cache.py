"""The writers' cache of a branch's live staging token (staging_writes._live_token) and its age limit.

A token seen live less than ``min(write_cache_seconds, cleanup_grace_seconds / 2)`` ago is written
to without reading the branch first. The re-read after the write still catches a rotation by a
commit, so what the half-grace bound protects is the token itself: a sealed token is dropped
``cleanup_grace_seconds`` after its commit, and a write into a dropped token lands in a staging
partition that nothing will ever read or clean (a leak). These tests set ``write_cache_seconds``
above half the grace, so that only the half-grace term can send the writer back to the branch.

The writer's cache runs on ``time.monotonic`` as read in :mod:`lakefs_core.repos.staging_writes`:
the module's ``time`` is replaced with a settable monotonic clock, advanced in step with the
Graveler's wall clock (which stamps the cleanup marks the cleaner judges). Commits come from a
second Graveler on the same KV, as from another process. KV operations are observed through
:class:`~tests.repos.support.HookedKV`.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import SimpleNamespace

import pytest

from lakefs_core.kv.memory import MemoryKVStore
from lakefs_core.refs import kvkeys
from lakefs_core.repos import staging_writes
from lakefs_core.repos.cleanup import TokenCleaner
from lakefs_core.repos.graveler import Graveler
from lakefs_core.repos.stores import StoreRegistry
from tests.repos.support import Clock, HookedKV, collect, fast_settings, mem_namespace, record, unique

GRACE = 10.0
CACHE = 60.0  # well above GRACE / 2: the half-grace term alone bounds the cached token's age


class Monotonic:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Rig:
    """A writer Graveler (over a :class:`HookedKV`) and a committer Graveler on the same KV, with
    their clocks (wall and monotonic) advanced together."""

    def __init__(self, kv: MemoryKVStore, stores: StoreRegistry, monotonic: Monotonic) -> None:
        self.clock = Clock()
        self.monotonic = monotonic
        self.hooked = HookedKV(kv)
        settings = fast_settings(cleanup_grace_seconds=GRACE, write_cache_seconds=CACHE)
        self.writer = Graveler(self.hooked, stores, settings, clock=self.clock)
        self.committer = Graveler(kv, stores, settings, clock=self.clock)
        self.cleaner = TokenCleaner(
            self.committer.refs, self.committer.staging, grace_seconds=GRACE, clock=self.clock
        )
        self.repo = unique()

    def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)
        self.monotonic.now += seconds

    async def token(self) -> str:
        return (await self.committer.branch(self.repo, "main")).staging_token

    async def write(self, how: str, keys: Sequence[str]) -> None:
        if how == "one":
            for key in keys:
                await self.writer.set_entry(self.repo, "main", record(key))
        else:
            await self.writer.set_entries(self.repo, "main", [record(key) for key in keys])


@pytest.fixture
def monotonic(monkeypatch: pytest.MonkeyPatch) -> Monotonic:
    clock = Monotonic()
    monkeypatch.setattr(staging_writes, "time", SimpleNamespace(monotonic=clock))
    return clock


@pytest.fixture
async def rig(kv: MemoryKVStore, stores: StoreRegistry, monotonic: Monotonic) -> Rig:
    r = Rig(kv, stores, monotonic)
    await r.committer.create_repository(r.repo, mem_namespace())
    return r


@pytest.mark.parametrize("how", ["one", "batch"])
async def test_a_write_after_the_sealed_token_was_dropped_does_not_leak_into_it(rig: Rig, how: str) -> None:
    r = rig
    await r.write(how, ["a"])  # the writer now caches the live token
    old = await r.token()
    await r.committer.commit(r.repo, "main", committer="t", message="seal")  # another process
    r.advance(GRACE + 1)  # past the grace: the sealed token is dropped
    assert await r.cleaner.step() == 1
    assert await r.committer.staging.is_empty(old)

    r.hooked.ops.clear()
    await r.write(how, ["b"])
    leaked = [op for op in r.hooked.ops if op[1] == kvkeys.staging_partition(old)]
    assert leaked == [], "a write went into a token already dropped"
    assert await r.committer.staging.is_empty(old)
    assert [p async for p in r.committer.refs.pending_cleanup()] == []  # so nothing would clean it
    new = await r.token()
    assert [x.key for x in await collect(r.committer.staging.scan(new))] == [b"b"]
    assert [x.key async for x in r.committer.list_entries(r.repo, "main")] == [b"a", b"b"]


@pytest.mark.parametrize("how", ["one", "batch"])
async def test_a_cached_token_older_than_half_the_grace_is_read_again_before_writing(
    rig: Rig, how: str
) -> None:
    """Past half the grace (not yet past the whole of it, nor past write_cache_seconds) the writer
    reads the branch before its first staging write, so it never writes to the sealed token."""
    r = rig
    await r.write(how, ["a"])
    old = await r.token()
    await r.committer.commit(r.repo, "main", committer="t", message="seal")
    new = await r.token()
    assert new != old

    r.advance(GRACE / 2 + 1)
    r.hooked.ops.clear()
    await r.write(how, ["b"])
    ops = r.hooked.ops
    staging = {kvkeys.staging_partition(old), kvkeys.staging_partition(new)}
    first_write = next(i for i, op in enumerate(ops) if op[1] in staging)
    branch_reads = [i for i, op in enumerate(ops) if op[0] == "get" and op[2] == kvkeys.branch_key("main")]
    assert branch_reads and branch_reads[0] < first_write, ops
    assert all(op[1] != kvkeys.staging_partition(old) for op in r.hooked.ops), r.hooked.ops
    assert [x.key for x in await collect(r.committer.staging.scan(new))] == [b"b"]


async def test_a_cached_token_younger_than_half_the_grace_is_written_without_a_read(rig: Rig) -> None:
    """The cache itself: within the limit, one staging write and one branch re-read, in that order."""
    r = rig
    await r.write("one", ["a"])
    token = await r.token()
    r.advance(GRACE / 2 - 1)
    r.hooked.ops.clear()
    await r.write("one", ["b"])
    assert [op[0] for op in r.hooked.ops] == ["set", "get"], r.hooked.ops
    assert r.hooked.ops[0][1] == kvkeys.staging_partition(token)
