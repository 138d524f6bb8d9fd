"""RocksDB block-based tables (SSTables) as lakeFS stores ranges and metaranges in them.

- :class:`TableReader`: parse a table held in memory (``bytes``, ``memoryview``, ``mmap``) and serve
  point lookups, ordered scans and ``seek_ge``; supports one-level and two-level indexes and skips
  filter and range-deletion meta blocks, so generic RocksDB files read too.
- :class:`TableWriter`: build a table the way pebble writes lakeFS files (format version 2, CRC32C,
  Snappy when worthwhile, two-level index once the index outgrows 4 KiB), readable by RocksDB's
  ``sst_dump`` and ingestible by RocksDB.

Pure format layer: no I/O, no SDK imports. Corrupt input raises
:class:`~lakefs_core.errors.CorruptDataError` naming the file and byte offset; caller mistakes raise
:class:`~lakefs_core.errors.BadInputError`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lakefs_core.format.sstable.reader import TableReader

if TYPE_CHECKING:
    from lakefs_core.format.sstable.writer import TableWriter

__all__ = ["TableReader", "TableWriter"]


def __getattr__(name: str) -> object:
    # The writer (and its range splitter) loads when first used: a reading command never pays for it.
    if name == "TableWriter":
        from lakefs_core.format.sstable.writer import TableWriter

        return TableWriter
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
