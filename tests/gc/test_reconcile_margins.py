"""The hard-delete journal's safety margins and the reconciler's re-checks, on real Gravelers (memory
and SQLite KV, local namespace, injected clocks): each test is a case where dropping one margin or
check would delete an object that is still staged, committed or claimed.

- Clock skew in :meth:`Journal.decide`: a commit whose writer's clock is behind the uploader's records
  its consumption before the intent's ``t``; an intent whose writer's clock is ahead lands just after
  the journal was turned on, although a commit of the journal-off window (no record) holds it.
- A staged value whose address cannot be classified (``relative_of`` raises) still protects the object.
- Pruning consumption records keeps twice the clock-skew margin before the oldest intent, so a record
  written by a lagging committer survives until that intent is decided.
- Purging a deleted repository's ``data/``: a key newer than the last unclaimed check is kept (and so
  is the ``deleted-repos`` record), and a repository claiming the namespace while the purge lists it
  stops the purge before its batch delete.
"""

from __future__ import annotations

import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from lakefs_core.block.base import BlockStore, KeyInfo
from lakefs_core.errors import BadInputError
from lakefs_core.format.records import ADDRESS_FULL, ValueRecord, make_entry
from lakefs_core.kv.base import KVStore
from lakefs_core.repos.graveler import Graveler, StorageNamespace
from lakefs_core.repos.journal import DEFAULT_CLOCK_SKEW_SECONDS, DEFAULT_GRACE_SECONDS, Intent
from lakefs_core.repos.objects import Objects
from lakefs_core.repos.stores import StoreRegistry
from lakefs_core.service.deleter import KeyDeleter, store_deleter
from lakefs_gc.reconcile import (
    reconcile_deleted_repositories,
)
from tests.gc import test_reconcile
from tests.gc.test_reconcile import World as ReconcileWorld
from tests.gc.test_reconcile import make_world
from tests.repos.support import Clock, fast_settings, unique

GRACE = DEFAULT_GRACE_SECONDS
SKEW = DEFAULT_CLOCK_SKEW_SECONDS
kv = test_reconcile.kv  # the same KV fixture (memory, SQLite)


class OffsetClock:
    """Another process's clock: the test's clock shifted by ``offset`` seconds (negative: behind)."""

    def __init__(self, base: Clock, offset: float) -> None:
        self.base, self.offset = base, offset

    def __call__(self) -> datetime:
        return self.base() + timedelta(seconds=self.offset)


@dataclass
class World(ReconcileWorld):
    """test_reconcile's world, plus writers with skewed clocks and the journal's view."""

    @property
    def ns(self) -> StorageNamespace:
        return StorageNamespace(f"local://{self.root}")

    def writer(self, offset: float, **settings: object) -> Graveler:
        """Another process on the same KV and stores whose clock is ``offset`` seconds off ours."""
        return Graveler(
            self.kv.inner,
            self.g.stores,
            fast_settings(hard_delete_journal=True, **settings),
            clock=OffsetClock(self.clock, offset),
        )

    async def deleter_for(self, ns: StorageNamespace) -> KeyDeleter:
        return store_deleter(await self.g.namespace_store(ns))

    async def commit_by(self, g: Graveler | None = None) -> str:
        return (await (g or self.g).commit(self.repo, "main", committer="t", message="m")).id

    async def intent(self, address: str) -> Intent:
        found = await (await self.g.journal(self.repo)).intent(address)
        assert found is not None, address
        return found

    async def fate(self, address: str) -> str:
        journal = await self.g.journal(self.repo)
        return await journal.decide(await self.intent(address), now=self.clock())

    async def consumed_times(self) -> list[float]:
        journal = await self.g.journal(self.repo)
        return [c.t async for c in journal.consumed_since("main", 0.0)]

    async def data_keys(self) -> list[str]:
        store = await self.g.namespace_store(self.ns)
        return [info.key async for info in store.list_keys(self.ns.data_prefix())]

    async def deleted_records(self) -> list[str]:
        return [r.repo async for r in self.g.deleted_repositories()]


@pytest.fixture
async def world(kv: KVStore, local_root: Path) -> AsyncIterator[World]:
    base = await make_world(kv, local_root)
    try:
        yield World(base.g, base.objects, base.repo, base.clock, base.root, base.kv)
    finally:
        await base.g.stores.close()


async def kept_as_committed(w: World, address: str) -> None:
    """The journal decides "committed" for the upload of ``a`` at ``address``; a reconcile pass
    counts it so and deletes nothing; the object is still there and reads back."""
    assert await w.fate(address) == "committed"
    report = await w.reconcile()
    assert (report.committed, report.deleted, report.rescued) == (1, 0, 0)
    assert w.exists(address)
    assert await w.objects.read_all(w.repo, "main", "a") == b"x"


# -- clock skew in the decision ------------------------------------------------------------------------


async def test_commit_by_a_writer_whose_clock_is_behind_still_holds_the_object(world: World) -> None:
    w = world
    committer = w.writer(-120.0)  # well within the clock-skew margin
    address = await w.upload("a")
    t = (await w.intent(address)).t
    await w.commit_by(committer)
    assert await w.consumed_times() == [t - 120.0]  # recorded "before" the upload's intent
    w.advance(GRACE)
    await kept_as_committed(w, address)


