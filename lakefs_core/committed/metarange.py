"""Reading a metarange: its ranges, point lookups, seek-ge and ordered iteration.

A :class:`MetaRange` is loaded once from its table (records keyed by each range's max key; identity
= ASCII hex range id; data = ``RangeData``). The empty id ``""`` is the empty tree (the first commit
of a repository). Finding the range that may hold ``k`` is a bisect for the first max key >= ``k``
followed by a ``k >= min_key`` check; only that range's table is opened.

Point lookups that hit tables already open in RAM never suspend (:meth:`MetaRange.get_cached`,
which :meth:`MetaRange.get` tries first), so the warm path costs a bisect over the ranges, a probe of
the table's cached records and the envelope's decoding. Where the ``_fastpath`` extension is built
that path is one C call (``MetaRangeCore``, the base class of :class:`MetaRange`) with the same
answers and errors as :class:`PureMetaRange`, the pure-Python twin (``LAKEFS_PURE_PYTHON=1``).

A ``MetaRange`` keeps direct references to the tables it has opened (so they stay in memory while
it lives): use one per operation or request.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING, Literal, Self

from lakefs_core.committed.addresses import metarange_ranges
from lakefs_core.committed.model import RangeInfo, ValueRecord
from lakefs_core.committed.tables import TableStore
from lakefs_core.format.accel import FASTPATH
from lakefs_core.format.records import pure_record_from_sst
from lakefs_core.format.sstable.reader import TableCursor, TableReader
from lakefs_core.keys import table_name

EMPTY_METARANGE_ID = ""

#: ``ValueRecord.from_sst`` for the records a metarange reads: :func:`pure_record_from_sst`, or the
#: same records and errors in one C call where the ``_fastpath`` extension is built (bound here,
#: where the extension is loaded anyway, not in ``records``, which lighter processes import too).
record_from_sst = pure_record_from_sst
if FASTPATH is not None:
    FASTPATH.bind_records(ValueRecord, pure_record_from_sst)
    record_from_sst = FASTPATH.record_from_sst


def parse_metarange(reader: TableReader, table_id: str) -> list[RangeInfo]:
    """The ranges a metarange table lists, checked to be ordered and non-overlapping."""
    return list(metarange_ranges(reader, name=table_name(table_id)))


def _records(reader: TableReader, name: str, start: bytes | None) -> Iterator[ValueRecord]:
    items = reader.seek_ge(start) if start is not None else iter(reader)
    for key, value in items:
        yield record_from_sst(key, value, name)


class PureMetaRange:
    """A loaded metarange over a :class:`TableStore` (use :data:`MetaRange`)."""

    def __init__(self, tables: TableStore, metarange_id: str, ranges: list[RangeInfo]) -> None:
        self.tables = tables
        self.id = metarange_id
        self.ranges = ranges
        # Parallel lists, read by the compiled lookup too: keep them as built here.
        self._max_keys = [r.max_key for r in ranges]
        self._min_keys = [r.min_key for r in ranges]
        self._names = [table_name(r.id) for r in ranges]
        self._readers: list[TableReader | None] = [None] * len(ranges)
        self.ranges_opened = 0

    @classmethod
    async def load(cls, tables: TableStore, metarange_id: str) -> Self:
        if metarange_id == EMPTY_METARANGE_ID:
            return cls(tables, metarange_id, [])
        ranges = tables.cache.metarange_ranges(metarange_id)
        if ranges is None:
            ranges = tuple(parse_metarange(await tables.open(metarange_id), metarange_id))
            tables.cache.remember_metarange_ranges(metarange_id, ranges)
        return cls(tables, metarange_id, list(ranges))

    def __len__(self) -> int:
        """Number of records (from the range descriptors; no range is opened)."""
        return sum(r.count for r in self.ranges)

    def _index(self, key: bytes) -> int:
        """Index of the range that may hold ``key``, or -1."""
        i = bisect_left(self._max_keys, key)
        if i == len(self._max_keys) or key < self._min_keys[i]:
            return -1
        return i

    def range_name(self, i: int) -> str:
        """How errors name range number ``i``'s file."""
        return self._names[i]

    def find_range(self, key: bytes) -> RangeInfo | None:
        i = self._index(key)
        return self.ranges[i] if i >= 0 else None

    async def _reader(self, i: int) -> TableReader:
        reader = self._readers[i]
        if reader is None:
            self.ranges_opened += 1
            reader = self.tables.cached(self.ranges[i].id) or await self.tables.open(self.ranges[i].id)
            self._readers[i] = reader
        return reader

    async def get(self, key: bytes) -> ValueRecord | None:
        found = self.get_cached(key)
        if found is not False:
            return found
        i = self._index(key)  # the range's table is not in RAM
        value = (await self._reader(i)).get(key)
        return None if value is None else record_from_sst(key, value, self._names[i])

    def get_cached(self, key: bytes) -> ValueRecord | Literal[False] | None:
        """Synchronous lookup when the range is open in RAM; ``False`` means "not cached, use get"."""
        i = self._index(key)
        if i < 0:
            return None
        reader = self._readers[i]
        if reader is None:
            reader = self.tables.cached(self.ranges[i].id)
            if reader is None:
                return False
            self.ranges_opened += 1  # as _reader counts it
            self._readers[i] = reader
        value = reader.get(key)
        return None if value is None else record_from_sst(key, value, self._names[i])

    # What the compiled get_cached calls for anything off its path.
    _get_cached_pure = get_cached

    async def range_items(self, i: int) -> list[tuple[bytes, bytes]]:
        """The raw ``(key, envelope)`` pairs of range number ``i``."""
        return list(await self._reader(i))

    async def range_records(self, i: int, start: bytes | None = None) -> list[ValueRecord]:
        """All records of range number ``i`` (from ``start`` on), decoded."""
        return list(_records(await self._reader(i), self._names[i], start))

    async def seek_ge(self, start: bytes = b"") -> AsyncIterator[ValueRecord]:
        """Every record with key >= ``start``, in key order."""
        i = bisect_left(self._max_keys, start)
        for j in range(i, len(self.ranges)):
            reader = await self._reader(j)
            first = start if j == i and start > self.ranges[j].min_key else None
            for record in _records(reader, self._names[j], first):
                yield record

    def __aiter__(self) -> AsyncIterator[ValueRecord]:
        return self.seek_ge(b"")

    def cursor(self, start: bytes = b"", end: bytes | None = None) -> RangeCursor:
        """A seekable cursor over the records in ``[start, end)`` (a ``RecordCursor``)."""
        return RangeCursor(self, start, end)


