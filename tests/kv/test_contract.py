"""The shipped KVStore contract (:mod:`lakefs_core.testing.kv`), run against every driver of ours:
memory, SQLite, PostgreSQL, DynamoDB (moto).

Each test gets a fresh store opened through :func:`lakefs_core.kv.open_kv` (so URL handling is
exercised too): a new SQLite file, a truncated ``kv`` table in the session's PostgreSQL database, a
reset moto server.
"""

from __future__ import annotations

import asyncpg
import pytest

from lakefs_core.kv import KVStore, open_kv
from lakefs_core.testing.kv import *  # noqa: F403 (the contract's tests and fixtures)
from lakefs_core.testing.kv import KVDriver
from tests.support.kv import KV_DRIVERS, kv_url_for

DRIVERS = KV_DRIVERS


@pytest.fixture(params=DRIVERS)
def kv_url(request: pytest.FixtureRequest, sqlite_url: str) -> str:
    """The URL of a fresh, empty store for the parametrised driver (resolved synchronously)."""
    return kv_url_for(request.param, request, sqlite_url)


@pytest.fixture
async def kv_driver(kv_url: str) -> KVDriver:
    if kv_url.startswith("postgresql://"):  # the session's database: empty its table first
        await (await open_kv(kv_url)).close()  # the store creates its table
        conn = await asyncpg.connect(kv_url)
        try:
            await conn.execute("TRUNCATE kv")
        finally:
            await conn.close()

    async def open_store() -> KVStore:
        return await open_kv(kv_url)

    return KVDriver(open_store, persistent=kv_url != "memory://")
