"""Fixtures for repository-service tests: a Graveler over the memory KV and memory block stores."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from lakefs_core.kv.memory import MemoryKVStore
from lakefs_core.repos.graveler import Graveler
from lakefs_core.repos.objects import Objects
from lakefs_core.repos.stores import StoreRegistry
from tests.repos.support import mem_namespace, new_graveler, unique


@pytest.fixture
async def kv() -> AsyncIterator[MemoryKVStore]:
    store = MemoryKVStore()
    try:
        yield store
    finally:
        await store.close()


@pytest.fixture
async def stores() -> AsyncIterator[StoreRegistry]:
    registry = StoreRegistry()
    try:
        yield registry
    finally:
        await registry.close()


@pytest.fixture
def g(kv: MemoryKVStore, stores: StoreRegistry) -> Graveler:
    return new_graveler(kv, stores)


@pytest.fixture
async def repo(g: Graveler) -> str:
    """A fresh repository (default branch ``main``) on its own memory namespace."""
    repo_id = unique()
    await g.create_repository(repo_id, mem_namespace())
    return repo_id


@pytest.fixture
def objects(g: Graveler) -> Objects:
    return Objects(g)
