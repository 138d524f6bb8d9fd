"""SQL KV driver guards: what a failure in the middle of a statement turns into, on a real PostgreSQL.

A raw driver connection holds a row lock, so the store's statement waits on the server; the test
then ends that waiting backend from outside (``pg_terminate_backend``, ``pg_cancel_backend``) or
closes a deadlock cycle, and checks the error the caller gets: a write whose connection is lost has an
unknown outcome (:class:`TransientError`, never :class:`UnreachableError`, which would claim that
nothing happened); a cancelled statement or a deadlock victim is retryable; an operation that finds
every pooled connection busy for the pool timeout is retryable too. The one translation a real
server cannot be made to produce on demand (a connection-class SQLSTATE without a dropped socket) is
checked on a constructed driver error, as the translation table in ``test_open_kv.py`` does.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable

import asyncpg
import pytest

from lakefs_core.errors import LakeFSError, NotFoundError, TransientError, UnreachableError
from lakefs_core.kv import Expect, KVStore
from lakefs_core.kv.sql import SQLKVStore
from lakefs_core.kv.sqlite import SQLiteKVStore
from tests.support.pg import PgDatabase, drop_table

P = b"partition"


@pytest.fixture
async def pg_kv(pg_database: PgDatabase) -> AsyncIterator[tuple[SQLKVStore, asyncpg.Connection, str]]:
    """A store on its own table, a raw connection to the same database, and the table's name."""
    table = f"kv_guard_{uuid.uuid4().hex[:10]}"
    store = await SQLKVStore.open(pg_database.url, table=table)
    raw = await asyncpg.connect(pg_database.url)
    try:
        yield store, raw, table
    finally:
        await store.close()
        await raw.execute(f'DROP TABLE IF EXISTS "{table}"')
        await raw.close()


async def lock_rows(raw: asyncpg.Connection, table: str, *keys: bytes) -> asyncpg.transaction.Transaction:
    """Start a transaction on ``raw`` holding the row locks of ``keys`` (rows of partition P)."""
    tx = raw.transaction()
    await tx.start()
    for key in keys:
        await raw.execute(f'SELECT 1 FROM "{table}" WHERE partition_key = $1 AND key = $2 FOR UPDATE', P, key)
    return tx


async def waiting_backend(raw: asyncpg.Connection) -> int:
    """The pid of the (one) other backend of this database waiting for a lock."""
    for _ in range(500):
        pid = await raw.fetchval(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
            "AND pid <> pg_backend_pid() AND wait_event_type = 'Lock'"
        )
        if pid is not None:
            return int(pid)
        await asyncio.sleep(0.01)
    raise AssertionError("the store's statement never waited for the lock")


WRITES: dict[str, Callable[[SQLKVStore], Awaitable[object]]] = {
    "set": lambda kv: kv.set(P, b"k", b"new"),
    "set_if": lambda kv: kv.set_if(P, b"k", b"new", Expect.equals(b"old")),
    "set_many_then_get": lambda kv: kv.set_many_then_get([(P, b"k", b"new")], P, b"k"),
}


@pytest.mark.parametrize("op", sorted(WRITES))
async def test_write_losing_its_connection_is_transient_outcome_unknown(
    pg_kv: tuple[SQLKVStore, asyncpg.Connection, str], op: str
) -> None:
    kv, raw, table = pg_kv
    await kv.set(P, b"k", b"old")
    tx = await lock_rows(raw, table, b"k")
    task = asyncio.ensure_future(WRITES[op](kv))
    try:
        pid = await waiting_backend(raw)
        assert await raw.fetchval("SELECT pg_terminate_backend($1)", pid)
        with pytest.raises(TransientError) as info:
            await asyncio.wait_for(task, 30)
    finally:
        await tx.rollback()
    # Not "unreachable": the statement had reached the server, its outcome is unknown.
    assert type(info.value) is TransientError, repr(info.value)
    assert "outcome unknown" in str(info.value)
    assert info.value.retryable
    assert await kv.get(P, b"k") == b"old"  # the store carries on with a fresh connection


async def test_cancelled_statement_is_retryable(pg_kv: tuple[SQLKVStore, asyncpg.Connection, str]) -> None:
    """SQLSTATE 57014 (query_canceled: an operator's pg_cancel_backend, a statement timeout)."""
    kv, raw, table = pg_kv
    await kv.set(P, b"k", b"old")
    tx = await lock_rows(raw, table, b"k")
    task = asyncio.ensure_future(kv.set(P, b"k", b"new"))
    try:
        pid = await waiting_backend(raw)
        assert await raw.fetchval("SELECT pg_cancel_backend($1)", pid)
        with pytest.raises(LakeFSError) as info:
            await asyncio.wait_for(task, 30)
    finally:
        await tx.rollback()
    assert isinstance(info.value, TransientError) and info.value.retryable, repr(info.value)
    await kv.set(P, b"k", b"new")  # a retry succeeds
    assert await kv.get(P, b"k") == b"new"


