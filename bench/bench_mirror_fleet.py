"""The mirror at fleet scale: one daemon's engine serving ``--mirrors`` (1,000) mirrored repositories.

Two regions in one process: the source region's KV and the mirrors database on ``--backend``
(``sqlite``: files in a temporary directory; ``postgres``: two fresh databases on
``LAKEFS_TEST_PG_URL`` or 127.0.0.1:5432, one per region's KV, the mirrors database beside the
source's), the destination KV of the same kind, ``mem://`` object stores, ``active`` mode (the
engine copies the objects). Every source repository gets one commit of ``--objects`` objects.

Figures (one JSON line each):

- ``fleet_setup``: creating the repositories and the mirrors, and the first pass that mirrors them
  all (every mirror visited: the baseline of a pass that does the work);
- ``fleet_idle_pass``: median wall and CPU (process time) of ``--repeat`` passes in which no source
  changed (settled mirrors are skipped, :mod:`lakefs_mirror.quiet`), against a full pass that visits
  every mirror (``full_pass_seconds=0``), measured in the same run; targets: <= 1 s wall and
  <= 0.2 s CPU at 1,000 mirrors;
- ``fleet_change_latency``: one repository among them gets a new commit; the wall time of the next
  pass, which promotes it (a change waits at most one poll interval plus this);
- ``fleet_rss``: the process's resident set after all of it (``VmRSS``, and the peak ``VmHWM``);
- ``fleet_rss_full_cache``: the same after the presence cache was left as ``--cached-objects``
  (10k) objects per mirror leave it (:func:`fill_presence`: at its bound of 1M keys), and the idle
  pass then. The engine keeps nothing else per object: validating a commit streams its ranges, one
  mirror at a time. Target <= 300 MB.

Run: ``.venv/bin/python -m bench.bench_mirror_fleet [--mirrors 1000] [--objects 10] [--repeat 5]
[--backend sqlite|postgres] [--profile N]`` (``--profile``: cProfile of one more idle pass, its N
costliest calls on stderr).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import pstats
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import machine, report
from lakefs_core.keys import new_object_id, new_slice_id, relative_address
from lakefs_core.kv import open_kv
from lakefs_core.repos.graveler import Graveler
from lakefs_core.repos.objects import Objects
from lakefs_core.repos.stores import StoreRegistry
from lakefs_mirror.db import MirrorsDB
from lakefs_mirror.engine import EngineSettings, MirrorEngine
from lakefs_mirror.metrics import MirrorMetrics
from lakefs_mirror.presence import PresenceCache, namespace_key


def rss() -> dict[str, int]:
    fields = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = int(value.split()[0]) // 1024  # MiB
    return fields


def engine(src: Graveler, dst: Graveler, db: MirrorsDB, presence: PresenceCache, full: float) -> MirrorEngine:
    return MirrorEngine(
        region="eu",
        gravelers={"us": src, "eu": dst},
        db=db,
        presence=presence,
        metrics=MirrorMetrics(region="eu"),
        settings=EngineSettings(active_copy_grace_seconds=0, full_pass_seconds=full),
        holder="bench",  # one holder: both engines pass the region lease
    )


async def timed_pass(e: MirrorEngine) -> tuple[float, float, Any]:
    wall, cpu = time.perf_counter(), time.process_time()
    rep = await e.step()
    return time.perf_counter() - wall, time.process_time() - cpu, rep


async def fill_presence(dst: Graveler, presence: PresenceCache, args: argparse.Namespace) -> None:
    """Leave the presence cache as ``--cached-objects`` validated objects per mirror would: those
    are more keys than it holds (10k x 1,000 = 10M > its 1M bound), so it ends holding the newest
    ones, i.e. the last mirrors' keys (``data/<slice>/<object id>``, one slice per 10k objects, ids
    as lakeFS makes them). Marking exactly its bound's worth of them is that state at its largest
    (both generations full: after more keys the cache holds between half the bound and the bound),
    in seconds instead of the hours that replicating 10M objects took."""
    # up to the bound exactly, counting the facts the passes before left (one more would start a
    # new generation and evict half)
    budget = max(0, min(presence.max_objects, args.mirrors * args.cached_objects) - presence.present_count)
    start = args.mirrors - -(-budget // args.cached_objects)
    for i in range(max(0, start), args.mirrors):
        repo = await dst.repository(f"repo-{i:05d}-m")
        ns = namespace_key(repo.storage_namespace, repo.instance_uid)
        part = budget % args.cached_objects if i == start else 0  # the first mirror's share
        lo = args.cached_objects - part if part else 0
        for j in range(lo, args.cached_objects):
            if j % 10_000 == 0 or j == lo:
                slice_id = new_slice_id(seq=(j // 10_000) % 1000)
            presence.mark_present(ns, relative_address(slice_id, new_object_id()))


async def run(args: argparse.Namespace, urls: dict[str, str]) -> None:
    src = Graveler(await open_kv(urls["src"]), StoreRegistry())
    dst = Graveler(await open_kv(urls["dst"]), StoreRegistry())
    db = await MirrorsDB.open(urls["db"])
    presence = await PresenceCache.open(None, negative_cooldown=0)
    t0 = time.perf_counter()
    for i in range(args.mirrors):
        name = f"repo-{i:05d}"
        await src.create_repository(name, f"mem://fleet-src/{name}")
        objects = Objects(src)
        for j in range(args.objects):
            await objects.upload(name, "main", f"data/{j:05d}", f"{name}-{j}".encode())
        await src.commit(name, "main", committer="bench", message="load")
        await db.create_mirror(
            source_repo=name,
            source_region="us",
            name=f"{name}-m",
            region="eu",
            storage_namespace=f"mem://fleet-dst/{name}",
            mode="active",
        )
    created = time.perf_counter() - t0
    fleet = engine(src, dst, db, presence, 3600.0)  # no full pass due while the bench measures
    first_wall, first_cpu, first = await timed_pass(fleet)
    assert first.promotions == args.mirrors and not first.errors, first.errors[:3]
    report(
        "fleet_setup",
        backend=args.backend,
        mirrors=args.mirrors,
        objects=args.objects,
        create_seconds=round(created, 2),
        first_pass_seconds=round(first_wall, 2),
        first_pass_cpu=round(first_cpu, 2),
    )
    idle = [await timed_pass(fleet) for _ in range(args.repeat)]
    if args.profile:
        profiler = cProfile.Profile()
        profiler.enable()
        await fleet.step()
        profiler.disable()
        pstats.Stats(profiler, stream=sys.stderr).sort_stats("cumulative").print_stats(args.profile)
    assert all(r.skipped == args.mirrors and r.mirrors == 0 for _, _, r in idle)
    assert all(r.active for _, _, r in idle)
    visiting = engine(src, dst, db, presence, 0.0)
    full = [await timed_pass(visiting) for _ in range(max(2, args.repeat // 2))]
    assert all(r.active and r.mirrors == args.mirrors for _, _, r in full)
    idle_wall = statistics.median(w for w, _, _ in idle)
    idle_cpu = statistics.median(c for _, c, _ in idle)
    full_wall = statistics.median(w for w, _, _ in full)
    report(
        "fleet_idle_pass",
        backend=args.backend,
        mirrors=args.mirrors,
        idle_wall_seconds=round(idle_wall, 3),
        idle_cpu_seconds=round(idle_cpu, 3),
        full_pass_wall_seconds=round(full_wall, 3),
        full_pass_cpu_seconds=round(statistics.median(c for _, c, _ in full), 3),
        ratio=round(idle_wall / full_wall, 3),
        targets={"wall": 1.0, "cpu": 0.2},
    )
    changed = f"repo-{args.mirrors // 2:05d}"
    await Objects(src).upload(changed, "main", "data/new", b"new")
    head = (await src.commit(changed, "main", committer="bench", message="change")).id
    wall, cpu, rep = await timed_pass(fleet)
    assert rep.mirrors == 1, rep.mirrors
    assert rep.promotions == 1 and (await dst.branch(f"{changed}-m", "main")).commit_id == head
    report(
        "fleet_change_latency",
        backend=args.backend,
        mirrors=args.mirrors,
        pass_wall_seconds=round(wall, 3),
        pass_cpu_seconds=round(cpu, 3),
        visited=rep.mirrors,
    )
    report("fleet_rss", backend=args.backend, mirrors=args.mirrors, objects=args.objects, **rss())
    await fill_presence(dst, presence, args)
    idle_wall, idle_cpu, rep = await timed_pass(fleet)
    assert rep.skipped == args.mirrors
    report(
        "fleet_rss_full_cache",
        backend=args.backend,
        mirrors=args.mirrors,
        objects_per_mirror=args.cached_objects,
        cached_objects=presence.present_count,
        max_objects=presence.max_objects,
        idle_wall_seconds=round(idle_wall, 3),
        idle_cpu_seconds=round(idle_cpu, 3),
        target_mb=300,
        **rss(),
    )
    await presence.close()
    await db.close()
    await src.kv.close()
    await dst.kv.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mirrors", type=int, default=1000)
    parser.add_argument("--objects", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--backend", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument(
        "--cached-objects", type=int, default=10_000, help="per mirror (fleet_rss_full_cache)"
    )
    parser.add_argument("--profile", type=int, default=0, help="print the N costliest calls of one idle pass")
    args = parser.parse_args()
    report("machine", **machine())
    if args.backend == "sqlite":
        with tempfile.TemporaryDirectory(prefix="bench-fleet-") as tmp:
            urls = {
                "src": f"sqlite:///{tmp}/kv-us.sqlite3",
                "dst": f"sqlite:///{tmp}/kv-eu.sqlite3",
                "db": f"sqlite:///{tmp}/mirrors.sqlite3",
            }
            asyncio.run(run(args, urls))
        return
    from tests.support.pg import create_database, drop_database

    us, eu = create_database(), create_database()
    try:
        asyncio.run(run(args, {"src": us.url, "dst": eu.url, "db": us.url}))
    finally:
        drop_database(us)
        drop_database(eu)


if __name__ == "__main__":
    main()
