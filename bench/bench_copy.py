"""Copying an object (REST copyObject, the gateway's CopyObject): :meth:`Objects.copy` through the
block store against the previous way, a re-upload of the source's bytes streamed through this
process (``Objects.upload`` of ``Objects.read_stat``), same run, same objects.

``--objects`` x ``--mib`` MiB objects in a repository on a local namespace and on a moto_server
bucket; each is copied once each way. Reported per store: seconds and this process's CPU seconds of
each way, and their ratios (copy / re-upload; under 1 is better). On S3 the copy is a server-side
``CopyObject``, so the bytes no longer pass through the server: its CPU ratio is what matters (moto's
own copy runs in its process, and wall time on a loaded machine is noise).

Run: ``.venv/bin/python -m bench.bench_copy [--objects 8] [--mib 16]``.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

from bench.common import machine, moto_s3_settings, report
from lakefs_core.kv.memory import MemoryKVStore
from lakefs_core.repos.graveler import Graveler, StoreRegistry
from lakefs_core.repos.objects import Objects


async def _ways(g: Graveler, namespace: str, objects: int, mib: int) -> dict[str, float]:
    await g.create_repository("bench-copy", namespace, hard_delete_journal=True)
    o = Objects(g)
    body = bytes(range(256)) * (mib * 4096)
    sources = [await o.upload("bench-copy", "main", f"src/{i}", body) for i in range(objects)]
    out: dict[str, float] = {}
    for way in ("reupload", "copy", "reupload_again", "copy_again"):  # interleaved: drift shows
        wall, cpu = time.perf_counter(), time.process_time()
        for i, stat in enumerate(sources):
            dest = f"{way}/{i}"
            if way.startswith("copy"):
                await o.copy("bench-copy", stat, "bench-copy", "main", dest)
            else:
                await o.upload("bench-copy", "main", dest, o.read_stat("bench-copy", stat))
        out[f"{way}_s"] = round(time.perf_counter() - wall, 3)
        out[f"{way}_cpu_s"] = round(time.process_time() - cpu, 3)
    for kind in ("_s", "_cpu_s"):
        copy = out["copy" + kind] + out["copy_again" + kind]
        reupload = out["reupload" + kind] + out["reupload_again" + kind]
        out["ratio" + kind] = round(copy / reupload, 3) if reupload else 0.0
    return out


async def main(objects: int, mib: int) -> None:
    import aioboto3

    from tests.support.moto import MotoServer

    report("copy.machine", **machine())
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "ns").mkdir()
        local = await _ways(
            Graveler(MemoryKVStore(), StoreRegistry()), f"local://{work}/ns/repo", objects, mib
        )
        report("copy.local", objects=objects, mib=mib, **local)
        server = MotoServer("us-east-1")
        server.start(work)
        try:
            async with aioboto3.Session().client("s3", **server.client_kwargs()) as s3:
                await s3.create_bucket(Bucket="lake")
            stores = StoreRegistry(s3=moto_s3_settings(server.endpoint))
            try:
                s3_ways = await _ways(Graveler(MemoryKVStore(), stores), "s3://lake/repo", objects, mib)
            finally:
                await stores.close()
            report("copy.s3", objects=objects, mib=mib, **s3_ways)
        finally:
            server.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--objects", type=int, default=8)
    parser.add_argument("--mib", type=int, default=16)
    args = parser.parse_args()
    asyncio.run(main(args.objects, args.mib))
