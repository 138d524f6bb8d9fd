"""Block handles, the per-block trailer and the 53-byte table footer (spec section 2).

Layout facts implemented here:

- A *block handle* is ``uvarint offset || uvarint size``; ``size`` excludes the trailer.
- Every block on disk is followed by a 5-byte *trailer*: the compression type byte (0 none, 1 Snappy
  raw block format; generic RocksDB files may also use 2 zlib, 3 bzip2, 4/5 LZ4, 7 zstd, which are
  read but never written) and a masked CRC32C (uint32 LE) over ``block bytes || type byte``, with
  ``mask(c) = ((c >> 15) | (c << 17)) + 0xa282ead8 (mod 2**32)``.
- The *footer* is the last 53 bytes: checksum type (1 = CRC32C), metaindex handle, index handle, zero
  padding up to byte 41, uint32 LE format version, 8-byte magic ``0x88e241b785f4cff7`` LE.

:func:`read_block` is the single way the reader gets a block's contents: it bounds-checks the
handle, verifies the checksum and decompresses, raising
:class:`~lakefs_core.errors.CorruptDataError` with the file name and the block's byte offset for any
violation; :func:`verify_block` checks a block's checksum without decompressing it. Pure: operates
on in-memory buffers only.

A valid checksum proves nothing about intent, so decompression is bounded before anything is
allocated: a block (stored or decompressed) may not exceed ``max_block_bytes``
(:data:`DEFAULT_MAX_BLOCK_BYTES`, 64 MiB: lakeFS cuts ranges at 20 MiB by default, and no block can
outgrow its file, so this leaves room for non-default range sizes and generic RocksDB files while
keeping one block's memory bounded), nor the codec's maximum expansion of its payload; and the
output must be exactly the length the block declares (the codecs decompress into a buffer of that
size, so a short stream cannot come back zero-padded and a long one fails).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import cramjam
import google_crc32c

from lakefs_core.errors import BadInputError, CorruptDataError
from lakefs_core.format.varint import ByteBuffer, decode_uvarint, encode_uvarint

FOOTER_SIZE = 53
BLOCK_TRAILER_SIZE = 5
MAGIC = 0x88E241B785F4CFF7
MAGIC_BYTES = struct.pack("<Q", MAGIC)
# LevelDB's (and RocksDB's legacy format-0) magic: named so the error can say what the file is.
LEGACY_MAGIC_BYTES = struct.pack("<Q", 0xDB4775248B80FB57)

CHECKSUM_NONE = 0
CHECKSUM_CRC32C = 1
# 2-4 are xxHash, xxHash64 and XXH3: such files are readable only with checksum verification off.
_KNOWN_CHECKSUM_TYPES = range(5)
WRITE_FORMAT_VERSION = 2
# Format versions 1-5 share this footer layout; 6+ moved the index handle into the metaindex.
MAX_READ_FORMAT_VERSION = 5

COMPRESSION_NONE = 0
COMPRESSION_SNAPPY = 1
COMPRESSION_NAMES = {COMPRESSION_NONE: "NoCompression", COMPRESSION_SNAPPY: "Snappy"}

# Other codecs generic RocksDB files may use (read-only; lakeFS files are Snappy or uncompressed).
# From format version 2 on, their payload is ``uvarint decompressed size || compressed stream``.
# Each decompresses into a caller-sized buffer (cramjam's ``output_len`` would zero-pad a short
# stream) and returns the bytes written; a stream longer than the buffer raises.
_SIZED_CODECS: dict[int, Callable[[bytes, bytearray], int]] = {
    2: cramjam.deflate.decompress_into,  # zlib, raw deflate stream
    3: cramjam.bzip2.decompress_into,
    4: cramjam.lz4.decompress_block_into,  # LZ4
    5: cramjam.lz4.decompress_block_into,  # LZ4HC, same block format
    7: cramjam.zstd.decompress_into,
}
# Most a codec can expand its input, where a format bound exists: Snappy ~32x (RocksDB's own
# sanity limit), deflate 1032x, LZ4 255x. bzip2 and zstd are bounded by max_block_bytes only.
_MAX_EXPANSION = {COMPRESSION_SNAPPY: 32, 2: 1032, 4: 255, 5: 255}

DEFAULT_MAX_BLOCK_BYTES = 64 << 20
_CRC_MASK_DELTA = 0xA282EAD8
_U32 = 0xFFFFFFFF
_VERSION_OFFSET = 41


class BlockHandle(NamedTuple):
    """Position of a block in the file; ``size`` excludes the 5-byte trailer."""

    offset: int
    size: int


def encode_handle(handle: BlockHandle) -> bytes:
    return encode_uvarint(handle.offset) + encode_uvarint(handle.size)


def decode_handle(
    buf: ByteBuffer, pos: int = 0, *, file: str | None = None, base: int = 0
) -> tuple[BlockHandle, int]:
    """Decode a handle at ``buf[pos]``; return it and the position after it."""
    offset, pos = decode_uvarint(buf, pos, file=file, base=base)
    size, pos = decode_uvarint(buf, pos, file=file, base=base)
    return BlockHandle(offset, size), pos


def mask_crc(crc: int) -> int:
    return (((crc >> 15) | (crc << 17)) + _CRC_MASK_DELTA) & _U32


def unmask_crc(masked: int) -> int:
    rot = (masked - _CRC_MASK_DELTA) & _U32
    return ((rot >> 17) | (rot << 15)) & _U32


def block_trailer(payload: bytes, compression_type: int) -> bytes:
    """The 5-byte trailer for ``payload`` (the bytes as stored, i.e. after compression)."""
    type_byte = bytes((compression_type,))
    crc = google_crc32c.extend(google_crc32c.value(payload), type_byte)
    return type_byte + struct.pack("<I", mask_crc(crc))


def compress_block(raw: bytes, compression: int) -> tuple[bytes, int]:
    """Return ``(payload, type)``: Snappy only when it saves at least 1/8 (RocksDB/pebble rule)."""
    if compression == COMPRESSION_SNAPPY:
        compressed = bytes(cramjam.snappy.compress_raw(raw))
        if len(compressed) < len(raw) - len(raw) // 8:
            return compressed, COMPRESSION_SNAPPY
        return raw, COMPRESSION_NONE
    if compression == COMPRESSION_NONE:
        return raw, COMPRESSION_NONE
    raise BadInputError(f"unsupported compression type {compression}", field="compression")


def check_handle(data: memoryview, handle: BlockHandle, file: str) -> None:
    """The block and its trailer must lie inside the file, before the footer."""
    off, size = handle
    if off + size + BLOCK_TRAILER_SIZE > len(data) - FOOTER_SIZE:
        raise CorruptDataError(
            f"block handle (offset {off}, size {size}) points outside the file ({len(data)} bytes)",
            file=file,
            offset=off,
        )


def verify_block(data: memoryview, handle: BlockHandle, file: str) -> None:
    """Check the block's masked CRC32C (over its bytes and its compression type byte)."""
    check_handle(data, handle, file)
    off, size = handle
    end = off + size
    (masked,) = struct.unpack_from("<I", data, end + 1)
    if google_crc32c.value(data[off : end + 1].tobytes()) != unmask_crc(masked):
        raise CorruptDataError("block checksum mismatch", file=file, offset=off)


