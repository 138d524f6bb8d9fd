"""PostgreSQL's bulk paths for :class:`~lakefs_core.kv.sql.SQLKVStore` batches: binary ``COPY``.

Two ways in, both ``COPY kv (partition_key, key, value) FROM STDIN (FORMAT binary)`` in the batch's
transaction. Against the ``unnest`` upsert, a COPY saves the speculative insertion per row on the
server and the array encoding on the client (1,000 rows: about 11 against 15 ms here). ``COPY``
inserts: a key that exists fails it and aborts the transaction; both ways say so, and the caller
runs the transaction again with those items upserted.

- :func:`copy_rows`: a checked list of one partition's items, encoded by asyncpg
  (``copy_records_to_table``). asyncpg sends nothing before 512 KiB are encoded, so the server
  starts once the client has finished.
- :class:`RowStream`: a batch streamed as it is taken from its iterable. The items are checked and
  framed here (PostgreSQL's binary COPY format: a header, per row a field count and each field's
  length and bytes, a trailer) and sent in chunks of :data:`FIRST_CHUNK_BYTES`, then
  :data:`CHUNK_BYTES`: the server reads and checks one chunk's rows while the client takes, checks
  and frames the next, and a lazy iterable's own work (a staging batch encodes each entry as it is
  taken) runs then too. A 1,000-entry staging batch, whose rows cost the server about twice what
  they cost the client, takes about a sixth less time than encoding it first (``bench/RESULTS.md``,
  stop 32).
  Items of a partition on an upsert streak (:attr:`RowStream.held`) are held back for the caller
  to upsert after the COPY; every item taken is kept (:attr:`RowStream.taken`), so a COPY that met
  an existing key (or a key given twice: a COPY refuses that too) can be written again the other
  way without taking the iterable twice.

Every other error is the driver's, translated by the store, which also closes the connection when
the error (or a cancellation, or an item refused mid-stream) left it mid-protocol.
"""

from __future__ import annotations

import struct
from collections.abc import AsyncIterator, Collection, Iterator
from itertools import chain

import asyncpg

from lakefs_core.errors import BadInputError
from lakefs_core.kv._common import checked_item
from lakefs_core.kv.base import KVItem

COLUMNS = ("partition_key", "key", "value")
# The server starts on the first chunk: small, so it starts early; later ones larger, so the
# client makes fewer sends (each wakes the server). 32 KiB chunks were the best of 8-128 KiB.
FIRST_CHUNK_BYTES = 8 * 1024
CHUNK_BYTES = 32 * 1024

_HEADER = b"PGCOPY\n\xff\r\n\x00" + struct.pack(">ii", 0, 0)  # signature, flags, no extension
_TRAILER = struct.pack(">h", -1)
_INT32 = struct.Struct(">i")
_ROW = struct.Struct(">h")  # a row's field count
_FIELDS = _ROW.pack(len(COLUMNS))


async def copy_rows(conn: asyncpg.Connection, items: list[KVItem], *, table: str) -> bool:
    """COPY ``items`` into ``table`` (the driver quotes the name itself) in the transaction ``conn``
    is in: True when written; False when a key existed, which aborts that transaction (the caller
    leaves it: it is rolled back, nothing of it stays)."""
    try:
        await conn.copy_records_to_table(table, records=items, columns=COLUMNS)
    except asyncpg.UniqueViolationError:
        return False
    return True


class RowStream:
    """A batch's items as binary COPY data, taken from ``items`` only as :meth:`chunks` is read.

    Items of a partition in ``hold`` go to :attr:`held` instead of the COPY. A bad item raises
    :class:`BadInputError` from :meth:`chunks`, which aborts the COPY (nothing of the batch is
    written); so does an error of the iterable itself. :attr:`failure` is what the chunks raised,
    so the store knows the connection was left mid-COPY."""

    def __init__(self, items: Iterator[object], hold: Collection[bytes] = ()) -> None:
        self._items = items
        self._hold = hold
        self.taken: list[KVItem] = []
        self.held: list[KVItem] = []
        self.failure: BaseException | None = None

    def rest(self) -> Iterator[object]:
        """Every item: those taken so far, then the ones not taken yet."""
        return chain(self.taken, self._items)

    async def chunks(self) -> AsyncIterator[bytes]:
        try:
            try:
                for chunk in self._frame():
                    yield chunk
            except struct.error:  # a length the format cannot carry (PostgreSQL's own limit is 1 GB)
                raise BadInputError(
                    "a key or value of 2 GiB or more cannot be stored", field="items"
                ) from None
        except BaseException as e:
            self.failure = e
            raise

    def _frame(self) -> Iterator[bytes]:
        # The hot loop of a bulk write: per item, type checks, a prefix per partition (the field
        # count and the partition field, framed once) and five pieces appended.
        pack = _INT32.pack
        prefixes: dict[bytes, bytes] = {}
        taken, held, hold = self.taken, self.held, self._hold
        out: list[bytes] = [_HEADER]
        size, limit = 0, FIRST_CHUNK_BYTES
        for item in self._items:
            if type(item) is tuple and len(item) == 3:
                p, k, v = item
                if type(p) is not bytes or type(k) is not bytes or type(v) is not bytes or not p or not k:
                    p, k, v = checked_item(item)
            else:
                p, k, v = checked_item(item)
            taken.append((p, k, v))
            if hold and p in hold:
                held.append((p, k, v))
                continue
            prefix = prefixes.get(p)
            if prefix is None:
                prefix = prefixes[p] = _FIELDS + pack(len(p)) + p
            out += (prefix, pack(len(k)), k, pack(len(v)), v)
            size += len(prefix) + len(k) + len(v) + 8
            if size >= limit:
                yield b"".join(out)
                out, size, limit = [], 0, CHUNK_BYTES
        out.append(_TRAILER)
        yield b"".join(out)

    async def copy(self, conn: asyncpg.Connection, *, table: str) -> bool:
        """Stream the batch into ``table`` in the transaction ``conn`` is in: True when written;
        False when a key existed or was given twice, which aborts that transaction."""
        try:
            await conn.copy_to_table(table, source=self.chunks(), columns=COLUMNS, format="binary")
        except asyncpg.UniqueViolationError:
            return False
        return True
