"""Import throughput (issue 12): entries committed per second, in-process and on PySpark ``local[2]``.

Usage: ``python -m bench.bench_import [--objects N] [--dirs D] [--skip-spark] [--s3 M]`` (defaults
1,000,000 / 1,000; ``--s3 0``).

A local source tree of ``N`` small files in ``D`` directories is imported into a fresh repository
(memory KV, local namespace): once in this process (``Graveler.import_objects``) and once with the
range building on PySpark ``local[2]`` executors (``import_with_executor``; the JVM start is timed
apart and excluded). The baseline in the same run is a raw ``os.scandir`` walk of the same tree with a
``stat`` per file (what any import must at least do). Figures: one JSON line each (``bench`` names
``import.*``); the issue's target is 1M entries committed in at most 60 s on ``local[2]``.

``--s3 M``: ``M`` objects in a bucket of a moto_server, imported in-process into a repository whose
namespace is another bucket of the same server, every S3 request through a counting proxy; reports
requests by operation and per imported object (moto answers a few hundred requests/s, so the figure
is the request count, not the time). Filling the bucket is not counted.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import tempfile
import time
from pathlib import Path

from bench.common import machine, moto_s3_settings, report
from lakefs_core.kv.memory import MemoryKVStore
from lakefs_core.repos.graveler import Graveler, StoreRegistry


def make_tree(root: Path, objects: int, dirs: int) -> None:
    per = max(1, objects // dirs)
    made = 0
    for d in range(dirs):
        sub = root / f"date=2026-{d:05}"
        sub.mkdir(parents=True)
        for i in range(min(per, objects - made)):
            fd = os.open(sub / f"part-{i:06}.parquet", os.O_WRONLY | os.O_CREAT, 0o644)
            os.write(fd, b"x")
            os.close(fd)
        made += per
        if made >= objects:
            break


def raw_walk(root: Path) -> int:
    n = 0
    stack = [str(root)]
    while stack:
        with os.scandir(stack.pop()) as it:
            for entry in it:
                if entry.is_dir():
                    stack.append(entry.path)
                else:
                    entry.stat()
                    n += 1
    return n


async def in_process(src: Path, work: Path, n: int) -> float:
    g = Graveler(MemoryKVStore(), StoreRegistry())
    await g.create_repository("bench-import", f"local://{work / 'ns-local'}")
    t0 = time.perf_counter()
    result = await g.import_objects("bench-import", "main", "landing/", str(src), committer="bench")
    seconds = time.perf_counter() - t0
    assert result.entries == n, result
    return seconds


async def on_spark(src: Path, work: Path, n: int) -> tuple[float, float]:
    from lakefs_core.compute.executor import SparkExecutor
    from lakefs_core.compute.import_job import import_with_executor
    from lakefs_core.compute.session import spark_session, stop_spark_session

    t0 = time.perf_counter()
    session = spark_session(
        "local[2]", app_name="bench-import", conf={"spark.local.dir": str(work / "spark")}
    )
    jvm = time.perf_counter() - t0
    try:
        g = Graveler(MemoryKVStore(), StoreRegistry())
        await g.create_repository("bench-import", f"local://{work / 'ns-spark'}")
        t1 = time.perf_counter()
        result = await import_with_executor(
            g, SparkExecutor(session), "bench-import", "main", dest_path="landing/", source_uri=str(src),
            committer="bench",
        )  # fmt: skip
        seconds = time.perf_counter() - t1
        assert result.entries == n, result
    finally:
        stop_spark_session()
    return seconds, jvm


async def s3_import(work: Path, objects: int) -> None:
    import aioboto3

    from tests.support.moto import MotoServer
    from tests.support.s3proxy import ThrottlingProxy

    server = MotoServer("us-east-1")
    server.start(work)
    try:
        async with aioboto3.Session().client("s3", **server.client_kwargs()) as s3:
            for bucket in ("source", "lake"):
                await s3.create_bucket(Bucket=bucket)
            t0 = time.perf_counter()
            todo = iter(range(objects))

            async def fill() -> None:
                for i in todo:
                    key = f"landing/date=2026-{i % 100:03}/part-{i:07}.parquet"
                    await s3.put_object(Bucket="source", Key=key, Body=b"x")

            await asyncio.gather(*(fill() for _ in range(16)))
            report("import.s3_fill", objects=objects, seconds=round(time.perf_counter() - t0, 1))
        async with ThrottlingProxy(server.endpoint, throttle_share=0.0) as proxy:
            stores = StoreRegistry(s3=moto_s3_settings(proxy.endpoint))
            try:
                g = Graveler(MemoryKVStore(), stores)
                await g.create_repository("bench-s3", "s3://lake/repo")
                proxy.reset_counts()
                t0 = time.perf_counter()
                result = await g.import_objects(
                    "bench-s3", "main", "raw/", "s3://source/landing", committer="bench"
                )
                seconds = time.perf_counter() - t0
                counts = dict(proxy.requests)
            finally:
                await stores.close()
    finally:
        server.stop()
    assert result.entries == objects, result
    total = sum(counts.values())
    report("import.s3", entries=objects, seconds=round(seconds, 1), entries_per_s=round(objects / seconds),
           requests=counts, requests_total=total, requests_per_object=round(total / objects, 5))  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--objects", type=int, default=1_000_000)
    parser.add_argument("--dirs", type=int, default=1000)
    parser.add_argument("--skip-spark", action="store_true")
    parser.add_argument("--s3", type=int, default=0, metavar="M", help="also import M objects from moto S3")
    args = parser.parse_args()
    report("import.machine", **machine())
    work = Path(tempfile.mkdtemp(prefix="bench-import-"))
    try:
        if args.s3:
            asyncio.run(s3_import(work, args.s3))
        if not args.objects:
            return
        src = work / "src"
        t0 = time.perf_counter()
        make_tree(src, args.objects, args.dirs)
        os.sync()
        report(
            "import.build", objects=args.objects, dirs=args.dirs, seconds=round(time.perf_counter() - t0, 1)
        )
        t0 = time.perf_counter()
        walked = raw_walk(src)
        raw = time.perf_counter() - t0
        ours = asyncio.run(in_process(src, work, walked))
        report("import.in_process", entries=walked, seconds=round(ours, 2),
               entries_per_s=round(walked / ours), raw_walk_per_s=round(walked / raw),
               ratio_to_raw_walk=round(raw / ours, 3))  # fmt: skip
        if not args.skip_spark:
            spark_s, jvm = asyncio.run(on_spark(src, work, walked))
            report("import.spark_local2", entries=walked, seconds=round(spark_s, 2),
                   jvm_start_s=round(jvm, 2), entries_per_s=round(walked / spark_s),
                   ratio_to_raw_walk=round(raw / spark_s, 3), target_seconds_for_1m=60)  # fmt: skip
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
