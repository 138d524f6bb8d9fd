"""The ``KVStore`` seam: ordered binary key-value partitions with compare-and-swap.

Mirrors lakeFS's KV contract (spec section 6). Partitions and keys are bytes; scans are ascending
bytewise within one partition. Every pointer move uses :meth:`KVStore.set_if` with an explicit
expectation, never a blind overwrite:

- ``Expect.ABSENT``: succeed only if the key does not exist (insert-if-absent);
- ``Expect.EXISTS``: succeed only if the key exists;
- ``Expect.equals(b)``: succeed only if the stored value is exactly ``b`` (the predicate returned by
  :meth:`KVStore.get` is the raw stored bytes).

A failed expectation raises :class:`~lakefs_core.errors.PreconditionFailedError`; a missing key in
``get`` raises :class:`~lakefs_core.errors.NotFoundError`; an unreachable backend raises
:class:`~lakefs_core.errors.UnreachableError` (retryable). ``delete`` of a missing key is not an
error.

:meth:`KVStore.set_many` writes a batch of unconditional upserts ``(partition, key, value)`` (any
partitions; a key given twice keeps its last value). It is all-or-nothing where the backend has
transactions (SQL: one transaction; memory: one lock) and at-least-per-item on DynamoDB
(``BatchWriteItem`` in chunks of 25, unprocessed items retried): when it returns every item is
stored; when it raises, any subset may be (the items are idempotent upserts: retrying the whole batch
is always safe).

:meth:`KVStore.set_many_then_get` is ``set_many`` followed by ``get`` of one key, with the same
guarantee as doing the two in that order: a change to that key which the read does not see becomes
visible only after every item of the batch is stored. Drivers with transactions do both in one
(SQLite: the read runs under the write lock the batch took; PostgreSQL: ``SELECT ... FOR SHARE``,
so a concurrent update of the key waits for the batch's commit or is seen); the others do the two
calls. The guarantee covers a key that exists when read: on PostgreSQL a row that does not exist yet
cannot be locked, so a concurrent CREATE of the key may become visible before the batch (the read
then raised NotFoundError; a caller that acts only on a value it found loses nothing). Staging
writers use it for their "write, then re-read the branch" step (one transaction per batch instead of
two); a missing branch means nothing was acknowledged.

:meth:`KVStore.set_many_if` is the conditional batch: ``items`` are stored only if every
expectation ``(partition, key, Expect)`` holds, in ONE atomic step on every driver: a failed
expectation raises :class:`~lakefs_core.errors.PreconditionFailedError` and stores nothing, and no
write to an expected key is ordered between the check and the batch (SQL: one transaction that
locks the expected rows ``FOR SHARE`` on PostgreSQL, under SQLite's write lock; memory: one lock;
DynamoDB: one ``TransactWriteItems``). An expected key may be written by the batch too (a
compare-and-swap riding with it). Expectations are ``Expect.EXISTS`` or ``Expect.equals``, at most
one per key, and ``Expect.ABSENT`` only on a key the batch writes (an insert-if-absent riding with
it: PostgreSQL cannot lock a row that does not exist, so it inserts the row first in the
transaction, and a concurrent inserter waits for ours; an absent key the batch does not write is
refused). Conditional staging writes (``If-None-Match: *``) use it.
:attr:`KVStore.max_conditional_items` is how many items plus expectations on keys the batch does
not write one call takes (None: no limit; DynamoDB's transactions take 100); a bigger call is
:class:`~lakefs_core.errors.BadInputError` before anything is sent. Staging writers of the
hard-delete journal use it: an upload's entries are staged only with its journal intent settled.

:meth:`KVStore.scan` reads keys in ``[start, end)``, paged by ``page_size`` (the first page is the
one query a short scan costs: a seeking reader asks for small first pages and stops early). An
abandoned scan holds nothing.
:meth:`RangeScans.scan_ranges` reads many key ranges ``(partition, start, end)`` (``start`` inclusive,
``end`` exclusive) in one call: entries come as ``(index of the range, entry)``, by range then key, in
pages of ``page_size`` entries in total. It is what a reader of one record kind across many partitions
uses (the mirror's branch heads of 1,000 repositories): PostgreSQL answers a page with one statement,
SQLite with one hop to its thread, DynamoDB with one ``BatchGetItem`` per 100 one-key ranges and one
Query per other range, up to 16 at a time (its partitions are the unit it queries). Every driver
has it; :func:`lakefs_core.kv.ranges.scan_ranges` also serves a store without it (one scan per range).

Drivers: :mod:`.memory`, :mod:`.sql` (SQLite, PostgreSQL), :mod:`.dynamodb`; open one from a URL with
:func:`lakefs_core.kv.open_kv`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import dataclass
from typing import ClassVar, Protocol, runtime_checkable


@dataclass(frozen=True)
class Expect:
    """An explicit compare-and-swap expectation."""

    kind: str  # "absent" | "exists" | "equals"
    value: bytes = b""

    ABSENT: ClassVar[Expect]
    EXISTS: ClassVar[Expect]

    @staticmethod
    def equals(value: bytes) -> Expect:
        return Expect("equals", bytes(value))


Expect.ABSENT = Expect("absent")
Expect.EXISTS = Expect("exists")


@dataclass(frozen=True)
class KVEntry:
    key: bytes
    value: bytes


KVItem = tuple[bytes, bytes, bytes]
"""One item of :meth:`KVStore.set_many`: ``(partition, key, value)``."""

KeyRange = tuple[bytes, bytes, bytes]
"""One range of :meth:`RangeScans.scan_ranges`: ``(partition, start, end)``, keys ``start <= key < end``."""

KVExpectation = tuple[bytes, bytes, Expect]
"""One expectation of :meth:`KVStore.set_many_if`: ``(partition, key, Expect)`` (ABSENT: on a
written key only)."""


@runtime_checkable
class KVStore(Protocol):
    # items plus expectations on unwritten keys one set_many_if takes (None: no limit)
    max_conditional_items: int | None

    async def get(self, partition: bytes, key: bytes) -> bytes:
        """The stored value (which is also the predicate for ``Expect.equals``)."""
        ...

    async def set(self, partition: bytes, key: bytes, value: bytes) -> None: ...

    async def set_if(self, partition: bytes, key: bytes, value: bytes, expected: Expect) -> None: ...

    async def set_many(self, items: Iterable[KVItem]) -> None:
        """Upsert every ``(partition, key, value)`` of ``items`` as one batch (see the module doc)."""
        ...

    async def set_many_then_get(self, items: Iterable[KVItem], partition: bytes, key: bytes) -> bytes:
        """:meth:`set_many`, then the value of ``(partition, key)`` (see the module doc); a missing key
        raises :class:`~lakefs_core.errors.NotFoundError` after the batch is stored."""
        ...

    async def set_many_if(self, items: Iterable[KVItem], expected: Sequence[KVExpectation]) -> None:
        """Upsert ``items`` iff every expectation holds, atomically (see the module doc); else
        :class:`~lakefs_core.errors.PreconditionFailedError` and nothing stored."""
        ...

    async def delete(self, partition: bytes, key: bytes) -> None: ...

    def scan(
        self, partition: bytes, start: bytes = b"", *, end: bytes | None = None, page_size: int = 1000
    ) -> AsyncIterator[KVEntry]:
        """Entries with ``start <= key < end`` (no ``end``: to the partition's last key) in ascending
        order, fetched ``page_size`` at a time: a page never reads a row at or past ``end``, so a
        bounded scan costs what it returns (a listing under a prefix, a seek past a directory)."""
        ...

    async def close(self) -> None: ...


@runtime_checkable
class RangeScans(Protocol):
    """A store that reads many key ranges in one call (see the module doc)."""

    def scan_ranges(
        self, ranges: Sequence[KeyRange], *, page_size: int = 1000
    ) -> AsyncIterator[tuple[int, KVEntry]]:
        """``(index in ranges, entry)`` for every entry in every range, by range then key."""
        ...
