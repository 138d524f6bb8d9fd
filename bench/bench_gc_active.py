"""Retention walk at scale: build the on-disk commit map and walk it for N synthetic commits.

Usage: ``python -m bench.bench_gc_active [N]`` (default 1,000,000). Prints the time to load the map,
the walk time, and the peak RSS of the process (the driver target is <= 300 MB at 1M commits).

The history is a main line with a side branch every 50 commits (merged back half of the time) and
one commit per minute, so about half of the commits fall inside a 7-day default retention when N is
large; ids are sequential sha256 hex so the stream arrives in id order like a KV scan.
"""

from __future__ import annotations

import asyncio
import hashlib
import resource
import sys
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime

from lakefs_core.refs.model import CommitNode
from lakefs_gc.mark.active import compute_active, epoch_us
from lakefs_gc.rules import GCRules

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _cid(i: int) -> str:
    return hashlib.sha256(i.to_bytes(8, "big")).hexdigest()


async def synthetic_nodes(n: int) -> AsyncIterator[CommitNode]:
    """``n`` commits: ``i``'s main parent is ``i - 1`` except every 50th starts a side line off an
    older main commit; created one minute apart, the newest at ``NOW``."""
    start = epoch_us(NOW) - n * 60_000_000
    for i in range(n):
        parent = None if i == 0 else _cid(i - 1 if i % 50 else max(0, i - 75))
        parents = () if parent is None else (parent,)
        yield CommitNode(_cid(i), parents, parent, start + i * 60_000_000, _cid(-i - 1 & 0xFFFFFFFF), 1)


def peak_rss_mb() -> float:
    """This process's peak RSS. Linux: ``VmHWM`` of /proc/self/status, which is this program's own;
    ``ru_maxrss`` is not: it survives ``exec``, so a child of a big process (bench_gc) would report
    its parent's peak."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


async def run(n: int) -> dict[str, float]:
    rules = GCRules.of(7, {"main": 30})
    head = _cid(n - 1)
    t0 = time.perf_counter()
    result = await compute_active(synthetic_nodes(n), branches={"main": head}, rules=rules, now=NOW)
    elapsed = time.perf_counter() - t0
    try:
        t1 = time.perf_counter()
        count = 0
        async for _ in result.metaranges():
            count += 1
        out = time.perf_counter() - t1
        return {
            "commits": n,
            "active": result.num_active,
            "load_and_walk_s": round(elapsed, 2),
            "metaranges_s": round(out, 2),
            "distinct_metaranges": count,
            "peak_rss_mb": round(peak_rss_mb(), 1),
        }
    finally:
        await result.aclose()


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
    print(asyncio.run(run(n)))


if __name__ == "__main__":
    main()
