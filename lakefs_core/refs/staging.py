"""Staging areas: each staging token is its own KV partition of ``StagedEntryData`` records.

A tombstone is a record with empty identity and empty data (:attr:`ValueRecord.is_tombstone`).
Reading a branch consults the live token, then each sealed token (newest first), then the committed
metarange; :func:`merged_changes` produces the sorted change stream of several tokens (newest token
wins on equal keys) that a commit applies. Tokens are dropped by deleting their whole partition.

Listings read through seekable cursors (lakeFS's iterators with ``SeekGE``): :class:`StagedCursor`
reads one token's records in ``[start, end)`` in pages that start small after a seek and double
while read in order (up to ``page_size``), and answers a seek inside what it has read, or past the
end of a range it read to its end, without a KV call; :class:`MergedCursor` merges cursors (the
left-most wins on equal keys) and seeks every one of them. A listing with a delimiter seeks past
each common prefix: its cost is one small read per source and directory, not a page.
"""

from __future__ import annotations

import contextlib
import heapq
from bisect import bisect_left
from collections.abc import AsyncIterator, Sequence
from typing import Protocol

from lakefs_core.committed.model import Change
from lakefs_core.errors import NotFoundError
from lakefs_core.format.records import ValueRecord, decode_staged_entry, encode_staged_entry
from lakefs_core.kv.base import KVEntry, KVStore
from lakefs_core.refs import kvkeys

#: The first page a cursor reads after a seek (it doubles while the cursor reads in order).
FIRST_PAGE = 16


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

    async def lookup(self, tokens: Sequence[str], key: bytes) -> ValueRecord | None:
        """The newest staged record for ``key`` across ``tokens`` (newest token first)."""
        for token in tokens:
            found = await self.get(token, key)
            if found is not None:
                return found
        return None

    async def first_page(
        self, token: str, start: bytes, end: bytes | None, size: int = FIRST_PAGE
    ) -> list[KVEntry]:
        """The first ``size`` raw entries ``token`` stages in ``[start, end)`` (what
        :meth:`cursor` takes as ``first``)."""
        return await read_page(self.kv, kvkeys.staging_partition(token), start, end, size)

    def cursor(
        self, token: str, start: bytes = b"", end: bytes | None = None, first: list[KVEntry] | None = None
    ) -> StagedCursor:
        """A seekable cursor over ``token``'s records in ``[start, end)``; ``first``: its first
        :data:`FIRST_PAGE` entries, already read (with the branch record, in one KV call)."""
        cursor = StagedCursor(self.kv, token, start, end)
        if first is not None:
            cursor.prefetched(first)
        return cursor

    async def merged(self, tokens: Sequence[str], start: bytes = b"") -> AsyncIterator[ValueRecord]:
        """Records of all ``tokens`` in key order; on equal keys the earliest token wins."""
        async for record in merge_sorted([self.scan(t, start) for t in tokens]):
            yield record


async def read_page(
    kv: KVStore, partition: bytes, start: bytes, end: bytes | None, size: int
) -> list[KVEntry]:
    """The first ``size`` entries of ``partition`` in ``[start, end)``: one KV read."""
    page: list[KVEntry] = []
    scan = kv.scan(partition, start, end=end, page_size=size)
    async with contextlib.aclosing(scan) as entries:  # type: ignore[type-var]
        async for entry in entries:
            page.append(entry)
            if len(page) == size:
                break
    return page


class RecordCursor(Protocol):
    """A key-ordered source of records that can skip ahead (lakeFS's ``SeekGE``)."""

    async def next(self) -> ValueRecord | None:
        """The next record, or None at the end (and ever after)."""
        ...

    def seek_ge(self, key: bytes) -> None:
        """Make :meth:`next` answer the first record with a key >= ``key``; only moves forward
        (a key at or before the cursor's position changes nothing)."""
        ...


