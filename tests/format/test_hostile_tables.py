"""The table reader treats every file as hostile: valid checksums, wrong contents (issue 8, part 3).

Every file here carries correct CRC32C trailers (crafted with tests/format/crafted_tables.py), so
only the reader's structural checks stand between it and a hang, a memory blow-up or wrong records.
Each violation must raise CorruptDataError naming the file and a byte offset. The files that blew
up the old reader run in a subprocess under ``RLIMIT_AS`` and a timeout, and so does the
hypothesis mutation fuzz (tests/format/fuzz_tables.py), so a regression fails cleanly.
"""

from __future__ import annotations

from pathlib import Path

import cramjam
import pytest

from lakefs_core.committed.tables import TableCache, TableStore
from lakefs_core.errors import CorruptDataError
from lakefs_core.format.sstable import TableReader
from lakefs_core.format.sstable.block import decode_block
from lakefs_core.format.sstable.footer import decode_footer, decode_handle, read_block
from lakefs_core.format.varint import encode_uvarint
from tests.committed.support import memory_tables
from tests.format.crafted_tables import (
    Crafter,
    block_of,
    bombs,
    data_block,
    ikey,
    index_key_growth_bomb,
    key_growth_bomb,
    lots,
    one_level,
    run_limited,
    sep,
    write_table,
)
from tests.format.fuzz_tables import MULTI_VERSION_RECORDS, multi_version_table
from tests.support.profiles import examples
from tests.support.timing import scaled

MiB = 1 << 20


def corrupt(data: bytes, match: str, *, name: str = "bad.sst", **options: int) -> CorruptDataError:
    """Open, scan and look up every key; CorruptDataError matching ``match``, naming file and offset."""
    with pytest.raises(CorruptDataError, match=match) as info:
        reader = TableReader(data, name, **options)
        for key, _ in list(reader):
            reader.get(key)
    assert info.value.file == name and name in str(info.value)
    assert info.value.offset is not None and f"offset {info.value.offset}" in str(info.value)
    return info.value


# -- the blow-ups, in a memory-limited subprocess ------------------------------------------------


def test_bombs_fail_fast_under_a_memory_limit(tmp_path: Path) -> None:
    """A 1 GiB zstd claim in a ~200-byte file, a partition referenced 20,000 times, keys that grow
    by prefix sharing (data and index blocks): each is CorruptDataError within the limits."""
    files = bombs()
    assert max(len(d) for d in files.values()) < 800_000
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    result = run_limited(["files", str(tmp_path)], memory_bytes=512 * MiB, timeout=scaled(60))
    assert result.returncode == 0, result.describe()
    for name in files:
        assert result.lines.get(name, "").startswith("corrupt "), (name, result.describe())


def test_mutation_fuzz_under_a_memory_limit() -> None:
    """Hypothesis mutations of valid files (checksums recomputed): CorruptDataError or exactly the
    records a correct parse produces, with lookups agreeing; one subprocess, 400 MiB, bounded time."""
    n = examples(4)  # 400 under the ci profile
    result = run_limited(["fuzz", str(n)], memory_bytes=400 * MiB, timeout=scaled(120) * n / 400)
    assert result.returncode == 0, result.describe()
    assert result.lines.get("fuzz") == "done", result.describe()
    outcomes = dict(kv.split("=") for kv in result.lines["outcomes"].split())
    assert int(outcomes.get("corrupt", 0)) > 50 and int(outcomes.get("ok", 0)) > 10, outcomes


# -- decompression bounds ---------------------------------------------------------------------------


def zstd_block_table(claimed: int, raw: bytes) -> bytes:
    """One zstd data block (RocksDB framing: uvarint decompressed size, then the stream)."""
    c = Crafter()
    handle = c.block(encode_uvarint(claimed) + bytes(cramjam.zstd.compress(raw)), 7)
    return c.finish(c.index([(sep(b"b"), handle)]), entries=1)


def test_decompressed_length_must_match_exactly() -> None:
    raw = data_block([(b"a", b"1")])
    assert list(TableReader(zstd_block_table(len(raw), raw), "ok.sst")) == [(b"a", b"1")]
    # The old reader let cramjam zero-pad the output up to the claimed size.
    corrupt(zstd_block_table(len(raw) + 8, raw), "wrong length")
    corrupt(zstd_block_table(len(raw) - 1, raw), "bad compressed block|wrong length")


