"""SQLite KV store (``sqlite:///path``, the embedded default) on the standard ``sqlite3`` module.

Layout (spec section 6), created on demand in the DDL SQLAlchemy emitted for earlier versions, so a
file made by one works unchanged::

    kv(partition_key BLOB, key BLOB, value BLOB NOT NULL, PRIMARY KEY(partition_key, key))

Why not SQLAlchemy (nor for PostgreSQL, :mod:`.sql`): every statement here is a fixed string, and
importing SQLAlchemy took ~0.13 s of the ~0.4 s a ``lakefs-core`` process spent starting up
(``bench/RESULTS.md``). What SQLAlchemy and aiosqlite did for SQLite is done here in a few lines:

- **Connections.** Each lives in a thread of its own (a one-thread executor: a ``sqlite3``
  connection stays in the thread that opened it); at most ``pool_size`` are in use at once, and an
  idle one is reused. A read is ONE call into that thread; writes go through the store's ONE
  writer (per process, :mod:`.sqlite_writer`), which runs the writes queued when it is free as ONE
  group on a pooled connection, in one call: ``BEGIN IMMEDIATE``, each operation in its own
  ``SAVEPOINT``, ``COMMIT``. Concurrent writes thus share one transaction and one fsync of the WAL
  (``synchronous`` stays FULL: an acknowledged write is on disk); reads never wait for the writer
  (WAL), only for a free connection. One thread hop per read or group, and a caller cancelled
  mid-operation never leaves a transaction open (the call runs to its end; the next operation on
  that connection queues behind it); a write cancelled while still queued is dropped unrun.
- **Opening.** The file and its missing directories are created owner-only
  (:func:`~lakefs_core.sqlite_files.prepare_database_file`); every connection sets the busy
  timeout and WAL journalling (:func:`~lakefs_core.sqlite_files.opening_pragmas`), so several
  processes share the file and writers queue on SQLite's lock for up to ``busy_timeout``.
  ``sqlite:///:memory:`` is refused (each connection would see its own database).

Operations, as :mod:`.sql`'s on PostgreSQL, each write inside its savepoint of its group's
transaction (so each is atomic alone, ordered as queued, and acknowledged only after its group's
``COMMIT``; one that raises is rolled back to its savepoint and fails alone, with the error it
would raise in a transaction of its own; a group failing as a whole, at ``BEGIN IMMEDIATE`` or
``COMMIT``, fails every operation of it, see :mod:`.sqlite_writer`):

- ``set`` = upsert (``INSERT ... ON CONFLICT (partition_key, key) DO UPDATE``), one statement;
- ``set_many`` = multi-row upserts of up to :func:`sqlite_rows` rows each, in its savepoint:
  atomic; ``set_many_then_get`` reads the key after them, before the ``COMMIT``, with the write
  lock held, so no writer can change it between the read and the commit;
- ``set_if(ABSENT)`` = ``INSERT ... ON CONFLICT DO NOTHING``; ``set_if(EXISTS)`` = ``UPDATE ...
  WHERE partition_key = ? AND key = ?`` (``AND value = ?`` for ``equals``): one statement each,
  success iff one row changed;
- ``scan`` = keyset pagination, one ``SELECT`` per page (``key >= start``, then ``key > last``),
  nothing held between pages. BLOBs compare bytewise (memcmp), matching the KV contract.

Errors are translated at this edge (``raise ... from e``): the file not creatable or openable ->
:class:`UnreachableError`; "database is locked" after the busy timeout -> :class:`TransientError`;
a full disk (SQLITE_FULL, or "disk I/O error" with no space left) -> :class:`StorageFullError`;
an integrity error -> :class:`PreconditionFailedError` in ``set_if``, :class:`ConflictError`
elsewhere; "disk I/O error" during a write -> :class:`TransientError` with an unknown outcome (the
WAL may hold the commit), during a read -> :class:`UnreachableError`; anything else ->
:class:`LakeFSError` naming the database. Nothing is retried here: callers' bounded loops decide.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import AsyncIterator, Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from functools import cache, lru_cache
from itertools import chain
from pathlib import Path
from typing import TypeVar

from lakefs_core.dberrors import driver_reason
from lakefs_core.errors import (
    BadInputError,
    ConflictError,
    LakeFSError,
    NotFoundError,
    PreconditionFailedError,
    StorageFullError,
    TransientError,
    UnreachableError,
)
from lakefs_core.kv._common import (
    IndexedRange,
    TransactionalBatches,
    as_bytes,
    check_expect,
    check_held,
    check_key,
    closed_error,
    paged_range_scan,
    paged_scan,
    precondition_message,
)
from lakefs_core.kv.base import Expect, KeyRange, KVEntry, KVExpectation, KVItem
from lakefs_core.kv.sqlite_writer import GroupWriter
from lakefs_core.sqlite_files import (
    execute_pragma,
    is_busy,
    is_disk_full,
    opening_pragmas,
    prepare_database_file,
    sqlite_database,
)

T = TypeVar("T")

DEFAULT_TABLE = "kv"
DEFAULT_BUSY_TIMEOUT_S = 30.0
DEFAULT_POOL_SIZE = 10
# Rows per multi-row INSERT, at most: a batch of 1,000 staged entries is one statement (333 or
# 1,000 rows per statement took the same time in SQLite itself; fewer statements cost less Python).
SQLITE_MAX_ROWS = 1000
_UPSERT = "ON CONFLICT (partition_key, key) DO UPDATE SET value = excluded.value"


@cache
def sqlite_rows() -> int:
    """Rows per multi-row INSERT on this SQLite library: three bound values per row, within its
    SQLITE_LIMIT_VARIABLE_NUMBER (999 in builds before 3.32, 32,766 since)."""
    with contextlib.closing(sqlite3.connect(":memory:")) as conn:
        limit = conn.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER)
    return max(1, min(SQLITE_MAX_ROWS, limit // 3))


@lru_cache(maxsize=64)
def _upsert_rows(table: str, rows: int) -> str:
    """The upsert of ``rows`` rows (one string per size, so sqlite3 reuses its prepared statement)."""
    return (
        f"INSERT INTO {table} (partition_key, key, value) VALUES {', '.join(['(?, ?, ?)'] * rows)} {_UPSERT}"
    )


def quote_identifier(name: str) -> str:
    """``name`` as a quoted SQL identifier (the table name is configuration, never data)."""
    if not name or "\0" in name:
        raise BadInputError("must be non-empty, without NUL", field="table")
    return '"' + name.replace('"', '""') + '"'


@dataclass(frozen=True)
class _Statements:
    create: str
    get: str
    set: str
    insert_absent: str
    update: str
    update_equals: str
    delete: str
    scan_from: str
    scan_after: str
    scan_from_to: str
    scan_after_to: str
    scan_range: str

    @classmethod
    def of(cls, table: str) -> _Statements:
        where = "WHERE partition_key = ? AND key = ?"
        columns = f"{table} (partition_key, key, value) VALUES (?, ?, ?)"
        scan = f"SELECT key, value FROM {table} WHERE partition_key = ? AND key {{}} ? ORDER BY key LIMIT ?"
        bounded = (
            f"SELECT key, value FROM {table} WHERE partition_key = ? AND key {{}} ? AND key < ? "
            "ORDER BY key LIMIT ?"
        )
        return cls(
            create=(
                f"\nCREATE TABLE IF NOT EXISTS {table} (\n\tpartition_key BLOB NOT NULL, \n"
                '\t"key" BLOB NOT NULL, \n\tvalue BLOB NOT NULL, \n'
                '\tPRIMARY KEY (partition_key, "key")\n)\n\n'
            ),
            get=f"SELECT value FROM {table} {where}",
            set=f"INSERT INTO {columns} {_UPSERT}",
            insert_absent=f"INSERT INTO {columns} ON CONFLICT (partition_key, key) DO NOTHING",
            update=f"UPDATE {table} SET value = ? {where}",
            update_equals=f"UPDATE {table} SET value = ? {where} AND value = ?",
            delete=f"DELETE FROM {table} {where}",
            scan_from=scan.format(">="),
            scan_after=scan.format(">"),
            scan_from_to=bounded.format(">="),
            scan_after_to=bounded.format(">"),
            scan_range=(
                f"SELECT key, value FROM {table} WHERE partition_key = ? AND key >= ? AND key < ? "
                "ORDER BY key LIMIT ?"
            ),
        )


@dataclass(frozen=True)
class _Connection:
    """A ``sqlite3`` connection and the one thread it is used in."""

    db: sqlite3.Connection
    thread: ThreadPoolExecutor


class SQLiteKVStore(TransactionalBatches):
    """A :class:`~lakefs_core.kv.base.KVStore` in one SQLite file. Open with :meth:`open`."""

    def __init__(
        self,
        path: str,
        *,
        table: str = DEFAULT_TABLE,
        busy_timeout: float = DEFAULT_BUSY_TIMEOUT_S,
        pool_size: int = DEFAULT_POOL_SIZE,
        pragmas: Sequence[str] = (),
    ) -> None:
        self._path = path
        self._where = f"KV database sqlite:///{path}"
        self._table = quote_identifier(table)
        self._sql = _Statements.of(self._table)
        self._busy_timeout = busy_timeout
        self._pragmas = opening_pragmas(busy_timeout, tuple(pragmas))
        self._slots = asyncio.Semaphore(pool_size)
        self._idle: list[_Connection] = []
        self._closed = False
        self._writer = GroupWriter(self._on_connection, self._translate_write)

    @classmethod
    async def open(
        cls,
        url: str,
        *,
        table: str = DEFAULT_TABLE,
        create: bool = True,
        busy_timeout: float = DEFAULT_BUSY_TIMEOUT_S,
        pool_size: int = DEFAULT_POOL_SIZE,
        pragmas: Sequence[str] = (),
    ) -> SQLiteKVStore:
        """Open the file ``url`` names (see :func:`~lakefs_core.sqlite_files.sqlite_database`),
        creating it and its directories, and the table unless ``create=False``. ``pragmas``
        (``"name = value"``) run on every new connection after the busy timeout and WAL."""
        path = sqlite_database(url)
        prepare_database_file(Path(path))
        store = cls(path, table=table, busy_timeout=busy_timeout, pool_size=pool_size, pragmas=pragmas)
        if create:
            try:
                await store.create_table()
            except BaseException:
                await store.close()
                raise
        return store

    async def __aenter__(self) -> SQLiteKVStore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- connections ----------------------------------------------------------------------------

    def _open_in_thread(self) -> sqlite3.Connection:
        db = sqlite3.connect(self._path, timeout=self._busy_timeout, isolation_level=None)
        try:
            cursor = db.cursor()
            for pragma in self._pragmas:
                execute_pragma(cursor, pragma, self._busy_timeout)
            cursor.close()
        except BaseException:
            db.close()
            raise
        return db

    async def _connect(self) -> _Connection:
        thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="lakefs-sqlite")
        opening = thread.submit(self._open_in_thread)
        try:
            db = await asyncio.wrap_future(opening)
        except BaseException as e:
            # Cancelled, the opening still finishes in its thread: close what it opened there.
            opening.add_done_callback(_close_opened)
            thread.shutdown(wait=False)
            if isinstance(e, sqlite3.Error | OSError):
                raise self._translate(e, connecting=True, write=False, cas=False) from e
            raise
        return _Connection(db, thread)

    async def _on_connection(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """``fn(db)`` in a pooled connection's thread (one call, one hop); its errors as raised."""
        async with self._slots:
            conn = self._idle.pop() if self._idle else await self._connect()
            try:
                result = await asyncio.wrap_future(conn.thread.submit(fn, conn.db))
            except (sqlite3.Error, OSError) as e:
                await self._release(
                    conn, broken=not isinstance(e, sqlite3.IntegrityError | sqlite3.OperationalError)
                )
                raise
            except BaseException:
                # Cancelled: the call runs to its end in the connection's thread, and anything
                # submitted there later waits for it, so the connection can be used again.
                await self._release(conn, broken=False)
                raise
            await self._release(conn, broken=False)
            return result

    async def _read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """``fn(db)`` (statements that only read) on a pooled connection; errors translated."""
        if self._closed:
            raise closed_error("SQLite")
        try:
            return await self._on_connection(fn)
        except (sqlite3.Error, OSError) as e:
            raise self._translate(e, connecting=False, write=False, cas=False) from e

    async def _write(self, fn: Callable[[sqlite3.Connection], T], *, cas: bool = False, size: int = 0) -> T:
        """``fn(db)`` in a group of the store's writer (:mod:`.sqlite_writer`); errors translated."""
        if self._closed:
            raise closed_error("SQLite")
        return await self._writer.write(fn, cas=cas, size=size)

    def _translate_write(self, e: BaseException, cas: bool) -> LakeFSError:
        return self._translate(e, connecting=False, write=True, cas=cas)

    async def _release(self, conn: _Connection, *, broken: bool) -> None:
        if broken or self._closed:
            await _close(conn)
        else:
            self._idle.append(conn)

    def _translate(self, e: BaseException, *, connecting: bool, write: bool, cas: bool) -> LakeFSError:
        reason = driver_reason(e)
        text = reason.lower()
        if is_disk_full(e, text, self._path):
            return StorageFullError(f"{self._where}: no space left: {reason}")
        if is_busy(text):
            return TransientError(f"{self._where} is busy (locked by another writer): {reason}")
        if connecting:
            return UnreachableError(f"cannot connect to {self._where}: {reason}")
        if isinstance(e, sqlite3.IntegrityError):
            return (
                PreconditionFailedError(f"{self._where}: {reason}")
                if cas
                else ConflictError(f"{self._where}: {reason}")
            )
        if write and "disk i/o error" in text:  # the WAL may hold the commit: never "nothing happened"
            return TransientError(f"{self._where}: I/O error during a write; outcome unknown: {reason}")
        if isinstance(e, OSError) or "unable to open database file" in text or "disk i/o error" in text:
            return UnreachableError(f"{self._where}: {reason}")
        return LakeFSError(f"{self._where}: {reason}")

    # -- schema ---------------------------------------------------------------------------------

    async def create_table(self) -> None:
        """``CREATE TABLE IF NOT EXISTS`` (a concurrent creator is waited for by the busy timeout)."""
        sql = self._sql.create

        def create(db: sqlite3.Connection) -> None:
            db.execute(sql)

        await self._write(create)

    # -- KVStore --------------------------------------------------------------------------------

    async def get(self, partition: bytes, key: bytes) -> bytes:
        params = check_key(partition, key)
        sql = self._sql.get

        def read(db: sqlite3.Connection) -> bytes | None:
            row = db.execute(sql, params).fetchone()
            return None if row is None else bytes(row[0])

        found = await self._read(read)
        if found is None:
            raise NotFoundError("key not found in KV partition")
        return found

    async def set(self, partition: bytes, key: bytes, value: bytes) -> None:
        p, k = check_key(partition, key)
        params = (p, k, as_bytes(value, "value"))
        sql = self._sql.set

        def write(db: sqlite3.Connection) -> None:
            db.execute(sql, params)

        await self._write(write, size=len(params[2]))

    async def _write_batch(
        self, batch: list[KVItem], read: tuple[bytes, bytes] | None, expected: Sequence[KVExpectation] = ()
    ) -> bytes | None:
        """``expected`` checked, ``batch`` (if any), then ``read``'s value (if asked), in ONE
        savepoint of a group's transaction: the write lock is taken first (``BEGIN IMMEDIATE``)
        and held until the commit, so no other writer comes between the checks and the batch."""
        step = sqlite_rows()
        pieces = [
            (_upsert_rows(self._table, len(rows)), tuple(chain.from_iterable(rows)))
            for rows in (batch[i : i + step] for i in range(0, len(batch), step))
        ]
        get = self._sql.get

        def write_then_read(db: sqlite3.Connection) -> bytes | None:
            if expected:
                found: dict[tuple[bytes, bytes], bytes] = {}
                for p, k, _ in expected:
                    row = db.execute(get, (p, k)).fetchone()
                    if row is not None:
                        found[(p, k)] = bytes(row[0])
                check_held(found, expected)  # raises: rolled back, nothing written
            for sql, values in pieces:
                db.execute(sql, values)
            if read is None:
                return None
            row = db.execute(get, read).fetchone()
            return None if row is None else bytes(row[0])

        return await self._write(write_then_read, size=sum(len(v) for _, _, v in batch))

    async def set_if(self, partition: bytes, key: bytes, value: bytes, expected: Expect) -> None:
        p, k = check_key(partition, key)
        v = as_bytes(value, "value")
        exp = check_expect(expected)
        sql: str
        params: tuple[bytes, ...]
        if exp.kind == "absent":
            sql, params = self._sql.insert_absent, (p, k, v)
        elif exp.kind == "equals":
            assert exp.value is not None
            sql, params = self._sql.update_equals, (v, p, k, exp.value)
        else:
            sql, params = self._sql.update, (v, p, k)

        def write(db: sqlite3.Connection) -> int:
            return db.execute(sql, params).rowcount

        if await self._write(write, cas=True, size=len(v)) != 1:
            raise PreconditionFailedError(precondition_message(exp))

    async def delete(self, partition: bytes, key: bytes) -> None:
        params = check_key(partition, key)
        sql = self._sql.delete

        def write(db: sqlite3.Connection) -> None:
            db.execute(sql, params)

        await self._write(write)

    async def scan(
        self, partition: bytes, start: bytes = b"", *, end: bytes | None = None, page_size: int = 1000
    ) -> AsyncIterator[KVEntry]:
        stmts = self._sql

        async def read(
            p: bytes, cursor: bytes, inclusive: bool, stop: bytes | None, size: int
        ) -> list[KVEntry]:
            sql: str
            params: tuple[bytes | int, ...]
            if stop is None:
                sql, params = (stmts.scan_from if inclusive else stmts.scan_after), (p, cursor, size)
            else:
                sql = stmts.scan_from_to if inclusive else stmts.scan_after_to
                params = (p, cursor, stop, size)

            def page(db: sqlite3.Connection) -> list[KVEntry]:
                return [KVEntry(bytes(k), bytes(v)) for k, v in db.execute(sql, params).fetchall()]

            return await self._read(page)

        async for entry in paged_scan(partition, start, page_size, read, end):
            yield entry

    async def scan_ranges(
        self, ranges: Sequence[KeyRange], *, page_size: int = 1000
    ) -> AsyncIterator[tuple[int, KVEntry]]:
        sql = self._sql.scan_range

        async def read(todo: Sequence[IndexedRange], size: int) -> list[tuple[int, KVEntry]]:
            def page(db: sqlite3.Connection) -> list[tuple[int, KVEntry]]:
                # one hop to the connection's thread for the whole page: a statement per range
                # costs microseconds here, the hop tens of them
                out: list[tuple[int, KVEntry]] = []
                for index, p, start, end in todo:
                    rows = db.execute(sql, (p, start, end, size - len(out))).fetchall()
                    out.extend((index, KVEntry(bytes(k), bytes(v))) for k, v in rows)
                    if len(out) >= size:
                        break
                return out

            return await self._read(page)

        async for item in paged_range_scan(ranges, page_size, read):
            yield item

    async def close(self) -> None:
        """Close every idle connection now; one in use is closed when its operation ends (writes
        queued before the close still run, in their groups)."""
        if self._closed:
            return
        self._closed = True
        idle, self._idle = self._idle, []
        for conn in idle:
            await _close(conn)


async def _close(conn: _Connection) -> None:
    """Close the connection in its thread, then let the thread end."""
    try:
        with contextlib.suppress(sqlite3.Error):
            await asyncio.wrap_future(conn.thread.submit(conn.db.close))
    finally:
        conn.thread.shutdown(wait=False)


def _close_opened(opening: Future[sqlite3.Connection]) -> None:
    if not opening.cancelled() and opening.exception() is None:
        opening.result().close()