class StagedCursor:
    """One staging token's records in ``[start, end)`` (see the module docstring)."""

    def __init__(
        self, kv: KVStore, token: str, start: bytes, end: bytes | None, page_size: int = 1000
    ) -> None:
        self._kv, self._token, self._end, self._max = kv, token, end, page_size
        self._partition = kvkeys.staging_partition(token)
        self._page: list[KVEntry] = []
        self._keys: list[bytes] = []
        self._i = 0
        self._from = start  # where the next read starts (inclusive)
        self._size = FIRST_PAGE
        self._to_end = False  # the last read reached ``end``: nothing is left after the page

    def seek_ge(self, key: bytes) -> None:
        if self._i < len(self._keys) and key <= self._keys[-1]:
            self._i = bisect_left(self._keys, key, self._i)  # inside the page read
        elif self._to_end or key <= self._from:
            self._i = len(self._keys)  # past the page: nothing more, or the next read starts there
        else:
            self._page, self._keys, self._i = [], [], 0
            self._from, self._size = key, FIRST_PAGE

    async def next(self) -> ValueRecord | None:
        if self._i == len(self._page):
            if self._to_end:
                return None
            await self._read()
            if not self._page:
                return None
        entry = self._page[self._i]
        self._i += 1
        return decode_staged_entry(entry.value, file=f"kv:{self._token}")

    def prefetched(self, page: list[KVEntry]) -> None:
        """Take ``page`` as the cursor's first read: the first ``FIRST_PAGE`` (at most) entries of
        its range, read by the caller (before any :meth:`next` or :meth:`seek_ge`)."""
        self._take(page[:FIRST_PAGE])

    async def _read(self) -> None:
        self._take(await read_page(self._kv, self._partition, self._from, self._end, self._size))

    def _take(self, page: list[KVEntry]) -> None:
        size = self._size
        self._page, self._keys, self._i = page, [e.key for e in page], 0
        self._to_end = len(page) < size
        if page:
            self._from = page[-1].key + b"\x00"  # the smallest key after the page's last
        self._size = min(size * 2, self._max)


class MergedCursor:
    """Cursors merged in key order; on equal keys the left-most cursor's record wins, and with
    ``hide_tombstones`` a winning tombstone is skipped (with the records it shadows). A source that
    reaches its end is dropped: with one source left, a read or a seek is that source's."""

    def __init__(self, sources: Sequence[RecordCursor], *, hide_tombstones: bool = False) -> None:
        self._sources = list(sources)
        self._heads: list[ValueRecord | None] = [None] * len(sources)  # None: read the source next
        self._hide = hide_tombstones

    def seek_ge(self, key: bytes) -> None:
        heads = self._heads
        if len(heads) == 1 and heads[0] is None:  # one source left, nothing held: its own seek
            self._sources[0].seek_ge(key)
            return
        for i, source in enumerate(self._sources):
            head = heads[i]
            if head is None:
                source.seek_ge(key)
            elif head.key < key:
                heads[i] = None
                source.seek_ge(key)

    async def next(self) -> ValueRecord | None:
        sources, heads = self._sources, self._heads
        if len(heads) == 1 and heads[0] is None:  # one source left (a listing's usual case)
            source = sources[0]
            while (record := await source.next()) is not None:
                if not (self._hide and record.is_tombstone):
                    return record
            del sources[0], heads[0]
            return None
        while True:
            best: ValueRecord | None = None
            i = 0
            while i < len(sources):
                head = heads[i]
                if head is None:
                    head = await sources[i].next()
                    if head is None:  # at its end for good
                        del sources[i], heads[i]
                        continue
                    heads[i] = head
                if best is None or head.key < best.key:
                    best = head
                i += 1
            if best is None:
                return None
            key = best.key
            for i, head in enumerate(heads):
                if head is not None and head.key == key:  # the winner, and the records it shadows
                    heads[i] = None
            if not (self._hide and best.is_tombstone):
                return best


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
