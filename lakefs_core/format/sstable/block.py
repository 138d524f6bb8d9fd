"""Block contents: prefix-compressed entries followed by a restart array (spec section 2).

Each entry is ``uvarint shared || uvarint unshared || uvarint value_len || key[shared:] || value``,
where ``shared`` is the length of the prefix taken from the previous entry's key. Every
``restart_interval`` entries the prefix chain restarts (``shared = 0``) and the entry's offset goes
into the restart array: ``uint32 LE`` offsets, then ``uint32 LE`` count.

Provided here:

- :class:`BlockBuilder`, the writer side, with RocksDB's size estimate and pebble's flush rule;
- :func:`decode_block` (plain keys and values: metaindex, properties),
  :func:`decode_data_block` (internal keys → user keys and visible values) and
  :func:`decode_index_block` (separators → block handles, including RocksDB's format 3-5 variants:
  user-key separators and delta-encoded handles).

Decoders accept only ``bytes`` (callers materialise a block once) and raise
:class:`~lakefs_core.errors.CorruptDataError` naming the file and the block's file offset for any
malformed entry or restart array. They treat every block as hostile, at O(1) cost per entry:

- an entry's shared prefix may not exceed the previous key, and its key and value must end inside
  the entries area (before the restart array);
- prefix compression may not inflate keys without bound: the shared bytes of one block may total at
  most :data:`KEY_EXPANSION` times the block's size. A block of restart interval ``R`` shares less
  than ``R - 1`` times its size (each shared byte was stored once in its restart run), so real
  files (interval 16 for data, 1 for index and meta blocks) never come near; a crafted block whose
  every entry re-shares a growing key (quadratic memory) is refused;
- keys strictly increase as internal keys: data keys by user key, equal user keys only with a
  strictly smaller trailer (an older version); index separators likewise (strictly, for user-key
  separators), also across index partitions (``after``: the last key of the previous partition).

Pure: no I/O.
"""

from __future__ import annotations

import struct
from itertools import pairwise

from lakefs_core.errors import CorruptDataError
from lakefs_core.format.sstable.footer import BLOCK_TRAILER_SIZE, BlockHandle, decode_handle
from lakefs_core.format.varint import decode_uvarint, decode_varint, encode_uvarint, uvarint_len

INTERNAL_TRAILER_LEN = 8
KIND_SET = 1
# A data block whose restart count has the top bit set also carries a hash index (RocksDB's
# kDataBlockBinaryAndHash), but only blocks up to 64 KiB use that packing.
_HASH_INDEX_FLAG = 0x80000000
_MAX_HASH_INDEX_BLOCK = 1 << 16
# Bound on the bytes one block's entries may take from their predecessors' keys, per block byte.
KEY_EXPANSION = 16

DataBlock = tuple[list[bytes], list[bytes | None], int]


def trailer_of(ikey: bytes) -> int:
    """The internal key's trailer, ``(seqnum << 8) | kind``, as an integer (key order: descending)."""
    return int.from_bytes(ikey[-INTERNAL_TRAILER_LEN:], "little")


