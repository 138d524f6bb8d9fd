"""Hard-delete journal benchmark: its cost on uploads, and how fast intents are decided (issue 11).

1. ``upload_objects_per_second``: N small objects uploaded through ``Objects.upload`` (PUT to a local
   namespace + staging on a SQLite KV file) by ``--concurrency`` tasks, into two repositories in the
   same run, one with the journal on and one off; rounds alternate between them (off, on, off, on...)
   and the best round of each counts. Target: on/off throughput ratio >= 0.85 (at most 15% slower).
2. ``decide_intents_per_second``: after a branch reset turns those uploads into garbage, every due
   intent is decided (``Journal.decide``: point lookups in the branch's tokens and the consumed
   records) on the same SQLite file, with one committed batch of 20 in the consumed records.

3. ``upload_many_objects_per_second``: (1) through ``Objects.upload_many`` in batches of ``--batch``
   (intents in one KV batch before the PUTs; after them, one settle record for the batch, written
   in the KV batch that stages its entries).

Run: ``.venv/bin/python -m bench.bench_journal [--objects 500] [--rounds 3] [--concurrency 4]
[--batch 100] [--batched-only]``.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import tempfile
import time
import uuid
from datetime import timedelta
from pathlib import Path

from bench.common import machine, report
from lakefs_core.kv import open_kv
from lakefs_core.repos.graveler import Graveler, GravelerSettings
from lakefs_core.repos.objects import Objects, UploadItem
from lakefs_core.repos.stores import StoreRegistry

BODY = b"x" * 1024


async def _upload_round(objects: Objects, repo: str, n: int, concurrency: int, round_no: int) -> float:
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(n):
        queue.put_nowait(i)

    async def worker() -> None:
        while not queue.empty():
            i = queue.get_nowait()
            await objects.upload(repo, "main", f"r{round_no}/part-{i:06d}.bin", BODY)

    gc.collect()
    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return time.perf_counter() - t0


async def _batch_round(
    objects: Objects, repo: str, n: int, concurrency: int, round_no: int, *, batch: int
) -> float:
    items = [UploadItem(f"b{round_no}/part-{i:06d}.bin", BODY) for i in range(n)]
    gc.collect()
    t0 = time.perf_counter()
    for i in range(0, n, batch):
        await objects.upload_many(repo, "main", items[i : i + batch], concurrency=concurrency)
    return time.perf_counter() - t0


async def run_batched(n: int, rounds: int, concurrency: int, batch: int) -> None:
    """The same comparison through ``Objects.upload_many`` (the path of ``fs upload --recursive``)."""
    with tempfile.TemporaryDirectory(prefix="bench-journal-batch-") as tmp:
        kv = await open_kv(f"sqlite:///{Path(tmp) / 'kv.sqlite3'}")
        stores = StoreRegistry()
        g = Graveler(kv, stores, GravelerSettings())
        objects = Objects(g)
        repos = {}
        for mode in ("off", "on"):
            repo = f"bench-{mode}-{uuid.uuid4().hex[:8]}"
            await g.create_repository(repo, f"local://{tmp}/{repo}", hard_delete_journal=mode == "on")
            repos[mode] = repo
            await _batch_round(objects, repo, 20, concurrency, -1, batch=batch)  # warm-up
        best = {"off": float("inf"), "on": float("inf")}
        for r in range(rounds):
            for mode in ("off", "on"):
                seconds = await _batch_round(objects, repos[mode], n, concurrency, r, batch=batch)
                best[mode] = min(best[mode], seconds)
        rate = {mode: n / seconds for mode, seconds in best.items()}
        report(
            "upload_many_objects_per_second",
            kv="sqlite",
            store="local",
            objects=n,
            batch=batch,
            rounds=rounds,
            concurrency=concurrency,
            journal_off=round(rate["off"], 1),
            journal_on=round(rate["on"], 1),
            ratio_on_to_off=round(rate["on"] / rate["off"], 3),
        )
        await stores.close()
        await kv.close()


async def run(n: int, rounds: int, concurrency: int) -> None:
    with tempfile.TemporaryDirectory(prefix="bench-journal-") as tmp:
        kv = await open_kv(f"sqlite:///{Path(tmp) / 'kv.sqlite3'}")
        stores = StoreRegistry()
        g = Graveler(kv, stores, GravelerSettings())
        objects = Objects(g)
        repos = {}
        for mode in ("off", "on"):
            repo = f"bench-{mode}-{uuid.uuid4().hex[:8]}"
            await g.create_repository(repo, f"local://{tmp}/{repo}", hard_delete_journal=mode == "on")
            repos[mode] = repo
            await _upload_round(objects, repo, 20, concurrency, -1)  # warm-up
        best = {"off": float("inf"), "on": float("inf")}
        for r in range(rounds):
            for mode in ("off", "on"):
                best[mode] = min(best[mode], await _upload_round(objects, repos[mode], n, concurrency, r))
        rate = {mode: n / seconds for mode, seconds in best.items()}
        report(
            "upload_objects_per_second",
            kv="sqlite",
            store="local",
            objects=n,
            rounds=rounds,
            concurrency=concurrency,
            journal_off=round(rate["off"], 1),
            journal_on=round(rate["on"], 1),
            ratio_on_to_off=round(rate["on"] / rate["off"], 3),
            **machine(),
        )

        # Decide: reset every upload away (garbage), then commit a small batch so that each decision
        # also consults a consumed-token record and that commit's metarange.
        repo = repos["on"]
        await g.reset_branch(repo, "main")
        await _upload_round(objects, repo, 20, concurrency, rounds)
        await g.commit(repo, "main", committer="bench", message="one batch")
        journal = await g.journal(repo)
        now = g.clock() + timedelta(hours=2)
        intents = await journal.due_intents(now, limit=1 << 30)
        counts: dict[str, int] = {}
        gc.collect()
        t0 = time.perf_counter()
        for intent in intents:
            decision = await journal.decide(intent, now=now)
            counts[decision] = counts.get(decision, 0) + 1
        seconds = time.perf_counter() - t0
        report(
            "decide_intents_per_second",
            kv="sqlite",
            intents=len(intents),
            decisions=counts,
            per_second=round(len(intents) / seconds, 1),
        )
        await stores.close()
        await kv.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--objects", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--batch", type=int, default=100, help="objects per upload_many batch")
    parser.add_argument("--batched-only", action="store_true", help="only the upload_many comparison")
    args = parser.parse_args()
    if not args.batched_only:
        asyncio.run(run(args.objects, args.rounds, args.concurrency))
    asyncio.run(run_batched(args.objects, args.rounds, args.concurrency, args.batch))


if __name__ == "__main__":
    main()
