"""Helpers shared by the KV drivers (argument checks, closed-store guard, the paged scan loop, the
batch entry points of the SQL drivers). Not public API."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from typing import Any

from lakefs_core.errors import BadInputError, LakeFSError, NotFoundError, PreconditionFailedError
from lakefs_core.kv.base import Expect, KeyRange, KVEntry, KVExpectation, KVItem

_KINDS = frozenset({"absent", "exists", "equals"})


def as_bytes(value: object, field: str) -> bytes:
    """``value`` as immutable bytes; bytes-like objects are copied, anything else is refused."""
    if isinstance(value, bytes):
        return value
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    raise BadInputError(f"must be bytes, not {type(value).__name__}", field=field)


def check_key(partition: object, key: object) -> tuple[bytes, bytes]:
    """Validate a (partition, key) pair: both non-empty bytes (as lakeFS requires)."""
    p = check_partition(partition)
    k = as_bytes(key, "key")
    if not k:
        raise BadInputError("must not be empty", field="key")
    return p, k


def check_partition(partition: object) -> bytes:
    p = as_bytes(partition, "partition")
    if not p:
        raise BadInputError("must not be empty", field="partition")
    return p


def check_expect(expected: object) -> Expect:
    if not isinstance(expected, Expect) or expected.kind not in _KINDS:
        raise BadInputError("must be Expect.ABSENT, Expect.EXISTS or Expect.equals(bytes)", field="expected")
    return expected


def check_expectations(expected: object, batch: Sequence[KVItem]) -> list[KVExpectation]:
    """Validate :meth:`~lakefs_core.kv.base.KVStore.set_many_if`'s expectations: a sequence of
    ``(partition, key, Expect)``, at most one per key, ``Expect.ABSENT`` only on a key ``batch``
    (the checked items) writes."""
    if isinstance(expected, (bytes, str)) or not isinstance(expected, Sequence):
        raise BadInputError("must be a sequence of (partition, key, Expect)", field="expected")
    out: list[KVExpectation] = []
    seen: set[tuple[bytes, bytes]] = set()
    written: set[tuple[bytes, bytes]] | None = None
    for item in expected:
        if not isinstance(item, tuple) or len(item) != 3:
            raise BadInputError("must be (partition, key, Expect) tuples", field="expected")
        p, k = check_key(item[0], item[1])
        exp = check_expect(item[2])
        if exp.kind == "absent":
            if written is None:
                written = {(bp, bk) for bp, bk, _ in batch}
            if (p, k) not in written:
                raise BadInputError(
                    "a conditional batch expects a key absent only where it writes it", field="expected"
                )
        if (p, k) in seen:
            raise BadInputError("one expectation per key", field="expected")
        seen.add((p, k))
        out.append((p, k, exp))
    return out


def holds(current: bytes | None, expected: Expect) -> bool:
    """Whether a stored value (None: the key is absent) meets ``expected``."""
    if expected.kind == "absent":
        return current is None
    if expected.kind == "exists":
        return current is not None
    return current is not None and current == expected.value


def check_held(found: dict[tuple[bytes, bytes], bytes], expected: Sequence[KVExpectation]) -> None:
    """Raise :class:`PreconditionFailedError` for the first expectation ``found`` (the stored values
    of the expected keys) does not meet."""
    for p, k, exp in expected:
        if not holds(found.get((p, k)), exp):
            raise PreconditionFailedError(precondition_message(exp))


def check_page_size(page_size: object) -> int:
    if not isinstance(page_size, int) or isinstance(page_size, bool) or page_size < 1:
        raise BadInputError("must be a positive integer", field="page_size")
    return page_size


def precondition_message(expected: Expect) -> str:
    if expected.kind == "absent":
        return "key already exists"
    if expected.kind == "exists":
        return "key does not exist"
    return "stored value differs from the expected value"


def closed_error(driver: str) -> LakeFSError:
    """The error for an operation on a store after ``close()`` (a programming error, not retryable)."""
    return LakeFSError(f"{driver} KV store is closed")


def checked_item(item: object) -> KVItem:
    """One batch item as a ``(partition, key, value)`` tuple of bytes: a plain one as it is,
    bytes-like parts copied; :class:`BadInputError` for anything else (the item-by-item check of
    :func:`check_items` and of PostgreSQL's streamed batches)."""
    if not isinstance(item, tuple) or len(item) != 3:
        raise BadInputError("must be (partition, key, value) tuples", field="items")
    p, k, v = item
    if type(p) is not bytes or type(k) is not bytes or type(v) is not bytes or not p or not k:
        p, k = check_key(p, k)  # the slow path: converts bytes-like values, raises for bad ones
        v = as_bytes(v, "value")
    return p, k, v


def check_items(items: Iterable[object]) -> list[KVItem]:
    """Validate a :meth:`~lakefs_core.kv.base.KVStore.set_many` batch; a key given twice keeps its last
    value (at the position of its last occurrence), since no backend accepts one key twice per batch."""
    batch: list[Any] = list(items)
    # The common batch (plain bytes tuples, no key twice) is returned as it is, checked in two
    # passes of C-level work; anything else takes the item-by-item path below.
    for item in batch:
        if type(item) is not tuple or len(item) != 3:
            break
        p, k, v = item
        if type(p) is not bytes or type(k) is not bytes or type(v) is not bytes or not p or not k:
            break
    else:
        if len({(item[0], item[1]) for item in batch}) == len(batch):
            return batch
    last: dict[tuple[bytes, bytes], KVItem] = {}
    for item in batch:
        p, k, v = checked_item(item)
        if (p, k) in last:
            del last[(p, k)]
        last[(p, k)] = (p, k, v)
    return list(last.values())


# (partition, cursor, inclusive, end, size) -> up to ``size`` entries of the partition from the
# cursor on, below ``end`` (None: no bound)
PageReader = Callable[[bytes, bytes, bool, bytes | None, int], Awaitable[list[KVEntry]]]


def check_end(end: object) -> bytes | None:
    """A scan's ``end`` (exclusive) as bytes, or None for no bound."""
    return None if end is None else as_bytes(end, "end")


async def paged_scan(
    partition: bytes, start: bytes, page_size: int, read: PageReader, end: bytes | None = None
) -> AsyncIterator[KVEntry]:
    """``KVStore.scan`` by keyset pagination: the arguments checked, then pages of ``page_size``
    read by ``read(partition, cursor, inclusive, end, size)`` (keys ``>= cursor`` on the first
    page, ``> last key`` after it, ``< end``, ascending) until a short page. An empty range reads
    nothing. Nothing is held between pages, so an abandoned scan leaks nothing."""
    p = check_partition(partition)
    cursor = as_bytes(start, "start")
    size = check_page_size(page_size)
    stop = check_end(end)
    if stop is not None and stop <= cursor:
        return
    inclusive = True
    while True:
        page = await read(p, cursor, inclusive, stop, size)
        for entry in page:
            yield entry
        if len(page) < size:
            return
        cursor, inclusive = page[-1].key, False


# One range still to read: (index in the caller's ranges, partition, start, end).
IndexedRange = tuple[int, bytes, bytes, bytes]
# (ranges, size) -> up to ``size`` entries of the ranges, by range index then key
RangePageReader = Callable[[Sequence[IndexedRange], int], Awaitable[list[tuple[int, KVEntry]]]]
MAX_RANGES = 100_000  # ranges one scan_ranges call takes (bounded arguments, as every input)


def check_ranges(ranges: object) -> list[IndexedRange]:
    """Validate ``scan_ranges``' ranges: a sequence of ``(partition, start, end)`` with a non-empty
    partition; an empty range (``end <= start``) is kept (it yields nothing)."""
    if isinstance(ranges, (bytes, str)) or not isinstance(ranges, Sequence):
        raise BadInputError("must be a sequence of (partition, start, end)", field="ranges")
    if len(ranges) > MAX_RANGES:
        raise BadInputError(f"at most {MAX_RANGES} ranges per call", field="ranges")
    out: list[IndexedRange] = []
    for i, item in enumerate(ranges):
        if type(item) is tuple and len(item) == 3:
            p, start, end = item
            if type(p) is bytes and p and type(start) is bytes and type(end) is bytes:
                out.append((i, p, start, end))  # the common case, checked in C-level type tests
                continue
        if not isinstance(item, tuple) or len(item) != 3:
            raise BadInputError("must be (partition, start, end) tuples", field="ranges")
        out.append((i, check_partition(item[0]), as_bytes(item[1], "start"), as_bytes(item[2], "end")))
    return out


async def paged_range_scan(
    ranges: Sequence[KeyRange], page_size: int, read: RangePageReader
) -> AsyncIterator[tuple[int, KVEntry]]:
    """``RangeScans.scan_ranges`` by keyset pagination over (range index, key): pages of
    ``page_size`` entries read by ``read(ranges left, size)``; after a full page the ranges before
    the last entry's are dropped and that one resumes after its key. Nothing is held between pages."""
    todo = [r for r in check_ranges(ranges) if r[2] < r[3]]
    size = check_page_size(page_size)
    while todo:
        page = await read(todo, size)
        for item in page:
            yield item
        if len(page) < size:
            return
        last_index, last = page[-1]
        rest = [r for r in todo if r[0] > last_index]
        current = next(r for r in todo if r[0] == last_index)
        resume = last.key + b"\x00"  # the smallest key after the last one
        todo = ([(last_index, current[1], resume, current[3])] if resume < current[3] else []) + rest


class TransactionalBatches:
    """``set_many``, ``set_many_then_get`` and ``set_many_if`` of a driver that checks expectations,
    writes a batch and reads a key in ONE transaction (:meth:`_write_batch`): the SQL drivers."""

    max_conditional_items: int | None = None  # one transaction takes any batch

    async def _write_batch(
        self, batch: list[KVItem], read: tuple[bytes, bytes] | None, expected: Sequence[KVExpectation] = ()
    ) -> bytes | None:
        """Check ``expected`` (PreconditionFailedError: nothing written), write ``batch`` (if any),
        then read ``read``'s value (if asked), in ONE transaction."""
        raise NotImplementedError

    async def _write_items(
        self,
        items: Iterable[object],
        read: tuple[object, object] | None,
        expected: Sequence[KVExpectation] = (),
    ) -> bytes | None:
        """Check ``items``, then ``read``'s key, and write them by :meth:`_write_batch` (nothing
        for an empty batch with no read and no expectation). A driver may take the items another
        way (PostgreSQL streams them) and come back here with what is left."""
        batch = check_items(items)
        checked = None if read is None else check_key(*read)
        if not batch and checked is None and not expected:
            return None
        return await self._write_batch(batch, checked, expected)

    async def set_many(self, items: Iterable[KVItem]) -> None:
        await self._write_items(items, None)

    async def set_many_then_get(self, items: Iterable[KVItem], partition: bytes, key: bytes) -> bytes:
        found = await self._write_items(items, (partition, key))
        if found is None:
            raise NotFoundError("key not found in KV partition")  # the batch is committed
        return found

    async def set_many_if(self, items: Iterable[KVItem], expected: Sequence[KVExpectation]) -> None:
        if any(type(e) is tuple and len(e) == 3 and e[2] == Expect.ABSENT for e in expected):
            batch = check_items(items)  # an absent key must be one the batch writes: taken whole
            await self._write_items(batch, None, check_expectations(expected, batch))
            return
        await self._write_items(items, None, check_expectations(expected, ()))
