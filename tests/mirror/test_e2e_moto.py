"""The mirroring daemon end to end across two moto S3 servers standing for two AWS regions.

Region A (``us-east-1``) holds the source repository ``origin`` in ``s3://src-bucket/origin`` (its KV
store is DynamoDB on A's moto server, or a SQLite file to keep the faster tests fast); region B
(``eu-west-1``) holds the mirror ``origin-mirror`` in ``s3://dst-bucket/origin`` with a SQLite KV.
Nothing copies objects from A to B except :class:`~tests.mirror.replication.ReplicationSimulator`,
which runs as an asyncio task next to region B's daemon and delivers keys in random order, after
random delays, and drops some of them on purpose.

Region B's daemon is the real :class:`~lakefs_mirror.service.MirrorService` assembled from a
:class:`~lakefs_mirror.config.MirrorConfig`, driven in process one pass at a time
(``await service.step()``). After every pass the test reads the mirror branch head; whenever it moved,
the destination bucket is LISTED and every metarange, range and data object of the new head must be
there with the right size (:func:`~tests.mirror.replication.commit_keys`). A probe wrapped around the
engine's promotion makes the same check at the instant before the compare-and-swap, so a promotion
of an incomplete commit is caught even if the missing object arrives a moment later.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import random
import time
import urllib.parse
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from lakefs_core.block import S3Settings
from lakefs_core.block.aws_session import new_session
from lakefs_core.block.base import BlockStore
from lakefs_core.errors import NotFoundError
from lakefs_core.kv import open_kv
from lakefs_core.kv.base import KVStore
from lakefs_core.refs.model import Commit
from lakefs_core.repos.graveler import Graveler
from lakefs_core.repos.objects import Objects
from lakefs_core.repos.stores import StoreRegistry
from lakefs_mirror.config import MirrorConfig
from lakefs_mirror.db import MirrorStatus
from lakefs_mirror.service import MirrorService
from tests.mirror.replication import ReplicationSimulator, commit_keys, list_namespace, missing_keys
from tests.support.moto import ACCESS_KEY, SECRET_KEY, MotoServer
from tests.support.timing import scaled

log = logging.getLogger(__name__)

A, B = "us-east-1", "eu-west-1"
SRC_BUCKET, DST_BUCKET, PREFIX = "src-bucket", "dst-bucket", "origin"
SRC_NS, DST_NS = f"s3://{SRC_BUCKET}/{PREFIX}", f"s3://{DST_BUCKET}/{PREFIX}"
REPO, MIRROR = "origin", "origin-mirror"
API_KEY, API_SECRET = "AKIAE2EMIRROR", "e2e-mirror-secret"
API = "/service/replication/v1/repositories"


def basic_auth() -> str:
    return "Basic " + base64.b64encode(f"{API_KEY}:{API_SECRET}".encode()).decode()


def s3_settings(server: MotoServer) -> S3Settings:
    return S3Settings(
        region=server.region,
        endpoint_url=server.endpoint,
        access_key_id=ACCESS_KEY,
        secret_access_key=SECRET_KEY,
        max_attempts=8,
        retry_initial_backoff=0.05,
    )


def region_config(server: MotoServer, kv_url: str) -> dict[str, Any]:
    return {
        "kv_url": kv_url,
        "s3": {
            "endpoint_url": server.endpoint,
            "region": server.region,
            "credentials": {"source": "static", "access_key_id": ACCESS_KEY, "secret_access_key": SECRET_KEY},
        },
    }


def mirror_config(region: str, regions: dict[str, Any], db_path: Path, **extra: Any) -> MirrorConfig:
    return MirrorConfig.model_validate(
        {
            "region": region,
            "regions": regions,
            "mirrors_db_url": f"sqlite:///{db_path}",
            "listen": "127.0.0.1:0",
            "access_keys": [{"access_key_id": API_KEY, "secret_access_key": API_SECRET}],
            "poll_interval_seconds": 0.1,
            "negative_cooldown_seconds": 0,
            "active_copy_grace_seconds": 0,
            "lease_ttl_seconds": 30,
            "workers": 8,
            **extra,
        }
    )


async def create_bucket(server: MotoServer, bucket: str) -> None:
    async with new_session().client(
        "s3",
        endpoint_url=server.endpoint,
        region_name=server.region,
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET_KEY,
    ) as s3:
        if server.region == "us-east-1":
            await s3.create_bucket(Bucket=bucket)
        else:
            await s3.create_bucket(
                Bucket=bucket,
                CreateBucketConfiguration={"LocationConstraint": server.region},  # type: ignore[typeddict-item]
            )


@dataclass
class World:
    """Region A's source repository as a writer sees it, region B's daemon, and the checks."""

    src: Graveler
    service: MirrorService
    src_store: BlockStore
    dst_store: BlockStore
    mirror_id: str = ""
    heads: list[str] = field(default_factory=list)  # distinct mirror heads observed, in order
    probed: list[str] = field(default_factory=list)  # commits checked at the instant of promotion
    checks: int = 0
    errors: list[str] = field(default_factory=list)
    _keys: dict[str, dict[str, int | None]] = field(default_factory=dict)

    # -- the source workload --------------------------------------------------------------------

    async def write_commit(self, n: int, tag: str, *, overwrite: bool = False) -> str:
        """Upload ``n`` objects and commit; ``overwrite`` rewrites the same paths every time."""
        objects = Objects(self.src)
        for i in range(n):
            path = f"table/part-{i:03d}" if overwrite else f"{tag}/part-{i:03d}"
            await objects.upload(REPO, "main", path, f"{tag}:{i}:".encode() * (1 + i % 7))
        return (await self.src.commit(REPO, "main", committer="e2e", message=tag)).id

    async def source_head(self) -> str:
        return (await self.src.branch(REPO, "main")).commit_id

    # -- the mirror as the test observes it -------------------------------------------------------

    @property
    def dst(self) -> Graveler:
        return self.service.gravelers[B]

    async def mirror_head(self) -> str | None:
        try:
            return (await self.dst.branch(MIRROR, "main")).commit_id
        except NotFoundError:
            return None

    async def status(self) -> MirrorStatus:
        rows = {(s.kind, s.branch): s for s in await self.service.db.list_status(self.mirror_id)}
        return rows["branch", "main"]

    async def required(self, commit_id: str) -> dict[str, int | None]:
        if commit_id not in self._keys:
            self._keys[commit_id] = await commit_keys(self.src, REPO, commit_id)
        return self._keys[commit_id]

    async def assert_complete(self, commit_id: str, when: str) -> None:
        """THE invariant, from a fresh LIST of the destination bucket."""
        listing = await list_namespace(self.dst_store, PREFIX)
        missing = missing_keys(await self.required(commit_id), listing)
        self.checks += 1
        assert not missing, f"{when}: mirror head {commit_id[:12]} lacks {len(missing)} key(s): {missing[:5]}"

    async def observe(self) -> str | None:
        head = await self.mirror_head()
        if head is not None and (not self.heads or self.heads[-1] != head):
            await self.assert_complete(head, "after promotion")
            self.heads.append(head)
        return head

    def install_probe(self) -> None:
        """Check the candidate against a LIST of the destination right before every promotion."""
        engine = self.service.engine
        original = engine._promote

        async def probed(ctx: Any, kind: str, name: str, head: Commit, mirror_head: str | None) -> bool:
            await self.assert_complete(head.id, "at promotion")
            self.probed.append(head.id)
            return await original(ctx, kind, name, head, mirror_head)

        engine._promote = probed  # type: ignore[method-assign]

    async def run_engine(
        self,
        until: Callable[[], Awaitable[bool]] | None = None,
        *,
        passes: int | None = None,
        within: float = 20.0,
        interval: float = 0.05,
    ) -> int:
        """Run passes (checking every new head) until ``until()`` or for ``passes`` passes; ``within``
        bounds a hang, so it scales with the suite's time factor."""
        within = scaled(within)
        deadline = time.monotonic() + within
        done = 0
        while True:
            report = await self.service.step()
            assert report.active
            self.errors += report.errors
            done += 1
            await self.observe()
            if passes is not None and done >= passes:
                return done
            if until is not None and await until():
                return done
            if time.monotonic() > deadline:
                status = await self.status() if self.mirror_id else None
                raise AssertionError(f"not done after {done} passes in {within} s: {status}, {self.errors}")
            await asyncio.sleep(interval)

    def reached(self, commit_id: str) -> Callable[[], Awaitable[bool]]:
        async def check() -> bool:
            return await self.mirror_head() == commit_id

        return check

    def simulator(self, **kwargs: Any) -> ReplicationSimulator:
        return ReplicationSimulator(self.src_store, PREFIX, self.dst_store, PREFIX, **kwargs)

    async def add_mirror(self, mode: str = "native") -> str:
        mirror = await self.service.db.create_mirror(
            source_repo=REPO,
            source_region=A,
            name=MIRROR,
            region=B,
            storage_namespace=DST_NS,
            mode=mode,  # type: ignore[arg-type]
        )
        self.mirror_id = mirror.id
        return mirror.id

    async def assert_same_history(self) -> None:
        mirrored = [c.id async for c in self.dst.log(MIRROR, "main")]
        assert mirrored == [c.id async for c in self.src.log(REPO, "main")]


