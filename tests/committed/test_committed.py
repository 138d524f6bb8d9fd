"""Ranges and metaranges end to end: reuse, readers, diff economy, tiered cache, sst_dump."""

from __future__ import annotations

import asyncio
import hashlib
import re
import subprocess
from pathlib import Path

import pytest

from lakefs_core.committed.apply import apply_changes
from lakefs_core.committed.diff import diff
from lakefs_core.committed.metarange import MetaRange
from lakefs_core.committed.model import Change, DiffType, ValueRecord
from lakefs_core.committed.tables import DiskCache, TableCache, TableStore
from lakefs_core.committed.writer import RANGES, RangeBuilder
from lakefs_core.errors import CorruptDataError, NotFoundError
from lakefs_core.format.splitter import SplitPolicy
from lakefs_core.format.sstable.reader import TableReader
from tests.committed.support import memory_tables
from tests.support.env import require_tool

POLICY = SplitPolicy(range_raggedness_entries=200)
N = 20_000


def rec(i: int, version: bytes = b"v1") -> ValueRecord:
    key = f"tables/t{i % 7}/part-{i:07d}.parquet".encode()
    data = version + key
    return ValueRecord(key, hashlib.sha256(data).digest(), data)


async def write(tables: TableStore, records: list[ValueRecord], policy: SplitPolicy = POLICY) -> MetaRange:
    empty = await MetaRange.load(tables, "")
    records = sorted(records, key=lambda r: r.key)
    result = await apply_changes(tables, empty, [Change(r.key, r) for r in records], policy=policy)
    return await MetaRange.load(tables, result.metarange_id)


@pytest.fixture(scope="module")
def big() -> tuple[TableStore, MetaRange, list[ValueRecord]]:
    tables = memory_tables()
    records = sorted((rec(i) for i in range(N)), key=lambda r: r.key)
    mr = asyncio.run(write(tables, records))
    return tables, mr, records


