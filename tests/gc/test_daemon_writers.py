"""A real ``lakefs-gc run`` daemon collecting while four writers upload, overwrite, delete, reset and
commit: no live object is ever deleted (every object of every branch head and of every staging area
reads back at the end), and the garbage the writers made is removed.

Each writer makes at least ``MIN_OPS`` operations and goes on for the scenario's seconds, counted from
when the daemon answers (a loaded machine does fewer operations per second, never fewer in all).

- Retention GC every second (SQLite + local, PostgreSQL + S3 on moto): overwritten and deleted
  objects of expired commits are swept.
- The hard-delete reconciler every half second with a 1 s grace, a half-second staged backoff and
  the journal on (SQLite + local, DynamoDB + S3 on moto), retention GC off: at the end no object of
  the namespace is unreferenced (every uncommitted object that was overwritten, deleted or reset
  away is gone) and none that any commit or staging area references is missing."""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from pydantic import SecretStr

from lakefs_core.errors import NoChangesError
from lakefs_core.repos.graveler import Graveler, StorageNamespace
from lakefs_core.repos.objects import Objects
from lakefs_core.settings import CoreSettings
from lakefs_core.wiring import open_core
from lakefs_gc.rules import GCRules, save_rules
from tests.block.conftest import create_bucket
from tests.gc.daemon_support import AUTH, write_config
from tests.support.moto import ACCESS_KEY, SECRET_KEY, MotoServer
from tests.support.pg import PgDatabase
from tests.support.timing import scaled

WRITERS = 4
KEYS = 12
# Each writer's operations at least (3 commits), however long they take: the scenario is a count of
# operations, the time window only lets a fast machine do more. A loaded one did 4 per writer in 8 s
# on DynamoDB (CI: "18 of 32 ops"), so a minimum made of the window failed for the machine's load.
MIN_OPS = 12


async def _writer(g: Graveler, objects: Objects, repo: str, branch: str, *, seed: int, until: float) -> int:
    rng = random.Random(seed)
    ops = 0
    while ops < MIN_OPS or time.monotonic() < until:
        path = f"w/{branch}/k{rng.randrange(KEYS)}"
        roll = rng.random()
        if roll < 0.05:
            await g.reset_branch(repo, branch)  # uncommitted changes discarded: their objects are garbage
        elif roll < 0.2:
            with contextlib.suppress(Exception):
                await objects.delete(repo, branch, path)
        else:
            await objects.upload(repo, branch, path, f"{branch} {ops} {rng.random()}".encode())
        ops += 1
        if ops % 4 == 0:
            with contextlib.suppress(NoChangesError):  # a reset may have dropped everything
                await g.commit(repo, branch, committer=branch, message=f"op {ops}")
    return ops


async def _all_live_objects_read(g: Graveler, objects: Objects, repo: str) -> int:
    """Read every object of every branch (head commit + staging); a deleted one raises."""
    n = 0
    async for branch in g.list_branches(repo):
        after = ""
        while True:
            page = await objects.list(repo, branch.id, after=after, amount=1000)
            for stat in page.objects:
                await objects.read_all(repo, branch.id, stat.path)
                n += 1
            if not page.has_more:
                break
            after = page.next_after
    return n


async def _referenced(g: Graveler, objects: Objects, repo: str, ns: StorageNamespace) -> set[str]:
    """Relative addresses referenced by any commit of any branch's history or by any staging area."""
    refs: list[str] = []
    async for branch in g.list_branches(repo):
        refs.append(branch.id)  # head + staging
        refs += [c.id async for c in g.log(repo, branch.id)]
    out: set[str] = set()
    for ref in dict.fromkeys(refs):
        after = ""
        while True:
            page = await objects.list(repo, ref, after=after, amount=1000)
            for stat in page.objects:
                relative = ns.relative_of(stat.physical_address, 1)
                if relative is not None:
                    out.add(relative)
            if not page.has_more:
                break
            after = page.next_after
    return out


