"""Daemons never block their loop (issue 12): the real mirroring daemon's ``/_health`` answers within
100 ms while a pass validates a commit of a large range (its tables opened, checksummed and decoded
off the event loop by ``lakefs_core.offloop.run_cpu``), and a variant with that off-loop work forced
back onto the loop shows the probe detecting the stall (the assertion can fail)."""

from __future__ import annotations

import asyncio
import base64
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
import pytest
from pydantic import SecretStr

from lakefs_core import offloop
from lakefs_core.format.records import ValueRecord, make_entry
from lakefs_core.keys import new_object_id, new_slice_id
from lakefs_core.settings import CoreSettings
from lakefs_core.wiring import open_core
from lakefs_mirror.config import load_mirror_config
from lakefs_mirror.service import MirrorService

ENTRIES = 60_000
T = TypeVar("T")


def write_config(tmp: Path) -> Path:
    path = tmp / "mirror.yaml"
    regions = "\n".join(
        f"  {r}:\n    kv_url: sqlite:///{tmp}/{r}.sqlite3\n    local_roots: [{tmp}/{r}-objects]"
        for r in ("us", "eu")
    )
    path.write_text(
        f"""
region: eu
regions:
{regions}
mirrors_db_url: sqlite:///{tmp}/mirrors.sqlite3
listen: 127.0.0.1:0
access_keys:
  - access_key_id: AKIATESTLATENCY
    secret_access_key: test-secret
poll_interval_seconds: 1
"""
    )
    return path


async def big_source(tmp: Path, entries: int = ENTRIES) -> None:
    """A source repository whose head holds ENTRIES entries (objects never written: the validator
    parses every range and finds them missing, which is the CPU-heavy part of a pass)."""
    settings = CoreSettings(kv_url=SecretStr(f"sqlite:///{tmp}/us.sqlite3"))
    async with await open_core(settings) as core:
        g = core.graveler
        await g.create_repository("big", f"local://{tmp}/us-objects/big")
        slice_id = new_slice_id()
        batch: list[ValueRecord] = []
        for i in range(entries):
            identity, data = make_entry(f"data/{slice_id}/{new_object_id()}", 10, "0" * 32)
            batch.append(ValueRecord(f"t/part-{i:07}".encode(), identity, data))
            if len(batch) == 5000 or i == entries - 1:
                await g.set_entries("big", "main", batch)
                batch = []
        await g.commit("big", "main", committer="t", message="big")


async def probe_during_pass(tmp: Path, path: str = "/_health") -> tuple[list[float], float]:
    """Latencies (s) of ``GET path`` every 20 ms during one daemon pass, and the pass's duration
    (authenticated, so an API route can be probed too)."""
    config = load_mirror_config(write_config(tmp), {})
    service = await MirrorService.open(config)
    try:
        await service.db.create_mirror(
            source_repo="big", source_region="us", name="big-mirror", region="eu",
            storage_namespace=f"local://{tmp}/eu-objects/big-mirror",
        )  # fmt: skip
        # "Replication" of the metadata: the mirror's namespace gets the source's ranges, so the pass
        # opens and decodes them all (the objects themselves never arrive: found missing).
        shutil.copytree(tmp / "us-objects" / "big" / "_lakefs", tmp / "eu-objects" / "big-mirror" / "_lakefs")
        latencies: list[float] = []
        url = f"http://127.0.0.1:{service.bound_port}{path}"
        auth = {"Authorization": "Basic " + base64.b64encode(b"AKIATESTLATENCY:test-secret").decode()}
        async with aiohttp.ClientSession(headers=auth) as http:
            started = time.perf_counter()
            task = asyncio.create_task(service.step())
            while not task.done():
                t0 = time.perf_counter()
                async with http.get(url) as r:
                    assert r.status == 200
                    await r.read()
                latencies.append(time.perf_counter() - t0)
                await asyncio.sleep(0.02)
            report = await task
            duration = time.perf_counter() - started
        assert report is not None
        return latencies, duration
    finally:
        await service.close()


@pytest.mark.slow
async def test_health_answers_within_100ms_during_a_large_pass(tmp_path: Path) -> None:
    await big_source(tmp_path)
    latencies, duration = await probe_during_pass(tmp_path)
    assert duration > 0.5 and len(latencies) >= 10, (duration, len(latencies))
    worst = max(latencies)
    ordered = sorted(latencies)
    p99 = ordered[int(len(ordered) * 0.99)]
    assert worst < 0.1, (
        f"/_health took {worst * 1000:.0f} ms (p99 {p99 * 1000:.0f} ms, {len(latencies)} probes) "
        f"during a {duration:.1f} s pass"
    )


@pytest.mark.slow
async def test_the_probe_sees_cpu_work_on_the_loop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same pass with run_cpu running its work inline on the loop: the probe must notice."""

    async def inline(fn: Callable[..., T], *args: Any, **kw: Any) -> T:
        return fn(*args, **kw)

    monkeypatch.setattr(offloop, "run_cpu", inline)
    for module in ("lakefs_core.graveler.tables", "lakefs_mirror.validate"):
        monkeypatch.setattr(f"{module}.run_cpu", inline)
    await big_source(tmp_path)
    latencies, duration = await probe_during_pass(tmp_path)
    assert max(latencies) >= 0.1, f"no stall seen in a {duration:.1f} s pass: the probe cannot fail"
