"""``set_many_then_get`` on SQL takes the locks that make its read as good as a read after the batch
committed: another transaction's uncommitted change of the key is waited for, never read around.
Real servers; the other transaction is a raw driver connection holding its change uncommitted."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import asyncpg

from lakefs_core.kv import KVStore, open_kv
from tests.support.pg import PgDatabase

P = b"partition"
HOLD = 0.5  # seconds the other transaction keeps its change uncommitted


async def _waits_then_sees(kv: KVStore, commit_other: object) -> None:
    task = asyncio.create_task(kv.set_many_then_get([(P, b"item", b"x")], b"refs", b"ptr"))
    await asyncio.sleep(HOLD)
    assert not task.done(), "the read went around another transaction's uncommitted change"
    await commit_other()  # type: ignore[operator]
    assert await asyncio.wait_for(task, 30) == b"new"
    assert await kv.get(P, b"item") == b"x"


async def test_postgres_read_waits_for_an_uncommitted_update(pg_database: PgDatabase) -> None:
    url = pg_database.url
    kv = await open_kv(url)
    raw = await asyncpg.connect(url.replace("postgresql+asyncpg://", "postgresql://", 1))
    try:
        await kv.set(b"refs", b"ptr", b"old")
        tx = raw.transaction()
        await tx.start()
        await raw.execute(
            "UPDATE kv SET value = $1 WHERE partition_key = $2 AND key = $3", b"new", b"refs", b"ptr"
        )
        await _waits_then_sees(kv, tx.commit)
    finally:
        await raw.close()
        await kv.close()


async def test_sqlite_batch_waits_for_another_writer_then_reads_its_change(tmp_path: Path) -> None:
    path = tmp_path / "kv.sqlite3"
    kv = await open_kv(f"sqlite:///{path}")
    raw = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    try:
        await kv.set(b"refs", b"ptr", b"old")
        raw.execute("BEGIN IMMEDIATE")  # the database's write lock
        raw.execute("UPDATE kv SET value = ? WHERE partition_key = ? AND key = ?", (b"new", b"refs", b"ptr"))

        async def commit() -> None:
            raw.execute("COMMIT")

        await _waits_then_sees(kv, commit)
    finally:
        raw.close()
        await kv.close()
