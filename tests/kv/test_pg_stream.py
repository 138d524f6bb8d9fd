"""The streamed COPY of PostgreSQL batches (:class:`lakefs_core.kv.pg_copy.RowStream`).

- The framing is PostgreSQL's binary COPY format, checked by parsing it back (hypothesis): every
  item in order, bytes-like values converted, held-back partitions left out, bad items refused as
  :func:`~lakefs_core.kv._common.check_items` refuses them. No I/O.
- Chunks leave while the items are still being taken, and through the facade a staging batch is
  encoded while the server already has its first rows (real server).
- A record that cannot be encoded, late in a staging batch, stores nothing and leaves the store
  usable (real server).
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lakefs_core.errors import BadInputError
from lakefs_core.format.records import ValueRecord
from lakefs_core.kv import open_kv, pg_copy
from lakefs_core.kv._common import check_items
from lakefs_core.kv.base import KVItem, KVStore
from lakefs_core.kv.pg_copy import CHUNK_BYTES, FIRST_CHUNK_BYTES, RowStream
from lakefs_core.repos import staging_writes
from lakefs_core.repos.graveler import Graveler, GravelerSettings
from lakefs_core.repos.stores import StoreRegistry
from tests.repos.support import record
from tests.support.pg import PgDatabase
from tests.support.profiles import examples

SIGNATURE = b"PGCOPY\n\xff\r\n\x00"


def parse_copy(data: bytes) -> list[KVItem]:
    """The rows of a binary COPY stream of three bytea columns (PostgreSQL's format, written out
    from its documentation: header, rows of a field count and length-prefixed fields, trailer)."""
    assert data[:11] == SIGNATURE
    flags, extension = struct.unpack_from(">ii", data, 11)
    assert (flags, extension) == (0, 0)
    pos, rows = 19, []
    while True:
        (fields,) = struct.unpack_from(">h", data, pos)
        pos += 2
        if fields == -1:
            assert pos == len(data), "bytes after the trailer"
            return rows
        assert fields == 3
        row = []
        for _ in range(fields):
            (length,) = struct.unpack_from(">i", data, pos)
            assert length >= 0  # no NULLs: every column is NOT NULL
            row.append(data[pos + 4 : pos + 4 + length])
            pos += 4 + length
        rows.append((row[0], row[1], row[2]))


def frames(stream: RowStream) -> list[bytes]:
    return list(stream._frame())


nonempty = st.binary(min_size=1, max_size=40)
values = st.one_of(st.binary(max_size=300), st.binary(max_size=300).map(bytearray))
partitions = st.sampled_from([b"p1", b"p2", b"staging-token:\xff"])


@settings(max_examples=examples(2), deadline=None)
@given(
    items=st.lists(st.tuples(partitions, nonempty, values), max_size=120),
    hold=st.sets(partitions, max_size=1),
)
def test_frames_parse_back_to_the_items_in_order(
    items: list[tuple[bytes, bytes, Any]], hold: set[bytes]
) -> None:
    stream = RowStream(iter(items), hold=frozenset(hold))
    data = b"".join(frames(stream))
    expected = [(p, k, bytes(v)) for p, k, v in items]
    assert parse_copy(data) == [item for item in expected if item[0] not in hold]
    assert stream.held == [item for item in expected if item[0] in hold]
    assert stream.taken == expected
    assert all(type(part) is bytes for item in stream.taken for part in item)
    assert list(stream.rest()) == expected


@pytest.mark.parametrize(
    "bad",
    [
        (b"", b"k", b"empty partition"),
        (b"p", b"", b"empty key"),
        (b"p", b"k", "not bytes"),
        (b"p", b"k"),
        "not a tuple",
        ("p", b"k", b"partition not bytes"),
    ],
)
def test_a_bad_item_is_refused_as_check_items_refuses_it(bad: object) -> None:
    good = [(b"p", b"k%03d" % i, b"v" * 100) for i in range(200)]
    with pytest.raises(BadInputError) as by_check:
        check_items([*good, bad])
    stream = RowStream(iter([*good, bad]))
    with pytest.raises(BadInputError) as by_stream:
        frames(stream)
    assert by_stream.value.field == by_check.value.field
    assert len(stream.taken) == len(good)


async def test_an_error_of_the_chunks_is_kept_as_the_streams_failure() -> None:
    def items() -> Iterator[object]:
        yield (b"p", b"k", b"v")
        raise ZeroDivisionError("the source failed")

    stream = RowStream(items())
    with pytest.raises(ZeroDivisionError) as info:
        async for _ in stream.chunks():
            pass
    assert stream.failure is info.value


async def test_a_length_the_format_cannot_carry_is_bad_input(monkeypatch: pytest.MonkeyPatch) -> None:
    # A field of 2 GiB or more does not fit the format's 32-bit length: here the limit is made
    # 127 bytes, so that the refusal is seen without 2 GiB in memory.
    monkeypatch.setattr(pg_copy, "_INT32", struct.Struct(">b"))
    stream = RowStream(iter([(b"p", b"k", b"v" * 10), (b"p", b"big", b"v" * 200)]))
    with pytest.raises(BadInputError, match="2 GiB") as info:
        async for _ in stream.chunks():
            pass
    assert stream.failure is info.value


def test_chunks_leave_while_items_are_still_being_taken() -> None:
    taken = 0

    def items() -> Iterator[KVItem]:
        nonlocal taken
        for i in range(1000):
            taken += 1
            yield (b"staging-token", b"data/key-%06d" % i, b"x" * 250)

    at_chunk = []
    chunks = []
    for chunk in RowStream(items())._frame():
        at_chunk.append(taken)
        chunks.append(chunk)
    # the first chunk is small (the server starts early), the others larger, the last the rest
    assert FIRST_CHUNK_BYTES <= len(chunks[0]) < FIRST_CHUNK_BYTES + 400
    assert all(CHUNK_BYTES <= len(c) < CHUNK_BYTES + 400 for c in chunks[1:-1])
    assert at_chunk[0] < 40 and len(chunks) > 5
    assert at_chunk == sorted(at_chunk) and at_chunk[-1] == 1000
    assert len(parse_copy(b"".join(chunks))) == 1000


@pytest.fixture
async def pg_kv(pg_database: PgDatabase) -> AsyncIterator[KVStore]:
    store = await open_kv(pg_database.url)
    try:
        yield store
    finally:
        await store.close()


@pytest.fixture
async def g(pg_kv: KVStore) -> AsyncIterator[Graveler]:
    stores = StoreRegistry()
    try:
        yield Graveler(pg_kv, stores, GravelerSettings())
    finally:
        await stores.close()


async def new_repo(g: Graveler, root: Path) -> str:
    repo = f"r-{uuid.uuid4().hex[:8]}"
    await g.create_repository(repo, f"local://{root / repo}")
    return repo


async def test_a_staging_batch_is_encoded_while_its_first_rows_are_sent(
    g: Graveler, local_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """By the time the batch's last record is encoded, chunks of its earlier rows have gone to the
    driver (which writes each to the socket as it gets it): encoding the whole batch first, or a
    store taking the whole batch before it sends, fails this."""
    repo = await new_repo(g, local_root)
    records = [record(f"data/{i:05d}") for i in range(1000)]
    sent: list[int] = []
    chunks_when_last_encoded: list[int] = []
    copy_to_table = asyncpg.Connection.copy_to_table

    async def counting(conn: asyncpg.Connection, table: str, *, source: Any, **kw: Any) -> Any:
        async def counted() -> AsyncIterator[bytes]:
            async for chunk in source:
                sent.append(len(chunk))
                yield chunk

        return await copy_to_table(conn, table, source=counted(), **kw)

    encode = staging_writes.encode_staged_entry

    def encode_noting(rec: ValueRecord) -> bytes:
        if rec is records[-1]:
            chunks_when_last_encoded.append(len(sent))
        return encode(rec)

    monkeypatch.setattr(asyncpg.Connection, "copy_to_table", counting)
    monkeypatch.setattr(staging_writes, "encode_staged_entry", encode_noting)
    await g.set_entries(repo, "main", records)
    assert chunks_when_last_encoded and chunks_when_last_encoded[0] > 3, (chunks_when_last_encoded, sent)
    assert [r.key async for r in g.list_entries(repo, "main")] == [r.key for r in records]


async def test_a_record_that_cannot_be_encoded_late_in_a_batch_stages_nothing(
    g: Graveler, pg_kv: KVStore, local_root: Path
) -> None:
    repo = await new_repo(g, local_root)
    good = [record(f"data/{i:05d}") for i in range(900)]
    tombstone_with_data = ValueRecord(b"data/bad", b"", b"data without an identity")
    with pytest.raises(BadInputError, match="tombstone"):
        await g.set_entries(repo, "main", [*good, tombstone_with_data, record("data/after")])
    assert [r async for r in g.list_entries(repo, "main")] == []
    await g.set_entries(repo, "main", good)  # the store is usable: the cut COPY's connection is gone
    assert len([r async for r in g.list_entries(repo, "main")]) == 900


def test_chunk_sizes_are_sane() -> None:
    assert 0 < pg_copy.FIRST_CHUNK_BYTES <= pg_copy.CHUNK_BYTES <= 512 * 1024
