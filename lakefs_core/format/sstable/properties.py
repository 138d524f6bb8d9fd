"""The properties block: RocksDB's standard ``rocksdb.*`` table properties plus user properties.

The block is an ordinary block (see :mod:`.block`) whose keys are property names (plain strings,
no internal-key trailer) in sorted order and whose values are raw bytes. Standard counters are
uvarints, some fields are fixed-width little-endian integers, the rest are strings; lakeFS's own
properties (``type``, ``min_key``, ``max_key``, ``count``, ``estimated_size_bytes``) are raw bytes
and decimal ASCII. Readers keep every value raw; :func:`uvarint_prop` and friends interpret one.

:func:`standard_properties` produces the set RocksDB's own tools and external-file ingestion expect
from a file written by this project (format version 2, bytewise comparator, no filter). Pure: no I/O.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from dataclasses import dataclass

from lakefs_core.errors import BadInputError, CorruptDataError
from lakefs_core.format.sstable.block import BlockBuilder, decode_block
from lakefs_core.format.varint import decode_uvarint, encode_uvarint

PROPERTIES_BLOCK = "rocksdb.properties"
RESERVED_PREFIX = "rocksdb."

NUM_ENTRIES = "rocksdb.num.entries"
NUM_RANGE_DELETIONS = "rocksdb.num.range-deletions"
NUM_DATA_BLOCKS = "rocksdb.num.data.blocks"
INDEX_TYPE = "rocksdb.block.based.table.index.type"
INDEX_KEY_IS_USER_KEY = "rocksdb.index.key.is.user.key"
INDEX_VALUE_IS_DELTA_ENCODED = "rocksdb.index.value.is.delta.encoded"
COMPRESSION = "rocksdb.compression"
COMPARATOR = "rocksdb.comparator"
BYTEWISE_COMPARATOR = b"leveldb.BytewiseComparator"

INDEX_TYPE_BINARY_SEARCH = 0
INDEX_TYPE_TWO_LEVEL = 2

# RocksDB's TablePropertiesCollectorFactory::Context::kUnknownColumnFamily (INT32_MAX): the file
# belongs to no particular column family, so it can be ingested into any.
_UNKNOWN_COLUMN_FAMILY = 0x7FFFFFFF
# What RocksDB records for "default" compression options; informational only.
_COMPRESSION_OPTIONS = (
    b"window_bits=-14; level=32767; strategy=0; max_dict_bytes=0; zstd_max_train_bytes=0; enabled=0; "
)


@dataclass(frozen=True, slots=True)
class TableStats:
    """What a writer knows about the finished table, for :func:`standard_properties`."""

    num_entries: int
    raw_key_size: int
    raw_value_size: int
    data_size: int
    index_size: int
    num_data_blocks: int
    compression_name: str
    index_partitions: int = 0
    top_level_index_size: int = 0


def standard_properties(stats: TableStats) -> dict[str, bytes]:
    """The ``rocksdb.*`` properties of a table written by this project."""
    two_level = stats.index_partitions > 0
    uv = encode_uvarint
    props: dict[str, bytes] = {
        INDEX_TYPE: struct.pack("<I", INDEX_TYPE_TWO_LEVEL if two_level else INDEX_TYPE_BINARY_SEARCH),
        "rocksdb.block.based.table.prefix.filtering": b"0",
        "rocksdb.block.based.table.whole.key.filtering": b"0",
        "rocksdb.column.family.id": uv(_UNKNOWN_COLUMN_FAMILY),
        COMPARATOR: BYTEWISE_COMPARATOR,
        COMPRESSION: stats.compression_name.encode(),
        "rocksdb.compression_options": _COMPRESSION_OPTIONS,
        "rocksdb.creation.time": uv(0),
        "rocksdb.data.size": uv(stats.data_size),
        "rocksdb.deleted.keys": uv(0),
        # Marks the file as an external (SstFileWriter-style) file, version 2, whose keys all carry
        # sequence number 0: RocksDB refuses to ingest a file without these two.
        "rocksdb.external_sst_file.global_seqno": struct.pack("<Q", 0),
        "rocksdb.external_sst_file.version": struct.pack("<I", 2),
        "rocksdb.filter.size": uv(0),
        "rocksdb.fixed.key.length": uv(0),
        "rocksdb.format.version": uv(0),
        INDEX_KEY_IS_USER_KEY: uv(0),
        "rocksdb.index.size": uv(stats.index_size),
        INDEX_VALUE_IS_DELTA_ENCODED: uv(0),
        "rocksdb.merge.operands": uv(0),
        "rocksdb.merge.operator": b"nullptr",
        NUM_DATA_BLOCKS: uv(stats.num_data_blocks),
        NUM_ENTRIES: uv(stats.num_entries),
        NUM_RANGE_DELETIONS: uv(0),
        "rocksdb.oldest.key.time": uv(0),
        "rocksdb.prefix.extractor.name": b"nullptr",
        "rocksdb.property.collectors": b"[]",
        "rocksdb.raw.key.size": uv(stats.raw_key_size),
        "rocksdb.raw.value.size": uv(stats.raw_value_size),
    }
    if two_level:
        props["rocksdb.index.partitions"] = uv(stats.index_partitions)
        props["rocksdb.top-level.index.size"] = uv(stats.top_level_index_size)
    return props


def check_user_properties(user_properties: Mapping[str, bytes]) -> None:
    """Reject user properties that would collide with RocksDB's or are not ``str -> bytes``."""
    for name, value in user_properties.items():
        if not isinstance(name, str) or name.startswith(RESERVED_PREFIX):
            raise BadInputError("user property names must be str and not start with 'rocksdb.'", field=name)
        if not isinstance(value, bytes | bytearray | memoryview):
            raise BadInputError("user property values must be bytes", field=name)


