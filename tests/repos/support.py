"""Helpers for repository-service tests: records, unique names, a memory-backed Graveler."""

from __future__ import annotations

import hashlib
import inspect
import uuid
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import TypeVar

from lakefs_core.format.records import ValueRecord, make_entry
from lakefs_core.format.splitter import SplitPolicy
from lakefs_core.kv.base import Expect, KVEntry, KVExpectation, KVItem, KVStore
from lakefs_core.repos.graveler import Graveler, GravelerSettings
from lakefs_core.repos.stores import StoreRegistry

WHEN = datetime(2026, 1, 1, tzinfo=UTC)
T = TypeVar("T")


def unique(prefix: str = "r") -> str:
    """A fresh repository-id-shaped name."""
    return f"{prefix}{uuid.uuid4().hex[:12]}"


def mem_namespace(name: str | None = None) -> str:
    return f"mem://{name or unique('ns')}/repo"


def record(key: str | bytes, content: str = "v") -> ValueRecord:
    """A staged value for ``key`` whose identity depends on ``content``."""
    k = key.encode() if isinstance(key, str) else key
    etag = hashlib.md5(content.encode()).hexdigest()
    identity, data = make_entry(
        f"data/g{uuid.uuid4().hex[:8]}/{uuid.uuid4().hex}",
        len(content),
        etag,
        last_modified=WHEN,
        content_type="application/octet-stream",
    )
    return ValueRecord(k, identity, data)


class Clock:
    """A settable clock for graveler and token-cleaner timestamps."""

    def __init__(self, start: datetime = WHEN) -> None:
        self.now = start

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


def fast_settings(**kw: object) -> GravelerSettings:
    """Settings with short backoff so contended tests stay quick."""
    base: dict[str, object] = {"backoff_initial": 0.001, "backoff_max": 0.05}
    base.update(kw)
    return GravelerSettings(**base)  # type: ignore[arg-type]


def new_graveler(
    kv: KVStore, stores: StoreRegistry | None = None, *, clock: Callable[[], datetime] | None = None
) -> Graveler:
    if clock is None:
        return Graveler(kv, stores or StoreRegistry(), fast_settings())
    return Graveler(kv, stores or StoreRegistry(), fast_settings(), clock=clock)


async def small_ranges_repo(kv: KVStore) -> tuple[Graveler, str]:
    """A Graveler whose commits write ranges of a few records (a committed cursor then seeks across
    range boundaries), and a fresh repository in it."""
    small = SplitPolicy(min_range_size_bytes=0, max_range_size_bytes=400, range_raggedness_entries=3)
    g = Graveler(kv, StoreRegistry(), fast_settings(split_policy=small))
    repo = unique()
    await g.create_repository(repo, mem_namespace())
    return g, repo


Hook = Callable[[str, bytes, bytes], object]  # (op, partition, key); may return an awaitable


class HookedKV:
    """A :class:`KVStore` that delegates to ``inner`` and lets a test run code around operations.

    ``before`` / ``after`` hooks get ``(op, partition, key)``; a hook may raise to inject a failure.
    Used for fault injection without monkeypatching.
    """

    def __init__(self, inner: KVStore) -> None:
        self.inner = inner
        self.before: list[Hook] = []
        self.after: list[Hook] = []
        self.ops: list[tuple[str, bytes, bytes]] = []

    async def _run(self, hooks: list[Hook], op: str, p: bytes, k: bytes) -> None:
        for hook in list(hooks):
            result = hook(op, p, k)
            if inspect.isawaitable(result):
                await result

    async def get(self, partition: bytes, key: bytes) -> bytes:
        await self._run(self.before, "get", partition, key)
        value = await self.inner.get(partition, key)
        self.ops.append(("get", partition, key))
        await self._run(self.after, "get", partition, key)
        return value

    async def set(self, partition: bytes, key: bytes, value: bytes) -> None:
        await self._run(self.before, "set", partition, key)
        await self.inner.set(partition, key, value)
        self.ops.append(("set", partition, key))
        await self._run(self.after, "set", partition, key)

    async def set_if(self, partition: bytes, key: bytes, value: bytes, expected: Expect) -> None:
        await self._run(self.before, "set_if", partition, key)
        await self.inner.set_if(partition, key, value, expected)
        self.ops.append(("set_if", partition, key))
        await self._run(self.after, "set_if", partition, key)

    async def set_many(self, items: Iterable[KVItem]) -> None:
        batch = list(items)
        for p, k, _ in batch:
            await self._run(self.before, "set_many", p, k)
        await self.inner.set_many(batch)
        for p, k, _ in batch:
            self.ops.append(("set_many", p, k))
        for p, k, _ in batch:
            await self._run(self.after, "set_many", p, k)

    async def set_many_then_get(self, items: Iterable[KVItem], partition: bytes, key: bytes) -> bytes:
        # As the contract's reference form (the two calls, in order), so hooks see the batch and the
        # read as separate operations and a test can act between them (e.g. rotate the token).
        await self.set_many(items)
        return await self.get(partition, key)

    @property
    def max_conditional_items(self) -> int | None:
        return self.inner.max_conditional_items

    async def set_many_if(self, items: Iterable[KVItem], expected: Sequence[KVExpectation]) -> None:
        batch = list(items)
        for p, k, _ in batch:
            await self._run(self.before, "set_many_if", p, k)
        await self.inner.set_many_if(batch, expected)
        for p, k, _ in batch:
            self.ops.append(("set_many_if", p, k))
        for p, k, _ in batch:
            await self._run(self.after, "set_many_if", p, k)

    async def delete(self, partition: bytes, key: bytes) -> None:
        await self._run(self.before, "delete", partition, key)
        await self.inner.delete(partition, key)
        self.ops.append(("delete", partition, key))
        await self._run(self.after, "delete", partition, key)

    async def scan(
        self, partition: bytes, start: bytes = b"", *, end: bytes | None = None, page_size: int = 1000
    ) -> AsyncIterator[KVEntry]:
        await self._run(self.before, "scan", partition, start)
        async for entry in self.inner.scan(partition, start, end=end, page_size=page_size):
            yield entry

    async def close(self) -> None:
        await self.inner.close()


async def collect(it: AsyncIterator[T]) -> list[T]:
    return [x async for x in it]
