"""Hard-delete reconciler benchmark: intents decided per second on SQLite and PostgreSQL (issue 11).

For each KV driver (memory as the same-run baseline, SQLite file, PostgreSQL scratch database on
127.0.0.1:5432 or ``LAKEFS_BENCH_PG_URL``), one repository with the journal on over a local
namespace receives ``--objects`` uploads (``Objects.upload_many``): half are committed, the other half
reset away (garbage). With the clock past the grace period:

1. ``reconcile_dry_run``: one ``reconcile_repository`` pass with ``deleter=None``: every due intent is
   decided (point lookups in the branch's tokens, its consumed records and the commit's metarange),
   nothing changes. ``decided_per_second`` = intents / seconds.
2. ``reconcile_pass``: the real pass (the same decisions, then drop committed intents; claim, re-check
   right before the delete, batch-delete through ``store_deleter`` and settle the garbage).
   ``intents_per_second`` = intents / seconds.

Each figure is also given as a ratio to the memory KV of the same run (``vs_memory``).

Run: ``.venv/bin/python -m bench.bench_reconcile [--objects 2000] [--drivers memory,sqlite,postgres]
[--concurrency 16]``.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import tempfile
import time
import uuid
from contextlib import AsyncExitStack
from datetime import timedelta
from pathlib import Path
from typing import Any

from bench.bench_repos import postgres_url
from bench.common import machine, report
from lakefs_core.kv import open_kv
from lakefs_core.repos.graveler import Graveler, GravelerSettings, StorageNamespace
from lakefs_core.repos.objects import Objects, UploadItem
from lakefs_core.repos.stores import StoreRegistry
from lakefs_core.service.deleter import store_deleter
from lakefs_gc.reconcile import ReconcileOptions, reconcile_repository

BODY = b"x" * 256
BATCH = 200


async def _fill(g: Graveler, repo: str, n: int) -> None:
    objects = Objects(g)
    half = n // 2
    for start in range(0, half, BATCH):
        items = [UploadItem(f"kept/{i:07d}", BODY) for i in range(start, min(half, start + BATCH))]
        await objects.upload_many(repo, "main", items)
    await g.commit(repo, "main", committer="bench", message="kept")
    for start in range(half, n, BATCH):
        items = [UploadItem(f"gone/{i:07d}", BODY) for i in range(start, min(n, start + BATCH))]
        await objects.upload_many(repo, "main", items)
    await g.reset_branch(repo, "main")


async def one_driver(url: str, tmp: Path, n: int, concurrency: int) -> dict[str, Any]:
    kv = await open_kv(url)
    stores = StoreRegistry()
    g = Graveler(kv, stores, GravelerSettings(hard_delete_journal=True))
    try:
        repo = f"bench-{uuid.uuid4().hex[:8]}"
        ns = f"local://{tmp}/{repo}"
        await g.create_repository(repo, ns)
        await _fill(g, repo, n)
        options = ReconcileOptions(
            now=g.clock() + timedelta(hours=2), max_intents=n + 10, concurrency=concurrency
        )
        gc.collect()
        t0 = time.perf_counter()
        dry = await reconcile_repository(g, repo, deleter=None, options=options)
        dry_s = time.perf_counter() - t0
        deleter = store_deleter(await g.namespace_store(StorageNamespace(ns)))
        gc.collect()
        t0 = time.perf_counter()
        real = await reconcile_repository(g, repo, deleter=deleter, options=options)
        real_s = time.perf_counter() - t0
        assert real.deleted == n - n // 2 and real.committed == n // 2, real
        return {
            "intents": dry.candidates,
            "decided_per_second": round(dry.candidates / dry_s, 1),
            "pass_intents_per_second": round(real.candidates / real_s, 1),
            "deleted": real.deleted,
            "committed": real.committed,
        }
    finally:
        await stores.close()
        await kv.close()


async def run(n: int, drivers: list[str], concurrency: int) -> None:
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-reconcile-") as tmp:
        async with AsyncExitStack() as stack:
            urls = {"memory": "memory://", "sqlite": f"sqlite:///{Path(tmp) / 'kv.sqlite3'}"}
            if "postgres" in drivers:
                pg = await stack.enter_async_context(postgres_url())
                if pg is not None:
                    urls["postgres"] = pg
            for driver in ["memory", *[d for d in drivers if d != "memory"]]:
                if driver in urls:
                    results[driver] = await one_driver(urls[driver], Path(tmp), n, concurrency)
    base = results["memory"]
    for driver, fig in results.items():
        report(
            "reconcile_intents_per_second",
            kv=driver,
            store="local",
            objects=n,
            concurrency=concurrency,
            **fig,
            decided_vs_memory=round(fig["decided_per_second"] / base["decided_per_second"], 3),
            pass_vs_memory=round(fig["pass_intents_per_second"] / base["pass_intents_per_second"], 3),
            **machine(),
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--objects", type=int, default=2000)
    parser.add_argument("--drivers", default="memory,sqlite,postgres")
    parser.add_argument("--concurrency", type=int, default=16, help="intents decided at once")
    args = parser.parse_args()
    asyncio.run(run(args.objects, args.drivers.split(","), args.concurrency))


if __name__ == "__main__":
    main()
