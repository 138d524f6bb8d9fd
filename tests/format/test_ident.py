"""The ident encoding against hand-written byte strings (spec section 4)."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lakefs_core.errors import BadInputError
from lakefs_core.format.ident import (
    IdentHasher,
    encode_bytes,
    encode_embedded,
    encode_int64,
    encode_string,
    encode_string_map,
    encode_string_slice,
)


def i64(n: int) -> bytes:
    """Hand-built Int64: tag 2, 0x08, 8 bytes big-endian two's complement."""
    return b"\x02\x08" + (n & 0xFFFFFFFFFFFFFFFF).to_bytes(8, "big")


def test_int64_bytes() -> None:
    assert encode_int64(0) == b"\x02\x08\x00\x00\x00\x00\x00\x00\x00\x00"
    assert encode_int64(1) == b"\x02\x08\x00\x00\x00\x00\x00\x00\x00\x01"
    assert encode_int64(0x0102030405060708) == b"\x02\x08\x01\x02\x03\x04\x05\x06\x07\x08"
    assert encode_int64(-1) == b"\x02\x08" + b"\xff" * 8
    assert encode_int64(-(1 << 63)) == b"\x02\x08\x80" + b"\x00" * 7
    assert encode_int64((1 << 63) - 1) == b"\x02\x08\x7f" + b"\xff" * 7


@pytest.mark.parametrize("bad", [1 << 63, -(1 << 63) - 1, 1 << 70])
def test_int64_range(bad: int) -> None:
    with pytest.raises(BadInputError):
        encode_int64(bad)
    with pytest.raises(BadInputError):
        IdentHasher().int64(bad)


def test_string_and_bytes() -> None:
    assert encode_string("ab") == b"\x01" + i64(2) + b"ab"
    assert encode_string("") == b"\x01" + i64(0)
    # Length counts UTF-8 bytes, not characters.
    assert encode_string("é") == b"\x01" + i64(2) + b"\xc3\xa9"
    assert encode_string(b"\xff\x00") == b"\x01" + i64(2) + b"\xff\x00"
    assert encode_bytes(b"\x00\x01") == b"\x00" + i64(2) + b"\x00\x01"


def test_string_slice() -> None:
    assert encode_string_slice(["a", "bc"]) == (
        b"\x03" + i64(2) + b"\x01" + i64(1) + b"a" + b"\x01" + i64(2) + b"bc"
    )
    assert encode_string_slice([]) == b"\x03" + i64(0)


def test_string_map_sorted_keys() -> None:
    expected = (
        b"\x04"
        + i64(3)
        + (b"\x01" + i64(1) + b"a" + b"\x01" + i64(1) + b"1")
        + (b"\x01" + i64(1) + b"b" + b"\x01" + i64(1) + b"2")
        + (b"\x01" + i64(2) + b"\xc3\xa9" + b"\x01" + i64(1) + b"\xff")
    )
    assert encode_string_map({"é": b"\xff", "b": "2", "a": "1"}) == expected
    assert encode_string_map({}) == b"\x04" + i64(0)


def test_embedded() -> None:
    inner = hashlib.sha256(b"x").digest()
    assert encode_embedded(inner) == b"\x05\x00" + i64(32) + inner


def test_unencodable_string() -> None:
    with pytest.raises(BadInputError):
        encode_string("\ud800")
    with pytest.raises(BadInputError):
        IdentHasher().string_map({"k": "\udcff"})


def test_hasher_equals_sha256_of_encodings() -> None:
    inner = b"\x07" * 32
    h = (
        IdentHasher()
        .int64(-5)
        .string("s")
        .bytes_(b"b")
        .string_slice(["x", "y"])
        .string_map({"k": "v"})
        .embedded(inner)
        .raw(b"|raw|")
    )
    manual = hashlib.sha256(
        encode_int64(-5)
        + encode_string("s")
        + encode_bytes(b"b")
        + encode_string_slice(["x", "y"])
        + encode_string_map({"k": "v"})
        + encode_embedded(inner)
        + b"|raw|"
    )
    assert h.digest() == manual.digest()
    assert h.hexdigest() == manual.hexdigest()


@given(st.dictionaries(st.text(), st.text() | st.binary(), max_size=8))
def test_string_map_order_is_bytewise(m: dict[str, str | bytes]) -> None:
    # Sorting by code point and by UTF-8 bytes agree; the encoding must not depend on insertion order.
    reversed_m = dict(reversed(list(m.items())))
    assert encode_string_map(m) == encode_string_map(reversed_m)
    assert IdentHasher().string_map(m).digest() == hashlib.sha256(encode_string_map(m)).digest()
