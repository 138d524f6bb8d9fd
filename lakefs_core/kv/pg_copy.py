"""PostgreSQL's bulk path for :class:`~lakefs_core.kv.sql.SQLKVStore` batches: binary ``COPY``.

Items of one partition expected to be new keys are written with ``COPY kv (partition_key, key,
value) FROM STDIN (FORMAT binary)`` (asyncpg's ``copy_records_to_table``) in the batch's
transaction. Against the ``unnest`` upsert it saves the speculative insertion per row on the server
and the array encoding on the client (1,000 rows: about 11 against 15 ms here). ``COPY`` inserts: a
key that exists fails it and aborts the transaction, :func:`copy_rows` says so, and the caller
runs the transaction again with those items upserted. Every other error is the driver's,
translated by the store, which also closes the connection when the error (or a cancellation) left
it mid-protocol.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import asyncpg

if TYPE_CHECKING:
    from lakefs_core.kv.base import KVItem

COLUMNS = ("partition_key", "key", "value")


async def copy_rows(conn: asyncpg.Connection, items: list[KVItem], *, table: str) -> bool:
    """COPY ``items`` into ``table`` (the driver quotes the name itself) in the transaction ``conn``
    is in: True when written; False when a key existed, which aborts that transaction (the caller
    leaves it: it is rolled back, nothing of it stays)."""
    try:
        await conn.copy_records_to_table(table, records=items, columns=COLUMNS)
    except asyncpg.UniqueViolationError:
        return False
    return True
