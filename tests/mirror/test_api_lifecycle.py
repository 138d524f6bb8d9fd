"""Mirror creation checks, deletion and re-creation, and the blocking reason, on real components.

Two regions: the source region's API (real socket, SQLite KV per region, shared SQLite mirrors
database, the namespace probe through the regions' block stores as :class:`MirrorService` wires
it) and the destination region's real :class:`MirrorEngine`, with local-directory namespaces and a
copy step standing in for S3 Replication. The probe's S3 failure case runs against moto.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from prometheus_client import CollectorRegistry

from lakefs_core.block import copy_object
from lakefs_core.block.aws_session import new_session
from lakefs_core.block.base import ObjectInfo
from lakefs_core.errors import NotFoundError
from lakefs_core.kv import open_kv
from lakefs_core.namespace import StorageNamespace
from lakefs_core.repos.graveler import Graveler
from lakefs_core.repos.objects import Objects
from lakefs_core.repos.stores import StoreRegistry
from lakefs_mirror.admission import store_probe
from lakefs_mirror.api import create_app
from lakefs_mirror.config import MirrorConfig, load_mirror_config
from lakefs_mirror.db import MirrorsDB, MirrorStatus
from lakefs_mirror.engine import EngineSettings, MirrorEngine
from lakefs_mirror.metrics import MirrorMetrics
from lakefs_mirror.presence import PresenceCache
from tests.mirror.test_api import KEY, PREFIX, SECRET, basic, call, serve
from tests.support.moto import MotoServer

US, EU = "us-east-1", "eu-west-1"


def region_config(tmp: Path, region: str, eu_endpoint: str | None = None) -> MirrorConfig:
    env = {
        "LAKEFS_MIRROR__REGION": region,
        "LAKEFS_MIRROR__MIRRORS_DB_URL": f"sqlite:///{tmp / 'mirrors.sqlite3'}",
    }
    for name in (US, EU):
        env[f"LAKEFS_MIRROR__REGIONS__{name.upper()}__KV_URL"] = f"sqlite:///{tmp / f'kv-{name}.sqlite3'}"
        env[f"LAKEFS_MIRROR__REGIONS__{name.upper()}__LOCAL_ROOTS__0"] = str(tmp / name)
    if eu_endpoint is not None:
        env["LAKEFS_MIRROR__REGIONS__EU-WEST-1__S3__ENDPOINT_URL"] = eu_endpoint
        env["LAKEFS_MIRROR__REGIONS__EU-WEST-1__S3__REGION"] = EU
    env["LAKEFS_MIRROR__ACCESS_KEYS__0__ACCESS_KEY_ID"] = KEY
    env["LAKEFS_MIRROR__ACCESS_KEYS__0__SECRET_ACCESS_KEY"] = SECRET
    return load_mirror_config(None, env)


async def open_gravelers(config: MirrorConfig) -> dict[str, Graveler]:
    """Every region's Graveler as MirrorService builds them (KV + that region's store settings)."""
    out = {}
    for name, rc in config.regions.items():
        out[name] = Graveler(
            await open_kv(rc.kv_url.get_secret_value()), StoreRegistry(s3=config.s3_settings(name))
        )
    return out


@dataclass
class World:
    tmp: Path
    url: str
    http: aiohttp.ClientSession
    db: MirrorsDB
    us: dict[str, Graveler]  # the source daemon's view of both regions
    eu: dict[str, Graveler]  # the destination daemon's
    engine: MirrorEngine

    @property
    def mirrors(self) -> str:
        return f"{self.url}{PREFIX}/src-repo/mirrors"

    def ns(self, name: str) -> str:
        return f"local://{self.tmp / EU / name}"

    async def post(self, name: str, ns: str | None = None, repo: str = "src-repo") -> tuple[int, Any]:
        body = {"name": name, "region": EU, "storage_namespace": ns or self.ns(name)}
        status, payload, _ = await call(self.http, "POST", f"{self.url}{PREFIX}/{repo}/mirrors", body)
        return status, payload

    async def commit(self, tag: str, repo: str = "src-repo") -> str:
        g = self.us[US]
        await Objects(g).upload(repo, "main", f"{tag}/part-0", tag.encode())
        return (await g.commit(repo, "main", committer="t", message=tag)).id

    async def replicate(self, name: str, repo: str = "src-repo") -> None:
        """S3 Replication's part: copy what the source namespace has to the mirror's namespace."""
        src_ns = StorageNamespace(f"local://{self.tmp / US / repo}")
        dst_ns = StorageNamespace(self.ns(name))
        src = await self.us[US].stores.namespace_store(src_ns)
        dst = await self.eu[EU].stores.namespace_store(dst_ns)
        async for obj in src.list(""):
            if isinstance(obj, ObjectInfo) and not await dst.exists(obj.key):
                await copy_object(src, obj.key, dst, obj.key)

    async def mirror_head(self, name: str) -> str:
        return (await self.eu[EU].branch(name, "main")).commit_id


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    us_config = region_config(tmp_path, US)
    db = await MirrorsDB.open(us_config.mirrors_db_url.get_secret_value())
    us, eu = await open_gravelers(us_config), await open_gravelers(region_config(tmp_path, EU))
    for repo in ("src-repo", "other-src"):
        await us[US].create_repository(repo, f"local://{tmp_path / US / repo}")

    async def exists(repo: str) -> bool:
        try:
            await us[US].repository(repo)
        except NotFoundError:
            return False
        return True

    app = create_app(
        us_config,
        db,
        source_repo_exists=exists,
        metrics_registry=CollectorRegistry(),
        gravelers=us,
        namespace_probe=store_probe(us),
    )
    presence = await PresenceCache.open(tmp_path / "presence.sqlite3", negative_cooldown=0)
    engine = MirrorEngine(
        region=EU,
        gravelers=eu,
        db=db,
        presence=presence,
        metrics=MirrorMetrics(region=EU),
        settings=EngineSettings(),
        holder="eu-daemon",
    )
    try:
        async with (
            serve(app) as url,
            aiohttp.ClientSession(headers={"Authorization": basic(KEY, SECRET)}) as http,
        ):
            yield World(tmp_path, url, http, db, us, eu, engine)
    finally:
        await presence.close()
        await db.close()
        for g in (*us.values(), *eu.values()):
            await g.stores.close()
            await g.kv.close()


async def test_delete_then_recreate_adopts_the_mirror_repository(world: World) -> None:
    first = await world.commit("one")
    status, created = await world.post("mirror-repo")
    assert status == 201, created
    await world.replicate("mirror-repo")
    await world.engine.step()
    assert await world.mirror_head("mirror-repo") == first

    status, _, _ = await call(world.http, "DELETE", f"{world.mirrors}/{created['id']}")
    assert status == 204
    # the mirror repository stays, read-only, with its history
    leftover = await world.eu[EU].repository("mirror-repo")
    assert leftover.read_only and await world.mirror_head("mirror-repo") == first

    # another name, namespace or source cannot take the leftover over: 409 saying what to do
    status, payload = await world.post("mirror-repo", ns=world.ns("elsewhere"))
    assert (status, payload["field"]) == (409, "name"), payload
    assert "lakefs-core repo delete lakefs://mirror-repo" in payload["message"]
    await world.commit("other", repo="other-src")
    status, payload = await world.post("mirror-repo", repo="other-src")
    assert (status, payload["field"]) == (409, "name"), payload
    assert "another source repository" in payload["message"]
    assert "lakefs-core repo delete lakefs://mirror-repo" in payload["message"]

    # the same source, name and namespace adopt it: the mirror continues from the existing heads
    second = await world.commit("two")
    status, again = await world.post("mirror-repo")
    assert status == 201, again
    await world.replicate("mirror-repo")
    await world.engine.step()
    assert await world.mirror_head("mirror-repo") == second
    commit = await world.eu[EU].get_commit("mirror-repo", second)
    assert commit.parents == (first,)  # the history continued, nothing was rewritten


async def test_creation_checks_the_source_and_probes_the_namespace(world: World) -> None:
    status, payload = await world.post("mirror-repo", repo="no-such-repo")
    assert status == 404 and "no-such-repo" in payload["message"]
    # a namespace below a regular file is refused before any probe (its real path cannot exist)
    blocker = world.tmp / EU / "blocker"
    blocker.parent.mkdir(parents=True, exist_ok=True)
    blocker.write_text("not a directory")
    status, payload = await world.post("mirror-repo", ns=f"local://{blocker}/ns")
    assert (status, payload["field"]) == (400, "storage_namespace"), payload
    assert "lies below a file" in payload["message"]
    # a namespace the probe cannot write to (its _lakefs/ is a regular file)
    unwritable = world.tmp / EU / "unwritable"
    unwritable.mkdir(parents=True)
    (unwritable / "_lakefs").write_text("not a directory")
    status, payload = await world.post("mirror-repo", ns=f"local://{unwritable}")
    assert (status, payload["field"]) == (422, "storage_namespace"), payload
    assert "_lakefs/probe-" in payload["message"]
    assert await world.db.list_mirrors() == []
    # a usable namespace: the probe leaves nothing behind
    status, payload = await world.post("mirror-repo")
    assert status == 201, payload
    leftovers = [p for p in (world.tmp / EU / "mirror-repo").rglob("*") if "probe-" in p.name]
    assert leftovers == []


async def test_probe_of_a_missing_bucket_is_422(moto: Callable[[str], MotoServer], tmp_path: Path) -> None:
    server = moto(EU)
    config = region_config(tmp_path, US, eu_endpoint=server.endpoint)
    db = await MirrorsDB.open(config.mirrors_db_url.get_secret_value())
    gravelers = await open_gravelers(config)
    await gravelers[US].create_repository("src-repo", f"local://{tmp_path / US / 'src-repo'}")

    async def exists(repo: str) -> bool:
        return repo == "src-repo"

    async with new_session().client("s3", **server.client_kwargs()) as s3:
        await s3.create_bucket(Bucket="eu-mirrors", CreateBucketConfiguration={"LocationConstraint": EU})
    app = create_app(
        config,
        db,
        source_repo_exists=exists,
        metrics_registry=CollectorRegistry(),
        gravelers=gravelers,
        namespace_probe=store_probe(gravelers),
    )
    try:
        async with (
            serve(app) as url,
            aiohttp.ClientSession(headers={"Authorization": basic(KEY, SECRET)}) as http,
        ):
            mirrors = f"{url}{PREFIX}/src-repo/mirrors"
            body = {"name": "mirror-repo", "region": EU, "storage_namespace": "s3://no-such-bucket/m"}
            status, payload, _ = await call(http, "POST", mirrors, body)
            assert (status, payload["field"]) == (422, "storage_namespace"), payload
            body["storage_namespace"] = "s3://eu-mirrors/m"
            status, payload, _ = await call(http, "POST", mirrors, body)
            assert status == 201, payload
        async with new_session().client("s3", **server.client_kwargs()) as s3:
            listed = await s3.list_objects_v2(Bucket="eu-mirrors")
            assert listed.get("KeyCount", 0) == 0  # the probe object was deleted
    finally:
        await db.close()
        for g in gravelers.values():
            await g.stores.close()
            await g.kv.close()


async def test_status_says_why_a_mirror_is_blocked(world: World) -> None:
    status, created = await world.post("mirror-repo")
    assert status == 201
    url = f"{world.mirrors}/{created['id']}/status"

    async def blocked() -> tuple[str | None, list[str | None]]:
        code, payload, _ = await call(world.http, "GET", url)
        assert code == 200
        return payload["blocked_reason"], [r["blocked_reason"] for r in payload["results"]]

    mirror_reason, _ = await blocked()
    assert mirror_reason is not None and f"no daemon of region {EU!r} has taken its lease" in mirror_reason
    await world.db.try_acquire(EU, "eu-old", 30, time.time() - 120)  # a lease that lapsed
    mirror_reason, _ = await blocked()
    assert mirror_reason is not None and "eu-old" in mirror_reason and "expire" in mirror_reason
    await world.db.try_acquire(EU, "eu-daemon", 60)
    head, older = "a" * 64, "b" * 64
    await world.db.upsert_status(
        MirrorStatus(
            created["id"],
            "branch",
            "main",
            source_head=head,
            mirror_head=older,
            candidate=head,
            missing_objects=3,
            missing_ranges=1,
        )
    )
    await world.db.upsert_status(MirrorStatus(created["id"], "branch", "dev", last_error="AccessDenied on x"))
    await world.db.upsert_status(MirrorStatus(created["id"], "tag", "v1", source_head=head, mirror_head=head))
    mirror_reason, rows = await blocked()
    assert mirror_reason is None
    assert rows[0] == "last error: AccessDenied on x"  # dev (rows come sorted)
    assert rows[1] is not None and "waiting for 3 object(s) and 1 range(s)" in rows[1]
    assert rows[2] is None
    await call(world.http, "PATCH", f"{world.mirrors}/{created['id']}", {"paused": True})
    mirror_reason, rows = await blocked()
    assert mirror_reason is not None and mirror_reason.startswith("paused")
    assert all(r == mirror_reason for r in rows)
