"""The failover drill end to end: two regions on two moto servers, a regional outage, failback.

Region A (``us-east-1``: DynamoDB KV and S3 on moto A) is reached ONLY through a TCP proxy, so the
region can be cut off and brought back with its data (moto keeps its state; a closed proxy refuses
every connection, as a region that is gone does). Region B (``eu-west-1``: SQLite KV, S3 on moto B)
runs the real :class:`~lakefs_mirror.service.MirrorService` with its HTTP API on a real socket. The
mirror is created through region A's daemon, a real ``lakefs-mirror run`` subprocess.

1. a writer commits on A while B's daemon mirrors (active mode);
2. region A's daemon is killed with SIGKILL and region A is cut off while the writer runs;
3. ``POST .../promote`` on B (no force: A does not answer): B is writable at a complete head;
4. writes on B; region A comes back; ``POST .../failback`` keeps A's unmirrored commits on a
   ``failback-`` branch and creates the reverse mirror, which region A's restarted daemon runs until
   A caught up; the second promote returns writes to A.

No acknowledged commit is lost in either direction, and every promoted head is complete (a fresh
LIST of the namespace holds its metarange, ranges and objects).
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import urllib.parse
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from lakefs_core.block.base import BlockStore
from lakefs_core.errors import LakeFSError
from lakefs_core.kv import open_kv
from lakefs_core.repos.graveler import Graveler
from lakefs_core.repos.objects import Objects
from lakefs_core.repos.stores import StoreRegistry
from lakefs_mirror.config import MirrorConfig
from lakefs_mirror.service import MirrorService
from tests.mirror.replication import commit_keys, list_namespace, missing_keys
from tests.mirror.test_e2e_moto import API, API_KEY, API_SECRET, basic_auth, create_bucket, s3_settings
from tests.support.moto import ACCESS_KEY, SECRET_KEY, MotoServer, free_port
from tests.support.tcpproxy import TcpProxy

pytestmark = [
    pytest.mark.slow,
    # Cutting region A off mid-request (and the promote's reachability probe timing out on it) can
    # leave a client socket to the cut region that asyncio collects later with "unclosed transport"
    # (seen in about one run of three under load): an artefact of the simulated outage, not of the
    # drill's subject. Only that warning is ignored.
    pytest.mark.filterwarnings(
        "ignore:Exception ignored in.*_SelectorTransport.__del__:pytest.PytestUnraisableExceptionWarning"
    ),
    # the same socket collected before its transport (seen once at -n 3): still only the cut region's
    pytest.mark.filterwarnings(
        "ignore:Exception ignored in. <socket.socket:pytest.PytestUnraisableExceptionWarning"
    ),
]

A, B = "us-east-1", "eu-west-1"
REPO, MIRROR = "origin", "origin-mirror"
SRC_NS, DST_NS = "s3://drill-src/origin", "s3://drill-dst/origin"
REPO_ROOT = Path(__file__).resolve().parents[2]


def region(endpoint: str, name: str, kv_url: str) -> dict[str, Any]:
    creds = {"source": "static", "access_key_id": ACCESS_KEY, "secret_access_key": SECRET_KEY}
    return {"kv_url": kv_url, "s3": {"endpoint_url": endpoint, "region": name, "credentials": creds}}


def config_dict(this: str, regions: dict[str, Any], db: Path, listen: str) -> dict[str, Any]:
    return {
        "region": this,
        "regions": regions,
        "mirrors_db_url": f"sqlite:///{db}",
        "listen": listen,
        "access_keys": [{"access_key_id": API_KEY, "secret_access_key": API_SECRET}],
        "poll_interval_seconds": 0.2,
        "negative_cooldown_seconds": 0,
        "active_copy_grace_seconds": 0,
        "error_cooldown_seconds": 0,
        "lease_ttl_seconds": 3,  # the killed daemon's lease lapses soon: the restarted one takes over
        "workers": 4,
    }


def start_daemon(config: Path, log: Path) -> subprocess.Popen[bytes]:
    """A real ``lakefs-mirror run`` process (its own process group, so SIGKILL reaches it alone)."""
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "lakefs_mirror", "run", "--config", str(config)],
            stderr=out,
            env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
            start_new_session=True,
        )


async def complete(g: Graveler, repo: str, commit: str, store: BlockStore, prefix: str) -> None:
    """THE invariant: a fresh LIST of the namespace holds everything ``commit`` needs."""
    missing = missing_keys(await commit_keys(g, repo, commit), await list_namespace(store, prefix))
    assert not missing, f"promoted head {commit[:12]} of {repo} lacks {missing[:5]}"


async def history(g: Graveler, repo: str, ref: str) -> set[str]:
    return {c.id async for c in g.log(repo, ref)}


async def wait_health(port: int, proc: subprocess.Popen[bytes], within: float = 30) -> None:
    async with aiohttp.ClientSession() as s:
        for _ in range(int(within / 0.1)):
            assert proc.poll() is None, "region A's daemon exited"
            try:
                async with s.get(f"http://127.0.0.1:{port}/_health") as r:
                    if r.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.1)
    raise AssertionError("region A's daemon did not become healthy")


async def api(method: str, url: str, body: dict[str, Any] | None = None) -> tuple[int, Any]:
    async with (
        aiohttp.ClientSession(headers={"Authorization": basic_auth()}) as s,
        s.request(method, url, json=body) as r,
    ):
        return r.status, await r.json(content_type=None)


async def test_failover_and_failback_drill(moto: Callable[[str], MotoServer], tmp_path: Path) -> None:
    a, b = moto(A), moto(B)
    await create_bucket(a, "drill-src")
    await create_bucket(b, "drill-dst")
    proxy = await TcpProxy("127.0.0.1", a.port).start()  # region A, as everyone reaches it
    a_end = f"http://127.0.0.1:{proxy.port}"
    a_kv = f"dynamodb://kvstore?region={A}&endpoint={urllib.parse.quote(a_end, safe='')}"
    regions = {A: region(a_end, A, a_kv), B: region(b.endpoint, B, f"sqlite:///{tmp_path / 'kv-b.sqlite3'}")}
    db_path = tmp_path / "mirrors.sqlite3"
    a_port = free_port()
    a_conf = tmp_path / "a.yaml"
    a_conf.write_text(yaml.safe_dump(config_dict(A, regions, db_path, f"127.0.0.1:{a_port}")))
    b_conf = MirrorConfig.model_validate(config_dict(B, regions, db_path, "127.0.0.1:0"))

    # The writer of region A (its own KV and store connections, through the proxy).
    # Its requests in flight when region A is cut wait at most read_timeout (botocore's default 60 s
    # once outlived the drill's 60 s wait for the writer): the writer sees the outage within seconds.
    a_registry = StoreRegistry(
        s3=replace(s3_settings(a), endpoint_url=a_end, max_attempts=2, connect_timeout=5, read_timeout=10)
    )
    b_registry = StoreRegistry(s3=s3_settings(b))
    a_kvstore = await open_kv(a_kv)
    src = Graveler(a_kvstore, a_registry)
    await src.create_repository(REPO, SRC_NS)
    a_daemon = start_daemon(a_conf, tmp_path / "a.log")
    service = await MirrorService.open(b_conf)
    a_again: MirrorService | None = None
    try:
        await wait_health(a_port, a_daemon)
        mirrors = f"http://127.0.0.1:{a_port}{API}/{REPO}/mirrors"
        body = {"name": MIRROR, "region": B, "storage_namespace": DST_NS, "mode": "active"}
        status, created = await api("POST", mirrors, body)
        assert status == 201, created
        mid = created["id"]
        b_api = f"http://127.0.0.1:{service.bound_port}{API}/{REPO}/mirrors/{mid}"
        dst = service.gravelers[B]
        dst_store = await b_registry.block_store("s3://drill-dst")

        # 1. writers on A while B mirrors
        acked_a: list[str] = []
        stop = asyncio.Event()

        async def writer() -> None:
            objects = Objects(src)
            n = 0
            while not stop.is_set():
                try:
                    await objects.upload(REPO, "main", f"a/{n}", f"a{n}".encode() * 50)
                    acked_a.append((await src.commit(REPO, "main", committer="w", message=f"a{n}")).id)
                except LakeFSError:
                    return  # region A is gone: nothing more is acknowledged
                n += 1
                await asyncio.sleep(0.02)

        task = asyncio.create_task(writer())
        promoted_heads: set[str] = set()
        for _ in range(200):
            await service.step()
            head = (await dst.branch(MIRROR, "main")).commit_id
            if head not in promoted_heads:
                await complete(dst, MIRROR, head, dst_store, "origin")
                promoted_heads.add(head)
            if len(promoted_heads) >= 3 and len(acked_a) >= 5:
                break
            await asyncio.sleep(0.05)
        assert len(promoted_heads) >= 3, "the mirror did not progress"

        # 2. region A's daemon killed (SIGKILL), region A cut off while the writer still writes
        os.killpg(a_daemon.pid, signal.SIGKILL)
        a_daemon.wait()
        await proxy.close()
        await asyncio.wait_for(task, 60)
        last_mirrored = (await dst.branch(MIRROR, "main")).commit_id

        # 3. promote on B without force: A does not answer
        status, promotion = await api("POST", f"{b_api}/promote", {})
        assert status == 200, promotion
        assert promotion["source_reachable"] is False and promotion["heads"]["branch:main"] == last_mirrored
        await complete(dst, MIRROR, last_mirrored, dst_store, "origin")
        acked_b = []
        for n in range(3):
            await Objects(dst).upload(MIRROR, "main", f"b/{n}", f"b{n}".encode() * 40)
            acked_b.append((await dst.commit(MIRROR, "main", committer="w", message=f"b{n}")).id)
        assert (await service.step()).mirrors == 0  # nothing mirrors into the promoted repository

        # 4. region A is back: fail back (through B's API), A's restarted daemon catches up
        proxy = await TcpProxy("127.0.0.1", a.port, port=proxy.port).start()
        status, back = await api("POST", f"{b_api}/failback", {"mode": "active"})
        assert status == 201, back
        unmirrored = [c for c in acked_a if c not in await history(dst, MIRROR, "main")]
        keeper = back["kept"].get("branch:main")
        if unmirrored:
            assert keeper is not None and keeper.startswith("failback-")
            assert set(unmirrored) <= await history(src, REPO, keeper)
        reverse = back["reverse_mirror"]["id"]
        a_again = await MirrorService.open(
            MirrorConfig.model_validate(config_dict(A, regions, db_path, "127.0.0.1:0")), serve_api=False
        )
        a_store = await a_registry.block_store("s3://drill-src")
        for _ in range(200):
            report = await a_again.step()
            if (await src.branch(REPO, "main")).commit_id == acked_b[-1]:
                break
            await asyncio.sleep(0.05)
        assert (await src.branch(REPO, "main")).commit_id == acked_b[-1], report.errors
        await complete(src, REPO, acked_b[-1], a_store, "origin")
        kept_too = await history(src, REPO, keeper) if keeper else set()
        assert set(acked_a) <= (await history(src, REPO, "main")) | kept_too  # nothing lost from A
        assert set(acked_b) <= await history(src, REPO, "main")  # nothing lost from B
        rev_api = f"http://127.0.0.1:{service.bound_port}{API}/{MIRROR}/mirrors/{reverse}"
        status, explained = await api("GET", f"{rev_api}/status")
        assert status == 200 and explained["caught_up"]
        assert keeper is None or keeper in explained["failback"]

        # the second promote returns writes to region A
        assert (await api("POST", f"{rev_api}/promote", {}))[0] == 409  # B answers and it runs
        assert (await api("PATCH", rev_api, {"paused": True}))[0] == 200
        status, final = await api("POST", f"{rev_api}/promote", {})
        assert status == 200 and final["source_reachable"] is True, final
        assert (await dst.repository(MIRROR)).read_only
        await Objects(src).upload(REPO, "main", "home", b"home")
        home = (await src.commit(REPO, "main", committer="w", message="home")).id
        assert acked_b[-1] in await history(src, REPO, home)
    finally:
        if a_daemon.poll() is None:
            os.killpg(a_daemon.pid, signal.SIGKILL)
            a_daemon.wait()
        if a_again is not None:
            await a_again.close()
        await service.close()
        await a_registry.close()
        await b_registry.close()
        await a_kvstore.close()
        await proxy.close()
