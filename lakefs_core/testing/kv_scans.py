"""The KVStore contract's scans (part of :mod:`lakefs_core.testing.kv`, which a driver imports):
bytewise order, inclusive starts and exclusive ends, paging, :func:`~lakefs_core.kv.ranges.scan_ranges`,
partition isolation, writes between pages and abandoned scans."""

from __future__ import annotations

import pytest

from lakefs_core.errors import BadInputError, NotFoundError
from lakefs_core.kv import KVStore
from lakefs_core.kv.base import KeyRange
from lakefs_core.kv.ranges import point_range, prefix_range, scan_ranges
from lakefs_core.testing.kv_driver import P, collect, keys_of

# -- scans --------------------------------------------------------------------------------------

ORDER_KEYS = [b"\xff", b"b", b"a\x00", b"a", b"\x00", b"a\xff", b"\x7f", b"\x80", b"ab", b"\x01\x00"]


async def test_scan_is_bytewise_ascending(kv: KVStore) -> None:
    for i, key in enumerate(ORDER_KEYS):
        await kv.set(P, key, b"v%d" % i)
    entries = await collect(kv.scan(P))
    assert [e.key for e in entries] == sorted(ORDER_KEYS)
    # Unsigned bytes (0x7f < 0x80 < 0xff); a prefix sorts before its extensions.
    assert [e.key for e in entries] == [
        b"\x00",
        b"\x01\x00",
        b"a",
        b"a\x00",
        b"ab",
        b"a\xff",
        b"b",
        b"\x7f",
        b"\x80",
        b"\xff",
    ]
    by_key = {key: b"v%d" % i for i, key in enumerate(ORDER_KEYS)}
    assert all(e.value == by_key[e.key] for e in entries)


async def test_scan_start_is_inclusive(kv: KVStore) -> None:
    for key in ORDER_KEYS:
        await kv.set(P, key, b"v")
    ordered = sorted(ORDER_KEYS)
    assert await keys_of(kv, start=b"a") == [k for k in ordered if k >= b"a"]
    assert (await keys_of(kv, start=b"a"))[0] == b"a"
    assert await keys_of(kv, start=b"a\x00") == [k for k in ordered if k >= b"a\x00"]
    assert await keys_of(kv, start=b"a\x01") == [k for k in ordered if k >= b"a\x01"]
    assert await keys_of(kv, start=b"\xff") == [b"\xff"]
    assert await keys_of(kv, start=b"\xff\x00") == []
    assert await keys_of(kv, start=b"") == ordered


@pytest.mark.parametrize("page_size", [1, 2, 3, 7, 8, 1000])
async def test_scan_pages_across_boundaries(kv: KVStore, page_size: int) -> None:
    keys = [b"key-%02d" % i for i in range(7)]
    for key in reversed(keys):
        await kv.set(P, key, key.upper())
    entries = await collect(kv.scan(P, page_size=page_size))
    assert [e.key for e in entries] == keys
    assert [e.value for e in entries] == [k.upper() for k in keys]
    assert await keys_of(kv, start=b"key-03", page_size=page_size) == keys[3:]


async def test_scan_six_keys_exact_pages(kv: KVStore) -> None:
    keys = [b"k%d" % i for i in range(6)]
    for key in keys:
        await kv.set(P, key, b"")
    assert await keys_of(kv, page_size=2) == keys
    assert await keys_of(kv, page_size=3) == keys
    assert await keys_of(kv, page_size=6) == keys


async def test_scan_end_is_exclusive(kv: KVStore) -> None:
    for key in ORDER_KEYS:
        await kv.set(P, key, b"v")
    await kv.set(b"next", b"a", b"v")  # another partition: never read
    ordered = sorted(ORDER_KEYS)
    for start, end, sizes in [
        (b"", b"a", (2, 1000)),
        (b"a", b"a\xff", (2, 3)),  # pages that end before and at the bound
        (b"a\x00", b"ab\x00", (1000,)),
        (b"b", b"\xff\x00", (1000,)),
        (b"", b"\x00", (1000,)),
    ]:
        wanted = [k for k in ordered if start <= k < end]
        for page_size in sizes:
            assert await keys_of(kv, start=start, end=end, page_size=page_size) == wanted, (start, end)
    assert await keys_of(kv, start=b"b", end=b"b") == []
    assert await keys_of(kv, start=b"b", end=b"a") == []
    with pytest.raises(BadInputError):
        await keys_of(kv, end="b")  # type: ignore[arg-type]


async def test_scan_empty_and_missing_partition(kv: KVStore) -> None:
    assert await keys_of(kv, b"nobody-home") == []
    await kv.set(P, b"k", b"v")
    await kv.delete(P, b"k")
    assert await keys_of(kv) == []


class _ScanOnly:
    """The store seen through get and scan only: :func:`scan_ranges`' fallback."""

    def __init__(self, kv: KVStore) -> None:
        self.scan = kv.scan


