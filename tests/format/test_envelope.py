"""The value envelope: round trips, varint edge cases and corruption reporting."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lakefs_core.errors import CorruptDataError
from lakefs_core.format.envelope import _decode_checked, decode_envelope, encode_envelope
from lakefs_core.format.varint import encode_uvarint, encode_varint

# Lengths around every varint width boundary of the zig-zag encoding (2n < 2^7, 2^14, 2^21).
EDGE_LENGTHS = [0, 1, 63, 64, 65, 8191, 8192, 8193]


def test_known_bytes() -> None:
    ident = bytes(range(32))
    value = encode_envelope(ident, b"data")
    assert value == b"\x40" + ident + b"\x08" + b"data"
    assert decode_envelope(value) == (ident, b"data")
    # 64-byte hex range ids need a two-byte prefix: 128 = 0x80 0x01.
    assert encode_envelope(b"a" * 64, b"")[:2] == b"\x80\x01"


@given(st.binary(max_size=300), st.binary(max_size=300), st.binary(max_size=20))
def test_round_trip(identity: bytes, data: bytes, trailing: bytes) -> None:
    value = encode_envelope(identity, data)
    assert decode_envelope(value) == (identity, data)
    # Trailing bytes after data are ignored.
    assert decode_envelope(value + trailing) == (identity, data)


@pytest.mark.parametrize("n", EDGE_LENGTHS)
@pytest.mark.parametrize("m", EDGE_LENGTHS)
def test_round_trip_at_varint_boundaries(n: int, m: int) -> None:
    identity, data = b"i" * n, b"d" * m
    value = encode_envelope(identity, data)
    assert value.startswith(encode_varint(n))
    assert decode_envelope(value) == (identity, data)


@given(st.binary(max_size=80))
def test_fast_path_agrees_with_checked_decoder(raw: bytes) -> None:
    try:
        expected = _decode_checked(raw, None, 0)
    except CorruptDataError:
        with pytest.raises(CorruptDataError):
            decode_envelope(raw)
    else:
        assert decode_envelope(raw) == expected


@given(st.binary(max_size=70), st.binary(max_size=200))
def test_every_truncation_is_corrupt(identity: bytes, data: bytes) -> None:
    value = encode_envelope(identity, data)
    for cut in range(len(value)):
        with pytest.raises(CorruptDataError):
            decode_envelope(value[:cut], file="f.sst")


def test_negative_identity_length() -> None:
    with pytest.raises(CorruptDataError, match="negative") as e:
        decode_envelope(b"\x01abc", file="r.sst", base=100)
    assert e.value.file == "r.sst"
    assert e.value.offset == 100


def test_negative_data_length_offset() -> None:
    value = encode_varint(2) + b"ab" + encode_varint(-3) + b"xyz"
    with pytest.raises(CorruptDataError, match="data length is negative") as e:
        decode_envelope(value, file="r.sst", base=1000)
    assert (e.value.file, e.value.offset) == ("r.sst", 1003)


def test_oversized_lengths() -> None:
    with pytest.raises(CorruptDataError, match="identity length 32 exceeds") as e:
        decode_envelope(b"\x40" + b"x" * 31, file="r.sst")
    assert e.value.offset == 0
    with pytest.raises(CorruptDataError, match="data length 100 exceeds") as e:
        decode_envelope(b"\x00" + encode_varint(100) + b"x" * 99, file="r.sst", base=7)
    assert e.value.offset == 8
    # A length beyond 2^62 must not be accepted through any arithmetic shortcut.
    with pytest.raises(CorruptDataError):
        decode_envelope(encode_uvarint((1 << 64) - 2) + b"x")


def test_malformed_varints() -> None:
    with pytest.raises(CorruptDataError):
        decode_envelope(b"")
    with pytest.raises(CorruptDataError):
        decode_envelope(b"\x80")  # continuation bit with nothing after it
    with pytest.raises(CorruptDataError):
        decode_envelope(b"\xff" * 11)  # longer than 10 bytes
    with pytest.raises(CorruptDataError, match="before data length"):
        decode_envelope(b"\x04ab")  # identity fine, then nothing


def test_length_prefix_table_is_the_varint_encoding() -> None:
    """Lengths below the table size take a precomputed prefix built without the encoder."""
    from lakefs_core.format.envelope import _PREFIX_TABLE_SIZE, _PREFIXES
    from lakefs_core.format.varint import encode_varint

    assert len(_PREFIXES) == _PREFIX_TABLE_SIZE
    assert all(_PREFIXES[n] == encode_varint(n) for n in range(_PREFIX_TABLE_SIZE))
