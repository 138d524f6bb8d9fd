"""Acceptance: concurrent writers and committers on one branch never lose or duplicate a write.

On every KV driver (memory, SQLite file, PostgreSQL, DynamoDB on moto), 8 writer tasks stage unique
keys one at a time, 4 batch writer tasks stage unique keys in batches of 1-40 (``set_entries``: one
KV ``set_many`` per attempt) and 4 committer tasks commit in a loop, all on ``main`` of one
repository, for a bounded time.
Every task has its own :class:`Graveler` over its own KV connection (``open_kv`` on the same URL;
the memory driver can only be shared), so compare-and-swap races are real cross-connection races.
Then one final commit, and:

- the first-parent history from the head is linear (one parent each, generations step by one, ids
  distinct) and contains every commit a committer got back;
- diffing each commit against its first parent, every key is ADDED by exactly one commit, and the
  keys added are exactly the acknowledged writes (plus, at most, writes whose call failed);
- the head lists exactly those keys and the branch has no sealed tokens left.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import random
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import dataclass, field

import pytest

from lakefs_core.committed.model import DiffType
from lakefs_core.errors import LakeFSError, NoChangesError
from lakefs_core.kv import Expect, KVEntry, KVItem, KVStore, open_kv
from lakefs_core.kv.base import KVExpectation
from lakefs_core.kv.memory import MemoryKVStore
from lakefs_core.repos.graveler import Graveler, GravelerSettings
from lakefs_core.repos.stores import StoreRegistry
from tests.repos.support import mem_namespace, record, unique
from tests.support.kv import kv_url_for

DRIVERS = ["memory", "memory-jitter", "sqlite", "postgres", "dynamodb"]
WRITERS = 8
BATCH_WRITERS = 4
COMMITTERS = 4
DURATION_S = 3.5


@pytest.fixture(params=DRIVERS)
def kv_url(request: pytest.FixtureRequest, sqlite_url: str) -> str:
    if request.param == "memory-jitter":
        return "memory://?jitter"
    return kv_url_for(request.param, request, sqlite_url)


class JitterKV:
    """A connection to a shared memory store with a random delay before each operation, so the
    in-process driver interleaves callers the way network round trips do."""

    def __init__(self, inner: KVStore, seed: int) -> None:
        self.inner = inner
        self.rng = random.Random(seed)

    async def _pause(self) -> None:
        await asyncio.sleep(min(0.01, self.rng.expovariate(1 / 0.001)))

    async def get(self, partition: bytes, key: bytes) -> bytes:
        await self._pause()
        return await self.inner.get(partition, key)

    async def set(self, partition: bytes, key: bytes, value: bytes) -> None:
        await self._pause()
        await self.inner.set(partition, key, value)

    async def set_if(self, partition: bytes, key: bytes, value: bytes, expected: Expect) -> None:
        await self._pause()
        await self.inner.set_if(partition, key, value, expected)

    async def set_many(self, items: Iterable[KVItem]) -> None:
        await self._pause()
        await self.inner.set_many(items)

    async def set_many_then_get(self, items: Iterable[KVItem], partition: bytes, key: bytes) -> bytes:
        # As the two calls, with a pause between (the contract allows it; network drivers have one),
        # so committers get to move the branch between a batch's write and its re-read.
        await self.set_many(items)
        return await self.get(partition, key)

    max_conditional_items: int | None = None

    async def set_many_if(self, items: Iterable[KVItem], expected: Sequence[KVExpectation]) -> None:
        await self._pause()
        await self.inner.set_many_if(items, expected)

    async def delete(self, partition: bytes, key: bytes) -> None:
        await self._pause()
        await self.inner.delete(partition, key)

    async def scan(
        self, partition: bytes, start: bytes = b"", *, end: bytes | None = None, page_size: int = 1000
    ) -> AsyncIterator[KVEntry]:
        await self._pause()
        async for entry in self.inner.scan(partition, start, end=end, page_size=page_size):
            yield entry

    async def close(self) -> None:
        pass


class Connections:
    """Opens one KV store per caller (one shared store for ``memory://``, reached through a
    :class:`JitterKV` per caller for ``memory://?jitter``) and closes them all."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.opened: list[KVStore] = []
        self.shared: MemoryKVStore | None = MemoryKVStore() if url.startswith("memory://") else None
        self.jitter = url.endswith("?jitter")
        self.seeds = 0

    async def open(self) -> KVStore:
        if self.shared is not None:
            if self.jitter:
                self.seeds += 1
                return JitterKV(self.shared, seed=self.seeds)
            return self.shared
        store = await open_kv(self.url)
        self.opened.append(store)
        return store

    async def close(self) -> None:
        for store in self.opened:
            await store.close()
        if self.shared is not None:
            await self.shared.close()


@pytest.fixture
async def connections(kv_url: str) -> AsyncIterator[Connections]:
    conns = Connections(kv_url)
    try:
        yield conns
    finally:
        await conns.close()


@dataclass
class Outcome:
    acked: set[bytes] = field(default_factory=set)
    failed: dict[bytes, str] = field(default_factory=dict)  # key -> error of the failed call
    committed: list[str] = field(default_factory=list)  # ids returned to committers
    no_changes: int = 0
    commit_errors: list[str] = field(default_factory=list)


async def write_loop(g: Graveler, repo: str, wid: int, deadline: float, out: Outcome) -> None:
    n = 0
    while time.monotonic() < deadline:
        key = f"w{wid}/{n:06d}".encode()
        n += 1
        try:
            await g.set_entry(repo, "main", record(key))
        except LakeFSError as e:
            out.failed[key] = repr(e)
        else:
            out.acked.add(key)


async def batch_write_loop(g: Graveler, repo: str, wid: int, deadline: float, out: Outcome) -> None:
    rng = random.Random(wid)
    n = 0
    while time.monotonic() < deadline:
        keys = [f"b{wid}/{n + i:06d}".encode() for i in range(rng.randint(1, 40))]
        n += len(keys)
        try:
            await g.set_entries(repo, "main", [record(key) for key in keys])
        except LakeFSError as e:
            out.failed.update(dict.fromkeys(keys, repr(e)))
        else:
            out.acked.update(keys)


async def commit_loop(g: Graveler, repo: str, cid: int, deadline: float, out: Outcome) -> None:
    while time.monotonic() < deadline:
        try:
            made = await g.commit(repo, "main", committer=f"committer-{cid}", message=f"from {cid}")
        except NoChangesError:
            out.no_changes += 1
            await asyncio.sleep(0.002)
        except LakeFSError as e:
            out.commit_errors.append(repr(e))
        else:
            out.committed.append(made.id)


async def test_concurrent_writers_and_committers(
    connections: Connections, kv_url: str, request: pytest.FixtureRequest
) -> None:
    settings = GravelerSettings()
    stores = StoreRegistry()
    try:
        admin = Graveler(await connections.open(), stores, settings)
        repo = unique()
        await admin.create_repository(repo, mem_namespace())
        writers = [Graveler(await connections.open(), stores, settings) for _ in range(WRITERS)]
        batchers = [Graveler(await connections.open(), stores, settings) for _ in range(BATCH_WRITERS)]
        committers = [Graveler(await connections.open(), stores, settings) for _ in range(COMMITTERS)]

        out = Outcome()
        started = time.monotonic()
        deadline = started + DURATION_S
        await asyncio.gather(
            *(write_loop(g, repo, i, deadline, out) for i, g in enumerate(writers)),
            *(batch_write_loop(g, repo, i, deadline, out) for i, g in enumerate(batchers)),
            *(commit_loop(g, repo, i, deadline, out) for i, g in enumerate(committers)),
        )
        load_s = time.monotonic() - started
        with contextlib.suppress(NoChangesError):
            out.committed.append((await admin.commit(repo, "main", committer="final", message="final")).id)

        # -- history: linear, complete, no duplicates ------------------------------------------------
        history = [c async for c in admin.log(repo, "main")]
        ids = [c.id for c in history]
        assert len(ids) == len(set(ids)), "a commit appears twice in the first-parent history"
        for child, parent in itertools.pairwise(history):
            assert child.parents == (parent.id,), "history is not linear"
            assert child.generation == parent.generation + 1
        assert history[-1].parents == ()
        missing = set(out.committed) - set(ids)
        assert not missing, f"commits returned to committers but not in the history: {missing}"

        # -- every acknowledged write in exactly one commit ---------------------------------------------
        added: Counter[bytes] = Counter()
        for c in history[:-1]:
            async for d in admin.diff(repo, c.parents[0], c.id):
                assert d.type is DiffType.ADDED, (d.type, d.key)
                added[d.key] += 1
        duplicated = {k: n for k, n in added.items() if n != 1}
        assert not duplicated, f"keys added by more than one commit: {list(duplicated)[:10]}"
        lost = out.acked - set(added)
        assert not lost, f"{len(lost)} acknowledged writes were never committed: {sorted(lost)[:10]}"
        unexpected = set(added) - out.acked - set(out.failed)
        assert not unexpected, f"committed keys nobody wrote: {sorted(unexpected)[:10]}"

        head = {r.key async for r in admin.list_entries(repo, "main")}
        assert head == set(added)
        if not out.failed:
            assert head == out.acked
        branch = await admin.branch(repo, "main")
        assert branch.sealed_tokens == ()
        assert [d async for d in admin.diff_uncommitted(repo, "main")] == []

        driver = request.node.callspec.params["kv_url"]
        print(
            json.dumps(
                {
                    "driver": driver,
                    "load_seconds": round(load_s, 2),
                    "acked_writes": len(out.acked),
                    "acked_batch_writes": sum(k.startswith(b"b") for k in out.acked),
                    "failed_writes": len(out.failed),
                    "commits_in_history": len(history) - 1,
                    "commits_returned": len(out.committed),
                    "distinct_returned": len(set(out.committed)),
                    "no_changes": out.no_changes,
                    "commit_errors": len(out.commit_errors),
                }
            )
        )
        assert not out.commit_errors, out.commit_errors[:5]
        assert not out.failed, list(out.failed.values())[:5]
        assert len(out.acked) > 0 and len(history) > 2
        assert any(k.startswith(b"b") for k in out.acked) and any(k.startswith(b"w") for k in out.acked)
    finally:
        await stores.close()
