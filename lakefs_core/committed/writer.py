"""Range and metarange writers (spec sections 3-5).

:class:`RangeBuilder` turns records into one table file (bytes) and its id; it is pure. Its
:meth:`~RangeBuilder.add` returns the table's size estimate after the record, which the split
policy needs after every record. The id is
computed while writing, over the record keys and full envelope values, then the id properties
(``{"type": ...}``) *before* ``min_key``, ``max_key``, ``count`` and ``estimated_size_bytes`` are
added to the file's user properties.

:class:`MetaRangeWriter` writes a whole metarange: records go into the current range until the
:class:`~lakefs_core.format.splitter.SplitPolicy` says to break after a key (content-defined
boundaries, so untouched neighbourhoods re-form identical ranges); :meth:`MetaRangeWriter.add_range`
reuses an existing range whole, closing the current partial range first. Ranges are uploaded as they
close (bounded concurrency); the metarange is written last, after every range it names is stored.
Keys must arrive strictly ascending, across records and reused ranges alike.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

from lakefs_core.committed.model import RangeInfo, ValueRecord
from lakefs_core.errors import BadInputError
from lakefs_core.format.ids import TableIdHasher
from lakefs_core.format.records import metarange_record
from lakefs_core.format.splitter import SplitPolicy
from lakefs_core.format.sstable.writer import TableWriter

RANGES = "ranges"
METARANGES = "metaranges"


class TableSink(Protocol):
    """Where finished tables go (a :class:`~lakefs_core.committed.tables.TableStore`, a directory)."""

    async def write(self, table_id: str, data: bytes) -> bool:
        """Store ``data`` under ``table_id``; False if it was already there."""
        ...


@dataclass(frozen=True)
class BuiltTable:
    id: str
    data: bytes
    min_key: bytes
    max_key: bytes
    count: int
    estimated_size: int


class RangeBuilder:
    """Builds one table of ``kind`` (``ranges`` or ``metaranges``) in memory."""

    __slots__ = ("_hasher", "_kind", "_writer")

    def __init__(self, kind: str, *, compression: str = "snappy") -> None:
        if kind not in (RANGES, METARANGES):
            raise BadInputError(f"unknown table type {kind!r}", field="type")
        self._kind = kind
        self._writer = TableWriter(compression=compression)
        self._hasher = TableIdHasher()
        self._writer.set_id_sink(self._hasher.pending, self._hasher.feed)

    @property
    def count(self) -> int:
        return self._writer.entry_count

    @property
    def first_key(self) -> bytes | None:
        return self._writer.first_key if self._writer.entry_count else None

    @property
    def last_key(self) -> bytes | None:
        return self._writer.last_key if self._writer.entry_count else None

    def estimated_size(self) -> int:
        return self._writer.estimated_size()

    def add(self, key: bytes, value: bytes) -> int:
        """Append ``key`` with its full envelope ``value``; return :meth:`estimated_size` after it."""
        estimate = self._writer.add(key, value)  # refuses keys that are not strictly ascending
        self._hasher.add(key, value)
        return estimate

    def value_appender(self, policy: SplitPolicy) -> Callable[[ValueRecord], bool]:
        """The table writer's ``add_record`` of a :class:`ValueRecord` and ``policy``'s split
        decision in one call, which answers True when the range ends at the record: the writer's
        own bound method (compiled where the extension is built; no Python frame between)."""
        self._writer.set_split_policy(policy)
        return self._writer.add_value_split

    def finish(self) -> BuiltTable:
        props: dict[str, str | bytes] = {"type": self._kind}
        table_id = self._hasher.finish(props)
        count = self._writer.entry_count
        min_key, max_key = self._writer.first_key, self._writer.last_key  # b"" while empty
        estimate = self._writer.estimated_size()
        user_props: dict[str, bytes] = {
            "type": self._kind.encode(),
            "min_key": min_key,
            "max_key": max_key,
            "count": str(count).encode(),
            "estimated_size_bytes": str(estimate).encode(),
        }
        data = self._writer.finish(user_props)
        return BuiltTable(table_id, data, min_key, max_key, count, estimate)


def build_metarange(ranges: Iterable[RangeInfo], *, compression: str = "snappy") -> BuiltTable:
    builder = RangeBuilder(METARANGES, compression=compression)
    for info in ranges:
        key, value = metarange_record(info)
        builder.add(key, value)
    return builder.finish()


@dataclass
class WriteStats:
    ranges_written: int = 0
    ranges_reused: int = 0
    ranges_already_stored: int = 0
    records_written: int = 0


class MetaRangeWriter:
    """Writes ranges as records arrive and, on :meth:`close`, the metarange naming them all."""

    def __init__(
        self,
        tables: TableSink,
        policy: SplitPolicy | None = None,
        *,
        compression: str = "snappy",
        upload_concurrency: int = 8,
    ) -> None:
        self._tables = tables
        self._policy = policy or SplitPolicy()
        self._compression = compression
        self._ranges: list[RangeInfo] = []
        self._current: RangeBuilder | None = None
        self._add: Callable[[ValueRecord], bool] | None = None
        self._last_key: bytes | None = None
        self._uploads: set[asyncio.Task[None]] = set()
        self._slots = asyncio.Semaphore(max(1, upload_concurrency))
        self._closed = False
        self.stats = WriteStats()

    def _check_order(self, key: bytes, what: str) -> None:
        # The previous key: the open range's last record, else the last closed or reused range's.
        current = self._current
        last = current.last_key if current is not None and current.count else self._last_key
        if last is not None and key <= last:
            raise BadInputError(f"{what} key {key!r} is not after the previous key {last!r}", field="key")

    async def add(self, record: ValueRecord) -> None:
        """Append one record to the current range, closing it where the split policy says."""
        if self.append(record):
            await self._close_current()

    def append(self, record: ValueRecord) -> bool:
        """:meth:`add` without the await: True when the current range must be closed now (the caller
        then awaits :meth:`close_current`).

        Within a range the table writer refuses keys that are not ascending; the first record of a
        range is checked here against the previous range's last key."""
        if self._add is None:
            self._check_order(record.key, "record")
        return self.appender()(record)

    def appender(self) -> Callable[[ValueRecord], bool]:
        """The open range's per-record method (a range is opened if none is): :meth:`append`
        without its Python frame, for bulk writers' tight loops. After it answers True, await
        :meth:`close_current`, then ask for the appender again.

        Keys must ascend. Inside the range the table writer refuses any that does not; whether the
        range's first key comes after the previous range is checked when the range closes, before
        anything of it is stored."""
        add = self._add
        if add is None:
            current = self._current = RangeBuilder(RANGES, compression=self._compression)
            add = self._add = current.value_appender(self._policy)
        return add

    async def close_current(self) -> None:
        """Close the current range (after :meth:`append` answered True)."""
        await self._close_current()

    async def add_range(self, info: RangeInfo) -> None:
        """Reuse an existing, already stored range whole (closes the current partial range first)."""
        self._check_order(info.min_key, "range")
        await self._close_current()
        self._ranges.append(info)
        self._last_key = info.max_key
        self.stats.ranges_reused += 1

    async def _close_current(self) -> None:
        current, self._current = self._current, None
        self._add = None
        if current is None or current.count == 0:
            return
        first = current.first_key
        if self._last_key is not None and first is not None and first <= self._last_key:
            raise BadInputError(
                f"record key {first!r} is not after the previous key {self._last_key!r}", field="key"
            )
        self._last_key = current.last_key
        self.stats.records_written += current.count
        built = current.finish()
        self._ranges.append(
            RangeInfo(built.id, built.min_key, built.max_key, built.count, built.estimated_size)
        )
        self.stats.ranges_written += 1
        await self._slots.acquire()  # backpressure: bounded uploads in flight
        task = asyncio.create_task(self._upload(built))
        self._uploads.add(task)
        task.add_done_callback(self._uploads.discard)

    async def _upload(self, built: BuiltTable) -> None:
        try:
            if not await self._tables.write(built.id, built.data):
                self.stats.ranges_already_stored += 1
        finally:
            self._slots.release()

    async def close(self) -> tuple[str, list[RangeInfo]]:
        """Finish: store the last range, wait for every upload, then store the metarange.

        Returns the metarange id and its ranges. If any upload failed, the error is raised and
        no metarange is written (nothing would point at a missing range).
        """
        ranges = await self.close_ranges()
        built = build_metarange(ranges, compression=self._compression)
        await self._tables.write(built.id, built.data)
        return built.id, ranges

    async def close_ranges(self) -> list[RangeInfo]:
        """Store the last range and wait for every upload; write no metarange (:meth:`close` does;
        an import's chunk is spliced into another metarange by its caller)."""
        if self._closed:
            raise BadInputError("metarange writer already closed", field="writer")
        self._closed = True
        try:
            await self._close_current()
            if self._uploads:
                await asyncio.gather(*self._uploads)
        except BaseException:
            for task in self._uploads:
                task.cancel()
            raise
        return list(self._ranges)

    async def abort(self) -> None:
        """Cancel pending uploads (already stored ranges stay: they are content-addressed)."""
        self._closed = True
        for task in list(self._uploads):
            task.cancel()
        if self._uploads:
            await asyncio.gather(*self._uploads, return_exceptions=True)
