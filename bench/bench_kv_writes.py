"""Concurrent writes on the SQLite KV store (the embedded default): what group commit buys.

``--writers`` tasks in one process each make ``--ops`` "PUTs" of the gateway's KV pattern: a
journal intent (``set_if`` absent), then the staging write that settles it (``set_many_if``: the
entry and the settled intent, the intent expected as written). ``synchronous`` is SQLite's default
for WAL (FULL: the WAL is synced at every ``COMMIT``). Reported: PUTs/s (wall) and the process's
CPU seconds per 1,000 PUTs (user + system, ``resource.getrusage``), best of ``--rounds``, each
round on a fresh file.

Run from the tree to measure (A/B: alternate two trees, ``PYTHONPATH=<tree>``):
``python -m bench.bench_kv_writes [--writers 16] [--ops 100] [--rounds 3]``.
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import tempfile
import time
from pathlib import Path

from bench.common import machine, report
from lakefs_core.kv import Expect, KVStore, open_kv

STAGING, JOURNAL = b"staging", b"journal"


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def writer(kv: KVStore, w: int, ops: int) -> None:
    for i in range(ops):
        key = b"w%03d/o%05d" % (w, i)
        await kv.set_if(JOURNAL, key, b"open", Expect.ABSENT)
        await kv.set_many_if(
            [(STAGING, key, b"x" * 200), (JOURNAL, key, b"settled")], [(JOURNAL, key, Expect.equals(b"open"))]
        )


async def one_round(writers: int, ops: int) -> tuple[float, float]:
    with tempfile.TemporaryDirectory(prefix="bench-kv-writes-") as tmp:
        kv = await open_kv(f"sqlite:///{Path(tmp) / 'kv.sqlite3'}")
        try:
            await asyncio.gather(*(writer(kv, w, 2) for w in range(writers)))  # warm: connections
            cpu, wall = cpu_seconds(), time.perf_counter()
            await asyncio.gather(*(writer(kv, w + writers, ops) for w in range(writers)))
            return time.perf_counter() - wall, cpu_seconds() - cpu
        finally:
            await kv.close()


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--writers", type=int, default=16)
    parser.add_argument("--ops", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    results = [await one_round(args.writers, args.ops) for _ in range(args.rounds)]
    puts = args.writers * args.ops
    report(
        "kv_writes_sqlite",
        machine=machine(),
        writers=args.writers,
        puts=puts,
        puts_per_s=round(puts / min(wall for wall, _ in results), 1),
        cpu_s_per_1000_puts=round(1000 * min(cpu for _, cpu in results) / puts, 3),
        rounds=[{"wall_s": round(wall, 3), "cpu_s": round(cpu, 3)} for wall, cpu in results],
    )


if __name__ == "__main__":
    asyncio.run(main())
