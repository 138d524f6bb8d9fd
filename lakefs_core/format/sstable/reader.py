"""Reads RocksDB block-based tables: lakeFS ranges/metaranges and generic RocksDB SST files.

:class:`TableReader` parses the footer, the metaindex, the properties block and the whole index at
open time (one-level index type 0/1, or two-level index type 2 whose partitions are all read then);
filter, range-deletion and any other meta blocks are ignored. Separator user keys are kept in one
sorted list, so finding a key's data block is one ``bisect``.

Data blocks are decoded lazily into parallel lists of user keys and values. Up to
``block_cache_blocks`` decoded blocks are kept per reader (first-in first-out), and the records of
all cached blocks are also indexed in one dict, so a warm point lookup is a single hash probe; a
miss costs a bisect over the separators and one over the block. Scans read through the cache but
do not fill it, so a full pass does not evict the blocks point lookups rely on; the one block a
``seek_ge`` lands in is cached as a lookup's (seeks are lookups: a listing's skips). Safe to share
between threads: the file is immutable and the miss path is serialised by a lock.

Records are user keys (the 8-byte internal-key trailer stripped) with the value of the newest
version of each key when that version is a SET; deletions and other kinds hide older versions and
are not returned. lakeFS files only ever hold SETs with sequence number 0.

With ``verify_checksums`` (the default) every data block's CRC32C is checked when the reader opens
(measured ~0.6 ms per MB), so an opened reader is backed by intact bytes; blocks are still decoded only
when needed. ``verify_checksums=False`` skips all checksum checks (e.g. to avoid touching every page
of a huge memory-mapped file), leaving the structural checks below.

Any violation of the format (bad magic, truncation, handles outside the file, checksum mismatch,
unknown compression, bad Snappy data, malformed entries or restart arrays, bad varints, unsorted
keys) raises :class:`~lakefs_core.errors.CorruptDataError` with the file name and a byte offset.
The reader accepts any buffer (``bytes``, ``memoryview``, ``mmap``) and does no I/O itself; it holds
a memoryview of it until :meth:`TableReader.close`.

Every file is treated as hostile, checksums notwithstanding (ranges come from other regions and
other writers): nothing it claims may hang the process, exhaust memory or yield wrong records.
Besides the bounds in :mod:`.footer` (``max_block_bytes``, exact decompressed lengths) and
:mod:`.block` (entry and key-expansion bounds), the reader checks, at O(1) per block or entry:

- at open: index partitions and data blocks lie in ascending, non-overlapping file order (so no
  block is referenced twice and the work is bounded by the file size), data blocks before every
  index and meta block; separators strictly ascend across the whole index (two-level: the
  top-level entries too, and each partition ends at or below its top-level key);
- per decoded data block: it is not empty, its last key is ``<=`` its separator and its first key
  above the previous separator (equal only for older versions of a key the previous block ends
  with, as RocksDB writes them), so scans, ``seek_ge`` and ``get`` agree and keys ascend across
  blocks;
- after a full scan: the entries seen equal ``rocksdb.num.entries`` (when the file states it).
"""

from __future__ import annotations

import mmap
import threading
from bisect import bisect_left
from collections import deque
from collections.abc import Iterable, Iterator

from lakefs_core.errors import BadInputError, CorruptDataError
from lakefs_core.format.sstable.block import (
    INTERNAL_TRAILER_LEN,
    DataBlock,
    decode_block,
    decode_data_block,
    decode_index_block,
    sorts_after,
    trailer_of,
)
from lakefs_core.format.sstable.footer import (
    BLOCK_TRAILER_SIZE,
    CHECKSUM_CRC32C,
    CHECKSUM_NONE,
    DEFAULT_MAX_BLOCK_BYTES,
    FOOTER_SIZE,
    BlockHandle,
    Footer,
    decode_footer,
    decode_handle,
    read_block,
    verify_block,
)
from lakefs_core.format.sstable.properties import (
    COMPRESSION,
    INDEX_KEY_IS_USER_KEY,
    INDEX_TYPE,
    INDEX_TYPE_TWO_LEVEL,
    INDEX_VALUE_IS_DELTA_ENCODED,
    NUM_ENTRIES,
    NUM_RANGE_DELETIONS,
    PROPERTIES_BLOCK,
    RESERVED_PREFIX,
    decode_properties,
    fixed32_prop,
    uvarint_prop,
)