@asynccontextmanager
async def open_world(
    moto: Callable[[str], MotoServer],
    tmp_path: Path,
    *,
    dynamo: bool,
    serve_api: bool = False,
    **config: Any,
) -> AsyncIterator[tuple[World, dict[str, Any]]]:
    a, b = moto(A), moto(B)
    await create_bucket(a, SRC_BUCKET)
    await create_bucket(b, DST_BUCKET)
    if dynamo:
        src_kv_url = f"dynamodb://kvstore?region={A}&endpoint={urllib.parse.quote(a.endpoint, safe='')}"
    else:
        src_kv_url = f"sqlite:///{tmp_path / 'kv-a.sqlite3'}"
    regions = {
        A: region_config(a, src_kv_url),
        B: region_config(b, f"sqlite:///{tmp_path / 'kv-b.sqlite3'}"),
    }
    kvs: list[KVStore] = []
    registries: list[StoreRegistry] = []
    service: MirrorService | None = None
    try:
        kv = await open_kv(src_kv_url)
        kvs.append(kv)
        src_stores = StoreRegistry(s3=s3_settings(a))
        dst_stores = StoreRegistry(s3=s3_settings(b))
        registries += [src_stores, dst_stores]
        src = Graveler(kv, src_stores)
        await src.create_repository(REPO, SRC_NS)
        service = await MirrorService.open(
            mirror_config(B, regions, tmp_path / "mirrors.sqlite3", **config), serve_api=serve_api
        )
        world = World(
            src,
            service,
            await src_stores.block_store(f"s3://{SRC_BUCKET}"),
            await dst_stores.block_store(f"s3://{DST_BUCKET}"),
        )
        yield world, regions
    finally:
        if service is not None:
            await service.close()
        for registry in registries:
            await registry.close()
        for kv in kvs:
            await kv.close()