async def test_reader_point_seek_and_iteration(big: tuple[TableStore, MetaRange, list[ValueRecord]]) -> None:
    tables, mr0, records = big
    mr = await MetaRange.load(tables, mr0.id)
    assert len(mr.ranges) > 20
    assert len(mr) == N
    assert [r.key async for r in mr] == [r.key for r in records]
    for r in records[:: N // 97]:
        assert await mr.get(r.key) == r
    assert await mr.get(b"tables/t0/part-") is None
    assert await mr.get(b"zzz") is None
    start = records[N // 3].key + b"\x00"
    got = []
    async for r in mr.seek_ge(start):
        got.append(r.key)
        if len(got) == 5:
            break
    assert got == [r.key for r in records[N // 3 + 1 : N // 3 + 6]]
    # A key between two ranges finds nothing and opens nothing.
    opened = mr.ranges_opened
    assert await mr.get(mr.ranges[0].max_key + b"\x00") is None
    assert mr.ranges_opened == opened


async def test_changing_one_key_rewrites_at_most_two_ranges(
    big: tuple[TableStore, MetaRange, list[ValueRecord]],
) -> None:
    tables, mr, records = big
    for i in (0, N // 2, N - 1):
        changed = rec(int(records[i].key[-15:-8]), b"v2")
        assert changed.key == records[i].key
        result = await apply_changes(tables, mr, [Change(changed.key, changed)], policy=POLICY)
        assert result.stats.ranges_written <= 2
        before, after = {r.id for r in mr.ranges}, {r.id for r in result.ranges}
        assert len(before - after) <= 2
        assert len(after & before) >= len(mr.ranges) - 2
        new = await MetaRange.load(tables, result.metarange_id)
        assert (await new.get(changed.key)) == changed


async def test_diff_opens_only_changed_ranges(big: tuple[TableStore, MetaRange, list[ValueRecord]]) -> None:
    tables, mr, records = big
    picks = [records[i] for i in (5, N // 4, N // 2 + 3)]
    changes = [Change(r.key, rec(int(r.key[-15:-8]), b"v3")) for r in picks]
    result = await apply_changes(tables, mr, changes, policy=POLICY)
    left, right = await MetaRange.load(tables, mr.id), await MetaRange.load(tables, result.metarange_id)
    found = [d async for d in diff(left, right)]
    assert [(d.type, d.key) for d in found] == [(DiffType.CHANGED, r.key) for r in picks]
    assert left.ranges_opened <= 6 and right.ranges_opened <= 6
    assert len(left.ranges) > 50


def test_written_tables_pass_sst_dump(tmp_path: Path) -> None:
    sst_dump = require_tool("sst_dump", "rocksdb-tools")
    tables = memory_tables()
    records = sorted((rec(i) for i in range(3000)), key=lambda r: r.key)

    async def produce() -> tuple[MetaRange, dict[str, bytes]]:
        mr = await write(tables, records)
        ids = [r.id for r in mr.ranges] + [mr.id]
        return mr, {i: await tables.store.get(tables.key(i)) for i in ids}

    mr, files = asyncio.run(produce())
    ids = list(files)
    for table_id, data in files.items():
        path = tmp_path / f"{table_id}.sst"  # sst_dump only accepts *.sst names
        path.write_bytes(data)
        out = subprocess.run(
            [sst_dump, f"--file={path}", "--command=scan", "--verify_checksum"],
            capture_output=True,
            check=False,
        )
        stdout = out.stdout.decode("utf-8", "replace")  # values are binary protobuf
        assert out.returncode == 0, out.stderr
        assert "Corruption" not in stdout + out.stderr.decode("utf-8", "replace")
        scanned = re.findall(r"^'tables/[^']*' seq:0, type:1 => ", stdout, flags=re.MULTILINE)
        expected = mr.ranges[ids.index(table_id)].count if table_id != mr.id else len(mr.ranges)
        assert len(scanned) == expected


async def test_tiered_cache_disk_and_ram(tmp_path: Path) -> None:
    disk = DiskCache(tmp_path / "cache", max_bytes=60_000)
    cache = TableCache(ram_bytes=30_000, disk=disk)
    tables = memory_tables(cache)
    mr = await write(tables, [rec(i) for i in range(2000)])
    cold = TableStore(tables.store, tables.namespace, cache)
    for info in mr.ranges:
        reader = await cold.open(info.id)
        assert len(reader) == info.count
    assert cache.stats.fetches >= len(mr.ranges)
    assert disk.used_bytes <= 60_000 and disk.evictions > 0
    assert cache.stats.evictions_ram > 0
    # A table still on disk is served from there, without the object store.
    on_disk = sorted(p.name for p in (tmp_path / "cache").iterdir() if not p.name.startswith("."))
    assert on_disk
    fresh = TableCache(ram_bytes=1 << 20, disk=DiskCache(tmp_path / "cache", max_bytes=60_000))
    await tables.store.delete(tables.key(on_disk[-1]))
    reader = await TableStore(tables.store, tables.namespace, fresh).open(on_disk[-1])
    assert fresh.stats.disk_hits == 1 and fresh.stats.fetches == 0 and len(reader) > 0


async def test_single_flight_and_missing_table() -> None:
    cache = TableCache()
    tables = memory_tables(cache)
    mr = await write(tables, [rec(i) for i in range(500)])
    cold = TableStore(tables.store, tables.namespace, TableCache())
    readers = await asyncio.gather(*(cold.open(mr.ranges[0].id) for _ in range(10)))
    assert all(r is readers[0] for r in readers)
    assert cold.cache.stats.fetches == 1
    with pytest.raises(NotFoundError, match="not found"):
        await cold.open("0" * 64)


async def test_corrupt_download_is_not_cached(tmp_path: Path) -> None:
    disk = DiskCache(tmp_path / "c", max_bytes=1 << 20)
    tables = memory_tables(TableCache(disk=disk))
    builder = RangeBuilder(RANGES)
    r = rec(1)
    builder.add(r.key, r.to_value())
    built = builder.finish()
    damaged = bytearray(built.data)
    damaged[10] ^= 0xFF
    await tables.store.put(tables.key(built.id), bytes(damaged))
    with pytest.raises(CorruptDataError, match=built.id):
        await tables.open(built.id)
    assert disk.read(built.id) is None


def test_range_builder_ids_match_reader() -> None:
    builder = RangeBuilder(RANGES)
    records = sorted((rec(i) for i in range(300)), key=lambda r: r.key)
    for r in records:
        builder.add(r.key, r.to_value())
    built = builder.finish()
    reader = TableReader(built.data, name="built")
    assert reader.user_properties["type"] == b"ranges"
    assert reader.user_properties["count"] == b"300"
    assert reader.user_properties["min_key"] == records[0].key
    assert reader.user_properties["max_key"] == records[-1].key
    assert [ValueRecord.from_sst(k, v) for k, v in reader] == records


async def test_parsed_metaranges_are_cached_by_id() -> None:
    cache = TableCache(ram_bytes=1 << 20)
    tables = memory_tables(cache)
    mr = await write(tables, [rec(i) for i in range(2000)])
    cold = TableStore(tables.store, tables.namespace, TableCache(ram_bytes=1 << 20, parsed_metaranges=1))
    first = await MetaRange.load(cold, mr.id)
    fetches = cold.cache.stats.fetches
    again = await MetaRange.load(cold, mr.id)
    assert cold.cache.stats.fetches == fetches and cold.cache.stats.ram_hits == 0  # no table access
    assert again.ranges == first.ranges == mr.ranges and again.ranges is not first.ranges
    other = await write(tables, [rec(i, b"v9") for i in range(10)])
    await MetaRange.load(cold, other.id)  # evicts the first parse (bound of 1)
    assert cold.cache.metarange_ranges(mr.id) is None
    assert (await MetaRange.load(cold, mr.id)).ranges == mr.ranges