async def _data_objects(g: Graveler, ns: StorageNamespace) -> set[str]:
    store = await g.namespace_store(ns)
    prefix = f"{ns.prefix}/" if ns.prefix else ""
    return {item.key[len(prefix) :] async for item in store.list(f"{prefix}data/") if hasattr(item, "key")}


async def _hd_deleted(port: int) -> float:
    from prometheus_client.parser import text_string_to_metric_families

    async with aiohttp.ClientSession() as s, s.get(f"http://127.0.0.1:{port}/metrics") as resp:
        text = await resp.text()
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "lakefs_gc_hd_deleted_total"
    )


async def _swept_after(port: int, repo: str, since: float) -> int:
    """Objects deleted by runs that started after ``since`` (epoch seconds) and finished."""
    url = f"http://127.0.0.1:{port}/service/gc/v1/repositories/{repo}/runs?amount=1000"
    async with aiohttp.ClientSession() as s, s.get(url, headers=_auth()) as resp:
        assert resp.status == 200, await resp.text()
        runs = (await resp.json())["results"]
    total = 0
    for run in runs:
        started = run.get("started_at")
        if run["state"] == "swept" and started and _epoch(started) >= since:
            total += run["sweep"]["deleted"]
    return total


def _epoch(text: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


async def _wait_healthy(proc: asyncio.subprocess.Process, port: int, tail: Callable[[], str]) -> None:
    """Until the daemon answers ``/_health`` (its start is seconds of imports on a loaded machine: the
    writers' window must not pass before it collects, nor a poll reach a port not listening yet)."""
    deadline = time.monotonic() + scaled(120)
    async with aiohttp.ClientSession() as s:
        while True:
            assert proc.returncode is None, tail()
            with contextlib.suppress(aiohttp.ClientError):
                async with s.get(f"http://127.0.0.1:{port}/_health") as resp:
                    if resp.status == 200:
                        return
            assert time.monotonic() < deadline, f"the daemon did not answer /_health: {tail()}"
            await asyncio.sleep(0.2)


def _auth() -> dict[str, str]:
    import base64

    return {"Authorization": "Basic " + base64.b64encode(":".join(AUTH).encode()).decode()}


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _scenario(
    tmp_path: Path, core_conf: dict[str, Any], namespace: str, seconds: float, *, reconcile: bool = False
) -> None:
    settings = CoreSettings.model_validate(core_conf)
    port = _free_port()
    config = write_config(
        tmp_path / "gc.yaml",
        {
            "core": core_conf,
            "listen": f"127.0.0.1:{port}",
            "access_keys": [{"access_key_id": AUTH[0], "secret_access_key": AUTH[1]}],
            "schedule": {
                "interval_seconds": 1,
                "jitter_fraction": 0,
                "min_age_seconds": 3,
                "enabled": not reconcile,
            },
            "spark": {"mode": "lite"},
            "hard_delete": {
                "enabled": reconcile,
                "interval_seconds": 0.5,
                "grace_seconds": 1,
                # An object still staged when its intent is due (a writer slower than the grace: a
                # loaded machine) is looked at again after this backoff; at its default (600 s) one
                # overwritten afterwards outlived the wait (a loaded run: "removed only 0 objects").
                "staged_backoff_seconds": 0.5,
                "pending_timeout_seconds": 3600,  # the journal's minimum (shorter is refused)
            },
            "poll_interval_seconds": 0.3,
            "workdir": str(tmp_path / "work"),
        },
    )
    async with await open_core(settings) as core:
        g, objects = core.graveler, Objects(core.graveler)
        await g.create_repository("busy", namespace, hard_delete_journal=reconcile)
        ns = StorageNamespace(namespace)
        await save_rules(await g.namespace_store(ns), ns, GCRules.of(0))  # only heads stay active
        for i in range(WRITERS):
            await g.create_branch("busy", f"b{i}", "main")
        env = {k: v for k, v in os.environ.items() if not k.startswith("LAKEFS_")}
        log = (tmp_path / "daemon.log").open("wb")
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "lakefs_gc.cli", "run", "--config", str(config), env=env, stderr=log
        )
        try:
            await _wait_healthy(proc, port, lambda: (tmp_path / "daemon.log").read_text()[-3000:])
            start = time.time()
            until = time.monotonic() + seconds
            await asyncio.gather(
                *(_writer(g, objects, "busy", f"b{i}", seed=i, until=until) for i in range(WRITERS))
            )
            # Let the daemon collect what the writers left (objects older than min_age / the grace);
            # the loop ends as soon as it has: the limit only bounds a daemon that never does.
            deadline = time.monotonic() + scaled(120)
            deleted, leftover = 0, set[str]()
            while time.monotonic() < deadline:
                assert proc.returncode is None, (tmp_path / "daemon.log").read_text()[-3000:]
                if reconcile:
                    leftover = await _data_objects(g, ns) - await _referenced(g, objects, "busy", ns)
                    deleted = int(await _hd_deleted(port)) if not leftover else 0
                else:
                    deleted = await _swept_after(port, "busy", start)
                if deleted >= WRITERS:
                    break
                await asyncio.sleep(0.5)
        finally:
            if proc.returncode is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    await asyncio.wait_for(proc.wait(), scaled(60))
                except TimeoutError:
                    proc.kill()
                    await proc.wait()
            log.close()
        assert proc.returncode == 0, (tmp_path / "daemon.log").read_text()[-3000:]
        assert deleted >= WRITERS, (
            f"the daemon removed only {deleted} objects; garbage left: {sorted(leftover)[:5]}"
        )
        assert await _all_live_objects_read(g, objects, "busy") > 0
        if reconcile:  # nothing referenced anywhere in the history is missing
            assert not await _referenced(g, objects, "busy", ns) - await _data_objects(g, ns)