DEFAULT_BLOCK_CACHE_BLOCKS = 1024  # 4 MiB of 4 KiB blocks per reader
_MAX_ENTRIES_PER_BYTE = 64
_SUPPORTED_INDEX_TYPES = (0, 1, INDEX_TYPE_TWO_LEVEL)  # 1 (hash search) keeps a binary-search index

Block = DataBlock  # (user keys, values or None, entries in the block)
TableData = bytes | bytearray | memoryview | mmap.mmap


class TableReader:
    """Random access and ordered scans over one table held in memory (or memory-mapped).

    ``max_block_bytes`` bounds any one block, stored or decompressed (see :mod:`.footer`); callers
    going through :class:`~lakefs_core.committed.tables.TableCache` set it there.
    """

    def __init__(
        self,
        data: TableData,
        name: str = "<memory>",
        *,
        verify_checksums: bool = True,
        block_cache_blocks: int = DEFAULT_BLOCK_CACHE_BLOCKS,
        max_block_bytes: int = DEFAULT_MAX_BLOCK_BYTES,
    ) -> None:
        if max_block_bytes < 1:
            raise BadInputError("must be >= 1", field="max_block_bytes")
        self.name = name
        self.max_block_bytes = max_block_bytes
        view = memoryview(data)
        if view.ndim != 1 or view.itemsize != 1:
            view = view.cast("B")
        self._data = view
        self._size = len(view)  # kept: the view is released on close
        self._closed = False
        self._verify = False  # the footer and metaindex are read below, after the checksum type
        self._cache_cap = max(0, block_cache_blocks)
        self._records: dict[bytes, bytes] = {}
        self._fifo: deque[int] = deque()
        self._lock = threading.Lock()
        self.footer: Footer = decode_footer(view, name)
        self._verify = self._checksums_to_verify(verify_checksums)
        self.meta_blocks: dict[str, BlockHandle] = self._read_metaindex()
        self.properties: dict[str, bytes] = self._read_properties()
        self.user_properties: dict[str, bytes] = {
            k: v for k, v in self.properties.items() if not k.startswith(RESERVED_PREFIX)
        }
        poff = self.meta_blocks[PROPERTIES_BLOCK].offset if PROPERTIES_BLOCK in self.meta_blocks else None
        props = self.properties
        self.index_type: int = fixed32_prop(props, INDEX_TYPE, name, poff)
        # Point entries: RocksDB's rocksdb.num.entries also counts range tombstones.
        self.num_entries: int = uvarint_prop(props, NUM_ENTRIES, name, poff) - uvarint_prop(
            props, NUM_RANGE_DELETIONS, name, poff
        )
        self._entries_stated = NUM_ENTRIES in props
        self._props_offset = poff
        # len() sizes list(reader) up front, so an absurd count must not reach it. No codec packs
        # more than 64 entries (each >= 4 raw bytes) into one byte of file.
        if not 0 <= self.num_entries <= _MAX_ENTRIES_PER_BYTE * len(view):
            raise CorruptDataError(f"implausible entry count {self.num_entries}", file=name, offset=poff)
        self.compression: str = props.get(COMPRESSION, b"").decode("utf-8", "replace")
        self._key_is_user_key = uvarint_prop(props, INDEX_KEY_IS_USER_KEY, name, poff) != 0
        self._value_delta = uvarint_prop(props, INDEX_VALUE_IS_DELTA_ENCODED, name, poff) != 0
        self._seps, self._handles = self._read_index()
        self._nblocks = len(self._handles)
        self._blocks: list[Block | None] = [None] * self._nblocks
        if self._verify:
            # Check every data block now, so a reader that opened is backed by intact bytes (a
            # corrupt download fails here, before anything caches it); later reads skip the check.
            for handle in self._handles:
                verify_block(view, handle, name)
            self._verify = False

    # -- open-time parsing -------------------------------------------------------------------

    def _checksums_to_verify(self, wanted: bool) -> bool:
        ctype = self.footer.checksum_type
        if not wanted:
            return False
        if ctype != CHECKSUM_CRC32C:
            # xxHash-family checksums (newer RocksDB defaults) need a hash library the project does
            # not depend on, and "no checksum" (0) is also what one flipped bit in the footer makes
            # of a CRC32C file: refuse rather than silently skip verification.
            what = "no checksums" if ctype == CHECKSUM_NONE else f"checksum type {ctype}"
            raise CorruptDataError(
                f"cannot verify {what} (only CRC32C); open with verify_checksums=False to read anyway",
                file=self.name,
                offset=len(self._data) - FOOTER_SIZE,
            )
        return True

    def _read_metaindex(self) -> dict[str, BlockHandle]:
        handle = self.footer.metaindex
        keys, vals = decode_block(self._read(handle), self.name, handle.offset)
        out: dict[str, BlockHandle] = {}
        for key, val in zip(keys, vals, strict=True):
            meta_handle, end = decode_handle(val, 0, file=self.name, base=handle.offset)
            if end != len(val):
                raise CorruptDataError("malformed metaindex handle", file=self.name, offset=handle.offset)
            out[key.decode("utf-8", "replace")] = meta_handle
        return out

    def _read_properties(self) -> dict[str, bytes]:
        handle = self.meta_blocks.get(PROPERTIES_BLOCK)
        if handle is None:
            return {}
        return decode_properties(self._read(handle), self.name, handle.offset)

    def _read_index(self) -> tuple[list[bytes], list[BlockHandle]]:
        if self.index_type not in _SUPPORTED_INDEX_TYPES:
            raise CorruptDataError(
                f"unsupported index type {self.index_type}", file=self.name, offset=self._props_offset
            )
        top = self.footer.index
        # Data blocks precede every index and meta block in RocksDB and pebble files.
        data_end = min(
            [top.offset, self.footer.metaindex.offset, *(h.offset for h in self.meta_blocks.values())]
        )
        # A two-level index's top keys as stored: a partition's last key must not sort after its
        # own top key in the table's key order (internal keys: user key, then trailer descending).
        top_keys: list[bytes] | None = [] if self.index_type == INDEX_TYPE_TWO_LEVEL else None
        seps, handles, _ = self._decode_index(top, None, top_keys)
        if top_keys is not None:
            # Partitions in file order, apart from each other and from the top level: none is read
            # twice, so the index costs at most one pass over the file.
            self._check_layout(handles, "index partition", 0, len(self._data) - FOOTER_SIZE, avoid=top)
            all_seps: list[bytes] = []
            all_handles: list[BlockHandle] = []
            last: bytes | None = None
            trailer = 0 if self._key_is_user_key else INTERNAL_TRAILER_LEN
            for top_key, partition in zip(top_keys, handles, strict=True):
                part_seps, part_handles, last = self._decode_index(partition, last)
                if not part_seps or last is None or sorts_after(last, top_key, trailer):
                    raise CorruptDataError(
                        "index partition empty or above its top-level key",
                        file=self.name,
                        offset=partition.offset,
                    )
                all_seps += part_seps
                all_handles += part_handles
            if handles:
                data_end = min(data_end, handles[0].offset)
            seps, handles = all_seps, all_handles
        self._check_layout(handles, "data block", 0, data_end)
        return seps, handles

    def _check_layout(
        self, handles: list[BlockHandle], what: str, start: int, end: int, avoid: BlockHandle | None = None
    ) -> None:
        """Blocks ascend without overlapping (each after the previous one's trailer), inside
        ``[start, end)`` and clear of ``avoid``."""
        pos = start
        for off, size in handles:
            block_end = off + size + BLOCK_TRAILER_SIZE
            overlaps = (
                avoid is not None
                and off < avoid.offset + avoid.size + BLOCK_TRAILER_SIZE
                and avoid.offset < block_end
            )
            if off < pos or block_end > end or overlaps:
                raise CorruptDataError(
                    f"{what} (offset {off}, size {size}) overlaps another block or lies outside its region",
                    file=self.name,
                    offset=off,
                )
            pos = block_end

    def _decode_index(
        self, handle: BlockHandle, after: bytes | None, full: list[bytes] | None = None
    ) -> tuple[list[bytes], list[BlockHandle], bytes | None]:
        return decode_index_block(
            self._read(handle),
            self.name,
            handle.offset,
            full=full,
            key_is_user_key=self._key_is_user_key,
            value_delta_encoded=self._value_delta,
            after=after,
        )

    def _read(self, handle: BlockHandle) -> bytes:
        if self._closed:
            raise BadInputError("the table reader is closed", field=self.name)
        return read_block(
            self._data, handle, self.name, verify=self._verify, max_block_bytes=self.max_block_bytes
        )

    # -- data blocks -------------------------------------------------------------------------
    #
    # Cache layout, chosen for the warm point-lookup path:
    # - ``_blocks[i]``: decoded data block ``i`` or ``None``; at most ``block_cache_blocks`` are
    #   held, evicted first-in first-out (hits bypass the block list, so recency is not tracked);
    # - ``_records``: the visible records of every cached block in one dict, so a hit costs one hash
    #   probe instead of two bisects over cold memory. The file is immutable, so an entry there is
    #   always a correct answer; the lock (miss path only) keeps it in step with ``_blocks``. The
    #   compiled metarange lookup (``_fastpath.MetaRangeCore``) probes this dict itself and calls
    #   ``get`` when the key is not there: it maps user keys to values and is never rebound.

    def _routed_start(self, i: int, keys: list[bytes]) -> int:
        """Index of the first key of block ``i`` that lookups route to block ``i``: a first key
        equal to the previous separator is an older version of a key the previous block owns."""
        return 1 if i and keys and keys[0] == self._seps[i - 1] else 0

    def _load(self, i: int) -> Block:
        """Decode data block ``i`` and cache it (the point-lookup miss path)."""
        block = self._decode(i)
        if self._cache_cap == 0:
            return block
        with self._lock:
            cached = self._blocks[i]
            if cached is not None:  # another thread got here first
                return cached
            while len(self._fifo) >= self._cache_cap:
                self._evict(self._fifo.popleft())
            keys, vals, _ = block
            start = self._routed_start(i, keys)
            if start == 0 and None not in vals:
                self._records.update(zip(keys, vals, strict=True))  # type: ignore[arg-type]
            else:
                for key, value in zip(keys[start:], vals[start:], strict=True):
                    if value is not None:
                        self._records[key] = value
            self._blocks[i] = block
            self._fifo.append(i)
        return block

    def _evict(self, i: int) -> None:
        block = self._blocks[i]
        self._blocks[i] = None
        if block is not None:
            keys = block[0]
            pop = self._records.pop
            for key in keys[self._routed_start(i, keys) :]:
                pop(key, None)

    def _decode(self, i: int) -> Block:
        """Decode data block ``i`` and check it against its index separators (O(1) per block)."""
        handle = self._handles[i]
        raw = self._read(handle)
        block = decode_data_block(raw, self.name, handle.offset)
        keys = block[0]
        if not keys:
            raise CorruptDataError("data block without entries", file=self.name, offset=handle.offset)
        if keys[-1] > self._seps[i]:
            # get() routes a key to the first block whose separator is >= it: a key above its
            # separator would be returned by scans but missed by lookups.
            raise CorruptDataError(
                f"data block {i}: last key {keys[-1][:80]!r} above its index separator",
                file=self.name,
                offset=handle.offset,
            )
        if i and keys[0] <= self._seps[i - 1]:
            self._check_straddle(i, raw)
        return block

    def _check_straddle(self, i: int, raw: bytes) -> None:
        """Block ``i`` starts at (not above) the previous separator: only valid when it continues
        the previous block's last key with older versions (the rare multi-version case, never in
        lakeFS files), which lookups resolve in the previous block."""
        prev = self._handles[i - 1]
        prev_keys, _ = decode_block(self._read(prev), self.name, prev.offset)
        first_keys, _ = decode_block(raw, self.name, self._handles[i].offset)
        last, first = prev_keys[-1] if prev_keys else b"", first_keys[0]
        user_key = first[:-8]
        if user_key != self._seps[i - 1] or last[:-8] != user_key or trailer_of(first) >= trailer_of(last):
            raise CorruptDataError(
                f"data block {i}: first key {first[:-8][:80]!r} not above the previous separator",
                file=self.name,
                offset=self._handles[i].offset,
            )

    def _peek(self, i: int) -> Block:
        """Block ``i`` from the cache if there, else decoded without caching (scans)."""
        block = self._blocks[i]
        return block if block is not None else self._decode(i)

    # -- public API --------------------------------------------------------------------------

    @property
    def num_data_blocks(self) -> int:
        return self._nblocks

    @property
    def size_bytes(self) -> int:
        """The table file's size (also once closed)."""
        return self._size

    def to_bytes(self) -> bytes:
        """A copy of the whole table file (e.g. to hand it to another process)."""
        with self._lock:
            if self._closed:
                raise BadInputError("the table reader is closed", field=self.name)
            return bytes(self._data)

    def __len__(self) -> int:
        """Point entries stored (``rocksdb.num.entries`` less range tombstones): the record count
        for lakeFS files; generic files may also count deletions and hidden older versions."""
        return self.num_entries

    def get(self, user_key: bytes) -> bytes | None:
        """The value stored under ``user_key``, or ``None``. A warm hit is one dict probe."""
        value = self._records.get(user_key)
        return value if value is not None else self._lookup(user_key)

    def _lookup(self, user_key: bytes) -> bytes | None:
        i = bisect_left(self._seps, user_key)
        if i >= self._nblocks:
            return None
        block = self._blocks[i]
        if block is None:
            block = self._load(i)
        keys = block[0]
        j = bisect_left(keys, user_key)
        if j < len(keys) and keys[j] == user_key:
            return block[1][j]
        return None

    def get_many(self, user_keys: Iterable[bytes]) -> list[bytes | None]:
        """``[get(k) for k in user_keys]`` with the per-call overhead hoisted out of the loop."""
        probe = self._records.get
        lookup = self._lookup
        return [v if (v := probe(k)) is not None else lookup(k) for k in user_keys]

    def __contains__(self, user_key: object) -> bool:
        return isinstance(user_key, bytes) and self.get(user_key) is not None

    def __iter__(self) -> Iterator[tuple[bytes, bytes]]:
        return self._scan(0, None)

    def items(self) -> Iterator[tuple[bytes, bytes]]:
        """All records ``(user_key, value)`` in key order."""
        return self._scan(0, None)

    def keys(self) -> Iterator[bytes]:
        return (k for k, _ in self._scan(0, None))

    def seek_ge(self, user_key: bytes) -> Iterator[tuple[bytes, bytes]]:
        """Records with key ``>= user_key``, in key order. The block the seek lands in is read
        through the cache and kept as a point lookup's is (a listing seeks past every directory: a
        repeated one decodes each block once); the blocks after it are read as a scan's. A scan from
        the table's start keeps its first block the same way (a listing whose prefix sorts before
        the range's first key starts there)."""
        return self._scan(bisect_left(self._seps, user_key), user_key)

    def cursor(self, start: bytes | None = None) -> TableCursor:
        """A :class:`TableCursor` at the first record with key ``>= start`` (None: the table's
        start, a full pass whose entry count is checked as a scan checks it)."""
        return TableCursor(self, start)

    def _scan(self, first: int, start: bytes | None) -> Iterator[tuple[bytes, bytes]]:
        prev_last: bytes | None = None  # last key of the previous block
        entries = 0
        for b in range(first, self._nblocks):
            if b == first:  # (a listing's first block, from a seek or the table's start: kept)
                keys, vals, count = self._blocks[b] or self._load(b)
            else:
                keys, vals, count = self._peek(b)
            entries += count
            j = bisect_left(keys, start) if start is not None and b == first else 0
            # A key whose versions straddle two blocks: the newer one (already seen) wins.
            if prev_last is not None and j < len(keys) and keys[j] == prev_last:
                j += 1
            if j == 0 and None not in vals:
                yield from zip(keys, vals, strict=True)  # no None in vals: all values are bytes
            else:
                for idx in range(j, len(keys)):
                    value = vals[idx]
                    if value is not None:
                        yield keys[idx], value
            if keys:
                prev_last = keys[-1]
        if first == 0 and start is None:
            self._check_entries(entries)

    def _check_entries(self, entries: int) -> None:
        """After a full pass over the data blocks: they hold the entries the properties state."""
        if self._entries_stated and entries != self.num_entries:
            raise CorruptDataError(
                f"the data blocks hold {entries} entries, the properties state {self.num_entries}",
                file=self.name,
                offset=self._props_offset,
            )

    def min_key(self) -> bytes | None:
        """Smallest record key, or ``None`` for a table without records."""
        for key, _ in self._scan(0, None):
            return key
        return None

    def max_key(self) -> bytes | None:
        """Largest record key, or ``None`` for a table without records."""
        for b in range(self._nblocks - 1, -1, -1):
            keys, vals, _ = self._peek(b)
            for idx in range(len(keys) - 1, -1, -1):
                if idx == 0 and b > 0 and self._peek(b - 1)[0][-1:] == keys[:1]:
                    break  # an older version of the previous block's last key: decided there
                if vals[idx] is not None:
                    return keys[idx]
        return None

    def close(self) -> None:
        """Drop cached blocks and release the buffer (so an ``mmap`` can be closed)."""
        with self._lock:
            self._closed = True
            self._records.clear()
            self._fifo.clear()
            self._blocks = [None] * self._nblocks
        self._data.release()

    def __enter__(self) -> TableReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"TableReader({self.name!r}, entries={self.num_entries}, blocks={self._nblocks})"


