"""The shipped KVStore contract (:mod:`lakefs_core.testing.kv`), run against every driver of ours:
memory, SQLite, PostgreSQL, DynamoDB (moto).

Each test gets a fresh store: a new SQLite file, a truncated ``kv`` table in the session's PostgreSQL
database, a reset moto server. Memory, SQLite and PostgreSQL are opened through
:func:`lakefs_core.kv.open_kv` (so URL handling is exercised too); DynamoDB with
:meth:`~lakefs_core.kv.dynamodb.DynamoKVStore.open` on the URL's region and endpoint and one
``aioboto3`` session for the module: each open still makes a client of its own, without a new session
loading botocore's service models again (~0.3 s of CPU an open, a hundred opens;
``tests/kv/test_open_kv.py`` checks ``open_kv``'s DynamoDB URLs).
"""

from __future__ import annotations

from urllib.parse import parse_qsl, urlsplit

import aioboto3
import asyncpg
import pytest

from lakefs_core.kv import KVStore, open_kv
from lakefs_core.kv.dynamodb import DynamoKVStore
from lakefs_core.testing.kv import *  # noqa: F403 (the contract's tests and fixtures)
from lakefs_core.testing.kv import KVDriver
from tests.support.kv import KV_DRIVERS, kv_url_for

DRIVERS = KV_DRIVERS


@pytest.fixture(params=DRIVERS)
def kv_url(request: pytest.FixtureRequest, sqlite_url: str) -> str:
    """The URL of a fresh, empty store for the parametrised driver (resolved synchronously)."""
    return kv_url_for(request.param, request, sqlite_url)


@pytest.fixture(scope="module")
def dynamodb_session() -> aioboto3.Session:
    return aioboto3.Session()


@pytest.fixture
async def kv_driver(kv_url: str, dynamodb_session: aioboto3.Session) -> KVDriver:
    if kv_url.startswith("postgresql://"):  # the session's database: empty its table first
        await (await open_kv(kv_url)).close()  # the store creates its table
        conn = await asyncpg.connect(kv_url)
        try:
            await conn.execute("TRUNCATE kv")
        finally:
            await conn.close()

    async def open_store() -> KVStore:
        if kv_url.startswith("dynamodb://"):
            params = dict(parse_qsl(urlsplit(kv_url).query))
            return await DynamoKVStore.open(
                region=params["region"], endpoint_url=params["endpoint"], session=dynamodb_session
            )
        return await open_kv(kv_url)

    return KVDriver(open_store, persistent=kv_url != "memory://")
