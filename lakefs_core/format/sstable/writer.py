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

:meth:`TableWriter.add` is the per-record cost of every range written, so it builds the open data
block itself (not through :class:`~.block.BlockBuilder`, which serves the index, properties and
metaindex blocks): shared prefixes come from the user keys without materialising internal keys,
entry headers from a precomputed uvarint table, and the flush rule and size estimate from two
running sums, so a record away from a block boundary costs one comparison for them. The output is
byte-for-byte what the straightforward builder wrote; tests/format/test_writer_bytes.py pins it.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from lakefs_core.errors import BadInputError
from lakefs_core.format.accel import FASTPATH
from lakefs_core.format.envelope import encode_envelope
from lakefs_core.format.splitter import SplitPolicy
from lakefs_core.format.sstable.block import INTERNAL_TRAILER_LEN, BlockBuilder
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
from lakefs_core.format.varint import encode_uvarint, uvarint_len

SET_TRAILER = b"\x01\x00\x00\x00\x00\x00\x00\x00"  # seqnum 0, kind SET
SEPARATOR_TRAILER = b"\x11\xff\xff\xff\xff\xff\xff\xff"  # seqnum 2**56-1, kind 17 (separator)
_COMPRESSIONS = {"snappy": COMPRESSION_SNAPPY, "none": COMPRESSION_NONE}
_HANDLE_ESTIMATE = 20  # pebble's estimate of an encoded handle (two max-length uvarints)
_FLUSH_PERCENT = 90
# Every uvarint below 2**14 (at most two bytes), precomputed: entry headers are three of them per
# record, and a table lookup is several times cheaper than encoding. Built from the two-byte form
# (low seven bits with the continuation bit, then the rest) at import by every process that writes
# or reads tables: 5 ms, where calling encode_uvarint 16,384 times took 16.
_UVARINT_TABLE_SIZE = 1 << 14
_UVARINTS = tuple(
    [bytes((i,)) for i in range(0x80)]
    + [bytes((low | 0x80, high)) for high in range(1, 0x80) for low in range(0x80)]
)
_from_bytes = int.from_bytes  # big-endian by default (Python 3.11+)
# add_record hands the table-id input to SHA-256 in chunks of this size (as _fastpath does; the
# digest does not depend on the chunking).
ID_INPUT_CHUNK = 65536
# Until set_split_policy: every record ends its range (estimate >= 1).
_SPLIT_UNSET = SplitPolicy(max_range_size_bytes=1, range_raggedness_entries=1)


def shortest_separator(start: bytes, limit: bytes) -> bytes:
    """A short user key ``s`` with ``start <= s < limit`` (RocksDB bytewise ``FindShortestSeparator``)."""
    n = min(len(start), len(limit))
    head = start[:n]
    if head == limit[:n]:  # one is a prefix of the other: no shorter separator exists
        return start
    # The first differing byte, from the XOR of the prefixes read as big-endian integers.
    i = n - ((_from_bytes(head) ^ _from_bytes(limit[:n])).bit_length() + 7) // 8
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


