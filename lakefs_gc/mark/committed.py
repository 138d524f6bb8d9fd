"""Mark step 5: the committed live addresses, read on the executors (gc.md §3a).

``metarange parts -> range ids -> distinct -> addresses``: consecutive commits share almost all
their ranges, so the cost follows DISTINCT ranges, not commits (lakeFS issues #4094, #9649).

Contract:

- :func:`range_ids_partition` (executor): the range ids listed by the metaranges named in text parts
  (one metarange id per line, written by the driver from the active commits).
- :func:`addresses_partition` (executor): the relative addresses (:meth:`StorageNamespace.relative_of`)
  of every entry of the given ranges that lives inside the namespace; external (FULL, elsewhere)
  addresses are dropped: never candidates, so nothing to protect.

Both read each table through :func:`lakefs_core.committed.ranges.metarange_range_ids` and
:func:`~lakefs_core.committed.ranges.range_addresses` (the same reads the sweep's re-verification and
the mirror's GC application make for one table).

Fail closed: a table that is missing, does not parse, or holds an entry whose address cannot be
classified raises :class:`~lakefs_core.errors.CorruptDataError` naming the file
(``<store uri>/<key>``): the run stops; a live set is never shrunk by skipping what we cannot read.
Only tables that active metaranges name are read, so a stray file under ``_lakefs/`` is never
opened (lakeFS issues #7188, #8517).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

from lakefs_core.committed.ranges import metarange_range_ids, range_addresses
from lakefs_core.compute.partition import StoreRef, stream_async
from lakefs_gc.runs.parts import read_lines


async def _range_ids(ref: StoreRef, part_keys: list[str]) -> AsyncIterator[list[str]]:
    store = await ref.open()
    ns = ref.ns
    try:
        for key in part_keys:
            async for batch in read_lines(store, key):
                for metarange_id in batch:
                    yield await metarange_range_ids(store, ns, metarange_id)
    finally:
        await store.close()


def range_ids_partition(ref: StoreRef, part_keys: Iterator[str]) -> Iterator[str]:
    """Executor: the range ids of the metaranges listed in the text parts ``part_keys``."""
    wanted = list(part_keys)
    for batch in stream_async(lambda: _range_ids(ref, wanted)):
        yield from batch


async def _addresses(ref: StoreRef, range_ids: Iterator[str]) -> AsyncIterator[list[str]]:
    store = await ref.open()
    ns = ref.ns
    try:
        for range_id in range_ids:
            yield await range_addresses(store, ns, range_id)
    finally:
        await store.close()


def addresses_partition(ref: StoreRef, range_ids: Iterator[str]) -> Iterator[str]:
    """Executor: the in-namespace relative addresses of every entry of the ranges ``range_ids``."""
    for batch in stream_async(lambda: _addresses(ref, range_ids)):
        yield from batch
