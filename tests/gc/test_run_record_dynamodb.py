"""A GC run record on DynamoDB (moto): bounded by design under the 400 KB item limit.

A mark on many partitions records the digest of every part it wrote: thousands of files make a
record of several hundred KB, more than one DynamoDB item takes. The record is stored in chunks of
256 KiB and read back whole, checked against its SHA-256; one over ``MAX_RECORD_BYTES`` is refused
with ``BadInputError`` before anything is written, never stored truncated nor answered with a raw
botocore error.
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest

from lakefs_core.errors import BadInputError, CorruptDataError
from lakefs_core.kv import open_kv
from lakefs_core.kv.base import Expect
from lakefs_core.refs import kvkeys
from lakefs_core.repos.graveler import Graveler, StoreRegistry
from lakefs_gc.runs import record as record_module
from lakefs_gc.runs.record import CHUNK_BYTES, FileDigest, RunRecord, RunRecords
from tests.repos.support import fast_settings
from tests.support.moto import MotoServer

DYNAMODB_ITEM_LIMIT = 400 * 1024
T0 = datetime(2026, 11, 1, tzinfo=UTC)


@pytest.fixture
async def graveler(moto: Callable[[str], MotoServer], tmp_path: Path) -> AsyncIterator[Graveler]:
    server = moto("us-east-1")
    kv = await open_kv(f"dynamodb://?region=us-east-1&endpoint={server.endpoint}")
    g = Graveler(kv, StoreRegistry(), fast_settings())
    try:
        await g.create_repository("big", f"local://{tmp_path / 'ns'}")
        yield g
    finally:
        await kv.close()


def record_of(files: int) -> RunRecord:
    """A record as a mark on many partitions writes it: one digest per part file."""
    digest = FileDigest(sha256="ab" * 32, size=123_456)
    parts = {
        f"_lakefs/retention/gc/unified/R/{d}/part-{n:05d}": digest
        for d in ("deleted.text", "ranges.txt", "uncommitted", "metaranges")
        for n in range(files // 4)
    }
    return RunRecord(
        run_id="20261101T000000000Z-0123456789abcdef",
        repository="big",
        state="complete",
        start_time=T0,
        end_time=T0,
        rules=None,
        files=parts,
    )


async def record_items(g: Graveler) -> dict[bytes, bytes]:
    partition = (await g.repository("big")).partition
    found = {}
    async for item in g.kv.scan(partition, kvkeys.GC_RUN_RECORDS_PREFIX):
        if item.key.startswith(kvkeys.GC_RUN_RECORDS_PREFIX):
            found[item.key] = item.value
    return found


async def test_a_record_over_the_item_limit_is_stored_in_chunks(graveler: Graveler) -> None:
    g, records = graveler, RunRecords(graveler, "big")
    big = record_of(4000)
    raw = big.to_bytes()
    assert len(raw) > DYNAMODB_ITEM_LIMIT  # what one item could not hold
    # The limit is real on this DynamoDB: one item that size is refused, as a typed error.
    partition = (await g.repository("big")).partition
    with pytest.raises(BadInputError, match="rejected"):
        await g.kv.set_if(partition, b"gc-too-big", raw, Expect.ABSENT)

    pointer = await records.write(big, replacing=None)
    assert pointer == hashlib.sha256(raw).hexdigest()
    assert await records.read(big.run_id) == (pointer, big)
    items = await record_items(g)
    assert len(items) == -(-len(raw) // CHUNK_BYTES) >= 3
    assert (
        all(len(v) <= CHUNK_BYTES for v in items.values())
        and b"".join(items[kvkeys.gc_run_record_key(pointer, n)] for n in range(len(items))) == raw
    )
    # Moved by compare-and-swap as a sweep moves it (a checkpoint, then swept): each a new record.
    checkpointed = big.model_copy(update={"checkpoint": FileDigest(sha256="cd" * 32, size=10)})
    second = await records.write(checkpointed, replacing=pointer)
    swept = checkpointed.model_copy(update={"state": "swept"})
    third = await records.write(swept, replacing=second)
    assert await records.read(big.run_id) == (third, swept)


async def test_a_chunk_lost_or_changed_is_corrupt(graveler: Graveler) -> None:
    g, records = graveler, RunRecords(graveler, "big")
    big = record_of(4000)
    pointer = await records.write(big, replacing=None)
    partition = (await g.repository("big")).partition
    middle = kvkeys.gc_run_record_key(pointer, 1)
    saved = await g.kv.get(partition, middle)
    await g.kv.set(partition, middle, saved[:-1] + b" ")
    with pytest.raises(CorruptDataError, match="does not match its digest"):
        await records.read(big.run_id)
    await g.kv.delete(partition, middle)
    with pytest.raises(CorruptDataError, match="does not match its digest"):
        await records.read(big.run_id)
    await g.kv.set(partition, middle, saved)
    assert await records.read(big.run_id) == (pointer, big)


async def test_a_record_of_exactly_whole_chunks_and_a_small_one(graveler: Graveler) -> None:
    records = RunRecords(graveler, "big")
    small = record_of(8)
    assert await records.read(small.run_id) is None
    pointer = await records.write(small, replacing=None)
    assert list(await record_items(graveler)) == [kvkeys.gc_run_record_key(pointer)]
    assert await records.read(small.run_id) == (pointer, small)
    # A record whose size is a multiple of the chunk size: no empty chunk written, read back whole.
    base = record_of(1600)
    pad = CHUNK_BYTES * 2 - len(base.model_copy(update={"reason": ""}).to_bytes())
    exact = base.model_copy(update={"run_id": "20261101T000000001Z-0123456789abcdef", "reason": "x" * pad})
    assert len(exact.to_bytes()) == 2 * CHUNK_BYTES
    other = await RunRecords(graveler, "big").write(exact, replacing=None)
    assert await records.read(exact.run_id) == (other, exact)
    keys = [k for k in await record_items(graveler) if k.startswith(kvkeys.gc_run_record_key(other))]
    assert len(keys) == 2


async def test_a_record_over_the_bound_is_refused_before_any_write(
    graveler: Graveler, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The bound is 64 MiB; the refusal is the same at a smaller one (the size is not what is tested).
    monkeypatch.setattr(record_module, "MAX_RECORD_BYTES", 3 * CHUNK_BYTES)
    records = RunRecords(graveler, "big")
    huge = record_of(8000)
    assert len(huge.to_bytes()) > 3 * CHUNK_BYTES
    with pytest.raises(BadInputError, match="more than") as refused:
        await records.write(huge, replacing=None)
    assert refused.value.field == "files"
    assert await record_items(graveler) == {} and await records.read(huge.run_id) is None
