"""How the KVStore contract suite (:mod:`lakefs_core.testing.kv`) reaches the store under test: the
:class:`KVDriver` a driver's test module provides (fixture ``kv_driver``), the ``kv`` fixture
opening one handle on it per test, and the helpers the suite's tests share."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

import pytest

from lakefs_core.kv import KVEntry, KVStore

P = b"partition"


@dataclass(frozen=True)
class KVDriver:
    """How the suite reaches the store under test."""

    open: Callable[[], Awaitable[KVStore]]  # a new handle on the one fresh store of this test
    persistent: bool = True  # a handle opened after another closed sees its data (memory: no)


@pytest.fixture
async def kv(kv_driver: KVDriver) -> AsyncIterator[KVStore]:
    store = await kv_driver.open()
    try:
        yield store
    finally:
        await store.close()


async def collect(it: AsyncIterator[KVEntry]) -> list[KVEntry]:
    return [entry async for entry in it]


async def keys_of(
    kv: KVStore, partition: bytes = P, start: bytes = b"", page_size: int = 1000, end: bytes | None = None
) -> list[bytes]:
    return [e.key for e in await collect(kv.scan(partition, start, end=end, page_size=page_size))]