class RangeCursor:
    """A metarange's records in ``[start, end)``, seekable forward (a ``RecordCursor``).

    It reads one range's table at a time through a :class:`TableCursor`: a seek inside the range
    it reads is that cursor's (a bisect in the block it holds when the key is there, else one over
    the table's blocks); a seek past the range drops it and the next read bisects the ranges. A
    seek drops nothing that needs closing (an abandoned async generator would cost the event loop
    a task to close it). None at the end, and ever after.
    """

    __slots__ = ("_done", "_end", "_from", "_max", "_metarange", "_name", "_table")

    def __init__(self, metarange: PureMetaRange, start: bytes, end: bytes | None) -> None:
        self._metarange, self._end = metarange, end
        self._from = start  # where the next range is read from, while no table is open
        self._table: TableCursor | None = None
        self._max = b""  # the open range's max key
        self._name = ""  # the open range's file name, for errors
        self._done = False

    def seek_ge(self, key: bytes) -> None:
        table = self._table
        if table is None:
            self._from = max(self._from, key)
        elif key <= self._max:
            table.seek_ge(key)
        else:
            self._from, self._table = key, None

    async def next(self) -> ValueRecord | None:
        end = self._end
        while not self._done:
            table = self._table
            if table is None:
                table = await self._open()
                if table is None:
                    break
            pair = table.next()
            if pair is None:  # the range's end: the next one starts after its last key
                self._from, self._table = self._max + b"\x00", None
                continue
            key, value = pair
            if end is not None and key >= end:
                break
            return record_from_sst(key, value, self._name)
        self._done, self._table = True, None
        return None

    async def _open(self) -> TableCursor | None:
        """A cursor in the range that may hold ``_from`` (None: no range is left below ``end``)."""
        mr, start = self._metarange, self._from
        i = bisect_left(mr._max_keys, start)
        if i == len(mr.ranges) or (self._end is not None and mr._min_keys[i] >= self._end):
            return None
        reader = mr._readers[i] or await mr._reader(i)
        self._table = reader.cursor(start if start > mr._min_keys[i] else None)
        self._max, self._name = mr._max_keys[i], mr._names[i]
        return self._table


if TYPE_CHECKING or FASTPATH is None:
    MetaRange = PureMetaRange
else:

    class MetaRange(FASTPATH.MetaRangeCore, PureMetaRange):
        """:class:`PureMetaRange` with the warm point lookup ``get_cached`` (and so ``get``'s warm
        path) from the compiled ``MetaRangeCore``: the same answers and errors in one C call."""
