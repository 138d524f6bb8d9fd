"""Two-way diff of metaranges that skips identical ranges without reading them.

Each side is walked by a cursor that is either at the *header* of an unopened range, at a record
inside an opened range, or done. Two headers with the same range id are skipped together: equal ids
mean equal contents. A header is opened only when its records could interleave with the other
side's next key, so ranges stay aligned and a diff of commits that differ in ``k`` keys opens
O(k) ranges, not O(repository). Records are compared by key and identity; equal envelope bytes
short-cut the identity comparison, and record objects are built only for actual differences.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from lakefs_core.committed.metarange import MetaRange
from lakefs_core.committed.model import DiffRecord, DiffType, RangeInfo, ValueRecord
from lakefs_core.format.envelope import decode_envelope


class RangeCursor:
    """Walks a metarange a whole range or a record at a time."""

    __slots__ = ("_mr", "_next_range", "_opened", "_pos", "_records")

    def __init__(self, mr: MetaRange) -> None:
        self._mr = mr
        self._next_range = 0
        self._opened = -1
        self._records: list[tuple[bytes, bytes]] | None = None
        self._pos = 0

    @property
    def header(self) -> RangeInfo | None:
        """The unopened range the cursor is at, if it is between ranges."""
        if self._records is None and self._next_range < len(self._mr.ranges):
            return self._mr.ranges[self._next_range]
        return None

    @property
    def record(self) -> tuple[bytes, bytes] | None:
        """The current raw ``(key, envelope)`` pair inside an opened range."""
        return self._records[self._pos] if self._records is not None else None

    def value_record(self) -> ValueRecord:
        key, value = self._records[self._pos]  # type: ignore[index]
        return ValueRecord.from_sst(key, value, file=self._mr.range_name(self._opened))

    @property
    def done(self) -> bool:
        return self._records is None and self._next_range >= len(self._mr.ranges)

    def next_key(self) -> bytes | None:
        """The smallest key the cursor can produce next (``None`` when done)."""
        rec = self.record
        if rec is not None:
            return rec[0]
        header = self.header
        return header.min_key if header is not None else None

    def skip_range(self) -> None:
        self._next_range += 1

    async def open(self) -> None:
        self._opened = self._next_range
        self._next_range += 1
        records = await self._mr.range_items(self._opened)
        self._records, self._pos = (records, 0) if records else (None, 0)

    def advance(self) -> None:
        assert self._records is not None
        self._pos += 1
        if self._pos == len(self._records):
            self._records = None


async def _open_if_interleaving(a: RangeCursor, b: RangeCursor) -> bool:
    """Open ``a``'s header if its records could come at or before ``b``'s next key."""
    header = a.header
    if header is None:
        return False
    other = b.next_key()
    if other is None or header.min_key <= other:
        await a.open()
        return True
    return False


async def diff(left: MetaRange, right: MetaRange) -> AsyncIterator[DiffRecord]:
    """Differences turning ``left`` into ``right``, in key order."""
    lc, rc = RangeCursor(left), RangeCursor(right)
    while not (lc.done and rc.done):
        lh, rh = lc.header, rc.header
        if lh is not None and rh is not None and lh.id == rh.id:
            lc.skip_range()
            rc.skip_range()
            continue
        if await _open_if_interleaving(lc, rc) or await _open_if_interleaving(rc, lc):
            continue
        lrec, rrec = lc.record, rc.record
        if lrec is not None and (rrec is None or lrec[0] < rrec[0]):
            yield DiffRecord(DiffType.REMOVED, lrec[0], lc.value_record(), None)
            lc.advance()
        elif rrec is not None and (lrec is None or rrec[0] < lrec[0]):
            yield DiffRecord(DiffType.ADDED, rrec[0], None, rc.value_record())
            rc.advance()
        else:
            assert lrec is not None and rrec is not None
            if lrec[1] != rrec[1] and decode_envelope(lrec[1])[0] != decode_envelope(rrec[1])[0]:
                yield DiffRecord(DiffType.CHANGED, lrec[0], lc.value_record(), rc.value_record())
            lc.advance()
            rc.advance()
