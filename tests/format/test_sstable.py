"""The SSTable reader and writer: real fixtures, round trips, writer layout rules and corruption.

Fixtures (``../shared/fixtures``, located by the ``shared_fixtures`` fixture of tests/conftest.py:
skipped when absent, a failure under ``CI``) were written by RocksDB's C++ tools and by lakeFS's Go
code, so reading them exactly is the compatibility check for the reader; rewriting the lakeFS
records byte-for-byte is the check for the writer. Interoperability with RocksDB's own tools lives
in test_sstable_interop.py.
"""

from __future__ import annotations

import hashlib
import mmap
import struct
from bisect import bisect_left
from itertools import islice, pairwise
from pathlib import Path

import cramjam
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lakefs_core.errors import BadInputError, CorruptDataError
from lakefs_core.format.sstable import TableReader, TableWriter
from lakefs_core.format.sstable.block import BlockBuilder, decode_block, decode_data_block
from lakefs_core.format.sstable.footer import (
    COMPRESSION_NONE,
    COMPRESSION_SNAPPY,
    FOOTER_SIZE,
    BlockHandle,
    Footer,
    block_trailer,
    compress_block,
    decode_handle,
    encode_handle,
)
from lakefs_core.format.sstable.properties import encode_properties
from lakefs_core.format.sstable.reader import TableCursor
from lakefs_core.format.sstable.writer import (
    SEPARATOR_TRAILER,
    SET_TRAILER,
    short_successor,
    shortest_separator,
)
from lakefs_core.format.varint import decode_uvarint
from tests.support.profiles import examples

H_FILES = [
    "h.sst",
    "h.no-compression.sst",
    "h.no-compression.two_level_index.sst",
    "h.table-bloom.sst",
    "h.block-bloom.no-compression.sst",
]


def fixture_file(folder: Path, *parts: str) -> Path:
    path = folder.joinpath(*parts)
    if not path.is_file():
        pytest.fail(f"fixture {path} is missing from the shared fixtures folder")
    return path


@pytest.fixture(scope="module")
def hamlet(shared_fixtures: Path) -> list[tuple[bytes, bytes]]:
    """h.txt as sorted (word, count) pairs: key = word, value = count in decimal ASCII."""
    pairs = []
    for line in fixture_file(shared_fixtures, "rocksdb", "h.txt").read_bytes().splitlines():
        count, word = line.split()
        pairs.append((word, count))
    pairs.sort()
    assert len(pairs) == 1710
    assert len({k for k, _ in pairs}) == len(pairs)
    return pairs


def write_table(
    records: list[tuple[bytes, bytes]], props: dict[str, bytes] | None = None, **options: object
) -> bytes:
    writer = TableWriter(**options)  # type: ignore[arg-type]
    for key, value in records:
        writer.add(key, value)
    return writer.finish(props or {})


def lots(n: int, value_size: int = 40) -> list[tuple[bytes, bytes]]:
    return [(b"dir/%08d/file.parquet" % i, (b"%d-" % i * value_size)[:value_size]) for i in range(n)]


# -- RocksDB-written fixtures -----------------------------------------------------------------


@pytest.mark.parametrize("name", H_FILES)
def test_rocksdb_fixtures_read_exactly(
    shared_fixtures: Path, hamlet: list[tuple[bytes, bytes]], name: str
) -> None:
    reader = TableReader(fixture_file(shared_fixtures, "rocksdb", name).read_bytes(), name)
    assert list(reader) == hamlet
    assert list(reader.items()) == hamlet
    assert len(reader) == len(hamlet)  # rocksdb.num.entries (1727) minus the 17 range tombstones
    assert reader.num_data_blocks == 14
    for key, value in hamlet:
        assert reader.get(key) == value
    keys = [k for k, _ in hamlet]
    for i, key in enumerate(keys):
        assert next(reader.seek_ge(key)) == hamlet[i]
        # Between two keys: the next one; after the last: nothing.
        assert list(islice(reader.seek_ge(key + b"\x00"), 2)) == hamlet[i + 1 : i + 3]
        assert reader.get(key + b"\x00") is None
    assert list(reader.seek_ge(b"")) == hamlet
    assert reader.get(b"") is None
    assert reader.get(b"\xff") is None
    assert reader.min_key() == keys[0]
    assert reader.max_key() == keys[-1]


