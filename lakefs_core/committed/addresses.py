"""The object addresses a committed tree references: one reader shared by mirror validation and GC.

Pure (no I/O): callers fetch a table's bytes (or take an open reader from a table cache) and
iterate here.

- :func:`iter_range_addresses` yields ``(path, address, address_type)`` for every entry of a range,
  in key order (:func:`iter_range_entries`: the same with each object's size, as a
  :class:`RangeEntry`). It classifies nothing: pass each ``(address, address_type)`` to
  :meth:`lakefs_core.namespace.StorageNamespace.relative_of` to learn whether the object is inside the
  namespace (and under which relative key) or external.
- :func:`metarange_ranges` yields the :class:`~lakefs_core.format.records.RangeInfo` of every range a
  metarange lists, checked to be ordered and non-overlapping.

Tables are hostile input: a table that does not parse, a record that does not decode, or an entry
without an address raises :class:`~lakefs_core.errors.CorruptDataError` naming ``name`` (a table's
name is :func:`lakefs_core.keys.table_name`, ``_lakefs/<id>``). Nothing is skipped silently: for a
garbage collector, a range it cannot read must stop the run, never shrink the live set.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

from lakefs_core.errors import CorruptDataError
from lakefs_core.format.records import RangeInfo, decode_entry, decode_metarange_record, decode_range_record
from lakefs_core.format.sstable.reader import TableReader

__all__ = ["RangeEntry", "iter_range_addresses", "iter_range_entries", "metarange_ranges", "open_table"]


class RangeEntry(NamedTuple):
    """What a range entry says about its object."""

    path: bytes
    address: str
    address_type: int  # lakefs_core.keys.AddressType
    size: int


def open_table(table: bytes | TableReader, *, name: str) -> TableReader:
    """``table`` itself when it is an open reader, else a reader over its bytes (checksums verified)."""
    if isinstance(table, TableReader):
        return table
    return TableReader(table, name=name)


def iter_range_entries(table: bytes | TableReader, *, name: str) -> Iterator[RangeEntry]:
    """Every entry of the range ``table``, in path order."""
    reader = open_table(table, name=name)
    for key, value in reader:
        record = decode_range_record(key, value, file=name)
        entry = decode_entry(record.data, file=name)
        if not entry.address:
            raise CorruptDataError(f"range entry {key!r} has no address", file=name)
        yield RangeEntry(record.key, entry.address, int(entry.address_type), int(entry.size))


def iter_range_addresses(table: bytes | TableReader, *, name: str) -> Iterator[tuple[bytes, str, int]]:
    """``(path, address, address_type)`` of every entry of the range ``table``, in path order."""
    for entry in iter_range_entries(table, name=name):
        yield entry.path, entry.address, entry.address_type


def metarange_ranges(table: bytes | TableReader, *, name: str) -> Iterator[RangeInfo]:
    """The ranges a metarange lists, in key order, each checked against the previous one."""
    reader = open_table(table, name=name)
    prev_max: bytes | None = None
    for key, value in reader:
        info = decode_metarange_record(key, value, file=name)
        if (
            info.max_key != key
            or info.min_key > info.max_key
            or (prev_max is not None and info.min_key <= prev_max)
        ):
            raise CorruptDataError(f"metarange record {key!r} has an inconsistent key span", file=name)
        prev_max = info.max_key
        yield info
