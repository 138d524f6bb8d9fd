"""Records, identities and ids of real lakeFS-written tables (../shared/fixtures/lakefs/).

These files were written by lakeFS's Go code, so they are the ground truth for: the value envelope,
entry identities, the range id formula and the metarange record layout. The folder is located by the
``shared_fixtures`` fixture (tests/conftest.py): skipped when absent, a failure when ``CI`` is set.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from lakefs_core.format.envelope import decode_envelope
from lakefs_core.format.ids import TableIdHasher, table_id
from lakefs_core.format.proto import catalog_pb2
from lakefs_core.format.records import (
    RangeInfo,
    decode_entry,
    decode_metarange_record,
    decode_range_record,
    entry_identity_of,
    metarange_record,
)
from lakefs_core.format.sstable.reader import TableReader

RANGE_ID = "a83af763ba098c15369d9d6d723731eb9ce18b8dfac4f88c6f1287e772393d0e"
RANGE_KEYS = [b"a/b/c/no", b"a/b/c/yes"]


def open_table(fixtures: Path, name: str) -> TableReader:
    path = fixtures / "lakefs" / name
    if not path.is_file():
        pytest.fail(f"fixture {path} is missing from the shared fixtures folder")
    return TableReader(path.read_bytes(), name)


@pytest.fixture
def range_table(shared_fixtures: Path) -> TableReader:
    return open_table(shared_fixtures, "range.sst")


@pytest.fixture
def metarange_table(shared_fixtures: Path) -> TableReader:
    return open_table(shared_fixtures, "metarange.sst")


def test_range_records_and_props(range_table: TableReader) -> None:
    records = list(range_table)
    assert [k for k, _ in records] == RANGE_KEYS
    assert range_table.user_properties == {
        "type": b"ranges",
        "count": b"2",
        "min_key": b"a/b/c/no",
        "max_key": b"a/b/c/yes",
        "estimated_size_bytes": b"287",
    }
    sizes = []
    for key, value in records:
        assert range_table.get(key) == value
        record = decode_range_record(key, value, file="range.sst")
        assert value[:1] == b"\x40"  # zig-zag varint of 32
        assert len(record.identity) == 32
        entry = decode_entry(record.data, file="range.sst")
        assert entry.address_type == catalog_pb2.Entry.AddressType.RELATIVE
        assert entry.address
        sizes.append(entry.size)
        # The stored identity is the one we compute from size, etag, metadata and content type.
        assert entry_identity_of(entry) == record.identity
    assert sizes == [11, 4]


def test_range_id(range_table: TableReader) -> None:
    records = list(range_table)
    # The id is hashed over the user properties as they were before the writer added the derived ones.
    base_props = {"type": range_table.user_properties["type"]}
    assert table_id(records, base_props) == RANGE_ID

    hasher = TableIdHasher()
    for key, value in records:
        hasher.add(key, value)
    assert hasher.finish({"type": "ranges"}) == RANGE_ID


def test_metarange_record(metarange_table: TableReader) -> None:
    records = list(metarange_table)
    assert [k for k, _ in records] == [b"a/b/c/yes"]
    props = metarange_table.user_properties
    assert props["type"] == b"metaranges"
    assert props["count"] == b"1"
    assert set(props) == {"type", "count", "min_key", "max_key", "estimated_size_bytes"}

    key, value = records[0]
    identity, _ = decode_envelope(value)
    assert identity == RANGE_ID.encode("ascii")
    info = decode_metarange_record(key, value, file="metarange.sst")
    expected = RangeInfo(id=RANGE_ID, min_key=b"a/b/c/no", max_key=b"a/b/c/yes", count=2, estimated_size=1190)
    assert info == expected
    # Our encoder reproduces Go's record bytes exactly.
    assert metarange_record(expected) == (key, value)


def test_metarange_points_at_the_range(range_table: TableReader, metarange_table: TableReader) -> None:
    (key, value), *_ = metarange_table
    info = decode_metarange_record(key, value)
    records = list(range_table)
    assert info.id == table_id(records, {"type": "ranges"})
    assert (info.min_key, info.max_key, info.count) == (records[0][0], records[-1][0], len(records))
