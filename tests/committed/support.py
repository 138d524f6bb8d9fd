"""Helpers for graveler tests: table stores on the memory block-store driver, records by name,
change streams, metaranges written from records."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import AsyncIterator, Iterable

from lakefs_core.block.memory import MemoryBlockStore
from lakefs_core.committed.apply import apply_changes
from lakefs_core.committed.metarange import MetaRange
from lakefs_core.committed.model import Change, ValueRecord
from lakefs_core.committed.tables import TableCache, TableStore
from lakefs_core.namespace import StorageNamespace


def memory_tables(cache: TableCache | None = None) -> TableStore:
    """A fresh namespace in a fresh in-memory bucket."""
    name = f"t{uuid.uuid4().hex[:12]}"
    return TableStore(
        MemoryBlockStore(name), StorageNamespace.parse(f"mem://{name}/repo"), cache or TableCache()
    )


def rec(key: str, data: bytes = b"d", identity: bytes | None = None) -> ValueRecord:
    """A record for ``key`` whose identity follows its key and data (or is ``identity``)."""
    k = key.encode()
    return ValueRecord(k, identity or hashlib.sha256(k + data).digest(), data)


async def as_async(changes: Iterable[Change]) -> AsyncIterator[Change]:
    """``changes`` as an async stream (apply_changes reads plain and async iterables differently)."""
    for change in changes:
        yield change


async def written(tables: TableStore, records: list[ValueRecord]) -> MetaRange:
    """The metarange of ``records`` written from nothing."""
    empty = await MetaRange.load(tables, "")
    result = await apply_changes(tables, empty, [Change(r.key, r) for r in records])
    return await MetaRange.load(tables, result.metarange_id)
