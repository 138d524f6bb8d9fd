"""The SQLite store's own machinery (the KV contract itself is ``test_contract.py``'s): its pool of
one-thread connections, cancellation, closing, opening errors, and a table compatible with the files
SQLAlchemy created before. Real SQLite files; another writer is a raw ``sqlite3`` connection."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from pathlib import Path

import pytest

from lakefs_core.errors import TransientError, UnreachableError
from lakefs_core.kv.sqlite import SQLiteKVStore, _Statements, quote_identifier
from tests.support.timing import scaled

P = b"partition"


def sqlite_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("lakefs-sqlite")]


def wait_for_no_threads(before: list[threading.Thread]) -> list[threading.Thread]:
    deadline = time.monotonic() + scaled(30)  # bounds a thread that never ends: it returns at once
    while time.monotonic() < deadline:
        left = [t for t in sqlite_threads() if t not in before]
        if not left:
            return []
        time.sleep(0.02)
    return left


def test_the_table_is_the_one_sqlalchemy_created() -> None:
    """The DDL SQLAlchemy emitted for the KV table before this driver, byte for byte but for the
    quotes around the table's name (files made by earlier versions have the same table)."""
    from sqlalchemy import Column, LargeBinary, MetaData, Table
    from sqlalchemy.dialects import sqlite
    from sqlalchemy.schema import CreateTable

    for name in ("kv", "kv_other"):
        table = Table(
            name,
            MetaData(),
            Column("partition_key", LargeBinary, primary_key=True),
            Column("key", LargeBinary, primary_key=True),
            Column("value", LargeBinary, nullable=False),
        )
        ddl = str(CreateTable(table, if_not_exists=True).compile(dialect=sqlite.dialect()))
        assert _Statements.of(quote_identifier(name)).create.replace(f'"{name}"', name) == ddl


async def test_a_file_made_by_the_sqlalchemy_driver_opens(tmp_path: Path) -> None:
    path = tmp_path / "kv.sqlite3"
    with sqlite3.connect(path) as raw:
        raw.execute(
            'CREATE TABLE IF NOT EXISTS kv (partition_key BLOB NOT NULL, "key" BLOB NOT NULL, '
            'value BLOB NOT NULL, PRIMARY KEY (partition_key, "key"))'
        )
        raw.execute("INSERT INTO kv VALUES (?, ?, ?)", (P, b"k", b"from before"))
    raw.close()
    async with await SQLiteKVStore.open(f"sqlite:///{path}") as kv:
        assert await kv.get(P, b"k") == b"from before"
        await kv.set(P, b"k", b"now")
        assert [e.value async for e in kv.scan(P)] == [b"now"]


async def test_connections_are_pooled_and_bounded(tmp_path: Path) -> None:
    before = sqlite_threads()
    kv = await SQLiteKVStore.open(f"sqlite:///{tmp_path / 'kv.sqlite3'}", pool_size=3)
    try:
        for i in range(20):  # one after the other: one connection, reused
            await kv.set(P, b"k%d" % i, b"v")
        assert len([t for t in sqlite_threads() if t not in before]) == 1
        await asyncio.gather(*(kv.get(P, b"k%d" % i) for i in range(20)))
        assert 1 <= len([t for t in sqlite_threads() if t not in before]) <= 3
    finally:
        await kv.close()
    assert wait_for_no_threads(before) == []


async def test_a_cancelled_batch_leaves_no_transaction_open(tmp_path: Path) -> None:
    """A batch waiting for the write lock is cancelled: its call still runs to its end in the
    connection's thread (the whole batch or nothing), the connection is used again, nothing leaks."""
    path = tmp_path / "kv.sqlite3"
    before = sqlite_threads()
    kv = await SQLiteKVStore.open(f"sqlite:///{path}", busy_timeout=5.0, pool_size=1)
    holder = sqlite3.connect(path, isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")  # another writer holds the write lock
        batch = asyncio.create_task(kv.set_many([(P, b"a", b"1"), (P, b"b", b"2")]))
        await asyncio.sleep(0.2)
        batch.cancel()
        with pytest.raises(asyncio.CancelledError):
            await batch
        holder.execute("ROLLBACK")
        await kv.set(P, b"c", b"3")  # the pool's one connection: queued behind the cancelled call
        keys = [e.key async for e in kv.scan(P)]
        assert keys in ([b"c"], [b"a", b"b", b"c"])  # the batch landed whole, or not at all
        holder.execute("BEGIN IMMEDIATE")  # nobody else holds the lock: no transaction was left open
        holder.execute("ROLLBACK")
    finally:
        holder.close()
        await kv.close()
    assert wait_for_no_threads(before) == []


async def test_locked_beyond_the_busy_timeout_keeps_the_connection(tmp_path: Path) -> None:
    path = tmp_path / "kv.sqlite3"
    kv = await SQLiteKVStore.open(f"sqlite:///{path}", busy_timeout=0.1, pool_size=1)
    holder = sqlite3.connect(path, isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")
        with pytest.raises(TransientError, match="locked"):
            await kv.set_many([(P, b"a", b"1")])
        holder.execute("ROLLBACK")
        await kv.set_many([(P, b"a", b"1")])
        assert await kv.get(P, b"a") == b"1"
    finally:
        holder.close()
        await kv.close()


async def test_an_unopenable_database_is_unreachable(tmp_path: Path) -> None:
    path = tmp_path / "kv.sqlite3"
    path.mkdir()  # a directory where the file should be
    with pytest.raises(UnreachableError) as info:
        await SQLiteKVStore.open(f"sqlite:///{path}")
    assert info.value.retryable and "kv.sqlite3" in str(info.value)


async def test_operations_after_close_fail(tmp_path: Path) -> None:
    kv = await SQLiteKVStore.open(f"sqlite:///{tmp_path / 'kv.sqlite3'}")
    await kv.close()
    await kv.close()  # idempotent
    with pytest.raises(Exception, match="closed"):
        await kv.get(P, b"k")
