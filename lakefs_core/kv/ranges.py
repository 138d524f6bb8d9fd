"""Reading many key ranges in one call (:meth:`lakefs_core.kv.base.RangeScans.scan_ranges`).

:func:`scan_ranges` uses the store's own ``scan_ranges`` (every driver has one: a page is one
statement on PostgreSQL, one hop to the thread on SQLite, bounded-concurrent Queries on DynamoDB)
and falls back to one :meth:`~lakefs_core.kv.base.KVStore.scan` per range for a store without it (a
test's wrapper). :func:`prefix_range` and :func:`point_range` spell the two usual ranges: every key
under a prefix, and one key (a batched ``get`` that skips missing keys).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from functools import cache
from typing import cast

from lakefs_core.errors import BadInputError
from lakefs_core.kv._common import check_page_size, check_ranges
from lakefs_core.kv.base import KeyRange, KVEntry, KVStore, RangeScans


def prefix_end(prefix: bytes) -> bytes:
    """The smallest key after every key starting with ``prefix`` (``branches/`` -> ``branches0``)."""
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        raise BadInputError("a prefix of only 0xff bytes has no end", field="prefix")
    return stripped[:-1] + bytes([stripped[-1] + 1])


def prefix_range(partition: bytes, prefix: bytes) -> KeyRange:
    """Every key of ``partition`` starting with ``prefix``."""
    return (partition, prefix, prefix_end(prefix))


def point_range(partition: bytes, key: bytes) -> KeyRange:
    """Exactly ``key`` (nothing when it is absent)."""
    return (partition, key, key + b"\x00")


@cache
def _has_range_scans(kind: type) -> bool:
    """Whether a store's class has ``scan_ranges`` (:class:`RangeScans`), answered once per class
    (a runtime-checkable protocol's ``isinstance`` walks the attributes every time: microseconds
    per read)."""
    return issubclass(kind, RangeScans)


async def scan_ranges(
    kv: KVStore, ranges: Sequence[KeyRange], *, page_size: int = 1000
) -> AsyncIterator[tuple[int, KVEntry]]:
    """``(index in ranges, entry)`` for every entry in every range, by range then key."""
    if _has_range_scans(type(kv)):
        async for item in cast(RangeScans, kv).scan_ranges(ranges, page_size=page_size):
            yield item
        return
    size = check_page_size(page_size)
    for index, partition, start, end in check_ranges(ranges):
        if start >= end:
            continue
        async for entry in kv.scan(partition, start, page_size=size):
            if entry.key >= end:
                break
            yield index, entry
