"""KV lease renew and release are compare-and-swaps (lakefs_core/service/lease.py, ``KVLease``).

Two daemons hold their own KV connection (memory: one shared store; SQLite: two connections to one
file). A KV wrapper (``HookedKV``) on daemon 1's connection lets daemon 2 take the expired lease
over right after daemon 1 read the lease record: daemon 1's renew or release must then lose its
compare-and-swap, report False, and leave daemon 2 the holder.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from lakefs_core.kv import KVStore, open_kv
from lakefs_core.service.lease import KVLease, kv_lease
from tests.repos.support import HookedKV
from tests.support.kv import kv_url_for

TTL = 10.0
NAME = "eu-west"


@pytest.fixture(params=["memory", "sqlite"])
async def daemons(request: pytest.FixtureRequest, sqlite_url: str) -> AsyncIterator[tuple[HookedKV, KVStore]]:
    """``(hooked connection of daemon 1, connection of daemon 2)`` on one store."""
    url = kv_url_for(str(request.param), request, sqlite_url)
    first = await open_kv(url)
    second = first if url.startswith("memory://") else await open_kv(url)
    try:
        yield HookedKV(first), second
    finally:
        for store in {id(s): s for s in (first, second)}.values():
            await store.close()


def take_over_after_next_read(kv: HookedKV, d2: KVLease, at: float) -> list[bool]:
    """After daemon 1's next ``get`` returns, daemon 2 tries to acquire at ``at``; returns its results."""
    took: list[bool] = []

    async def hook(op: str, partition: bytes, key: bytes) -> None:
        if op == "get" and not took:
            kv.after.remove(hook)
            took.append(await d2.try_acquire(at))

    kv.after.append(hook)
    return took


async def test_renew_loses_to_a_takeover_between_its_read_and_its_write(
    daemons: tuple[HookedKV, KVStore],
) -> None:
    kv1, kv2 = daemons
    d1, d2 = kv_lease(kv1, NAME, "d1", TTL), kv_lease(kv2, NAME, "d2", TTL)
    assert await d1.try_acquire(100.0)
    # At 109.9 daemon 1 still holds the lease (expires at 110); daemon 2 acts at 110.0 (expired).
    took = take_over_after_next_read(kv1, d2, 110.0)
    assert await d1.renew(109.9) is False
    assert took == [True]
    state = await d2.current()
    assert state is not None and state.holder == "d2"
    assert state.expires_at.timestamp() == pytest.approx(110.0 + TTL)
    assert await d2.renew(111.0)


async def test_release_does_not_erase_a_new_holder(daemons: tuple[HookedKV, KVStore]) -> None:
    kv1, kv2 = daemons
    d1, d2 = kv_lease(kv1, NAME, "d1", TTL), kv_lease(kv2, NAME, "d2", TTL)
    assert await d1.try_acquire(100.0)
    took = take_over_after_next_read(kv1, d2, 110.0)
    assert await d1.release() is False
    assert took == [True]
    state = await d1.current()
    assert state is not None and state.holder == "d2"
    assert not await d1.try_acquire(111.0)  # daemon 2's lease is live, not released