def read_block(
    data: memoryview,
    handle: BlockHandle,
    file: str,
    *,
    verify: bool = True,
    max_block_bytes: int = DEFAULT_MAX_BLOCK_BYTES,
) -> bytes:
    """Bounds-check, optionally checksum-verify, and decompress the block at ``handle``."""
    check_handle(data, handle, file)
    off, size = handle
    if size > max_block_bytes:
        raise CorruptDataError(
            f"block of {size} bytes exceeds max_block_bytes ({max_block_bytes})", file=file, offset=off
        )
    end = off + size
    stored = data[off : end + 1].tobytes()  # block bytes || compression type byte
    ctype = stored[-1]
    if verify:
        (masked,) = struct.unpack_from("<I", data, end + 1)
        if google_crc32c.value(stored) != unmask_crc(masked):
            raise CorruptDataError("block checksum mismatch", file=file, offset=off)
    if ctype == COMPRESSION_NONE:
        return stored[:-1]
    if ctype == COMPRESSION_SNAPPY or ctype in _SIZED_CODECS:
        return _decompress(stored[:-1], ctype, (file, off), max_block_bytes)
    raise CorruptDataError(f"unknown block compression type {ctype}", file=file, offset=end)


def _decompress(payload: bytes, ctype: int, where: tuple[str, int], max_block_bytes: int) -> bytes:
    file, off = where
    # Both Snappy's raw format and RocksDB's framing of the others start with the uvarint length.
    expected, pos = decode_uvarint(payload, 0, file=file, base=off)
    # Checked before allocating: a corrupt (or hostile) length must not make us allocate gigabytes.
    ratio = _MAX_EXPANSION.get(ctype)
    limit = max_block_bytes if ratio is None else min(max_block_bytes, ratio * len(payload) + 64)
    if expected > limit:
        raise CorruptDataError(
            f"compressed block claims an implausible size ({expected} bytes, at most {limit})",
            file=file,
            offset=off,
        )
    try:
        if ctype == COMPRESSION_SNAPPY:
            # The raw decoder sizes its output from the length header checked above and fails on
            # a stream that does not produce exactly that many bytes.
            out = bytes(cramjam.snappy.decompress_raw(payload))
        else:
            buf = bytearray(expected)
            written = _SIZED_CODECS[ctype](payload[pos:], buf)
            out = bytes(buf) if written == expected else b""
    except Exception as e:  # cramjam raises its own DecompressionError; anything here is corruption
        raise CorruptDataError(f"bad compressed block (type {ctype}): {e}", file=file, offset=off) from e
    if len(out) != expected:
        raise CorruptDataError(
            f"block decompressed to the wrong length (declared {expected} bytes)", file=file, offset=off
        )
    return out