class _PyTableCore:
    """The open data block and per-record counters of :class:`TableWriter`, with the pure-Python
    per-record path. When the optional extension ``_fastpath`` is built, its ``TableCore`` (the same
    fields, the same bytes, in C) is the base class instead; see :data:`ACCELERATED`."""

    _buf: bytearray
    _restarts: list[int]
    _last_key: bytes
    _first_key: bytes
    _counter: int
    _interval: int
    _entries: int
    _raw_key_size: int
    _raw_value_size: int
    _base: int
    _room: int
    _finished: bool
    _id_input: bytearray | None
    _id_update: Callable[[bytearray], object]
    _split_policy: SplitPolicy

    def add(self, user_key: bytes, value: bytes) -> int:
        """Append a record; ``user_key`` must sort strictly after the previous one.

        Returns :meth:`estimated_size` after the record, which writers that cut files by size need
        after every record anyway.
        """
        last = self._last_key
        if user_key <= last and (self._entries or self._finished):
            self._refuse(user_key)
        klen = len(user_key) + INTERNAL_TRAILER_LEN
        vlen = len(value)
        buf = self._buf
        if len(buf) > self._room:  # rare: the block is near full (or the writer is finished)
            buf = self._make_room(user_key, klen, vlen)
        counter = self._counter
        if not counter:
            shared = 0  # first entry of a block: its restart offset 0 is already recorded
            if not self._entries:
                self._first_key = user_key
        elif counter < self._interval:
            if len(last) + INTERNAL_TRAILER_LEN == klen:  # usual: equal lengths, no slicing
                diff = _from_bytes(last) ^ _from_bytes(user_key)
                shared = klen - INTERNAL_TRAILER_LEN - (diff.bit_length() + 7) // 8
            else:
                shared = _shared_prefix(last, user_key)
        else:
            self._restarts.append(len(buf))
            self._base += 4
            self._room -= 4
            counter = shared = 0
        unshared = klen - shared
        if (shared | unshared | vlen) < _UVARINT_TABLE_SIZE:  # the table size is a power of 2
            buf += _UVARINTS[shared]
            buf += _UVARINTS[unshared]
            buf += _UVARINTS[vlen]
        else:
            buf += encode_uvarint(shared) + encode_uvarint(unshared) + encode_uvarint(vlen)
        # shared <= len(user_key) always (see _shared_prefix), so the trailer is never shared.
        buf += user_key[shared:]
        buf += SET_TRAILER
        buf += value
        self._counter = counter + 1
        self._last_key = user_key
        self._entries += 1
        self._raw_key_size += klen
        self._raw_value_size += vlen
        return self._base + len(buf)

    def add_record(self, user_key: bytes, identity: bytes, data: bytes) -> int:
        """:meth:`add` of a lakeFS range record: the value is the envelope of ``identity`` and
        ``data`` (spec section 3). The record's table-id input (``len(key) key | len(value) value |``,
        spec section 4) is appended to the id sink's buffer (:meth:`TableWriter.set_id_sink`),
        which is passed to its ``update`` (the id's SHA-256) and emptied each time it reaches
        64 KiB. Returns the estimate, as :meth:`add`."""
        id_input = self._id_input
        if id_input is None:
            raise TypeError("add_record needs an id sink (TableWriter.set_id_sink)")
        value = encode_envelope(identity, data)
        estimate = self.add(user_key, value)
        id_input += b"%d%b|%d%b|" % (len(user_key), user_key, len(value), value)
        if len(id_input) >= ID_INPUT_CHUNK:
            self._id_update(id_input)
            id_input.clear()
        return estimate

    def add_record_split(self, user_key: bytes, identity: bytes, data: bytes) -> bool:
        """:meth:`add_record`, then :meth:`~lakefs_core.format.splitter.SplitPolicy.should_break`
        for the estimate after it, with the policy of :meth:`TableWriter.set_split_policy`: True
        when the range ends at this record. (One call per record for range writers.)"""
        return self._split_policy.should_break(user_key, self.add_record(user_key, identity, data))

    def add_value_split(self, record: tuple[bytes, bytes, bytes]) -> bool:
        """:meth:`add_record_split` of a ``ValueRecord`` (a ``(key, identity, data)`` tuple): the
        bulk write path's one call per record."""
        if not isinstance(record, tuple) or len(record) != 3:
            raise TypeError("a record is a (key, identity, data) tuple")
        key, identity, data = record
        if not (isinstance(key, bytes) and isinstance(identity, bytes) and isinstance(data, bytes)):
            raise TypeError("a record's key, identity and data must be bytes")
        return self.add_record_split(key, identity, data)

    def _refuse(self, user_key: bytes) -> None:
        raise NotImplementedError

    def _make_room(self, user_key: bytes, klen: int, vlen: int) -> bytearray:
        raise NotImplementedError


