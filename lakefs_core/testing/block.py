"""The BlockStore contract (:mod:`lakefs_core.block.base`) as a pytest suite a driver runs.

A driver's test module imports the suite and provides the fixture ``store``: a fresh, empty store
(closed by the fixture afterwards). Two traits of a store change what the suite expects; a driver
that has either overrides the fixture ``block_traits`` (:class:`BlockTraits`)::

    import pytest
    from lakefs_core.testing.block import *  # noqa: F403 (the contract's tests and fixtures)
    from lakefs_core.testing.block import BlockTraits

    @pytest.fixture
    async def store(tmp_path):
        s = await MyBlockStore.open(tmp_path)
        yield s
        await s.close()

    @pytest.fixture
    def block_traits() -> BlockTraits:
        return BlockTraits(multipart_etags=True)

The project runs it against every driver of its own (``tests/block/test_contract.py``: memory,
local directory, S3 on moto). Needs pytest and pytest-asyncio in ``asyncio_mode = "auto"`` (the
``dev`` extra); the library itself never imports this module.
"""

from __future__ import annotations

import asyncio
import hashlib
import random
import threading
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import aclosing
from dataclasses import dataclass
from datetime import datetime

import pytest

from lakefs_core.block import (
    DEFAULT_CONTENT_TYPE,
    BlockStore,
    MemoryBlockStore,
    ObjectInfo,
    PutItem,
    copy_object,
)
from lakefs_core.block.base import MultipartStore
from lakefs_core.errors import (
    BadInputError,
    ConflictError,
    LakeFSError,
    NotFoundError,
    PreconditionFailedError,
)

__all__ = [  # ``import *`` takes the fixture and every test
    "BlockTraits",
    "block_traits",
    "test_bad_metadata",
    "test_bad_ranges",
    "test_closed_store_refuses_work",
    "test_concurrent_create_only_has_one_winner",
    "test_copy",
    "test_copy_object_between_stores",
    "test_create_only_put",
    "test_delete",
    "test_delete_many_over_one_batch",
    "test_empty_key_is_bad_input",
    "test_empty_object",
    "test_failing_body_stores_nothing",
    "test_large_bytes_body",
    "test_list_entries",
    "test_list_order_is_byte_order",
    "test_list_other_delimiter",
    "test_list_paging",
    "test_list_start_after",
    "test_metadata_and_content_type_round_trip",
    "test_missing_key_is_not_found",
    "test_multipart_copy_part_and_bad_sizes",
    "test_multipart_parts_in_any_order_reupload_and_abort",
    "test_overwrite_replaces",
    "test_put_batch_bytes_and_loaders",
    "test_put_batch_checks_everything_before_writing",
    "test_put_batch_create_only",
    "test_put_batch_failing_loader_raises_its_error",
    "test_put_batch_loads_at_most_concurrency_bodies",
    "test_put_get_head_exists",
    "test_ranged_get",
    "test_ranged_get_of_empty_object",
    "test_stream_can_stop_early",
    "test_stream_chunks",
    "test_streamed_put_larger_than_multipart_threshold",
]

MIB = 1 << 20


@dataclass(frozen=True)
class BlockTraits:
    """What a store does differently, within the contract."""

    # A large put goes up in parts, and its ETag is S3's "<md5 of the parts' md5s>-<parts>".
    multipart_etags: bool = False
    # Keys are file paths: "a" and "a/..." cannot both exist (the second put is a ConflictError).
    keys_are_paths: bool = False


@pytest.fixture
def block_traits() -> BlockTraits:
    """Override it for a store with either trait (see :class:`BlockTraits`)."""
    return BlockTraits()


