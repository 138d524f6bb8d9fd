"""PostgreSQL KV store on asyncpg (``postgresql://``). SQLite files are :mod:`.sqlite`'s.

Layout (spec section 6), created on demand as SQLAlchemy emitted it for earlier versions, so a
table made by one works unchanged::

    kv(partition_key BYTEA, key BYTEA, value BYTEA, PRIMARY KEY(partition_key, key))

Why asyncpg without SQLAlchemy: every statement here is a fixed string, and importing SQLAlchemy
and setting up its engine took ~0.24 s of a ``lakefs-core`` process (``bench/RESULTS.md``), a
third of a 5,000-file upload. What the engine did is asyncpg's own pool plus a few lines:

- **Pool.** asyncpg's, at most ``pool_size + max_overflow`` connections, none opened before the
  first operation, idle ones closed after 5 minutes. Waiting longer than ``pool_timeout`` for a
  free one is :class:`TransientError` ("no pooled connection available"). Each checkout is pinged
  first (``SELECT 1``), as SQLAlchemy's ``pool_pre_ping`` did: a connection the server dropped
  while idle is replaced, once, transparently. Nothing changes session state, so a connection
  goes back to the pool as it is (asyncpg still rolls back a transaction left open).
- **Operations.** One statement each, autocommitted (a single statement is its own transaction),
  so compare-and-swap is atomic across connections and processes without read-then-write:

  - ``set`` = upsert (``INSERT ... ON CONFLICT (partition_key, key) DO UPDATE``);
  - ``set_many`` = atomic. A batch of at least :data:`INSERT_FIRST_MIN` items is first streamed
    into one binary ``COPY`` as it is taken from its iterable (:class:`~lakefs_core.kv.pg_copy.
    RowStream`: the server parses rows while the client takes, checks and frames the next ones,
    and a lazy iterable encodes them), in ONE transaction with the items of partitions on an
    upsert streak, held back and upserted after it (``SQLKVStore._stream_batch``). Otherwise, or
    when that COPY met an existing or repeated key (nothing of it stays), ONE transaction writing
    partition by partition: the upsert over arrays (``INSERT ... SELECT * FROM unnest(...)``),
    or, for at least :data:`INSERT_FIRST_MIN` items of one partition, first binary ``COPY``
    (:func:`~lakefs_core.kv.pg_copy.copy_rows`), and when that meets an existing key the
    transaction again with that partition upserted (``SQLKVStore._write_batch``);
    ``set_many_then_get`` reads the key ``FOR SHARE`` before the commit;
  - ``set_if(ABSENT)`` = ``INSERT ... ON CONFLICT DO NOTHING``, success iff one row was inserted;
  - ``set_if(EXISTS)`` = ``UPDATE ... WHERE partition_key = $1 AND key = $2`` (``AND value = $4``
    for ``equals``); under READ COMMITTED a concurrent updater blocks and the predicate is
    re-evaluated on the new row version, so exactly one of N racing CASes from one predicate wins;
  - ``scan`` = keyset pagination (``key >= start``, then ``key > last``), one ``SELECT`` per
    page, no connection held between pages. BYTEA compares bytewise (memcmp), as the contract says.

- **Cancellation.** A connection whose operation was cancelled, or that broke, is closed, never
  handed back (a COPY cut short leaves the protocol mid-stream).

Errors are translated at this edge (``raise ... from e``) by :func:`lakefs_core.dberrors.
translate_failure`, the table the SQLAlchemy engines use too: cannot connect -> unreachable; a lost
connection (class 08, the server ending the session, socket and driver interface errors) -> during a
read unreachable, during a write :class:`TransientError` with an UNKNOWN outcome; serialization
failures, deadlocks, lock timeouts, cancelled statements -> transient; integrity violations ->
:class:`PreconditionFailedError` in ``set_if``, :class:`~lakefs_core.errors.ConflictError`
elsewhere; PostgreSQL's disk_full -> :class:`~lakefs_core.errors.StorageFullError` (not retryable).
Nothing is retried here: callers' bounded loops know what is idempotent. Messages name the database
by its redacted URL (no user, no password); parameters never appear in them.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections import Counter, OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Container, Iterable, Sequence
from itertools import chain, islice
from typing import TypeVar
from urllib.parse import urlsplit

import asyncpg

from lakefs_core.dberrors import PG_DISK_FULL, PG_SESSION_ENDED, driver_reason, sqlstate, translate_failure
from lakefs_core.errors import (
    BadInputError,
    LakeFSError,
    NotFoundError,
    PreconditionFailedError,
    StorageFullError,
    TransientError,
    UnreachableError,
)
from lakefs_core.kv import pg_copy
from lakefs_core.kv._common import (
    IndexedRange,
    TransactionalBatches,
    as_bytes,
    check_expect,
    check_held,
    check_items,
    check_key,
    closed_error,
    paged_range_scan,
    paged_scan,
    precondition_message,
)
from lakefs_core.kv.base import Expect, KeyRange, KVEntry, KVExpectation, KVItem
from lakefs_core.kv.schemes import _SQLITE_SCHEMES, PG_SCHEMES
from lakefs_core.redact import quote_sql_userinfo, redact_url

T = TypeVar("T")

# A batch of at least this many items is first written by binary COPY (see
# SQLKVStore._write_batch); below it, the upsert's extra per-row cost is less than what a failed
# first attempt would cost.
INSERT_FIRST_MIN = 64
# After a batch whose COPY met an existing key, this many batches go straight to the upsert (a
# writer that overwrites keeps paying for one failed attempt in this many, not in every batch).
UPSERT_STREAK = 32
# Partitions whose streak is remembered (the least recently conflicting one is forgotten first).
STREAK_PARTITIONS = 256

DEFAULT_TABLE = "kv"
DEFAULT_POOL_TIMEOUT_S = 30.0
DEFAULT_CONNECT_TIMEOUT_S = 10.0
IDLE_CONNECTION_LIFETIME_S = 300.0
# What the driver raises for database trouble: server errors, then a connection that is closed or in
# a state it cannot use (e.g. the server ended the session while it sat idle), sockets, timeouts.
_DRIVER_ERRORS = (
    asyncpg.PostgresError,
    asyncpg.InterfaceError,
    asyncpg.InternalClientError,
    OSError,
    TimeoutError,
)
_BROKEN = (asyncpg.InterfaceError, asyncpg.InternalClientError, OSError)


def _connection_lost(e: BaseException, state: str) -> bool:
    """Whether ``e`` (SQLSTATE ``state``) left its connection unusable: the driver's own socket and
    interface errors, or a server error after which the session is gone (class 08, or the server
    ending it)."""
    return isinstance(e, _BROKEN) or state.startswith("08") or state in PG_SESSION_ENDED


def normalize_url(url: str) -> str:
    """The asyncpg DSN (``postgresql://...``) for a PostgreSQL ``url`` (a scheme of
    :data:`~lakefs_core.kv.PG_SCHEMES`); :class:`BadInputError` naming no part of it for anything
    else. A password written with a raw ``@``, ``/`` or ``#`` is taken whole, as libpq does (see
    :mod:`lakefs_core.redact`), and percent-encoded for the driver."""
    try:
        url.encode()  # a lone surrogate (environment bytes the OS could not decode): refused
    except UnicodeEncodeError:
        raise BadInputError("the PostgreSQL URL is not valid UTF-8", field="url") from None
    scheme, sep, rest = quote_sql_userinfo(url).partition("://")
    scheme = scheme.lower()
    if sep and scheme in _SQLITE_SCHEMES:
        raise BadInputError("SQLite files are opened by lakefs_core.kv.sqlite (open_kv)", field="url")
    if not sep or scheme not in PG_SCHEMES:
        raise BadInputError("not a PostgreSQL URL (postgresql://user@host:port/database)", field="url")
    dsn = f"postgresql://{rest}"
    try:
        parts = urlsplit(dsn)
        parts.port  # noqa: B018 -- raises ValueError for a port that is not a number in range
    except ValueError:
        # ``from None``: the parser's message may repeat part of the URL (a mis-split password).
        raise BadInputError("malformed PostgreSQL URL", field="url") from None
    return dsn


def _quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _check_table(table: str) -> str:
    if not isinstance(table, str) or not table or "\x00" in table or len(table.encode()) > 63:
        raise BadInputError("table name must be 1-63 bytes without NUL", field="table")
    return table


def _rowcount(status: str) -> int:
    """The row count of a command status (``INSERT 0 1``, ``UPDATE 1``)."""
    return int(status.rsplit(" ", 1)[-1])


async def _keep_session(_conn: asyncpg.Connection) -> None:
    """Pool reset: nothing here changes session state (asyncpg still rolls back an open transaction)."""


class _SQL:
    """The statements for one table (its name quoted once)."""

    def __init__(self, table: str) -> None:
        t = _quote_ident(table)
        self.create = (
            f"CREATE TABLE IF NOT EXISTS {t} (partition_key BYTEA NOT NULL, key BYTEA NOT NULL, "
            "value BYTEA NOT NULL, PRIMARY KEY (partition_key, key))"
        )
        self.get = f"SELECT value FROM {t} WHERE partition_key = $1 AND key = $2"
        self.get_for_share = self.get + " FOR SHARE"
        # set_many_if's expected rows, locked until the commit: FOR UPDATE (in key order) those the
        # batch writes, FOR SHARE the others. A share lock upgraded by the write deadlocks when two
        # batches racing on one key both hold it; update locks queue them instead, and the second
        # then reads the first one's committed value (its expectation fails, as it should).
        expected_rows = (
            f"SELECT t.partition_key, t.key, t.value FROM {t} AS t "
            "JOIN unnest($1::bytea[], $2::bytea[]) AS c(p, k) ON t.partition_key = c.p AND t.key = c.k "
        )
        self.get_many_for_share = expected_rows + "FOR SHARE OF t"
        self.get_many_for_update = expected_rows + "ORDER BY t.partition_key, t.key FOR UPDATE OF t"
        self.upsert = (
            f"INSERT INTO {t} (partition_key, key, value) VALUES ($1, $2, $3) "
            "ON CONFLICT (partition_key, key) DO UPDATE SET value = excluded.value"
        )
        self.upsert_many = (
            f"INSERT INTO {t} (partition_key, key, value) "
            "SELECT * FROM unnest($1::bytea[], $2::bytea[], $3::bytea[]) "
            "ON CONFLICT (partition_key, key) DO UPDATE SET value = excluded.value"
        )
        self.insert_absent = (
            f"INSERT INTO {t} (partition_key, key, value) VALUES ($1, $2, $3) "
            "ON CONFLICT (partition_key, key) DO NOTHING"
        )
        self.update = f"UPDATE {t} SET value = $3 WHERE partition_key = $1 AND key = $2"
        self.update_equals = self.update + " AND value = $4"
        self.delete = f"DELETE FROM {t} WHERE partition_key = $1 AND key = $2"
        page = f"SELECT key, value FROM {t} WHERE partition_key = $1 AND key {{}} $2 ORDER BY key LIMIT $3"
        self.page_from, self.page_after = page.format(">="), page.format(">")
        bounded = (
            f"SELECT key, value FROM {t} WHERE partition_key = $1 AND key {{}} $2 AND key < $4 "
            "ORDER BY key LIMIT $3"
        )
        self.page_from_to, self.page_after_to = bounded.format(">="), bounded.format(">")
        # scan_ranges' page: each range an index range scan bounded by the page size (LATERAL)
        self.ranges_page = (
            "SELECT r.i, t.key, t.value "
            "FROM unnest($1::int[], $2::bytea[], $3::bytea[], $4::bytea[]) AS r(i, p, s, e) "
            f"CROSS JOIN LATERAL (SELECT key, value FROM {t} WHERE partition_key = r.p "
            "AND key >= r.s AND key < r.e ORDER BY key LIMIT $5) AS t ORDER BY r.i, t.key LIMIT $5"
        )


def _partition_of(item: object) -> object:
    """The partition of a batch item, or None for what is not a 3-tuple starting with bytes (checked
    later)."""
    return item[0] if type(item) is tuple and len(item) == 3 and type(item[0]) is bytes else None


class _KeyExists(LakeFSError):
    """A batch's COPY of ``partition``'s items met an existing key; nothing of the batch was written."""

    def __init__(self, partition: bytes) -> None:
        super().__init__("a key of the batch exists")
        self.partition = partition


class _CopyRefused(LakeFSError):
    """A streamed batch's COPY met an existing key, or a key given twice; nothing was written."""


