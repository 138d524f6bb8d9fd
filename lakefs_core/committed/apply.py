"""Apply a sorted change stream to a base metarange, producing a new metarange (spec section 5).

Walk the base ranges and the changes together:

- changes whose key falls before the next base range are written as new records (tombstones for
  keys that do not exist are no-ops);
- a base range with no change inside its span is reused whole, without being read;
- otherwise the range is read and merged record by record: a tombstone drops the key, a change with
  the same identity keeps the base record, a different identity takes the change.

If nothing effectively changed, :class:`~lakefs_core.errors.NoChangesError` is raised (unless
``allow_empty``), and nothing is written. Changes must be strictly ascending by key.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable, Iterator
from dataclasses import dataclass

from lakefs_core.committed.metarange import MetaRange
from lakefs_core.committed.model import Change, RangeInfo, ValueRecord
from lakefs_core.committed.tables import TableStore
from lakefs_core.committed.writer import MetaRangeWriter, WriteStats
from lakefs_core.errors import BadInputError, NoChangesError
from lakefs_core.format.splitter import SplitPolicy


@dataclass(frozen=True)
class ApplyResult:
    metarange_id: str
    ranges: list[RangeInfo]
    effective_changes: int
    stats: WriteStats


class _Changes:
    """A peekable, order-checked view of a change stream (a plain iterable is read without an async
    generator per change: bulk writes pay no coroutine switch per record)."""

    def __init__(self, changes: AsyncIterable[Change] | Iterable[Change]) -> None:
        self._sync: Iterator[Change] | None = None
        self._it: AsyncIterator[Change] | None = None
        if isinstance(changes, AsyncIterable):
            self._it = _aiter(changes)
        else:
            self._sync = iter(changes)
        self.head: Change | None = None
        self._prev: bytes | None = None

    async def advance(self) -> None:
        if self._sync is not None:
            self.advance_sync()
            return
        assert self._it is not None
        try:
            change = await anext(self._it)
        except StopAsyncIteration:
            self.head = None
            return
        self._accept(change)

    @property
    def is_sync(self) -> bool:
        return self._sync is not None

    def advance_sync(self) -> None:
        assert self._sync is not None
        change = next(self._sync, None)
        if change is None:
            self.head = None
            return
        self._accept(change)

    def feed_sync(self, bound: bytes | None, append: Callable[[ValueRecord], bool]) -> tuple[int, bool]:
        """Pass the records of changes with key < ``bound`` (all when ``None``) to ``append``,
        advancing past each, until the stream ends, reaches ``bound``, or ``append`` answers True
        (its range must be closed: the caller awaits that, then calls again). Returns the number
        of records passed and whether it stopped for a close. Plain iterables only.

        :meth:`advance_sync` and :meth:`_accept`, inlined: this is the per-record loop of a bulk
        write (one Python frame per record instead of three)."""
        it = self._sync
        assert it is not None
        head, prev = self.head, self._prev
        n = 0
        closing = False
        try:
            while head is not None and (bound is None or head.key < bound) and not closing:
                value = head.value
                if value is not None:
                    n += 1
                    closing = append(value)
                change = next(it, None)
                if change is not None:  # _accept's checks; prev is head's key here
                    key = change.key
                    if key <= head.key:
                        raise BadInputError(
                            f"changes must be strictly ascending: {key!r} after {head.key!r}",
                            field="changes",
                        )
                    if change.value is not None and change.value.key != key:
                        raise BadInputError(
                            f"change for {key!r} carries a record for another key", field="changes"
                        )
                    prev = key
                head = change
        finally:
            self.head, self._prev = head, prev
        return n, closing

    def _accept(self, change: Change) -> None:
        if self._prev is not None and change.key <= self._prev:
            raise BadInputError(
                f"changes must be strictly ascending: {change.key!r} after {self._prev!r}", field="changes"
            )
        if change.value is not None and change.value.key != change.key:
            raise BadInputError(
                f"change for {change.key!r} carries a record for another key", field="changes"
            )
        self._prev = change.key
        self.head = change


async def _aiter(items: AsyncIterable[Change] | Iterable[Change]) -> AsyncIterator[Change]:
    if isinstance(items, AsyncIterable):
        async for item in items:
            yield item
    else:
        for item in items:
            yield item


async def apply_changes(
    tables: TableStore,
    base: MetaRange,
    changes: AsyncIterable[Change] | Iterable[Change],
    *,
    policy: SplitPolicy | None = None,
    allow_empty: bool = False,
) -> ApplyResult:
    writer = MetaRangeWriter(tables, policy)
    stream = _Changes(changes)
    effective = 0
    try:
        await stream.advance()
        for i, info in enumerate(base.ranges):
            effective += await _insert_before(writer, stream, info.min_key)
            head = stream.head
            if head is None or head.key > info.max_key:
                await writer.add_range(info)
                continue
            effective += await _merge_range(writer, stream, base, i)
        effective += await _insert_before(writer, stream, None)
        if effective == 0 and not allow_empty:
            raise NoChangesError("no changes to apply")
        metarange_id, ranges = await writer.close()
    except BaseException:
        await writer.abort()
        raise
    return ApplyResult(metarange_id, ranges, effective, writer.stats)


async def _insert_before(writer: MetaRangeWriter, stream: _Changes, bound: bytes | None) -> int:
    """Write changes with key < ``bound`` (all remaining when ``None``); they add new keys."""
    if stream.is_sync:
        return await _insert_before_sync(writer, stream, bound)
    n = 0
    while stream.head is not None and (bound is None or stream.head.key < bound):
        if stream.head.value is not None:
            await writer.add(stream.head.value)
            n += 1
        await stream.advance()
    return n


async def _insert_before_sync(writer: MetaRangeWriter, stream: _Changes, bound: bytes | None) -> int:
    """:func:`_insert_before` for a plain iterable: a tight loop, awaiting only to close a range."""
    total = 0
    while True:
        n, closing = stream.feed_sync(bound, writer.appender())
        total += n
        if not closing:
            return total
        await writer.close_current()


async def _merge_range(writer: MetaRangeWriter, stream: _Changes, base: MetaRange, i: int) -> int:
    info = base.ranges[i]
    n = 0
    for record in await base.range_records(i):
        n += await _insert_before(writer, stream, record.key)
        head = stream.head
        if head is not None and head.key == record.key:
            if head.value is None:
                n += 1  # deleted
            elif head.value.identity == record.identity:
                await writer.add(record)  # same content: keep the base bytes verbatim
            else:
                await writer.add(head.value)
                n += 1
            await stream.advance()
        else:
            await writer.add(record)
    # Changes up to this range's max key that come after its last record are inserts.
    while stream.head is not None and stream.head.key <= info.max_key:
        if stream.head.value is not None:
            await writer.add(stream.head.value)
            n += 1
        await stream.advance()
    return n