def test_rocksdb_fixture_variants_exercise_what_they_claim(shared_fixtures: Path) -> None:
    def open_h(name: str) -> TableReader:
        return TableReader(fixture_file(shared_fixtures, "rocksdb", name).read_bytes(), name)

    assert open_h("h.sst").compression == "Snappy"
    assert open_h("h.no-compression.sst").compression == "NoCompression"
    assert open_h("h.no-compression.two_level_index.sst").index_type == 2
    assert open_h("h.sst").index_type == 0
    assert "rocksdb.range_del" in open_h("h.sst").meta_blocks
    assert "fullfilter.rocksdb.BuiltinBloomFilter" in open_h("h.table-bloom.sst").meta_blocks
    assert "filter.rocksdb.BuiltinBloomFilter" in open_h("h.block-bloom.no-compression.sst").meta_blocks


# -- lakeFS-written fixtures --------------------------------------------------------------------

RANGE_ID = b"a83af763ba098c15369d9d6d723731eb9ce18b8dfac4f88c6f1287e772393d0e"


def test_lakefs_range_fixture(shared_fixtures: Path) -> None:
    reader = TableReader(fixture_file(shared_fixtures, "lakefs", "range.sst").read_bytes(), "range.sst")
    records = list(reader)
    assert [k for k, _ in records] == [b"a/b/c/no", b"a/b/c/yes"]
    for key, value in records:
        assert value[0] == 0x40  # zig-zag varint 32: a raw 32-byte identity follows
        assert reader.get(key) == value
    assert reader.user_properties == {
        "type": b"ranges",
        "count": b"2",
        "min_key": b"a/b/c/no",
        "max_key": b"a/b/c/yes",
        "estimated_size_bytes": b"287",
    }
    assert reader.properties["rocksdb.comparator"] == b"leveldb.BytewiseComparator"
    assert reader.properties["rocksdb.num.entries"] == b"\x02"
    assert len(reader) == 2
    assert reader.index_type == 0
    assert list(reader.seek_ge(b"a/b/c/p")) == records[1:]


def test_lakefs_metarange_fixture(shared_fixtures: Path) -> None:
    data = fixture_file(shared_fixtures, "lakefs", "metarange.sst").read_bytes()
    reader = TableReader(data, "metarange.sst")
    [(key, value)] = list(reader)
    assert key == b"a/b/c/yes"
    assert value[:65] == b"\x80\x01" + RANGE_ID[:63]  # varint(64) then the ASCII hex range id
    assert value[2:66] == RANGE_ID
    assert reader.user_properties["type"] == b"metaranges"
    assert reader.user_properties["count"] == b"1"
    assert reader.get(b"a/b/c/no") is None
    assert next(reader.seek_ge(b"a/b/c/no")) == (key, value)


@pytest.mark.parametrize("name", ["range.sst", "metarange.sst"])
def test_writer_reproduces_pebble_blocks(shared_fixtures: Path, name: str) -> None:
    """Rewriting a lakeFS file's records gives pebble's data and index blocks byte for byte, and
    pebble's size estimate."""
    original = fixture_file(shared_fixtures, "lakefs", name).read_bytes()
    theirs = TableReader(original, name)
    writer = TableWriter()
    for key, value in theirs:
        writer.add(key, value)
    if name == "range.sst":
        assert writer.estimated_size() == int(theirs.user_properties["estimated_size_bytes"])
    ours_bytes = writer.finish(theirs.user_properties)
    ours = TableReader(ours_bytes, "ours")
    # The data block and then the index block, each with its trailer, come first in both files.
    assert theirs.footer.index == ours.footer.index
    end = ours.footer.index.offset + ours.footer.index.size + 5
    assert original[:end] == ours_bytes[:end]
    assert ours.user_properties == theirs.user_properties
    differing = {
        k
        for k in theirs.properties.keys() | ours.properties.keys()
        if theirs.properties.get(k) != ours.properties.get(k)
    }
    # Only pebble's self-descriptions differ (merge operator and collector names).
    assert differing == {"rocksdb.merge.operator", "rocksdb.property.collectors"}


# -- round trips --------------------------------------------------------------------------------

PREFIXES = [b"", b"a/", b"data/warehouse/table01/date=2026-01-01/" * 3, b"\xff" * 5]


