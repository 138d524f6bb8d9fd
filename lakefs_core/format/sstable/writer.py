"""Writes RocksDB block-based tables the way pebble writes lakeFS ranges and metaranges.

:class:`TableWriter` takes records in strictly ascending user-key order and returns the whole file
from :meth:`TableWriter.finish`. The layout (spec section 2):

- data blocks (restart interval 16, target ``block_size`` with pebble's 90% flush rule), keys are
  internal keys ``user_key || 01 00 00 00 00 00 00 00`` (seqnum 0, kind SET);
- the index: separators shortened like RocksDB's bytewise ``FindShortestSeparator`` /
  ``FindShortSuccessor`` with trailer ``11 ff ff ff ff ff ff ff`` when shortened, restart interval 1;
  one block (index type 0) unless it outgrows ``index_partition_size``, in which case it is cut
  into partitions followed by a top-level index of partition handles (index type 2), as pebble does;
- the properties block (standard ``rocksdb.*`` properties plus the caller's user properties), then
  the metaindex (only ``rocksdb.properties``), then the 53-byte footer (format version 2, CRC32C).

Data and index blocks are Snappy-compressed when that saves at least 1/8; properties and metaindex
blocks are stored uncompressed, as RocksDB does. Caller mistakes (unsorted keys, reserved property
names, bad options) raise :class:`~lakefs_core.errors.BadInputError`. Pure: builds bytes in memory.
"""

from __future__ import annotations

from collections.abc import Mapping

from lakefs_core.errors import BadInputError
from lakefs_core.format.sstable.block import BlockBuilder
from lakefs_core.format.sstable.footer import (
    BLOCK_TRAILER_SIZE,
    CHECKSUM_CRC32C,
    COMPRESSION_NAMES,
    COMPRESSION_NONE,
    COMPRESSION_SNAPPY,
    WRITE_FORMAT_VERSION,
    BlockHandle,
    Footer,
    block_trailer,
    compress_block,
    encode_handle,
)
from lakefs_core.format.sstable.properties import (
    PROPERTIES_BLOCK,
    TableStats,
    check_user_properties,
    encode_properties,
    standard_properties,
)

SET_TRAILER = b"\x01\x00\x00\x00\x00\x00\x00\x00"  # seqnum 0, kind SET
SEPARATOR_TRAILER = b"\x11\xff\xff\xff\xff\xff\xff\xff"  # seqnum 2**56-1, kind 17 (separator)
_COMPRESSIONS = {"snappy": COMPRESSION_SNAPPY, "none": COMPRESSION_NONE}
_HANDLE_ESTIMATE = 20  # pebble's estimate of an encoded handle (two max-length uvarints)
_FLUSH_PERCENT = 90


def shortest_separator(start: bytes, limit: bytes) -> bytes:
    """A short user key ``s`` with ``start <= s < limit`` (RocksDB bytewise ``FindShortestSeparator``)."""
    n = min(len(start), len(limit))
    i = 0
    while i < n and start[i] == limit[i]:
        i += 1
    if i >= n:  # one is a prefix of the other: no shorter separator exists
        return start
    if start[i] >= limit[i]:
        return start
    if i < len(limit) - 1 or start[i] + 1 < limit[i]:
        return start[:i] + bytes((start[i] + 1,))
    # Incrementing start[i] would reach limit itself: keep it and bump the first later non-0xff byte.
    for j in range(i + 1, len(start)):
        if start[j] < 0xFF:
            return start[:j] + bytes((start[j] + 1,))
    return start


def short_successor(key: bytes) -> bytes:
    """A short user key ``>= key`` (RocksDB bytewise ``FindShortSuccessor``)."""
    for i, b in enumerate(key):
        if b != 0xFF:
            return key[:i] + bytes((b + 1,))
    return key


def _index_key(last_user_key: bytes, candidate: bytes) -> bytes:
    # Use the shortened key only when it is physically no longer yet sorts after the block's last key;
    # otherwise the block's last internal key itself is the separator (RocksDB/pebble rule).
    if len(candidate) <= len(last_user_key) and last_user_key < candidate:
        return candidate + SEPARATOR_TRAILER
    return last_user_key + SET_TRAILER


class _IndexBuilder:
    """Index entries, cut into partitions of about ``partition_size`` bytes as pebble does."""

    def __init__(self, partition_size: int) -> None:
        self._size = partition_size
        self._threshold = (partition_size * _FLUSH_PERCENT + 99) // 100
        self._current = BlockBuilder(1)
        self._last_sep = b""
        self._finished_bytes = 0
        self.partitions: list[tuple[bytes, bytes]] = []  # (last separator, partition contents)

    def add(self, sep: bytes, handle: BlockHandle) -> None:
        if self._current.should_flush(len(sep), _HANDLE_ESTIMATE, self._size, self._threshold):
            self._cut()
        self._current.add(sep, encode_handle(handle))
        self._last_sep = sep

    def _cut(self) -> None:
        block = self._current.finish()
        self.partitions.append((self._last_sep, block))
        self._finished_bytes += len(block)
        self._current.reset()

    def estimated_size(self) -> int:
        # An empty open block counts 4 bytes (its restart count), as in pebble's estimate; with it a
        # rewrite of a pebble file reproduces pebble's ``estimated_size_bytes``.
        current = self._current.estimated_size() if self._current.entries else 4
        return self._finished_bytes + current

    def finish(self) -> tuple[bytes | None, list[tuple[bytes, bytes]]]:
        """``(single index block, [])`` or ``(None, partitions)`` for a two-level index."""
        if not self.partitions:
            return self._current.finish(), []
        if self._current.entries:
            self._cut()
        return None, self.partitions


