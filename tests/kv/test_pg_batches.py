"""PostgreSQL ``set_many``. A batch of at least ``INSERT_FIRST_MIN`` items is first streamed into one
binary ``COPY`` as it is taken ("stream"): one statement, or one transaction with the items of
partitions on an upsert streak held back and upserted after it. When that COPY meets an existing
(or repeated) key, nothing of it stays and the batch is written partition by partition in one
transaction: at least ``INSERT_FIRST_MIN`` items of a partition first by binary ``COPY``, and,
when that meets an existing key, the transaction again with that partition's items upserted; its
items in the next ``UPSERT_STREAK`` batches then go straight to the upsert. Whatever the path, a
batch is atomic and each key ends with its value from the batch, and the driver's errors are the
store's. Real server; the paths taken are recorded from the driver's statements and COPY calls,
other writers are raw asyncpg connections, and lost connections are real (``pg_terminate_backend``).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest

from lakefs_core.errors import ConflictError, TransientError
from lakefs_core.kv import sql as sql_module
from lakefs_core.kv.base import KVItem
from lakefs_core.kv.sql import INSERT_FIRST_MIN, UPSERT_STREAK, SQLKVStore
from tests.support.pg import PgDatabase

N = INSERT_FIRST_MIN + 6


class Recorded:
    """How the store writes batches: "stream" (a streamed COPY, attempted), "copy" (the driver's
    COPY of a checked partition, attempted) or "upsert"."""

    def __init__(self, kv: SQLKVStore, monkeypatch: pytest.MonkeyPatch) -> None:
        self.kinds: list[str] = []
        execute = asyncpg.Connection.execute

        async def executed(conn: asyncpg.Connection, statement: str, *args: Any, **kwargs: Any) -> Any:
            if "unnest" in statement:
                self.kinds.append("upsert" if "ON CONFLICT" in statement else "plain")
            return await execute(conn, statement, *args, **kwargs)

        monkeypatch.setattr(asyncpg.Connection, "execute", executed)
        copy = asyncpg.Connection.copy_records_to_table

        async def copied(conn: asyncpg.Connection, *args: Any, **kwargs: Any) -> Any:
            self.kinds.append("copy")
            return await copy(conn, *args, **kwargs)

        monkeypatch.setattr(asyncpg.Connection, "copy_records_to_table", copied)
        stream = asyncpg.Connection.copy_to_table

        async def streamed(conn: asyncpg.Connection, *args: Any, **kwargs: Any) -> Any:
            self.kinds.append("stream")
            return await stream(conn, *args, **kwargs)

        monkeypatch.setattr(asyncpg.Connection, "copy_to_table", streamed)

    def take(self) -> list[str]:
        kinds, self.kinds = self.kinds, []
        return kinds


@pytest.fixture
async def kv(pg_database: PgDatabase) -> AsyncIterator[SQLKVStore]:
    store = await SQLKVStore.open(pg_database.url)
    try:
        yield store
    finally:
        await store.close()


@pytest.fixture
async def raw(pg_database: PgDatabase) -> AsyncIterator[asyncpg.Connection]:
    conn = await asyncpg.connect(pg_database.url.replace("postgresql+asyncpg://", "postgresql://", 1))
    try:
        yield conn
    finally:
        await conn.close()


def partition() -> bytes:
    return b"p-" + uuid.uuid4().hex.encode()


def batch(p: bytes, n: int, tag: bytes, start: int = 0) -> list[KVItem]:
    return [(p, b"k%04d" % i, tag + b"%d" % i) for i in range(start, start + n)]


async def contents(kv: SQLKVStore, p: bytes) -> dict[bytes, bytes]:
    return {e.key: e.value async for e in kv.scan(p)}


async def test_new_keys_take_one_streamed_copy(kv: SQLKVStore, monkeypatch: pytest.MonkeyPatch) -> None:
    seen, p = Recorded(kv, monkeypatch), partition()
    await kv.set_many(batch(p, N, b"a"))
    assert seen.take() == ["stream"]
    assert await kv.set_many_then_get(batch(p, N, b"b", start=N), p, b"k0000") == b"a0"
    assert seen.take() == ["stream"]
    assert await contents(kv, p) == dict((k, v) for _, k, v in batch(p, N, b"a") + batch(p, N, b"b", start=N))


async def test_small_batches_always_upsert(kv: SQLKVStore, monkeypatch: pytest.MonkeyPatch) -> None:
    seen, p = Recorded(kv, monkeypatch), partition()
    await kv.set_many(batch(p, INSERT_FIRST_MIN - 1, b"a"))
    assert seen.take() == ["upsert"]


@pytest.mark.parametrize("where", ["first", "last"])
async def test_an_existing_key_sends_the_batch_again_as_upsert(
    kv: SQLKVStore, where: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen, p = Recorded(kv, monkeypatch), partition()
    existing = 0 if where == "first" else N - 1
    await kv.set(p, b"k%04d" % existing, b"old")
    await kv.set(p, b"other", b"kept")
    items = batch(p, N, b"new")
    items.append((p, b"k0003", b"repeat"))  # a key given twice keeps its last value
    assert await kv.set_many_then_get(items, p, b"other") == b"kept"
    assert seen.take() == ["stream", "copy", "upsert"]
    expected = {k: v for _, k, v in items} | {b"other": b"kept"}
    assert await contents(kv, p) == expected


async def test_after_a_conflict_a_streak_of_batches_skips_the_copy(
    kv: SQLKVStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen, p = Recorded(kv, monkeypatch), partition()
    await kv.set_many(batch(p, N, b"a"))
    await kv.set_many(batch(p, N, b"b"))  # every key exists
    assert seen.take() == ["stream", "stream", "copy", "upsert"]
    for i in range(UPSERT_STREAK):
        await kv.set_many(batch(p, N, b"c", start=(i + 2) * N))
    await kv.set_many(batch(p, 1, b"small", start=10**6))  # small batches do not count
    assert seen.take() == ["upsert"] * (UPSERT_STREAK + 1)
    await kv.set_many(batch(p, N, b"d", start=(UPSERT_STREAK + 2) * N))
    assert seen.take() == ["stream"]
    assert (await contents(kv, p))[b"k0000"] == b"b0"


async def test_each_partition_of_a_batch_takes_its_own_path(
    kv: SQLKVStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """New keys of one partition go by COPY while the same batch overwrites keys of another (an
    upload's staging entries and the journal intents it settles); only the overwriting partition
    then skips the COPY."""
    seen, fresh, settled = Recorded(kv, monkeypatch), partition(), partition()
    await kv.set_many(batch(settled, N, b"pending"))
    assert seen.take() == ["stream"]
    await kv.set_many(batch(fresh, N, b"a") + batch(settled, N, b"stored"))
    # the stream met a key; by partition: fresh copied, settled's COPY met a key; again: fresh
    # copied, settled upserted
    assert seen.take() == ["stream", "copy", "copy", "copy", "upsert"]
    await kv.set_many(batch(fresh, N, b"b", start=N) + batch(settled, N, b"again"))
    # fresh streamed, settled held back and upserted after it, in one transaction
    assert seen.take() == ["stream", "upsert"]  # the streak is the settled partition's only
    assert await contents(kv, settled) == {k: v for _, k, v in batch(settled, N, b"again")}
    assert await contents(kv, fresh) == {
        k: v for _, k, v in batch(fresh, N, b"a") + batch(fresh, N, b"b", start=N)
    }


async def test_a_failing_partition_undoes_the_copied_ones(
    kv: SQLKVStore, raw: asyncpg.Connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Written partition by partition, the batch is one transaction: a CHECK violation in its
    second partition leaves nothing of the first partition's COPY. (A streamed batch's COPY
    checks every row before it inserts any, so it meets the CHECK violation first: the partition
    path is driven directly.)"""
    seen, first, second = Recorded(kv, monkeypatch), partition(), partition()
    hex_p = second.hex()
    await raw.execute(
        f"ALTER TABLE kv ADD CONSTRAINT short_{hex_p[-12:]} "
        f"CHECK (partition_key <> '\\x{hex_p}'::bytea OR length(value) < 8) NOT VALID"
    )
    try:
        with pytest.raises(ConflictError):
            items = [*batch(first, N, b"v"), *batch(second, N, b"v"), (second, b"long", b"x" * 20)]
            await kv._write_batch(items, None)
        assert seen.take() == ["copy", "copy"]
        assert await contents(kv, first) == {} and await contents(kv, second) == {}
    finally:
        await raw.execute(f"ALTER TABLE kv DROP CONSTRAINT short_{hex_p[-12:]}")


async def test_other_integrity_errors_are_not_retried(
    kv: SQLKVStore, raw: asyncpg.Connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen, p = Recorded(kv, monkeypatch), partition()
    hex_p = p.hex()
    await raw.execute(
        f"ALTER TABLE kv ADD CONSTRAINT short_{hex_p[-12:]} "
        f"CHECK (partition_key <> '\\x{hex_p}'::bytea OR length(value) < 8) NOT VALID"
    )
    try:
        items = batch(p, N, b"v")
        items.append((p, b"long", b"x" * 20))
        with pytest.raises(ConflictError):
            await kv.set_many(items)
        assert seen.take() == ["stream"]  # a CHECK violation is not an existing key: no other way
        assert await contents(kv, p) == {}
    finally:
        await raw.execute(f"ALTER TABLE kv DROP CONSTRAINT short_{hex_p[-12:]}")


async def test_an_uncommitted_insert_of_a_key_is_waited_for(
    kv: SQLKVStore, raw: asyncpg.Connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another transaction holds a new row of one of the batch's keys: the batch waits for it and
    ends with its own values whether the other commits (the COPY fails, the upsert wins) or rolls
    back (the COPY goes through)."""
    for outcome in ("commit", "rollback"):
        seen, p = Recorded(kv, monkeypatch), partition()
        tx = raw.transaction()
        await tx.start()
        await raw.execute("INSERT INTO kv VALUES ($1, $2, $3)", p, b"k0005", b"theirs")
        task = asyncio.create_task(kv.set_many(batch(p, N, b"ours")))
        await asyncio.sleep(0.3)
        assert not task.done(), "the batch went around an uncommitted row of its key"
        await (tx.commit() if outcome == "commit" else tx.rollback())
        await asyncio.wait_for(task, 30)
        assert seen.take() == (["stream", "copy", "upsert"] if outcome == "commit" else ["stream"])
        assert await contents(kv, p) == {k: v for _, k, v in batch(p, N, b"ours")}


async def test_racing_batches_each_land_whole(pg_database: PgDatabase) -> None:
    """Writers of overlapping batches (same key order) through separate stores: every round ends
    with all keys from one writer, as some serial order of the atomic batches would leave them."""
    stores = [await SQLKVStore.open(pg_database.url) for _ in range(3)]
    try:
        for _ in range(5):
            p = partition()
            await asyncio.gather(*(s.set_many(batch(p, N, b"w%d-" % i)) for i, s in enumerate(stores)))
            values = await contents(stores[0], p)
            assert len(values) == N
            writers = {v.split(b"-")[0] for v in values.values()}
            assert len(writers) == 1, writers
    finally:
        for s in stores:
            await s.close()


async def test_the_read_after_a_streamed_copy_waits_for_an_uncommitted_update(
    kv: SQLKVStore, raw: asyncpg.Connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen, p, refs = Recorded(kv, monkeypatch), partition(), partition()
    await kv.set(refs, b"ptr", b"old")
    tx = raw.transaction()
    await tx.start()
    await raw.execute("UPDATE kv SET value = $1 WHERE partition_key = $2 AND key = $3", b"new", refs, b"ptr")
    task = asyncio.create_task(kv.set_many_then_get(batch(p, N, b"v"), refs, b"ptr"))
    await asyncio.sleep(0.3)
    assert not task.done(), "the read went around another transaction's uncommitted change"
    await tx.commit()
    assert await asyncio.wait_for(task, 30) == b"new"
    assert seen.take() == ["stream"] and len(await contents(kv, p)) == N


async def test_held_back_items_share_the_copys_transaction(
    kv: SQLKVStore, raw: asyncpg.Connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Items of a partition on an upsert streak, anywhere in a streamed batch, are held back and
    upserted after the COPY in its transaction, whose read is ``FOR SHARE``: it waits for another
    transaction's uncommitted change of the key. A failing held-back item undoes the COPY."""
    seen, p, streak, refs = Recorded(kv, monkeypatch), partition(), partition(), partition()
    await kv.set_many(batch(streak, 3, b"old"))
    kv._met_existing(streak)
    await kv.set(refs, b"ptr", b"old")
    seen.take()
    tx = raw.transaction()
    await tx.start()
    await raw.execute("UPDATE kv SET value = $1 WHERE partition_key = $2 AND key = $3", b"new", refs, b"ptr")
    items = (
        batch(p, N, b"v")
        + batch(streak, 3, b"mid")
        + batch(p, 2, b"v", start=N)
        + [(streak, b"k0000", b"last")]
    )
    task = asyncio.create_task(kv.set_many_then_get(items, refs, b"ptr"))
    await asyncio.sleep(0.3)
    assert not task.done(), "the read went around another transaction's uncommitted change"
    await tx.commit()
    assert await asyncio.wait_for(task, 30) == b"new"
    assert seen.take() == ["stream", "upsert"]
    assert await contents(kv, streak) == {b"k0000": b"last", b"k0001": b"mid1", b"k0002": b"mid2"}
    assert len(await contents(kv, p)) == N + 2
    assert kv._upsert_streaks[streak] == UPSERT_STREAK  # 3 items: a small part does not count

    hex_p = streak.hex()
    await raw.execute(
        f"ALTER TABLE kv ADD CONSTRAINT short_{hex_p[-12:]} "
        f"CHECK (partition_key <> '\\x{hex_p}'::bytea OR length(value) < 8) NOT VALID"
    )
    try:
        fresh = partition()
        with pytest.raises(ConflictError):
            await kv.set_many([*batch(fresh, N, b"v"), (streak, b"long", b"x" * 20)])
        assert seen.take() == ["stream", "upsert"]
        assert await contents(kv, fresh) == {}
    finally:
        await raw.execute(f"ALTER TABLE kv DROP CONSTRAINT short_{hex_p[-12:]}")


async def _blocked_copy(
    kv: SQLKVStore, raw: asyncpg.Connection, p: bytes, read: tuple[bytes, bytes] | None = None
) -> tuple[asyncio.Task[Any], int]:
    """A batch (then ``read``, if given) whose COPY waits for ``raw``'s uncommitted row of one of
    its keys, and its backend's pid."""
    await raw.execute("BEGIN")
    await raw.execute("INSERT INTO kv VALUES ($1, $2, $3)", p, b"k0005", b"theirs")
    items = batch(p, N, b"ours")
    write = kv.set_many(items) if read is None else kv.set_many_then_get(items, *read)
    task = asyncio.create_task(write)
    for _ in range(100):
        await asyncio.sleep(0.05)
        pid = await raw.fetchval(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
            "AND wait_event_type = 'Lock' AND query LIKE 'COPY%'"
        )
        if pid is not None:
            return task, int(pid)
    raise AssertionError("the COPY never waited for the uncommitted row")


async def _backends_but(raw: asyncpg.Connection) -> int:
    """The other sessions on this test database, once closed ones are gone (up to 5 s)."""
    query = (
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
    )
    for _ in range(50):
        if not (n := int(await raw.fetchval(query))):
            break
        await asyncio.sleep(0.1)
    return n


async def test_a_connection_lost_during_the_copy_is_an_unknown_outcome(
    kv: SQLKVStore, raw: asyncpg.Connection, pg_database: PgDatabase
) -> None:
    p = partition()
    task, pid = await _blocked_copy(kv, raw, p)
    admin = await asyncpg.connect(pg_database.url)
    try:
        assert await admin.fetchval("SELECT pg_terminate_backend($1)", pid)
    finally:
        await admin.close()
    with pytest.raises(TransientError, match="outcome unknown"):
        await asyncio.wait_for(task, 30)
    await raw.execute("ROLLBACK")
    await kv.set_many(batch(p, N, b"after"))
    assert await contents(kv, p) == {k: v for _, k, v in batch(p, N, b"after")}


async def test_a_cancelled_copy_writes_nothing_and_leaves_the_store_usable(
    kv: SQLKVStore, raw: asyncpg.Connection
) -> None:
    p = partition()
    task, _ = await _blocked_copy(kv, raw, p)  # the store's only connection
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await raw.execute("ROLLBACK")
    # the connection cut short mid-COPY was closed, not handed back to the pool
    assert await _backends_but(raw) == 0
    await asyncio.sleep(0.2)
    assert await contents(kv, p) == {}
    for i in range(12):  # more batches than the pool holds connections: none came back broken
        await kv.set_many(batch(p, N, b"r%d-" % i))
    assert len(await contents(kv, p)) == N


def test_thresholds_are_sane() -> None:
    assert 1 < sql_module.INSERT_FIRST_MIN <= 1000 and sql_module.UPSERT_STREAK >= 1
    assert sql_module.STREAK_PARTITIONS >= 2


async def test_streaks_are_remembered_for_a_bounded_number_of_partitions() -> None:
    store = await SQLKVStore.open("postgresql://u@127.0.0.1:1/db", create=False)  # never connects
    try:
        limit = sql_module.STREAK_PARTITIONS
        for i in range(limit + 10):
            store._met_existing(b"p%d" % i)
        assert len(store._upsert_streaks) == limit
        assert not store._copy_first(b"p%d" % (limit + 9), N)  # the latest is on its streak
        assert store._copy_first(b"p0", N)  # forgotten: COPY first again
    finally:
        await store.close()
