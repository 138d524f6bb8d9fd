"""Range-record contents a protobuf decoder accepts but callers cannot use (issue 8, part 3).

proto3 keeps unknown enum numbers and a Timestamp can hold seconds and nanos no ``datetime`` can:
both must surface as CorruptDataError showing the raw value, never a ValueError traceback from
``AddressType.Name`` or ``Timestamp.ToDatetime`` further up.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from lakefs_core.errors import CorruptDataError
from lakefs_core.format import records
from lakefs_core.format.proto import catalog_pb2
from lakefs_core.format.records import ValueRecord, decode_entry, make_entry
from lakefs_core.repos.objects import ObjectStat


def entry_bytes(*, address_type: int = 1, seconds: int | None = None, nanos: int = 0) -> bytes:
    entry = catalog_pb2.Entry(address="data/x", size=3, e_tag="e")
    entry.address_type = address_type  # type: ignore[assignment]
    if seconds is not None:
        entry.last_modified.seconds = seconds
        entry.last_modified.nanos = nanos
    return entry.SerializeToString()


@pytest.mark.parametrize("address_type", [3, 7, 1000])
def test_unknown_address_type(address_type: int) -> None:
    with pytest.raises(CorruptDataError, match=f"unknown address_type {address_type}") as info:
        decode_entry(entry_bytes(address_type=address_type), file="_lakefs/r", offset=12)
    assert info.value.file == "_lakefs/r" and info.value.offset == 12


@pytest.mark.parametrize(
    ("seconds", "nanos"),
    [(253_402_300_800, 0), (-62_135_596_801, 0), (2**62, 0), (0, -1), (0, 1_000_000_000)],
)
def test_last_modified_out_of_range(seconds: int, nanos: int) -> None:
    raw = entry_bytes(seconds=seconds, nanos=nanos)
    with pytest.raises(CorruptDataError, match=f"seconds={seconds}, nanos={nanos}") as info:
        decode_entry(raw, file="_lakefs/r", offset=7)
    assert info.value.offset == 7
    # The object API built on it reports the same typed error (it used to raise ValueError).
    with pytest.raises(CorruptDataError, match=f"seconds={seconds}"):
        ObjectStat.from_record(ValueRecord(b"x", b"\0" * 32, raw))
    # And the conversion helper guards a message that skipped decode_entry.
    unchecked = catalog_pb2.Entry.FromString(raw)
    with pytest.raises(CorruptDataError, match=f"seconds={seconds}, nanos={nanos}"):
        records.entry_last_modified(unchecked, file="_lakefs/r")


def test_valid_extremes_still_decode() -> None:
    for seconds, nanos in ((253_402_300_799, 999_999_999), (-62_135_596_800, 0)):
        entry = decode_entry(entry_bytes(seconds=seconds, nanos=nanos, address_type=2))
        assert records.entry_last_modified(entry) is not None
    assert decode_entry(entry_bytes(address_type=0)).address_type == 0  # BY_PREFIX_DEPRECATED
    when = datetime(2024, 5, 1, 12, 30, tzinfo=UTC)
    _, data = make_entry("data/a", 1, "etag", last_modified=when)
    assert records.entry_last_modified(decode_entry(data)) == when
    assert records.entry_last_modified(decode_entry(entry_bytes())) is None
