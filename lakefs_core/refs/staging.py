"""Staging areas: each staging token is its own KV partition of ``StagedEntryData`` records.

A tombstone is a record with empty identity and empty data (:attr:`ValueRecord.is_tombstone`).
Reading a branch consults the live token, then each sealed token (newest first), then the committed
metarange; :func:`merged_changes` produces the sorted change stream of several tokens (newest token
wins on equal keys) that a commit applies. Tokens are dropped by deleting their whole partition.
"""

from __future__ import annotations

import heapq
from collections.abc import AsyncIterator, Sequence

from lakefs_core.committed.model import Change
from lakefs_core.errors import NotFoundError
from lakefs_core.format.records import ValueRecord, decode_staged_entry, encode_staged_entry
from lakefs_core.kv.base import KVStore
from lakefs_core.refs import kvkeys


def tombstone(key: bytes) -> ValueRecord:
    return ValueRecord(key, b"", b"")


class StagingArea:
    def __init__(self, kv: KVStore) -> None:
        self.kv = kv

    async def get(self, token: str, key: bytes) -> ValueRecord | None:
        """The staged record (possibly a tombstone), or ``None`` if the token does not stage ``key``."""
        partition = kvkeys.staging_partition(token)
        try:
            raw = await self.kv.get(partition, key)
        except NotFoundError:
            return None
        return decode_staged_entry(raw, file=f"kv:{token}")

    async def set(self, token: str, record: ValueRecord) -> None:
        await self.kv.set(kvkeys.staging_partition(token), record.key, encode_staged_entry(record))

    async def scan(self, token: str, start: bytes = b"") -> AsyncIterator[ValueRecord]:
        async for entry in self.kv.scan(kvkeys.staging_partition(token), start):
            yield decode_staged_entry(entry.value, file=f"kv:{token}")

    async def is_empty(self, token: str) -> bool:
        async for _ in self.kv.scan(kvkeys.staging_partition(token), page_size=1):
            return False
        return True

    async def drop(self, token: str) -> int:
        """Delete every record of ``token``; returns how many were deleted."""
        partition = kvkeys.staging_partition(token)
        # Collect first: deleting while a paged scan is open would skip keys on some drivers.
        keys = [entry.key async for entry in self.kv.scan(partition, page_size=1000)]
        for key in keys:
            await self.kv.delete(partition, key)
        return len(keys)

    async def drop_under(self, token: str, prefix: bytes, *, exact: bool = False) -> int:
        """Delete ``token``'s records whose key is ``prefix`` (``exact``) or starts with it; how many."""
        partition = kvkeys.staging_partition(token)
        keys: list[bytes] = []
        async for entry in self.kv.scan(partition, prefix, page_size=1000):
            if not entry.key.startswith(prefix) or (exact and entry.key != prefix):
                break
            keys.append(entry.key)
        for key in keys:
            await self.kv.delete(partition, key)
        return len(keys)

    async def lookup(self, tokens: Sequence[str], key: bytes) -> ValueRecord | None:
        """The newest staged record for ``key`` across ``tokens`` (newest token first)."""
        for token in tokens:
            found = await self.get(token, key)
            if found is not None:
                return found
        return None

    async def merged(self, tokens: Sequence[str], start: bytes = b"") -> AsyncIterator[ValueRecord]:
        """Records of all ``tokens`` in key order; on equal keys the earliest token wins."""
        async for record in merge_sorted([self.scan(t, start) for t in tokens]):
            yield record


async def merge_sorted(sources: Sequence[AsyncIterator[ValueRecord]]) -> AsyncIterator[ValueRecord]:
    """K-way merge of key-sorted streams; on equal keys the left-most source wins."""
    heap: list[tuple[bytes, int, ValueRecord]] = []
    for i, src in enumerate(sources):
        first = await anext(src, None)
        if first is not None:
            heap.append((first.key, i, first))
    heapq.heapify(heap)
    while heap:
        key, i, record = heapq.heappop(heap)
        nxt = await anext(sources[i], None)
        if nxt is not None:
            heapq.heappush(heap, (nxt.key, i, nxt))
        while heap and heap[0][0] == key:  # shadowed by a left-most (newer) source
            _, j, _ = heapq.heappop(heap)
            more = await anext(sources[j], None)
            if more is not None:
                heapq.heappush(heap, (more.key, j, more))
        yield record


async def merged_changes(staging: StagingArea, tokens: Sequence[str]) -> AsyncIterator[Change]:
    """The commit change stream of ``tokens`` (newest first): tombstones become deletions."""
    async for record in staging.merged(tokens):
        yield Change(record.key, None if record.is_tombstone else record)