def md5(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()


async def chunks_of(data: bytes, size: int) -> AsyncIterator[bytes]:
    for i in range(0, len(data), size):
        yield data[i : i + size]
        await asyncio.sleep(0)


async def listing(store: BlockStore, prefix: str = "", **kwargs: object) -> list[str]:
    """Keys and common prefixes (the latter marked with a trailing ``*``) in listing order."""
    out: list[str] = []
    async with aclosing(store.list(prefix, **kwargs)) as items:  # type: ignore[arg-type, type-var]
        async for item in items:
            out.append(item.key if isinstance(item, ObjectInfo) else item.prefix + "*")
    return out


async def put_all(store: BlockStore, keys: list[str], parallel: int = 32) -> None:
    sem = asyncio.Semaphore(parallel)

    async def one(key: str) -> None:
        async with sem:
            await store.put(key, key.encode())

    await asyncio.gather(*(one(k) for k in keys))


# -- put / get / head / exists -------------------------------------------------------------------------


async def test_put_get_head_exists(store: BlockStore) -> None:
    data = b"hello, block store"
    info = await store.put("dir/obj", data)
    assert (info.key, info.size, info.etag) == ("dir/obj", len(data), md5(data))
    assert await store.get("dir/obj") == data
    head = await store.head("dir/obj")
    assert (head.key, head.size, head.etag) == ("dir/obj", len(data), md5(data))
    assert isinstance(head.last_modified, datetime)
    assert head.last_modified.tzinfo is not None
    assert head.content_type == DEFAULT_CONTENT_TYPE
    assert dict(head.metadata) == {}
    assert await store.exists("dir/obj")
    assert not await store.exists("dir/other")
    assert not await store.exists("dir")


async def test_empty_object(store: BlockStore) -> None:
    info = await store.put("empty", b"")
    assert (info.size, info.etag) == (0, md5(b""))
    assert await store.get("empty") == b""
    assert (await store.head("empty")).size == 0


async def test_overwrite_replaces(store: BlockStore) -> None:
    await store.put("k", b"first")
    await store.put("k", b"second, longer")
    assert await store.get("k") == b"second, longer"
    assert (await store.head("k")).etag == md5(b"second, longer")


async def test_missing_key_is_not_found(store: BlockStore) -> None:
    with pytest.raises(NotFoundError):
        await store.get("nope")
    with pytest.raises(NotFoundError):
        await store.get("nope", start=3, length=2)
    with pytest.raises(NotFoundError):
        await store.get("nope", length=0)
    with pytest.raises(NotFoundError):
        await store.head("nope")
    with pytest.raises(NotFoundError):
        async with aclosing(store.stream("nope")) as s:  # type: ignore[type-var]
            async for _ in s:
                pass
    with pytest.raises(NotFoundError):
        await store.copy("nope", "dst")


async def test_empty_key_is_bad_input(store: BlockStore) -> None:
    with pytest.raises(BadInputError):
        await store.put("", b"x")
    with pytest.raises(BadInputError):
        await store.get("")


async def test_create_only_put(store: BlockStore) -> None:
    await store.put("once", b"original", if_none_match=True)
    with pytest.raises(PreconditionFailedError):
        await store.put("once", b"intruder", if_none_match=True)
    with pytest.raises(PreconditionFailedError):
        await store.put("once", chunks_of(b"streamed intruder", 4), if_none_match=True)
    assert await store.get("once") == b"original"
    assert (await store.head("once")).etag == md5(b"original")


async def test_concurrent_create_only_has_one_winner(store: BlockStore) -> None:
    async def attempt(i: int) -> int | None:
        try:
            await store.put("race", f"writer {i}".encode(), if_none_match=True)
        except PreconditionFailedError:
            return None
        return i

    results = await asyncio.gather(*(attempt(i) for i in range(8)))
    winners = [r for r in results if r is not None]
    assert len(winners) == 1
    assert await store.get("race") == f"writer {winners[0]}".encode()


# -- put_batch -----------------------------------------------------------------------------------------


async def test_put_batch_bytes_and_loaders(store: BlockStore) -> None:
    """Results in item order, bodies as given or as loaded (each loader called once), content type
    and metadata as ``put`` keeps them."""
    calls: list[str] = []

    def loader(key: str) -> PutItem:
        def read() -> bytes:
            calls.append(key)
            return f"loaded {key}".encode()

        return PutItem(key, read, content_type="text/csv", metadata={"Owner": key})

    items = [PutItem(f"b/{i:03}", f"bytes {i}".encode()) if i % 2 else loader(f"b/{i:03}") for i in range(70)]
    infos = await store.put_batch(items, if_none_match=True, concurrency=3)
    assert [i.key for i in infos] == [item.key for item in items]
    assert sorted(calls) == sorted(item.key for item in items if callable(item.body))
    for item, info in zip(items, infos, strict=True):
        data = item.body if isinstance(item.body, bytes) else f"loaded {item.key}".encode()
        assert await store.get(item.key) == data
        assert (info.size, info.etag) == (len(data), md5(data))
        head = await store.head(item.key)
        if callable(item.body):
            assert (head.content_type, dict(head.metadata)) == ("text/csv", {"owner": item.key})
        else:
            assert head.content_type == DEFAULT_CONTENT_TYPE
    assert await store.put_batch([]) == []


async def test_put_batch_create_only(store: BlockStore) -> None:
    await store.put("c/taken", b"original")
    with pytest.raises(PreconditionFailedError):
        await store.put_batch([PutItem("c/free", b"a"), PutItem("c/taken", b"intruder")], if_none_match=True)
    assert await store.get("c/taken") == b"original"
    await store.put_batch([PutItem("c/taken", b"overwritten")])  # without if_none_match: overwrite
    assert await store.get("c/taken") == b"overwritten"


@pytest.mark.parametrize(
    "bad",
    [
        PutItem("", b"x"),
        PutItem("ok", "text"),  # type: ignore[arg-type]
        PutItem("ok", b"x", metadata={"bad key": "v"}),
        "not an item",
    ],
)
async def test_put_batch_checks_everything_before_writing(store: BlockStore, bad: object) -> None:
    items = [PutItem("d/first", b"1"), bad, PutItem("d/last", b"2")]
    with pytest.raises(BadInputError):
        await store.put_batch(items)  # type: ignore[arg-type]
    assert await listing(store, "d/") == []
    with pytest.raises(BadInputError):
        await store.put_batch([PutItem("d/x", b"1")], concurrency=0)


async def test_put_batch_loads_at_most_concurrency_bodies(store: BlockStore) -> None:
    """A loader runs only when its item is written, at most ``concurrency`` at once."""
    lock = threading.Lock()
    running = peak = 0

    def read() -> bytes:
        nonlocal running, peak
        with lock:
            running += 1
            peak = max(peak, running)
        time.sleep(0.002)
        with lock:
            running -= 1
        return b"x" * 100

    await store.put_batch([PutItem(f"e/{i:03}", read) for i in range(100)], concurrency=4)
    assert 1 <= peak <= 4 and len(await listing(store, "e/")) == 100


async def test_put_batch_failing_loader_raises_its_error(store: BlockStore) -> None:
    def broken() -> bytes:
        raise NotFoundError("the source file vanished")

    items = [PutItem("f/ok", b"1"), PutItem("f/broken", broken)]
    with pytest.raises(NotFoundError, match="vanished"):
        await store.put_batch(items, concurrency=1)
    assert not await store.exists("f/broken")
    with pytest.raises(BadInputError, match="loader returned"):
        await store.put_batch([PutItem("f/text", lambda: "text")])  # type: ignore[arg-type, return-value]


# -- ranges and streams --------------------------------------------------------------------------------

RANGES = [
    (0, None, b"0123456789"),
    (3, None, b"3456789"),
    (0, 4, b"0123"),
    (3, 4, b"3456"),
    (9, 1, b"9"),
    (8, 10, b"89"),  # runs past the end: cut at the end
    (10, None, b""),  # starts at the end: empty
    (12, 3, b""),  # starts after the end: empty
    (5, 0, b""),
]


async def test_ranged_get(store: BlockStore) -> None:
    await store.put("digits", b"0123456789")
    for start, length, expected in RANGES:
        assert await store.get("digits", start=start, length=length) == expected, (start, length)


async def test_ranged_get_of_empty_object(store: BlockStore) -> None:
    await store.put("empty", b"")
    for start, length in [(0, None), (0, 5), (3, None), (0, 0)]:
        assert await store.get("empty", start=start, length=length) == b""


async def test_bad_ranges(store: BlockStore) -> None:
    await store.put("digits", b"0123456789")
    with pytest.raises(BadInputError):
        await store.get("digits", start=-1)
    with pytest.raises(BadInputError):
        await store.get("digits", length=-1)
    with pytest.raises(BadInputError):
        async with aclosing(store.stream("digits", chunk_size=0)) as s:  # type: ignore[type-var]
            async for _ in s:
                pass


async def collect(store: BlockStore, key: str, **kwargs: int | None) -> list[bytes]:
    async with aclosing(store.stream(key, **kwargs)) as s:  # type: ignore[arg-type, type-var]
        return [chunk async for chunk in s]


async def test_stream_chunks(store: BlockStore) -> None:
    await store.put("digits", b"0123456789")
    assert await collect(store, "digits", chunk_size=4) == [b"0123", b"4567", b"89"]
    assert await collect(store, "digits", start=2, length=7, chunk_size=3) == [b"234", b"567", b"8"]
    assert await collect(store, "digits", start=8, chunk_size=100) == [b"89"]
    assert await collect(store, "digits", start=10) == []
    assert await collect(store, "digits", start=3, length=0) == []
    for start, length, expected in RANGES:
        assert b"".join(await collect(store, "digits", start=start, length=length)) == expected


async def test_stream_can_stop_early(store: BlockStore) -> None:
    data = random.randbytes(3 * MIB)
    await store.put("big", data)
    async with aclosing(store.stream("big", chunk_size=MIB)) as s:  # type: ignore[type-var]
        first = await anext(s)
    assert first == data[:MIB]
    assert await store.get("big", start=MIB, length=10) == data[MIB : MIB + 10]


# -- large streamed bodies (multipart on S3) -----------------------------------------------------------


async def test_streamed_put_larger_than_multipart_threshold(
    store: BlockStore, block_traits: BlockTraits
) -> None:
    data = random.randbytes(11 * MIB + 12345)
    info = await store.put("large/object", chunks_of(data, 700 * 1024 + 3), content_type="application/x-test")
    assert info.size == len(data)
    head = await store.head("large/object")
    assert head.size == len(data)
    assert head.content_type == "application/x-test"
    got = b"".join(await collect(store, "large/object", chunk_size=4 * MIB))
    assert hashlib.sha256(got).digest() == hashlib.sha256(data).digest()
    assert await store.get("large/object", start=10 * MIB, length=5) == data[10 * MIB : 10 * MIB + 5]
    if block_traits.multipart_etags:
        assert head.etag.endswith("-3")  # 5 MiB + 5 MiB + the rest: it went up in parts
    else:
        assert head.etag == md5(data)
    assert info.etag == head.etag

    with pytest.raises(PreconditionFailedError):
        await store.put("large/object", chunks_of(data[::-1], MIB), if_none_match=True)
    assert (await store.head("large/object")).etag == head.etag


async def test_large_bytes_body(store: BlockStore) -> None:
    data = random.randbytes(6 * MIB)
    await store.put("large-bytes", data, if_none_match=True)
    assert await store.get("large-bytes") == data
    with pytest.raises(PreconditionFailedError):
        await store.put("large-bytes", data, if_none_match=True)


async def test_failing_body_stores_nothing(store: BlockStore) -> None:
    class Boom(Exception):
        pass

    async def body(total: int) -> AsyncIterator[bytes]:
        sent = 0
        while sent < total:
            yield b"x" * MIB
            sent += MIB
        raise Boom

    for total in (MIB, 7 * MIB):  # below and above the S3 multipart threshold
        with pytest.raises(Boom):
            await store.put(f"broken-{total}", body(total))
        assert not await store.exists(f"broken-{total}")
    assert await listing(store) == []


# -- metadata ------------------------------------------------------------------------------------------


async def test_metadata_and_content_type_round_trip(store: BlockStore) -> None:
    info = await store.put(
        "meta", b"{}", content_type="application/json", metadata={"Color": "blue", "x-trace": "a b=c"}
    )
    assert info.content_type == "application/json"
    assert dict(info.metadata) == {"color": "blue", "x-trace": "a b=c"}
    head = await store.head("meta")
    assert head.content_type == "application/json"
    assert dict(head.metadata) == {"color": "blue", "x-trace": "a b=c"}
    # Overwriting without metadata drops it.
    await store.put("meta", b"{}")
    head = await store.head("meta")
    assert (head.content_type, dict(head.metadata)) == (DEFAULT_CONTENT_TYPE, {})


async def test_bad_metadata(store: BlockStore) -> None:
    for metadata in ({"bad key": "v"}, {"k": "caf\u00e9"}, {"k": "x" * 3000}, {"A": "1", "a": "2"}):
        with pytest.raises(BadInputError):
            await store.put("m", b"", metadata=metadata)
    assert not await store.exists("m")


# -- delete --------------------------------------------------------------------------------------------


async def test_delete(store: BlockStore) -> None:
    await store.put("a/b/c", b"1")
    await store.put("a/b/d", b"2")
    await store.delete("a/b/c")
    assert not await store.exists("a/b/c")
    assert await store.get("a/b/d") == b"2"
    await store.delete("a/b/c")  # missing: fine
    await store.delete("never/existed")
    assert await listing(store) == ["a/b/d"]


async def test_delete_many_over_one_batch(store: BlockStore) -> None:
    keys = [f"many/{i:05d}" for i in range(1100)]
    await put_all(store, keys)
    await store.put("keep", b"k")
    await store.delete_many([*keys, "many/missing", keys[0]])
    assert await listing(store) == ["keep"]
    await store.delete_many([])


# -- list ----------------------------------------------------------------------------------------------

TRICKY = ["a", "a!", "a-b", "a.b", "a/b", "a/c/d", "a0", "ab", "b", "z", "\u00e9", "\U0001f600/x"]


async def put_tricky(store: BlockStore, traits: BlockTraits) -> list[str]:
    """Put the tricky keys in a shuffled order; returns the keys stored (local can't hold ``a`` and
    ``a/...`` at once: it must refuse the second with ConflictError)."""
    keys = list(TRICKY)
    random.Random(7).shuffle(keys)
    stored = []
    for key in ["a/b", *[k for k in keys if k != "a/b"]]:
        if traits.keys_are_paths and key == "a":
            with pytest.raises(ConflictError):
                await store.put(key, key.encode())
            continue
        await store.put(key, key.encode())
        stored.append(key)
    return sorted(stored)


async def test_list_order_is_byte_order(store: BlockStore, block_traits: BlockTraits) -> None:
    stored = await put_tricky(store, block_traits)
    assert stored == sorted(stored, key=lambda k: k.encode("utf-8"))
    assert await listing(store) == stored
    assert await listing(store, page_size=2) == stored
    has_a = "a" in stored
    expect_delimited = [
        *(["a"] if has_a else []),
        "a!",
        "a-b",
        "a.b",
        "a/*",
        "a0",
        "ab",
        "b",
        "z",
        "\u00e9",
        "\U0001f600/*",
    ]
    assert await listing(store, delimiter="/") == expect_delimited
    assert await listing(store, delimiter="/", page_size=2) == expect_delimited
    assert await listing(store, "a/", delimiter="/") == ["a/b", "a/c/*"]
    assert await listing(store, "a", delimiter="/") == [
        *(["a"] if has_a else []),
        "a!",
        "a-b",
        "a.b",
        "a/*",
        "a0",
        "ab",
    ]
    assert await listing(store, "a/c") == ["a/c/d"]
    assert await listing(store, "a/c/", delimiter="/") == ["a/c/d"]
    assert await listing(store, "nothing") == []


async def test_list_entries(store: BlockStore) -> None:
    await store.put("p/x", b"12345", content_type="text/plain")
    async with aclosing(store.list("p/")) as items:  # type: ignore[type-var]
        entries = [item async for item in items]
    assert len(entries) == 1
    entry = entries[0]
    assert isinstance(entry, ObjectInfo)
    assert (entry.key, entry.size, entry.etag) == ("p/x", 5, md5(b"12345"))
    assert isinstance(entry.last_modified, datetime)
    # Listings carry key, size, etag and last-modified only (S3 returns no more).
    assert entry.content_type is None
    assert dict(entry.metadata) == {}


async def test_list_start_after(store: BlockStore, block_traits: BlockTraits) -> None:
    stored = await put_tricky(store, block_traits)
    assert await listing(store, start_after="a.b") == [k for k in stored if k > "a.b"]
    assert await listing(store, start_after="a/a") == [k for k in stored if k > "a/a"]
    assert await listing(store, start_after="a.b", page_size=2) == [k for k in stored if k > "a.b"]
    assert await listing(store, "a/", start_after="a/b") == ["a/c/d"]
    assert await listing(store, "b", start_after="a") == ["b"]  # start_after before the prefix
    assert await listing(store, start_after="\U0010ffff") == []
    # With a delimiter a common prefix is listed only if it sorts after start_after (S3's rule): the
    # last key or prefix of one listing continues it, and a start_after inside a group skips the group.
    rest = ["a0", "ab", "b", "z", "\u00e9", "\U0001f600/*"]
    assert await listing(store, delimiter="/", start_after="a.b") == ["a/*", *rest]
    assert await listing(store, delimiter="/", start_after="a/") == rest
    assert await listing(store, delimiter="/", start_after="a/b") == rest
    assert await listing(store, delimiter="/", start_after="a/c/d") == rest
    assert await listing(store, delimiter="/", start_after="a/b", page_size=1) == rest
    assert await listing(store, "a/", delimiter="/", start_after="a/b") == ["a/c/*"]
    assert await listing(store, "a/", delimiter="/", start_after="a/c/") == []


async def test_list_paging(store: BlockStore) -> None:
    keys = [f"page/{i:02d}" for i in range(7)] + [f"page/sub{i}/x" for i in range(5)]
    await put_all(store, keys)
    assert await listing(store, "page/", page_size=2) == sorted(keys)
    expected = [f"page/{i:02d}" for i in range(7)] + [f"page/sub{i}/*" for i in range(5)]
    assert await listing(store, "page/", delimiter="/", page_size=2) == expected
    assert await listing(store, "page/", delimiter="/", page_size=1) == expected
    with pytest.raises(BadInputError):
        await listing(store, page_size=0)


async def test_list_other_delimiter(store: BlockStore) -> None:
    for key in ["x-1-a", "x-1-b", "x-2", "x3", "y"]:
        await store.put(key, b"")
    assert await listing(store, "x", delimiter="-") == ["x-*", "x3"]
    assert await listing(store, "x-", delimiter="-") == ["x-1-*", "x-2"]


# -- copy ----------------------------------------------------------------------------------------------


async def test_copy(store: BlockStore) -> None:
    await store.put("src", b"payload", content_type="text/csv", metadata={"k": "v"})
    info = await store.copy("src", "dst/copy")
    assert (info.key, info.size, info.etag) == ("dst/copy", 7, md5(b"payload"))
    head = await store.head("dst/copy")
    assert (head.content_type, dict(head.metadata)) == ("text/csv", {"k": "v"})
    assert await store.get("dst/copy") == b"payload"
    await store.put("src", b"changed")
    assert await store.get("dst/copy") == b"payload"  # a copy, not a link
    with pytest.raises(PreconditionFailedError):
        await store.copy("src", "dst/copy", if_none_match=True)
    assert await store.get("dst/copy") == b"payload"
    await store.copy("src", "dst/copy")
    assert await store.get("dst/copy") == b"changed"


async def test_copy_object_between_stores(store: BlockStore) -> None:
    other = MemoryBlockStore(f"copy-peer-{uuid.uuid4().hex}")
    try:
        await other.put("there", b"from memory", content_type="text/plain", metadata={"a": "1"})
        info = await copy_object(other, "there", store, "here", if_none_match=True)
        assert info.size == 11
        head = await store.head("here")
        assert (head.content_type, dict(head.metadata)) == ("text/plain", {"a": "1"})
        assert await store.get("here") == b"from memory"
        with pytest.raises(PreconditionFailedError):
            await copy_object(other, "there", store, "here", if_none_match=True)
        await copy_object(store, "here", store, "here2")
        assert await store.get("here2") == b"from memory"
        await copy_object(store, "here", other, "back")
        assert await other.get("back") == b"from memory"
    finally:
        await other.close()


# -- lifecycle -----------------------------------------------------------------------------------------


async def test_closed_store_refuses_work(store: BlockStore) -> None:
    await store.put("k", b"v")
    await store.close()
    with pytest.raises(LakeFSError):
        await store.get("k")
    with pytest.raises(LakeFSError):
        await store.put("k", b"v")
    with pytest.raises(LakeFSError):
        await listing(store)
    await store.close()  # idempotent


# -- multipart (stores that are a MultipartStore) -----------------------------------------------------


def _multipart(store: BlockStore) -> MultipartStore:
    if not isinstance(store, MultipartStore):
        pytest.skip("the store has no native multipart upload")
    return store


def _multipart_etag(parts: list[bytes]) -> str:
    joined = b"".join(hashlib.md5(p).digest() for p in parts)
    return f"{hashlib.md5(joined).hexdigest()}-{len(parts)}"


async def test_multipart_parts_in_any_order_reupload_and_abort(store: BlockStore) -> None:
    mp = _multipart(store)
    parts = [random.randbytes(5 * MIB), random.randbytes(5 * MIB), b"tail"]
    upload = await mp.multipart_create("mp/obj", content_type="text/x-parts", metadata={"k": "v"})
    assert not await store.exists("mp/obj")  # nothing at the key before the completion
    stored = {}
    for number in (3, 1, 2):
        stored[number] = await mp.multipart_part(
            "mp/obj", upload, number, chunks_of(parts[number - 1], 300_000), len(parts[number - 1])
        )
    assert stored[1].etag == md5(parts[0]) and stored[3].size == 4
    parts[1] = random.randbytes(5 * MIB)  # uploaded again: the last upload of a number wins
    stored[2] = await mp.multipart_part("mp/obj", upload, 2, chunks_of(parts[1], MIB), 5 * MIB)
    info = await mp.multipart_complete(
        "mp/obj", upload, [stored[1], stored[2], stored[3]], if_none_match=True
    )
    assert info.etag == _multipart_etag(parts) and info.size == 10 * MIB + 4
    assert await store.get("mp/obj") == b"".join(parts)
    head = await store.head("mp/obj")
    assert head.etag == info.etag and head.content_type == "text/x-parts" and head.metadata == {"k": "v"}
    assert await listing(store) == ["mp/obj"]  # no part left anywhere a listing shows
    aborted = await mp.multipart_create("mp/aborted")
    await mp.multipart_part("mp/aborted", aborted, 1, chunks_of(b"x" * 10, 5), 10)
    await mp.multipart_abort("mp/aborted", aborted)
    await mp.multipart_abort("mp/aborted", aborted)  # an aborted upload: not an error
    assert await listing(store) == ["mp/obj"]


async def test_multipart_copy_part_and_bad_sizes(store: BlockStore) -> None:
    mp = _multipart(store)
    source = random.randbytes(6 * MIB)
    await store.put("mp/source", source)
    upload = await mp.multipart_create("mp/copied")
    first = await mp.multipart_copy_part(
        "mp/copied", upload, 1, src_key="mp/source", start=MIB, length=5 * MIB
    )
    assert first.etag == md5(source[MIB:]) and first.size == 5 * MIB
    with pytest.raises(BadInputError):  # longer than declared: not stored
        await mp.multipart_part("mp/copied", upload, 2, chunks_of(b"z" * 11, 4), 10)
    with pytest.raises(BadInputError):  # shorter than declared
        await mp.multipart_part("mp/copied", upload, 2, chunks_of(b"z" * 9, 4), 10)
    second = await mp.multipart_part("mp/copied", upload, 2, chunks_of(b"z" * 10, 4), 10)
    await mp.multipart_complete("mp/copied", upload, [first, second])
    assert await store.get("mp/copied") == source[MIB:] + b"z" * 10
