"""Content-addressed table files and their tiered cache.

Ranges and metaranges are immutable and named by the hash of their content, so caching them needs no
invalidation: eviction is the only way an entry leaves a tier.

Tiers, fastest first:

1. RAM: an LRU of open :class:`~lakefs_core.format.sstable.reader.TableReader` objects, bounded by
   the total size of their files (each reader also keeps its own LRU of decoded blocks).
2. Local disk (optional): a directory of files named by table id, bounded in bytes, least recently
   used evicted first. Files are written to a temporary name and renamed, so several processes can
   share one cache directory; a file another process evicts is simply fetched again.
3. The object store (``<namespace>/_lakefs/<id>``), the source of truth.

:func:`read_table` bypasses every tier: one GET of a table's bytes, for workers (GC executors) that
read each table once and parse it themselves (:mod:`lakefs_core.committed.addresses`).

Opening a table larger than :data:`INLINE_OPEN_BYTES` (checking every block's CRC32C, parsing its
index: work proportional to its size) runs in the CPU pool of :mod:`lakefs_core.offloop`, never on
the event loop, so a daemon's API keeps answering while a pass opens big ranges.

Concurrent misses for the same id are collapsed into one fetch (single flight). One
:class:`TableCache` may serve many namespaces: an id names the same bytes wherever it lives.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import tempfile
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from lakefs_core.block.base import BlockStore
from lakefs_core.errors import BadInputError, NotFoundError, PreconditionFailedError
from lakefs_core.fileperm import make_private_dir
from lakefs_core.format.records import RangeInfo, is_table_id
from lakefs_core.format.sstable.footer import DEFAULT_MAX_BLOCK_BYTES
from lakefs_core.format.sstable.reader import TableReader
from lakefs_core.keys import table_name
from lakefs_core.namespace import StorageNamespace
from lakefs_core.offloop import run_cpu

DEFAULT_RAM_BYTES = 256 << 20
DEFAULT_PARSED_METARANGES = 1024
DEFAULT_BLOCK_CACHE_BLOCKS = 256
INLINE_OPEN_BYTES = 64 << 10  # tables up to this size are opened on the loop (cheap)


def check_table_id(table_id: str) -> str:
    """Table ids are lowercase hex SHA-256; anything else could escape the ``_lakefs/`` folder."""
    if not is_table_id(table_id):
        raise BadInputError(f"not a table id: {table_id[:80]!r}", field="table_id")
    return table_id


@dataclass
class CacheStats:
    ram_hits: int = 0
    disk_hits: int = 0
    fetches: int = 0
    evictions_ram: int = 0
    evictions_disk: int = 0


class DiskCache:
    """A bounded directory of immutable files named by table id (LRU by last use)."""

    def __init__(self, root: Path, max_bytes: int) -> None:
        if max_bytes <= 0:
            raise BadInputError("must be > 0", field="disk_cache_bytes")
        self.root = root
        self.max_bytes = max_bytes
        make_private_dir(self.root)  # 0700; its files come from mkstemp, 0600
        self._lru: OrderedDict[str, int] = OrderedDict()
        self._bytes = 0
        found = []
        for entry in os.scandir(self.root):
            if entry.is_file() and is_table_id(entry.name):
                st = entry.stat()
                found.append((st.st_mtime, entry.name, st.st_size))
        for _, name, size in sorted(found):
            self._lru[name] = size
            self._bytes += size
        self.evictions = 0
        self._evict()

    @property
    def used_bytes(self) -> int:
        return self._bytes

    def read(self, table_id: str) -> bytes | None:
        if table_id not in self._lru:
            return None
        try:
            data = (self.root / table_id).read_bytes()
        except FileNotFoundError:  # evicted by another process sharing the directory
            self._bytes -= self._lru.pop(table_id)
            return None
        self._lru.move_to_end(table_id)
        return data

    def write(self, table_id: str, data: bytes) -> None:
        if table_id in self._lru:
            self._lru.move_to_end(table_id)
            return
        fd, tmp = tempfile.mkstemp(dir=self.root, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, self.root / table_id)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise
        self._lru[table_id] = len(data)
        self._bytes += len(data)
        self._evict()

    def _evict(self) -> None:
        while self._bytes > self.max_bytes and len(self._lru) > 1:
            victim, size = self._lru.popitem(last=False)
            self._bytes -= size
            self.evictions += 1
            with contextlib.suppress(FileNotFoundError):
                (self.root / victim).unlink()


class TableCache:
    """RAM LRU of open tables over an optional :class:`DiskCache`, with single-flight loads."""

    def __init__(
        self,
        *,
        ram_bytes: int = DEFAULT_RAM_BYTES,
        disk: DiskCache | None = None,
        block_cache_blocks: int = DEFAULT_BLOCK_CACHE_BLOCKS,
        parsed_metaranges: int = DEFAULT_PARSED_METARANGES,
        max_block_bytes: int = DEFAULT_MAX_BLOCK_BYTES,
    ) -> None:
        if ram_bytes <= 0:
            raise BadInputError("must be > 0", field="ram_cache_bytes")
        if max_block_bytes <= 0:
            raise BadInputError("must be > 0", field="max_block_bytes")
        self.ram_bytes = ram_bytes
        # Largest block (stored or decompressed) a table may hold: bounds what a hostile file can
        # make a reader allocate. The default (64 MiB) is above lakeFS's 20 MiB maximum range size.
        self.max_block_bytes = max_block_bytes
        self.disk = disk
        self.block_cache_blocks = block_cache_blocks
        self.stats = CacheStats()
        self._ram: OrderedDict[str, TableReader] = OrderedDict()
        self._sizes: dict[str, int] = {}
        self._used = 0
        self._inflight: dict[str, asyncio.Future[TableReader]] = {}
        # Decoded range lists of metaranges (immutable by id, like the tables): every read of a
        # commit needs one, and decoding thousands of RangeData records per read is wasted work.
        self._parsed: OrderedDict[str, tuple[RangeInfo, ...]] = OrderedDict()
        self.parsed_metaranges = max(1, parsed_metaranges)

    def metarange_ranges(self, table_id: str) -> tuple[RangeInfo, ...] | None:
        ranges = self._parsed.get(table_id)
        if ranges is not None:
            self._parsed.move_to_end(table_id)
        return ranges

    def remember_metarange_ranges(self, table_id: str, ranges: tuple[RangeInfo, ...]) -> None:
        self._parsed[table_id] = ranges
        self._parsed.move_to_end(table_id)
        while len(self._parsed) > self.parsed_metaranges:
            self._parsed.popitem(last=False)

    def get(self, table_id: str) -> TableReader | None:
        """The open table if it is in RAM (the synchronous hot path), else ``None``."""
        reader = self._ram.get(table_id)
        if reader is not None:
            self._ram.move_to_end(table_id)
            self.stats.ram_hits += 1
        return reader

    async def load(self, table_id: str, fetch: Callable[[], Awaitable[bytes]]) -> TableReader:
        """The open table, from RAM, disk, or ``fetch()`` (the object store), in that order."""
        reader = self.get(table_id)
        if reader is not None:
            return reader
        pending = self._inflight.get(table_id)
        if pending is not None:
            return await asyncio.shield(pending)
        future: asyncio.Future[TableReader] = asyncio.get_running_loop().create_future()
        self._inflight[table_id] = future
        try:
            reader = await self._load_uncached(table_id, fetch)
        except BaseException as e:
            future.set_exception(e)
            future.exception()  # mark retrieved: waiters re-raise it themselves
            raise
        else:
            future.set_result(reader)
            return reader
        finally:
            del self._inflight[table_id]

    async def _load_uncached(self, table_id: str, fetch: Callable[[], Awaitable[bytes]]) -> TableReader:
        data = None
        if self.disk is not None:
            data = await asyncio.to_thread(self.disk.read, table_id)
            if data is not None:
                self.stats.disk_hits += 1
        if data is None:
            data = await fetch()
            self.stats.fetches += 1
            # Parse before caching on disk: a corrupt download must not poison the disk tier.
            reader = await self._open_off_loop(table_id, data)
            if self.disk is not None:
                await asyncio.to_thread(self.disk.write, table_id, data)
        else:
            reader = await self._open_off_loop(table_id, data)
        self._insert(table_id, reader, len(data))
        return reader

    async def _open_off_loop(self, table_id: str, data: bytes) -> TableReader:
        if len(data) <= INLINE_OPEN_BYTES:  # well under a millisecond: not worth a thread hop
            return self._open(table_id, data)
        return await run_cpu(self._open, table_id, data)

    def _open(self, table_id: str, data: bytes) -> TableReader:
        return TableReader(
            data,
            name=table_name(table_id),
            block_cache_blocks=self.block_cache_blocks,
            max_block_bytes=self.max_block_bytes,
        )

    def _insert(self, table_id: str, reader: TableReader, size: int) -> None:
        self._ram[table_id] = reader
        self._sizes[table_id] = size
        self._used += size
        while self._used > self.ram_bytes and len(self._ram) > 1:
            victim, _ = self._ram.popitem(last=False)
            self._used -= self._sizes.pop(victim)
            self.stats.evictions_ram += 1


@dataclass
class TableStore:
    """The tables of one storage namespace: content-addressed writes and cached reads."""

    store: BlockStore
    namespace: StorageNamespace
    cache: TableCache = field(default_factory=TableCache)

    def key(self, table_id: str) -> str:
        return self.namespace.table_key(check_table_id(table_id))

    async def write(self, table_id: str, data: bytes) -> bool:
        """Store a table under its id. Returns False if it already existed (same id, same bytes)."""
        try:
            await self.store.put(self.key(table_id), data, if_none_match=True)
        except PreconditionFailedError:
            return False
        return True

    async def exists(self, table_id: str) -> bool:
        return await self.store.exists(self.key(table_id))

    def cached(self, table_id: str) -> TableReader | None:
        return self.cache.get(table_id)

    async def open(self, table_id: str) -> TableReader:
        key = self.key(table_id)

        async def fetch() -> bytes:
            try:
                return await self.store.get(key)
            except NotFoundError as e:
                raise NotFoundError(f"table {table_id} not found at {self.store.uri}/{key}") from e

        return await self.cache.load(table_id, fetch)


async def read_table(store: BlockStore, namespace: StorageNamespace, table_id: str) -> bytes:
    """The bytes of range or metarange ``table_id`` of ``namespace``, uncached (executor-side reads).

    :class:`NotFoundError` names the table's key; the bytes are not parsed here.
    """
    key = namespace.table_key(check_table_id(table_id))
    try:
        return await store.get(key)
    except NotFoundError as e:
        raise NotFoundError(f"table {table_id} not found at {store.uri}/{key}") from e
