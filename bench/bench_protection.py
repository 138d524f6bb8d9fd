"""What the branch protection check costs a staged write, as same-run ratios.

``Graveler.set_entry`` of ``--objects`` records, one at a time, on a SQLite-file KV (the embedded
default) and a memory block store, in three repositories measured alternately for ``--rounds``:

- ``none``: no rules stored (the check reads "none" once per cache period);
- ``rules``: ``--rules`` patterns stored, none matching the written branch (each write matches the
  branch against every pattern, the rules read through the per-process cache);
- ``uncached``: the same rules with the cache off (``protection_cache_seconds=0``): one KV point read
  per write, what a check without the cache would pay.

Ratio = time / time of ``none`` in the same round. Also ``check_us``: the check alone (microseconds
per call, cached rules, same process), with none and with the rules, against the SQLite write it
guards. Run:
``.venv/bin/python -m bench.bench_protection [--objects 2000] [--rules 50] [--rounds 5]``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
import uuid
from pathlib import Path

from bench.common import machine, make_records, report
from lakefs_core.kv import open_kv
from lakefs_core.repos import protection
from lakefs_core.repos.graveler import Graveler, GravelerSettings
from lakefs_core.repos.protection import Rules
from lakefs_core.repos.stores import StoreRegistry


async def _time_writes(g: Graveler, repo: str, n: int) -> float:
    records = make_records(n, seed=hash(repo) & 0xFFFF)
    t0 = time.perf_counter()
    for rec in records:
        await g.set_entry(repo, "main", rec)
    return time.perf_counter() - t0


async def _check_us(g: Graveler, repo_id: str, calls: int = 5000) -> float:
    repo = await g.repository(repo_id)
    t0 = time.perf_counter()
    for _ in range(calls):
        await protection.check(g.context, repo, "main", protection.Action.STAGING_WRITE)
    return (time.perf_counter() - t0) / calls * 1e6


async def main_async(objects: int, rules: int, rounds: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        kv = await open_kv(f"sqlite:///{Path(tmp) / 'kv.db'}")
        stores = StoreRegistry()
        cached = Graveler(kv, stores, GravelerSettings())
        uncached = Graveler(kv, stores, GravelerSettings(protection_cache_seconds=0.0))
        patterns = Rules.of([f"release-{i}-*" for i in range(rules)])
        ratios: dict[str, list[float]] = {"rules": [], "uncached": []}
        check_us: dict[str, float] = {}
        try:
            for _ in range(rounds):
                times: dict[str, float] = {}
                for name, g, protected in (
                    ("none", cached, False),
                    ("rules", cached, True),
                    ("uncached", uncached, True),
                ):
                    repo = f"b{uuid.uuid4().hex[:10]}"
                    await g.create_repository(repo, f"mem://{repo}/ns")
                    if protected:
                        await g.set_branch_protection(repo, patterns, "")
                    times[name] = await _time_writes(g, repo, objects)
                    check_us[name] = await _check_us(g, repo)
                for name, series in ratios.items():
                    series.append(times[name] / times["none"])
                report(
                    "protection_round",
                    objects=objects,
                    patterns=rules,
                    **{k: round(v, 3) for k, v in times.items()},
                )
        finally:
            await stores.close()
            await kv.close()
        report(
            "protection_check",
            machine=machine(),
            objects=objects,
            rules=rules,
            median_ratio_rules=round(statistics.median(ratios["rules"]), 3),
            median_ratio_uncached=round(statistics.median(ratios["uncached"]), 3),
            write_us=round(min(times.values()) / objects * 1e6, 1),
            check_us={k: round(v, 2) for k, v in check_us.items()},
            ratios={k: [round(v, 3) for v in vs] for k, vs in ratios.items()},
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--objects", type=int, default=2000)
    parser.add_argument("--rules", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    asyncio.run(main_async(args.objects, args.rules, args.rounds))


if __name__ == "__main__":
    main()