def encode_properties(props: Mapping[str, bytes]) -> bytes:
    """Encode a properties block (keys sorted bytewise, restart interval 1 as RocksDB does)."""
    builder = BlockBuilder(1)
    for name in sorted(props, key=lambda k: k.encode()):
        builder.add(name.encode(), bytes(props[name]))
    return builder.finish()


def decode_properties(block: bytes, file: str, base: int) -> dict[str, bytes]:
    """Decode a properties block into ``{name: raw value}``; names must be UTF-8."""
    keys, vals = decode_block(block, file, base)
    out: dict[str, bytes] = {}
    for key, val in zip(keys, vals, strict=True):
        try:
            name = key.decode()
        except UnicodeDecodeError as e:
            raise CorruptDataError("property name is not UTF-8", file=file, offset=base) from e
        out[name] = val
    return out


def uvarint_prop(
    props: Mapping[str, bytes], name: str, file: str, offset: int | None = None, default: int = 0
) -> int:
    """A uvarint-encoded property (``default`` when absent). ``offset`` is the properties block's
    file offset, for errors; a malformed value or trailing garbage is corruption."""
    raw = props.get(name)
    if raw is None:
        return default
    try:
        value, end = decode_uvarint(raw, 0, file=file)
    except CorruptDataError as e:
        raise CorruptDataError(f"property {name} is not a uvarint", file=file, offset=offset) from e
    if end != len(raw):
        raise CorruptDataError(f"property {name} is not a single uvarint", file=file, offset=offset)
    return value


def fixed32_prop(
    props: Mapping[str, bytes], name: str, file: str, offset: int | None = None, default: int = 0
) -> int:
    """A uint32 LE property (``default`` when absent)."""
    raw = props.get(name)
    if raw is None:
        return default
    if len(raw) != 4:
        raise CorruptDataError(f"property {name} is not a 4-byte integer", file=file, offset=offset)
    value: int = struct.unpack("<I", raw)[0]
    return value