@dataclass(frozen=True, slots=True)
class Footer:
    """The parsed table footer."""

    checksum_type: int
    metaindex: BlockHandle
    index: BlockHandle
    format_version: int

    def encode(self) -> bytes:
        head = bytes((self.checksum_type,)) + encode_handle(self.metaindex) + encode_handle(self.index)
        pad = b"\0" * (_VERSION_OFFSET - len(head))
        return head + pad + struct.pack("<I", self.format_version) + MAGIC_BYTES


def decode_footer(data: ByteBuffer, file: str) -> Footer:
    """Parse the last 53 bytes of ``data``; reject anything that is not a supported table."""
    n = len(data)
    if n < FOOTER_SIZE:
        raise CorruptDataError(f"file too short for a table footer ({n} bytes)", file=file, offset=0)
    start = n - FOOTER_SIZE
    footer = bytes(data[start:n])
    magic = footer[-8:]
    if magic != MAGIC_BYTES:
        what = "LevelDB/legacy format" if magic == LEGACY_MAGIC_BYTES else "unknown"
        raise CorruptDataError(f"bad table magic ({what}: {magic.hex()})", file=file, offset=n - 8)
    (version,) = struct.unpack_from("<I", footer, _VERSION_OFFSET)
    if not 1 <= version <= MAX_READ_FORMAT_VERSION:
        raise CorruptDataError(
            f"unsupported table format version {version}", file=file, offset=start + _VERSION_OFFSET
        )
    checksum_type = footer[0]
    if checksum_type not in _KNOWN_CHECKSUM_TYPES:
        raise CorruptDataError(f"unknown checksum type {checksum_type}", file=file, offset=start)
    metaindex, pos = decode_handle(footer, 1, file=file, base=start)
    index, pos = decode_handle(footer, pos, file=file, base=start)
    if pos > _VERSION_OFFSET or any(footer[pos:_VERSION_OFFSET]):
        raise CorruptDataError("malformed footer padding", file=file, offset=start + pos)
    return Footer(checksum_type, metaindex, index, version)
