"""Opened block stores and per-namespace table stores, shared by everything in one process.

Each storage location (``s3://bucket``, ``local:///root``, ``mem://name``) is opened once and
reused; every namespace gets a :class:`~lakefs_core.committed.tables.TableStore` sharing one
:class:`~lakefs_core.committed.tables.TableCache` (ids name the same bytes wherever they live).
"""

from __future__ import annotations

import asyncio

from lakefs_core.block import S3Settings, open_block_store
from lakefs_core.block.base import BlockStore
from lakefs_core.committed.tables import TableCache, TableStore
from lakefs_core.namespace import StorageNamespace


class StoreRegistry:
    def __init__(
        self,
        *,
        s3: S3Settings | None = None,
        table_cache: TableCache | None = None,
        local_tmp_grace_seconds: float | None = None,
    ) -> None:
        self.s3 = s3
        self.local_tmp_grace_seconds = local_tmp_grace_seconds  # None: LocalBlockStore's default
        self.table_cache = table_cache or TableCache()
        self._stores: dict[str, BlockStore] = {}
        self._lock = asyncio.Lock()

    async def block_store(self, store_uri: str) -> BlockStore:
        store = self._stores.get(store_uri)
        if store is not None:
            return store
        async with self._lock:
            store = self._stores.get(store_uri)
            if store is None:
                store = await open_block_store(
                    store_uri, s3=self.s3, local_tmp_grace_seconds=self.local_tmp_grace_seconds
                )
                self._stores[store_uri] = store
        return store

    async def namespace_store(self, namespace: StorageNamespace) -> BlockStore:
        return await self.block_store(namespace.store_uri)

    async def source_store(self, source: StorageNamespace) -> BlockStore:
        """The store an import lists ``source`` from: as :meth:`namespace_store`, but a local
        listing refuses a file name that is not UTF-8 (skipped, it would be a missing entry)."""
        key = "strict-names " + source.store_uri
        async with self._lock:
            store = self._stores.get(key)
            if store is None:
                store = await open_block_store(
                    source.store_uri,
                    s3=self.s3,
                    local_tmp_grace_seconds=self.local_tmp_grace_seconds,
                    local_strict_names=True,
                )
                self._stores[key] = store
        return store

    async def tables(self, namespace: StorageNamespace) -> TableStore:
        return TableStore(await self.namespace_store(namespace), namespace, self.table_cache)

    async def close(self) -> None:
        stores, self._stores = list(self._stores.values()), {}
        for store in stores:
            await store.close()