class BlockBuilder:
    """Builds one block. ``add`` keys must already be in the block's order (not checked here)."""

    __slots__ = ("_buf", "_counter", "_interval", "_last_key", "_restarts", "entries")

    def __init__(self, restart_interval: int) -> None:
        self._interval = restart_interval
        self._buf = bytearray()
        self._restarts = [0]
        self._counter = 0
        self._last_key = b""
        self.entries = 0

    def reset(self) -> None:
        self._buf = bytearray()
        self._restarts = [0]
        self._counter = 0
        self._last_key = b""
        self.entries = 0

    def add(self, key: bytes, value: bytes) -> None:
        # The writer's per-record hot path, so the usual one-byte header is built inline.
        buf = self._buf
        if self._counter < self._interval:
            last = self._last_key  # b"" for the first entry, so nothing is shared
            n = min(len(last), len(key))
            if last[:n] == key[:n]:
                shared = n
            else:
                # XOR of the big-endian integers: its highest set bit marks the first differing
                # byte. C speed, instead of a Python loop over the bytes.
                diff = int.from_bytes(last[:n], "big") ^ int.from_bytes(key[:n], "big")
                shared = n - (diff.bit_length() + 7) // 8
        else:
            self._restarts.append(len(buf))
            self._counter = 0
            shared = 0
        unshared = len(key) - shared
        vlen = len(value)
        if (shared | unshared | vlen) < 0x80:
            buf += bytes((shared, unshared, vlen))
        else:
            buf += encode_uvarint(shared) + encode_uvarint(unshared) + encode_uvarint(vlen)
        buf += key[shared:]
        buf += value
        self._last_key = key
        self._counter += 1
        self.entries += 1

    def estimated_size(self) -> int:
        """Size of :meth:`finish`'s output if called now (RocksDB ``CurrentSizeEstimate``)."""
        return len(self._buf) + 4 * len(self._restarts) + 4

    def should_flush(self, key_len: int, value_len: int, target: int, threshold: int) -> bool:
        """pebble's rule: flush before an entry once the block is full, or is past ``threshold``
        (90% of ``target``) and the entry would push it over ``target``."""
        if self.entries == 0:
            return False
        size = len(self._buf) + 4 * len(self._restarts) + 4  # estimated_size(), inlined
        if size >= target:
            return True
        if size <= threshold:
            return False
        new_size = size + key_len + value_len + 4 + uvarint_len(key_len) + uvarint_len(value_len)
        if self._counter >= self._interval:
            new_size += 4
        return new_size > target

    def finish(self) -> bytes:
        restarts = self._restarts
        tail = struct.pack(f"<{len(restarts) + 1}I", *restarts, len(restarts))
        return bytes(self._buf) + tail


def _corrupt(msg: str, file: str, base: int, pos: int | None = None) -> CorruptDataError:
    where = f" at block byte {pos}" if pos is not None else ""
    return CorruptDataError(f"malformed block: {msg}{where}", file=file, offset=base)


def _key_bomb(file: str, base: int, pos: int) -> CorruptDataError:
    return _corrupt(f"shared key prefixes exceed {KEY_EXPANSION}x the block size", file, base, pos)


def restart_points(block: bytes, file: str, base: int) -> tuple[int, tuple[int, ...]]:
    """Validate the restart array; return ``(end of the entries, restart offsets)``."""
    n = len(block)
    if n < 4:
        raise _corrupt(f"block of {n} bytes has no restart count", file, base)
    (num,) = struct.unpack_from("<I", block, n - 4)
    tail = n - 4
    if num & _HASH_INDEX_FLAG and n <= _MAX_HASH_INDEX_BLOCK:
        num &= ~_HASH_INDEX_FLAG
        if tail < 2:
            raise _corrupt("truncated data block hash index", file, base)
        (buckets,) = struct.unpack_from("<H", block, tail - 2)
        tail -= 2 + buckets
    limit = tail - 4 * num
    if limit < 0:
        raise _corrupt(f"restart array ({num} restarts) larger than the block ({n} bytes)", file, base)
    restarts: tuple[int, ...] = struct.unpack_from(f"<{num}I", block, limit)
    if limit == 0:
        if any(restarts):
            raise _corrupt("restart offset in an empty block", file, base)
    elif not restarts or restarts[0] != 0 or restarts[-1] >= limit:
        raise _corrupt("restart array out of bounds", file, base, limit)
    elif any(a >= b for a, b in pairwise(restarts)):
        raise _corrupt("restart offsets not ascending", file, base, limit)
    return limit, restarts


def _slow_header(block: bytes, p: int, file: str, base: int) -> tuple[int, int, int, int]:
    shared, q = decode_uvarint(block, p, file=file, base=base)
    unshared, q = decode_uvarint(block, q, file=file, base=base)
    vlen, q = decode_uvarint(block, q, file=file, base=base)
    return shared, unshared, vlen, q


def decode_block(block: bytes, file: str, base: int) -> tuple[list[bytes], list[bytes]]:
    """All ``(key, value)`` entries of a block, keys exactly as stored (no trailer handling)."""
    limit, _ = restart_points(block, file, base)
    keys: list[bytes] = []
    vals: list[bytes] = []
    budget = KEY_EXPANSION * len(block)
    prev = b""
    p = 0
    while p < limit:
        shared, unshared, vlen, start = _slow_header(block, p, file, base)
        kend = start + unshared
        vend = kend + vlen
        if vend > limit or shared > len(prev):
            raise _corrupt("entry overruns the block or its shared prefix", file, base, p)
        budget -= shared
        if budget < 0:
            raise _key_bomb(file, base, p)
        prev = prev[:shared] + block[start:kend]
        keys.append(prev)
        vals.append(block[kend:vend])
        p = vend
    return keys, vals


