"""The SQL implementation of :mod:`lakefs_core.service.lease`'s contract: :class:`SQLLease`, a row
``(name PK, holder, expires_at)`` of a SQL table (:func:`lease_table`), one conditional statement
per operation (the module docstring of :mod:`lakefs_core.service.lease` states the contract and
the statements). A module of its own so that the KV lease's users (``lakefs-gc`` commands, the GC
daemon) never import SQLAlchemy."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import BigInteger, Column, MetaData, String, Table, delete, or_, select, update
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from lakefs_core.errors import LakeFSError
from lakefs_core.service.lease import DEFAULT_TTL, LeaseState, _Contender, from_us, to_us
from lakefs_core.sqlengine import run_transaction, translate_db_error, upsert_insert

__all__ = ["SQLLease", "lease_table"]


def lease_table(metadata: MetaData, name: str = "leases", *, key_column: str = "name") -> Table:
    """A table :class:`SQLLease` can use (the mirrors database's is ``leases`` keyed by ``region``)."""
    return Table(
        name,
        metadata,
        Column(key_column, String(255), primary_key=True),
        Column("holder", String(256), nullable=False),
        Column("expires_at", BigInteger, nullable=False),
    )


class SQLLease(_Contender):
    """A lease in a SQL table whose columns are (name primary key, ``holder``, ``expires_at`` in
    integer microseconds); the name column is the table's primary key (``region`` in the mirrors
    database's ``leases`` table). ``where`` names the database in error messages (no password)."""

    def __init__(
        self,
        engine: AsyncEngine,
        table: Table,
        name: str,
        holder: str,
        ttl: float = DEFAULT_TTL,
        *,
        where: str = "lease database",
        extra: Mapping[str, str] | None = None,
    ) -> None:
        (key,) = table.primary_key.columns
        limits = (_length(key.type, 255), _length(table.c.holder.type, 256))
        super().__init__(name, holder, ttl, extra=extra, limits=limits)
        self._engine = engine
        self._table = table
        self._key = key
        self._where = where

    def _translate(self, e: BaseException, *, connecting: bool, write: bool) -> LakeFSError:
        return translate_db_error(e, self._where, connecting=connecting, write=write, url=self._engine.url)

    async def _run(self, stmt: Any, *, write: bool, scalar: bool) -> Any:
        async def op(conn: AsyncConnection) -> Any:
            result = await conn.execute(stmt)
            return result.scalar_one_or_none() if scalar else int(result.rowcount)

        return await run_transaction(self._engine, op, write=write, translate=self._translate)

    async def try_acquire(self, now: datetime | float | None = None) -> bool:
        at = to_us(now)
        t = self._table
        ins = upsert_insert(self._engine.dialect.name, t).values(
            {self._key.name: self._name, "holder": self._holder, "expires_at": self._until(at)}
        )
        stmt = ins.on_conflict_do_update(
            index_elements=[self._key],
            set_={"holder": ins.excluded.holder, "expires_at": ins.excluded.expires_at},
            where=or_(t.c.expires_at <= at, t.c.holder == self._holder),
        ).returning(t.c.holder)
        return self._observe(await self._run(stmt, write=True, scalar=True) == self._holder)

    async def renew(self, now: datetime | float | None = None) -> bool:
        at = to_us(now)
        t = self._table
        stmt = (
            update(t)
            .where(self._key == self._name, t.c.holder == self._holder, t.c.expires_at > at)
            .values(expires_at=self._until(at))
        )
        return self._observe(await self._run(stmt, write=True, scalar=False) == 1)

    async def release(self) -> bool:
        t = self._table
        stmt = delete(t).where(self._key == self._name, t.c.holder == self._holder)
        return self._released(await self._run(stmt, write=True, scalar=False) == 1)

    async def current(self) -> LeaseState | None:
        t = self._table
        stmt = select(t.c.holder, t.c.expires_at).where(self._key == self._name)

        async def op(conn: AsyncConnection) -> LeaseState | None:
            row = (await conn.execute(stmt)).first()
            return None if row is None else LeaseState(self._name, row[0], from_us(int(row[1])))

        return await run_transaction(self._engine, op, write=False, translate=self._translate)


def _length(column_type: Any, default: int) -> int:
    length = getattr(column_type, "length", None)
    return length if isinstance(length, int) and length > 0 else default
