"""Real lakeFS-written tables, served from a namespace, read through the graveler layer."""

from __future__ import annotations

from pathlib import Path

from lakefs_core.committed.diff import diff
from lakefs_core.committed.metarange import MetaRange
from lakefs_core.committed.model import DiffType
from lakefs_core.format.ids import table_id
from lakefs_core.format.records import decode_entry, entry_identity_of
from lakefs_core.format.sstable.reader import TableReader
from tests.committed.support import memory_tables

RANGE_ID = "a83af763ba098c15369d9d6d723731eb9ce18b8dfac4f88c6f1287e772393d0e"


async def test_lakefs_metarange_and_range_through_graveler(shared_fixtures: Path) -> None:
    tables = memory_tables()
    range_bytes = (shared_fixtures / "lakefs" / "range.sst").read_bytes()
    meta_bytes = (shared_fixtures / "lakefs" / "metarange.sst").read_bytes()
    meta_id = table_id(TableReader(meta_bytes, name="metarange.sst"), {"type": "metaranges"})
    assert await tables.write(RANGE_ID, range_bytes)
    assert await tables.write(meta_id, meta_bytes)

    mr = await MetaRange.load(tables, meta_id)
    assert [r.id for r in mr.ranges] == [RANGE_ID]
    assert (mr.ranges[0].min_key, mr.ranges[0].max_key, mr.ranges[0].count) == (b"a/b/c/no", b"a/b/c/yes", 2)
    records = [r async for r in mr]
    assert [r.key for r in records] == [b"a/b/c/no", b"a/b/c/yes"]
    for record in records:
        entry = decode_entry(record.data)
        assert entry_identity_of(entry) == record.identity
        assert (await mr.get(record.key)) == record
    assert [decode_entry(r.data).size for r in records] == [11, 4]
    assert await mr.get(b"a/b/c/maybe") is None

    # Our own empty tree diffs against lakeFS's metarange as two additions.
    empty = await MetaRange.load(tables, "")
    assert [(d.type, d.key) async for d in diff(empty, mr)] == [
        (DiffType.ADDED, b"a/b/c/no"),
        (DiffType.ADDED, b"a/b/c/yes"),
    ]
