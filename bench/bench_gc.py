"""Retention GC end to end on a repository built by the core (gc.md §4, issue 10's benchmarks).

Usage: ``python -m bench.bench_gc [--entries N] [--commits C] [--churn K] [--s3-garbage M]
[--walk-commits W] [--skip-naive] [--skip-spark] [--naive-sample S]`` (defaults 50,000 / 200 / 250 /
10,000 / 1,000,000).

The repository (memory KV, local namespace) is built through the core's own write path:
``set_entries`` in batches and ``commit`` (which writes ranges through the core's range writer and
reuses unchanged ones), one commit per Graveler-clock hour. Commit 0 holds ``N`` entries (keys in
ingestion order); each later commit overwrites ``K`` random keys among the newest 2 %, appends
``K/5`` and deletes the ``K/10`` oldest (production-like locality: most ranges are reused, the
repository's churn stays in its last ranges); every 20th commit a feature
branch gets ``K`` entries, a commit and is deleted; ``K`` entries stay staged on ``main``. Every entry
points at a real file ``data/<slice>/<id>`` (written raw, 2,000 per slice). Rules: 7 days by default,
the mark's ``now`` two days past the real clock (``min_age`` 24 h), so about half the commits expire.

Figures (one JSON line each, ``bench`` names ``gc.*``):

1. ``gc.mark``: our mark on PySpark ``local[2]`` (the JVM start timed apart and excluded), and the lite
   executor, against a NAIVE mark in the same run: every active commit's metarange read without
   range de-duplication, staging through the facade, listing through ``LocalBlockStore.list`` (today's
   block-store API), a set anti-join. The three deleted sets must be equal. ``entries/s`` counts the
   entries of the ranges the mark read (distinct ranges for ours) plus the objects listed, per second
   of wall time of the whole mark (claim to summary).
2. ``gc.listing`` / ``gc.sweep_local``: executors' listing (``candidates_partition``) in objects/s and
   the sweep of the run above (``run_sweep``, re-verification included) in keys/s, each against the
   raw file system in the same run (``os.scandir`` + ``stat``; ``os.unlink`` of as many files).
   ``gc.sweep_verification``: what the sweep's checks against the run record in the KV add, timed
   apart on the same run just before it is swept: the record read, one streamed SHA-256 of every
   recorded file (the up-front check) plus the SHA-256 of the candidate, range and commit lists
   again over bytes already in memory (the digests taken while the sweep reads them); its share of
   the sweep's wall time (target at most 15 %).
3. ``gc.s3_requests_per_key``: a repository on moto S3 behind the counting proxy of
   ``tests/support/s3proxy.py`` with ``M`` garbage objects, marked (lite) and swept: ``DeleteObjects``
   requests per deleted key (target at most 1/900).
4. ``gc.driver_memory``: ``bench.bench_gc_active`` at ``W`` commits in a child process (its peak RSS
   is the driver's walk; target 300 MB).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bench.bench_gc_seams import raw_scan
from bench.common import machine, moto_s3_settings, report
from lakefs_core.block import S3BlockStore
from lakefs_core.block.base import ObjectInfo
from lakefs_core.committed.ranges import metarange_range_ids, range_addresses
from lakefs_core.compute.executor import Executor, LiteExecutor
from lakefs_core.compute.partition import store_ref
from lakefs_core.format.records import ValueRecord, make_entry
from lakefs_core.keys import new_object_id, new_slice_id
from lakefs_core.kv.memory import MemoryKVStore
from lakefs_core.namespace import StorageNamespace
from lakefs_core.repos.graveler import Graveler, StoreRegistry
from lakefs_core.service.deleter import store_deleter
from lakefs_gc.mark.listing import candidates_partition, plan_slices
from lakefs_gc.mark.mark import MarkOptions, MarkResult, run_mark
from lakefs_gc.mark.uncommitted import staged_relative
from lakefs_gc.rules import GCRules, save_rules
from lakefs_gc.runs.layout import RunLayout
from lakefs_gc.runs.parts import list_parts, read_lines
from lakefs_gc.runs.record import RunRecords, file_digest
from lakefs_gc.runs.reports import read_commits_csv
from lakefs_gc.sweep.sweep import SweepOptions, run_sweep

REAL_NOW = datetime.now(UTC)
MARK_NOW = REAL_NOW + timedelta(days=2)
MIN_AGE = timedelta(hours=24)
PER_SLICE = 2000
REPO = "bench"


class Clock:
    def __init__(self, start: datetime) -> None:
        self.now = start

    def __call__(self) -> datetime:
        return self.now


@dataclass
class Objects:
    """Writes the data files of entries raw, 2,000 per slice (what a fleet of uploaders leaves)."""

    root: Path
    written: int = 0
    slices: list[str] = field(default_factory=list)

    def new_address(self) -> str:
        if self.written % PER_SLICE == 0:
            self.slices.append(new_slice_id(REAL_NOW - timedelta(hours=1), seq=len(self.slices)))
            (self.root / "data" / self.slices[-1]).mkdir(parents=True)
        address = f"data/{self.slices[-1]}/{new_object_id()}"
        (self.root / address).write_bytes(b"x")
        self.written += 1
        return address


def _record(key: bytes, address: str) -> ValueRecord:
    identity, data = make_entry(address, 1, "0" * 32, last_modified=REAL_NOW)
    return ValueRecord(key, identity, data)


def _key(i: int) -> bytes:
    """Keys in the order they are written (a table partitioned by ingestion date), so churn on recent
    partitions touches the last ranges only, as in production (seed 001: >= 99 % range reuse)."""
    return f"tables/events/batch={i // 10_000:05d}/part-{i:09d}.parquet".encode()


async def _stage(g: Graveler, branch: str, objects: Objects, keys: list[bytes]) -> None:
    for i in range(0, len(keys), 5000):
        await g.set_entries(REPO, branch, [_record(k, objects.new_address()) for k in keys[i : i + 5000]])


async def build(g: Graveler, clock: Clock, root: Path, *, n: int, commits: int, churn: int) -> dict[str, Any]:
    """The repository described in the module docstring; returns its shape."""
    await g.create_repository(REPO, f"local://{root}")
    ns = StorageNamespace(f"local://{root}")
    await save_rules(await g.namespace_store(ns), ns, GCRules.of(7))
    objects = Objects(root)
    rng = random.Random(7)
    live = list(range(n))
    next_key = n
    await _stage(g, "main", objects, [_key(i) for i in live])
    await g.commit(REPO, "main", committer="bench", message="c0")
    for c in range(1, commits):
        clock.now += timedelta(hours=1)
        touched = rng.sample(live[-max(churn, len(live) // 50) :], churn)  # the newest 2 %
        added = list(range(next_key, next_key + churn // 5))
        next_key += len(added)
        await _stage(g, "main", objects, [_key(i) for i in touched + added])
        for i in live[: churn // 10]:  # compaction of the oldest partition
            await g.delete_entry(REPO, "main", _key(i))
        live = live[churn // 10 :] + added
        await g.commit(REPO, "main", committer="bench", message=f"c{c}")
        if c % 20 == 0:
            branch = f"feature-{c}"
            await g.create_branch(REPO, branch, "main")
            await _stage(g, branch, objects, [_key(next_key + j) for j in range(churn)])
            next_key += churn
            await g.commit(REPO, branch, committer="bench", message=f"f{c}")
            await g.delete_branch(REPO, branch)
    await _stage(g, "main", objects, [_key(i) for i in rng.sample(live, churn)])  # uncommitted
    return {"entries_at_head": len(live), "commits": commits, "objects": objects.written}


# -- the naive mark ---------------------------------------------------------------------------------


@dataclass
class Naive:
    deleted: set[str]
    entries: int  # entries read from trees
    listed: int
    tree_s: float  # reading the active commits' trees
    rest_s: float  # staging, listing, anti-join


async def naive_mark(g: Graveler, ns: StorageNamespace, active: list[str]) -> Naive:
    """The naive mark (see the module docstring), its two parts timed apart."""
    t0 = time.perf_counter()
    store = await g.namespace_store(ns)
    live: set[str] = set()
    entries = 0
    for commit_id in active:
        metarange_id = (await g.get_commit_by_id(REPO, commit_id)).metarange_id
        for range_id in await metarange_range_ids(store, ns, metarange_id):  # no de-duplication
            addresses = await range_addresses(store, ns, range_id)
            entries += len(addresses)
            live.update(addresses)
    t1 = time.perf_counter()
    live.update([a async for a in staged_relative(g, REPO, ns)])
    cutoff = MARK_NOW - MIN_AGE
    listed: set[str] = set()
    async for item in store.list("data/"):  # today's listing: sidecars / MD5s
        if isinstance(item, ObjectInfo) and item.last_modified is not None and item.last_modified < cutoff:
            listed.add(item.key)
    deleted = listed - live
    return Naive(deleted, entries, len(listed), t1 - t0, time.perf_counter() - t1)


async def read_deleted(g: Graveler, ns: StorageNamespace, run_id: str) -> set[str]:
    store = await g.namespace_store(ns)
    out: set[str] = set()
    for key in await list_parts(store, RunLayout(ns, run_id).deleted_text):
        async for lines in read_lines(store, key):
            out.update(lines)
    return out


async def active_commits(g: Graveler, ns: StorageNamespace, run_id: str) -> list[str]:
    store = await g.namespace_store(ns)
    return [c async for c, _, _ in read_commits_csv(store, RunLayout(ns, run_id).commits_csv)]


async def entries_read(g: Graveler, ns: StorageNamespace, run_id: str) -> int:
    """Entries of the distinct ranges our mark read (from its ``ranges.txt``)."""
    store = await g.namespace_store(ns)
    total = 0
    for key in await list_parts(store, RunLayout(ns, run_id).ranges):
        async for lines in read_lines(store, key):
            for range_id in lines:
                total += len(await range_addresses(store, ns, range_id))
    return total


async def timed_mark(g: Graveler, executor: Executor, partitions: int) -> tuple[MarkResult, float]:
    options = MarkOptions(now=MARK_NOW, min_age=MIN_AGE, mode="mark", partitions=partitions)
    t0 = time.perf_counter()
    result = await run_mark(g, REPO, executor, options=options)
    return result, time.perf_counter() - t0


def _rate(n: int, seconds: float) -> int:
    return round(n / seconds) if seconds > 0 else 0


async def bench_mark(g: Graveler, ns: StorageNamespace, args: argparse.Namespace) -> str:
    """Figure 1; returns the run id of the Spark mark (swept by figure 2)."""
    with LiteExecutor(workers=2) as lite:
        lite_run, lite_s = await timed_mark(g, lite, 4)
    spark_run, spark_s, jvm_s = None, 0.0, 0.0
    try:
        if args.skip_spark:
            raise ImportError("--skip-spark")
        from lakefs_core.compute.executor import SparkExecutor
        from lakefs_core.compute.session import spark_session

        t0 = time.perf_counter()
        session = spark_session("local[2]", app_name="bench-gc", conf={"spark.ui.enabled": "false"})
        jvm_s = time.perf_counter() - t0
        spark_run, spark_s = await timed_mark(g, SparkExecutor(session), 4)
    except ImportError as e:
        report("gc.mark_spark_skipped", reason=str(e))
    ours = spark_run or lite_run
    deleted = await read_deleted(g, ns, ours.run_id)
    assert deleted == await read_deleted(g, ns, lite_run.run_id)
    read = await entries_read(g, ns, ours.run_id)
    listed = ours.summary.listed or 0
    fields: dict[str, Any] = {
        "active_commits": ours.summary.active_commits,
        "expired_commits": ours.summary.expired_commits,
        "distinct_ranges": ours.summary.ranges_read,
        "entries_read": read,
        "objects_listed": listed,
        "marked": len(deleted),
        "jvm_start_s": round(jvm_s, 2),
        "spark_s": round(spark_s, 2),
        "lite_s": round(lite_s, 2),
        "spark_entries_per_s": _rate(read + listed, spark_s),
        "lite_entries_per_s": _rate(read + listed, lite_s),
        "target_entries_per_s": 200_000,
    }
    if not args.skip_naive:
        active = await active_commits(g, ns, ours.run_id)
        sample = active if not args.naive_sample else active[: args.naive_sample]
        naive = await naive_mark(g, ns, sample)
        naive_read = naive.entries * len(active) // len(sample)
        # Every active commit costs the naive mark one full tree read: a sample's is scaled.
        naive_s = naive.tree_s * len(active) / len(sample) + naive.rest_s
        naive_listed = naive.listed
        if len(sample) == len(active):
            assert naive.deleted == deleted, (len(naive.deleted), len(deleted))
        else:
            assert deleted <= naive.deleted  # fewer live commits read: a superset
        fields.update(
            naive_commits_timed=len(sample),
            naive_s=round(naive_s, 2),
            naive_tree_s_timed=round(naive.tree_s, 2),
            naive_list_stage_join_s=round(naive.rest_s, 2),
            naive_entries_read=naive_read,
            naive_entries_per_s=_rate(naive_read + naive_listed, naive_s),
            speedup_spark=round(naive_s / spark_s, 2) if spark_s else None,
            speedup_lite=round(naive_s / lite_s, 2),
            target_speedup=5,
        )
    report("gc.mark", **fields)
    return ours.run_id


async def bench_listing(g: Graveler, ns: StorageNamespace, root: Path) -> None:
    ref = store_ref(g.stores.s3, ns)
    items, _ = await asyncio.to_thread(plan_slices, ref, MARK_NOW - MIN_AGE)
    cutoff = (MARK_NOW - MIN_AGE).timestamp()

    def ours() -> int:
        return sum(1 for _ in candidates_partition(ref, cutoff, iter(items)))

    def raw() -> int:
        return raw_scan(str(root / "data"))

    t_raw, n_raw = _best(raw)
    t_ours, n_ours = _best(ours)
    report(
        "gc.listing",
        objects=n_ours,
        raw_objects=n_raw,
        ours_per_s=_rate(n_ours, t_ours),
        raw_per_s=_rate(n_raw, t_raw),
        ours_to_raw=round(t_raw / t_ours, 3),
        target_per_s=150_000,
    )


def _best(fn: Callable[[], int], repeat: int = 3) -> tuple[float, int]:
    best, out = float("inf"), 0
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


async def time_verification(g: Graveler, ns: StorageNamespace, run_id: str) -> tuple[float, int, int]:
    """``(seconds, files, bytes)`` of the sweep's extra checks (see figure 2 in the docstring)."""
    store = await g.namespace_store(ns)
    t0 = time.perf_counter()
    found = await RunRecords(g, REPO).read(run_id)
    assert found is not None and found[1].state == "complete"
    files = found[1].files
    for relative, want in files.items():
        assert await file_digest(store, ns.key(relative)) == want
    upfront = time.perf_counter() - t0
    read_twice = [r for r in files if "/deleted.text/" in r or "/ranges.txt/" in r or r.endswith(".csv")]
    hashed = 0
    for relative in read_twice:  # hashing only: the sweep digests these as it reads them anyway
        data = await store.get(ns.key(relative))
        t1 = time.perf_counter()
        hashlib.sha256(data).hexdigest()
        upfront += time.perf_counter() - t1
        hashed += len(data)
    return upfront, len(files), sum(d.size for d in files.values()) + hashed


