"""Range, metarange and staged-entry record helpers."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lakefs_core.errors import BadInputError, CorruptDataError
from lakefs_core.format.envelope import decode_envelope, encode_envelope
from lakefs_core.format.ids import entry_identity
from lakefs_core.format.proto import catalog_pb2, committed_pb2
from lakefs_core.format.records import (
    ADDRESS_FULL,
    RangeInfo,
    ValueRecord,
    decode_entry,
    decode_metarange_record,
    decode_range_data,
    decode_range_record,
    decode_staged_entry,
    encode_range_data,
    encode_staged_entry,
    entry_identity_of,
    entry_to_value,
    make_entry,
    metarange_record,
)

RANGE_ID = "a83af763ba098c15369d9d6d723731eb9ce18b8dfac4f88c6f1287e772393d0e"
WHEN = datetime(2021, 8, 5, 11, 39, 44, 471124, tzinfo=UTC)


def test_make_entry_fields_and_identity() -> None:
    identity, data = make_entry(
        "data/gabc/xyz",
        11,
        "664c688b4ea9c56730daacfc3d70aeed",
        last_modified=WHEN,
        metadata={"b": "2", "a": "1"},
        content_type="text/plain",
    )
    entry = decode_entry(data)
    assert entry.address == "data/gabc/xyz"
    assert entry.size == 11
    assert entry.e_tag == "664c688b4ea9c56730daacfc3d70aeed"
    assert entry.last_modified.ToDatetime(tzinfo=UTC) == WHEN
    assert dict(entry.metadata) == {"a": "1", "b": "2"}
    assert entry.address_type == catalog_pb2.Entry.AddressType.RELATIVE
    assert entry.content_type == "text/plain"
    assert identity == entry_identity(
        11, "664c688b4ea9c56730daacfc3d70aeed", {"a": "1", "b": "2"}, "text/plain"
    )
    assert identity == entry_identity_of(entry)


@given(st.dictionaries(st.text(max_size=5), st.text(max_size=5), max_size=6))
def test_make_entry_is_deterministic(meta: dict[str, str]) -> None:
    a = make_entry("data/x", 1, "e", last_modified=WHEN, metadata=meta)
    b = make_entry("data/x", 1, "e", last_modified=WHEN, metadata=dict(reversed(list(meta.items()))))
    assert a == b


def test_make_entry_other_zone_and_full_address() -> None:
    plus2 = WHEN.astimezone(timezone(timedelta(hours=2)))
    _, data = make_entry("s3://b/k", 0, "", last_modified=plus2, address_type=ADDRESS_FULL)
    entry = decode_entry(data)
    assert entry.last_modified.ToDatetime(tzinfo=UTC) == WHEN
    assert entry.address_type == catalog_pb2.Entry.AddressType.FULL
    _, data = make_entry("data/y", 0, "")
    assert not decode_entry(data).HasField("last_modified")


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"address": ""}, "address"),
        ({"size": -1}, "size"),
        ({"last_modified": datetime(2020, 1, 1)}, "last_modified"),
        ({"address_type": catalog_pb2.Entry.AddressType.BY_PREFIX_DEPRECATED}, "address_type"),
    ],
)
def test_make_entry_rejects(kwargs: dict[str, object], field: str) -> None:
    args: dict[str, object] = {"address": "data/x", "size": 1, "etag": "e", **kwargs}
    with pytest.raises(BadInputError) as e:
        make_entry(**args)  # type: ignore[arg-type]
    assert e.value.field == field


def test_entry_to_value_and_back() -> None:
    identity, data = make_entry("data/x", 3, "etag")
    value = entry_to_value(identity, data)
    assert value[:1] == b"\x40"
    record = decode_range_record(b"k", value)
    assert record == ValueRecord(b"k", identity, data)
    assert record.to_value() == value
    assert not record.is_tombstone
    with pytest.raises(BadInputError):
        entry_to_value(identity[:31], data)


def test_entry_bytes_are_carried_verbatim() -> None:
    # Bytes from another writer (here: map entries in non-sorted order, as Go may emit them) must
    # survive a trip through the record helpers unchanged.
    e = catalog_pb2.Entry(address="data/x", size=1)
    head = e.SerializeToString()
    m1 = catalog_pb2.Entry(metadata={"z": "1"}).SerializeToString()
    m2 = catalog_pb2.Entry(metadata={"a": "2"}).SerializeToString()
    foreign = head + m1 + m2  # concatenated protobufs merge; "z" precedes "a" on the wire
    assert decode_entry(foreign).SerializeToString(deterministic=True) != foreign
    identity = entry_identity_of(decode_entry(foreign))
    record = ValueRecord.from_sst(b"k", entry_to_value(identity, foreign))
    assert record.data == foreign
    assert decode_envelope(record.to_value())[1] == foreign


def test_decode_entry_corrupt() -> None:
    with pytest.raises(CorruptDataError) as e:
        decode_entry(b"\xff\xff\xff", file="r.sst", offset=12)
    assert (e.value.file, e.value.offset) == ("r.sst", 12)
    with pytest.raises(CorruptDataError):
        decode_entry(b"\x0a\x02\xff\xfe")  # address with invalid UTF-8


def test_range_record_with_empty_identity_is_corrupt() -> None:
    with pytest.raises(CorruptDataError):
        decode_range_record(b"k", encode_envelope(b"", b"x"), file="r.sst")


def test_range_data_wire_bytes() -> None:
    data = encode_range_data(b"a/b/c/no", b"a/b/c/yes", 1190, 2)
    assert data == b"\x0a\x08a/b/c/no\x12\x09a/b/c/yes\x18\xa6\x09\x20\x02"
    rd = decode_range_data(data)
    assert (rd.min_key, rd.max_key, rd.estimated_size, rd.count) == (b"a/b/c/no", b"a/b/c/yes", 1190, 2)
    with pytest.raises(CorruptDataError):
        decode_range_data(b"\x0a\x09short")


def test_metarange_record_round_trip() -> None:
    info = RangeInfo(id=RANGE_ID, min_key=b"a/b/c/no", max_key=b"a/b/c/yes", count=2, estimated_size=1190)
    key, value = metarange_record(info)
    assert key == b"a/b/c/yes"
    identity, data = decode_envelope(value)
    assert identity == RANGE_ID.encode()
    assert data == encode_range_data(b"a/b/c/no", b"a/b/c/yes", 1190, 2)
    assert decode_metarange_record(key, value) == info


@pytest.mark.parametrize(
    "bad_id",
    [b"", RANGE_ID.upper().encode(), RANGE_ID[:63].encode(), b"../../etc/passwd" + b"0" * 48],
)
def test_metarange_record_bad_id(bad_id: bytes) -> None:
    value = encode_envelope(bad_id, encode_range_data(b"a", b"b", 1, 1))
    with pytest.raises(CorruptDataError):
        decode_metarange_record(b"b", value, file="m.sst", base=5)


def test_metarange_record_negative_count() -> None:
    data = committed_pb2.RangeData(min_key=b"a", max_key=b"b", count=-1).SerializeToString()
    with pytest.raises(CorruptDataError):
        decode_metarange_record(b"b", encode_envelope(RANGE_ID.encode(), data))


def test_range_info_validation() -> None:
    with pytest.raises(BadInputError):
        RangeInfo(id="x", min_key=b"", max_key=b"", count=0, estimated_size=0)
    with pytest.raises(BadInputError):
        RangeInfo(id=RANGE_ID, min_key=b"", max_key=b"", count=-1, estimated_size=0)


def test_staged_entries() -> None:
    identity, data = make_entry("data/x", 3, "etag")
    value = ValueRecord(b"path/k", identity, data)
    assert decode_staged_entry(encode_staged_entry(value)) == value
    tomb = ValueRecord(b"path/k", b"", b"")
    assert tomb.is_tombstone
    decoded = decode_staged_entry(encode_staged_entry(tomb))
    assert decoded == tomb
    assert decoded.is_tombstone
    with pytest.raises(BadInputError):
        encode_staged_entry(ValueRecord(b"k", b"", b"data"))
    with pytest.raises(CorruptDataError):
        decode_staged_entry(b"\x1a\x01x")  # data without identity
    with pytest.raises(CorruptDataError):
        decode_staged_entry(b"\xff")


@given(
    st.datetimes(
        min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30), timezones=st.timezones()
    ).filter(lambda d: d.utcoffset() is not None)
)
def test_entry_last_modified_is_what_protobuf_from_datetime_stores(when: datetime) -> None:
    """make_entry computes the timestamp itself (FromDatetime is slow pure Python): same fields."""
    _, data = make_entry("data/x", 1, "etag", last_modified=when)
    got = catalog_pb2.Entry.FromString(data).last_modified
    want = catalog_pb2.Entry().last_modified
    want.FromDatetime(when)
    assert (got.seconds, got.nanos) == (want.seconds, want.nanos)


def test_entry_last_modified_outside_the_timestamp_range_is_refused() -> None:
    """Year 1 at UTC+1 is before 0001-01-01T00:00:00Z: no protobuf Timestamp can hold it."""
    with pytest.raises(BadInputError, match="last_modified"):
        make_entry("data/x", 1, "etag", last_modified=datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=1))))
