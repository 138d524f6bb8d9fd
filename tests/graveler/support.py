"""Helpers for graveler tests: table stores on the memory block-store driver."""

from __future__ import annotations

import uuid

from lakefs_core.block.memory import MemoryBlockStore
from lakefs_core.graveler.tables import TableCache, TableStore
from lakefs_core.keys import StorageNamespace


def memory_tables(cache: TableCache | None = None) -> TableStore:
    """A fresh namespace in a fresh in-memory bucket."""
    name = f"t{uuid.uuid4().hex[:12]}"
    return TableStore(
        MemoryBlockStore(name), StorageNamespace.parse(f"mem://{name}/repo"), cache or TableCache()
    )