async def bench_sweep(g: Graveler, ns: StorageNamespace, run_id: str, work: Path) -> None:
    store = await g.namespace_store(ns)
    verify_s, files, digested = await time_verification(g, ns, run_id)
    t0 = time.perf_counter()
    swept = await run_sweep(g, REPO, run_id, deleter=store_deleter(store), options=SweepOptions())
    sweep_s = time.perf_counter() - t0
    report(
        "gc.sweep_verification",
        files=files,
        bytes_digested=digested,
        verification_s=round(verify_s, 3),
        sweep_s=round(sweep_s, 3),
        share_of_sweep=round(verify_s / sweep_s, 4) if sweep_s else None,
        target_share=0.15,
    )
    raw_dir = work / "raw-unlink"
    raw_dir.mkdir()
    for i in range(swept.deleted):
        (raw_dir / f"{i:09d}").write_bytes(b"x")
    t0 = time.perf_counter()
    for i in range(swept.deleted):
        os.unlink(raw_dir / f"{i:09d}")
    raw_s = time.perf_counter() - t0
    report(
        "gc.sweep_local",
        deleted=swept.deleted,
        failed=swept.failed,
        rescued=swept.rescued,
        sweep_keys_per_s=_rate(swept.deleted, sweep_s),
        unlink_per_s=_rate(swept.deleted, raw_s),
        sweep_to_unlink=round(raw_s / sweep_s, 3) if sweep_s else None,
        target_keys_per_s=30_000,
    )