# -- (1) + (2): concurrent replication, an invariant checked at every promotion, promotion at the end ---


async def test_concurrent_replication_never_exposes_an_incomplete_commit(
    moto: Callable[[str], MotoServer], tmp_path: Path
) -> None:
    """DynamoDB source KV. Phase A: commits land while replication delivers their keys in random order;
    the mirror follows, every observed head (and every promotion, at its instant) being complete in
    a LIST of the destination. Phase B: two objects of the newest commit are dropped: the mirror must
    not promote it and reports two missing objects (status row and gauge); once they arrive it promotes."""
    async with open_world(moto, tmp_path, dynamo=True) as (w, _):
        await w.add_mirror()
        w.install_probe()
        started = time.monotonic()
        async with w.simulator(seed=11, max_delay=0.8, workers=6) as sim:

            async def writer() -> None:
                pauses = random.Random(1)
                for n in range(5):
                    await w.write_commit(5, f"a{n}")
                    await asyncio.sleep(pauses.uniform(0.2, 1.0))

            task = asyncio.create_task(writer())
            try:

                async def caught_up() -> bool:
                    return task.done() and sim.pending == 0 and await w.mirror_head() == await w.source_head()

                await w.run_engine(caught_up, within=40)
            finally:
                await task  # surfaces a writer failure (and never leaves the task behind)
            log.info(
                "phase A: %d heads observed, %d probed, %.1f s",
                len(w.heads),
                len(w.probed),
                time.monotonic() - started,
            )
            assert w.heads[-1] == await w.source_head()
            assert len(w.probed) == len(w.heads) - 1  # the root needs no promotion

            # Phase B: the newest commit loses two data objects in transit.
            sim.pause()
            await w.write_commit(5, "b0")
            head = await w.write_commit(5, "b1")
            await sim.scan()
            required = await w.required(head)
            candidates = sorted(k for k in required if k.startswith("data/") and k not in sim.delivered)
            dropped = sim.drop_keys(random.Random(5).sample(candidates, 2))
            assert len(dropped) == 2
            sim.resume()
            await sim.wait_idle()
            before = w.heads[-1]
            await w.run_engine(passes=3)
            assert await w.mirror_head() == before != head
            status = await w.status()
            assert status.candidate == head and status.source_head == head
            assert (status.missing_objects, status.missing_ranges) == (2, 0)
            labels = {"region": B, "mirror": MIRROR, "branch": "main"}  # mirrors labelled by name
            registry = w.service.metrics.registry
            assert registry.get_sample_value("lakefs_mirror_missing_objects", labels) == 2

            # (2): once everything has arrived, it promotes.
            assert sim.release() == 2
            await sim.wait_idle()
            await w.run_engine(w.reached(head), within=15)
        await w.assert_complete(head, "at the end")
        await w.assert_same_history()
        status = await w.status()
        assert status.candidate is None and status.missing_objects == 0 and status.mirror_head == head
        assert registry.get_sample_value("lakefs_mirror_missing_objects", labels) == 0
        assert w.errors == []
        log.info("done: %d heads, %d invariant checks, sim %s", len(w.heads), w.checks, sim.stats)


