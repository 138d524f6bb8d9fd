"""Variable-length integers as used by RocksDB/LevelDB and Go's ``encoding/binary``.

- *uvarint*: unsigned LEB128, 7 bits per byte, least significant group first, high bit = "more
  follows"; at most 10 bytes for a 64-bit value (Go ``binary.PutUvarint``, RocksDB ``PutVarint64``).
- *varint*: signed zig-zag varint (Go ``binary.PutVarint``): ``n`` is stored as the uvarint of
  ``2n`` when ``n >= 0`` and ``-2n - 1`` otherwise, so small magnitudes of either sign stay short.
  lakeFS's value envelope uses it for its length prefixes (a length of 32 encodes as ``0x40``).

Decoders take ``(buf, offset)`` and return ``(value, new_offset)``. Malformed input (truncated, more
than 10 bytes, or a value beyond 64 bits) raises :class:`~lakefs_core.errors.CorruptDataError` naming
``file`` and the byte offset ``base + offset`` where the varint starts (``base`` lets a caller that
decodes inside a block report offsets within the whole file). Encoders reject out-of-range values
with :class:`~lakefs_core.errors.BadInputError`. Pure: no I/O.
"""

from __future__ import annotations

import mmap

from lakefs_core.errors import BadInputError, CorruptDataError

__all__ = [
    "MAX_UVARINT_LEN",
    "ByteBuffer",
    "decode_uvarint",
    "decode_varint",
    "encode_uvarint",
    "encode_varint",
    "uvarint_len",
]

# Anything indexable to ints and sliceable; bytes, bytearray, memoryview and mmap all qualify.
ByteBuffer = bytes | bytearray | memoryview | mmap.mmap

MAX_UVARINT_LEN = 10
_U64_LIMIT = 1 << 64
_I64_MIN = -(1 << 63)
_I64_LIMIT = 1 << 63

# Single-byte encodings are by far the most common (lengths and counters in blocks), so they are
# precomputed to keep the writer's hot path free of loops and allocations.
_SMALL = tuple(bytes((i,)) for i in range(128))


def encode_uvarint(n: int) -> bytes:
    """Encode ``0 <= n < 2**64`` as a uvarint."""
    if 0 <= n < 128:
        return _SMALL[n]
    if n < 0 or n >= _U64_LIMIT:
        raise BadInputError(f"uvarint out of range: {n}", field="n")
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def uvarint_len(n: int) -> int:
    """Number of bytes :func:`encode_uvarint` produces for ``n`` (``n >= 0``)."""
    return max(1, (n.bit_length() + 6) // 7)


def decode_uvarint(
    buf: ByteBuffer, offset: int, *, file: str | None = None, base: int = 0
) -> tuple[int, int]:
    """Decode a uvarint starting at ``buf[offset]``; return ``(value, offset_after)``."""
    end = len(buf)
    if offset < 0 or offset >= end:
        raise CorruptDataError("truncated uvarint", file=file, offset=base + offset)
    b = buf[offset]
    if b < 0x80:
        return b, offset + 1
    result = b & 0x7F
    shift = 7
    pos = offset + 1
    while True:
        if pos >= end:
            raise CorruptDataError("truncated uvarint", file=file, offset=base + offset)
        if pos - offset >= MAX_UVARINT_LEN:
            raise CorruptDataError("uvarint longer than 10 bytes", file=file, offset=base + offset)
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            break
        shift += 7
    if result >= _U64_LIMIT:
        raise CorruptDataError("uvarint overflows 64 bits", file=file, offset=base + offset)
    return result, pos


def encode_varint(n: int) -> bytes:
    """Encode a signed ``-2**63 <= n < 2**63`` as a zig-zag varint (Go ``binary.PutVarint``)."""
    if not _I64_MIN <= n < _I64_LIMIT:
        raise BadInputError(f"varint out of range: {n}", field="n")
    return encode_uvarint(2 * n if n >= 0 else -2 * n - 1)


def decode_varint(buf: ByteBuffer, offset: int, *, file: str | None = None, base: int = 0) -> tuple[int, int]:
    """Decode a zig-zag varint starting at ``buf[offset]``; return ``(value, offset_after)``."""
    u, pos = decode_uvarint(buf, offset, file=file, base=base)
    return (-(u >> 1) - 1 if u & 1 else u >> 1), pos
