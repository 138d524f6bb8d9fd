"""The KVStore contract (:mod:`lakefs_core.kv.base`) as a pytest suite a driver runs.

A driver's test module imports the suite and provides one fixture, ``kv_driver``: a
:class:`KVDriver` whose ``open()`` opens a new handle on one fresh, empty store (every call the same
store; the suite opens it, closes it, opens it again)::

    import pytest
    from lakefs_core.testing.kv import *  # noqa: F403 (the contract's tests and fixtures)
    from lakefs_core.testing.kv import KVDriver

    @pytest.fixture
    def kv_driver(tmp_path) -> KVDriver:
        return KVDriver(lambda: MyKVStore.open(tmp_path / "db"), persistent=True)

The project runs it against every driver of its own (``tests/kv/test_contract.py``: memory, SQLite,
PostgreSQL, DynamoDB on moto). Needs pytest and pytest-asyncio in ``asyncio_mode = "auto"`` (the
``dev`` extra); the library itself never imports this module.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass

import pytest

from lakefs_core.errors import (
    BadInputError,
    LakeFSError,
    NotFoundError,
    PreconditionFailedError,
    TransientError,
)
from lakefs_core.kv import Expect, KVEntry, KVStore
from lakefs_core.kv.base import KeyRange, KVItem
from lakefs_core.kv.ranges import point_range, prefix_range, scan_ranges

__all__ = [  # ``import *`` takes the fixture and every test
    "KVDriver",
    "kv",
    "test_a_late_failure_of_the_items_stores_nothing",
    "test_abandoned_scan_does_not_block_the_store",
    "test_bad_keys_rejected",
    "test_bad_value_expectation_and_page_size_rejected",
    "test_binary_keys_values_and_empty_value",
    "test_bytearray_and_memoryview_accepted",
    "test_cas_race_exactly_one_winner_per_round",
    "test_closed_store_refuses_and_close_is_idempotent",
    "test_concurrent_increment_loops_end_exact",
    "test_concurrent_set_many_batches_all_land",
    "test_data_persists_across_reopen",
    "test_delete",
    "test_get_missing_is_not_found",
    "test_large_value_round_trips",
    "test_partitions_are_isolated",
    "test_precondition_failure_is_a_conflict_not_retryable",
    "test_scan_empty_and_missing_partition",
    "test_scan_end_is_exclusive",
    "test_scan_is_bytewise_ascending",
    "test_scan_pages_across_boundaries",
    "test_scan_ranges_bad_input_refused",
    "test_scan_ranges_by_range_then_key_across_pages",
    "test_scan_ranges_many_ranges_in_order",
    "test_scan_six_keys_exact_pages",
    "test_scan_start_is_inclusive",
    "test_scan_tolerates_writes_between_pages",
    "test_set_if_absent",
    "test_set_if_absent_race_exactly_one_winner",
    "test_set_if_equals",
    "test_set_if_exists",
    "test_set_many_bad_item_rejected_before_anything_is_written",
    "test_set_many_empty_batch_and_generator",
    "test_set_many_if_absent_inserts_once",
    "test_set_many_if_and_a_cas_on_its_expected_key_exactly_one_wins",
    "test_set_many_if_bad_expectations_refused_before_anything_is_written",
    "test_set_many_if_stores_nothing_when_one_expectation_fails",
    "test_set_many_if_stores_the_batch_when_every_expectation_holds",
    "test_set_many_if_takes_up_to_its_limit_and_refuses_more",
    "test_set_many_large_values",
    "test_set_many_of_a_long_generator_with_repeats_keeps_the_last_values",
    "test_set_many_repeated_key_keeps_the_last_value",
    "test_set_many_then_get_bad_input_rejected_before_anything_is_written",
    "test_set_many_then_get_no_unseen_change_is_ordered_before_the_batch",
    "test_set_many_then_get_of_a_missing_key_raises_after_storing_the_batch",
    "test_set_many_then_get_stores_the_batch_and_reads_the_key",
    "test_set_many_writes_every_item_across_partitions",
    "test_set_then_get_and_overwrite",
]

P = b"partition"


@dataclass(frozen=True)
class KVDriver:
    """How the suite reaches the store under test."""

    open: Callable[[], Awaitable[KVStore]]  # a new handle on the one fresh store of this test
    persistent: bool = True  # a handle opened after another closed sees its data (memory: no)


@pytest.fixture
async def kv(kv_driver: KVDriver) -> AsyncIterator[KVStore]:
    store = await kv_driver.open()
    try:
        yield store
    finally:
        await store.close()


async def collect(it: AsyncIterator[KVEntry]) -> list[KVEntry]:
    return [entry async for entry in it]


async def keys_of(
    kv: KVStore, partition: bytes = P, start: bytes = b"", page_size: int = 1000, end: bytes | None = None
) -> list[bytes]:
    return [e.key for e in await collect(kv.scan(partition, start, end=end, page_size=page_size))]


# -- point operations ---------------------------------------------------------------------------


async def test_get_missing_is_not_found(kv: KVStore) -> None:
    with pytest.raises(NotFoundError):
        await kv.get(P, b"missing")


async def test_set_then_get_and_overwrite(kv: KVStore) -> None:
    await kv.set(P, b"k", b"v1")
    assert await kv.get(P, b"k") == b"v1"
    await kv.set(P, b"k", b"v2")
    assert await kv.get(P, b"k") == b"v2"


async def test_set_if_absent(kv: KVStore) -> None:
    await kv.set_if(P, b"k", b"first", Expect.ABSENT)
    with pytest.raises(PreconditionFailedError):
        await kv.set_if(P, b"k", b"second", Expect.ABSENT)
    assert await kv.get(P, b"k") == b"first"


async def test_set_if_exists(kv: KVStore) -> None:
    with pytest.raises(PreconditionFailedError):
        await kv.set_if(P, b"k", b"v", Expect.EXISTS)
    with pytest.raises(NotFoundError):
        await kv.get(P, b"k")
    await kv.set(P, b"k", b"v1")
    await kv.set_if(P, b"k", b"v2", Expect.EXISTS)
    assert await kv.get(P, b"k") == b"v2"


async def test_set_if_equals(kv: KVStore) -> None:
    with pytest.raises(PreconditionFailedError):
        await kv.set_if(P, b"k", b"v", Expect.equals(b"anything"))
    with pytest.raises(NotFoundError):
        await kv.get(P, b"k")

    await kv.set(P, b"k", b"v1")
    pred = await kv.get(P, b"k")
    await kv.set_if(P, b"k", b"v2", Expect.equals(pred))
    assert await kv.get(P, b"k") == b"v2"

    with pytest.raises(PreconditionFailedError):  # stale predicate
        await kv.set_if(P, b"k", b"v3", Expect.equals(pred))
    assert await kv.get(P, b"k") == b"v2"


async def test_precondition_failure_is_a_conflict_not_retryable(kv: KVStore) -> None:
    await kv.set(P, b"k", b"v")
    with pytest.raises(PreconditionFailedError) as info:
        await kv.set_if(P, b"k", b"w", Expect.ABSENT)
    assert not info.value.retryable
    assert info.value.exit_code == 4


async def test_delete(kv: KVStore) -> None:
    await kv.delete(P, b"never-existed")  # not an error
    await kv.set(P, b"k", b"v")
    await kv.delete(P, b"k")
    with pytest.raises(NotFoundError):
        await kv.get(P, b"k")
    await kv.delete(P, b"k")  # twice is fine
    await kv.set_if(P, b"k", b"again", Expect.ABSENT)  # a deleted key is absent
    assert await kv.get(P, b"k") == b"again"


async def test_binary_keys_values_and_empty_value(kv: KVStore) -> None:
    part = b"\x00bin\xffpart"
    cases = {
        b"\x00": b"zero-key",
        b"\xff": b"\x00\x01\x02\xff",
        b"a\x00b": b"",
        b"\xff\xff\x00": bytes(range(256)),
    }
    for key, value in cases.items():
        await kv.set(part, key, value)
    for key, value in cases.items():
        assert await kv.get(part, key) == value
    # The empty value is a real value: it exists and is its own predicate.
    await kv.set_if(part, b"a\x00b", b"filled", Expect.equals(b""))
    assert await kv.get(part, b"a\x00b") == b"filled"
    await kv.set_if(part, b"a\x00b", b"", Expect.EXISTS)
    with pytest.raises(PreconditionFailedError):
        await kv.set_if(part, b"a\x00b", b"x", Expect.ABSENT)
    await kv.set_if(part, b"new-empty", b"", Expect.ABSENT)
    assert await kv.get(part, b"new-empty") == b""
    assert await keys_of(kv, part) == sorted([*cases, b"new-empty"])


async def test_large_value_round_trips(kv: KVStore) -> None:
    value = bytes(range(256)) * 400  # 100 KiB, under DynamoDB's 400 KB item limit
    await kv.set(P, b"big", value)
    assert await kv.get(P, b"big") == value
    await kv.set_if(P, b"big", b"small", Expect.equals(value))
    assert await kv.get(P, b"big") == b"small"


async def test_bytearray_and_memoryview_accepted(kv: KVStore) -> None:
    await kv.set(P, bytearray(b"k"), memoryview(b"v"))  # type: ignore[arg-type]
    assert await kv.get(P, b"k") == b"v"


@pytest.mark.parametrize(
    ("partition", "key", "field"),
    [(b"", b"k", "partition"), (P, b"", "key"), ("text", b"k", "partition"), (P, "k", "key")],
)
async def test_bad_keys_rejected(kv: KVStore, partition: object, key: object, field: str) -> None:
    with pytest.raises(BadInputError) as info:
        await kv.get(partition, key)  # type: ignore[arg-type]
    assert info.value.field == field
    with pytest.raises(BadInputError):
        await kv.set(partition, key, b"v")  # type: ignore[arg-type]
    with pytest.raises(BadInputError):
        await kv.set_if(partition, key, b"v", Expect.ABSENT)  # type: ignore[arg-type]
    with pytest.raises(BadInputError):
        await kv.delete(partition, key)  # type: ignore[arg-type]


async def test_bad_value_expectation_and_page_size_rejected(kv: KVStore) -> None:
    with pytest.raises(BadInputError) as info:
        await kv.set(P, b"k", "text")  # type: ignore[arg-type]
    assert info.value.field == "value"
    with pytest.raises(BadInputError) as info:
        await kv.set_if(P, b"k", b"v", Expect("sometimes"))
    assert info.value.field == "expected"
    with pytest.raises(BadInputError) as info:
        await collect(kv.scan(P, page_size=0))
    assert info.value.field == "page_size"
    with pytest.raises(BadInputError) as info:
        await collect(kv.scan(b""))
    assert info.value.field == "partition"


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


# -- compare-and-swap under concurrency ---------------------------------------------------------


async def test_cas_race_exactly_one_winner_per_round(kv: KVStore) -> None:
    n = 20
    await kv.set(P, b"counter", b"0")
    for round_no in range(3):
        pred = await kv.get(P, b"counter")
        assert pred == str(round_no).encode()
        new = str(round_no + 1).encode()

        async def attempt(i: int, pred: bytes = pred, new: bytes = new) -> bool:
            try:
                await kv.set_if(P, b"counter", new + b"#%d" % i, Expect.equals(pred))
            except PreconditionFailedError:
                return False
            return True

        outcomes = await asyncio.gather(*(attempt(i) for i in range(n)))
        assert sum(outcomes) == 1, outcomes
        winner = outcomes.index(True)
        assert await kv.get(P, b"counter") == new + b"#%d" % winner
        await kv.set(P, b"counter", new)  # normalise for the next round


async def test_set_if_absent_race_exactly_one_winner(kv: KVStore) -> None:
    async def attempt(i: int) -> bool:
        try:
            await kv.set_if(P, b"once", b"%d" % i, Expect.ABSENT)
        except PreconditionFailedError:
            return False
        return True

    outcomes = await asyncio.gather(*(attempt(i) for i in range(20)))
    assert sum(outcomes) == 1
    assert await kv.get(P, b"once") == b"%d" % outcomes.index(True)


async def cas_increment(kv: KVStore, partition: bytes, key: bytes, times: int) -> int:
    """Read-CAS-retry ``times`` increments; returns how many CAS attempts lost a race."""
    lost = 0
    done = 0
    while done < times:
        try:
            current = await kv.get(partition, key)
            await kv.set_if(partition, key, b"%d" % (int(current) + 1), Expect.equals(current))
        except (PreconditionFailedError, TransientError):
            lost += 1
            await asyncio.sleep(0)
            continue
        done += 1
    return lost


async def test_concurrent_increment_loops_end_exact(kv: KVStore) -> None:
    tasks, per_task = 8, 10
    await kv.set_if(P, b"counter", b"0", Expect.ABSENT)
    await asyncio.gather(*(cas_increment(kv, P, b"counter", per_task) for _ in range(tasks)))
    assert await kv.get(P, b"counter") == b"%d" % (tasks * per_task)


# -- lifecycle ----------------------------------------------------------------------------------


async def test_closed_store_refuses_and_close_is_idempotent(kv_driver: KVDriver) -> None:
    store = await kv_driver.open()
    await store.close()
    await store.close()
    with pytest.raises(LakeFSError) as info:
        await store.get(P, b"k")
    assert "closed" in str(info.value)
    assert not info.value.retryable


async def test_data_persists_across_reopen(kv_driver: KVDriver) -> None:
    first = await kv_driver.open()
    try:
        await first.set(b"persist", b"k", b"kept")
    finally:
        await first.close()
    second = await kv_driver.open()
    try:
        if not kv_driver.persistent:  # each memory store is its own world
            with pytest.raises(NotFoundError):
                await second.get(b"persist", b"k")
        else:
            assert await second.get(b"persist", b"k") == b"kept"
    finally:
        await second.delete(b"persist", b"k")
        await second.close()


# -- set_many -----------------------------------------------------------------------------------


async def test_set_many_writes_every_item_across_partitions(kv: KVStore) -> None:
    await kv.set(P, b"old", b"before")
    items = [(P, b"k%04d" % i, b"v%d" % i) for i in range(700)]  # > SQL rows/statement, > 25 (DynamoDB)
    items += [(b"other", b"x", b"in another partition"), (P, b"old", b"after")]
    await kv.set_many(items)
    assert await keys_of(kv) == sorted([b"k%04d" % i for i in range(700)] + [b"old"])
    assert await kv.get(P, b"k0699") == b"v699"
    assert await kv.get(P, b"old") == b"after"
    assert await kv.get(b"other", b"x") == b"in another partition"


async def test_set_many_repeated_key_keeps_the_last_value(kv: KVStore) -> None:
    await kv.set_many([(P, b"dup", b"first"), (P, b"a", b"1"), (P, b"dup", b"last"), (P, b"dup", b"")])
    assert await kv.get(P, b"dup") == b""
    assert await kv.get(P, b"a") == b"1"


async def test_set_many_empty_batch_and_generator(kv: KVStore) -> None:
    await kv.set_many([])
    assert await keys_of(kv) == []
    await kv.set_many((P, b"g%d" % i, bytearray(b"v")) for i in range(3))  # type: ignore[misc]
    assert await keys_of(kv) == [b"g0", b"g1", b"g2"]
    assert await kv.get(P, b"g1") == b"v"


async def test_set_many_bad_item_rejected_before_anything_is_written(kv: KVStore) -> None:
    bad_batches: list[list[object]] = [
        [(P, b"ok", b"1"), (P, b"", b"empty key")],
        [(P, b"ok", b"1"), (b"", b"k", b"empty partition")],
        [(P, b"ok", b"1"), (P, b"k", "not bytes")],
        [(P, b"ok", b"1"), (P, b"k")],
        [(P, b"ok", b"1"), "not a tuple"],
    ]
    for batch in bad_batches:
        with pytest.raises(BadInputError):
            await kv.set_many(batch)  # type: ignore[arg-type]
    assert await keys_of(kv) == []


def _streamed(n: int, keys: int) -> Iterator[KVItem]:
    """``n`` items over ``keys`` keys, each key repeated at distances of ``keys`` items."""
    for i in range(n):
        yield (P, b"k%04d" % (i % keys), b"v%d" % i)


async def test_set_many_of_a_long_generator_with_repeats_keeps_the_last_values(kv: KVStore) -> None:
    # 1,000 items: more than 700 (the SQL test above) and 25 (a DynamoDB batch), with every
    # key of the first 400 given again 600 items later.
    await kv.set_many(_streamed(1000, 600))
    assert await keys_of(kv) == [b"k%04d" % j for j in range(600)]
    assert await kv.get(P, b"k0000") == b"v600"
    assert await kv.get(P, b"k0399") == b"v999"
    assert await kv.get(P, b"k0400") == b"v400"
    await kv.set(b"refs", b"branch", b"v1")
    assert await kv.set_many_then_get(_streamed(1000, 300), b"refs", b"branch") == b"v1"
    assert await kv.get(P, b"k0000") == b"v900"
    assert await kv.get(P, b"k0099") == b"v999"
    assert await kv.get(P, b"k0100") == b"v700"


def _failing_late(error: BaseException | None) -> Iterator[object]:
    """900 good items, then an error or a bad item."""
    for i in range(900):
        yield (P, b"late%04d" % i, b"v")
    if error is not None:
        raise error
    yield (P, b"", b"an empty key")


@pytest.mark.parametrize("bad", ["bad item", "iterable raises"])
async def test_a_late_failure_of_the_items_stores_nothing(kv: KVStore, bad: str) -> None:
    await kv.set(b"refs", b"branch", b"v1")
    error: type[BaseException] = BadInputError if bad == "bad item" else ZeroDivisionError
    raised = None if bad == "bad item" else ZeroDivisionError("the source failed")
    with pytest.raises(error):
        await kv.set_many(_failing_late(raised))  # type: ignore[arg-type]
    with pytest.raises(error):
        await kv.set_many_then_get(_failing_late(raised), b"refs", b"branch")  # type: ignore[arg-type]
    assert await keys_of(kv) == []
    assert await kv.get(b"refs", b"branch") == b"v1"
    await kv.set_many([(P, b"after", b"ok")])  # the store is usable afterwards (no lock left held)
    assert await keys_of(kv) == [b"after"]


async def test_set_many_large_values(kv: KVStore) -> None:
    big = bytes(range(256)) * 1000  # 256 KB each, under DynamoDB's 400 KB item limit
    await kv.set_many([(P, b"big1", big), (P, b"big2", big[::-1])])
    assert await kv.get(P, b"big1") == big
    assert await kv.get(P, b"big2") == big[::-1]


# -- set_many_then_get ---------------------------------------------------------------------------


async def test_set_many_then_get_stores_the_batch_and_reads_the_key(kv: KVStore) -> None:
    await kv.set(b"refs", b"branch", b"v1")
    value = await kv.set_many_then_get([(P, b"a", b"1"), (P, b"b", b"2")], b"refs", b"branch")
    assert value == b"v1"
    assert await keys_of(kv) == [b"a", b"b"]
    # the key itself in the batch: the read sees the batch's value
    assert await kv.set_many_then_get([(b"refs", b"branch", b"v2")], b"refs", b"branch") == b"v2"
    assert await kv.set_many_then_get([], b"refs", b"branch") == b"v2"  # an empty batch: a read


async def test_set_many_then_get_of_a_missing_key_raises_after_storing_the_batch(kv: KVStore) -> None:
    with pytest.raises(NotFoundError):
        await kv.set_many_then_get([(P, b"stored", b"1")], b"refs", b"gone")
    assert await kv.get(P, b"stored") == b"1"


async def test_set_many_then_get_bad_input_rejected_before_anything_is_written(kv: KVStore) -> None:
    await kv.set(b"refs", b"branch", b"v1")
    with pytest.raises(BadInputError):
        await kv.set_many_then_get([(P, b"ok", b"1"), (P, b"", b"empty key")], b"refs", b"branch")
    with pytest.raises(BadInputError):
        await kv.set_many_then_get([(P, b"ok", b"1")], b"refs", b"")
    assert await keys_of(kv) == []


@pytest.mark.parametrize("size", [1, 70])  # 70: PostgreSQL streams it into a COPY
async def test_set_many_then_get_no_unseen_change_is_ordered_before_the_batch(kv: KVStore, size: int) -> None:
    """The staging writers' guarantee, checked against a concurrent compare-and-swap mover (as a
    committer sealing a token): whenever the mover changes the key to a value the batch's read did
    not see, a scan made right after that change already shows the batch's item (the batch's
    last, with ``size`` items in a batch)."""
    await kv.set(b"refs", b"ptr", b"%06d" % 0)
    seen_by_batch: dict[bytes, int] = {}
    after_change: list[tuple[int, set[bytes]]] = []
    done = asyncio.Event()

    async def batch_writer() -> None:
        for i in range(40):
            item = b"item-%03d" % i
            # the fillers sort before every item: the mover's scans read the items only (a scan of
            # every filler after every change made this test minutes long on a slow store)
            filler = ((P, b"fill-%03d-%03d" % (i, j), b"x") for j in range(size - 1))
            value = await kv.set_many_then_get([*filler, (P, item, b"x")], b"refs", b"ptr")
            seen_by_batch[item] = int(value)
            await asyncio.sleep(0)
        done.set()

    async def mover() -> None:
        while not done.is_set():
            current = await kv.get(b"refs", b"ptr")
            new = int(current) + 1
            try:
                await kv.set_if(b"refs", b"ptr", b"%06d" % new, Expect.equals(current))
            except PreconditionFailedError:
                continue
            after_change.append((new, {entry.key async for entry in kv.scan(P, b"item-")}))

    await asyncio.gather(batch_writer(), mover())
    assert len(seen_by_batch) == 40 and after_change
    for item, read in seen_by_batch.items():
        for value, visible in after_change:
            if value > read:  # a change the batch's read did not see
                assert item in visible, (item, read, value)


async def test_concurrent_set_many_batches_all_land(kv: KVStore) -> None:
    async def writer(w: int) -> None:
        for b in range(3):
            await kv.set_many([(P, b"w%d-%d-%02d" % (w, b, i), b"%d" % w) for i in range(40)])

    await asyncio.gather(*(writer(w) for w in range(4)))
    assert len(await keys_of(kv)) == 4 * 3 * 40


# -- set_many_if: the conditional batch ---------------------------------------------------------------


async def test_set_many_if_stores_the_batch_when_every_expectation_holds(kv: KVStore) -> None:
    await kv.set(b"refs", b"intent", b"pending")
    await kv.set(b"refs", b"branch", b"b1")
    items = [(b"refs", b"intent", b"stored"), (P, b"a", b"1"), (P, b"b", b"2")]
    expected = [
        (b"refs", b"intent", Expect.equals(b"pending")),  # a CAS riding with the batch
        (b"refs", b"branch", Expect.equals(b"b1")),  # checked, not written
    ]
    await kv.set_many_if(items, expected)
    assert await kv.get(b"refs", b"intent") == b"stored"
    assert await kv.get(b"refs", b"branch") == b"b1"
    assert await keys_of(kv) == [b"a", b"b"]
    await kv.set_many_if([(P, b"c", b"3")], [(b"refs", b"branch", Expect.EXISTS)])
    assert await kv.get(P, b"c") == b"3"
    await kv.set_many_if([], [(b"refs", b"branch", Expect.EXISTS)])  # nothing to write: a check


@pytest.mark.parametrize("size", [1, 70])  # 70: PostgreSQL streams it into a COPY
async def test_set_many_if_stores_nothing_when_one_expectation_fails(kv: KVStore, size: int) -> None:
    await kv.set(b"refs", b"intent", b"deleting")
    await kv.set(b"refs", b"branch", b"b1")
    items = [(b"refs", b"intent", b"stored"), *((P, b"k%03d" % i, b"v") for i in range(size))]
    for expected in (
        [(b"refs", b"intent", Expect.equals(b"pending")), (b"refs", b"branch", Expect.equals(b"b1"))],
        [(b"refs", b"intent", Expect.equals(b"deleting")), (b"refs", b"branch", Expect.equals(b"b0"))],
        [(b"refs", b"intent", Expect.EXISTS), (b"refs", b"gone", Expect.EXISTS)],
        [(b"refs", b"gone", Expect.equals(b""))],
    ):
        with pytest.raises(PreconditionFailedError) as failed:
            await kv.set_many_if(items, expected)
        assert not failed.value.retryable
        assert await keys_of(kv) == []
        assert await kv.get(b"refs", b"intent") == b"deleting"
    await kv.set_many_if(items, [(b"refs", b"intent", Expect.equals(b"deleting"))])
    assert len(await keys_of(kv)) == size and await kv.get(b"refs", b"intent") == b"stored"


async def test_set_many_if_bad_expectations_refused_before_anything_is_written(kv: KVStore) -> None:
    await kv.set(b"refs", b"k", b"v")
    items = [(P, b"a", b"1")]
    for expected in (
        [(b"refs", b"k", Expect.ABSENT)],  # PostgreSQL cannot lock a missing row
        [(b"refs", b"k", Expect.EXISTS), (b"refs", b"k", Expect.equals(b"v"))],  # a key twice
        [(b"refs", b"", Expect.EXISTS)],
        [(b"refs", b"k")],
        [(b"refs", b"k", "exists")],
        b"refs",
    ):
        with pytest.raises(BadInputError):
            await kv.set_many_if(items, expected)  # type: ignore[arg-type]
    with pytest.raises(BadInputError):
        await kv.set_many_if([(P, b"ok", b"1"), (P, b"", b"bad")], [(b"refs", b"k", Expect.EXISTS)])
    assert await keys_of(kv) == []


async def test_set_many_if_absent_inserts_once(kv: KVStore) -> None:
    """``Expect.ABSENT`` on a key the batch writes: an insert-if-absent riding with the batch, with
    the other expectations; of concurrent batches inserting one key, exactly one wins per round."""
    await kv.set(b"refs", b"branch", b"b1")
    items = [(P, b"new", b"1"), (b"refs", b"intent", b"stored")]
    await kv.set_many_if(items, [(P, b"new", Expect.ABSENT), (b"refs", b"branch", Expect.equals(b"b1"))])
    assert await kv.get(P, b"new") == b"1" and await kv.get(b"refs", b"intent") == b"stored"
    with pytest.raises(PreconditionFailedError):
        await kv.set_many_if([(P, b"new", b"2"), (P, b"other", b"x")], [(P, b"new", Expect.ABSENT)])
    with pytest.raises(PreconditionFailedError):  # the absent key is fine, the branch is not
        await kv.set_many_if(
            [(P, b"n2", b"2")],
            [
                (P, b"n2", Expect.ABSENT),
                (b"refs", b"branch", Expect.EXISTS),
                (b"refs", b"gone", Expect.EXISTS),
            ],
        )
    assert await keys_of(kv) == [b"new"] and await kv.get(P, b"new") == b"1"
    for r in range(8):
        key = b"race-%02d" % r

        async def insert(value: bytes, key: bytes = key) -> bytes | None:
            try:
                await kv.set_many_if([(P, key, value)], [(P, key, Expect.ABSENT)])
            except PreconditionFailedError:
                return None
            return value

        won = [v for v in await asyncio.gather(*(insert(b"w%d" % i) for i in range(3))) if v is not None]
        assert len(won) == 1 and await kv.get(P, key) == won[0]


async def test_set_many_if_and_a_cas_on_its_expected_key_exactly_one_wins(kv: KVStore) -> None:
    """The uploader's settle-and-stage against the reconciler's claim, many rounds: either the
    batch landed whole with its CAS, or the claim did and nothing of the batch is stored."""
    wins = {"batch": 0, "cas": 0}
    for r in range(30):
        intent = b"intent-%02d" % r
        await kv.set(b"refs", intent, b"pending")
        entries = [(P, b"r%02d-%02d" % (r, i), b"x") for i in range(3)]

        async def batch(entries: list[KVItem] = entries, intent: bytes = intent) -> str:
            try:
                await kv.set_many_if(
                    [(b"refs", intent, b"stored"), *entries], [(b"refs", intent, Expect.equals(b"pending"))]
                )
            except PreconditionFailedError:
                return "lost"
            return "batch"

        async def claim(intent: bytes = intent) -> str:
            try:
                await kv.set_if(b"refs", intent, b"deleting", Expect.equals(b"pending"))
            except PreconditionFailedError:
                return "lost"
            return "cas"

        runners = [batch(), claim()] if r % 2 else [claim(), batch()]
        outcomes = await asyncio.gather(*runners)
        [winner] = [o for o in outcomes if o != "lost"]
        wins[winner] += 1
        stored = {e.key async for e in kv.scan(P, b"r%02d-" % r) if e.key.startswith(b"r%02d-" % r)}
        if winner == "batch":
            assert await kv.get(b"refs", intent) == b"stored" and len(stored) == 3
        else:
            assert await kv.get(b"refs", intent) == b"deleting" and stored == set()
    assert sum(wins.values()) == 30


async def test_set_many_if_takes_up_to_its_limit_and_refuses_more(kv: KVStore) -> None:
    await kv.set(b"refs", b"branch", b"b1")
    expected = [(b"refs", b"branch", Expect.equals(b"b1"))]
    limit = kv.max_conditional_items
    size = 1500 if limit is None else limit - 1  # with the expectation: the limit exactly
    await kv.set_many_if([(P, b"%05d" % i, b"v") for i in range(size)], expected)
    assert len(await keys_of(kv)) == size
    if limit is not None:
        with pytest.raises(BadInputError, match=str(limit)):
            await kv.set_many_if([(P, b"more%05d" % i, b"v") for i in range(limit)], expected)
        assert len(await keys_of(kv)) == size
