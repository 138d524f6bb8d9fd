"""Daemons never block their loop (issue 12): the real mirroring daemon's ``/_health`` answers within
100 ms (99% of probes) while a pass validates a commit of a large range (its tables opened,
checksummed and decoded off the event loop by ``lakefs_core.offloop.run_cpu``). Where the idle
daemon's own p99 is slower (a saturated machine: the scheduler, not the daemon), the bound is five
times that p99, measured by the same prober for ``IDLE_SECONDS`` before and after the pass.

To make "off the loop" checkable on a shared CI machine (where the scheduler alone can delay a probe
by 100+ ms), every table opening is made to take ``STALL`` seconds longer (a blocking wait in the
function ``run_cpu`` is given): off the loop, that never shows in a probe; with ``run_cpu`` forced to
run its work inline (the variant), the probe sees a stall of at least ``STALL``, so the assertion
can fail."""

from __future__ import annotations

import asyncio
import base64
import gc
import logging
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
from pydantic import SecretStr

from lakefs_core import offloop
from lakefs_core.committed.tables import TableCache
from lakefs_core.format.records import ValueRecord, make_entry
from lakefs_core.keys import new_object_id, new_slice_id
from lakefs_core.service.daemon import freeze_startup_heap
from lakefs_core.settings import CoreSettings
from lakefs_core.wiring import open_core
from lakefs_mirror.config import load_mirror_config
from lakefs_mirror.service import MirrorService
from tests.support.timing import scaled

log = logging.getLogger(__name__)

ENTRIES = 60_000
# Added to every table opening (3 in the pass). Well above the scheduling hiccups of a saturated
# machine: at 0.6 s, probes of 0.45 s or more (3/4 of it) summed to 1.06 s of the 1.2 s allowed (max
# 601 ms, load average 14 on 2 cores), nothing on the loop.
STALL = 1.5
T = TypeVar("T")

# GET argv[1] with the Authorization argv[2] every 5 ms; a line on stdin ends a segment (its latencies
# (s) printed on one line), the end of stdin the last one, each once it holds argv[3] probes at least
# (a count, not a time: a starved machine probes fewer times a second).
PROBER = """
import os, select, sys, time, urllib.request
url, auth, least = sys.argv[1], sys.argv[2], int(sys.argv[3])
latencies = []
print("ready", flush=True)
while True:
    if select.select([0], [], [], 0.005)[0] and len(latencies) >= least:
        print(" ".join(map(repr, latencies)), flush=True)
        if not os.read(0, 4096):
            break
        latencies = []
        continue
    t0 = time.perf_counter()
    request = urllib.request.Request(url, headers={"Authorization": auth})
    with urllib.request.urlopen(request, timeout=30) as r:
        assert r.status == 200, r.status
        r.read()
    latencies.append(time.perf_counter() - t0)
"""
IDLE_SECONDS = 2.0  # the probes of the idle daemon before and after the pass: the machine's own latency
IDLE_PROBES = 50  # ... and at least this many of them


def write_config(tmp: Path, mirrors_db_url: str = "") -> Path:
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
mirrors_db_url: {mirrors_db_url or f"sqlite:///{tmp}/mirrors.sqlite3"}
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


async def probe_during_pass(
    tmp: Path, path: str = "/_health", mirrors_db_url: str = ""
) -> tuple[list[float], float, float]:
    """Latencies (s) of ``GET path`` every 5 ms during one daemon pass, the pass's duration, and the
    p99 of the same probes of the idle daemon (the slower of ``IDLE_SECONDS`` before and after the
    pass: the machine's load changes meanwhile). Authenticated, so an API route can be probed too.
    The mirrors database is SQLite in ``tmp`` unless ``mirrors_db_url`` names another (empty)."""
    config = load_mirror_config(write_config(tmp, mirrors_db_url), {})
    service = await MirrorService.open(config)
    try:
        await service.db.create_mirror(
            source_repo="big", source_region="us", name="big-mirror", region="eu",
            storage_namespace=f"local://{tmp}/eu-objects/big-mirror",
        )  # fmt: skip
        # "Replication" of the metadata: the mirror's namespace gets the source's ranges, so the pass
        # opens and decodes them all (the objects themselves never arrive: found missing).
        shutil.copytree(tmp / "us-objects" / "big" / "_lakefs", tmp / "eu-objects" / "big-mirror" / "_lakefs")
        url = f"http://127.0.0.1:{service.bound_port}{path}"
        auth = "Basic " + base64.b64encode(b"AKIATESTLATENCY:test-secret").decode()
        # The prober is another process, as an outside client is: it shares neither the daemon's
        # event loop nor its GIL, and a request that arrives while the loop is blocked waits for it.
        prober = await asyncio.create_subprocess_exec(
            sys.executable, "-c", PROBER, url, auth, str(IDLE_PROBES),
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        )  # fmt: skip
        stdin, stdout = prober.stdin, prober.stdout
        assert stdin is not None and stdout is not None

        async def segment(last: bool = False) -> list[float]:
            """End the prober's segment (the last: stop it); the latencies it measured."""
            if last:
                stdin.close()
            else:
                stdin.write(b"next\n")
                await stdin.drain()
            return [float(x) for x in (await stdout.readline()).split()]

        try:
            assert await stdout.readline() == b"ready\n"
            await asyncio.sleep(IDLE_SECONDS)
            before = await segment()
            started = time.perf_counter()
            report = await service.step()
            duration = time.perf_counter() - started
            latencies = await segment()
            await asyncio.sleep(IDLE_SECONDS)
            after = await segment(last=True)
        finally:
            if not stdin.is_closing():
                stdin.close()  # the prober stops at its next probe
            await prober.wait()
        assert report is not None
        return latencies, duration, max(percentile(before, 0.99), percentile(after, 0.99))
    finally:
        await service.close()