async def test_sqlite_local(tmp_path: Path) -> None:
    core_conf = {"kv_url": f"sqlite:///{tmp_path / 'kv.sqlite3'}"}
    await _scenario(tmp_path, core_conf, f"local://{tmp_path / 'ns'}", seconds=8)


@pytest.mark.slow
async def test_postgres_s3(
    tmp_path: Path, pg_database: PgDatabase, moto: Callable[[str], MotoServer]
) -> None:
    server = moto("us-east-1")
    await create_bucket(server, "gc-writers")
    core_conf: dict[str, Any] = {
        "kv_url": SecretStr(pg_database.url).get_secret_value(),
        "s3": {
            "endpoint_url": server.endpoint,
            "region": "us-east-1",
            "credentials": {"source": "static", "access_key_id": ACCESS_KEY, "secret_access_key": SECRET_KEY},
        },
    }
    await _scenario(tmp_path, core_conf, "s3://gc-writers/busy", seconds=10)


async def test_reconciler_sqlite_local(tmp_path: Path) -> None:
    core_conf = {"kv_url": f"sqlite:///{tmp_path / 'kv.sqlite3'}"}
    await _scenario(tmp_path, core_conf, f"local://{tmp_path / 'ns'}", seconds=6, reconcile=True)


@pytest.mark.slow
async def test_reconciler_dynamodb_s3(tmp_path: Path, moto: Callable[[str], MotoServer]) -> None:
    server = moto("us-east-1")
    await create_bucket(server, "hd-writers")
    core_conf: dict[str, Any] = {
        "kv_url": f"dynamodb://?region=us-east-1&endpoint={server.endpoint}",
        "s3": {
            "endpoint_url": server.endpoint,
            "region": "us-east-1",
            "credentials": {"source": "static", "access_key_id": ACCESS_KEY, "secret_access_key": SECRET_KEY},
        },
    }
    await _scenario(tmp_path, core_conf, "s3://hd-writers/busy", seconds=8, reconcile=True)
