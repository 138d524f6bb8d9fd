"""The lakeFS "ident" identity encoding, fed straight into SHA-256 (spec section 4).

Every value is written as a one-byte type tag followed by its encoding:

- ``Bytes(b)``       tag 0, ``Int64(len(b))``, the bytes
- ``String(s)``      tag 1, ``Int64(len(s))``, the UTF-8 bytes (``len`` counts bytes)
- ``Int64(v)``       tag 2, byte ``0x08``, 8 bytes big-endian two's complement
- ``StringSlice(l)`` tag 3, ``Int64(len(l))``, each element as ``String``
- ``StringMap(m)``   tag 4, ``Int64(len(m))``, then ``String(k)``, ``String(v)`` for each key in
  bytewise-sorted order
- ``Embedded(x)``    tag 5, ``Bytes(identity of x)``

:class:`IdentHasher` streams these encodings into a SHA-256 without building the byte string;
the ``encode_*`` functions return the raw bytes (for tests and for callers that need them).
Strings may be given as ``str`` (encoded as UTF-8) or as ``bytes`` (taken as is, like a Go string
holding arbitrary bytes). Invalid input (an out-of-range int, a string that cannot be UTF-8 encoded)
raises :class:`~lakefs_core.errors.BadInputError`. Pure: no I/O.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterable, Mapping

from lakefs_core.errors import BadInputError

TAG_BYTES = 0
TAG_STRING = 1
TAG_INT64 = 2
TAG_STRING_SLICE = 3
TAG_STRING_MAP = 4
TAG_EMBEDDED = 5

# Int64 is tag 2, then a length byte 0x08, then 8 big-endian bytes: pack all 10 in one call.
_INT64 = struct.Struct(">BBq")
# A type tag followed by Int64(length): the prefix of Bytes, String, StringSlice and StringMap.
_TAG_LEN = struct.Struct(">BBBq")
_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1


def _as_bytes(s: str | bytes, what: str) -> bytes:
    if isinstance(s, bytes):
        return s
    try:
        return s.encode("utf-8")
    except UnicodeEncodeError as e:
        raise BadInputError(f"not encodable as UTF-8: {e.reason}", field=what) from e


def encode_int64(v: int) -> bytes:
    """The ident encoding of ``Int64(v)`` (10 bytes)."""
    if not _INT64_MIN <= v <= _INT64_MAX:
        raise BadInputError("out of int64 range", field="int64")
    return _INT64.pack(TAG_INT64, 8, v)


def encode_bytes(b: bytes) -> bytes:
    """The ident encoding of ``Bytes(b)``."""
    return bytes((TAG_BYTES,)) + encode_int64(len(b)) + b


def encode_string(s: str | bytes) -> bytes:
    """The ident encoding of ``String(s)``."""
    raw = _as_bytes(s, "string")
    return _TAG_LEN.pack(TAG_STRING, TAG_INT64, 8, len(raw)) + raw  # a length is always in range


def encode_string_slice(items: Iterable[str | bytes]) -> bytes:
    """The ident encoding of ``StringSlice(items)``, elements in the given order."""
    elems = [encode_string(s) for s in items]
    return bytes((TAG_STRING_SLICE,)) + encode_int64(len(elems)) + b"".join(elems)


def _sorted_pairs(m: Mapping[str, str | bytes]) -> list[tuple[bytes, bytes]]:
    # Go sorts the map's keys as byte strings; sort on the encoded keys so the order is bytewise
    # regardless of how Python would compare the str values.
    pairs = [(_as_bytes(k, "string_map.key"), _as_bytes(v, f"string_map.{k}")) for k, v in m.items()]
    pairs.sort(key=lambda kv: kv[0])
    return pairs


def encode_string_map(m: Mapping[str, str | bytes]) -> bytes:
    """The ident encoding of ``StringMap(m)`` (keys in bytewise-sorted order)."""
    parts = [bytes((TAG_STRING_MAP,)), encode_int64(len(m))]
    for k, v in _sorted_pairs(m):
        parts += (encode_string(k), encode_string(v))
    return b"".join(parts)


def encode_embedded(identity: bytes) -> bytes:
    """The ident encoding of ``Embedded(x)`` given the identity (digest) of ``x``."""
    return bytes((TAG_EMBEDDED,)) + encode_bytes(identity)


_EMPTY_MAP = encode_string_map({})


def plain_entry_digest(size: int, etag: str | bytes, content_type: str | bytes) -> bytes:
    """The SHA-256 of ``Int64(size) String(etag) StringMap({}) [String(content_type)]`` (the last
    only when non-empty), hashed in one piece: the identity of an entry without metadata (every
    object of a bulk upload), cheaper than the chain of :class:`IdentHasher` calls (2.0 against 3.4 µs).
    Built from the same ``encode_*`` functions, so it refuses what they refuse, alike."""
    data = encode_int64(size) + encode_string(etag) + _EMPTY_MAP
    if content_type:
        data += encode_string(content_type)
    return hashlib.sha256(data).digest()


class IdentHasher:
    """SHA-256 over a sequence of ident-encoded values. Methods return ``self`` so calls chain:
    ``IdentHasher().int64(size).string(etag).string_map(meta).digest()``.
    """

    __slots__ = ("_h",)

    def __init__(self) -> None:
        self._h = hashlib.sha256()

    def _len(self, tag: int, n: int) -> None:
        # A tag byte followed by Int64(n) in a single update: lengths are always in range.
        self._h.update(_TAG_LEN.pack(tag, TAG_INT64, 8, n))

    def raw(self, data: bytes | bytearray) -> IdentHasher:
        """Feed ``data`` unencoded (table ids mix plain bytes with an ident-encoded StringMap)."""
        self._h.update(data)
        return self

    def int64(self, v: int) -> IdentHasher:
        self._h.update(encode_int64(v))
        return self

    def bytes_(self, b: bytes) -> IdentHasher:
        self._len(TAG_BYTES, len(b))
        self._h.update(b)
        return self

    def string(self, s: str | bytes) -> IdentHasher:
        raw = _as_bytes(s, "string")
        self._len(TAG_STRING, len(raw))
        self._h.update(raw)
        return self

    def string_slice(self, items: Iterable[str | bytes]) -> IdentHasher:
        elems = [_as_bytes(s, "string_slice") for s in items]
        self._len(TAG_STRING_SLICE, len(elems))
        for raw in elems:
            self._len(TAG_STRING, len(raw))
            self._h.update(raw)
        return self

    def string_map(self, m: Mapping[str, str | bytes]) -> IdentHasher:
        pairs = _sorted_pairs(m)
        self._len(TAG_STRING_MAP, len(pairs))
        for k, v in pairs:
            self._len(TAG_STRING, len(k))
            self._h.update(k)
            self._len(TAG_STRING, len(v))
            self._h.update(v)
        return self

    def embedded(self, identity: bytes) -> IdentHasher:
        """``Embedded(x)`` where ``identity`` is the (raw) identity of ``x``."""
        self._h.update(bytes((TAG_EMBEDDED,)))
        return self.bytes_(identity)

    def digest(self) -> bytes:
        return self._h.digest()

    def hexdigest(self) -> str:
        return self._h.hexdigest()