# -- (3): skipped commits do not block progress ---------------------------------------------------------


async def test_skipped_commits_do_not_block_progress(
    moto: Callable[[str], MotoServer], tmp_path: Path
) -> None:
    """Five commits in a row, each rewriting the same six paths. Replication delivers only the newest
    commit's content (every key only an older commit references is dropped): the mirror goes straight
    from its root to the newest commit, with the skipped commits' records copied but never a head."""
    async with open_world(moto, tmp_path, dynamo=False) as (w, _):
        await w.add_mirror()
        w.install_probe()
        await w.run_engine(passes=1)
        root = await w.mirror_head()
        assert root is not None and w.heads == [root]
        async with w.simulator(seed=3, max_delay=0.6) as sim:
            sim.pause()
            commits = []
            for n in range(5):
                commits.append(await w.write_commit(6, f"v{n}", overwrite=True))
                await w.run_engine(passes=1)  # the daemon keeps polling while the commits land
            assert await w.mirror_head() == root
            keys = [set(await w.required(c)) for c in commits]
            newest = keys[-1]
            older = set().union(*keys[:-1]) - newest
            assert older and all(k - newest for k in keys[:-1])
            await sim.scan()
            assert sim.drop_keys(older) == older
            sim.resume()
            await w.run_engine(w.reached(commits[-1]), within=20)
        assert w.heads == [root, commits[-1]]
        assert w.probed == [commits[-1]]
        listing = await list_namespace(w.dst_store, PREFIX)
        for skipped in commits[:-1]:
            assert missing_keys(await w.required(skipped), listing), "a skipped commit is incomplete there"
        await w.assert_same_history()  # the skipped commits' records are in the mirror's history
        status = await w.status()
        assert status.mirror_head == commits[-1] and status.candidate is None and status.lag_seconds == 0
        assert w.errors == []


# -- (4): dropped objects are reported in native mode and healed in active mode ----------------------------


