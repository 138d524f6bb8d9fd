"""The shipped lease contract (:mod:`lakefs_core.testing.lease`), run against every backend of ours.

SQLLease on SQLite and PostgreSQL (a fresh table per test); KVLease on every KV driver (memory,
SQLite, PostgreSQL, DynamoDB on moto). Each backend hands out contenders from two independent
connections ("daemons"), so races go through the real database or KV, not one client object.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from sqlalchemy import MetaData
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.schema import CreateTable, DropTable

from lakefs_core.errors import CorruptDataError
from lakefs_core.kv import KVStore, open_kv
from lakefs_core.refs import kvkeys
from lakefs_core.service.lease import KVLease, Lease, kv_lease
from lakefs_core.service.sql_lease import SQLLease, lease_table
from lakefs_core.sqlengine import create_sql_engine, normalize_sql_url
from lakefs_core.testing.lease import *  # noqa: F403 (the contract's tests)
from lakefs_core.testing.lease import LeaseBackend, kv_backend
from tests.support.kv import KV_DRIVERS, kv_url_for
from tests.support.pg import PgDatabase

BACKENDS = [*(f"sql-{d}" for d in ("sqlite", "postgres")), *(f"kv-{d}" for d in KV_DRIVERS)]


async def _sql_backend(url: str) -> AsyncIterator[LeaseBackend]:
    metadata = MetaData()
    table = lease_table(metadata, f"leases_{uuid.uuid4().hex[:12]}")
    engines: list[AsyncEngine] = [create_sql_engine(normalize_sql_url(url)) for _ in range(2)]
    async with engines[0].begin() as conn:
        await conn.execute(CreateTable(table))

    def make(
        name: str, holder: str, ttl: float = 10.0, *, daemon: int = 0, extra: Mapping[str, Any] | None = None
    ) -> Lease:
        lease = SQLLease(engines[daemon], table, name, holder, ttl, where="test lease database")
        if extra is not None:
            lease.extra = dict(extra)
        return lease

    try:
        yield LeaseBackend("sql", make)
    finally:
        async with engines[0].begin() as conn:
            await conn.execute(DropTable(table))
        for engine in engines:
            await engine.dispose()


async def _kv_backend(url: str) -> AsyncIterator[LeaseBackend]:
    async def open_store() -> KVStore:
        return await open_kv(url)

    # The memory driver is one process's store: both "daemons" share it.
    async for backend in kv_backend(open_store, shared=url.startswith("memory://")):
        if url.startswith("postgresql://"):
            conn = await asyncpg.connect(url)
            try:
                await conn.execute("TRUNCATE kv")
            finally:
                await conn.close()
        yield backend


@pytest.fixture(params=BACKENDS)
def backend_url(request: pytest.FixtureRequest, sqlite_url: str, tmp_path: Path) -> tuple[str, str]:
    """``(kind, url)`` of a fresh store for the parametrised backend (resolved synchronously)."""
    kind, _, driver = str(request.param).partition("-")
    if kind == "kv":
        return kind, kv_url_for(driver, request, sqlite_url)
    if driver == "postgres":
        pg: PgDatabase = request.getfixturevalue("pg_database")
        return kind, pg.url
    return kind, f"sqlite:///{tmp_path / 'leases.sqlite3'}"


@pytest.fixture
async def backend(backend_url: tuple[str, str]) -> AsyncIterator[LeaseBackend]:
    kind, url = backend_url
    factory = _sql_backend(url) if kind == "sql" else _kv_backend(url)
    async for b in factory:
        yield b


@pytest.mark.parametrize("backend_url", [b for b in BACKENDS if b.startswith("kv-")], indirect=True)
async def test_kv_record_that_does_not_parse_is_never_taken_over(backend: LeaseBackend) -> None:
    assert backend.kv is not None
    key = kvkeys.lease_key("junk")
    await backend.kv.set(kvkeys.LEASES_PARTITION, key, b"not json")
    lease = KVLease(backend.kv, kvkeys.LEASES_PARTITION, key, "me", 5.0)
    with pytest.raises(CorruptDataError):
        await lease.try_acquire(0.0)
    assert await backend.kv.get(kvkeys.LEASES_PARTITION, key) == b"not json"
    await backend.kv.set(kvkeys.LEASES_PARTITION, key, b'{"holder": "x", "expires_us": true}')
    with pytest.raises(CorruptDataError):
        await lease.current()


async def test_lease_lines_are_logged_on_change_only(caplog: pytest.LogCaptureFixture) -> None:
    # the GC daemon takes and releases gc/<repo> every pass: with its `announced` set only the first
    # acquisition, a hand-over and a loss are news (INFO); later passes' take-and-release are DEBUG
    caplog.set_level(logging.DEBUG, logger="lakefs_core.service.lease")
    kv = await open_kv("memory://")
    seen_a: set[str] = set()
    try:
        for _ in range(3):  # three passes of daemon a, each with a fresh lease object
            a = kv_lease(kv, "gc/r", "a", 5.0, announced=seen_a)
            assert await a.try_acquire(0.0)
            assert await a.release()
        a = kv_lease(kv, "gc/r", "a", 5.0, announced=seen_a)
        assert await a.try_acquire(0.0)
        assert await kv_lease(kv, "gc/r", "b", 5.0, announced=set()).try_acquire(10.0)  # a's expired
        assert not await a.renew(10.0)  # a learns it lost it
        a = kv_lease(kv, "gc/r", "a", 5.0, announced=seen_a)
        assert await a.try_acquire(20.0)  # after a loss, taking it again is news
    finally:
        await kv.close()
    info = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert info == [
        "lease gc/r acquired by a",
        "lease gc/r acquired by b (handed over from a)",
        "lease gc/r lost by a",
        "lease gc/r acquired by a (handed over from b)",
    ]
    debug = [r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG]
    assert (
        debug.count("lease gc/r acquired by a") == 3
        and debug.count("lease gc/r released by a (handed over)") == 3
    )