def percentile(latencies: list[float], q: float) -> float:
    ordered = sorted(latencies)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


def blocked_time(latencies: list[float]) -> float:
    """Seconds spent in probes that took 3/4 of ``STALL`` or longer. Openings on the loop back to
    back merge into one long probe, so the variant is told apart by the time blocked, not by a count;
    a probe sent a few ms into a stall waits a little less than ``STALL``, hence the 3/4."""
    return sum(x for x in latencies if x >= 0.75 * STALL)


def slow_table_opening(monkeypatch: pytest.MonkeyPatch) -> None:
    real = TableCache._open

    def slow(self: TableCache, table_id: str, data: bytes) -> Any:
        time.sleep(STALL)  # in a worker thread when off the loop: the loop must not notice
        return real(self, table_id, data)

    monkeypatch.setattr(TableCache, "_open", slow)
    monkeypatch.setattr("lakefs_core.committed.tables.INLINE_OPEN_BYTES", 0)  # every table via run_cpu


@pytest.mark.slow
@pytest.mark.favour_the_loop  # the GIL switch interval of a real daemon
async def test_health_answers_within_100ms_during_a_large_pass(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    await big_source(tmp_path)
    slow_table_opening(monkeypatch)
    # As a daemon does after start-up: the test process's heap, grown by the tests before this one,
    # must not be walked by every full collection during the pass.
    freeze_startup_heap()
    try:
        latencies, duration, idle_p99 = await probe_during_pass(tmp_path)
    finally:
        gc.unfreeze()
    assert duration > 0.5 and len(latencies) >= 50, (duration, len(latencies))
    p99, worst = percentile(latencies, 0.99), max(latencies)
    # 100 ms, or five times what the same probes of the idle daemon took around the pass: on a
    # saturated machine the scheduler alone delays them (seen: p99 294 ms, nothing stalled), and
    # the pass's own threads compete with the loop for the cores (p99 99 ms against an idle 29 ms).
    bound = max(0.1, 5 * idle_p99)
    blocked = blocked_time(latencies)
    summary = (
        f"p99 {p99 * 1000:.0f} ms (bound {bound * 1000:.0f} ms, idle p99 {idle_p99 * 1000:.0f} ms), "
        f"max {worst * 1000:.0f} ms, {blocked:.2f} s in stalled probes, {len(latencies)} probes, "
        f"{duration:.1f} s pass"
    )
    log.info("%s", summary)
    # One probe may meet a scheduler hiccup of the shared CI machine (seen once: 689 ms with p99 15 ms);
    # the three table openings on the loop block it for 3 x STALL at least (the variant below).
    assert p99 < bound and blocked < 2 * STALL, summary


@pytest.mark.slow
@pytest.mark.favour_the_loop  # the GIL switch interval of a real daemon
async def test_the_probe_sees_cpu_work_on_the_loop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same pass with run_cpu running its work inline on the loop: the probe must notice."""

    async def inline(fn: Callable[..., T], *args: Any, **kw: Any) -> T:
        return fn(*args, **kw)

    monkeypatch.setattr(offloop, "run_cpu", inline)
    for module in ("lakefs_core.committed.tables", "lakefs_mirror.validate"):
        monkeypatch.setattr(f"{module}.run_cpu", inline)
    await big_source(tmp_path)
    slow_table_opening(monkeypatch)
    latencies, duration, _ = await probe_during_pass(tmp_path)
    blocked = blocked_time(latencies)
    assert blocked >= 2 * STALL, f"{blocked:.2f} s blocked in a {duration:.1f} s pass: the probe cannot fail"


@pytest.mark.slow
@pytest.mark.parametrize("entry", ["console-script", "python-m"])
async def test_the_daemon_process_decodes_big_ranges_in_a_worker_process(tmp_path: Path, entry: str) -> None:
    """``lakefs-mirror run --once`` as a real process (the console script, and ``python -m``): its
    range (over 256 KiB) is decoded by a spawned worker process, whose import of the daemon's main
    module must not start a second daemon; every entry is then counted missing."""
    from lakefs_mirror import validate
    from lakefs_mirror.db import MirrorsDB

    entries = 20_000
    await big_source(tmp_path, entries)
    config = write_config(tmp_path)
    async with await MirrorsDB.open(f"sqlite:///{tmp_path}/mirrors.sqlite3") as db:
        mirror = await db.create_mirror(
            source_repo="big", source_region="us", name="big-mirror", region="eu",
            storage_namespace=f"local://{tmp_path}/eu-objects/big-mirror",
        )  # fmt: skip
    ranges = tmp_path / "us-objects" / "big" / "_lakefs"
    assert max(p.stat().st_size for p in ranges.iterdir()) >= validate.PROCESS_SCAN_MIN_BYTES
    shutil.copytree(ranges, tmp_path / "eu-objects" / "big-mirror" / "_lakefs")
    script = str(Path(sys.executable).parent / "lakefs-mirror")
    argv = [script] if entry == "console-script" else [sys.executable, "-m", "lakefs_mirror"]
    proc = await asyncio.create_subprocess_exec(
        *argv, "run", "--once", "--config", str(config),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    _, err = await asyncio.wait_for(proc.communicate(), timeout=scaled(120))
    assert proc.returncode == 0, err.decode()[-2000:]
    assert b"worker process died" not in err
    async with await MirrorsDB.open(f"sqlite:///{tmp_path}/mirrors.sqlite3") as db:
        statuses = await db.list_status(mirror.id)
    assert [s.missing_objects for s in statuses if s.branch == "main"] == [entries], statuses
