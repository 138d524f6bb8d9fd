"""Presence facts never outlive what they describe.

- Facts about a ``mem://`` store (whose objects die with the process) are not persisted: after a
  restart they would report present objects that exist nowhere.
- Facts are keyed by the destination repository's incarnation (its ``instance_uid``): when the
  destination repository is deleted and its namespace emptied and created again from scratch, the
  engine must not promote on the strength of what it saw in the old one, even across a restart.
"""

from __future__ import annotations

import shutil
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from lakefs_core.block import copy_object
from lakefs_core.block.base import ObjectInfo
from lakefs_core.kv.memory import MemoryKVStore
from lakefs_core.namespace import StorageNamespace
from lakefs_core.repos.graveler import Graveler
from lakefs_core.repos.stores import StoreRegistry
from lakefs_mirror.db import MirrorsDB
from lakefs_mirror.presence import PresenceCache, namespace_key
from tests.mirror.test_engine import World, add_mirror, mirror_head, write_commit

DURABLE = "s3://dest-bucket/repo"
MEMORY = "mem://dest/repo"


async def test_memory_store_facts_are_not_persisted(tmp_path: Path) -> None:
    path = tmp_path / "presence.sqlite3"
    cache = await PresenceCache.open(path)
    for ns in (MEMORY, namespace_key(MEMORY, "a" * 32), DURABLE):
        cache.mark_present(ns, "data/s/a")
        cache.mark_validated(ns, "b" * 64)
    await cache.close()

    again = await PresenceCache.open(path)
    assert again.stats.loaded_objects == 1 and again.stats.loaded_tables == 1
    assert again.is_present(DURABLE, "data/s/a") and again.is_validated(DURABLE, "b" * 64)
    for ns in (MEMORY, namespace_key(MEMORY, "a" * 32)):
        assert not again.is_present(ns, "data/s/a")
        assert not again.is_validated(ns, "b" * 64)
    await again.close()


def test_incarnations_are_separate_and_forgotten_together() -> None:
    cache = PresenceCache()
    old, new = namespace_key(DURABLE, "1" * 32), namespace_key(DURABLE, "2" * 32)
    cache.mark_present(old, "data/s/a")
    assert not cache.is_present(new, "data/s/a")
    cache.mark_present(new, "data/s/b")
    assert cache.forget_namespace(DURABLE) == 2
    assert cache.present_count == 0


async def replicate(w: World) -> None:
    """Copy every key of the source namespace to the (local, prefix-less) destination namespace."""
    src = await w.src.stores.namespace_store(w.src_ns)
    dst = await w.dst.stores.namespace_store(w.dst_ns)
    async for item in src.list(w.src_ns.prefix + "/"):
        if isinstance(item, ObjectInfo):
            await copy_object(src, item.key, dst, w.dst_ns.key(item.key[len(w.src_ns.prefix) + 1 :]))


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    src = Graveler(MemoryKVStore(), StoreRegistry())
    dst = Graveler(MemoryKVStore(), StoreRegistry())
    db = await MirrorsDB.open(f"sqlite+aiosqlite:///{tmp_path / 'mirrors.db'}")
    presence = await PresenceCache.open(tmp_path / "presence.sqlite3", negative_cooldown=0)
    w = World(
        src,
        dst,
        db,
        presence,
        StorageNamespace.parse(f"mem://src{uuid.uuid4().hex[:8]}/repo"),
        StorageNamespace.parse(f"local://{tmp_path}/dest/mirror"),  # durable: facts are persisted
        tmp_path,
    )
    await src.create_repository("origin", w.src_ns.uri)
    try:
        yield w
    finally:
        await w.presence.close()
        await db.close()
        await src.stores.close()
        await dst.stores.close()


async def test_recreated_destination_does_not_inherit_presence(world: World) -> None:
    w = world
    head = await write_commit(w.src, 12, "a")
    await add_mirror(w)
    await replicate(w)
    assert (await w.engine().step()).promotions == 1
    assert await mirror_head(w) == head

    # The destination repository is deleted and its namespace emptied; the mirror record stays.
    await w.dst.delete_repository("mirror")
    await w.dst.stores.close()
    shutil.rmtree(w.tmp / "dest" / "mirror")
    w.dst.stores = StoreRegistry()
    # Restart: the persisted presence facts are read back.
    await w.presence.close()
    w.presence = await PresenceCache.open(w.tmp / "presence.sqlite3", negative_cooldown=0)
    assert w.presence.stats.loaded_objects > 0

    report = await w.engine().step()  # re-creates the mirror repository from scratch
    assert report.promotions == 0, report
    assert await mirror_head(w) != head  # nothing of commit ``head`` is in the new namespace
    await replicate(w)
    assert (await w.engine().step()).promotions == 1
    assert await mirror_head(w) == head
    dst_store = await w.dst.stores.namespace_store(w.dst_ns)
    assert await dst_store.exists(w.dst_ns.dummy_key())
