"""PostgreSQL KV store over SQLAlchemy 2 asyncio (asyncpg). SQLite files: :mod:`.sqlite`.

Layout (spec section 6)::

    kv(partition_key BYTEA, key BYTEA, value BYTEA, PRIMARY KEY(partition_key, key))

The table is created on demand (``CREATE TABLE IF NOT EXISTS``; a concurrent creator losing the race
is tolerated). Every operation is ONE statement in its own short transaction, so compare-and-swap is
atomic across connections and processes without read-then-write:

- ``set`` = upsert (``INSERT ... ON CONFLICT (partition_key, key) DO UPDATE``);
- ``set_many`` = the same upsert in ONE transaction, so the batch is atomic: one statement over
  arrays (``INSERT ... SELECT * FROM unnest(...)``). A batch of at least :data:`INSERT_FIRST_MIN`
  items is first written by binary ``COPY`` (no speculative insertion per row, no array encoding;
  :mod:`lakefs_core.kv.pg_copy`), and again with the upsert in a new transaction when it meets an
  existing key (``SQLKVStore._write_batch``);
- ``set_if(ABSENT)`` = ``INSERT ... ON CONFLICT DO NOTHING``, success iff one row was inserted;
- ``set_if(EXISTS)`` = ``UPDATE ... WHERE partition_key=:p AND key=:k``, success iff one row;
- ``set_if(equals(pred))`` = the same ``UPDATE`` with ``AND value=:pred``; under PostgreSQL's READ
  COMMITTED a concurrent updater blocks and the predicate is re-evaluated on the new row version,
  so exactly one of N racing CASes from the same predicate wins;
- ``scan`` = keyset pagination ``WHERE partition_key=:p AND key >= :start ORDER BY key LIMIT :n``
  (later pages use ``key > :last``); no connection is held between pages, so abandoning a scan
  leaks nothing. BYTEA compares bytewise (memcmp), matching the KV contract.

Every operation runs through :func:`lakefs_core.sqlengine.run_transaction` (shared with the mirrors
database); the ``COPY`` of a batch runs inside it on the driver connection and translates the
driver's own errors the same way (:mod:`lakefs_core.kv.pg_copy`). Errors are translated at this
edge, always with ``raise ... from e``:

- cannot obtain a connection (refused, DNS, auth) -> :class:`UnreachableError`;
- connection lost while a *read* runs -> :class:`UnreachableError`; while a *write* runs the outcome
  is unknown -> :class:`TransientError` (never reported as a precondition failure);
- serialization failures, deadlocks, lock/statement timeouts, admin shutdown, pool exhaustion ->
  :class:`TransientError`;
- integrity errors during ``set_if`` -> :class:`PreconditionFailedError`, elsewhere
  :class:`~lakefs_core.errors.ConflictError` (a batch's ``COPY`` meeting an existing key is not an
  error: the batch is written again with the upsert);
- a full disk (PostgreSQL 53100 disk_full) -> :class:`~lakefs_core.errors.StorageFullError`, which
  is not retryable.

The driver does not retry by itself: the unreachable and transient errors above are ``retryable``
and callers' bounded retry loops (which know whether an operation is idempotent) decide. Stale pooled
connections are replaced transparently by ``pool_pre_ping``. Messages name the database by its
redacted URL only (password shown as ``***``) and SQL parameters are hidden from SQLAlchemy's error
strings.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from functools import partial
from typing import Any, TypeVar

from sqlalchemy import Column, LargeBinary, MetaData, Table, inspect, select, update
from sqlalchemy import delete as sql_delete
from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from sqlalchemy.schema import CreateTable

from lakefs_core.errors import (
    BadInputError,
    LakeFSError,
    NotFoundError,
    PreconditionFailedError,
    TransientError,
    UnreachableError,
)
from lakefs_core.kv._common import (
    TransactionalBatches,
    as_bytes,
    check_expect,
    check_key,
    closed_error,
    paged_scan,
    precondition_message,
)
from lakefs_core.kv.base import Expect, KVEntry, KVItem
from lakefs_core.redact import redact_url
from lakefs_core.sqlengine import (
    create_sql_engine,
    normalize_sql_url,
    run_transaction,
    translate_db_error,
    upsert_insert,
)

T = TypeVar("T")

# PostgreSQL: a batch of at least this many items is first written by binary COPY (see
# SQLKVStore._write_batch); below it, the upsert's extra per-row cost is less than what a failed
# first attempt would cost.
INSERT_FIRST_MIN = 64
# After a batch whose COPY met an existing key, this many batches go straight to the upsert (a
# writer that overwrites keeps paying for one failed attempt in this many, not in every batch).
UPSERT_STREAK = 32


DEFAULT_TABLE = "kv"
DEFAULT_BUSY_TIMEOUT_S = 30.0
DEFAULT_CONNECT_TIMEOUT_S = 10.0


def normalize_url(url: str) -> URL:
    """Parse a PostgreSQL ``url`` and point it at the async driver; refuse anything else (never
    echoing it). A SQLite file is :mod:`lakefs_core.kv.sqlite`'s."""
    try:
        parsed = normalize_sql_url(url)
    except ValueError as e:
        raise BadInputError(str(e), field="url") from None
    if parsed.drivername != "postgresql+asyncpg":
        raise BadInputError("SQLite files are opened by lakefs_core.kv.sqlite (open_kv)", field="url")
    return parsed