class TableCursor:
    """A table's records in key order, seekable forward (lakeFS's ``SeekGE``) without re-reading
    what it holds: the same records as :meth:`TableReader.seek_ge` from the same key.

    A seek to a key inside the block the cursor reads is a bisect in that block, from the cursor's
    position; a seek past that block is a bisect over the separators and one in the block it lands
    in, read through the cache and kept as a lookup's (until the cursor has returned a record from
    it: a landing at a block's end keeps the next block instead). The blocks read in order after
    that are read as a scan reads them (cached ones used, others not kept). A cursor that reads
    every block (opened at the table's start, seeking only inside the block it holds) checks the
    entry count at its end as a full scan does. Seeking to a key at or before the cursor's position
    changes nothing.
    """

    __slots__ = ("_block", "_entries", "_j", "_keep", "_keys", "_reader", "_vals")

    def __init__(self, reader: TableReader, start: bytes | None) -> None:
        self._reader = reader
        self._keys: list[bytes] = []
        self._vals: list[bytes | None] = []
        self._j = 0
        self._block = -1
        self._keep = True
        self._entries = -1  # entries of the blocks read, while this is a full pass (-1: it is not)
        if start is None:
            self._entries = 0
            self._enter(0, None)
        else:
            self._land(start)

    def _land(self, key: bytes) -> None:
        self._entries, self._keep = -1, True
        self._enter(bisect_left(self._reader._seps, key), key)

    def _enter(self, b: int, start: bytes | None) -> None:
        """Read block ``b`` from ``start`` (None: after the previous block, as a scan goes on)."""
        reader = self._reader
        if b >= reader._nblocks:
            if self._entries >= 0:
                reader._check_entries(self._entries)
            self._block, self._keys, self._vals, self._j = reader._nblocks, [], [], 0
            return
        cached = reader._blocks[b]
        keys, vals, count = cached or (reader._load(b) if self._keep else reader._decode(b))
        if self._entries >= 0:
            self._entries += count
        if start is not None:
            j = bisect_left(keys, start)
        else:
            # A key whose versions straddle two blocks: the newer one (already seen) wins.
            prev = self._keys
            j = 1 if prev and keys and keys[0] == prev[-1] else 0
        self._block, self._keys, self._vals, self._j = b, keys, vals, j

    def seek_ge(self, key: bytes) -> None:
        keys, j = self._keys, self._j
        if j < len(keys):
            if key <= keys[j]:
                return  # at or before the position
            if key <= keys[-1]:
                self._j = bisect_left(keys, key, j + 1)
                return
        elif not keys or key <= keys[-1]:
            return  # the end, or before the position (after this block)
        self._land(key)

    def next(self) -> tuple[bytes, bytes] | None:
        """The next record ``(user key, value)``, or None at the table's end."""
        while True:
            keys, vals, j = self._keys, self._vals, self._j
            n = len(keys)
            while j < n:
                value = vals[j]
                j += 1
                if value is not None:
                    self._j, self._keep = j, False
                    return keys[j - 1], value
            if self._block >= self._reader._nblocks:
                self._j = j
                return None
            self._j = j
            self._enter(self._block + 1, None)
