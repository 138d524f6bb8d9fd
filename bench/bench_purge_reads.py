"""What the purge check costs a read of an object no purge names (issue 32, item 8), as same-run A/B.

Every user read (``Objects.stat``, ``read``, ``read_stat``) now looks the object's ``purged/`` marker
up in the KV before returning a byte. This measures, per KV driver (SQLite file, PostgreSQL) over a
local namespace of ``--objects`` small committed objects:

1. ``cat``: ``Objects.read_all`` of each object in turn (what ``fs cat`` does in-process: resolve,
   stat, marker, stream);
2. ``download``: ``read_stat`` of every listed object, ``--concurrency`` at a time (what
   ``fs download -r`` does after listing);

first in a repository that never purged (the check is one probe per half second), then once it has
announced purges (a marker lookup per read, shared by concurrent reads),

each with the check (A, this code) and without it (B: ``Objects`` whose marker lookup is skipped,
i.e. the read path before the change), alternated slice by slice (20 objects, or ten times the
concurrency) so the load of other processes falls on both alike. Reported: the summed wall seconds
of each, ``ratio`` = A / B (1.0 = no cost) and ``cpu_ratio``, the same for this process's CPU time
(the KV's client side included; PostgreSQL's server excluded).

Run: ``.venv/bin/python -m bench.bench_purge_reads [--objects 1000] [--rounds 5] [--concurrency 8]
[--object-bytes 10]`` (tiny objects are the worst case: their bytes cost least next to the lookup).
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

from bench.bench_repos import driver_urls
from bench.common import machine, report
from lakefs_core.kv import open_kv
from lakefs_core.refs.model import Repository
from lakefs_core.repos.graveler import Graveler, StoreRegistry
from lakefs_core.repos.objects import Objects, ObjectStat, UploadItem
from lakefs_core.repos.purge_markers import announce


class Unchecked(Objects):
    """The read path without the marker lookup (the baseline)."""

    async def _refuse_purged(self, repo: Repository, stat: ObjectStat) -> None:
        return None

    def _checked_stream(
        self, repo: Repository, stat: ObjectStat, start: int, length: int | None
    ) -> AsyncIterator[bytes]:
        return self._stream(repo, stat, start, length)


async def _populate(g: Graveler, repo: str, n: int, size: int) -> list[ObjectStat]:
    objects = Objects(g)
    for start in range(0, n, 500):
        await objects.upload_many(
            repo, "main", [_item(i, size) for i in range(start, min(n, start + 500))], concurrency=8
        )
    await g.commit(repo, "main", committer="bench", message="objects")
    page = await objects.list(repo, "main", amount=n)
    return page.objects


def _item(i: int, size: int) -> UploadItem:
    row = f"row,{i}\n".encode()
    return UploadItem(f"p/{i:06d}.csv", (row * (size // len(row) + 1))[:size])


async def _cat(objects: Objects, repo: str, stats: list[ObjectStat]) -> None:
    for stat in stats:
        await objects.read_all(repo, "main", stat.path)


async def _download(objects: Objects, repo: str, stats: list[ObjectStat], concurrency: int) -> None:
    gate = asyncio.Semaphore(concurrency)

    async def one(stat: ObjectStat) -> None:
        async with gate:
            async for _ in objects.read_stat(repo, stat):
                pass

    await asyncio.gather(*(one(s) for s in stats))


Slice = Callable[[Objects, list[ObjectStat]], Awaitable[None]]


async def _ab(  # noqa: PLR0917 - a benchmark helper
    rounds: int, stats: list[ObjectStat], size: int, checked: Objects, unchecked: Objects, run: Slice
) -> dict[str, float]:
    """A and B alternated slice by slice (``size`` objects each, the order of the pair swapped every
    slice), so the load other processes put on the machine falls on both alike; wall and process CPU
    seconds summed per variant over every round."""
    await run(checked, stats)  # warm-up (table cache, connections)
    await run(unchecked, stats)
    wall = {"checked": 0.0, "unchecked": 0.0}
    cpu = {"checked": 0.0, "unchecked": 0.0}
    for r in range(rounds):
        for i, start in enumerate(range(0, len(stats), size)):
            part = stats[start : start + size]
            pair = [("checked", checked), ("unchecked", unchecked)]
            for name, objects in pair if (i + r) % 2 == 0 else pair[::-1]:
                t0, c0 = time.perf_counter(), time.process_time()
                await run(objects, part)
                wall[name] += time.perf_counter() - t0
                cpu[name] += time.process_time() - c0
    return {
        "checked_s": round(wall["checked"], 3),
        "unchecked_s": round(wall["unchecked"], 3),
        "ratio": round(wall["checked"] / wall["unchecked"], 3),
        "cpu_ratio": round(cpu["checked"] / cpu["unchecked"], 3),
    }


async def bench_driver(driver: str, url: str, args: argparse.Namespace) -> None:
    kv = await open_kv(url)
    stores = StoreRegistry()
    g = Graveler(kv, stores)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            repo = f"bench-{uuid.uuid4().hex[:8]}"
            await g.create_repository(repo, f"local://{Path(tmp) / 'ns'}")
            stats = await _populate(g, repo, args.objects, args.object_bytes)
            checked, unchecked = Objects(g), Unchecked(g)

            async def cat(objects: Objects, part: list[ObjectStat]) -> None:
                await _cat(objects, repo, part)

            async def download(objects: Objects, part: list[ObjectStat]) -> None:
                await _download(objects, repo, part, args.concurrency)

            fields = {
                "driver": driver,
                "objects": len(stats),
                "bytes": args.object_bytes,
                "rounds": args.rounds,
            }
            for purged in (False, True):
                if purged:  # the repository announces purges: every read looks its marker up
                    await announce(g, await g.repository(repo))
                result = await _ab(args.rounds, stats, 20, checked, unchecked, cat)
                report("purge_check_cat", repo_with_purges=purged, **fields, **result)
                n = args.concurrency
                result = await _ab(args.rounds, stats, 10 * n, checked, unchecked, download)
                report("purge_check_download", repo_with_purges=purged, concurrency=n, **fields, **result)
    finally:
        await stores.close()
        await kv.close()


async def main_async(args: argparse.Namespace) -> None:
    report("machine", **machine())
    async with driver_urls(args.drivers) as urls:
        for driver, url in urls.items():
            await bench_driver(driver, url, args)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--objects", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--object-bytes", type=int, default=10)
    parser.add_argument("--drivers", nargs="+", default=["sqlite", "postgres"])
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
