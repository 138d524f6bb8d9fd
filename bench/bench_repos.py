"""Repository service benchmarks (staging and commit), as same-run ratios.

1. ``stage_objects_per_second``: N records (real serialised ``Entry`` bytes from
   ``make_entry``, no data upload: the metadata path only) staged through ``Graveler.set_entry``
   by ``--concurrency`` writer tasks, per KV driver (memory, SQLite file, PostgreSQL), with the ratio
   to the memory driver measured in the same run;
2. ``commit_staged_objects``: the commit of those N staged objects (seal, merge the staging
   partition into a new metarange, store the commit, publish): wall time per driver and the ratio to
   the memory driver;
3. ``commit_one_on_big_branch``: one more commit of 1 staged object on a branch holding ``--big``
   committed objects (built straight into the repository's namespace with ``apply_changes``, then a
   commit record + ``reset_branch``): wall time, ranges written vs reused, and the ratio to the
   N-object commit time on the memory driver.

Run: ``.venv/bin/python -m bench.bench_repos [--objects 100000] [--big 1000000] [--concurrency 16]``.
PostgreSQL is reached at ``LAKEFS_BENCH_PG_URL`` / ``LAKEFS_TEST_PG_URL`` (default
``postgresql://postgres@127.0.0.1:5432/test``); a scratch database is created and dropped. When it is
unreachable the driver is skipped with a printed note. Block stores are in memory throughout: we
measure our CPU plus the KV driver, not an object store.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import random
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

import asyncpg

from bench.common import WHEN, machine, make_records, object_key, report, timer
from lakefs_core.committed.apply import apply_changes
from lakefs_core.committed.metarange import MetaRange
from lakefs_core.committed.model import Change
from lakefs_core.committed.tables import TableCache
from lakefs_core.format.records import ValueRecord, make_entry
from lakefs_core.kv import KVStore, open_kv
from lakefs_core.namespace import StorageNamespace
from lakefs_core.refs.model import Commit
from lakefs_core.repos.graveler import Graveler
from lakefs_core.repos.stores import StoreRegistry

DEFAULT_PG = "postgresql://postgres@127.0.0.1:5432/test"
T = TypeVar("T")


def new_registry() -> StoreRegistry:
    return StoreRegistry(table_cache=TableCache(ram_bytes=8 << 30, block_cache_blocks=1 << 20))


def unique_repo() -> str:
    return f"bench-{uuid.uuid4().hex[:10]}"


async def timed(fn: Callable[..., Awaitable[T]], *args: Any, **kw: Any) -> tuple[float, T]:
    """Wall time of one awaited call ``fn(*args, **kw)``, garbage collector paused (collected first)."""
    gc.collect()
    gc.disable()
    try:
        t0 = time.perf_counter()
        result = await fn(*args, **kw)
        return time.perf_counter() - t0, result
    finally:
        gc.enable()


# -- KV drivers ---------------------------------------------------------------------------------------


def _with_database(url: str, database: str) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, "/" + database, parts.query, parts.fragment))


@asynccontextmanager
async def postgres_url() -> AsyncIterator[str | None]:
    """A scratch database on the benchmark server (None, with a printed note, if unreachable)."""
    admin = os.environ.get("LAKEFS_BENCH_PG_URL") or os.environ.get("LAKEFS_TEST_PG_URL") or DEFAULT_PG
    try:
        conn = await asyncpg.connect(admin, timeout=3)
    except (OSError, asyncpg.PostgresError, TimeoutError) as e:
        report("skipped", driver="postgres", note=f"PostgreSQL unreachable: {type(e).__name__}: {e}")
        yield None
        return
    name = f"lakefs_bench_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    try:
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()
    try:
        yield _with_database(admin, name)
    finally:
        conn = await asyncpg.connect(admin, timeout=5)
        try:
            await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await conn.close()


@asynccontextmanager
async def driver_urls(drivers: list[str]) -> AsyncIterator[dict[str, str]]:
    urls: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as tmp:
        if "memory" in drivers:
            urls["memory"] = "memory://"
        if "sqlite" in drivers:
            urls["sqlite"] = f"sqlite:///{Path(tmp) / 'kv.sqlite3'}"
        if "postgres" in drivers:
            async with postgres_url() as pg:
                if pg is not None:
                    urls["postgres"] = pg
                yield urls
        else:
            yield urls


# -- 1 + 2: staging and committing N objects --------------------------------------------------------------


async def stage(g: Graveler, repo: str, records: list[ValueRecord], concurrency: int) -> None:
    async def writer(part: list[ValueRecord]) -> None:
        for r in part:
            await g.set_entry(repo, "main", r)

    await asyncio.gather(*(writer(records[i::concurrency]) for i in range(concurrency)))


async def bench_driver(
    url: str, records: list[ValueRecord], concurrency: int, repeat: int
) -> dict[str, float]:
    best_stage = best_commit = float("inf")
    ranges = 0
    for _ in range(repeat):
        kv: KVStore = await open_kv(url)
        stores = new_registry()
        try:
            g = Graveler(kv, stores)
            repo = unique_repo()
            await g.create_repository(repo, f"mem://{repo}/ns")
            await g.set_entry(repo, "main", records[0])  # warm-up: connections, repository record
            await g.reset_branch(repo, "main")
            stage_s, _ = await timed(stage, g, repo, records, concurrency)
            commit_s, made = await timed(g.commit, repo, "main", committer="bench", message="n")
            ranges = len((await g.metarange(await g.repository(repo), made.metarange_id)).ranges)
            best_stage, best_commit = min(best_stage, stage_s), min(best_commit, commit_s)
        finally:
            await stores.close()
            await kv.close()
    return {"stage_s": best_stage, "commit_s": best_commit, "ranges": ranges}


# -- 3: one more commit on a big branch ---------------------------------------------------------------------


def one_record(i: int) -> ValueRecord:
    identity, data = make_entry(f"data/gbench/{uuid.uuid4().hex}", 1234, uuid.uuid4().hex, last_modified=WHEN)
    # Between existing keys (object_key ends in ".parquet"; "+extra" sorts inside the same span).
    return ValueRecord(object_key(i) + b"+extra", identity, data)


async def bench_big(big: int, repeat: int, n_commit_s: float | None, n_objects: int) -> None:
    with timer() as gen:
        records = make_records(big, seed=1)
    report("generate_big_records", records=big, seconds=round(gen["seconds"], 2))
    kv = await open_kv("memory://")
    stores = new_registry()
    try:
        g = Graveler(kv, stores)
        repo_id = unique_repo()
        repo = await g.create_repository(repo_id, f"mem://{repo_id}/ns")
        tables = await stores.tables(StorageNamespace.parse(repo.storage_namespace))
        empty = await MetaRange.load(tables, "")
        changes = (Change(r.key, r) for r in records)
        build_s, built = await timed(apply_changes, tables, empty, changes, policy=g.settings.split_policy)
        head = await g.get_commit(repo_id, "main")
        base = Commit.create(
            committer="bench",
            message=f"{big} objects",
            metarange_id=built.metarange_id,
            creation_date=WHEN,
            parents=(head.id,),
            generation=head.generation + 1,
        )
        await g.refs.put_commit(repo, base)
        await g.reset_branch(repo_id, "main", base.id)
        report("build_big_branch", records=big, ranges=len(built.ranges), seconds=round(build_s, 2))
        del records, changes

        rng = random.Random(5)
        times: list[float] = []
        written = reused = total = 0
        for n in range(max(1, repeat)):
            await g.set_entry(repo_id, "main", one_record(rng.randrange(big)))
            seconds, made = await timed(g.commit, repo_id, "main", committer="bench", message=f"one more {n}")
            times.append(seconds)
            parent = await g.metarange(repo, (await g.get_commit(repo_id, made.parents[0])).metarange_id)
            new = await g.metarange(repo, made.metarange_id)
            old_ids = {r.id for r in parent.ranges}
            written = sum(1 for r in new.ranges if r.id not in old_ids)
            reused = len(new.ranges) - written
            total = len(new.ranges)
        fields: dict[str, Any] = {
            "records": big,
            "ranges_total": total,
            "ranges_written": written,
            "ranges_reused": reused,
            "first_seconds": round(times[0], 4),
            "best_seconds": round(min(times), 4),
            "repeat": len(times),
        }
        if n_commit_s is not None:
            fields["n_objects"] = n_objects
            fields["n_object_commit_seconds_memory"] = round(n_commit_s, 3)
            fields["ratio_to_n_object_commit"] = round(min(times) / n_commit_s, 4)
        report("commit_one_on_big_branch", **fields)
    finally:
        await stores.close()
        await kv.close()


# -- main ---------------------------------------------------------------------------------------------------


async def main_async(args: argparse.Namespace) -> None:
    drivers = [d.strip() for d in args.drivers.split(",") if d.strip()]
    report(
        "machine",
        **machine(),
        objects=args.objects,
        big=args.big,
        concurrency=args.concurrency,
        repeat=args.repeat,
        gc="disabled while timing",
    )
    with timer() as gen:
        records = make_records(args.objects)
    random.Random(3).shuffle(records)  # writers arrive in no particular key order
    report("generate_records", records=args.objects, seconds=round(gen["seconds"], 2))

    results: dict[str, dict[str, float]] = {}
    async with driver_urls(drivers) as urls:
        for driver in drivers:
            if driver not in urls:
                continue
            results[driver] = await bench_driver(urls[driver], records, args.concurrency, args.repeat)
    base = results.get("memory")
    n = args.objects
    for driver, r in results.items():
        report(
            "stage_objects_per_second",
            driver=driver,
            objects=n,
            concurrency=args.concurrency,
            per_s=round(n / r["stage_s"]),
            seconds=round(r["stage_s"], 2),
            rate_ratio_to_memory=round(base["stage_s"] / r["stage_s"], 3) if base else None,
        )
    for driver, r in results.items():
        report(
            "commit_staged_objects",
            driver=driver,
            objects=n,
            ranges=int(r["ranges"]),
            seconds=round(r["commit_s"], 3),
            objects_per_s=round(n / r["commit_s"]),
            time_ratio_to_memory=round(r["commit_s"] / base["commit_s"], 3) if base else None,
        )
    del records
    if args.big > 0:
        await bench_big(args.big, args.big_repeat, base["commit_s"] if base else None, n)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--objects", type=int, default=100_000, help="objects staged then committed")
    parser.add_argument("--big", type=int, default=1_000_000, help="objects on the big branch (0: skip)")
    parser.add_argument("--concurrency", type=int, default=4, help="concurrent set_entry tasks")
    parser.add_argument("--repeat", type=int, default=1, help="stage+commit runs per driver (best kept)")
    parser.add_argument("--big-repeat", type=int, default=3, help="one-object commits on the big branch")
    parser.add_argument("--drivers", default="memory,sqlite,postgres")
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
