"""Mirroring daemon benchmarks (``lakefs_mirror``), as same-run ratios.

1. ``mirror_promotion_latency``: how soon after the LAST object of a commit arrives in the mirror
   namespace is the mirror branch promoted? The real engine runs in the real daemon loop
   (:class:`~lakefs_core.service.daemon.DaemonLoop`, ``--poll`` seconds between passes) against in-memory KV
   stores and ``mem://`` (or ``--store local``) object stores. Each repetition commits
   ``--commit-objects`` objects on the source, "replicates" every new key but the commit's last data
   object, lets the engine fail to promote for two passes, waits a random fraction of a poll
   interval (so arrivals fall anywhere in the cycle), then delivers the withheld object. Measured:
   wall time from the end of that copy to the end of the pass that promoted the branch. The
   presence cache's negative cooldown is 0 here (``negative_cooldown_seconds`` adds up to that much
   in a deployment). Baseline: the poll interval itself; the ratio is latency / poll interval
   (median and p90 over ``--repeat`` repetitions). A ratio near 0.5 means the promotion costs about
   the wait for the next pass; the excess over 0.5 is the pass itself.

2. ``mirror_requests_per_commit``: object-store requests needed to validate one new commit versus a
   full ``rclone check`` of the two namespaces. Both run against moto S3 (one ``moto_server``),
   source namespace ``s3://bench-src/origin``, mirror namespace ``s3://bench-dst/origin-mirror``,
   and both go through the same counting HTTP proxy (``tests/block/faults.py``'s ``FaultProxy``
   with no fault rules), so the figures are HTTP requests reaching S3, counted the same way for both.
   Setup (not counted): ``--objects`` N objects committed on the source and replicated with
   server-side ``CopyObject``; one engine pass mirrors them (its requests are reported as
   ``initial_validation``). Then ``--new`` k objects are committed, replicated, and ONE engine pass
   validates and promotes that commit: every request that pass sends to S3 is counted (the proxy
   total; ``validator_requests`` is the engine's own ``lakefs_mirror_object_store_requests_total``
   delta, which must agree). Baseline: ``rclone check`` of the two namespaces right after (sizes
   plus MD5 from the listings, both directions), counted through the proxy: once with rclone's
   default per-directory listing and once with ``--fast-list`` (one recursive listing per side);
   the ratio uses the cheaper of the two. rclone is Debian's (``/usr/bin/rclone``), configured only
   through ``RCLONE_CONFIG_BENCH_*`` environment variables (``AWS_CA_BUNDLE`` is removed from its
   environment).

Run: ``.venv/bin/python -m bench.bench_mirror [--objects 2000] [--new 10] [--repeat 10] [--poll 0.05]``
(``--only latency`` / ``--only requests``). Prints one JSON line per figure.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import shutil
import statistics
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import aioboto3

from bench.common import machine, report
from lakefs_core.block import S3Settings, copy_object
from lakefs_core.block.base import ObjectInfo
from lakefs_core.errors import NotFoundError
from lakefs_core.kv.memory import MemoryKVStore
from lakefs_core.namespace import StorageNamespace
from lakefs_core.repos.graveler import Graveler
from lakefs_core.repos.objects import Objects
from lakefs_core.repos.stores import StoreRegistry
from lakefs_core.service.daemon import DaemonLoop
from lakefs_mirror.db import MirrorsDB
from lakefs_mirror.engine import EngineSettings, MirrorEngine, PassReport
from lakefs_mirror.metrics import MirrorMetrics
from lakefs_mirror.presence import PresenceCache

T = TypeVar("T")
REGION = "us-east-1"
UPLOAD_CONCURRENCY = 16


# -- a source region, a destination region and a mirror, in one process ------------------------------


@dataclass
class Pair:
    src: Graveler
    dst: Graveler
    db: MirrorsDB
    presence: PresenceCache
    metrics: MirrorMetrics
    engine: MirrorEngine
    src_ns: StorageNamespace
    dst_ns: StorageNamespace
    closers: list[Callable[[], Awaitable[Any]]] = field(default_factory=list)

    async def commit(self, n: int, tag: str) -> tuple[str, str]:
        """Commit ``n`` new objects on the source's main; returns the commit id and the store key
        (relative to the namespace) of the last object written."""
        objects = Objects(self.src)
        sem = asyncio.Semaphore(UPLOAD_CONCURRENCY)

        async def one(i: int) -> str:
            async with sem:
                stat = await objects.upload(
                    "origin", "main", f"{tag}/part-{i:06d}.csv", f"{tag},{i}\n".encode()
                )
            return stat.physical_address

        addresses = await asyncio.gather(*(one(i) for i in range(n - 1)))
        last = await one(n - 1)  # written after all the others: "the last object"
        assert last not in addresses
        commit = await self.src.commit("origin", "main", committer="bench", message=tag)
        return commit.id, last

    async def mirror_head(self) -> str | None:
        try:
            return (await self.dst.branch("origin-mirror", "main")).commit_id
        except NotFoundError:
            return None

    async def close(self) -> None:
        for close in reversed(self.closers):
            await close()


@asynccontextmanager
async def pair(
    tmp: Path, src_ns: str, dst_ns: str, *, src_stores: StoreRegistry, dst_stores: StoreRegistry
) -> AsyncIterator[Pair]:
    src = Graveler(MemoryKVStore(), src_stores)
    dst = Graveler(MemoryKVStore(), dst_stores)
    db = await MirrorsDB.open(f"sqlite+aiosqlite:///{tmp / f'mirrors-{uuid.uuid4().hex[:8]}.sqlite3'}")
    presence = await PresenceCache.open(None, negative_cooldown=0)
    metrics = MirrorMetrics()
    engine = MirrorEngine(
        region="eu",
        gravelers={"us": src, "eu": dst},
        db=db,
        presence=presence,
        metrics=metrics,
        settings=EngineSettings(),
        holder="bench",
    )
    p = Pair(
        src,
        dst,
        db,
        presence,
        metrics,
        engine,
        StorageNamespace.parse(src_ns),
        StorageNamespace.parse(dst_ns),
    )
    p.closers += [src.stores.close, dst.stores.close, db.close, presence.close]
    try:
        await src.create_repository("origin", src_ns)
        await db.create_mirror(
            source_repo="origin",
            source_region="us",
            name="origin-mirror",
            region="eu",
            storage_namespace=dst_ns,
            mode="native",
        )
        yield p
    finally:
        await p.close()


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


# -- 1. promotion latency ----------------------------------------------------------------------------


async def replicate_mem(p: Pair, withhold: frozenset[str] = frozenset()) -> int:
    """Copy the source namespace's keys the mirror namespace lacks, except the relative keys in
    ``withhold``; returns how many were copied."""
    src = await p.src.stores.namespace_store(p.src_ns)
    dst = await p.dst.stores.namespace_store(p.dst_ns)
    copied = 0
    root = f"{p.src_ns.prefix}/" if p.src_ns.prefix else ""  # the store may be rooted at the namespace
    async for item in src.list(root):
        if not isinstance(item, ObjectInfo):
            continue
        rel = item.key[len(root) :]
        if rel in withhold or await dst.exists(p.dst_ns.key(rel)):
            continue
        await copy_object(src, item.key, dst, p.dst_ns.key(rel))
        copied += 1
    return copied


async def bench_latency(args: argparse.Namespace, tmp: Path) -> None:
    name = uuid.uuid4().hex[:8]
    if args.store == "local":
        (tmp / "src").mkdir()
        (tmp / "dst").mkdir()
        src_ns, dst_ns = f"local://{tmp / 'src' / 'origin'}", f"local://{tmp / 'dst' / 'origin-mirror'}"
    else:
        src_ns, dst_ns = f"mem://src{name}/origin", f"mem://dst{name}/origin-mirror"
    poll: float = args.poll
    async with pair(tmp, src_ns, dst_ns, src_stores=StoreRegistry(), dst_stores=StoreRegistry()) as p:
        # Seed: a first commit, fully mirrored, so every repetition is an incremental one.
        head, _ = await p.commit(args.commit_objects, "seed")
        await replicate_mem(p)
        for _ in range(10):
            if await p.mirror_head() == head:
                break
            await p.engine.step()
        else:
            raise SystemExit("the seed commit was not mirrored in 10 passes")

        passes = 0
        promoted_at: list[float] = []
        promoted = asyncio.Event()
        pass_seconds: list[float] = []
        pass_done = asyncio.Condition()

        async def step() -> PassReport:
            nonlocal passes
            started = time.perf_counter()
            result = await p.engine.step()
            ended = time.perf_counter()
            pass_seconds.append(ended - started)
            passes += 1
            if result.promotions:
                promoted_at.append(ended)
                promoted.set()
            async with pass_done:
                pass_done.notify_all()
            return result

        loop = DaemonLoop(step, name="bench-mirror", interval=poll)
        runner = asyncio.create_task(loop.run())
        latencies: list[float] = []
        try:
            for rep in range(args.repeat):
                head, last = await p.commit(args.commit_objects, f"rep{rep}")
                await replicate_mem(p, withhold=frozenset({last}))
                promoted.clear()
                seen = passes
                async with pass_done:  # two passes that found the candidate incomplete
                    await pass_done.wait_for(lambda seen=seen: passes >= seen + 2)  # type: ignore[misc]
                assert not promoted.is_set() and await p.mirror_head() != head, "promoted without the object"
                await asyncio.sleep(random.uniform(0, poll))
                assert await replicate_mem(p) == 1
                arrived = time.perf_counter()
                await asyncio.wait_for(promoted.wait(), timeout=max(10.0, 100 * poll))
                assert await p.mirror_head() == head
                latencies.append(promoted_at[-1] - arrived)
        finally:
            loop.request_stop()
            await runner
    med, p90 = statistics.median(latencies), quantile(latencies, 0.9)
    report(
        "mirror_promotion_latency",
        store=args.store,
        repeat=len(latencies),
        commit_objects=args.commit_objects,
        poll_interval_seconds=poll,
        latency_median_seconds=round(med, 4),
        latency_p90_seconds=round(p90, 4),
        latency_min_seconds=round(min(latencies), 4),
        latency_max_seconds=round(max(latencies), 4),
        pass_median_seconds=round(statistics.median(pass_seconds), 4),
        ratio_median_to_poll=round(med / poll, 3),
        ratio_p90_to_poll=round(p90 / poll, 3),
        negative_cooldown_seconds=0,
    )


# -- 2. requests per validated commit vs rclone check --------------------------------------------------


def classify(method: str, path_qs: str) -> str:
    """S3 operation of one proxied request (path-style addressing: ``/bucket[/key][?query]``)."""
    path, _, query = path_qs.partition("?")
    is_bucket = path.strip("/").count("/") == 0
    if method == "GET" and is_bucket and ("list-type" in query or "prefix" in query or query == ""):
        return "list"
    return {"GET": "get", "HEAD": "head", "PUT": "put", "POST": "post", "DELETE": "delete"}.get(
        method, method
    )


def counted(seen: list[tuple[str, str]]) -> dict[str, int]:
    return dict(sorted(Counter(classify(m, p) for m, p in seen).items()))


async def replicate_s3(
    client: Any, src_bucket: str, src_prefix: str, dst_bucket: str, dst_prefix: str
) -> int:
    """Server-side ``CopyObject`` of every source key the destination lacks (S3 Replication stand-in)."""

    async def keys(bucket: str, prefix: str) -> set[str]:
        out: set[str] = set()
        paginator = client.get_paginator("list_objects_v2")
        async for page in paginator.paginate(Bucket=bucket, Prefix=prefix + "/"):
            out.update(o["Key"][len(prefix) + 1 :] for o in page.get("Contents", []))
        return out

    missing = sorted(await keys(src_bucket, src_prefix) - await keys(dst_bucket, dst_prefix))
    sem = asyncio.Semaphore(UPLOAD_CONCURRENCY)

    async def copy(rel: str) -> None:
        async with sem:
            await client.copy_object(
                Bucket=dst_bucket,
                Key=f"{dst_prefix}/{rel}",
                CopySource={"Bucket": src_bucket, "Key": f"{src_prefix}/{rel}"},
            )

    await asyncio.gather(*(copy(rel) for rel in missing))
    return len(missing)


async def rclone_check(rclone: str, endpoint: str, src: str, dst: str, *extra: str) -> tuple[int, str]:
    env = {k: v for k, v in os.environ.items() if k != "AWS_CA_BUNDLE" and not k.startswith("RCLONE_")}
    env.update(
        {
            "RCLONE_CONFIG": os.devnull,
            "RCLONE_CONFIG_BENCH_TYPE": "s3",
            "RCLONE_CONFIG_BENCH_PROVIDER": "Other",
            "RCLONE_CONFIG_BENCH_ENV_AUTH": "false",
            "RCLONE_CONFIG_BENCH_ACCESS_KEY_ID": ACCESS_KEY,
            "RCLONE_CONFIG_BENCH_SECRET_ACCESS_KEY": SECRET_KEY,
            "RCLONE_CONFIG_BENCH_REGION": REGION,
            "RCLONE_CONFIG_BENCH_ENDPOINT": endpoint,
            "RCLONE_CONFIG_BENCH_FORCE_PATH_STYLE": "true",
        }
    )
    proc = await asyncio.create_subprocess_exec(
        rclone,
        "check",
        f"bench:{src}",
        f"bench:{dst}",
        *extra,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(proc.communicate(), timeout=600)
    return int(proc.returncode or 0), out.decode(errors="replace")


ACCESS_KEY = "bench-access-key"
SECRET_KEY = "bench-secret-key"


def store_requests(metrics: MirrorMetrics) -> dict[str, int]:
    out: dict[str, int] = {}
    for family in metrics.registry.collect():
        if family.name == "lakefs_mirror_object_store_requests":
            for sample in family.samples:
                if sample.name.endswith("_total"):
                    out[sample.labels["operation"]] = int(sample.value)
    return out


def delta(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    return {k: v - before.get(k, 0) for k, v in sorted(after.items()) if v - before.get(k, 0)}


async def bench_requests(args: argparse.Namespace, tmp: Path) -> None:
    rclone = shutil.which("rclone")
    if rclone is None:
        raise SystemExit("rclone (Debian package rclone) is needed for the request benchmark")
    os.environ["AWS_ACCESS_KEY_ID"] = ACCESS_KEY
    os.environ["AWS_SECRET_ACCESS_KEY"] = SECRET_KEY
    os.environ.setdefault("AWS_DEFAULT_REGION", REGION)
    from tests.block.faults import FaultProxy
    from tests.support.moto import MotoServer

    server = MotoServer(REGION)
    server.start(tmp)
    proxy = FaultProxy(server.endpoint)
    await proxy.start()
    try:
        direct = S3Settings(
            region=REGION,
            endpoint_url=server.endpoint,
            access_key_id=ACCESS_KEY,
            secret_access_key=SECRET_KEY,
        )
        counted_s3 = S3Settings(
            region=REGION, endpoint_url=proxy.endpoint, access_key_id=ACCESS_KEY, secret_access_key=SECRET_KEY
        )
        session = aioboto3.Session()
        async with session.client(
            "s3",
            endpoint_url=server.endpoint,
            region_name=REGION,
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY,
        ) as client:
            for bucket in ("bench-src", "bench-dst"):
                await client.create_bucket(Bucket=bucket)
            async with pair(
                tmp,
                "s3://bench-src/origin",
                "s3://bench-dst/origin-mirror",
                src_stores=StoreRegistry(s3=direct),
                dst_stores=StoreRegistry(s3=counted_s3),  # the engine's mirror-side reads are counted
            ) as p:
                t0 = time.perf_counter()
                base, _ = await p.commit(args.objects, "base")
                copied = await replicate_s3(client, "bench-src", "origin", "bench-dst", "origin-mirror")
                build_seconds = time.perf_counter() - t0

                proxy.seen.clear()
                before = store_requests(p.metrics)
                result = await p.engine.step()
                assert result.promotions == 1 and await p.mirror_head() == base, result
                initial = counted(proxy.seen)
                initial_validator = delta(store_requests(p.metrics), before)

                head, _ = await p.commit(args.new, "increment")
                new_keys = await replicate_s3(client, "bench-src", "origin", "bench-dst", "origin-mirror")
                proxy.seen.clear()
                before = store_requests(p.metrics)
                t1 = time.perf_counter()
                result = await p.engine.step()
                pass_seconds = time.perf_counter() - t1
                assert result.promotions == 1 and await p.mirror_head() == head, result
                ours = counted(proxy.seen)
                ours_validator = delta(store_requests(p.metrics), before)
                assert sum(ours.values()) == sum(ours_validator.values()), (ours, ours_validator)

                baselines: dict[str, dict[str, int]] = {}
                for label, extra in (("rclone_check", ()), ("rclone_check_fast_list", ("--fast-list",))):
                    proxy.seen.clear()
                    status, out = await rclone_check(
                        rclone, proxy.endpoint, "bench-src/origin", "bench-dst/origin-mirror", *extra
                    )
                    if status != 0:
                        raise SystemExit(f"rclone check {' '.join(extra)} failed ({status}):\n{out[-3000:]}")
                    baselines[label] = counted(proxy.seen)
                namespace_keys = copied + new_keys
    finally:
        await proxy.close()
        server.stop()

    ours_total = sum(ours.values())
    rclone_totals = {label: sum(c.values()) for label, c in baselines.items()}
    cheapest = min(rclone_totals, key=lambda k: rclone_totals[k])
    report(
        "mirror_requests_per_commit",
        objects=args.objects,
        new_objects=args.new,
        namespace_keys=namespace_keys,
        build_seconds=round(build_seconds, 2),
        initial_validation=counted_total(initial),
        initial_validator=initial_validator,
        commit_requests=counted_total(ours),
        commit_validator=ours_validator,
        commit_pass_seconds=round(pass_seconds, 4),
        rclone_check=counted_total(baselines["rclone_check"]),
        rclone_check_fast_list=counted_total(baselines["rclone_check_fast_list"]),
        baseline=cheapest,
        ratio_commit_to_rclone=round(ours_total / rclone_totals[cheapest], 4),
        ratio_commit_to_rclone_default=round(ours_total / rclone_totals["rclone_check"], 4),
        ratio_initial_to_rclone=round(sum(initial.values()) / rclone_totals[cheapest], 4),
        counted="HTTP requests reaching S3 through one counting proxy (moto_server)",
    )


def counted_total(by_op: dict[str, int]) -> dict[str, int]:
    return {**by_op, "total": sum(by_op.values())}


async def main_async(args: argparse.Namespace) -> None:
    report("machine", **machine())
    with tempfile.TemporaryDirectory(prefix="bench-mirror-") as tmp:
        root = Path(tmp)
        if args.only in (None, "latency"):
            (root / "latency").mkdir()
            await bench_latency(args, root / "latency")
        if args.only in (None, "requests"):
            (root / "requests").mkdir()
            await bench_requests(args, root / "requests")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--objects", type=int, default=2000, help="objects in the mirrored repository")
    parser.add_argument("--new", type=int, default=10, help="objects in the new commit validated")
    parser.add_argument("--repeat", type=int, default=10, help="promotion-latency repetitions")
    parser.add_argument("--poll", type=float, default=0.05, help="engine poll interval (seconds)")
    parser.add_argument("--commit-objects", type=int, default=20, help="objects per latency commit")
    parser.add_argument("--store", choices=("mem", "local"), default="mem", help="latency benchmark stores")
    parser.add_argument("--only", choices=("latency", "requests"), help="run one benchmark only")
    args = parser.parse_args()
    if args.objects < 1 or args.new < 1 or args.repeat < 1 or args.poll <= 0 or args.commit_objects < 2:
        parser.error("sizes must be positive (and --commit-objects at least 2)")
    asyncio.run(main_async(args))


if __name__ == "__main__":
    main()