@pytest.mark.parametrize("page_size", [1, 2, 3, 1000])
async def test_scan_ranges_by_range_then_key_across_pages(kv: KVStore, page_size: int) -> None:
    stored = {
        b"p": [b"a", b"branches/x", b"branches/y", b"branches/y\x00", b"branches0", b"commits/1", b"tags/t"],
        b"pp": [b"branches/", b"branches/\xff", b"tags/"],
        b"q": [b"\x00", b"k", b"\xff\xff"],
    }
    await kv.set_many([(p, k, p + b"=" + k) for p, keys in stored.items() for k in keys])
    ranges: list[KeyRange] = [
        prefix_range(b"pp", b"branches/"),
        prefix_range(b"p", b"branches/"),
        point_range(b"p", b"tags/t"),
        point_range(b"p", b"tags/missing"),
        (b"q", b"", b"\xff\xff\xff"),
        (b"p", b"z", b"a"),  # empty: end before start
        prefix_range(b"nobody-home", b"branches/"),
        prefix_range(b"p", b"branches/"),  # twice: read twice
    ]
    want = [
        (i, k, p + b"=" + k)
        for i, (p, start, end) in enumerate(ranges)
        for k in sorted(stored.get(p, []))
        if start <= k < end
    ]
    native = [(i, e.key, e.value) async for i, e in scan_ranges(kv, ranges, page_size=page_size)]
    fallback = [
        (i, e.key, e.value)
        async for i, e in scan_ranges(_ScanOnly(kv), ranges, page_size=page_size)  # type: ignore[arg-type]
    ]
    assert native == want == fallback
    assert [k for i, k, _ in want if i == 1] == [b"branches/x", b"branches/y", b"branches/y\x00"]
    assert [x async for x in scan_ranges(kv, [])] == []


async def test_scan_ranges_many_ranges_in_order(kv: KVStore) -> None:
    """More ranges than one batched request takes (DynamoDB: 100 keys a BatchGetItem), point and
    prefix ranges interleaved, some keys missing: every entry once, by range index."""
    n = 110
    await kv.set_many([(b"p%d" % (i % 3), b"k%03d/%d" % (i, j), b"") for i in range(n) for j in (0, 1)])
    ranges: list[KeyRange] = [
        prefix_range(b"p%d" % (i % 3), b"k%03d/" % i)
        if i % 10 == 0
        else point_range(b"p%d" % (i % 3), b"k%03d/%d" % (i, i % 3))
        for i in range(n)
    ]
    got = [(i, e.key) async for i, e in scan_ranges(kv, ranges)]
    want = [
        (i, b"k%03d/%d" % (i, j)) for i in range(n) for j in ((0, 1) if i % 10 == 0 else (i % 3,)) if j < 2
    ]
    assert got == want


async def test_scan_ranges_bad_input_refused(kv: KVStore) -> None:
    for bad in ([(b"", b"a", b"b")], [(b"p", b"a")], b"p", [(b"p", "a", b"b")]):
        with pytest.raises(BadInputError):
            _ = [x async for x in scan_ranges(kv, bad)]  # type: ignore[arg-type]
    with pytest.raises(BadInputError):
        _ = [x async for x in scan_ranges(kv, [(b"p", b"a", b"b")], page_size=0)]


async def test_partitions_are_isolated(kv: KVStore) -> None:
    parts = [b"p", b"p\x00", b"pp", b"o", b"q"]
    for part in parts:
        for key in (b"a", b"b", b"c"):
            await kv.set(part, key, part + b"/" + key)
    for part in parts:
        entries = await collect(kv.scan(part, page_size=2))
        assert [(e.key, e.value) for e in entries] == [(k, part + b"/" + k) for k in (b"a", b"b", b"c")]
    await kv.delete(b"p", b"b")
    assert await keys_of(kv, b"p") == [b"a", b"c"]
    assert await keys_of(kv, b"pp") == [b"a", b"b", b"c"]
    with pytest.raises(NotFoundError):
        await kv.get(b"p", b"b")
    assert await kv.get(b"p\x00", b"b") == b"p\x00/b"


async def test_scan_tolerates_writes_between_pages(kv: KVStore) -> None:
    for i in range(6):
        await kv.set(P, b"k%d" % i, b"v")
    seen: list[bytes] = []
    async for entry in kv.scan(P, page_size=2):
        seen.append(entry.key)
        if entry.key == b"k1":
            await kv.delete(P, b"k3")  # not yet returned: must disappear
            await kv.set(P, b"k0a", b"v")  # behind the cursor: must not appear
            await kv.set(P, b"k9", b"v")  # ahead of the cursor: must appear
    assert seen == [b"k0", b"k1", b"k2", b"k4", b"k5", b"k9"]


async def test_abandoned_scan_does_not_block_the_store(kv: KVStore) -> None:
    for i in range(10):
        await kv.set(P, b"k%d" % i, b"v")
    for _ in range(30):  # more than any connection pool
        async for _entry in kv.scan(P, page_size=2):
            break
    await kv.set(P, b"after", b"v")
    assert await kv.get(P, b"after") == b"v"
