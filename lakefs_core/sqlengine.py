"""One way to open SQLAlchemy async engines on SQLite (aiosqlite) or PostgreSQL (asyncpg).

Used by the mirrors database and the SQL lease (the KV stores go without SQLAlchemy: SQLite files
in :mod:`lakefs_core.kv.sqlite`, PostgreSQL in :mod:`lakefs_core.kv.sql` on asyncpg). SQLite
gets WAL journalling and a busy timeout on every connection (:mod:`lakefs_core.sqlite_files`), so
several processes can share one file; PostgreSQL gets a bounded, recycled pool. URLs are never
echoed in errors (they may carry a password).

:func:`run_transaction` is THE way those users run a unit of work: one transaction on a fresh pooled
connection, no retries (callers' bounded loops know what is idempotent), database errors translated
at this edge (``raise ... from e``; the table is :func:`lakefs_core.dberrors.translate_failure`,
shared with the PostgreSQL KV store) and errors of the project's tree passed through unchanged.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, Protocol, TypeVar

from sqlalchemy import event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, IntegrityError, SQLAlchemyError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine
from sqlalchemy.sql.expression import TableClause

from lakefs_core.dberrors import PG_DISK_FULL, driver_reason, sqlstate, translate_failure
from lakefs_core.errors import LakeFSError, StorageFullError, TransientError, UnreachableError
from lakefs_core.kv.schemes import PG_SCHEMES
from lakefs_core.redact import quote_sql_userinfo
from lakefs_core.sqlite_files import (
    SQLITE_SCHEMES,
    execute_pragma,
    is_busy,
    is_disk_full,
    opening_pragmas,
    prepare_database_file,
)

T = TypeVar("T")


def normalize_sql_url(url: str) -> URL:
    """Parse ``url`` and point it at the async driver. Raises :class:`ValueError` (no URL in it).

    A password written with a raw ``@`` (``user:p@ss@host``) is taken whole, as libpq does; SQLAlchemy
    alone would split it at the first ``@`` and take the rest for the host (see :mod:`lakefs_core.redact`).
    """
    try:
        url.encode()  # a lone surrogate (environment bytes the OS could not decode): refused
        parsed = make_url(quote_sql_userinfo(url))
    except (ArgumentError, ValueError):  # UnicodeEncodeError is a ValueError
        # ``from None``: a mis-split URL can put part of a password into the parser's message.
        raise ValueError("not a valid SQL database URL") from None
    driver = parsed.drivername.lower()
    if driver in SQLITE_SCHEMES:
        database = parsed.database or ""
        if database in ("", ":memory:") or database.startswith("file::memory:"):
            raise ValueError("in-memory SQLite cannot be shared between pooled connections; use a file")
        return parsed.set(drivername="sqlite+aiosqlite")
    if driver in PG_SCHEMES:
        return parsed.set(drivername="postgresql+asyncpg")
    raise ValueError(
        "unsupported SQL URL scheme (use sqlite:///path, sqlite+aiosqlite:///path, "
        "postgresql://... or postgresql+asyncpg://...)"
    )


def upsert_insert(dialect: str, table: TableClause) -> Any:
    """An ``INSERT`` into ``table`` that has ``on_conflict_do_update``/``_do_nothing`` on ``dialect``
    (the engine's ``dialect.name``: ``"postgresql"``, else SQLite's).

    The dialect's package is imported here, not at module level: the engine of that dialect has
    loaded it already, and a SQLite-only process (the CLI's embedded default) then never pays for
    importing PostgreSQL's dialect and asyncpg adapter.
    """
    if dialect == "postgresql":
        from sqlalchemy.dialects.postgresql import insert as pg_insert

        return pg_insert(table)
    from sqlalchemy.dialects.sqlite import insert as sqlite_insert

    return sqlite_insert(table)


def create_sql_engine(
    url: URL,
    *,
    busy_timeout: float = 30.0,
    connect_timeout: float = 10.0,
    pool_size: int = 5,
    max_overflow: int = 5,
    sqlite_pragmas: Sequence[str] = (),
) -> AsyncEngine:
    """An engine for a normalised ``url``; SQLite's parent directory is created if needed."""
    kwargs: dict[str, Any] = {"hide_parameters": True, "pool_size": pool_size, "max_overflow": max_overflow}
    if url.drivername.startswith("sqlite"):
        prepare_database_file(Path(url.database or ""))
        # sqlite3's own "timeout" is the busy timeout too; keep it in line with the PRAGMA. A local
        # file never goes stale, so no per-checkout ping (it costs a round trip per operation).
        kwargs["connect_args"] = {"timeout": busy_timeout}
        kwargs["pool_timeout"] = max(30.0, busy_timeout)
    else:
        kwargs.update(
            pool_pre_ping=True,
            pool_recycle=1800,
            pool_timeout=30,
            connect_args={"timeout": connect_timeout},
        )
    engine = create_async_engine(url, **kwargs)
    if engine.dialect.name == "sqlite":
        pragmas = opening_pragmas(busy_timeout, tuple(sqlite_pragmas))

        @event.listens_for(engine.sync_engine, "connect")
        def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
            cursor = dbapi_connection.cursor()
            try:
                for pragma in pragmas:
                    execute_pragma(cursor, pragma, busy_timeout)
            finally:
                cursor.close()

    return engine


def db_reason(e: BaseException) -> str:
    """A short description of a database error naming the driver's exception class."""
    inner: BaseException = e.orig if isinstance(e, DBAPIError) and e.orig is not None else e
    # SQLAlchemy's asyncpg adapter wraps the driver's exception; name the driver's class.
    if inner.__cause__ is not None and type(inner).__module__.startswith("sqlalchemy"):
        inner = inner.__cause__
    return driver_reason(inner)


def translate_db_error(
    e: BaseException,
    where: str,
    *,
    connecting: bool,
    write: bool,
    cas: bool = False,
    url: URL | None = None,
) -> LakeFSError:
    """Map a database failure to the project's error tree (the caller raises it ``from e``).

    A full disk is :class:`StorageFullError` (never retried). Connection failures are unreachable
    (retryable); a lost connection or timeout during a write is a transient error whose outcome is
    unknown (never a reason to delete anything); integrity violations are preconditions in
    compare-and-swap statements (``cas``) and conflicts otherwise. ``url`` is the engine's URL: for a
    SQLite file it tells a full disk behind SQLite's "disk I/O error".
    """
    reason = db_reason(e)
    text = reason.lower()
    state = sqlstate(e) or ""
    db_path = url.database if url is not None and url.drivername in SQLITE_SCHEMES else None
    # First: a full disk is neither unreachable nor transient, whatever else the driver says.
    if state == PG_DISK_FULL or is_disk_full(e, text, db_path):
        return StorageFullError(f"{where}: no space left: {reason}")
    if is_busy(text):
        return TransientError(f"{where} is busy (locked by another writer): {reason}")
    disconnect = (isinstance(e, DBAPIError) and e.connection_invalidated) or isinstance(e, OSError)
    err = translate_failure(
        e,
        where,
        reason,
        state=state,
        connecting=connecting,
        write=write,
        cas=cas,
        disconnect=disconnect,
        integrity=isinstance(e, IntegrityError),
        exhausted=isinstance(e, PoolTimeoutError),
    )
    if err is not None:
        return err
    if "unable to open database file" in text or "disk i/o error" in text:
        return UnreachableError(f"{where}: {reason}")
    return LakeFSError(f"{where}: {reason}")


# The errors a driver raises for database trouble (SQLAlchemy's tree, socket errors, timeouts).
DB_ERRORS = (SQLAlchemyError, OSError, TimeoutError)


class Translate(Protocol):
    """Maps a database failure to the error tree (e.g. :func:`translate_db_error` with ``where`` bound)."""

    def __call__(self, e: BaseException, *, connecting: bool, write: bool) -> LakeFSError: ...


async def run_transaction(
    engine: AsyncEngine,
    op: Callable[[AsyncConnection], Awaitable[T]],
    *,
    write: bool,
    translate: Translate,
    on_integrity: Callable[[IntegrityError], LakeFSError] | None = None,
) -> T:
    """Run ``op`` in ONE transaction on a fresh pooled connection and return its result.

    Committed when ``op`` returns, rolled back when it raises. Never retried here. A failure to
    connect is ``translate(e, connecting=True, write=write)``; a database error while running ``op``
    is ``on_integrity(e)`` for an integrity violation when given, else ``translate(e,
    connecting=False, write=write)`` (``write``: the outcome of a lost write is unknown, see
    :func:`translate_db_error`). A :class:`LakeFSError` raised by ``op`` itself propagates unchanged.
    """
    conn = engine.connect()
    try:
        await conn.start()
    except DB_ERRORS as e:
        raise translate(e, connecting=True, write=write) from e
    try:
        async with conn.begin():
            return await op(conn)
    except LakeFSError:
        raise
    except IntegrityError as e:
        if on_integrity is not None:
            raise on_integrity(e) from e
        raise translate(e, connecting=False, write=write) from e
    except DB_ERRORS as e:
        raise translate(e, connecting=False, write=write) from e
    finally:
        # A broken connection may fail to close cleanly; the pool has already discarded it.
        with contextlib.suppress(*DB_ERRORS):
            await conn.close()