async def bench_s3(m: int) -> None:
    from tests.support.moto import ACCESS_KEY, SECRET_KEY, MotoServer
    from tests.support.s3proxy import ThrottlingProxy

    # Executors take S3 credentials from their environment, never from job arguments.
    os.environ.update(AWS_ACCESS_KEY_ID=ACCESS_KEY, AWS_SECRET_ACCESS_KEY=SECRET_KEY)
    logs = Path(tempfile.mkdtemp(prefix="bench-gc-moto-"))
    server = MotoServer("us-east-1")
    server.start(logs)
    try:
        async with ThrottlingProxy(server.endpoint, throttle_share=0.0) as proxy:
            settings = moto_s3_settings(proxy.endpoint, max_pool_connections=32)
            async with S3BlockStore("bench-gc", settings=settings) as raw:
                await (await raw._client()).create_bucket(Bucket="bench-gc")  # bench setup only
            g = Graveler(
                MemoryKVStore(), StoreRegistry(s3=settings), clock=Clock(REAL_NOW - timedelta(days=30))
            )
            try:
                ns = StorageNamespace("s3://bench-gc/repo")
                await g.create_repository(REPO, ns.uri)
                store = await g.namespace_store(ns)
                await save_rules(store, ns, GCRules.of(7))
                sem = asyncio.Semaphore(32)

                async def put(i: int) -> None:
                    async with sem:  # garbage: objects no entry references
                        await store.put(ns.key(f"data/{new_slice_id(seq=i % 20)}/{new_object_id()}"), b"x")

                await asyncio.gather(*(put(i) for i in range(m)))
                with LiteExecutor(workers=2) as lite:
                    marked = await run_mark(g, REPO, lite, options=MarkOptions(now=MARK_NOW, min_age=MIN_AGE))
                proxy.reset_counts()
                swept = await run_sweep(g, REPO, marked.run_id, deleter=store_deleter(store))
                requests = dict(proxy.requests)
            finally:
                await g.stores.close()
        deletes = requests.get("DeleteObjects", 0)
        report(
            "gc.s3_requests_per_key",
            garbage=m,
            deleted=swept.deleted,
            delete_requests=deletes,
            sweep_requests_total=sum(requests.values()),
            requests=requests,
            delete_requests_per_key=round(deletes / max(swept.deleted, 1), 6),
            target=round(1 / 900, 6),
        )
    finally:
        server.stop()
        shutil.rmtree(logs, ignore_errors=True)


