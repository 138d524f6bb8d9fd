"""Committed data: ranges and metaranges over a ``BlockStore``, and the algorithms over them.

- :mod:`.model`: value records, range descriptors, changes, diffs, merge strategies.
- :mod:`.tables`: the tiered table cache (RAM LRU of open tables, bounded local-disk cache, the
  object store as source of truth) and content-addressed table writes.
- :mod:`.writer`: range and metarange writers with content-defined boundaries.
- :mod:`.metarange`: point lookup, seek-ge and ordered iteration over a whole metarange.
- :mod:`.apply`, :mod:`.diff`, :mod:`.merge`: commit a change stream, two-way diff, three-way merge.
- :mod:`.addresses`: the object addresses of a range and the ranges of a metarange (pure), shared by
  mirror validation and GC; :func:`read_table` fetches a table's bytes uncached.
- :mod:`.ranges`: the range ids of a metarange and the in-namespace addresses of a range, read through
  a block store and failing closed (GC's mark and re-verification, the mirror's GC application).
"""

from lakefs_core.committed.addresses import iter_range_addresses, metarange_ranges
from lakefs_core.committed.tables import read_table

__all__ = ["iter_range_addresses", "metarange_ranges", "read_table"]
