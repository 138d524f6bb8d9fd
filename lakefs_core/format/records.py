"""Typed helpers for graveler records: range, metarange and staged-entry values (spec sections 3, 6).

- A *range record* maps an object path to an envelope of (raw 32-byte entry identity, ``Entry``
  protobuf bytes). The entry bytes are produced **once**, by :func:`make_entry`, and then carried
  verbatim everywhere (staging, ranges, merges): re-encoding would reorder map fields, change the
  value bytes and so change range ids. :class:`ValueRecord` therefore keeps ``data`` as bytes and
  never re-serialises it; :func:`decode_entry` is for looking inside, not for round-tripping.
- A *metarange record* maps a range's max key to an envelope of (range id as 64 ASCII hex bytes,
  ``RangeData`` bytes); :class:`RangeInfo` is its decoded form.
- A *staged entry* (``StagedEntryData`` KV value) holds key, identity and data; empty identity and
  empty data is a tombstone.

Malformed stored bytes raise :class:`~lakefs_core.errors.CorruptDataError` (with ``file`` and an
offset when the caller supplies them); invalid arguments raise
:class:`~lakefs_core.errors.BadInputError`. Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import NamedTuple

from google.protobuf.message import DecodeError
from google.protobuf.timestamp_pb2 import Timestamp

from lakefs_core.errors import BadInputError, CorruptDataError
from lakefs_core.format.envelope import decode_envelope, encode_envelope
from lakefs_core.format.ids import entry_identity
from lakefs_core.format.proto import catalog_pb2, committed_pb2, graveler_pb2

__all__ = [
    "ADDRESS_FULL",
    "ADDRESS_RELATIVE",
    "ENTRY_IDENTITY_LEN",
    "RangeInfo",
    "ValueRecord",
    "decode_entry",
    "decode_metarange_record",
    "decode_range_data",
    "decode_range_record",
    "decode_staged_entry",
    "encode_range_data",
    "encode_staged_entry",
    "entry_identity_of",
    "entry_last_modified",
    "entry_to_value",
    "make_entry",
    "metarange_record",
    "pure_record_from_sst",
]

ENTRY_IDENTITY_LEN = 32
ADDRESS_RELATIVE = catalog_pb2.Entry.AddressType.RELATIVE
ADDRESS_FULL = catalog_pb2.Entry.AddressType.FULL
_ADDRESS_TYPES = frozenset(catalog_pb2.Entry.AddressType.values())
# google.protobuf.Timestamp's valid range (0001-01-01 to 9999-12-31, what datetime can hold).
_MIN_SECONDS = -62_135_596_800
_MAX_SECONDS = 253_402_300_799
_NANOS = 1_000_000_000
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

# Range ids name files under _lakefs/: only exactly 64 lowercase hex digits are accepted, so a
# corrupt metarange can never steer a reader to an arbitrary path.
_RANGE_ID = re.compile(r"[0-9a-f]{64}")
_RANGE_ID_BYTES = re.compile(rb"[0-9a-f]{64}")


def is_table_id(value: str) -> bool:
    """True for a range/metarange id: exactly 64 lowercase hex digits (safe as a file name)."""
    return _RANGE_ID.fullmatch(value) is not None


class ValueRecord(NamedTuple):
    """A graveler record: key plus the two envelope parts, all kept verbatim.

    A named tuple rather than a dataclass: one is built per record read on the lookup and scan hot
    paths, and tuple construction is about three times cheaper than a frozen dataclass's.
    """

    key: bytes
    identity: bytes
    data: bytes

    @property
    def is_tombstone(self) -> bool:
        """Staging-area deletion marker: empty identity (and empty data)."""
        return not self.identity

    def to_value(self) -> bytes:
        """The SST value (envelope) of this record."""
        return encode_envelope(self.identity, self.data)

    @classmethod
    def from_sst(cls, key: bytes, value: bytes, *, file: str | None = None, base: int = 0) -> ValueRecord:
        """Split an SST ``(key, value)`` pair; ``base`` is the value's file offset, for errors."""
        identity, data = decode_envelope(value, file=file, base=base)
        return cls(key, identity, data)


def pure_record_from_sst(key: bytes, value: bytes, file: str | None = None, base: int = 0) -> ValueRecord:
    """``ValueRecord.from_sst(key, value, file=file, base=base)`` with positional arguments: the
    pure-Python twin of the compiled ``record_from_sst`` that metaranges read records with
    (:mod:`lakefs_core.committed.metarange`), and what it calls for any value off its fast path."""
    identity, data = decode_envelope(value, file=file, base=base)
    return ValueRecord(key, identity, data)


# --- range records -------------------------------------------------------------------------------


