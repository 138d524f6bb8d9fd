"""Mark step 5: the committed live addresses, read on the executors (gc.md §3a).

``metarange parts -> range ids -> distinct -> addresses``: consecutive commits share almost all
their ranges, so the cost follows DISTINCT ranges, not commits (lakeFS issues #4094, #9649).

Contract:

- :func:`range_ids_partition` (executor): the range ids listed by the metaranges named in text parts
  (one metarange id per line, written by the driver from the active commits).
- :func:`addresses_partition` (executor): the relative addresses (:meth:`StorageNamespace.relative_of`)
  of every entry of the given ranges that lives inside the namespace; external (FULL, elsewhere)
  addresses are dropped: never candidates, so nothing to protect.
- :func:`metarange_range_ids` / :func:`range_addresses`: the same reads for one table, for the
  driver-side re-verification.

Fail closed: a table that is missing, does not parse, or holds an entry whose address cannot be
classified raises :class:`~lakefs_core.errors.CorruptDataError` naming the file
(``<store uri>/<key>``): the run stops; a live set is never shrunk by skipping what we cannot read.
Only tables that active metaranges name are read, so a stray file under ``_lakefs/`` is never
opened (lakeFS issues #7188, #8517).
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Iterator

from lakefs_core.block.base import BlockStore
from lakefs_core.committed.addresses import iter_range_addresses, metarange_ranges
from lakefs_core.committed.tables import read_table
from lakefs_core.compute.partition import StoreRef, stream_async
from lakefs_core.errors import BadInputError, CorruptDataError, NotFoundError
from lakefs_core.repos.graveler import AddressType, StorageNamespace
from lakefs_gc.runs.parts import file_name, read_lines

# A RELATIVE data address in normal form (what uploads write, ours and lakeFS's): relative_of would
# return it unchanged. Anything else takes the full classification.
_PLAIN_DATA = re.compile(r"data/[A-Za-z0-9_-]+/[A-Za-z0-9_-]+")


async def _table(store: BlockStore, ns: StorageNamespace, table_id: str, what: str) -> tuple[bytes, str]:
    try:
        key = ns.table_key(table_id)
    except BadInputError as e:
        raise CorruptDataError(f"{what} id {table_id[:80]!r} is not a table id") from e
    name = file_name(store, key)
    try:
        return await read_table(store, ns, table_id), name
    except NotFoundError as e:
        raise CorruptDataError(f"{what} {table_id} is missing", file=name) from e
    except BadInputError as e:
        raise CorruptDataError(f"{what} id {table_id[:80]!r} is not a table id: {e}", file=name) from e


async def metarange_range_ids(store: BlockStore, ns: StorageNamespace, metarange_id: str) -> list[str]:
    """The range ids a metarange lists (``""``, the empty tree, lists none)."""
    if metarange_id == "":
        return []
    data, name = await _table(store, ns, metarange_id, "metarange")
    return [info.id for info in metarange_ranges(data, name=name)]


async def range_addresses(store: BlockStore, ns: StorageNamespace, range_id: str) -> list[str]:
    """The relative addresses of a range's entries inside ``ns`` (external ones dropped)."""
    data, name = await _table(store, ns, range_id, "range")
    out = []
    plain = _PLAIN_DATA.fullmatch
    for path, address, address_type in iter_range_addresses(data, name=name):
        if address_type == AddressType.RELATIVE and plain(address):
            out.append(address)  # what relative_of returns for it, without resolving (a third of the cost)
            continue
        try:
            relative = ns.relative_of(address, address_type)
        except BadInputError as e:
            shown = path[:200].decode("utf-8", "backslashreplace")
            raise CorruptDataError(f"entry {shown!r} has an unusable address: {e}", file=name) from e
        if relative is not None:
            out.append(relative)
    return out


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
