"""In-process KV store: one sorted key list plus a dict per partition.

Every operation (a ``set_many`` batch included) runs its read-check-write without an ``await``
inside the critical section, so it is atomic with respect to other asyncio tasks; a small
:class:`threading.Lock` additionally makes it safe when several event loops or threads share one
store. Each operation first yields to the event loop once (``await asyncio.sleep(0)``) so that races
in callers interleave the way they would against a real backend instead of hiding behind
synchronous completion.

Scans page through the sorted key list by key (keyset pagination), so they never hold the lock
across a ``yield`` and concurrent writes are allowed while a scan is in progress (each page is
consistent; the scan as a whole is not a snapshot, exactly like the other drivers).
"""

from __future__ import annotations

import asyncio
import bisect
import threading
from collections.abc import AsyncIterator, Iterable, Sequence

from lakefs_core.errors import NotFoundError, PreconditionFailedError
from lakefs_core.kv._common import (
    IndexedRange,
    as_bytes,
    check_expect,
    check_expectations,
    check_held,
    check_items,
    check_key,
    closed_error,
    holds,
    paged_range_scan,
    paged_scan,
    precondition_message,
)
from lakefs_core.kv.base import Expect, KeyRange, KVEntry, KVExpectation, KVItem


class _Partition:
    __slots__ = ("keys", "values")

    def __init__(self) -> None:
        self.keys: list[bytes] = []  # sorted, bytewise
        self.values: dict[bytes, bytes] = {}

    def put(self, key: bytes, value: bytes) -> None:
        if key not in self.values:
            bisect.insort(self.keys, key)
        self.values[key] = value

    def remove(self, key: bytes) -> None:
        if self.values.pop(key, None) is not None:
            i = bisect.bisect_left(self.keys, key)
            del self.keys[i]


class MemoryKVStore:
    """A :class:`~lakefs_core.kv.base.KVStore` held in process memory (tests, ephemeral use)."""

    max_conditional_items: int | None = None

    def __init__(self) -> None:
        self._partitions: dict[bytes, _Partition] = {}
        self._lock = threading.Lock()
        self._closed = False

    async def __aenter__(self) -> MemoryKVStore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise closed_error("memory")

    async def get(self, partition: bytes, key: bytes) -> bytes:
        p, k = check_key(partition, key)
        await asyncio.sleep(0)
        self._check_open()
        with self._lock:
            part = self._partitions.get(p)
            value = None if part is None else part.values.get(k)
        if value is None:
            raise NotFoundError("key not found in KV partition")
        return value

    async def set(self, partition: bytes, key: bytes, value: bytes) -> None:
        p, k = check_key(partition, key)
        v = as_bytes(value, "value")
        await asyncio.sleep(0)
        self._check_open()
        with self._lock:
            self._partitions.setdefault(p, _Partition()).put(k, v)

    async def set_if(self, partition: bytes, key: bytes, value: bytes, expected: Expect) -> None:
        p, k = check_key(partition, key)
        v = as_bytes(value, "value")
        exp = check_expect(expected)
        await asyncio.sleep(0)
        self._check_open()
        with self._lock:
            part = self._partitions.get(p)
            current = None if part is None else part.values.get(k)
            if not holds(current, exp):
                raise PreconditionFailedError(precondition_message(exp))
            if part is None:
                part = self._partitions[p] = _Partition()
            part.put(k, v)

    async def set_many(self, items: Iterable[KVItem]) -> None:
        batch = check_items(items)
        await asyncio.sleep(0)
        self._check_open()
        with self._lock:  # one lock: the batch is atomic for every reader
            for p, k, v in batch:
                self._partitions.setdefault(p, _Partition()).put(k, v)

    async def set_many_then_get(self, items: Iterable[KVItem], partition: bytes, key: bytes) -> bytes:
        batch = check_items(items)
        p, k = check_key(partition, key)
        await asyncio.sleep(0)
        self._check_open()
        with self._lock:  # one lock: nothing can change the key between the batch and the read
            for bp, bk, bv in batch:
                self._partitions.setdefault(bp, _Partition()).put(bk, bv)
            part = self._partitions.get(p)
            value = None if part is None else part.values.get(k)
        if value is None:
            raise NotFoundError("key not found in KV partition")
        return value

    async def set_many_if(self, items: Iterable[KVItem], expected: Sequence[KVExpectation]) -> None:
        batch = check_items(items)
        checks = check_expectations(expected, batch)
        await asyncio.sleep(0)
        self._check_open()
        with self._lock:  # one lock: the checks and the batch are one step for every other caller
            found: dict[tuple[bytes, bytes], bytes] = {}
            for p, k, _ in checks:
                part = self._partitions.get(p)
                value = None if part is None else part.values.get(k)
                if value is not None:
                    found[(p, k)] = value
            check_held(found, checks)
            for p, k, v in batch:
                self._partitions.setdefault(p, _Partition()).put(k, v)

    async def delete(self, partition: bytes, key: bytes) -> None:
        p, k = check_key(partition, key)
        await asyncio.sleep(0)
        self._check_open()
        with self._lock:
            part = self._partitions.get(p)
            if part is not None:
                part.remove(k)
                if not part.values:
                    del self._partitions[p]

    async def scan(
        self, partition: bytes, start: bytes = b"", *, end: bytes | None = None, page_size: int = 1000
    ) -> AsyncIterator[KVEntry]:
        async def read(
            p: bytes, cursor: bytes, inclusive: bool, stop: bytes | None, size: int
        ) -> list[KVEntry]:
            await asyncio.sleep(0)
            self._check_open()
            with self._lock:
                part = self._partitions.get(p)
                if part is None:
                    return []
                keys = part.keys
                i = (bisect.bisect_left if inclusive else bisect.bisect_right)(keys, cursor)
                j = i + size if stop is None else min(i + size, bisect.bisect_left(keys, stop, lo=i))
                return [KVEntry(key, part.values[key]) for key in keys[i:j]]

        async for entry in paged_scan(partition, start, page_size, read, end):
            yield entry

    async def scan_ranges(
        self, ranges: Sequence[KeyRange], *, page_size: int = 1000
    ) -> AsyncIterator[tuple[int, KVEntry]]:
        async def read(todo: Sequence[IndexedRange], size: int) -> list[tuple[int, KVEntry]]:
            await asyncio.sleep(0)
            self._check_open()
            out: list[tuple[int, KVEntry]] = []
            with self._lock:
                for index, p, start, end in todo:
                    part = self._partitions.get(p)
                    if part is None:
                        continue
                    i, j = bisect.bisect_left(part.keys, start), bisect.bisect_left(part.keys, end)
                    out.extend(
                        (index, KVEntry(k, part.values[k]))
                        for k in part.keys[i : min(j, i + size - len(out))]
                    )
                    if len(out) >= size:
                        break
            return out

        async for item in paged_range_scan(ranges, page_size, read):
            yield item

    async def close(self) -> None:
        self._closed = True
        with self._lock:
            self._partitions.clear()