class TableWriter:
    """Builds one table in memory. Use: ``add`` records in ascending key order, then ``finish``."""

    def __init__(
        self,
        *,
        compression: str = "snappy",
        block_size: int = 4096,
        block_restart_interval: int = 16,
        index_partition_size: int = 4096,
    ) -> None:
        if compression not in _COMPRESSIONS:
            raise BadInputError(f"must be one of {sorted(_COMPRESSIONS)}", field="compression")
        for name, value in (
            ("block_size", block_size),
            ("block_restart_interval", block_restart_interval),
            ("index_partition_size", index_partition_size),
        ):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise BadInputError("must be a positive integer", field=name)
        self._compression = _COMPRESSIONS[compression]
        self._block_size = block_size
        self._threshold = (block_size * _FLUSH_PERCENT + 99) // 100
        self._block = BlockBuilder(block_restart_interval)
        self._index = _IndexBuilder(index_partition_size)
        self._chunks: list[bytes] = []
        self._offset = 0
        self._last_key: bytes | None = None
        self._pending: BlockHandle | None = None  # last flushed block, awaiting its separator
        self._entries = 0
        self._raw_key_size = 0
        self._raw_value_size = 0
        self._data_blocks = 0
        self._finished = False

    @property
    def entry_count(self) -> int:
        """Records added so far."""
        return self._entries

    def estimated_size(self) -> int:
        """Running estimate of the file size: written blocks plus the open data and index blocks."""
        return self._offset + self._block.estimated_size() + self._index.estimated_size()

    def add(self, user_key: bytes, value: bytes) -> None:
        """Append a record; ``user_key`` must sort strictly after the previous one."""
        if self._finished:
            raise BadInputError("writer is already finished", field="user_key")
        last = self._last_key
        if last is not None and user_key <= last:
            raise BadInputError(
                f"keys must be strictly ascending: {user_key!r} after {last!r}",
                field=user_key.decode("utf-8", "backslashreplace"),
            )
        ikey = user_key + SET_TRAILER
        block = self._block
        if block.should_flush(len(ikey), len(value), self._block_size, self._threshold):
            self._flush_data_block()
        if self._pending is not None:
            assert last is not None  # a block was flushed, so a key precedes this one
            self._index.add(_index_key(last, shortest_separator(last, user_key)), self._pending)
            self._pending = None
        block.add(ikey, value)
        self._last_key = user_key
        self._entries += 1
        self._raw_key_size += len(ikey)
        self._raw_value_size += len(value)

    def _flush_data_block(self) -> None:
        self._pending = self._write_block(self._block.finish(), self._compression)
        self._block.reset()
        self._data_blocks += 1

    def _write_block(self, raw: bytes, compression: int) -> BlockHandle:
        payload, ctype = compress_block(raw, compression)
        handle = BlockHandle(self._offset, len(payload))
        self._chunks.append(payload)
        self._chunks.append(block_trailer(payload, ctype))
        self._offset += len(payload) + BLOCK_TRAILER_SIZE
        return handle

    def finish(self, user_properties: Mapping[str, bytes] | None = None) -> bytes:
        """Close the table and return the complete file. The writer cannot be used afterwards."""
        if self._finished:
            raise BadInputError("writer is already finished", field="user_properties")
        user_props = dict(user_properties or {})
        check_user_properties(user_props)
        self._finished = True
        if self._block.entries:
            self._flush_data_block()
        if self._pending is not None:
            assert self._last_key is not None
            last = self._last_key
            self._index.add(_index_key(last, short_successor(last)), self._pending)
        data_size = self._offset
        index_handle, partitions, top_size = self._write_index()
        stats = TableStats(
            num_entries=self._entries,
            raw_key_size=self._raw_key_size,
            raw_value_size=self._raw_value_size,
            data_size=data_size,
            index_size=self._offset - data_size,
            num_data_blocks=self._data_blocks,
            compression_name=COMPRESSION_NAMES[self._compression],
            index_partitions=partitions,
            top_level_index_size=top_size,
        )
        props = standard_properties(stats)
        props.update({k: bytes(v) for k, v in user_props.items()})
        props_handle = self._write_block(encode_properties(props), COMPRESSION_NONE)
        metaindex = BlockBuilder(1)
        metaindex.add(PROPERTIES_BLOCK.encode(), encode_handle(props_handle))
        metaindex_handle = self._write_block(metaindex.finish(), COMPRESSION_NONE)
        footer = Footer(CHECKSUM_CRC32C, metaindex_handle, index_handle, WRITE_FORMAT_VERSION)
        self._chunks.append(footer.encode())
        out = b"".join(self._chunks)
        self._chunks = []
        return out

    def _write_index(self) -> tuple[BlockHandle, int, int]:
        """Write the index; return its handle, the partition count (0: one level) and top-level size."""
        single, partitions = self._index.finish()
        if single is not None:
            return self._write_block(single, self._compression), 0, 0
        top = BlockBuilder(1)
        for last_sep, contents in partitions:
            top.add(last_sep, encode_handle(self._write_block(contents, self._compression)))
        start = self._offset
        handle = self._write_block(top.finish(), self._compression)
        return handle, len(partitions), self._offset - start