def bench_driver_memory(commits: int) -> None:
    out = (
        subprocess.run(
            [sys.executable, "-m", "bench.bench_gc_active", str(commits)],
            capture_output=True,
            text=True,
            check=True,
        )
        .stdout.strip()
        .splitlines()[-1]
    )
    fields = json.loads(out.replace("'", '"'))
    report("gc.driver_memory", **fields, target_mb=300)


async def main_async(args: argparse.Namespace) -> None:
    report("gc.machine", **machine())
    work = Path(tempfile.mkdtemp(prefix="bench-gc-"))
    clock = Clock(REAL_NOW - timedelta(hours=args.commits) - timedelta(days=1))
    g = Graveler(MemoryKVStore(), StoreRegistry(), clock=clock)
    try:
        root = work / "ns"
        t0 = time.perf_counter()
        shape = await build(g, clock, root, n=args.entries, commits=args.commits, churn=args.churn)
        os.sync()
        report("gc.build", **shape, churn=args.churn, seconds=round(time.perf_counter() - t0, 1))
        ns = StorageNamespace(f"local://{root}")
        run_id = await bench_mark(g, ns, args)
        await bench_listing(g, ns, root)
        await bench_sweep(g, ns, run_id, work)
    finally:
        await g.stores.close()
        shutil.rmtree(work, ignore_errors=True)
    if args.s3_garbage:
        await bench_s3(args.s3_garbage)
    if args.walk_commits:
        await asyncio.to_thread(bench_driver_memory, args.walk_commits)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--entries", type=int, default=50_000, help="entries of commit 0")
    parser.add_argument("--commits", type=int, default=200)
    parser.add_argument("--churn", type=int, default=250, help="keys overwritten per commit")
    parser.add_argument("--s3-garbage", type=int, default=10_000, help="garbage objects on moto S3 (0: skip)")
    parser.add_argument("--walk-commits", type=int, default=1_000_000, help="commits of the walk (0: skip)")
    parser.add_argument("--skip-naive", action="store_true", help="no naive mark (large sizes)")
    parser.add_argument("--skip-spark", action="store_true", help="the lite mark only (it is the one swept)")
    parser.add_argument(
        "--naive-sample", type=int, default=0, help="time the naive mark on this many active commits, scaled"
    )
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
