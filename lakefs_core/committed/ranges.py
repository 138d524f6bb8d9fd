"""A committed tree's references read through a block store, failing closed: the range ids of a
metarange and the in-namespace addresses of a range (GC's mark and re-verification, the mirror's
application of GC sweeps).

- :func:`metarange_range_ids`: the range ids a metarange lists (``""``, the empty tree, lists none);
- :func:`range_addresses`: the RELATIVE addresses (:meth:`StorageNamespace.relative_of`) of every
  entry of a range that lives inside the namespace; external (FULL, elsewhere) addresses are dropped.

A table that is missing, does not parse, or holds an entry whose address cannot be classified raises
:class:`~lakefs_core.errors.CorruptDataError` naming the file (``<store uri>/<key>``): a caller
computing a live set stops; it never shrinks the set by skipping what it cannot read. Only tables a
caller names are read, so a stray file under ``_lakefs/`` is never opened.
"""

from __future__ import annotations

import re

from lakefs_core.block.base import BlockStore
from lakefs_core.committed.addresses import iter_range_addresses, metarange_ranges
from lakefs_core.committed.tables import read_table
from lakefs_core.errors import BadInputError, CorruptDataError, NotFoundError
from lakefs_core.keys import AddressType
from lakefs_core.namespace import StorageNamespace

__all__ = ["metarange_range_ids", "range_addresses"]

# A RELATIVE data address in normal form (what uploads write, ours and lakeFS's): relative_of would
# return it unchanged. Anything else takes the full classification.
_PLAIN_DATA = re.compile(r"data/[A-Za-z0-9_-]+/[A-Za-z0-9_-]+")


async def _table(store: BlockStore, ns: StorageNamespace, table_id: str, what: str) -> tuple[bytes, str]:
    try:
        key = ns.table_key(table_id)
    except BadInputError as e:
        raise CorruptDataError(f"{what} id {table_id[:80]!r} is not a table id") from e
    name = f"{store.uri.rstrip('/')}/{key}"  # how errors name a stored file
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