@st.composite
def tables(draw: st.DrawFn) -> tuple[list[tuple[bytes, bytes]], dict[str, object]]:
    keys = draw(
        st.sets(
            st.tuples(st.sampled_from(PREFIXES), st.binary(max_size=12)).map(lambda t: t[0] + t[1]),
            max_size=300,
        )
    )
    values = st.one_of(
        st.binary(max_size=40),
        st.just(b""),
        st.binary(min_size=1, max_size=3).map(lambda b: b * 2000),  # > block size, compressible
    )
    records = [(k, draw(values)) for k in sorted(keys)]
    options = {
        "compression": draw(st.sampled_from(["snappy", "none"])),
        "block_size": draw(st.sampled_from([32, 256, 4096])),
        "block_restart_interval": draw(st.sampled_from([1, 3, 16])),
        "index_partition_size": draw(st.sampled_from([48, 256, 4096])),
    }
    return records, options


@settings(max_examples=examples(1.5), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tables(), st.lists(st.binary(max_size=14), max_size=20), st.sampled_from([0, 1, 64]))
def test_round_trip(
    table: tuple[list[tuple[bytes, bytes]], dict[str, object]], probes: list[bytes], cache: int
) -> None:
    records, options = table
    props = {"type": b"ranges", "count": str(len(records)).encode(), "min_key": b"\x00\xff"}
    data = write_table(records, props, **options)
    reader = TableReader(data, "rt.sst", block_cache_blocks=cache)
    assert list(reader) == records
    assert len(reader) == len(records)
    assert reader.user_properties == props
    keys = [k for k, _ in records]
    for key, value in records:
        assert reader.get(key) == value
    assert reader.get_many(keys + probes) == [reader.get(k) for k in keys + probes]
    present = dict(records)
    for probe in probes + [k + b"\x00" for k in keys[:5]] + [k[:-1] for k in keys[:5]]:
        assert reader.get(probe) == present.get(probe)
        i = bisect_left(keys, probe)
        assert list(islice(reader.seek_ge(probe), 3)) == records[i : i + 3]
    if probes:
        i = bisect_left(keys, probes[0])
        assert list(reader.seek_ge(probes[0])) == records[i:]
    assert reader.min_key() == (keys[0] if keys else None)
    assert reader.max_key() == (keys[-1] if keys else None)
    # Repeated lookups after the cache churned still answer the same.
    for key, value in reversed(records):
        assert reader.get(key) == value
    # A cursor seeking forward through the probes answers what a fresh seek_ge answers each time.
    assert drain(reader.cursor()) == records
    cursor = reader.cursor(b"")
    position = b""
    step = max(1, len(keys) // 16)  # some keys in each block and some past the ends of blocks
    for probe in sorted(probes + keys[::step] + [k + b"\x00" for k in keys[1::step]]):
        cursor.seek_ge(probe)
        position = max(position, probe)
        i = bisect_left(keys, position)
        found = cursor.next()
        assert found == (records[i] if i < len(records) else None), probe
        if found is not None:
            position = found[0] + b"\x00"
    cursor.seek_ge(b"")  # backwards: nothing changes
    i = bisect_left(keys, position)
    assert drain(cursor) == records[i:]


def drain(cursor: TableCursor) -> list[tuple[bytes, bytes]]:
    """Every record a cursor has left (and it stays at its end)."""
    out = []
    while (found := cursor.next()) is not None:
        out.append(found)
    assert cursor.next() is None
    return out


def test_two_level_index_when_the_index_outgrows_4k() -> None:
    small = TableReader(write_table(lots(2000)), "small")
    assert small.index_type == 0
    assert small.num_data_blocks > 10
    records = lots(60_000)
    reader = TableReader(write_table(records), "big")
    assert reader.index_type == 2
    partitions = reader.properties["rocksdb.index.partitions"][0]
    assert partitions > 1
    assert list(reader) == records
    for key, value in records[::997]:
        assert reader.get(key) == value
    assert reader.get(b"dir/99999999") is None


def test_empty_table() -> None:
    reader = TableReader(write_table([], {"type": b"metaranges"}), "empty")
    assert list(reader) == []
    assert len(reader) == 0
    assert reader.get(b"a") is None
    assert list(reader.seek_ge(b"")) == []
    assert reader.min_key() is None
    assert reader.max_key() is None
    assert reader.user_properties == {"type": b"metaranges"}


def test_reader_accepts_mmap_and_memoryview(tmp_path: Path) -> None:
    records = lots(3000)
    path = tmp_path / "t.sst"
    path.write_bytes(write_table(records))
    with (
        path.open("rb") as f,
        mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mapped,
        TableReader(mapped, str(path)) as reader,
    ):
        assert list(reader) == records
        assert reader.get(records[1234][0]) == records[1234][1]
    # Leaving the block closed the reader first, releasing the buffer, so the mmap could close.
    view = memoryview(path.read_bytes())
    assert list(TableReader(view[:], "view")) == records
    closed = TableReader(view, "closed")
    closed.close()
    with pytest.raises(BadInputError, match="closed"):
        closed.get(records[0][0])


def test_bounded_cache_stays_correct() -> None:
    records = lots(5000)
    reader = TableReader(write_table(records), "t", block_cache_blocks=3)
    assert reader.num_data_blocks > 20
    for key, value in records[::-7] + records[::11]:
        assert reader.get(key) == value
        assert len(reader._fifo) <= 3
        assert sum(b is not None for b in reader._blocks) <= 3
    # The record index holds exactly the cached blocks' records.
    assert len(reader._records) == sum(len(b[0]) for b in reader._blocks if b is not None)


# -- writer layout rules ----------------------------------------------------------------------


def data_handles(reader: TableReader) -> list[BlockHandle]:
    return list(reader._handles)


def test_data_blocks_flush_at_ninety_percent() -> None:
    data = write_table(lots(5000, value_size=37), compression="none")
    handles = data_handles(TableReader(data, "t"))
    assert len(handles) > 10
    threshold = (4096 * 90 + 99) // 100
    for handle in handles[:-1]:
        assert threshold < handle.size <= 4096
    # Blocks are contiguous, each followed by its 5-byte trailer.
    for a, b in pairwise(handles):
        assert b.offset == a.offset + a.size + 5


def test_large_value_gets_its_own_block() -> None:
    records = [(b"a", b"x"), (b"b", bytes(range(256)) * 40), (b"c", b"y")]
    reader = TableReader(write_table(records, compression="none"), "t")
    assert reader.num_data_blocks == 2  # "a" + the 10 KiB value; "c" after the oversized block
    assert list(reader) == records


def index_entries(data: bytes, reader: TableReader) -> list[tuple[bytes, BlockHandle]]:
    handle = reader.footer.index
    keys, vals = decode_block(data[handle.offset : handle.offset + handle.size], "t", handle.offset)
    return [(key, decode_handle(val)[0]) for key, val in zip(keys, vals, strict=True)]


def test_index_separators_are_shortened_with_separator_trailer() -> None:
    records = lots(3000)
    data = write_table(records, compression="none")
    reader = TableReader(data, "t")
    entries = index_entries(data, reader)
    assert [h for _, h in entries] == data_handles(reader)
    blocks = [decode_data_block(data[h.offset : h.offset + h.size], "t", h.offset)[0] for _, h in entries]
    for n, (sep, _) in enumerate(entries):
        user, trailer = sep[:-8], sep[-8:]
        last = blocks[n][-1]
        if trailer == SEPARATOR_TRAILER:
            assert last < user
            assert len(user) <= len(last)
        else:
            assert trailer == SET_TRAILER
            assert user == last
        if n + 1 < len(blocks):
            assert user < blocks[n + 1][0]
    # Keys differ in the 8-digit counter: the separators are much shorter than the keys.
    assert all(len(sep) - 8 < len(records[0][0]) for sep, _ in entries)


@pytest.mark.parametrize(
    ("start", "limit", "expected"),
    [
        (b"abc1xyz", b"abc3", b"abc2"),
        (b"abc1xyz", b"abc2", b"abc1y"),  # bumping the '1' would reach the limit
        (b"abc1", b"abc2", b"abc1"),
        (b"abc1\xff\xff", b"abc2", b"abc1\xff\xff"),
        (b"abc", b"abcd", b"abc"),  # prefix: cannot shorten
        (b"abd", b"abc", b"abd"),  # not ordered: unchanged
        (b"", b"a", b""),
        (b"a\xffz", b"b", b"a\xff{"),
    ],
)
def test_shortest_separator(start: bytes, limit: bytes, expected: bytes) -> None:
    assert shortest_separator(start, limit) == expected
    if start < limit:
        assert start <= expected < limit


@pytest.mark.parametrize(
    ("key", "expected"),
    [(b"abc", b"b"), (b"\xff\xffa", b"\xff\xffb"), (b"\xff", b"\xff"), (b"", b"")],
)
def test_short_successor(key: bytes, expected: bytes) -> None:
    assert short_successor(key) == expected
    assert expected >= key


def block_types(data: bytes, reader: TableReader) -> list[int]:
    return [data[h.offset + h.size] for h in data_handles(reader)]


def random_bytes(n: int, seed: int) -> bytes:
    out = b""
    while len(out) < n:
        out += hashlib.sha256(b"%d/%d" % (seed, len(out))).digest()
    return out[:n]


def test_snappy_only_when_it_saves_an_eighth() -> None:
    compressible = write_table(lots(2000), compression="snappy")
    reader = TableReader(compressible, "t")
    assert set(block_types(compressible, reader)) == {1}
    assert reader.compression == "Snappy"
    incompressible = [(b"k%05d" % i, random_bytes(97, i)) for i in range(400)]
    data = write_table(incompressible, compression="snappy")
    reader = TableReader(data, "t")
    assert set(block_types(data, reader)) == {0}
    assert list(reader) == incompressible
    uncompressed = write_table(lots(2000), compression="none")
    assert set(block_types(uncompressed, TableReader(uncompressed, "t"))) == {0}
    assert TableReader(uncompressed, "t").compression == "NoCompression"


@pytest.mark.parametrize("zeros", [0, 50, 100, 120, 140, 200, 400])
def test_compression_threshold_is_one_eighth(zeros: int) -> None:
    raw = random_bytes(1000 - zeros, zeros) + bytes(zeros)
    snappy_size = len(cramjam.snappy.compress_raw(raw))
    payload, ctype = compress_block(raw, COMPRESSION_SNAPPY)
    if snappy_size < len(raw) - len(raw) // 8:
        assert (ctype, len(payload)) == (COMPRESSION_SNAPPY, snappy_size)
    else:
        assert (ctype, payload) == (COMPRESSION_NONE, raw)


def test_footer_and_properties_layout() -> None:
    records = lots(100)
    data = write_table(records, {"type": b"ranges"})
    assert data[-8:] == bytes.fromhex("f7cff485b741e288")
    assert struct.unpack_from("<I", data, len(data) - 12)[0] == 2  # format version
    assert data[-FOOTER_SIZE] == 1  # CRC32C
    reader = TableReader(data, "t")
    assert list(reader.meta_blocks) == ["rocksdb.properties"]
    props = reader.properties
    assert list(props) == sorted(props, key=str.encode)
    assert props["rocksdb.num.entries"] == b"\x64"
    assert props["rocksdb.comparator"] == b"leveldb.BytewiseComparator"
    assert props["rocksdb.external_sst_file.version"] == b"\x02\x00\x00\x00"
    assert props["rocksdb.external_sst_file.global_seqno"] == bytes(8)
    assert props["rocksdb.block.based.table.index.type"] == bytes(4)
    raw_key_size = sum(len(k) + 8 for k, _ in records)
    assert decode_uvarint(props["rocksdb.raw.key.size"], 0) == (raw_key_size, 2)


def test_estimated_size_tracks_the_file() -> None:
    writer = TableWriter()
    sizes = []
    for key, value in lots(20_000):
        writer.add(key, value)
        sizes.append(writer.estimated_size())
    # It only dips when a full block is flushed and compressed (by less than a block).
    assert all(b > a - 4096 for a, b in pairwise(sizes))
    assert sizes[-1] > sizes[len(sizes) // 2] > sizes[0]
    assert writer.entry_count == 20_000
    final = len(writer.finish({}))
    # A hint: open blocks are counted uncompressed; properties, metaindex and footer not at all.
    assert abs(sizes[-1] - final) < final * 0.05


def test_writer_rejects_bad_input() -> None:
    writer = TableWriter()
    writer.add(b"b", b"1")
    with pytest.raises(BadInputError, match="strictly ascending") as info:
        writer.add(b"a", b"2")
    assert info.value.field == "a"
    assert "b'a'" in str(info.value)
    with pytest.raises(BadInputError, match="strictly ascending"):
        writer.add(b"b", b"dup")
    with pytest.raises(BadInputError, match="rocksdb"):
        writer.finish({"rocksdb.num.entries": b"7"})
    with pytest.raises(BadInputError):
        writer.finish({"type": "ranges"})  # type: ignore[dict-item]
    writer.finish({"type": b"ranges"})
    with pytest.raises(BadInputError, match="finished"):
        writer.add(b"c", b"3")
    with pytest.raises(BadInputError, match="finished"):
        writer.finish({})
    with pytest.raises(BadInputError) as bad:
        TableWriter(compression="zstd")
    assert bad.value.field == "compression"
    with pytest.raises(BadInputError):
        TableWriter(block_size=0)


# -- generic RocksDB semantics: versions and tombstones -------------------------------------


def internal(key: bytes, seq: int, kind: int) -> bytes:
    return key + struct.pack("<Q", (seq << 8) | kind)


def craft_table(blocks: list[list[tuple[bytes, bytes]]]) -> bytes:
    """A table whose data blocks hold exactly the given internal-key entries (as RocksDB could)."""
    out = bytearray()
    index = BlockBuilder(1)

    def put(raw: bytes) -> BlockHandle:
        handle = BlockHandle(len(out), len(raw))
        out.extend(raw + block_trailer(raw, 0))
        return handle

    for entries in blocks:
        builder = BlockBuilder(16)
        for ikey, value in entries:
            builder.add(ikey, value)
        index.add(entries[-1][0], encode_handle(put(builder.finish())))
    index_handle = put(index.finish())
    count = sum(len(b) for b in blocks)
    props = put(encode_properties({"rocksdb.num.entries": bytes((count,))}))
    meta = BlockBuilder(1)
    meta.add(b"rocksdb.properties", encode_handle(props))
    meta_handle = put(meta.finish())
    return bytes(out) + Footer(1, meta_handle, index_handle, 2).encode()


def test_newest_version_wins_and_tombstones_hide() -> None:
    data = craft_table(
        [
            [
                (internal(b"a", 5, 1), b"a5"),
                (internal(b"b", 9, 0), b""),  # deletion of b ...
                (internal(b"b", 3, 1), b"b3"),  # ... hides this older SET
                (internal(b"c", 7, 1), b"c7"),
                (internal(b"c", 2, 1), b"c2"),
            ],
            [
                (internal(b"c", 1, 1), b"c1"),  # older version straddling into the next block
                (internal(b"d", 4, 1), b"d4"),
                (internal(b"e", 8, 7), b""),  # single deletion: last record is d
            ],
            [(internal(b"e", 6, 1), b"e6")],  # hidden by the single deletion in the previous block
        ]
    )
    for cache in (0, 1, 64):
        reader = TableReader(data, "versions", block_cache_blocks=cache)
        expected = [(b"a", b"a5"), (b"c", b"c7"), (b"d", b"d4")]
        assert list(reader) == expected
        # Load the later blocks first, so a hidden version there could leak into the cache.
        for key, value in [(b"e", None), (b"d", b"d4"), (b"c", b"c7"), (b"b", None), (b"a", b"a5")]:
            assert reader.get(key) == value
        assert list(reader.seek_ge(b"c")) == expected[1:]
        assert list(reader.seek_ge(b"b")) == expected[1:]
        assert list(reader.seek_ge(b"e")) == []
        assert drain(reader.cursor()) == expected
        for start in (b"", b"b", b"c", b"c\x00", b"e"):
            cursor = reader.cursor(b"")
            cursor.seek_ge(start)
            assert drain(cursor) == list(reader.seek_ge(start)), start
        assert reader.max_key() == b"d"
        assert reader.min_key() == b"a"


def test_decode_data_block_rejects_unsorted_keys() -> None:
    builder = BlockBuilder(16)
    builder.add(internal(b"b", 0, 1), b"")
    builder.add(internal(b"a", 0, 1), b"")
    with pytest.raises(CorruptDataError, match="out of order") as info:
        decode_data_block(builder.finish(), "t.sst", 4242)
    assert info.value.offset == 4242


# -- corruption ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sample() -> tuple[bytes, list[tuple[bytes, bytes]]]:
    records = lots(3000)
    return write_table(records, compression="none"), records


def read_all(data: bytes, *, verify_checksums: bool = True) -> list[tuple[bytes, bytes]]:
    """Open, scan and look up a sample of keys: every code path a corruption could hit."""
    reader = TableReader(data, "bad.sst", verify_checksums=verify_checksums)
    out = list(reader)
    for key, _ in out[::50]:
        reader.get(key)
    return out


def assert_corrupt(exc: CorruptDataError, offset: int | None = None) -> None:
    assert exc.file == "bad.sst"
    assert "bad.sst" in str(exc)
    assert exc.offset is not None
    if offset is not None:
        assert exc.offset == offset
        assert f"offset {offset}" in str(exc)


def test_flipped_data_byte_is_a_checksum_mismatch(sample: tuple[bytes, list[tuple[bytes, bytes]]]) -> None:
    data, records = sample
    handles = data_handles(TableReader(data, "t"))
    bad = bytearray(data)
    bad[handles[3].offset + 100] ^= 0x01
    # Every data block is verified when the reader opens, before any is decoded.
    with pytest.raises(CorruptDataError, match="checksum mismatch") as info:
        TableReader(bytes(bad), "bad.sst")
    assert_corrupt(info.value, handles[3].offset)
    # Unverified, the same file opens and the untouched blocks read normally.
    unverified = TableReader(bytes(bad), "bad.sst", verify_checksums=False)
    assert unverified.get(records[0][0]) == records[0][1]
    assert list(islice(unverified, 10)) == records[:10]


def test_corrupt_block_contents_detected_without_checksums(
    sample: tuple[bytes, list[tuple[bytes, bytes]]],
) -> None:
    data, _ = sample
    first = data_handles(TableReader(data, "t"))[0]
    bad = bytearray(data)
    # The restart count at the end of block 0 now claims far more restarts than fit.
    struct.pack_into("<I", bad, first.offset + first.size - 4, 0x00FFFFFF)
    with pytest.raises(CorruptDataError, match="restart") as info:
        read_all(bytes(bad), verify_checksums=False)
    assert_corrupt(info.value, first.offset)
    bad = bytearray(data)
    bad[first.offset] = 5  # first entry claims a shared prefix with a non-existent predecessor
    with pytest.raises(CorruptDataError, match="shared prefix"):
        read_all(bytes(bad), verify_checksums=False)


@pytest.mark.parametrize("cut", [1, 8, 53, 54, 1000, -10, -100])
def test_truncated_file(sample: tuple[bytes, list[tuple[bytes, bytes]]], cut: int) -> None:
    data, _ = sample
    truncated = data[:cut] if cut > 0 else data[: len(data) + cut]
    with pytest.raises(CorruptDataError) as info:
        read_all(truncated)
    assert_corrupt(info.value)


def test_bad_magic(sample: tuple[bytes, list[tuple[bytes, bytes]]]) -> None:
    data, _ = sample
    with pytest.raises(CorruptDataError, match="magic") as info:
        read_all(data[:-1] + b"\x00")
    assert_corrupt(info.value, len(data) - 8)
    leveldb = data[:-8] + struct.pack("<Q", 0xDB4775248B80FB57)
    with pytest.raises(CorruptDataError, match="LevelDB"):
        read_all(leveldb)


def test_unsupported_format_version(sample: tuple[bytes, list[tuple[bytes, bytes]]]) -> None:
    data, _ = sample
    bad = bytearray(data)
    struct.pack_into("<I", bad, len(data) - 12, 6)
    with pytest.raises(CorruptDataError, match="format version 6") as info:
        read_all(bytes(bad))
    assert_corrupt(info.value, len(data) - 12)


def replace_footer(data: bytes, **changes: BlockHandle) -> bytes:
    reader = TableReader(data, "t")
    footer = Footer(
        1,
        changes.get("metaindex", reader.footer.metaindex),
        changes.get("index", reader.footer.index),
        2,
    )
    return data[:-FOOTER_SIZE] + footer.encode()


def test_handle_outside_the_file(sample: tuple[bytes, list[tuple[bytes, bytes]]]) -> None:
    data, _ = sample
    with pytest.raises(CorruptDataError, match="outside the file") as info:
        read_all(replace_footer(data, index=BlockHandle(len(data) - 30, 100)))
    assert_corrupt(info.value, len(data) - 30)
    with pytest.raises(CorruptDataError, match="outside the file"):
        read_all(replace_footer(data, metaindex=BlockHandle(10**9, 10)))


def rewrite_block(data: bytes, handle: BlockHandle, payload: bytes, ctype: int) -> bytes:
    """Replace a block (same size) and give it a valid trailer, so only its content is wrong."""
    assert len(payload) == handle.size
    end = handle.offset + handle.size
    return data[: handle.offset] + payload + block_trailer(payload, ctype) + data[end + 5 :]


def test_unknown_compression_type(sample: tuple[bytes, list[tuple[bytes, bytes]]]) -> None:
    data, _ = sample
    first = data_handles(TableReader(data, "t"))[0]
    bad = rewrite_block(data, first, data[first.offset : first.offset + first.size], 9)
    with pytest.raises(CorruptDataError, match="compression type 9") as info:
        read_all(bad)
    assert_corrupt(info.value)


def test_bad_snappy_stream(sample: tuple[bytes, list[tuple[bytes, bytes]]]) -> None:
    data, _ = sample
    first = data_handles(TableReader(data, "t"))[0]
    garbage = b"\x90\x03" + b"\xff" * (first.size - 2)  # claims 400 bytes, then invalid tags
    with pytest.raises(CorruptDataError, match="bad compressed block") as info:
        read_all(rewrite_block(data, first, garbage, 1))
    assert_corrupt(info.value, first.offset)
    huge = b"\xff\xff\xff\xff\x0f" + bytes(first.size - 5)  # claims 4 GiB
    with pytest.raises(CorruptDataError, match="implausible"):
        read_all(rewrite_block(data, first, huge, 1))


def test_bad_varint_in_index(sample: tuple[bytes, list[tuple[bytes, bytes]]]) -> None:
    data, _ = sample
    handle = TableReader(data, "t").footer.index
    block = bytearray(data[handle.offset : handle.offset + handle.size])
    block[0:3] = b"\xff\xff\xff"  # an entry header that runs into the next bytes as one huge varint
    with pytest.raises(CorruptDataError) as info:
        read_all(rewrite_block(data, handle, bytes(block), 0))
    assert_corrupt(info.value)


@settings(max_examples=examples(3), deadline=None)
@given(st.data())
def test_any_single_byte_flip_is_detected_or_harmless(data_strategy: st.DataObject) -> None:
    """Every flip or truncation gives CorruptDataError (never another exception) or, with checksums
    on, exactly the original records."""
    data, records = _FUZZ
    position = data_strategy.draw(st.integers(0, len(data) - 1))
    delta = data_strategy.draw(st.integers(1, 255))
    verify = data_strategy.draw(st.booleans())
    bad = bytearray(data)
    bad[position] ^= delta
    try:
        got = read_all(bytes(bad), verify_checksums=verify)
    except CorruptDataError as e:
        assert_corrupt(e)
        return
    if verify:
        assert got == records


def _fuzz_table() -> tuple[bytes, list[tuple[bytes, bytes]]]:
    records = lots(120, value_size=30)
    return write_table(records, block_size=512, index_partition_size=64), records


_FUZZ = _fuzz_table()


def test_fuzz_table_is_two_level() -> None:
    reader = TableReader(_FUZZ[0], "fuzz")
    assert reader.index_type == 2
    assert reader.num_data_blocks > 5


def test_verification_refuses_a_file_without_checksums(
    sample: tuple[bytes, list[tuple[bytes, bytes]]],
) -> None:
    """Checksum type 0 is one bit flip away from 1: with verification asked for, it is refused."""
    data, records = sample
    unchecked = bytearray(data)
    unchecked[len(data) - FOOTER_SIZE] = 0
    with pytest.raises(CorruptDataError, match="no checksums") as info:
        read_all(bytes(unchecked))
    assert_corrupt(info.value, len(data) - FOOTER_SIZE)
    assert read_all(bytes(unchecked), verify_checksums=False) == records


def test_to_bytes_copies_the_file_and_refuses_once_closed(tmp_path: Path) -> None:
    """What a worker process is sent: the same file, from a bytes or an mmap-backed reader."""
    writer = TableWriter()
    for i in range(500):
        writer.add(f"key{i:05d}".encode(), b"v" * 40)
    data = writer.finish()
    path = tmp_path / "t.sst"
    path.write_bytes(data)
    with path.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        for source in (data, mm):
            reader = TableReader(source)
            assert reader.size_bytes == len(data)
            copy = reader.to_bytes()
            assert copy == data and type(copy) is bytes
            assert list(TableReader(copy)) == list(reader)
            reader.close()
            with pytest.raises(BadInputError, match="closed"):
                reader.to_bytes()
            assert reader.size_bytes == len(data)


def test_the_writers_uvarint_table_is_every_small_uvarint() -> None:
    from lakefs_core.format.sstable import writer as writer_module
    from lakefs_core.format.varint import encode_uvarint

    table = writer_module._UVARINTS
    assert len(table) == writer_module._UVARINT_TABLE_SIZE
    assert all(table[i] == encode_uvarint(i) for i in range(len(table)))