def make_entry(
    address: str,
    size: int,
    etag: str,
    *,
    last_modified: datetime | None = None,
    metadata: Mapping[str, str] | None = None,
    content_type: str = "",
    address_type: catalog_pb2.Entry.AddressType = ADDRESS_RELATIVE,
) -> tuple[bytes, bytes]:
    """Build a new entry: ``(identity, entry_bytes)``, serialised once, deterministically.

    ``last_modified`` must be timezone-aware (None leaves the field unset). ``address_type`` is
    RELATIVE (``data/...`` under the namespace) or FULL (an absolute URI); the deprecated
    BY_PREFIX mode is never written.
    """
    if not address:
        raise BadInputError("must not be empty", field="address")
    if size < 0:
        raise BadInputError("must be >= 0", field="size")
    if address_type not in (ADDRESS_RELATIVE, ADDRESS_FULL):
        raise BadInputError("must be RELATIVE or FULL", field="address_type")
    meta = dict(metadata or {})
    entry = catalog_pb2.Entry(
        address=address, size=size, e_tag=etag, address_type=address_type, content_type=content_type
    )
    if meta:  # an empty map is not serialised: filling it costs a Python-level map update per entry
        entry.metadata.update(meta)
    if last_modified is not None:
        if last_modified.tzinfo is None or last_modified.utcoffset() is None:
            raise BadInputError("must be timezone-aware", field="last_modified")
        # What Timestamp.FromDatetime stores for whole-second UTC offsets (floor seconds since the
        # epoch, then the microseconds), in integer arithmetic: FromDatetime is pure Python and
        # several times slower.
        since = last_modified - _EPOCH
        seconds = since.days * 86400 + since.seconds
        if not _MIN_SECONDS <= seconds <= _MAX_SECONDS:
            raise BadInputError("must lie within years 1-9999 in UTC", field="last_modified")
        entry.last_modified.seconds = seconds
        entry.last_modified.nanos = since.microseconds * 1000
    # deterministic=True sorts map keys, so equal inputs give equal bytes within this project.
    return entry_identity(size, etag, meta, content_type), entry.SerializeToString(deterministic=True)


def entry_to_value(identity: bytes, entry_bytes: bytes) -> bytes:
    """The SST value of a range record (``entry_bytes`` taken verbatim)."""
    if len(identity) != ENTRY_IDENTITY_LEN:
        raise BadInputError(f"must be {ENTRY_IDENTITY_LEN} raw bytes, got {len(identity)}", field="identity")
    return encode_envelope(identity, entry_bytes)


def decode_entry(data: bytes, *, file: str | None = None, offset: int | None = None) -> catalog_pb2.Entry:
    """Parse ``Entry`` bytes (for inspection only: never re-serialise the result for storage).

    Values the protobuf decoder lets through but no caller can use are corruption too, reported with
    the raw value: an ``address_type`` outside the enum (proto3 keeps unknown numbers) and a
    ``last_modified`` outside what a timestamp (and ``datetime``) can represent. So a caller may
    convert the result (``AddressType.Name``, :func:`entry_last_modified`) without a traceback.
    """
    try:
        entry = catalog_pb2.Entry.FromString(data)
    except DecodeError as e:
        raise CorruptDataError(f"invalid catalog.Entry protobuf: {e}", file=file, offset=offset) from e
    if entry.address_type not in _ADDRESS_TYPES:
        raise CorruptDataError(
            f"catalog.Entry has unknown address_type {entry.address_type}", file=file, offset=offset
        )
    if entry.HasField("last_modified"):
        ts = entry.last_modified
        if not (_MIN_SECONDS <= ts.seconds <= _MAX_SECONDS and 0 <= ts.nanos < _NANOS):
            raise CorruptDataError(
                f"catalog.Entry last_modified out of range (seconds={ts.seconds}, nanos={ts.nanos})",
                file=file,
                offset=offset,
            )
    return entry


def entry_last_modified(
    entry: catalog_pb2.Entry, *, file: str | None = None, offset: int | None = None
) -> datetime | None:
    """The entry's ``last_modified`` as an aware UTC datetime (``None`` when unset); a value
    ``datetime`` cannot hold raises :class:`CorruptDataError` showing the raw seconds and nanos."""
    if not entry.HasField("last_modified"):
        return None
    return timestamp_datetime(entry.last_modified, "catalog.Entry last_modified", file=file, offset=offset)


