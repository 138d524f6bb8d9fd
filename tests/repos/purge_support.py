"""Real backends for the purge tests: SQLite KV + a local namespace, PostgreSQL KV + S3 (moto).

``open_backend(name, ...)`` gives a :class:`Backend`: a Graveler on that KV and store, a fresh
repository id (the PostgreSQL database is the session's), the namespace, its block store and a way
to ask whether an object is still stored.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from lakefs_core.block.base import BlockStore
from lakefs_core.kv import open_kv
from lakefs_core.kv.base import KVStore
from lakefs_core.repos.graveler import Graveler, StorageNamespace, StoreRegistry
from lakefs_core.repos.objects import Objects
from tests.block.conftest import create_bucket, s3_settings
from tests.repos.support import fast_settings
from tests.support.moto import MotoServer
from tests.support.pg import PgDatabase

BACKENDS = ["sqlite-local", "postgres-s3"]
BUCKET = "purge-tests"


@dataclass
class Backend:
    name: str
    kv_url: str
    kv: KVStore
    stores: StoreRegistry
    g: Graveler
    objects: Objects
    repo: str
    namespace: str

    @property
    def ns(self) -> StorageNamespace:
        return StorageNamespace.parse(self.namespace)

    async def store(self) -> BlockStore:
        return await self.g.namespace_store(self.ns)

    async def stored(self, address: str) -> bool:
        return await (await self.store()).exists(self.ns.key(address))

    async def close(self) -> None:
        await self.stores.close()
        await self.kv.close()


@dataclass(frozen=True)
class Spec:
    """Where a backend lives (resolved synchronously: the session's PostgreSQL fixture runs its own
    event loop, so it must be asked for outside a test's loop)."""

    name: str
    kv_url: str
    namespace: str
    repo: str
    s3: MotoServer | None = None


def spec_for(name: str, tmp_path: Path, request: pytest.FixtureRequest) -> Spec:
    repo = f"pr{uuid.uuid4().hex[:10]}"
    if name == "sqlite-local":
        return Spec(name, f"sqlite:///{tmp_path / 'kv.sqlite3'}", f"local://{tmp_path / 'ns'}", repo)
    if name == "postgres-s3":
        db: PgDatabase = request.getfixturevalue("pg_database")
        moto: Callable[[str], MotoServer] = request.getfixturevalue("moto")
        return Spec(name, db.url, f"s3://{BUCKET}/{repo}", repo, moto("us-east-1"))
    raise ValueError(name)


async def open_backend(spec: Spec) -> Backend:
    stores = StoreRegistry()
    if spec.s3 is not None:
        await create_bucket(spec.s3, BUCKET)
        stores = StoreRegistry(s3=s3_settings(spec.s3.endpoint))
    kv = await open_kv(spec.kv_url)
    g = Graveler(kv, stores, fast_settings())
    await g.create_repository(spec.repo, spec.namespace)
    return Backend(spec.name, spec.kv_url, kv, stores, g, Objects(g), spec.repo, spec.namespace)