async def test_intent_just_after_the_journal_switch_is_not_decided_by_the_journal(world: World) -> None:
    w = world
    # A writer whose clock is 60 s ahead read the journal flag (on) and keeps it cached.
    uploader = w.writer(60.0, write_cache_seconds=3600.0)
    assert await uploader.journal_enabled(await uploader.repository(w.repo))
    await w.g.set_hard_delete_journal(w.repo, False)
    address = (await Objects(uploader).upload(w.repo, "main", "a", b"x")).physical_address
    await w.commit()  # journal off: this commit records no consumption
    assert await w.consumed_times() == []
    w.advance(50)
    await w.g.set_hard_delete_journal(w.repo, True)
    journal = await w.g.journal(w.repo)
    since = (await journal.settings()).since
    assert (await w.intent(address)).t == since + 10  # after the switch, within the skew margin
    w.advance(GRACE + 60)
    await kept_as_committed(w, address)  # not provable by the journal: retention GC's


# -- an address that cannot be classified --------------------------------------------------------------


async def test_staged_value_with_an_unclassifiable_address_keeps_the_object(world: World) -> None:
    w = world
    address = await w.upload("a")
    # The key is staged again with a FULL address inside the namespace that is not a normal path:
    # nobody can tell whether it names the uploaded object, so the object must stay.
    odd = f"local://{w.root}/{address.replace('/', '//', 1)}"
    with pytest.raises(BadInputError):
        w.ns.relative_of(odd, ADDRESS_FULL)
    identity, data = make_entry(odd, 1, "e" * 32, last_modified=w.clock(), address_type=ADDRESS_FULL)
    await w.g.set_entry(w.repo, "main", ValueRecord(b"a", identity, data))
    w.advance(GRACE)
    assert await w.fate(address) == "staged"
    report = await w.reconcile()
    assert (report.staged, report.deleted, report.deletable) == (1, 0, 0)
    assert w.exists(address)


# -- pruning consumption records -------------------------------------------------------------------------


async def test_prune_keeps_a_lagging_committers_record_an_undecided_intent_needs(world: World) -> None:
    w = world
    committer = w.writer(-200.0)
    address = await w.upload("a")
    t = (await w.intent(address)).t
    await w.commit_by(committer)
    assert await w.consumed_times() == [t - 200.0]
    report = await w.reconcile()  # inside the grace: a pass that only prunes
    assert (report.waiting, report.candidates, report.consumed_pruned) == (1, 0, 0)
    assert await w.consumed_times() == [t - 200.0]
    w.advance(GRACE)
    report = await w.reconcile()
    assert (report.committed, report.deleted) == (1, 0)
    assert w.exists(address)
    assert await w.objects.read_all(w.repo, "main", "a") == b"x"


# -- purging a deleted repository ------------------------------------------------------------------------


async def test_purge_keeps_a_key_newer_than_its_last_check(world: World) -> None:
    w = world
    old = [await w.upload(f"k{i}") for i in range(3)]
    await w.commit()
    late = await w.upload("late")
    await w.g.delete_repository(w.repo)
    future = time.time() + 3600  # written after any check this purge makes
    os.utime(w.root / late, (future, future))
    w.advance(GRACE)
    [report] = await reconcile_deleted_repositories(w.g, deleter_for=w.deleter_for)
    assert (report.deleted, report.rescued, report.failed) == (3, 1, 0)
    assert w.exists(late) and not any(w.exists(a) for a in old)
    assert await w.deleted_records() == [w.repo]  # not purged completely: kept for a later pass


class ListHookedStore:
    """A block store that runs ``hook`` once, when asked for the key after the first one ``list_keys``
    yielded (another process acting while a listing is under way); everything else is ``inner``'s."""

    def __init__(self, inner: BlockStore, hooks: list[Callable[[], Awaitable[None]]]) -> None:
        self.inner, self.hooks = inner, hooks

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def list_keys(self, prefix: str = "", *, start_after: str | None = None) -> AsyncIterator[KeyInfo]:
        async for info in self.inner.list_keys(prefix, start_after=start_after):
            yield info
            while self.hooks:
                await self.hooks.pop(0)()


class ListHookedRegistry(StoreRegistry):
    """A :class:`StoreRegistry` whose namespace stores are :class:`ListHookedStore` wrappers."""

    def __init__(self) -> None:
        super().__init__()
        self.hooks: list[Callable[[], Awaitable[None]]] = []

    async def namespace_store(self, namespace: StorageNamespace) -> BlockStore:
        return ListHookedStore(await super().namespace_store(namespace), self.hooks)


async def test_purge_stops_when_the_namespace_is_claimed_while_it_lists(world: World) -> None:
    w = world
    uploaded = [await w.upload(f"k{i}") for i in range(3)]
    await w.g.delete_repository(w.repo)
    w.advance(GRACE)
    stores = ListHookedRegistry()
    reconciler = Graveler(w.kv.inner, stores, w.g.settings, clock=w.clock)
    other = w.writer(0.0)
    claimed: list[str] = []

    async def claim() -> None:  # another process creates a repository on the namespace
        claimed.append((await other.create_repository(unique(), w.ns.uri, claim_namespace=False)).id)

    stores.hooks.append(claim)
    try:
        [report] = await reconcile_deleted_repositories(reconciler, deleter_for=w.deleter_for)
    finally:
        await stores.close()
    assert claimed and not stores.hooks  # the claim came after the first check, during the listing
    assert (report.deleted, report.failed) == (0, 0)
    assert all(w.exists(a) for a in uploaded) and len(await w.data_keys()) == 3
    assert await w.deleted_records() == [w.repo]  # kept for a later pass
