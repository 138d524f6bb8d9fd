"""uvarint and zig-zag varint: Go/RocksDB byte vectors, round trips and malformed input."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lakefs_core.errors import BadInputError, CorruptDataError
from lakefs_core.format.varint import (
    decode_uvarint,
    decode_varint,
    encode_uvarint,
    encode_varint,
    uvarint_len,
)

U64 = (1 << 64) - 1

# Vectors as produced by Go's binary.PutUvarint / binary.PutVarint.
UVARINTS = [
    (0, b"\x00"),
    (1, b"\x01"),
    (127, b"\x7f"),
    (128, b"\x80\x01"),
    (300, b"\xac\x02"),
    (16383, b"\xff\x7f"),
    (16384, b"\x80\x80\x01"),
    (U64, b"\xff" * 9 + b"\x01"),
]
VARINTS = [
    (0, b"\x00"),
    (-1, b"\x01"),
    (1, b"\x02"),
    (32, b"\x40"),  # the length prefix of a 32-byte identity in the lakeFS envelope
    (-64, b"\x7f"),
    (64, b"\x80\x01"),
    (-(1 << 63), b"\xff" * 9 + b"\x01"),
    ((1 << 63) - 1, b"\xfe" + b"\xff" * 8 + b"\x01"),
]


@pytest.mark.parametrize(("value", "encoded"), UVARINTS)
def test_uvarint_vectors(value: int, encoded: bytes) -> None:
    assert encode_uvarint(value) == encoded
    assert decode_uvarint(b"xy" + encoded + b"z", 2) == (value, 2 + len(encoded))
    assert uvarint_len(value) == len(encoded)


@pytest.mark.parametrize(("value", "encoded"), VARINTS)
def test_varint_vectors(value: int, encoded: bytes) -> None:
    assert encode_varint(value) == encoded
    assert decode_varint(encoded, 0) == (value, len(encoded))


@given(st.integers(0, U64), st.binary(max_size=4))
def test_uvarint_round_trip(value: int, tail: bytes) -> None:
    encoded = encode_uvarint(value)
    assert decode_uvarint(memoryview(encoded + tail), 0) == (value, len(encoded))


@given(st.integers(-(1 << 63), (1 << 63) - 1))
def test_varint_round_trip(value: int) -> None:
    encoded = encode_varint(value)
    assert decode_varint(bytearray(encoded), 0) == (value, len(encoded))


@pytest.mark.parametrize("value", [-1, 1 << 64])
def test_uvarint_out_of_range(value: int) -> None:
    with pytest.raises(BadInputError):
        encode_uvarint(value)


@pytest.mark.parametrize("value", [-(1 << 63) - 1, 1 << 63])
def test_varint_out_of_range(value: int) -> None:
    with pytest.raises(BadInputError):
        encode_varint(value)


@pytest.mark.parametrize(
    ("buf", "offset", "what"),
    [
        (b"", 0, "truncated"),
        (b"\x80", 0, "truncated"),
        (b"\x01\xff\xff", 1, "truncated"),
        (b"\x05", 1, "truncated"),
        (b"\xff" * 10 + b"\x01", 0, "longer than 10 bytes"),
        (b"\xff" * 9 + b"\x02", 0, "overflows 64 bits"),
    ],
)
def test_malformed_uvarint_names_file_and_offset(buf: bytes, offset: int, what: str) -> None:
    with pytest.raises(CorruptDataError, match=what) as info:
        decode_uvarint(buf, offset, file="t.sst", base=1000)
    assert info.value.file == "t.sst"
    assert info.value.offset == 1000 + offset
    assert "t.sst" in str(info.value)
    with pytest.raises(CorruptDataError):
        decode_varint(buf, offset, file="t.sst")
