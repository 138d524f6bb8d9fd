"""apply_changes (lakefs_core/committed/apply/py) requires change keys in strictly ascending order.

Two changes for the same key are refused with BadInputError ("strictly ascending"), on the
plain-iterable path as on the async-iterable one, whether the key is new or already in the base, and
for upserts as for tombstones. Descending keys are refused the same way.
"""

from __future__ import annotations

import pytest

from lakefs_core.committed.apply import apply_changes
from lakefs_core.committed.metarange import MetaRange
from lakefs_core.committed.model import Change
from lakefs_core.committed.writer import MetaRangeWriter
from lakefs_core.errors import BadInputError
from lakefs_core.format.splitter import SplitPolicy
from tests.committed.support import as_async, memory_tables, rec, written


def duplicate_changes(key: str, kind: str) -> list[Change]:
    if kind == "upserts":
        return [Change(key.encode(), rec(key, b"1")), Change(key.encode(), rec(key, b"2"))]
    if kind == "tombstones":
        return [Change(key.encode(), None), Change(key.encode(), None)]
    return [Change(key.encode(), rec(key, b"1")), Change(key.encode(), None)]


@pytest.mark.parametrize("stream", ["sync", "async"])
@pytest.mark.parametrize("kind", ["upserts", "tombstones", "mixed"])
@pytest.mark.parametrize("key", ["0", "b", "m", "z"], ids=["before", "in-base", "between", "after"])
async def test_same_key_twice_is_refused(stream: str, kind: str, key: str) -> None:
    tables = memory_tables()
    base = await written(tables, [rec("a"), rec("b"), rec("c"), rec("x")])
    changes = duplicate_changes(key, kind)
    with pytest.raises(BadInputError, match="strictly ascending") as info:
        await apply_changes(
            tables, base, as_async(changes) if stream == "async" else changes, allow_empty=True
        )
    assert info.value.field == "changes"


@pytest.mark.parametrize("stream", ["sync", "async"])
async def test_same_key_twice_on_empty_base_is_refused(stream: str) -> None:
    tables = memory_tables()
    empty = await MetaRange.load(tables, "")
    changes = [Change(b"k", rec("k", b"1")), Change(b"k", rec("k", b"2"))]
    with pytest.raises(BadInputError, match="strictly ascending"):
        await apply_changes(tables, empty, as_async(changes) if stream == "async" else changes)


@pytest.mark.parametrize("stream", ["sync", "async"])
async def test_descending_keys_are_refused(stream: str) -> None:
    tables = memory_tables()
    empty = await MetaRange.load(tables, "")
    changes = [Change(b"k", rec("k")), Change(b"j", rec("j"))]
    with pytest.raises(BadInputError, match="strictly ascending"):
        await apply_changes(tables, empty, as_async(changes) if stream == "async" else changes)


async def test_metarange_writer_refuses_keys_out_of_order_across_ranges() -> None:
    """The table writer refuses a non-ascending key inside a range; the metarange writer checks the
    first record of each range, and a reused range, against the previous key (open range or not)."""
    tables = memory_tables()
    writer = MetaRangeWriter(tables, SplitPolicy(range_raggedness_entries=1))  # a range per record
    await writer.add(rec("b"))
    with pytest.raises(BadInputError, match="not after the previous key"):
        await writer.add(rec("a"))
    base = await written(tables, [rec("c"), rec("d")])
    open_range = MetaRangeWriter(tables, SplitPolicy(max_range_size_bytes=1 << 30))
    await open_range.add(rec("e"))
    with pytest.raises(BadInputError, match="not after the previous key"):
        await open_range.add_range(base.ranges[0])  # c..d before the open range's e
    with pytest.raises(BadInputError, match="strictly ascending"):
        await open_range.add(rec("e"))
    await open_range.add(rec("f"))
    _, ranges = await open_range.close()
    assert [(r.min_key, r.max_key, r.count) for r in ranges] == [(b"e", b"f", 2)]


async def test_appender_refuses_a_range_that_starts_before_the_previous_one() -> None:
    """The bulk path's appender checks a range's first key when the range closes, before storing."""
    tables = memory_tables()
    writer = MetaRangeWriter(tables, SplitPolicy(range_raggedness_entries=1))
    assert writer.appender()(rec("b")) is True
    await writer.close_current()
    assert writer.appender()(rec("a")) is True  # a new range: nothing to compare inside it
    with pytest.raises(BadInputError, match="not after the previous key"):
        await writer.close_current()
    assert writer.stats.ranges_written == 1
