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
``dev`` extra); the library itself never imports this module. The suite's tests are defined by
noun: point operations, compare-and-swap and the lifecycle here, scans in :mod:`.kv_scans`, batches
in :mod:`.kv_batches`, the driver and the ``kv`` fixture in :mod:`.kv_driver`; this module gathers
them (``__all__``), and is the one a driver imports.
"""

from __future__ import annotations

import asyncio

import pytest

from lakefs_core.errors import (
    BadInputError,
    LakeFSError,
    NotFoundError,
    PreconditionFailedError,
    TransientError,
)
from lakefs_core.kv import Expect, KVStore
from lakefs_core.testing.kv_batches import (
    test_a_late_failure_of_the_items_stores_nothing,
    test_concurrent_set_many_batches_all_land,
    test_set_many_bad_item_rejected_before_anything_is_written,
    test_set_many_empty_batch_and_generator,
    test_set_many_if_absent_inserts_once,
    test_set_many_if_and_a_cas_on_its_expected_key_exactly_one_wins,
    test_set_many_if_bad_expectations_refused_before_anything_is_written,
    test_set_many_if_racing_on_a_key_they_write_exactly_one_wins,
    test_set_many_if_stores_nothing_when_one_expectation_fails,
    test_set_many_if_stores_the_batch_when_every_expectation_holds,
    test_set_many_if_takes_up_to_its_limit_and_refuses_more,
    test_set_many_large_values,
    test_set_many_of_a_long_generator_with_repeats_keeps_the_last_values,
    test_set_many_repeated_key_keeps_the_last_value,
    test_set_many_then_get_bad_input_rejected_before_anything_is_written,
    test_set_many_then_get_no_unseen_change_is_ordered_before_the_batch,
    test_set_many_then_get_of_a_missing_key_raises_after_storing_the_batch,
    test_set_many_then_get_stores_the_batch_and_reads_the_key,
    test_set_many_writes_every_item_across_partitions,
)
from lakefs_core.testing.kv_driver import KVDriver, P, collect, keys_of, kv
from lakefs_core.testing.kv_scans import (
    test_abandoned_scan_does_not_block_the_store,
    test_partitions_are_isolated,
    test_scan_empty_and_missing_partition,
    test_scan_end_is_exclusive,
    test_scan_is_bytewise_ascending,
    test_scan_pages_across_boundaries,
    test_scan_ranges_bad_input_refused,
    test_scan_ranges_by_range_then_key_across_pages,
    test_scan_ranges_many_ranges_in_order,
    test_scan_six_keys_exact_pages,
    test_scan_start_is_inclusive,
    test_scan_tolerates_writes_between_pages,
)

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
    "test_set_many_if_racing_on_a_key_they_write_exactly_one_wins",
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