async def test_native_mode_reports_dropped_objects_and_active_mode_heals_them(
    moto: Callable[[str], MotoServer], tmp_path: Path
) -> None:
    """Objects S3 never delivers: in ``native`` mode the status row (through region A's API) and the
    ``lakefs_mirror_missing_objects`` gauge (through region B's ``GET /metrics``) report them and the
    mirror stays put; switched to ``active`` mode (``PATCH`` on the API, grace 0) the daemon copies
    them itself, tables included, and promotes."""
    async with open_world(moto, tmp_path, dynamo=False, serve_api=True) as (w, regions):
        source_api = await MirrorService.open(mirror_config(A, regions, tmp_path / "mirrors.sqlite3"))
        try:
            async with aiohttp.ClientSession(headers={"Authorization": basic_auth()}) as http:
                api = f"http://127.0.0.1:{source_api.bound_port}{API}/{REPO}/mirrors"
                async with http.post(
                    api, json={"name": MIRROR, "region": B, "storage_namespace": DST_NS}
                ) as r:
                    assert r.status == 201, await r.text()
                    w.mirror_id = (await r.json())["id"]

                async def api_status() -> dict[str, Any]:
                    async with http.get(f"{api}/{w.mirror_id}/status") as r:
                        assert r.status == 200, await r.text()
                        rows = (await r.json())["results"]
                    return next(row for row in rows if row["kind"] == "branch" and row["name"] == "main")

                async def scraped_missing() -> float | None:
                    async with http.get(f"http://127.0.0.1:{w.service.bound_port}/metrics") as r:
                        assert r.status == 200
                        text = await r.text()
                    want = f'lakefs_mirror_missing_objects{{branch="main",mirror="{MIRROR}",region="{B}"}} '
                    lines = [line for line in text.splitlines() if line.startswith(want)]
                    return float(lines[0].split()[-1]) if lines else None

                w.install_probe()
                async with w.simulator(seed=4, max_delay=0.3) as sim:
                    # Native: three data objects of c1 never arrive.
                    sim.pause()
                    c1 = await w.write_commit(10, "c1")
                    await sim.scan()
                    data = sorted(k for k in await w.required(c1) if k.startswith("data/"))
                    lost = sim.drop_keys(random.Random(9).sample(data, 3))
                    sim.resume()
                    await sim.wait_idle()
                    await w.run_engine(passes=3)
                    root = w.heads[0]
                    assert w.heads == [root] and root != c1
                    row = await api_status()
                    assert row["candidate"] == c1 and row["mirror_head"] == root
                    assert row["missing_objects"] == 3 and row["missing_ranges"] == 0, row
                    assert await scraped_missing() == 3

                    # Native again: c2 loses its metarange and one object; nothing looks inside.
                    sim.pause()
                    c2 = await w.write_commit(4, "c2")
                    await sim.scan()
                    required = await w.required(c2)
                    c2_new = sorted(k for k in required if k not in sim.delivered and k not in sim.dropped)
                    c2_data = [k for k in c2_new if k.startswith("data/")]
                    c2_tables = [k for k in c2_new if k.startswith("_lakefs/")]
                    assert len(c2_tables) >= 2
                    lost |= sim.drop_keys([*c2_tables, c2_data[0]])
                    sim.resume()
                    await sim.wait_idle()
                    await w.run_engine(passes=2)
                    row = await api_status()
                    # c2 is incomplete too; the earlier candidate c1 stays the one awaited (it is
                    # promoted first once it arrives) and the status reports what it misses.
                    assert row["candidate"] == c1 and row["mirror_head"] == root
                    assert row["missing_objects"] == 3 and row["missing_ranges"] == 0, row
                    assert await w.mirror_head() == root
                    listing = await list_namespace(w.dst_store, PREFIX)
                    assert set(missing_keys(required, listing)) == lost

                    # Active, grace 0: the daemon copies what replication lost and promotes.
                    async with http.patch(f"{api}/{w.mirror_id}", json={"mode": "active"}) as r:
                        assert r.status == 200, await r.text()
                        assert (await r.json())["mode"] == "active"
                    await w.run_engine(w.reached(c2), within=15)
                listing = await list_namespace(w.dst_store, PREFIX)
                assert not missing_keys(required, listing) and lost <= set(listing)
                row = await api_status()
                assert row["mirror_head"] == c2 and row["candidate"] is None
                assert row["missing_objects"] == 0 and row["missing_ranges"] == 0
                assert await scraped_missing() == 0
                copied = w.service.metrics.registry.get_sample_value(
                    "lakefs_mirror_copy_bytes_total", {"region": B, "mirror": MIRROR}
                )
                assert copied is not None and copied > 0
                assert w.heads == [root, c2] and w.probed == [c2]
                assert w.errors == []
        finally:
            await source_api.close()


async def test_active_mode_grace_runs_from_when_the_candidate_was_first_incomplete(
    moto: Callable[[str], MotoServer], tmp_path: Path
) -> None:
    """No replication at all (active mode is for stores without it): nothing of the commit is in the
    destination, so the metarange, the ranges below it and the objects below those are discovered
    one level per round. Their grace runs from when the CANDIDATE was first found incomplete, not
    from when each key was first seen: the mirror promotes one grace period after that, not three
    (regression: each level used to wait a grace period of its own).

    The grace's clock is the engine's ``monotonic``, moved by the test alone: the passes' own time
    (seconds with moto on a loaded machine) never counts, so "one grace, not three" is one move of
    the clock, not a bound on wall time (the old ``elapsed < 3 * grace`` held only while the passes took
    under two graces: 4.4 s of passes were seen on a loaded machine)."""
    grace = 3.0
    now = [0.0]
    async with open_world(moto, tmp_path, dynamo=False, active_copy_grace_seconds=grace) as (w, _):
        w.service.engine.monotonic = lambda: now[0]
        await w.add_mirror(mode="active")
        await w.run_engine(passes=1)
        head = await w.write_commit(8, "g")
        w.install_probe()
        await w.run_engine(passes=3)  # within the grace: nothing copied, nothing promoted
        assert await w.mirror_head() != head and w.probed == []
        now[0] += grace  # one grace after the candidate was first found incomplete, and no more
        passes = await w.run_engine(w.reached(head))
        log.info("promoted %d passes after the grace (the clock moved once)", passes)
        await w.assert_complete(head, "at the end")
        assert w.errors == []
