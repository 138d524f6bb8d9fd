"""Graveler format benchmarks (issue "Graveler format"), all as same-run ratios.

1. warm random point lookups per second on an N-record metarange, against RocksDB via rocksdict on
   the same records (target >= 1.0x; issue 38: 2.0x): the median of ``--lookup-rounds`` (7)
   same-run ratios of thread CPU time, the contenders alternating; ``--compare-ref COMMIT`` also
   times that commit's reader on the same tables in the same rounds (:mod:`bench.refcode`);
2. records written per second (ranges + metarange, ids, splitting) against rocksdict's
   SstFileWriter writing the same key/value pairs: the median of ``--write-repeat`` (3) same-run
   ratios (target >= 0.4x);
3. commit of 1 changed key into the N-record metarange: ranges rewritten, wall time, and the ratio
   to writing the whole metarange from scratch;
4. diff of two N-record commits that differ in 10 keys: ranges opened, wall time, and the ratio to
   a record-by-record comparison of both commits.

Run: ``.venv/bin/python -m bench.bench_graveler [--records 1000000] [--lookups 300000]``
(``--only lookups --compare-ref a5e7ad9`` for the lookup figure against that commit's reader).
The object store is the memory driver: we measure our CPU, not a backend.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rocksdict import BlockBasedOptions, Cache, Options, Rdict, SstFileWriter

from bench.common import best_of, machine, make_records, report, timer
from bench.refcode import load_ref, submodule
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


async def ref_metarange(mr: MetaRange, commit: str) -> Any:
    """``mr`` as commit ``commit``'s reader sees it: its own table cache and metarange code over
    the same object store, so both read the same table bytes (see :mod:`bench.refcode`)."""
    ref = load_ref(commit)
    tables = submodule(ref, "committed.tables", "graveler.tables")
    metarange = submodule(ref, "committed.metarange", "graveler.metarange")
    namespace = submodule(ref, "keys").StorageNamespace.parse(mr.tables.namespace.uri)
    cache = tables.TableCache(ram_bytes=8 << 30, block_cache_blocks=1 << 20)
    return await metarange.MetaRange.load(tables.TableStore(mr.tables.store, namespace, cache), mr.id)


Times = dict[str, list[tuple[float, float]]]


def timed_rounds(contenders: dict[str, Callable[[], None]], rounds: int) -> Times:
    """``(cpu seconds, wall seconds)`` of every contender in each of ``rounds`` rounds, the order
    rotating from round to round, garbage collection off while timing. CPU time is this thread's
    (rocksdict's ``get`` runs in the calling thread): on a shared machine the wall time also counts
    the time the process waited for a core."""
    out: Times = {name: [] for name in contenders}
    names = list(contenders)
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            gc.collect()
            gc.disable()
            try:
                c0, w0 = time.thread_time(), time.perf_counter()
                contenders[name]()
                out[name].append((time.thread_time() - c0, time.perf_counter() - w0))
            finally:
                gc.enable()
    return out


def median_ratio(slow: list[tuple[float, float]], fast: list[tuple[float, float]], clock: int) -> float:
    """Median over rounds of ``slow / fast`` (the speed of ``fast`` relative to ``slow``)."""
    return round(statistics.median(s[clock] / f[clock] for s, f in zip(slow, fast, strict=True)), 3)


async def bench_lookups(
    mr: MetaRange, records: list[ValueRecord], tmp: Path, args: argparse.Namespace
) -> None:
    """Ours, rocksdict and the readers of ``refs`` (other commits), alternately, ``rounds`` times:
    the figure is the median of the same-run ratios."""
    lookups, rounds, refs = args.lookups, args.lookup_rounds, args.compare_ref
    rng = random.Random(7)
    sample = [records[rng.randrange(len(records))].key for _ in range(lookups)]
    rocks_write(records, tmp / "ingest.sst")
    db = Rdict(str(tmp / "db"), rocks_options())
    db.ingest_external_file([str(tmp / "ingest.sst")])
    try:
        getters: dict[str, Callable[[bytes], object]] = {"ours": mr.get_cached, "rocksdict": db.get}
        for commit in refs:
            ref_mr = await ref_metarange(mr, commit)
            getters[f"ref:{commit}"] = ref_mr.get_cached
            for r in records[:: max(1, len(records) // 1000)]:
                assert tuple(await ref_mr.get(r.key)) == tuple(r), f"{commit} reads another record"
        # Warm every reader: every key read once, so every block is decoded and cached.
        for r in records:
            assert await mr.get(r.key) is not None
            assert db.get(r.key) is not None
            for name in getters.keys() - {"ours", "rocksdict"}:
                assert getters[name](r.key) is not None
        assert all(isinstance(mr.get_cached(k), ValueRecord) for k in sample[:1000])

        def loop(get: Callable[[bytes], object]) -> Callable[[], None]:
            def run() -> None:
                for k in sample:
                    get(k)

            return run

        times = timed_rounds({name: loop(get) for name, get in getters.items()}, rounds)
    finally:
        db.close()
        Rdict.destroy(str(tmp / "db"))
    ours, rocks = times["ours"], times["rocksdict"]
    best = {name: min(cpu for cpu, _ in t) for name, t in times.items()}
    report(
        "warm_point_lookups_per_second",
        records=len(records),
        lookups=lookups,
        rounds=rounds,
        clock="thread CPU time (wall-clock ratio beside it)",
        ours_per_s=round(lookups / best["ours"]),
        rocksdict_per_s=round(lookups / best["rocksdict"]),
        ratio=median_ratio(rocks, ours, 0),
        ratios=[round(r[0] / o[0], 3) for r, o in zip(rocks, ours, strict=True)],
        ratio_wall=median_ratio(rocks, ours, 1),
        target=">= 1.0; issue 38: 2.0",
    )
    for commit in refs:
        ref = times[f"ref:{commit}"]
        report(
            "warm_point_lookups_against_ref",
            ref=commit,
            ref_per_s=round(lookups / best[f"ref:{commit}"]),
            ref_ratio_to_rocksdict=median_ratio(rocks, ref, 0),
            ours_speed_over_ref=median_ratio(ref, ours, 0),
            ours_over_ref=[round(r[0] / o[0], 3) for r, o in zip(ref, ours, strict=True)],
            ours_speed_over_ref_wall=median_ratio(ref, ours, 1),
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
        if args.only == "lookups":
            mr = await write_all(new_tables(), records, policy)
        else:
            mr = await bench_writes(records, policy, tmp, args.write_repeat)
        await bench_lookups(mr, records, tmp, args)
        if args.only is None:
            await bench_commit_one(mr, records, policy)
            await bench_diff(mr, records, policy)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--lookups", type=int, default=300_000)
    parser.add_argument("--raggedness", type=int, default=50_000)
    parser.add_argument("--write-repeat", type=int, default=3, help="write runs (median ratio reported)")
    parser.add_argument("--lookup-rounds", type=int, default=7, help="lookup rounds (median ratio reported)")
    parser.add_argument(
        "--compare-ref",
        action="append",
        default=[],
        metavar="COMMIT",
        help="also time COMMIT's metarange reader on the same tables, alternating (repeatable)",
    )
    parser.add_argument("--only", choices=["lookups"], help="only this figure (the tables are still written)")
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
