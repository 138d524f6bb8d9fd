"""``set_many``'s argument check (shared by every driver): the fast path for plain, duplicate-free
batches returns exactly what the item-by-item rules return, for any batch (hypothesis), and bad
items are refused the same way whichever path sees them first."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lakefs_core.errors import BadInputError
from lakefs_core.kv._common import check_items
from lakefs_core.kv.base import KVItem


def reference(items: list[KVItem]) -> list[KVItem]:
    """The documented rule: a key given twice keeps its last value at its last occurrence."""
    last: dict[tuple[bytes, bytes], KVItem] = {}
    for p, k, v in items:
        last.pop((p, k), None)
        last[(p, k)] = (bytes(p), bytes(k), bytes(v))
    return list(last.values())


small = st.binary(min_size=1, max_size=3)
items = st.lists(st.tuples(small, small, st.binary(max_size=3)), max_size=30)


@given(items)
def test_any_batch_is_checked_as_the_rule_says(batch: list[KVItem]) -> None:
    assert check_items(batch) == reference(batch)
    assert check_items(iter(batch)) == reference(batch)  # any iterable, consumed once


@given(items)
def test_bytes_like_values_are_converted(batch: list[KVItem]) -> None:
    mixed = [(p, bytearray(k), memoryview(v)) for p, k, v in batch]
    out = check_items(mixed)
    assert out == reference(batch) and all(type(x) is bytes for item in out for x in item)


def test_the_result_is_never_the_callers_list() -> None:
    batch = [(b"p", b"k", b"v")]
    out = check_items(batch)
    assert out == batch and out is not batch


@pytest.mark.parametrize(
    "bad",
    [
        [(b"p", b"k")],
        [(b"p", b"k", b"v", b"x")],
        [[b"p", b"k", b"v"]],
        [(b"", b"k", b"v")],
        [(b"p", b"", b"v")],
        [(b"p", b"k", "text")],
        [(b"p", b"k", b"v"), (b"p", b"k2", None)],
    ],
)
def test_bad_items_are_refused(bad: list[object]) -> None:
    with pytest.raises(BadInputError):
        check_items(bad)
