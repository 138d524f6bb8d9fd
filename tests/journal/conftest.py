"""Fixtures for the hard-delete journal tests: a real Graveler (memory or SQLite KV) over a local
namespace, with a settable clock and the journal on for new repositories."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from lakefs_core.kv import open_kv
from lakefs_core.kv.base import KVStore
from lakefs_core.repos.graveler import Graveler
from lakefs_core.repos.objects import Objects
from lakefs_core.repos.stores import StoreRegistry
from tests.repos.support import Clock, HookedKV, fast_settings, unique


@dataclass
class World:
    g: Graveler
    objects: Objects
    repo: str
    clock: Clock
    root: Path  # the namespace's directory
    kv: HookedKV

    def object_path(self, address: str) -> Path:
        return self.root / address

    def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)


@pytest.fixture(params=["memory", "sqlite"])
async def kv(request: pytest.FixtureRequest, sqlite_url: str) -> AsyncIterator[KVStore]:
    store = await open_kv("memory://" if request.param == "memory" else sqlite_url)
    try:
        yield store
    finally:
        await store.close()


@pytest.fixture
async def world(kv: KVStore, local_root: Path) -> AsyncIterator[World]:
    stores = StoreRegistry()
    hooked = HookedKV(kv)
    clock = Clock()
    g = Graveler(hooked, stores, fast_settings(hard_delete_journal=True), clock=clock)
    repo = unique()
    root = local_root / repo
    await g.create_repository(repo, f"local://{root}")
    try:
        yield World(g, Objects(g), repo, clock, root, hooked)
    finally:
        await stores.close()