class PureTableWriter(_PyTableCore):
    """Builds one table in memory. Use: ``add`` records in ascending key order, then ``finish``.

    This is the pure-Python writer; :data:`TableWriter` is the one to use (the same class with the
    compiled per-record path first in its bases, where the extension is built).
    """

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
        self._interval = block_restart_interval
        self._index = _IndexBuilder(index_partition_size)
        self._chunks: list[bytes] = []
        self._offset = 0
        self._last_key = b""
        self._first_key = b""
        self._id_input = None
        self.set_split_policy(_SPLIT_UNSET)
        self._entries = 0
        self._raw_key_size = 0
        self._raw_value_size = 0
        self._data_blocks = 0
        self._finished = False
        # The open data block: entries area, restart offsets, entries since the last restart.
        self._buf = bytearray()
        self._restarts = [0]
        self._counter = 0
        # Two sums keep the per-record path to one comparison and one addition:
        # estimated_size() == _base + len(_buf), and the flush rule can only fire once
        # len(_buf) > _room (the block's estimate has reached the 90% threshold).
        self._base = 0
        self._room = 0
        self._block_opened()

    def _block_opened(self) -> None:
        self._base = self._offset + self._index.estimated_size() + 4 + 4 * len(self._restarts)
        self._room = self._threshold - 4 * len(self._restarts) - 5

    @property
    def entry_count(self) -> int:
        """Records added so far."""
        return self._entries

    def set_split_policy(self, policy: SplitPolicy) -> None:
        """The range split policy :meth:`add_record_split` decides with (the compiled path reads
        its three numbers)."""
        self._split_policy = policy
        self._split_min = policy.min_range_size_bytes
        self._split_max = policy.max_range_size_bytes
        self._split_every = policy.range_raggedness_entries

    def set_id_sink(self, buffer: bytearray, update: Callable[[bytearray], object]) -> None:
        """Where :meth:`add_record` puts each record's table-id input: ``buffer``, handed to
        ``update`` and emptied each time it reaches 64 KiB (``TableIdHasher.pending``/``feed``)."""
        self._id_input = buffer
        self._id_update = update

    @property
    def first_key(self) -> bytes:
        """The first record's user key (``b""`` before any record)."""
        return self._first_key

    @property
    def last_key(self) -> bytes:
        """The last record's user key (``b""`` before any record)."""
        return self._last_key

    def estimated_size(self) -> int:
        """Running estimate of the file size: written blocks plus the open data and index blocks."""
        return self._base + len(self._buf)

    def _refuse(self, user_key: bytes) -> None:
        if self._finished:
            raise BadInputError("writer is already finished", field="user_key")
        raise BadInputError(
            f"keys must be strictly ascending: {user_key!r} after {self._last_key!r}",
            field=user_key.decode("utf-8", "backslashreplace"),
        )

    def _make_room(self, user_key: bytes, klen: int, vlen: int) -> bytearray:
        """pebble's flush rule (as :meth:`BlockBuilder.should_flush`): flush the block before this
        entry once it is full, or past the 90% threshold with the entry pushing it over the target.
        A flushed block is indexed at once, its separator taken between its last key and this one."""
        if self._finished:
            self._refuse(user_key)
        size = len(self._buf) + 4 * len(self._restarts) + 4
        if self._counter and (
            size >= self._block_size
            or (
                size > self._threshold
                and size
                + klen
                + vlen
                + 4
                + uvarint_len(klen)
                + uvarint_len(vlen)
                + (4 if self._counter >= self._interval else 0)
                > self._block_size
            )
        ):
            self._cut_block(user_key)
        return self._buf

    def _cut_block(self, next_key: bytes) -> None:
        """Flush the open data block and index it (the compiled path flushes itself, then calls
        :meth:`_index_block`)."""
        handle = self._flush_data_block()
        self._index_block(next_key, handle.offset, handle.size)

    def _index_block(self, next_key: bytes, offset: int, size: int) -> None:
        """Index a flushed data block, its separator taken between its last key and ``next_key``."""
        last = self._last_key
        self._index.add(_index_key(last, shortest_separator(last, next_key)), BlockHandle(offset, size))
        self._block_opened()

    def _flush_data_block(self) -> BlockHandle:
        restarts = self._restarts
        self._buf += struct.pack(f"<{len(restarts) + 1}I", *restarts, len(restarts))
        handle = self._write_block(bytes(self._buf), self._compression)
        self._buf = bytearray()
        self._restarts = [0]
        self._counter = 0
        self._data_blocks += 1
        return handle

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
        self._room = -1  # every later add takes the slow path, which refuses it
        if self._counter:
            last = self._last_key
            self._index.add(_index_key(last, short_successor(last)), self._flush_data_block())
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


if TYPE_CHECKING or FASTPATH is None:
    TableWriter = PureTableWriter
else:

    class TableWriter(FASTPATH.TableCore, PureTableWriter):
        """:class:`PureTableWriter` with ``add``, ``add_record``, ``add_record_split`` and
        ``add_value_split`` (and the data-block flush they trigger) from the compiled ``TableCore``:
        the same bytes and decisions, about twice as fast."""


#: True when :data:`TableWriter` uses the compiled per-record path (the extension is built and
#: ``LAKEFS_PURE_PYTHON=1`` is not set).
ACCELERATED = TableWriter is not PureTableWriter


def _shared_prefix(last: bytes, key: bytes) -> int:
    """Length of the common prefix of the internal keys of ``last`` < ``key`` (user keys).

    The XOR of the two keys read as big-endian integers has its highest set bit in the first
    differing byte: C speed instead of a Python loop. Keys of one range usually have equal lengths,
    which needs no slicing at all.
    """
    n = len(last)
    m = len(key)
    if n == m:
        diff = _from_bytes(last) ^ _from_bytes(key)
    elif n < m:
        diff = _from_bytes(last) ^ _from_bytes(key[:n])
    else:
        n = m
        diff = _from_bytes(last[:m]) ^ _from_bytes(key)
    if diff:
        return n - (diff.bit_length() + 7) // 8
    # ``last`` is a proper prefix of ``key``: the match may run on into ``last``'s trailer, but
    # never past ``key`` itself: ``key``'s trailer starts with 0x01 where ``last``'s trailer
    # continues with 0x00, so the internal keys differ at ``len(key)`` at the latest.
    ilast = last + SET_TRAILER
    ikey = key + SET_TRAILER
    i = n
    end = len(ilast)
    while i < end and ilast[i] == ikey[i]:
        i += 1
    return i