def decode_data_block(block: bytes, file: str, base: int) -> DataBlock:
    """Decode a data block into parallel lists of user keys and values, plus its entry count.

    Keys are internal keys (user key + 8-byte trailer); only the newest version of each user key in
    the block is kept. Its value is ``None`` unless its kind is SET (1): deletions (and kinds this
    reader cannot resolve, such as merge operands) hide older versions but are not records. The
    count is of all entries (hidden versions included), what ``rocksdb.num.entries`` counts. Keys
    must strictly ascend as internal keys; anything else is corruption.

    This is the reader's cache-miss hot path, so the common single-byte header is decoded inline and
    the hostile-input checks cost a comparison or two per entry.
    """
    limit, _ = restart_points(block, file, base)
    keys: list[bytes] = []
    vals: list[bytes | None] = []
    kapp = keys.append
    vapp = vals.append
    budget = KEY_EXPANSION * len(block)
    hidden = 0
    prev = b""
    last_uk = b""
    p = 0
    while p < limit:
        # Inline decoding of the usual header: one-byte shared/unshared, one- or two-byte value
        # length (lakeFS values are ~100-300 bytes). p < limit <= len - 4 keeps p + 3 in range.
        shared = block[p]
        unshared = block[p + 1]
        vlen = block[p + 2]
        if (shared | unshared) < 0x80:
            if vlen < 0x80:
                start = p + 3
            elif block[p + 3] < 0x80:
                vlen = (vlen & 0x7F) | (block[p + 3] << 7)
                start = p + 4
            else:
                shared, unshared, vlen, start = _slow_header(block, p, file, base)
        else:
            shared, unshared, vlen, start = _slow_header(block, p, file, base)
        kend = start + unshared
        vend = kend + vlen
        if vend > limit or shared > len(prev) or (budget := budget - shared) < 0:
            if budget < 0:
                raise _key_bomb(file, base, p)
            raise _corrupt("entry overruns the block or its shared prefix", file, base, p)
        ikey = prev[:shared] + block[start:kend] if shared else block[start:kend]
        if len(ikey) < INTERNAL_TRAILER_LEN:
            raise _corrupt("internal key shorter than its 8-byte trailer", file, base, p)
        uk = ikey[:-8]
        if uk > last_uk or not keys:
            kapp(uk)
            vapp(block[kend:vend] if ikey[-8] == 1 else None)  # 1: KIND_SET
        elif uk != last_uk:
            raise _corrupt("keys out of order", file, base, p)
        elif trailer_of(ikey) >= trailer_of(prev):
            # An older version must carry a smaller trailer, else which one is newest is undefined.
            raise _corrupt("repeated key without a smaller sequence number", file, base, p)
        else:
            hidden += 1  # an older version of the key just decoded, hidden by it
        last_uk = uk
        prev = ikey
        p = vend
    return keys, vals, len(keys) + hidden


def decode_index_block(
    block: bytes,
    file: str,
    base: int,
    *,
    key_is_user_key: bool = False,
    value_delta_encoded: bool = False,
    after: bytes | None = None,
    full: list[bytes] | None = None,
) -> tuple[list[bytes], list[BlockHandle], bytes | None]:
    """Decode an index block into separator user keys, the block handles they point to, and the
    block's last key as stored (the ``after`` of the next partition of a two-level index). Each
    key as stored (with its trailer, when it has one) is also appended to ``full`` when given: the
    top level of a two-level index is checked against its partitions in internal-key order.

    Separators must strictly ascend (as internal keys, or as user keys with ``key_is_user_key``),
    starting above ``after``. Format versions 3+ may store separators as bare user keys
    (``key_is_user_key``) and 4+ may delta-encode handles (``value_delta_encoded``): then entries
    have no value-length field, a restart entry holds a full handle and the others only a signed
    size delta, the offset following the previous block and its trailer.
    """
    limit, restarts = restart_points(block, file, base)
    trailer = 0 if key_is_user_key else INTERNAL_TRAILER_LEN
    if not value_delta_encoded:
        return _decode_plain_index(block, limit, (file, base), trailer, after, full=full)
    restart_set = set(restarts)
    seps: list[bytes] = []
    handles: list[BlockHandle] = []
    budget = KEY_EXPANSION * len(block)
    prev = after
    key = b""
    last = BlockHandle(0, 0)
    p = 0
    while p < limit:
        shared, q = decode_uvarint(block, p, file=file, base=base)
        unshared, start = decode_uvarint(block, q, file=file, base=base)
        kend = start + unshared
        if kend > limit or shared > len(key):
            raise _corrupt("index entry overruns the block or its shared prefix", file, base, p)
        budget -= shared
        if budget < 0:
            raise _key_bomb(file, base, p)
        key = key[:shared] + block[start:kend]
        if len(key) < trailer:
            raise _corrupt("index key shorter than its 8-byte trailer", file, base, p)
        sep = key[: len(key) - trailer]
        if prev is not None and (not seps or sep <= seps[-1]):
            _check_order(key, prev, trailer, (file, base, p))
        seps.append(sep)
        prev = key
        if full is not None:
            full.append(key)
        if p in restart_set:
            handle, q = decode_handle(block, kend, file=file, base=base)
        else:
            delta, q = decode_varint(block, kend, file=file, base=base)
            handle = BlockHandle(last.offset + last.size + BLOCK_TRAILER_SIZE, last.size + delta)
            if handle.size < 0:
                raise _corrupt("negative block size in delta-encoded handle", file, base, p)
        if q > limit:
            raise _corrupt("block handle overruns the block", file, base, p)
        handles.append(handle)
        last = handle
        p = q
    return seps, handles, prev


