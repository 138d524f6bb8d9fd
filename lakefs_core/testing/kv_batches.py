"""The KVStore contract's batches (part of :mod:`lakefs_core.testing.kv`, which a driver imports):
``set_many``, ``set_many_then_get`` and the conditional ``set_many_if``, all or nothing."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from lakefs_core.errors import BadInputError, NotFoundError, PreconditionFailedError
from lakefs_core.kv import Expect, KVStore
from lakefs_core.kv.base import KVItem
from lakefs_core.testing.kv_driver import P, keys_of

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


async def test_set_many_if_racing_on_a_key_they_write_exactly_one_wins(kv: KVStore) -> None:
    """Conditional batches racing to replace one key's value (each expects the value it read and a
    shared key it does not write, as conditional staging expects the branch record): exactly one
    wins; the others fail with PreconditionFailedError, never a transient error (a lock upgrade
    deadlock on a SQL store would be one), and store nothing."""
    await kv.set(b"refs", b"branch", b"b1")
    for r in range(8):
        key = b"cas-race-%02d" % r
        await kv.set(P, key, b"old")

        async def replace(value: bytes, key: bytes = key) -> bytes | None:
            try:
                await kv.set_many_if(
                    [(P, key, value), (P, key + b"/" + value, b"x")],
                    [(P, key, Expect.equals(b"old")), (b"refs", b"branch", Expect.equals(b"b1"))],
                )
            except PreconditionFailedError:
                return None
            return value

        won = [v for v in await asyncio.gather(*(replace(b"w%d" % i) for i in range(4))) if v is not None]
        assert len(won) == 1 and await kv.get(P, key) == won[0]
        side = [e.key async for e in kv.scan(P, key + b"/") if e.key.startswith(key + b"/")]
        assert side == [key + b"/" + won[0]]


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