class SQLKVStore(TransactionalBatches):
    """A :class:`~lakefs_core.kv.base.KVStore` over one SQL table. Open with :meth:`open`."""

    def __init__(self, engine: AsyncEngine, *, table: str = DEFAULT_TABLE) -> None:
        self._engine = engine
        self._display = redact_url(engine.url.render_as_string(hide_password=True))
        self._table = Table(
            table,
            MetaData(),
            Column("partition_key", LargeBinary, primary_key=True),
            Column("key", LargeBinary, primary_key=True),
            Column("value", LargeBinary, nullable=False),
        )
        # the table's name as it goes into the batch statements' SQL text (quoted where needed)
        self._quoted_table = engine.dialect.identifier_preparer.quote(table)
        self._closed = False
        self._upsert_batches = 0  # batches left that skip the COPY (see _write_batch)

    @classmethod
    async def open(
        cls,
        url: str,
        *,
        table: str = DEFAULT_TABLE,
        create: bool = True,
        busy_timeout: float = DEFAULT_BUSY_TIMEOUT_S,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT_S,
        pool_size: int = 10,
        max_overflow: int = 10,
    ) -> SQLKVStore:
        """Connect to ``url`` (see :func:`normalize_url`) and create the table unless ``create=False``."""
        sa_url = normalize_url(url)
        engine = create_sql_engine(
            sa_url,
            busy_timeout=busy_timeout,
            connect_timeout=connect_timeout,
            pool_size=pool_size,
            max_overflow=max_overflow,
        )
        store = cls(engine, table=table)
        if create:
            try:
                await store.create_table()
            except BaseException:
                await engine.dispose()
                raise
        return store

    async def __aenter__(self) -> SQLKVStore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- plumbing -------------------------------------------------------------------------------

    def _translate(self, e: BaseException, *, connecting: bool, write: bool, cas: bool) -> LakeFSError:
        where = f"KV database {self._display}"
        return translate_db_error(e, where, connecting=connecting, write=write, cas=cas, url=self._engine.url)

    async def _run(
        self,
        fn: Callable[[AsyncConnection], Awaitable[T]],
        *,
        write: bool,
        cas: bool = False,
    ) -> T:
        if self._closed:
            raise closed_error("SQL")
        translate = partial(self._translate, cas=cas)
        return await run_transaction(self._engine, fn, write=write, translate=translate)

    def _insert(self) -> Any:
        return upsert_insert("postgresql", self._table)

    # -- schema ---------------------------------------------------------------------------------

    async def _table_exists(self) -> bool:
        name = self._table.name

        async def check(conn: AsyncConnection) -> bool:
            return await conn.run_sync(lambda sync_conn: inspect(sync_conn).has_table(name))

        return await self._run(check, write=False)

    async def create_table(self) -> None:
        """``CREATE TABLE IF NOT EXISTS``; losing a creation race to another process is fine."""

        async def create(conn: AsyncConnection) -> None:
            await conn.execute(CreateTable(self._table, if_not_exists=True))

        try:
            await self._run(create, write=True)
        except (UnreachableError, TransientError):
            raise
        except LakeFSError:
            # e.g. PostgreSQL's unique violation on pg_type when two sessions create it at once.
            if not await self._table_exists():
                raise

    # -- KVStore --------------------------------------------------------------------------------

    async def get(self, partition: bytes, key: bytes) -> bytes:
        p, k = check_key(partition, key)
        t = self._table
        stmt = select(t.c.value).where(t.c.partition_key == p, t.c.key == k)

        async def op(conn: AsyncConnection) -> bytes | None:
            value = (await conn.execute(stmt)).scalar_one_or_none()
            return None if value is None else bytes(value)

        found = await self._run(op, write=False)
        if found is None:
            raise NotFoundError("key not found in KV partition")
        return found

    async def set(self, partition: bytes, key: bytes, value: bytes) -> None:
        p, k = check_key(partition, key)
        v = as_bytes(value, "value")
        t = self._table
        ins = self._insert().values(partition_key=p, key=k, value=v)
        stmt = ins.on_conflict_do_update(
            index_elements=[t.c.partition_key, t.c.key], set_={"value": ins.excluded.value}
        )

        async def op(conn: AsyncConnection) -> None:
            await conn.execute(stmt)

        await self._run(op, write=True)

    async def _write_batch(self, batch: list[KVItem], read: tuple[bytes, bytes] | None) -> bytes | None:
        """Write ``batch`` (if any), then read ``read``'s value (if asked), in ONE transaction.

        The read takes the locks that make it as good as a read after the commit: ``FOR SHARE``,
        so an update of the key by another transaction either committed before this read (and is
        seen) or waits for this transaction's commit, i.e. for the batch.

        PostgreSQL's upsert pays for a speculative insertion per row, and bulk batches are mostly
        new keys (staging partitions are per staging token). So a batch of at least
        :data:`INSERT_FIRST_MIN` items is first written by binary COPY
        (:func:`~lakefs_core.kv.pg_copy.copy_then_read`); if that meets an existing key (the
        transaction wrote nothing: a definite outcome), the whole transaction runs again with the
        upsert, and so do the next :data:`UPSERT_STREAK` batches. Either way the batch is atomic
        and each key ends with its value from this batch, as with the upsert alone."""
        if len(batch) >= INSERT_FIRST_MIN:
            if self._upsert_batches > 0:
                self._upsert_batches -= 1
            else:
                from lakefs_core.kv import pg_copy  # asyncpg is imported for PostgreSQL only

                translate = partial(self._translate, cas=False)

                async def copy(conn: AsyncConnection) -> bytes | None:
                    return await pg_copy.copy_then_read(
                        conn,
                        batch,
                        table=self._table.name,
                        quoted_table=self._quoted_table,
                        read=read,
                        translate=translate,
                    )

                try:
                    return await self._run(copy, write=True)
                except pg_copy.KeyExists:
                    self._upsert_batches = UPSERT_STREAK
        write = self._batch_write(batch) if batch else None
        stmt = None
        if read is not None:
            t = self._table
            stmt = select(t.c.value).where(t.c.partition_key == read[0], t.c.key == read[1])
            stmt = stmt.with_for_update(read=True)

        async def op(conn: AsyncConnection) -> bytes | None:
            if write is not None:
                await write(conn)
            value = None if stmt is None else (await conn.execute(stmt)).scalar_one_or_none()
            return None if value is None else bytes(value)

        return await self._run(op, write=True)

    def _batch_write(self, batch: list[KVItem]) -> Callable[[AsyncConnection], Awaitable[None]]:
        """The upsert of a non-empty batch, to run in a transaction: ONE raw statement over three
        arrays (``unnest``), no per-value SQLAlchemy processing; only the table name (ours,
        quoted) is interpolated."""
        sql = (
            f"INSERT INTO {self._quoted_table} (partition_key, key, value) "
            "SELECT * FROM unnest($1::bytea[], $2::bytea[], $3::bytea[]) "
            "ON CONFLICT (partition_key, key) DO UPDATE SET value = excluded.value"
        )
        columns = tuple(list(column) for column in zip(*batch, strict=True))

        async def op(conn: AsyncConnection) -> None:
            await conn.exec_driver_sql(sql, columns)

        return op

    async def set_if(self, partition: bytes, key: bytes, value: bytes, expected: Expect) -> None:
        p, k = check_key(partition, key)
        v = as_bytes(value, "value")
        exp = check_expect(expected)
        t = self._table
        stmt: Any
        if exp.kind == "absent":
            stmt = (
                self._insert()
                .values(partition_key=p, key=k, value=v)
                .on_conflict_do_nothing(index_elements=[t.c.partition_key, t.c.key])
            )
        else:
            stmt = update(t).where(t.c.partition_key == p, t.c.key == k).values(value=v)
            if exp.kind == "equals":
                stmt = stmt.where(t.c.value == exp.value)

        async def op(conn: AsyncConnection) -> int:
            return int((await conn.execute(stmt)).rowcount)

        if await self._run(op, write=True, cas=True) != 1:
            raise PreconditionFailedError(precondition_message(exp))

    async def delete(self, partition: bytes, key: bytes) -> None:
        p, k = check_key(partition, key)
        t = self._table
        stmt = sql_delete(t).where(t.c.partition_key == p, t.c.key == k)

        async def op(conn: AsyncConnection) -> None:
            await conn.execute(stmt)

        await self._run(op, write=True)

    async def scan(
        self, partition: bytes, start: bytes = b"", *, page_size: int = 1000
    ) -> AsyncIterator[KVEntry]:
        t = self._table

        async def read(p: bytes, cursor: bytes, inclusive: bool, size: int) -> list[KVEntry]:
            bound = t.c.key >= cursor if inclusive else t.c.key > cursor
            stmt = (
                select(t.c.key, t.c.value).where(t.c.partition_key == p, bound).order_by(t.c.key).limit(size)
            )

            async def op(conn: AsyncConnection) -> list[KVEntry]:
                rows = (await conn.execute(stmt)).all()
                return [KVEntry(bytes(row[0]), bytes(row[1])) for row in rows]

            return await self._run(op, write=False)

        async for entry in paged_scan(partition, start, page_size, read):
            yield entry

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        await self._engine.dispose()