def timestamp_datetime(
    ts: Timestamp, what: str, *, file: str | None = None, offset: int | None = None
) -> datetime:
    """A protobuf ``Timestamp`` as an aware UTC datetime; one that ``datetime`` cannot hold (or with
    nanos out of range) raises :class:`CorruptDataError` showing the raw seconds and nanos.
    ``Timestamp.ToDatetime``'s answer, computed directly (a listing converts one per object: the
    protobuf helper's checks cost three times the arithmetic)."""
    try:
        nanos = ts.nanos
        if not 0 <= nanos < _NANOS:
            raise ValueError("nanos out of range")
        return _EPOCH + timedelta(seconds=ts.seconds, microseconds=nanos // 1000)
    except (ValueError, OverflowError) as e:
        raise CorruptDataError(
            f"{what} out of range (seconds={ts.seconds}, nanos={ts.nanos}): {e}", file=file, offset=offset
        ) from e


def entry_identity_of(entry: catalog_pb2.Entry) -> bytes:
    """The identity lakeFS computes for ``entry`` (from size, etag, metadata and content type)."""
    return entry_identity(entry.size, entry.e_tag, entry.metadata, entry.content_type)


def decode_range_record(key: bytes, value: bytes, *, file: str | None = None, base: int = 0) -> ValueRecord:
    """A range record's parts; the entry data stays undecoded (see :func:`decode_entry`)."""
    record = ValueRecord.from_sst(key, value, file=file, base=base)
    if not record.identity:
        raise CorruptDataError(f"range record {key!r} has an empty identity", file=file, offset=base)
    return record


# --- metarange records ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RangeInfo:
    """One range as a metarange describes it. ``estimated_size`` is the writer's hint, not exact."""

    id: str
    min_key: bytes
    max_key: bytes
    count: int
    estimated_size: int

    def __post_init__(self) -> None:
        if not _RANGE_ID.fullmatch(self.id):
            raise BadInputError("must be 64 lowercase hex digits", field="id")
        if self.count < 0:
            raise BadInputError("must be >= 0", field="count")
        if self.estimated_size < 0:
            raise BadInputError("must be >= 0", field="estimated_size")


def encode_range_data(min_key: bytes, max_key: bytes, estimated_size: int, count: int) -> bytes:
    """``RangeData`` bytes (deterministic; it has no map fields, so this is also canonical)."""
    return committed_pb2.RangeData(
        min_key=min_key, max_key=max_key, estimated_size=estimated_size, count=count
    ).SerializeToString(deterministic=True)


def decode_range_data(
    data: bytes, *, file: str | None = None, offset: int | None = None
) -> committed_pb2.RangeData:
    try:
        return committed_pb2.RangeData.FromString(data)
    except DecodeError as e:
        raise CorruptDataError(f"invalid RangeData protobuf: {e}", file=file, offset=offset) from e


def metarange_record(info: RangeInfo) -> tuple[bytes, bytes]:
    """The metarange SST ``(key, value)`` for a range: key = its max key, identity = its hex id."""
    data = encode_range_data(info.min_key, info.max_key, info.estimated_size, info.count)
    return info.max_key, encode_envelope(info.id.encode("ascii"), data)


def decode_metarange_record(key: bytes, value: bytes, *, file: str | None = None, base: int = 0) -> RangeInfo:
    """Decode a metarange SST record. The record key is the lookup key; it should equal max_key."""
    identity, data = decode_envelope(value, file=file, base=base)
    if not _RANGE_ID_BYTES.fullmatch(identity):
        raise CorruptDataError(
            f"metarange record {key!r}: identity is not a 64-digit lowercase hex range id",
            file=file,
            offset=base,
        )
    rd = decode_range_data(data, file=file, offset=base)
    if rd.count < 0:
        raise CorruptDataError(f"metarange record {key!r}: negative count", file=file, offset=base)
    return RangeInfo(
        id=identity.decode("ascii"),
        min_key=rd.min_key,
        max_key=rd.max_key,
        count=rd.count,
        estimated_size=rd.estimated_size,
    )


# --- staged entries (KV) -------------------------------------------------------------------------


def encode_staged_entry(record: ValueRecord) -> bytes:
    """``StagedEntryData`` bytes for a value or tombstone (empty identity and data)."""
    if not record.identity and record.data:
        raise BadInputError("a tombstone must have empty data; a value needs an identity", field="identity")
    return graveler_pb2.StagedEntryData(
        key=record.key, identity=record.identity, data=record.data
    ).SerializeToString(deterministic=True)


def decode_staged_entry(raw: bytes, *, file: str | None = None) -> ValueRecord:
    """Parse ``StagedEntryData``; ``is_tombstone`` on the result tells deletions apart."""
    try:
        msg = graveler_pb2.StagedEntryData.FromString(raw)
    except DecodeError as e:
        raise CorruptDataError(f"invalid StagedEntryData protobuf: {e}", file=file) from e
    if not msg.identity and msg.data:
        raise CorruptDataError(f"staged entry {msg.key!r} has data but an empty identity", file=file)
    return ValueRecord(msg.key, msg.identity, msg.data)