class _PoolExhausted(Exception):
    """No pooled connection came free within the pool timeout."""


class SQLKVStore(TransactionalBatches):
    """A :class:`~lakefs_core.kv.base.KVStore` over one PostgreSQL table. Open with :meth:`open`."""

    def __init__(
        self,
        pool: asyncpg.Pool,
        display: str,
        *,
        table: str = DEFAULT_TABLE,
        max_connections: int = 20,
        pool_timeout: float = DEFAULT_POOL_TIMEOUT_S,
    ) -> None:
        self._pool = pool
        self._where = f"KV database {display}"
        self._table = _check_table(table)
        self._sql = _SQL(table)
        self._slots = asyncio.Semaphore(max_connections)
        self._pool_timeout = pool_timeout
        self._closed = False
        # partition -> batches left whose items of it skip the COPY (see _write_batch)
        self._upsert_streaks: OrderedDict[bytes, int] = OrderedDict()

    @classmethod
    async def open(
        cls,
        url: str,
        *,
        table: str = DEFAULT_TABLE,
        create: bool = True,
        pool_timeout: float = DEFAULT_POOL_TIMEOUT_S,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT_S,
        pool_size: int = 10,
        max_overflow: int = 10,
    ) -> SQLKVStore:
        """A store on ``url`` (see :func:`normalize_url`); the table is created unless ``create=False``."""
        dsn = normalize_url(url)
        _check_table(table)
        size = pool_size + max_overflow
        pool = asyncpg.create_pool(
            dsn,
            min_size=0,  # nothing is opened here: the first operation connects
            max_size=size,
            timeout=connect_timeout,
            max_inactive_connection_lifetime=IDLE_CONNECTION_LIFETIME_S,
            reset=_keep_session,
        )
        await pool  # with min_size=0 this opens no connection
        store = cls(pool, redact_url(url), table=table, max_connections=size, pool_timeout=pool_timeout)
        if create:
            try:
                await store.create_table()
            except BaseException:
                await store.close()
                raise
        return store

    async def __aenter__(self) -> SQLKVStore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- plumbing -------------------------------------------------------------------------------

    def _translate(self, e: BaseException, *, connecting: bool, write: bool, cas: bool) -> LakeFSError:
        reason = driver_reason(e)
        state = sqlstate(e) or ""
        if state == PG_DISK_FULL:  # first: neither unreachable nor transient, whatever else it says
            return StorageFullError(f"{self._where}: no space left: {reason}")
        err = translate_failure(
            e,
            self._where,
            reason,
            state=state,
            connecting=connecting,
            write=write,
            cas=cas,
            disconnect=_connection_lost(e, state),
            integrity=isinstance(e, asyncpg.IntegrityConstraintViolationError),
            exhausted=isinstance(e, _PoolExhausted),
        )
        return err if err is not None else LakeFSError(f"{self._where}: {reason}")

    async def _checkout(self) -> asyncpg.Connection:
        """A pooled connection that answered a ping (a dead idle one is replaced once)."""
        for attempt in (1, 2):
            try:
                conn: asyncpg.Connection = await self._pool.acquire()
            except ValueError:  # asyncpg.ClientConfigurationError: a parameter of the URL
                raise BadInputError("the PostgreSQL URL's parameters were refused", field="url") from None
            except _DRIVER_ERRORS as e:
                raise self._translate(e, connecting=True, write=False, cas=False) from e
            try:
                await conn.execute("SELECT 1")
                return conn
            except BaseException as e:
                await self._release(conn, usable=False)
                if not isinstance(e, _DRIVER_ERRORS):
                    raise
                # the others in the pool may be as dead: they are replaced when next checked out
                await self._pool.expire_connections()
                if attempt == 2:
                    raise self._translate(e, connecting=True, write=False, cas=False) from e
        raise AssertionError("unreachable")

    async def _run(
        self, fn: Callable[[asyncpg.Connection], Awaitable[T]], *, write: bool, cas: bool = False
    ) -> T:
        """``fn(conn)`` on a checked-out connection; the driver's errors translated."""
        if self._closed:
            raise closed_error("PostgreSQL")
        try:
            async with asyncio.timeout(self._pool_timeout):
                await self._slots.acquire()
        except TimeoutError as e:
            raise self._translate(
                _PoolExhausted("every pooled connection is busy"), connecting=True, write=write, cas=cas
            ) from e
        try:
            conn = await self._checkout()
            usable = False
            try:
                result = await fn(conn)
                usable = True
                return result
            except LakeFSError:
                usable = True  # raised by ``fn`` itself (_KeyExists), not by the driver
                raise
            except _DRIVER_ERRORS as e:
                usable = isinstance(e, asyncpg.PostgresError) and not _connection_lost(e, sqlstate(e) or "")
                raise self._translate(e, connecting=False, write=write, cas=cas) from e
            finally:
                await self._release(conn, usable=usable)
        finally:
            self._slots.release()

    async def _release(self, conn: asyncpg.Connection, *, usable: bool) -> None:
        """Hand ``conn`` back to the pool; one that broke, or was cut short mid-protocol (cancelled),
        is closed first. A connection the driver saw closing was handed back already."""
        with contextlib.suppress(*_DRIVER_ERRORS):
            if not usable:
                conn.terminate()
            await self._pool.release(conn)

    # -- schema ---------------------------------------------------------------------------------

    async def _table_exists(self) -> bool:
        async def check(conn: asyncpg.Connection) -> bool:
            return bool(
                await conn.fetchval("SELECT to_regclass($1::text) IS NOT NULL", _quote_ident(self._table))
            )

        return await self._run(check, write=False)

    async def create_table(self) -> None:
        """``CREATE TABLE IF NOT EXISTS``; losing a creation race to another process is fine."""

        async def create(conn: asyncpg.Connection) -> None:
            await conn.execute(self._sql.create)

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
        sql = self._sql.get

        async def op(conn: asyncpg.Connection) -> bytes | None:
            value: bytes | None = await conn.fetchval(sql, p, k)
            return value

        found = await self._run(op, write=False)
        if found is None:
            raise NotFoundError("key not found in KV partition")
        return found

    async def set(self, partition: bytes, key: bytes, value: bytes) -> None:
        p, k = check_key(partition, key)
        v = as_bytes(value, "value")
        sql = self._sql.upsert

        async def op(conn: asyncpg.Connection) -> None:
            await conn.execute(sql, p, k, v)

        await self._run(op, write=True)

    async def _check(
        self,
        conn: asyncpg.Connection,
        expected: Sequence[KVExpectation],
        written: Container[tuple[bytes, bytes]],
    ) -> None:
        """Lock the expected rows until the commit (no other transaction changes them before this
        one ends): ``FOR UPDATE`` those in ``written`` (the batch's keys; see :class:`_SQL`),
        ``FOR SHARE`` the others; and check them. :class:`PreconditionFailedError` when one does not
        hold (raised inside the transaction, which is rolled back)."""
        if not expected:
            return
        present = [e for e in expected if e[2].kind != "absent"]
        for p, k, exp in expected:
            # A missing row cannot be locked: insert it (empty; the batch writes its value in this
            # transaction) or meet the row another transaction holds, whose commit makes ours find
            # it (a rollback: ours inserts it).
            insert = self._sql.insert_absent
            if exp.kind == "absent" and _rowcount(await conn.execute(insert, p, k, b"")) != 1:
                raise PreconditionFailedError(precondition_message(exp))
        rows: dict[tuple[bytes, bytes], bytes] = {}
        for sql, locked in (
            (self._sql.get_many_for_update, [e for e in present if (e[0], e[1]) in written]),
            (self._sql.get_many_for_share, [e for e in present if (e[0], e[1]) not in written]),
        ):
            if locked:
                found = await conn.fetch(sql, [p for p, _, _ in locked], [k for _, k, _ in locked])
                rows.update({(bytes(r[0]), bytes(r[1])): bytes(r[2]) for r in found})
        check_held(rows, present)

    async def _write_batch(
        self, batch: list[KVItem], read: tuple[bytes, bytes] | None, expected: Sequence[KVExpectation] = ()
    ) -> bytes | None:
        """Check ``expected`` (:meth:`_check`), write ``batch`` (if any), then read ``read``'s
        value (if asked), in ONE transaction.

        The read takes the locks that make it as good as a read after the commit: ``FOR SHARE``,
        so an update of the key by another transaction either committed before this read (and is
        seen) or waits for this transaction's commit, i.e. for the batch.

        PostgreSQL's upsert pays for a speculative insertion per row, and bulk batches are mostly
        new keys (staging partitions are per staging token), though a batch may also carry keys
        of another partition (an upload's journal settle record) or overwrite existing ones.
        So the batch is written partition by partition, in the order partitions first appear: a
        partition's items, when at least :data:`INSERT_FIRST_MIN`, are first written by binary COPY
        (:func:`~lakefs_core.kv.pg_copy.copy_rows`); if that meets an existing key (the
        transaction is rolled back: nothing of it stays, a definite outcome), the transaction runs
        again with that partition's items upserted, as they are in its next :data:`UPSERT_STREAK`
        batches (at most one more run per partition: a savepoint per COPY instead cost every batch
        two round trips). Either way the batch is atomic and each key ends with its value from
        this batch, as with the upsert alone."""
        sql = self._sql
        groups: dict[bytes, list[KVItem]] = {}
        if len({item[0] for item in batch}) == 1:  # the usual batch: one partition
            groups[batch[0][0]] = batch
        else:
            for item in batch:
                groups.setdefault(item[0], []).append(item)
        checked = {p for p, _, _ in expected}  # their rows exist (or were just inserted): no COPY
        written = {(p, k) for p, k, _ in batch} if expected else set()
        copy = {
            partition: partition not in checked and self._copy_first(partition, len(items))
            for partition, items in groups.items()
        }

        async def op(conn: asyncpg.Connection) -> bytes | None:
            async with conn.transaction():
                await self._check(conn, expected, written)
                for partition, items in groups.items():
                    if copy[partition]:
                        if not await pg_copy.copy_rows(conn, items, table=self._table):
                            raise _KeyExists(partition)  # leaves the aborted transaction
                        continue
                    await self._upsert(conn, items)
                value: bytes | None = None if read is None else await conn.fetchval(sql.get_for_share, *read)
            return value

        while True:
            try:
                return await self._run(op, write=True)
            except _KeyExists as e:
                copy[e.partition] = False
                self._met_existing(e.partition)

    async def _write_items(
        self,
        items: Iterable[object],
        read: tuple[object, object] | None,
        expected: Sequence[KVExpectation] = (),
    ) -> bytes | None:
        """Check ``expected``, write ``items``, then read ``read`` (if asked), in ONE
        transaction: streamed while they are taken (:meth:`_stream_batch`) when at least
        :data:`INSERT_FIRST_MIN` come and not all of the first ones are of partitions held back
        (on an upsert streak, or of an expected key); else, or when the stream met an existing
        key, checked whole and written by :meth:`_write_batch`. The read's key is checked first:
        nothing may be written before a bad key is refused."""
        checked = None if read is None else check_key(*read)
        rest = iter(items)
        head = list(islice(rest, INSERT_FIRST_MIN))
        # Held back from the COPY: partitions on an upsert streak, and those of expected keys (they
        # exist, so a COPY of them would fail and be written again the other way).
        held = frozenset(chain(self._upsert_streaks, (p for p, _, _ in expected)))
        if len(head) == INSERT_FIRST_MIN and not (held and all(_partition_of(i) in held for i in head)):
            # the partitions held back are decided once per batch: a key given twice stays on one path
            stream = pg_copy.RowStream(chain(head, rest), hold=held)
            try:
                return await self._run(
                    functools.partial(self._stream_batch, stream, checked, expected), write=True
                )
            except _CopyRefused:
                rest = stream.rest()  # written again the other way, which finds the failing partition
            head = []
        return await super()._write_items(chain(head, rest), checked, expected)

    async def _stream_batch(
        self,
        stream: pg_copy.RowStream,
        read: tuple[bytes, bytes] | None,
        expected: Sequence[KVExpectation],
        conn: asyncpg.Connection,
    ) -> bytes | None:
        """One transaction: the COPY of ``stream``, the expectations checked, its held-back items
        upserted, the read ``FOR SHARE`` (as in :meth:`_write_batch`). :class:`_CopyRefused`
        when the COPY met an existing key or a key given twice (the transaction is rolled back:
        nothing of the batch stays).

        A transaction even when nothing is held back, though a COPY alone is atomic and would save
        two round trips (~3%): a cancelled write whose COPY data has all been sent would then still
        commit on the server, where a transaction's is rolled back when its connection closes."""
        sql = self._sql
        value: bytes | None = None
        try:
            async with conn.transaction():
                # The COPY first: only then are the keys the batch writes known, and it writes none
                # of the expected ones (their partitions are held back to be upserted after the check).
                if not await stream.copy(conn, table=self._table):
                    raise _CopyRefused("the batch's COPY met an existing or repeated key")  # rolled back
                held = check_items(stream.held)  # a key given twice keeps its last value
                await self._check(conn, expected, {(p, k) for p, k, _ in held})
                if held:
                    for partition, count in Counter(item[0] for item in held).items():
                        self._copy_first(partition, count)  # one batch of its streak, when not small
                    await self._upsert(conn, held)
                if read is not None:
                    value = await conn.fetchval(sql.get_for_share, *read)
        except BaseException as e:
            if e is stream.failure:  # an item or the iterable failed: the COPY was cut short mid-protocol
                conn.terminate()
            raise
        return value

    async def _upsert(self, conn: asyncpg.Connection, items: list[KVItem]) -> None:
        """Upsert ``items`` (no key twice) in one statement over arrays, one per column."""
        await conn.execute(self._sql.upsert_many, *(list(column) for column in zip(*items, strict=True)))

    def _copy_first(self, partition: bytes, count: int) -> bool:
        """Whether ``count`` items of ``partition`` are tried with COPY first (see :meth:`_write_batch`)."""
        if count < INSERT_FIRST_MIN:
            return False
        left = self._upsert_streaks.get(partition, 0)
        if left <= 1:
            self._upsert_streaks.pop(partition, None)
        else:
            self._upsert_streaks[partition] = left - 1
        return left == 0

    def _met_existing(self, partition: bytes) -> None:
        self._upsert_streaks[partition] = UPSERT_STREAK
        self._upsert_streaks.move_to_end(partition)
        if len(self._upsert_streaks) > STREAK_PARTITIONS:  # bounded: the least recent one is forgotten
            self._upsert_streaks.popitem(last=False)

    async def set_if(self, partition: bytes, key: bytes, value: bytes, expected: Expect) -> None:
        p, k = check_key(partition, key)
        v = as_bytes(value, "value")
        exp = check_expect(expected)
        sql = self._sql
        args: tuple[bytes, ...]
        if exp.kind == "absent":
            stmt, args = sql.insert_absent, (p, k, v)
        elif exp.kind == "equals":
            stmt, args = sql.update_equals, (p, k, v, exp.value)
        else:
            stmt, args = sql.update, (p, k, v)

        async def op(conn: asyncpg.Connection) -> int:
            return _rowcount(await conn.execute(stmt, *args))

        if await self._run(op, write=True, cas=True) != 1:
            raise PreconditionFailedError(precondition_message(exp))

    async def delete(self, partition: bytes, key: bytes) -> None:
        p, k = check_key(partition, key)
        sql = self._sql.delete

        async def op(conn: asyncpg.Connection) -> None:
            await conn.execute(sql, p, k)

        await self._run(op, write=True)

    async def scan(
        self, partition: bytes, start: bytes = b"", *, end: bytes | None = None, page_size: int = 1000
    ) -> AsyncIterator[KVEntry]:
        sql = self._sql

        async def read(
            p: bytes, cursor: bytes, inclusive: bool, stop: bytes | None, size: int
        ) -> list[KVEntry]:
            args: tuple[bytes | int, ...]
            if stop is None:
                stmt, args = (sql.page_from if inclusive else sql.page_after), (p, cursor, size)
            else:
                stmt, args = (sql.page_from_to if inclusive else sql.page_after_to), (p, cursor, size, stop)

            async def op(conn: asyncpg.Connection) -> list[KVEntry]:
                return [KVEntry(row[0], row[1]) for row in await conn.fetch(stmt, *args)]

            return await self._run(op, write=False)

        async for entry in paged_scan(partition, start, page_size, read, end):
            yield entry

    async def scan_ranges(
        self, ranges: Sequence[KeyRange], *, page_size: int = 1000
    ) -> AsyncIterator[tuple[int, KVEntry]]:
        stmt = self._sql.ranges_page

        async def read(todo: Sequence[IndexedRange], size: int) -> list[tuple[int, KVEntry]]:
            columns = [list(c) for c in zip(*todo, strict=True)]

            async def op(conn: asyncpg.Connection) -> list[tuple[int, KVEntry]]:
                rows = await conn.fetch(stmt, *columns, size)
                return [(row[0], KVEntry(row[1], row[2])) for row in rows]

            return await self._run(op, write=False)

        async for item in paged_range_scan(ranges, page_size, read):
            yield item

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            await asyncio.wait_for(self._pool.close(), 10)
        except (TimeoutError, *_DRIVER_ERRORS):
            self._pool.terminate()
