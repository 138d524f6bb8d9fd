"""Reading a metarange: its ranges, point lookups, seek-ge and ordered iteration.

A :class:`MetaRange` is loaded once from its table (records keyed by each range's max key; identity
= ASCII hex range id; data = ``RangeData``). The empty id ``""`` is the empty tree (the first commit
of a repository). Finding the range that may hold ``k`` is a bisect for the first max key >= ``k``
followed by a ``k >= min_key`` check; only that range's table is opened.

Point lookups that hit tables already open in RAM never suspend (:meth:`MetaRange.get_cached`), so
the warm path costs two bisects and a block lookup.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import AsyncIterator, Iterator

from lakefs_core.errors import CorruptDataError
from lakefs_core.format.records import decode_metarange_record
from lakefs_core.format.sstable.reader import TableReader
from lakefs_core.graveler.model import RangeInfo, ValueRecord
from lakefs_core.graveler.tables import TableStore

EMPTY_METARANGE_ID = ""


def parse_metarange(reader: TableReader, table_id: str) -> list[RangeInfo]:
    """The ranges a metarange table lists, checked to be ordered and non-overlapping."""
    name = f"_lakefs/{table_id}"
    ranges: list[RangeInfo] = []
    prev_max: bytes | None = None
    for key, value in reader:
        info = decode_metarange_record(key, value, file=name)
        if info.max_key != key or info.min_key > info.max_key or (
            prev_max is not None and info.min_key <= prev_max
        ):
            raise CorruptDataError(f"metarange record {key!r} has an inconsistent key span", file=name)
        ranges.append(info)
        prev_max = info.max_key
    return ranges


def _records(reader: TableReader, name: str, start: bytes | None) -> Iterator[ValueRecord]:
    items = reader.seek_ge(start) if start is not None else iter(reader)
    for key, value in items:
        yield ValueRecord.from_sst(key, value, file=name)


class MetaRange:
    """A loaded metarange over a :class:`TableStore`."""

    def __init__(self, tables: TableStore, metarange_id: str, ranges: list[RangeInfo]) -> None:
        self.tables = tables
        self.id = metarange_id
        self.ranges = ranges
        self._max_keys = [r.max_key for r in ranges]
        self.ranges_opened = 0

    @classmethod
    async def load(cls, tables: TableStore, metarange_id: str) -> MetaRange:
        if metarange_id == EMPTY_METARANGE_ID:
            return cls(tables, metarange_id, [])
        reader = await tables.open(metarange_id)
        return cls(tables, metarange_id, parse_metarange(reader, metarange_id))

    def __len__(self) -> int:
        """Number of records (from the range descriptors; no range is opened)."""
        return sum(r.count for r in self.ranges)

    def find_range(self, key: bytes) -> RangeInfo | None:
        i = bisect_left(self._max_keys, key)
        if i == len(self.ranges):
            return None
        info = self.ranges[i]
        return info if key >= info.min_key else None

    async def open_range(self, info: RangeInfo) -> TableReader:
        self.ranges_opened += 1
        return await self.tables.open(info.id)

    async def get(self, key: bytes) -> ValueRecord | None:
        info = self.find_range(key)
        if info is None:
            return None
        reader = self.tables.cached(info.id)
        if reader is None:
            reader = await self.open_range(info)
        return self._lookup(reader, info, key)

    def get_cached(self, key: bytes) -> ValueRecord | bool | None:
        """Synchronous lookup when the range is open in RAM; ``False`` means "not cached, use get"."""
        info = self.find_range(key)
        if info is None:
            return None
        reader = self.tables.cached(info.id)
        if reader is None:
            return False
        return self._lookup(reader, info, key)

    @staticmethod
    def _lookup(reader: TableReader, info: RangeInfo, key: bytes) -> ValueRecord | None:
        value = reader.get(key)
        if value is None:
            return None
        return ValueRecord.from_sst(key, value, file=f"_lakefs/{info.id}")

    async def range_records(self, info: RangeInfo, start: bytes | None = None) -> list[ValueRecord]:
        """All records of one range (from ``start`` on), decoded."""
        reader = await self.open_range(info)
        return list(_records(reader, f"_lakefs/{info.id}", start))

    async def seek_ge(self, start: bytes = b"") -> AsyncIterator[ValueRecord]:
        """Every record with key >= ``start``, in key order."""
        i = bisect_left(self._max_keys, start)
        for n, info in enumerate(self.ranges[i:]):
            reader = await self.open_range(info)
            first = start if n == 0 and start > info.min_key else None
            for record in _records(reader, f"_lakefs/{info.id}", first):
                yield record

    def __aiter__(self) -> AsyncIterator[ValueRecord]:
        return self.seek_ge(b"")
