"""Graveler format benchmarks (issue "Graveler format"), all as same-run ratios.

1. warm random point lookups per second on an N-record metarange, against RocksDB via rocksdict on
   the same records (target >= 1.0x);
2. records written per second (ranges + metarange, ids, splitting) against rocksdict's
   SstFileWriter writing the same key/value pairs: the median of ``--write-repeat`` (3) same-run
   ratios (target >= 0.4x);
3. commit of 1 changed key into the N-record metarange: ranges rewritten, wall time, and the ratio
   to writing the whole metarange from scratch;
4. diff of two N-record commits that differ in 10 keys: ranges opened, wall time, and the ratio to
   a record-by-record comparison of both commits.

Run: ``.venv/bin/python -m bench.bench_graveler [--records 1000000] [--lookups 300000]``.
The object store is the memory driver: we measure our CPU, not a backend.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import random
import statistics
import tempfile
from pathlib import Path

from rocksdict import BlockBasedOptions, Cache, Options, Rdict, SstFileWriter

from bench.common import best_of, machine, make_records, report, timer
from lakefs_core.block.memory import MemoryBlockStore
from lakefs_core.committed.apply import apply_changes
from lakefs_core.committed.diff import diff
from lakefs_core.committed.metarange import MetaRange
from lakefs_core.committed.model import Change
from lakefs_core.committed.tables import TableCache, TableStore
from lakefs_core.format.records import ValueRecord
from lakefs_core.format.splitter import SplitPolicy
from lakefs_core.format.sstable.writer import ACCELERATED
from lakefs_core.namespace import StorageNamespace


def new_tables() -> TableStore:
    cache = TableCache(ram_bytes=8 << 30, block_cache_blocks=1 << 20)
    return TableStore(MemoryBlockStore("bench"), StorageNamespace.parse("mem://bench/repo"), cache)


async def write_all(tables: TableStore, records: list[ValueRecord], policy: SplitPolicy) -> MetaRange:
    empty = await MetaRange.load(tables, "")
    result = await apply_changes(tables, empty, (Change(r.key, r) for r in records), policy=policy)
    return await MetaRange.load(tables, result.metarange_id)


def rocks_options() -> Options:
    opts = Options(raw_mode=True)
    table = BlockBasedOptions()
    table.set_block_cache(Cache(4 << 30))
    opts.set_block_based_table_factory(table)
    opts.create_if_missing(True)
    return opts


def rocks_write(records: list[ValueRecord], path: Path) -> None:
    writer = SstFileWriter(options=Options(raw_mode=True))
    writer.open(str(path))
    for r in records:
        writer[r.key] = r.to_value()
    writer.finish()


async def bench_writes(records: list[ValueRecord], policy: SplitPolicy, tmp: Path, repeat: int) -> MetaRange:
    """Ours and rocksdict alternately, ``repeat`` times each, garbage collection off for both (as
    ``best_of`` does): the machine is shared, so the figure is the median of the same-run ratios."""
    n = len(records)
    ratios, ours_rates, rocks_rates = [], [], []
    mr: MetaRange | None = None
    for _ in range(repeat):
        gc.collect()
        gc.disable()
        try:
            with timer() as t:
                mr = await write_all(new_tables(), records, policy)
        finally:
            gc.enable()
        rocks_s = best_of(1, lambda: rocks_write(records, tmp / "w.sst"))
        ours_rates.append(n / t["seconds"])
        rocks_rates.append(n / rocks_s)
        ratios.append(rocks_s / t["seconds"])
    assert mr is not None
    report(
        "write_records_per_second",
        records=n,
        ours_per_s=round(statistics.median(ours_rates)),
        rocksdict_per_s=round(statistics.median(rocks_rates)),
        ratio=round(statistics.median(ratios), 3),
        ratios=[round(r, 3) for r in ratios],
        target=">= 0.4",
        ranges=len(mr.ranges),
    )
    return mr


async def bench_lookups(mr: MetaRange, records: list[ValueRecord], lookups: int, tmp: Path) -> None:
    rng = random.Random(7)
    sample = [records[rng.randrange(len(records))].key for _ in range(lookups)]
    rocks_write(records, tmp / "ingest.sst")
    db = Rdict(str(tmp / "db"), rocks_options())
    db.ingest_external_file([str(tmp / "ingest.sst")])
    try:
        # Warm both: every key read once, so every block is decoded/cached.
        for r in records:
            assert await mr.get(r.key) is not None
            assert db.get(r.key) is not None
        assert all(isinstance(mr.get_cached(k), ValueRecord) for k in sample[:1000])
        get_ours, get_rocks = mr.get_cached, db.get

        def ours() -> None:
            for k in sample:
                get_ours(k)

        def rocks() -> None:
            for k in sample:
                get_rocks(k)

        ours_s, rocks_s = best_of(3, ours), best_of(3, rocks)
    finally:
        db.close()
        Rdict.destroy(str(tmp / "db"))
    report(
        "warm_point_lookups_per_second",
        records=len(records),
        lookups=lookups,
        ours_per_s=round(lookups / ours_s),
        rocksdict_per_s=round(lookups / rocks_s),
        ratio=round(rocks_s / ours_s, 3),
        target=">= 1.0",
    )


async def bench_commit_one(mr: MetaRange, records: list[ValueRecord], policy: SplitPolicy) -> None:
    tables = mr.tables
    victim = records[len(records) // 2]
    changed = ValueRecord(victim.key, bytes(32), b"changed-entry")
    with timer() as t:
        result = await apply_changes(tables, mr, [Change(victim.key, changed)], policy=policy)
    with timer() as full:
        await write_all(new_tables(), records, policy)
    report(
        "commit_one_changed_key",
        records=len(records),
        ranges_total=len(result.ranges),
        ranges_rewritten=result.stats.ranges_written,
        ranges_reused=result.stats.ranges_reused,
        seconds=round(t["seconds"], 4),
        full_rewrite_seconds=round(full["seconds"], 3),
        ratio_to_full_rewrite=round(t["seconds"] / full["seconds"], 5),
    )


async def bench_diff(mr: MetaRange, records: list[ValueRecord], policy: SplitPolicy) -> None:
    tables = mr.tables
    rng = random.Random(11)
    victims = sorted(rng.sample(range(len(records)), 10))
    changes = [Change(records[i].key, ValueRecord(records[i].key, bytes(32), b"v2")) for i in victims]
    other_id = (await apply_changes(tables, mr, changes, policy=policy)).metarange_id

    async def cold(table_id: str) -> MetaRange:
        # Same object store, empty RAM cache: both measurements start cold, like a new process.
        cache = TableCache(ram_bytes=8 << 30, block_cache_blocks=1 << 20)
        fresh = TableStore(tables.store, tables.namespace, cache)
        return await MetaRange.load(fresh, table_id)

    left, right = await cold(mr.id), await cold(other_id)
    with timer() as t:
        found = [d async for d in diff(left, right)]
    assert len(found) == 10
    opened = left.ranges_opened + right.ranges_opened

    left, right = await cold(mr.id), await cold(other_id)

    async def full_compare() -> int:
        n = 0
        lit, rit = aiter(left), aiter(right)
        async for a in lit:
            b = await anext(rit)
            n += a.identity != b.identity
        return n

    with timer() as full:
        assert await full_compare() == 10
    report(
        "diff_ten_changed_keys",
        records=len(records),
        ranges_total=len(left.ranges),
        ranges_opened=opened,
        seconds=round(t["seconds"], 4),
        full_compare_seconds=round(full["seconds"], 3),
        ratio_to_full_compare=round(t["seconds"] / full["seconds"], 4),
    )


async def main_async(args: argparse.Namespace) -> None:
    policy = SplitPolicy(range_raggedness_entries=args.raggedness)
    report(
        "machine", **machine(), records=args.records, raggedness=args.raggedness, compiled_writer=ACCELERATED
    )
    with timer() as gen:
        records = make_records(args.records)
    report("generate_records", seconds=round(gen["seconds"], 2))
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        mr = await bench_writes(records, policy, tmp, args.write_repeat)
        await bench_lookups(mr, records, args.lookups, tmp)
        await bench_commit_one(mr, records, policy)
        await bench_diff(mr, records, policy)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--lookups", type=int, default=300_000)
    parser.add_argument("--raggedness", type=int, default=50_000)
    parser.add_argument("--write-repeat", type=int, default=3, help="write runs (median ratio reported)")
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