def test_block_size_bound_is_a_reader_setting() -> None:
    from lakefs_core.format.sstable.footer import DEFAULT_MAX_BLOCK_BYTES  # new: fail, not error, before

    data = write_table(lots(400), block_size=4096)  # Snappy, ~4 KiB blocks
    assert 20 * MiB <= DEFAULT_MAX_BLOCK_BYTES  # above lakeFS's largest default range
    assert len(list(TableReader(data, "t"))) == 400
    corrupt(data, "max_block_bytes|implausible size", max_block_bytes=1024)
    huge = zstd_block_table(DEFAULT_MAX_BLOCK_BYTES + 1, data_block([(b"a", b"1")]))
    corrupt(huge, "implausible size")


async def test_block_size_bound_flows_from_the_table_cache() -> None:
    data = write_table(lots(400), block_size=4096)
    table_id = "ab" * 32
    default = memory_tables()
    assert await default.write(table_id, data)
    assert len(list(await default.open(table_id))) == 400
    strict = TableStore(default.store, default.namespace, TableCache(max_block_bytes=1024))
    with pytest.raises(CorruptDataError, match=r"max_block_bytes|implausible") as info:
        await strict.open(table_id)
    assert info.value.file == f"_lakefs/{table_id}"


# -- index structure ------------------------------------------------------------------------------


def test_partition_referenced_twice() -> None:
    """Old reader: both references read, the block's records came back twice (a, b, a, b)."""
    c = Crafter()
    data = c.block(data_block([(b"a", b"1"), (b"b", b"2")]))
    partition = c.index([(sep(b"b"), data)])
    top = c.index([(sep(b"b"), partition), (sep(b"c"), partition)])
    corrupt(c.finish(top, entries=2, two_level=True), "index partition")


def test_top_level_index_out_of_order() -> None:
    c = Crafter()
    d0 = c.block(data_block([(b"a", b"1")]))
    d1 = c.block(data_block([(b"m", b"2")]))
    p0 = c.index([(sep(b"b"), d0)])
    p1 = c.index([(sep(b"n"), d1)])
    top = c.index([(sep(b"z"), p0), (sep(b"n"), p1)])
    corrupt(c.finish(top, entries=2, two_level=True), "not strictly ascending")


def test_partition_above_its_top_level_key_by_the_trailer_alone() -> None:
    """The same user key in the partition's last separator and its top-level key, but the
    partition's with a smaller trailer, so it sorts after the top-level key in internal-key order
    (user key ascending, trailer descending). Old reader compared user keys only and accepted it."""
    c = Crafter()
    d0 = c.block(data_block([(b"a", b"1")]))
    p0 = c.index([(ikey(b"b", seq=1), d0)])
    top = c.index([(sep(b"b"), p0)])
    corrupt(c.finish(top, entries=1, two_level=True), "above its top-level key")
    # The other way round is in order: a partition ending at or before its top-level key.
    c = Crafter()
    d0 = c.block(data_block([(b"a", b"1")]))
    p0 = c.index([(sep(b"b"), d0)])
    top = c.index([(ikey(b"b", seq=1), p0)])
    assert list(TableReader(c.finish(top, entries=1, two_level=True), "t")) == [(b"a", b"1")]


def test_unsupported_index_type_names_the_properties_block() -> None:
    """Found by a randomised run of the mutation fuzz: the refusal named no offset."""
    c = Crafter()
    d0 = c.block(data_block([(b"a", b"1")]))
    data = c.finish(c.index([(sep(b"b"), d0)]), entries=1, index_type=522)
    error = corrupt(data, "unsupported index type 522")
    footer = decode_footer(memoryview(data), "t")
    names, handles = decode_block(read_block(memoryview(data), footer.metaindex, "t"), "t", 0)
    assert names == [b"rocksdb.properties"]
    assert error.offset == decode_handle(handles[0], 0, file="t")[0].offset


def test_equal_index_separators() -> None:
    """Old reader: equal separators passed, and ``get(b"b")`` looked in the block holding "a"."""
    data = one_level(
        [data_block([(b"a", b"1")]), data_block([(b"b", b"2")])], [sep(b"b"), sep(b"b")], entries=2
    )
    corrupt(data, "not strictly ascending")


def test_data_handle_repeated() -> None:
    """Old reader: three index entries naming one block scanned as a, b, a, b, a, b."""
    block = data_block([(b"a", b"1"), (b"b", b"2")])
    data = one_level([block], [sep(b"b"), sep(b"c"), sep(b"d")], entries=6, order=[0, 0, 0])
    corrupt(data, "overlaps another block")