def sorts_after(key: bytes, other: bytes, trailer: int) -> bool:
    """Whether index key ``key`` sorts strictly after ``other`` in the table's key order: a greater
    user key, or (internal keys, ``trailer`` bytes long) the same user key with a smaller trailer."""
    user, other_user = key[: len(key) - trailer], other[: len(other) - trailer]
    if user != other_user:
        return user > other_user
    return bool(trailer) and trailer_of(key) < trailer_of(other)


def _check_order(key: bytes, prev: bytes, trailer: int, where: tuple[str, int, int]) -> None:
    """Raise unless index key ``key`` sorts strictly after ``prev``. Called off the fast path
    (equal user keys, or a partition's first)."""
    if not sorts_after(key, prev, trailer):
        file, base, p = where
        raise _corrupt("index separators not strictly ascending", file, base, p)


def _decode_plain_index(
    block: bytes,
    limit: int,
    where: tuple[str, int],
    trailer: int,
    after: bytes | None,
    *,
    full: list[bytes] | None,
) -> tuple[list[bytes], list[BlockHandle], bytes | None]:
    """Index entries with explicit value lengths (pebble, RocksDB format 2-3). Runs once per
    data block at open, so the one-byte header is decoded inline as in :func:`decode_data_block`."""
    file, base = where
    seps: list[bytes] = []
    handles: list[BlockHandle] = []
    new_handle = tuple.__new__  # skips NamedTuple's Python-level __new__: 0.2 vs 0.55 us
    budget = KEY_EXPANSION * len(block)
    prev = after
    key = b""
    p = 0
    while p < limit:
        shared = block[p]
        unshared = block[p + 1]  # p < limit <= len - 4, so these indexes exist
        vlen = block[p + 2]
        if (shared | unshared | vlen) < 0x80:
            start = p + 3
        else:
            shared, unshared, vlen, start = _slow_header(block, p, file, base)
        kend = start + unshared
        vend = kend + vlen
        if vend > limit or shared > len(key):
            raise _corrupt("index entry overruns the block or its shared prefix", file, base, p)
        if shared:
            budget -= shared
            if budget < 0:
                raise _key_bomb(file, base, p)
            key = key[:shared] + block[start:kend]
        else:
            key = block[start:kend]
        if len(key) < trailer:
            raise _corrupt("index key shorter than its 8-byte trailer", file, base, p)
        sep = key[: len(key) - trailer]
        if prev is not None and (not seps or sep <= seps[-1]):
            _check_order(key, prev, trailer, (file, base, p))
        seps.append(sep)
        prev = key
        if full is not None:
            full.append(key)
        # pebble may append block properties after the handle, so the value can be longer.
        offset, q = decode_uvarint(block, kend, file=file, base=base)
        size, q = decode_uvarint(block, q, file=file, base=base)
        if q > vend:
            raise _corrupt("block handle overruns its entry", file, base, p)
        handles.append(new_handle(BlockHandle, (offset, size)))
        p = vend
    return seps, handles, prev
