"""Range boundaries: FNV-1a-64 vectors and the break rule of spec section 5."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lakefs_core.errors import BadInputError
from lakefs_core.format.splitter import SplitPolicy, fnv1a64


def reference_fnv1a64(data: bytes) -> int:
    h = 0xCBF29CE484222325
    for b in data:
        h ^= b
        h = (h * 0x100000001B3) % (1 << 64)
    return h


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"", 0xCBF29CE484222325),
        (b"a", 0xAF63DC4C8601EC8C),
        (b"foobar", 0x85944171F73967E8),
    ],
)
def test_fnv1a64_vectors(data: bytes, expected: int) -> None:
    assert fnv1a64(data) == expected


@given(st.binary(max_size=200))
def test_fnv1a64_matches_reference(data: bytes) -> None:
    assert fnv1a64(data) == reference_fnv1a64(data)


def test_defaults() -> None:
    p = SplitPolicy()
    assert p.min_range_size_bytes == 0
    assert p.max_range_size_bytes == 20 * 1024 * 1024
    assert p.range_raggedness_entries == 50_000


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"min_range_size_bytes": -1}, "min_range_size_bytes"),
        ({"max_range_size_bytes": 0}, "max_range_size_bytes"),
        ({"min_range_size_bytes": 10, "max_range_size_bytes": 5}, "max_range_size_bytes"),
        ({"range_raggedness_entries": 0}, "range_raggedness_entries"),
        ({"range_raggedness_entries": 2.5}, "range_raggedness_entries"),
        ({"max_range_size_bytes": True}, "max_range_size_bytes"),
    ],
)
def test_validation(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(BadInputError) as e:
        SplitPolicy(**kwargs)  # type: ignore[arg-type]
    assert e.value.field == field


def test_break_rule() -> None:
    key = b"foobar"
    h = fnv1a64(key)
    divisor = next(d for d in range(2, 1000) if h % d == 0)
    non_divisor = next(d for d in range(2, 1000) if h % d != 0)

    p = SplitPolicy(min_range_size_bytes=100, max_range_size_bytes=1000, range_raggedness_entries=divisor)
    assert not p.should_break(key, 99)  # below min: never, even on a hash hit
    assert p.should_break(key, 100)  # hash hit once min is reached
    assert p.should_break(key, 999)

    q = SplitPolicy(min_range_size_bytes=100, max_range_size_bytes=1000, range_raggedness_entries=non_divisor)
    assert not q.should_break(key, 100)
    assert not q.should_break(key, 999)
    assert q.should_break(key, 1000)  # at max: always
    assert not q.should_break(key, 50)

    # Raggedness 1 breaks after every record.
    assert SplitPolicy(range_raggedness_entries=1).should_break(b"anything", 0)


def test_boundaries_are_content_defined() -> None:
    p = SplitPolicy(range_raggedness_entries=7)
    keys = [f"dir/file-{i:05d}".encode() for i in range(2000)]
    breaks = {k for k in keys if p.should_break(k, 0)}
    # Roughly one key in seven breaks, and the decision does not depend on neighbours.
    assert 2000 / 7 * 0.7 < len(breaks) < 2000 / 7 * 1.3
    assert {k for k in reversed(keys) if p.should_break(k, 0)} == breaks