def test_data_handle_into_the_meta_blocks() -> None:
    """An index entry naming the properties block: the old reader returned property names as keys."""
    c = Crafter()
    d0 = c.block(data_block([(b"a", b"1")]))
    good = c.finish(c.index([(sep(b"b"), d0)]), entries=1)
    reader = TableReader(good, "t")
    props = reader.meta_blocks["rocksdb.properties"]
    c = Crafter(bytearray(good[: reader.footer.index.offset]))
    index = c.index([(sep(b"b"), d0), (sep(b"zzzz"), props)])
    corrupt(c.finish(index, entries=1), "overlaps another block|outside")


# -- key order across blocks -----------------------------------------------------------------------


def test_blocks_out_of_order() -> None:
    """Old reader: scanned m, n, a, b."""
    data = one_level(
        [data_block([(b"m", b"1"), (b"n", b"2")]), data_block([(b"a", b"3"), (b"b", b"4")])],
        [sep(b"o"), sep(b"z")],
        entries=4,
    )
    corrupt(data, "not above the previous separator")


def test_key_above_its_separator() -> None:
    """Old reader: "c" came back from scans but ``get(b"c")`` looked in the next block: None."""
    data = one_level(
        [data_block([(b"a", b"1"), (b"c", b"2")]), data_block([(b"d", b"3")])],
        [sep(b"b"), sep(b"e")],
        entries=3,
    )
    corrupt(data, "above its index separator")


def test_repeated_key_without_older_sequence() -> None:
    block = block_of([(ikey(b"a", 5), b"new"), (ikey(b"a", 5), b"other")])
    corrupt(one_level([block], [sep(b"b")], entries=2), "smaller sequence number")


def test_straddling_versions_still_read() -> None:
    """The one legitimate case of a block starting at the previous separator: older versions."""
    reader = TableReader(multi_version_table(), "mv")
    assert list(reader) == MULTI_VERSION_RECORDS
    assert [reader.get(k) for k, _ in MULTI_VERSION_RECORDS] == [v for _, v in MULTI_VERSION_RECORDS]
    assert reader.get(b"c") is None


def test_straddle_needs_the_same_key_in_the_previous_block() -> None:
    blocks = [block_of([(ikey(b"a", 5), b"a5")]), block_of([(ikey(b"b", 3), b"b3")])]
    corrupt(one_level(blocks, [ikey(b"b", 7), sep(b"c")], entries=2), "not above the previous separator")


# -- entry count ------------------------------------------------------------------------------------


def test_entry_count_checked_after_a_full_scan() -> None:
    blocks = [data_block([(b"a", b"1"), (b"b", b"2")])]
    error = corrupt(one_level(blocks, [sep(b"c")], entries=5), "properties state 5")
    assert "hold 2 entries" in str(error)
    no_count = TableReader(one_level(blocks, [sep(b"c")], entries=None), "t")
    assert list(no_count) == [(b"a", b"1"), (b"b", b"2")]
    partial = TableReader(one_level(blocks, [sep(b"c")], entries=5), "t")
    assert next(iter(partial)) == (b"a", b"1")  # a scan that stops early is not checked
    assert list(partial.seek_ge(b"b")) == [(b"b", b"2")]
    # A cursor from the start reads every block (a seek inside the block it holds skips none):
    # checked at its end. One opened at a key, or seeked past blocks, is not.
    for seek in (b"", b"b"):
        cursor = partial.cursor()
        cursor.seek_ge(seek)
        assert cursor.next() == (b"b" if seek else b"a", b"2" if seek else b"1")
        with pytest.raises(CorruptDataError, match="properties state 5"):
            while cursor.next() is not None:
                pass
    seeked = partial.cursor(b"b")
    assert seeked.next() == (b"b", b"2") and seeked.next() is None


# -- prefix-compressed keys -------------------------------------------------------------------------


def test_key_growth_bounded_in_process() -> None:
    """The same shape as the subprocess bomb, small enough to run here: refused early."""
    corrupt(key_growth_bomb(20_000), "shared key prefixes exceed", name="bad.sst")
    with pytest.raises(CorruptDataError, match="shared key prefixes exceed"):
        TableReader(index_key_growth_bomb(20_000), "bad.sst")