async def test_deadlock_victim_is_retryable(pg_kv: tuple[SQLKVStore, asyncpg.Connection, str]) -> None:
    """SQLSTATE 40P01: the batch locks b"b", waits for b"a" held by the raw transaction, which then
    waits for b"b". The store's backend waited first, so its deadlock check (1 s) picks it."""
    kv, raw, table = pg_kv
    await kv.set_many([(P, b"a", b"0"), (P, b"b", b"0")])
    await raw.execute("SET deadlock_timeout = '20s'")  # the raw side never volunteers as the victim
    tx = await lock_rows(raw, table, b"a")
    task = asyncio.ensure_future(kv.set_many([(P, b"b", b"kv"), (P, b"a", b"kv")]))
    try:
        await waiting_backend(raw)
        await raw.execute(
            f'UPDATE "{table}" SET value = $1 WHERE partition_key = $2 AND key = $3', b"raw", P, b"b"
        )
        with pytest.raises(LakeFSError) as info:
            await asyncio.wait_for(task, 30)
    finally:
        await tx.rollback()
    assert isinstance(info.value, TransientError) and info.value.retryable, repr(info.value)
    assert "40P01" in repr(info.value.__cause__) or "deadlock" in str(info.value).lower()
    await kv.set_many([(P, b"b", b"kv"), (P, b"a", b"kv")])  # the retry goes through
    assert [await kv.get(P, k) for k in (b"a", b"b")] == [b"kv", b"kv"]


async def test_connection_class_sqlstate_is_a_lost_connection() -> None:
    """A 08xxx SQLSTATE is a lost connection: unreachable for a read, unknown outcome for a write
    (not a mere "temporarily refused"). On a store that never connects."""
    store = await SQLKVStore.open("postgresql://u@127.0.0.1:1/db", create=False)
    try:
        lost = asyncpg.exceptions.ConnectionFailureError("server closed the connection")
        assert lost.sqlstate == "08006"
        read = store._translate(lost, connecting=False, write=False, cas=False)
        assert type(read) is UnreachableError, repr(read)
        write = store._translate(lost, connecting=False, write=True, cas=True)
        assert type(write) is TransientError and "outcome unknown" in str(write), repr(write)
    finally:
        await store.close()


async def test_exhausted_pool_is_transient_not_unreachable(pg_database: PgDatabase) -> None:
    """Every pooled connection stays busy (a write waiting for a row lock) beyond the pool timeout:
    the database is up but busy, a retryable error that never waits longer than the timeout."""
    table = f"kv_guard_{uuid.uuid4().hex[:10]}"
    kv = await SQLKVStore.open(pg_database.url, table=table, pool_size=1, max_overflow=0, pool_timeout=0.3)
    raw = await asyncpg.connect(pg_database.url)
    try:
        await kv.set(P, b"k", b"old")
        tx = await lock_rows(raw, table, b"k")
        blocked = asyncio.ensure_future(kv.set(P, b"k", b"new"))
        try:
            await waiting_backend(raw)
            started = asyncio.get_running_loop().time()
            with pytest.raises(TransientError, match="no pooled connection") as info:
                await kv.get(P, b"k")
            assert asyncio.get_running_loop().time() - started < 5
            assert info.value.retryable
        finally:
            await tx.rollback()
        await asyncio.wait_for(blocked, 30)
        assert await kv.get(P, b"k") == b"new"  # the slot came free again
    finally:
        await kv.close()
        await raw.execute(f'DROP TABLE IF EXISTS "{table}"')
        await raw.close()


@pytest.fixture(params=["sqlite", "postgres"])
def any_sql_url(request: pytest.FixtureRequest, sqlite_url: str) -> str:
    """The test's SQLite file, or the session's PostgreSQL database (resolved synchronously)."""
    if request.param == "sqlite":
        return sqlite_url
    db: PgDatabase = request.getfixturevalue("pg_database")
    return db.url


@pytest.fixture
async def any_sql(any_sql_url: str) -> AsyncIterator[KVStore]:
    """A fresh SQL store: a new SQLite file, or its own table in the PostgreSQL database."""
    postgres = any_sql_url.startswith("postgresql://")
    table = f"kv_guard_{uuid.uuid4().hex[:10]}" if postgres else "kv"
    store: KVStore = (
        await SQLKVStore.open(any_sql_url, table=table) if postgres else await SQLiteKVStore.open(any_sql_url)
    )
    try:
        yield store
    finally:
        await store.close()
        if postgres:
            await drop_table(any_sql_url, table)


async def test_set_many_then_get_reads_the_key_of_its_own_partition(any_sql: KVStore) -> None:
    """The read after the batch is of (partition, key): the same key in another partition is another
    entry, never returned in its place."""
    kv = any_sql
    await kv.set(b"other", b"branch", b"someone else's")
    with pytest.raises(NotFoundError):
        await kv.set_many_then_get([(P, b"item", b"1")], b"refs", b"branch")
    assert await kv.get(P, b"item") == b"1"
    await kv.set(b"refs", b"branch", b"ours")
    assert await kv.set_many_then_get([(P, b"item", b"2")], b"refs", b"branch") == b"ours"
