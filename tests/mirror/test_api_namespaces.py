"""Mirror creation (POST) refuses destination namespaces and names that are not the mirror's alone.

The app runs over a real socket with a SQLite mirrors database and real Gravelers (memory KV) for
every region, as :class:`lakefs_mirror.service.MirrorService` wires it; the mirrors-database race
also runs on PostgreSQL.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from prometheus_client import CollectorRegistry
from sqlalchemy import text

from lakefs_core.errors import NotFoundError
from lakefs_core.kv.memory import MemoryKVStore
from lakefs_core.refs.model import Commit
from lakefs_core.repos.graveler import Graveler
from lakefs_core.repos.stores import StoreRegistry
from lakefs_mirror.api import create_app
from lakefs_mirror.db import FieldConflictError, Mirror, MirrorsDB
from tests.mirror.test_api import KEY, PREFIX, SECRET, THIS_REGION, basic, call, make_config, serve
from tests.support.pg import PgDatabase

DEST = "eu-west-1"
RACERS = 20


@dataclass
class Env:
    url: str
    db: MirrorsDB
    session: aiohttp.ClientSession
    gravelers: dict[str, Graveler]

    @property
    def mirrors(self) -> str:
        return f"{self.url}{PREFIX}/src-repo/mirrors"

    async def post(self, name: str, ns: str, region: str = DEST) -> tuple[int, Any]:
        body = {"name": name, "region": region, "storage_namespace": ns}
        status, payload, _ = await call(self.session, "POST", self.mirrors, body)
        return status, payload


async def create(
    g: Graveler, repo: str, ns: str, *, read_only: bool = False, root: Commit | None = None
) -> None:
    # No S3 server here: skip the _lakefs/dummy marker. The KV claim, which the API consults, is taken.
    # ``root``: seed with a source's root commit, as the engine creates a mirror repository.
    await g.create_repository(repo, ns, read_only=read_only, claim_namespace=False, initial_commit=root)


@pytest.fixture
async def env(tmp_path: Path) -> AsyncIterator[Env]:
    config = make_config(tmp_path / "mirrors.sqlite3")
    db = await MirrorsDB.open(config.mirrors_db_url.get_secret_value())
    gravelers = {region: Graveler(MemoryKVStore(), StoreRegistry()) for region in config.regions}
    await create(gravelers[THIS_REGION], "src-repo", "s3://src-bucket/src-repo")

    async def source_repo_exists(repo: str) -> bool:
        try:
            await gravelers[THIS_REGION].repository(repo)
        except NotFoundError:
            return False
        return True

    app: web.Application = create_app(
        config,
        db,
        source_repo_exists=source_repo_exists,
        metrics_registry=CollectorRegistry(),
        gravelers=gravelers,
    )
    try:
        async with (
            serve(app) as url,
            aiohttp.ClientSession(headers={"Authorization": basic(KEY, SECRET)}) as session,
        ):
            yield Env(url, db, session, gravelers)
    finally:
        await db.close()
        for g in gravelers.values():
            await g.stores.close()
            await g.kv.close()


async def test_namespace_of_another_repository_refused(env: Env) -> None:
    await create(env.gravelers[DEST], "taken", "s3://dst-bucket/taken")
    for ns in (
        "s3://dst-bucket/taken",
        "s3://dst-bucket/taken/data",
        "s3://dst-bucket/taken/_lakefs",
        "s3://dst-bucket",
    ):
        status, payload = await env.post("new-mirror", ns)
        assert (status, payload["field"]) == (409, "storage_namespace"), (ns, payload)
        assert "taken" in payload["message"]
    # in the source's own region, the source repository's namespace is taken too
    status, payload = await env.post("local-mirror", "s3://src-bucket/src-repo/copy", THIS_REGION)
    assert (status, payload["field"]) == (409, "storage_namespace"), payload
    assert await env.db.list_mirrors() == []
    status, _ = await env.post("new-mirror", "s3://dst-bucket/takenx")
    assert status == 201


async def test_namespace_of_another_mirror_refused(env: Env) -> None:
    status, _ = await env.post("first", "s3://mirrors-bucket/m")
    assert status == 201
    for ns, region in (
        ("s3://mirrors-bucket/m", DEST),
        ("s3://mirrors-bucket/m/", "ap-south-1"),
        ("s3://mirrors-bucket/m/inner", DEST),
        ("s3://mirrors-bucket", DEST),
    ):
        status, payload = await env.post("second", ns, region)
        assert (status, payload["field"]) == (409, "storage_namespace"), (ns, payload)
    assert [m.name for m in await env.db.list_mirrors()] == ["first"]
    status, _ = await env.post("second", "s3://mirrors-bucket/mm")
    assert status == 201


async def test_concurrent_posts_on_one_namespace_one_wins(env: Env) -> None:
    results = await asyncio.gather(*(env.post(f"racer-{i}", "s3://race-bucket/one") for i in range(RACERS)))
    statuses = sorted(status for status, _ in results)
    assert statuses == [201] + [409] * (RACERS - 1), results
    assert len(await env.db.list_mirrors()) == 1


async def test_memory_and_system_namespaces_refused(env: Env) -> None:
    status, payload = await env.post("mem-mirror", "mem://store/p")
    assert (status, payload["field"]) == (400, "storage_namespace"), payload
    assert "durable" in payload["message"]
    for ns in ("local:///etc", "local:///proc/self", "local:///tmp"):
        status, payload = await env.post("sys-mirror", ns)
        assert (status, payload["field"]) == (409, "storage_namespace"), (ns, payload)
    assert await env.db.list_mirrors() == []


async def test_name_of_a_non_mirror_repository_refused(env: Env) -> None:
    await create(env.gravelers[DEST], "plain", "s3://dst-bucket/plain")
    status, payload = await env.post("plain", "s3://dst-bucket/elsewhere")
    assert (status, payload["field"]) == (409, "name"), payload
    assert "not a read-only mirror" in payload["message"]
    # a read-only mirror repository left in place (its mirror record deleted) may be adopted again
    root = await env.gravelers[THIS_REGION].get_commit("src-repo", "main")
    await create(env.gravelers[DEST], "old-mirror", "s3://dst-bucket/old-mirror", read_only=True, root=root)
    status, payload = await env.post("old-mirror", "s3://dst-bucket/other-ns")
    assert (status, payload["field"]) == (409, "name"), payload
    status, payload = await env.post("old-mirror", "s3://dst-bucket/old-mirror")
    assert status == 201, payload
    assert [m.name for m in await env.db.list_mirrors()] == ["old-mirror"]


# -- the mirrors database alone, on SQLite and PostgreSQL -----------------------------------------------


@pytest.fixture(params=["sqlite", "postgres"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "postgres":
        pg: PgDatabase = request.getfixturevalue("pg_database")
        return pg.sqlalchemy_url
    return f"sqlite:///{tmp_path / 'mirrors.sqlite3'}"


@pytest.fixture
async def db(db_url: str) -> AsyncIterator[MirrorsDB]:
    store = await MirrorsDB.open(db_url)
    async with store._engine.begin() as conn:  # the PostgreSQL database is shared by the session
        for table in ("mirror_status", "leases", "mirrors"):
            await conn.execute(text(f"DELETE FROM {table}"))
    try:
        yield store
    finally:
        await store.close()


async def test_db_refuses_overlapping_namespaces_under_concurrency(db: MirrorsDB) -> None:
    base = f"s3://race-{uuid.uuid4().hex[:8]}"
    chain = [base + "".join(f"/n{j}" for j in range(i)) for i in range(RACERS)]  # pairwise nested

    async def create(i: int, ns: str) -> Mirror:
        return await db.create_mirror(
            source_repo="src", source_region="us", name=f"m-{i}", region="eu", storage_namespace=ns
        )

    results = await asyncio.gather(*(create(i, ns) for i, ns in enumerate(chain)), return_exceptions=True)
    wins = [r for r in results if isinstance(r, Mirror)]
    losses = [r for r in results if isinstance(r, FieldConflictError) and r.field == "storage_namespace"]
    assert len(wins) == 1 and len(losses) == RACERS - 1, results
    assert len(await db.list_mirrors()) == 1
