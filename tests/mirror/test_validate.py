"""Validator: is a commit fully present in the destination namespace? Real drivers, real repositories.

A source repository is built with the Graveler API; "replication" copies chosen keys from the source
namespace to the destination namespace (same relative layout), like S3 Replication would, in any
order. Requests are counted by :class:`CountingStore`, a BlockStore wrapper (also used to inject
faults), never by mocks.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from lakefs_core.block import (
    BlockStore,
    Body,
    CommonPrefix,
    MemoryBlockStore,
    ObjectInfo,
    S3BlockStore,
    S3Settings,
    copy_object,
    open_block_store,
)
from lakefs_core.block._common import put_batch_by_puts
from lakefs_core.block.aws_session import new_session
from lakefs_core.block.base import DeleteResult, KeyInfo, PutItem
from lakefs_core.committed.metarange import parse_metarange
from lakefs_core.committed.tables import TableCache, TableStore
from lakefs_core.errors import BadInputError, TransientError
from lakefs_core.format.records import ADDRESS_FULL, ValueRecord, decode_entry, make_entry
from lakefs_core.format.splitter import SplitPolicy
from lakefs_core.keys import SliceAllocator
from lakefs_core.kv.memory import MemoryKVStore
from lakefs_core.namespace import StorageNamespace
from lakefs_core.repos.graveler import Graveler, GravelerSettings
from lakefs_core.repos.objects import Objects
from lakefs_core.repos.stores import StoreRegistry
from lakefs_mirror import validate
from lakefs_mirror.presence import PresenceCache
from lakefs_mirror.validate import ValidationResult, Validator
from tests.support.moto import ACCESS_KEY, SECRET_KEY, MotoServer

REPO = "src"
COOLDOWN = 30.0


# -- a counting / fault-injecting BlockStore wrapper ----------------------------------------------------


class CountingStore:
    """Delegates to ``inner``, counting requests per operation (``list``: one per page) and letting a
    test inject a failure before any operation: ``fault(op, key)`` may return an exception to raise."""

    def __init__(self, inner: BlockStore, *, delay: float = 0.0) -> None:
        self.inner = inner
        self.calls: Counter[str] = Counter()
        self.fault: Callable[[str, str], BaseException | None] | None = None
        self.delay = delay
        self.in_flight = 0
        self.max_in_flight = 0

    @property
    def uri(self) -> str:
        return self.inner.uri

    def reset(self) -> None:
        self.calls.clear()

    async def _enter(self, op: str, key: str) -> None:
        self.calls[op] += 1
        if self.fault is not None:
            exc = self.fault(op, key)
            if exc is not None:
                raise exc
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            await asyncio.sleep(self.delay)  # lets concurrent requests overlap
        finally:
            self.in_flight -= 1

    async def put(
        self,
        key: str,
        body: Body,
        *,
        if_none_match: bool = False,
        content_type: str | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> ObjectInfo:
        await self._enter("put", key)
        return await self.inner.put(
            key, body, if_none_match=if_none_match, content_type=content_type, metadata=metadata
        )

    async def put_batch(
        self, items: Sequence[PutItem], *, if_none_match: bool = False, concurrency: int = 8
    ) -> list[ObjectInfo]:
        # one counted "put" per item, as a driver without a batch path would send
        return await put_batch_by_puts(
            self.put, items, if_none_match=if_none_match, concurrency=concurrency, thread_loads=False
        )

    async def get(self, key: str, *, start: int = 0, length: int | None = None) -> bytes:
        await self._enter("get", key)
        return await self.inner.get(key, start=start, length=length)

    async def stream(
        self, key: str, *, start: int = 0, length: int | None = None, chunk_size: int = 1 << 20
    ) -> AsyncIterator[bytes]:
        await self._enter("get", key)
        async with contextlib.aclosing(
            self.inner.stream(key, start=start, length=length, chunk_size=chunk_size)  # type: ignore[type-var]
        ) as chunks:
            async for chunk in chunks:
                yield chunk

    async def head(self, key: str) -> ObjectInfo:
        await self._enter("head", key)
        return await self.inner.head(key)

    async def exists(self, key: str) -> bool:
        await self._enter("head", key)
        return await self.inner.exists(key)

    async def delete(self, key: str) -> None:
        await self._enter("delete", key)
        await self.inner.delete(key)

    async def delete_many(self, keys: Sequence[str]) -> None:
        await self._enter("delete", ",".join(keys))
        await self.inner.delete_many(keys)

    async def list(
        self,
        prefix: str = "",
        *,
        delimiter: str | None = None,
        start_after: str | None = None,
        page_size: int = 1000,
    ) -> AsyncIterator[ObjectInfo | CommonPrefix]:
        await self._enter("list", prefix)
        n = 0
        async with contextlib.aclosing(
            self.inner.list(prefix, delimiter=delimiter, start_after=start_after, page_size=page_size)  # type: ignore[type-var]
        ) as items:
            async for item in items:
                if n and n % page_size == 0:
                    self.calls["list"] += 1  # the driver fetched another page
                n += 1
                yield item

    async def copy(self, src_key: str, dst_key: str, *, if_none_match: bool = False) -> ObjectInfo:
        await self._enter("copy", dst_key)
        return await self.inner.copy(src_key, dst_key, if_none_match=if_none_match)

    async def close(self) -> None:
        await self.inner.close()

    def list_keys(self, prefix: str = "", *, start_after: str | None = None) -> AsyncIterator[KeyInfo]:
        return self.inner.list_keys(prefix, start_after=start_after)

    async def delete_batch(
        self, keys: Sequence[str], *, if_match: Mapping[str, str] | None = None
    ) -> DeleteResult:
        await self._enter("delete", ",".join(keys))
        return await self.inner.delete_batch(keys, if_match=if_match)


class FakeClock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


# -- a source repository and a destination namespace ----------------------------------------------------


@dataclass
class Env:
    g: Graveler
    objects: Objects
    src_ns: StorageNamespace
    src_store: BlockStore
    dst_ns: StorageNamespace
    dst_inner: BlockStore
    dst: CountingStore
    clock: FakeClock
    tmp: Path
    cache: PresenceCache = field(init=False)
    dst_tables: TableStore = field(init=False)

    def __post_init__(self) -> None:
        self.cache = PresenceCache(
            self.tmp / "presence.sqlite3", negative_cooldown=COOLDOWN, clock=self.clock
        )
        self.dst_tables = TableStore(self.dst, self.dst_ns, TableCache())

    def validator(self, **kw: Any) -> Validator:
        return Validator(self.dst_tables, self.dst, self.dst_ns, self.cache, **kw)

    async def validate(self, metarange_id: str, **kw: Any) -> ValidationResult:
        self.dst.reset()
        result = await self.validator(**kw).validate(metarange_id)
        # the validator's own accounting agrees with the wrapper's
        assert +result.requests == +self.dst.calls, (result.requests, self.dst.calls)
        return result

    async def upload(self, paths: Iterable[str], slice_objects: int | None = None) -> list[str]:
        """Upload ``paths``; returns their relative physical addresses."""
        if slice_objects is not None:
            self.objects.slices = SliceAllocator(max_objects=slice_objects)
        out = []
        for path in paths:
            stat = await self.objects.upload(REPO, "main", path, f"content of {path}".encode())
            out.append(stat.physical_address)
        return out

    async def commit(self, message: str = "c") -> str:
        return (await self.g.commit(REPO, "main", committer="t", message=message)).metarange_id

    async def source_keys(self) -> list[str]:
        """Every key of the source namespace, relative to it."""
        prefix = f"{self.src_ns.prefix}/" if self.src_ns.prefix else ""
        return [
            item.key[len(prefix) :]
            async for item in self.src_store.list(prefix)
            if isinstance(item, ObjectInfo) and not item.key.endswith("/dummy")
        ]

    async def replicate(self, relative_keys: Iterable[str] | None = None) -> int:
        """Copy keys (relative to the namespaces) from source to destination, like S3 Replication."""
        keys = await self.source_keys() if relative_keys is None else list(relative_keys)
        for rel in keys:
            await copy_object(self.src_store, self.src_ns.key(rel), self.dst_inner, self.dst_ns.key(rel))
        return len(keys)

    async def range_addresses(
        self, metarange_id: str, tables: TableStore | None = None
    ) -> dict[str, list[str]]:
        """range id -> relative addresses of its entries, in key order (read from the source)."""
        if tables is None:
            tables = TableStore(self.src_store, self.src_ns, TableCache())
        out: dict[str, list[str]] = {}
        for info in parse_metarange(await tables.open(metarange_id), metarange_id):
            reader = await tables.open(info.id)
            out[info.id] = [decode_entry(ValueRecord.from_sst(k, v).data).address for k, v in reader]
        return out

    async def range_addresses_raw(self, metarange_id: str) -> dict[str, list[bytes]]:
        """range id -> record keys, without decoding the entries (they may be bad on purpose)."""
        tables = TableStore(self.src_store, self.src_ns, TableCache())
        out: dict[str, list[bytes]] = {}
        for info in parse_metarange(await tables.open(metarange_id), metarange_id):
            out[info.id] = [ValueRecord.from_sst(k, v).key for k, v in await tables.open(info.id)]
        return out


def settings(raggedness: int) -> GravelerSettings:
    return GravelerSettings(
        backoff_initial=0.001, backoff_max=0.05, split_policy=SplitPolicy(range_raggedness_entries=raggedness)
    )


@contextlib.asynccontextmanager
async def make_env(
    kind: str, tmp_path: Path, *, raggedness: int = 8, s3: S3Settings | None = None
) -> AsyncIterator[Env]:
    tag = uuid.uuid4().hex[:10]
    if kind == "memory":
        src, dst = f"mem://src-{tag}/repo", f"mem://dst-{tag}/repo"
    elif kind == "local":
        src, dst = f"local://{tmp_path}/src", f"local://{tmp_path}/dst"
    else:
        src, dst = "s3://mirror-src/repo", "s3://mirror-dst/repo"
    kv = MemoryKVStore()
    registry = StoreRegistry(s3=s3)
    g = Graveler(kv, registry, settings(raggedness))
    await g.create_repository(REPO, src)
    src_ns, dst_ns = StorageNamespace(src), StorageNamespace(dst)
    dst_inner = await open_block_store(dst_ns.store_uri, s3=s3)
    env = Env(
        g=g,
        objects=Objects(g),
        src_ns=src_ns,
        src_store=await registry.namespace_store(src_ns),
        dst_ns=dst_ns,
        dst_inner=dst_inner,
        dst=CountingStore(dst_inner),
        clock=FakeClock(),
        tmp=tmp_path,
    )
    try:
        yield env
    finally:
        await dst_inner.close()
        await registry.close()
        await kv.close()


@pytest.fixture(params=["memory", "local", "local-processes"])
async def env(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Env]:
    """``local-processes``: every range is decoded in a worker process (offloop.run_process), the path
    a daemon takes for big ranges; the others decode these small ranges in the thread pool."""
    kind, _, decoding = request.param.partition("-")
    if decoding == "processes":
        monkeypatch.setattr(validate, "PROCESS_SCAN_MIN_BYTES", 0)
    async with make_env(kind, tmp_path) as e:
        yield e


def table_key(metarange_or_range_id: str) -> str:
    return f"_lakefs/{metarange_or_range_id}"


# -- hierarchy: metarange, ranges, objects -------------------------------------------------------------


async def test_incomplete_until_everything_arrived_naming_exactly_what_is_missing(env: Env) -> None:
    addresses = await env.upload((f"dir{i % 3}/obj{i:03d}" for i in range(60)), slice_objects=25)
    mr = await env.commit()
    ranges = await env.range_addresses(mr)
    assert len(ranges) >= 4
    range_ids = list(ranges)

    # nothing replicated yet
    result = await env.validate(mr)
    assert not result.complete and not result.metarange_present
    assert result.request_count == 1

    # the metarange, all ranges but one, all data but the missing range's and three others
    absent_range = range_ids[1]
    absent_objects = [ranges[range_ids[0]][0], ranges[range_ids[2]][-1], ranges[range_ids[-1]][0]]
    inside_absent_range = set(ranges[absent_range])
    present = [table_key(mr)] + [table_key(r) for r in range_ids if r != absent_range]
    present += [a for a in addresses if a not in absent_objects and a not in inside_absent_range]
    env.clock.advance(COOLDOWN)
    await env.replicate(present)
    result = await env.validate(mr)
    assert not result.complete
    assert result.metarange_present
    assert result.missing_ranges == [absent_range]
    assert result.missing_objects == sorted(absent_objects)  # the absent range is not looked into
    assert result.missing_objects_total == 3
    assert result.unreadable_tables == []
    assert result.ranges_total == len(range_ids)
    assert result.ranges_checked == len(range_ids) - 1
    assert result.missing_tables() == [absent_range]

    # the rest arrives
    await env.replicate()
    env.clock.advance(COOLDOWN)
    result = await env.validate(mr)
    assert result.complete, result
    assert result.missing_ranges == [] and result.missing_objects == []
    # the ranges validated last time are skipped without a request
    assert result.ranges_skipped == len(range_ids) - 4  # all but the absent one and three incomplete
    assert env.cache.is_validated(env.dst_ns.uri, mr)

    # validated: answered from the validated-tables set, zero requests
    result = await env.validate(mr)
    assert result.complete and result.cached
    assert result.request_count == 0


async def test_missing_metarange_stops_after_one_request(env: Env) -> None:
    await env.upload(f"k{i:03d}" for i in range(40))
    mr = await env.commit()
    # ranges and data already there, metarange not yet
    await env.replicate(k for k in await env.source_keys() if k != table_key(mr))
    result = await env.validate(mr)
    assert not result.complete and not result.metarange_present
    assert dict(result.requests) == {"get": 1}
    assert result.missing_tables() == [mr]
    assert result.ranges_total == 0 and result.missing_objects == []

    # within the cooldown: not asked again
    result = await env.validate(mr)
    assert not result.complete and result.request_count == 0

    await env.replicate([table_key(mr)])
    env.clock.advance(COOLDOWN)
    result = await env.validate(mr)
    assert result.complete


async def test_empty_tree_is_complete_and_bad_ids_are_refused(env: Env) -> None:
    result = await env.validate("")
    assert result.complete and result.request_count == 0
    with pytest.raises(BadInputError):
        await env.validator().validate("../../etc/passwd")


async def test_validator_refuses_a_table_store_of_another_namespace(env: Env) -> None:
    with pytest.raises(BadInputError) as info:
        Validator(TableStore(env.dst, env.src_ns), env.dst, env.dst_ns, env.cache)
    assert info.value.field == "dest_tables"
    with pytest.raises(BadInputError):
        env.validator(list_threshold=0)


# -- corrupt tables ----------------------------------------------------------------------------------------


async def test_truncated_range_is_unreadable_never_valid(env: Env) -> None:
    await env.upload(f"k{i:03d}" for i in range(40))
    mr = await env.commit()
    ranges = await env.range_addresses(mr)
    bad = next(iter(ranges))
    await env.replicate(k for k in await env.source_keys() if k != table_key(bad))
    full = await env.src_store.get(env.src_ns.table_key(bad))
    await env.dst_inner.put(env.dst_ns.table_key(bad), full[: len(full) // 2])  # a partial copy

    result = await env.validate(mr)
    assert not result.complete
    assert result.unreadable_tables == [bad]
    assert result.missing_ranges == []
    assert not env.cache.is_validated(env.dst_ns.uri, bad)
    assert not env.cache.is_present(env.dst_ns.uri, table_key(bad))

    # the full copy lands (replication overwrites); after the cooldown it validates
    await env.dst_inner.put(env.dst_ns.table_key(bad), full)
    env.clock.advance(COOLDOWN)
    result = await env.validate(mr)
    assert result.complete, result


@pytest.mark.parametrize(
    ("address", "address_type", "data"),
    [
        ("ftp://elsewhere/part-0", ADDRESS_FULL, None),  # an address that cannot be resolved
        (None, None, b"\xff\xff\xff"),  # a record whose entry does not decode
    ],
    ids=["unresolvable-address", "undecodable-entry"],
)
async def test_range_with_a_bad_record_is_unreadable_never_valid(
    env: Env, address: str | None, address_type: int | None, data: bytes | None
) -> None:
    """Checksums fine, contents not: decoding fails (in the worker process on the process path,
    which reports it as a value) and the range is unreadable, neither valid nor missing."""
    await env.upload(f"k{i:03d}" for i in range(10))
    if data is None:
        assert address is not None and address_type is not None
        identity, data = make_entry(address, 7, "etag", address_type=address_type)
    else:
        identity = b"x" * 32
    await env.g.set_entry(REPO, "main", ValueRecord(b"k005-bad", identity, data))
    mr = await env.commit()
    await env.replicate()
    ranges = await env.range_addresses_raw(mr)
    bad = next(r for r, keys in ranges.items() if b"k005-bad" in keys)
    result = await env.validate(mr)
    assert not result.complete
    assert result.unreadable_tables == [bad]
    assert result.missing_ranges == [] and result.missing_objects == []
    assert not env.cache.is_validated(env.dst_ns.uri, bad)


async def test_corrupt_metarange_is_unreadable_and_stops(env: Env) -> None:
    await env.upload(f"k{i:03d}" for i in range(20))
    mr = await env.commit()
    await env.replicate(k for k in await env.source_keys() if k != table_key(mr))
    data = bytearray(await env.src_store.get(env.src_ns.table_key(mr)))
    data[10] ^= 0xFF  # a flipped bit in the first data block: its checksum fails
    await env.dst_inner.put(env.dst_ns.table_key(mr), bytes(data))
    result = await env.validate(mr)
    assert not result.complete
    assert result.metarange_present
    assert result.unreadable_tables == [mr]
    assert result.ranges_total == 0
    assert dict(result.requests) == {"get": 1}


async def test_shared_table_cache_does_not_fake_presence(env: Env) -> None:
    """Table ids name the same bytes everywhere, so one TableCache may serve source and destination;
    a table cached from the SOURCE must still be proven present in the destination."""
    await env.upload(f"k{i:03d}" for i in range(40))
    mr = await env.commit()
    shared = TableCache()
    ranges = list(await env.range_addresses(mr, TableStore(env.src_store, env.src_ns, shared)))
    assert shared.get(mr) is not None and all(shared.get(r) is not None for r in ranges)  # all in RAM
    env.dst_tables = TableStore(env.dst, env.dst_ns, shared)

    result = await env.validate(mr)
    assert not result.metarange_present and not result.complete

    absent = ranges[-1]
    env.clock.advance(COOLDOWN)
    await env.replicate(k for k in await env.source_keys() if k != table_key(absent))
    result = await env.validate(mr)
    assert result.missing_ranges == [absent] and not result.complete
    # every table's own bytes were fetched from the destination (the absent range's GET said 404)
    assert result.requests["get"] == 1 + len(ranges)


# -- objects: size, external, errors, concurrency ----------------------------------------------------------


async def test_object_of_the_wrong_size_has_not_arrived(env: Env) -> None:
    addresses = await env.upload(f"k{i:03d}" for i in range(12))
    mr = await env.commit()
    await env.replicate()
    await env.dst_inner.put(env.dst_ns.key(addresses[5]), b"short")
    result = await env.validate(mr)
    assert not result.complete
    assert result.missing_objects == [addresses[5]]
    assert result.size_mismatches == 1


async def test_full_addresses_are_external_and_not_required(env: Env) -> None:
    await env.upload(f"k{i:03d}" for i in range(10))
    identity, data = make_entry(
        "s3://imported-bucket/tables/part-0.parquet", 123, "etag", address_type=ADDRESS_FULL
    )
    await env.g.set_entry(REPO, "main", ValueRecord(b"imported/part-0.parquet", identity, data))
    mr = await env.commit()
    await env.replicate()
    result = await env.validate(mr)
    assert result.complete, result
    assert result.external_objects == ["s3://imported-bucket/tables/part-0.parquet"]
    assert result.external_objects_total == 1
    assert result.objects_referenced == 10


async def test_full_address_inside_the_destination_namespace_is_required(env: Env) -> None:
    """One classification (StorageNamespace.relative_of): a FULL address naming a key inside the
    destination namespace is the same object as its relative form, so it must have arrived."""
    await env.upload(f"k{i:03d}" for i in range(3))
    rel = "data/imported/part-0"
    identity, data = make_entry(env.dst_ns.full_address(rel), 5, "etag", address_type=ADDRESS_FULL)
    await env.g.set_entry(REPO, "main", ValueRecord(b"imported/part-0", identity, data))
    mr = await env.commit()
    await env.replicate()
    result = await env.validate(mr)
    assert not result.complete
    assert result.missing_objects == [rel] and result.external_objects == []
    await env.dst_inner.put(env.dst_ns.key(rel), b"12345")
    env.clock.advance(COOLDOWN)
    result = await env.validate(mr)
    assert result.complete, result


async def test_worker_processes_decode_what_threads_decode(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same commit (relative, FULL-inside, external and repeated addresses; several ranges) gives
    the same answer decoded in the thread pool and in worker processes, and the process path really
    runs in another process."""
    calls: list[str] = []
    real = validate.run_process

    async def counting(fn: Any, *args: Any, **kw: Any) -> Any:
        calls.append(fn.__name__)
        return await real(fn, *args, **kw)

    monkeypatch.setattr(validate, "run_process", counting)
    results: dict[int, ValidationResult] = {}
    async with make_env("local", tmp_path, raggedness=4) as env:
        addresses = await env.upload((f"dir{i % 4}/obj{i:03d}" for i in range(50)), slice_objects=10)
        for name, address in (
            ("ext/a", "s3://imported-bucket/a.parquet"),
            ("ext/b", "s3://imported-bucket/a.parquet"),  # the same external object twice
            ("inside", env.dst_ns.full_address("data/imported/x")),
        ):
            identity, data = make_entry(address, 3, "etag", address_type=ADDRESS_FULL)
            await env.g.set_entry(REPO, "main", ValueRecord(name.encode(), identity, data))
        identity, data = make_entry(addresses[7], len(b"content of dir3/obj007"), "etag")
        await env.g.set_entry(REPO, "main", ValueRecord(b"zz-copy", identity, data))  # named twice
        mr = await env.commit()
        await env.replicate(k for k in await env.source_keys() if k != addresses[3])
        for threshold in (1 << 60, 0):  # threads, then processes; each with fresh presence facts
            monkeypatch.setattr(validate, "PROCESS_SCAN_MIN_BYTES", threshold)
            env.cache = PresenceCache(None, negative_cooldown=COOLDOWN, clock=env.clock)
            results[threshold] = await env.validate(mr)
    threads, processes = results[1 << 60], results[0]
    assert calls and set(calls) == {"scan_range_in_process"}
    assert len(calls) == processes.ranges_checked > 1
    threads.timings = processes.timings = {}
    assert threads == processes
    assert processes.missing_objects == sorted([addresses[3], "data/imported/x"])
    assert processes.external_objects == ["s3://imported-bucket/a.parquet"]


async def test_a_killed_worker_process_is_transient_and_records_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """kill -9 of the decoding worker: the validation raises TransientError (retry later) and no
    fact about the range or its objects is recorded; the next validation starts a new worker."""
    from tests.support.workers import sigkill_self

    monkeypatch.setattr(validate, "PROCESS_SCAN_MIN_BYTES", 0)
    async with make_env("local", tmp_path) as env:
        await env.upload(f"k{i:03d}" for i in range(20))
        mr = await env.commit()
        await env.replicate()
        monkeypatch.setattr(validate, "scan_range_in_process", sigkill_self)
        with pytest.raises(TransientError, match="CPU worker process died"):
            await env.validate(mr)
        ranges = await env.range_addresses(mr)
        assert not any(env.cache.is_validated(env.dst_ns.uri, r) for r in [mr, *ranges])
        assert all(not env.cache.recently_missing(env.dst_ns.uri, a) for a in ranges[next(iter(ranges))])
        monkeypatch.undo()
        monkeypatch.setattr(validate, "PROCESS_SCAN_MIN_BYTES", 0)
        result = await env.validate(mr)
        assert result.complete, result


async def test_transient_error_propagates_and_is_not_recorded_as_missing(env: Env) -> None:
    addresses = await env.upload(f"k{i:03d}" for i in range(5))  # few: HEADs
    mr = await env.commit()
    await env.replicate()
    flaky = env.dst_ns.key(addresses[2])
    env.dst.fault = lambda op, key: TransientError("503 slow down") if key == flaky else None
    with pytest.raises(TransientError):
        await env.validate(mr)
    rel = addresses[2]
    assert not env.cache.recently_missing(env.dst_ns.uri, rel)
    assert not env.cache.is_present(env.dst_ns.uri, rel)
    assert not env.cache.is_validated(env.dst_ns.uri, mr)

    # a failing table read propagates too
    env.dst.fault = lambda op, key: TransientError("timeout") if op == "get" else None
    fresh = TableStore(env.dst, env.dst_ns, TableCache())
    env.cache.forget_namespace(env.dst_ns.uri)
    with pytest.raises(TransientError):
        await Validator(fresh, env.dst, env.dst_ns, env.cache).validate(mr)
    assert not env.cache.recently_missing(env.dst_ns.uri, table_key(mr))

    env.dst.fault = None
    result = await env.validate(mr)
    assert result.complete


async def test_concurrency_is_bounded(env: Env) -> None:
    await env.upload((f"k{i:03d}" for i in range(60)), slice_objects=3)  # 20 slices of 3: HEADs
    mr = await env.commit()
    await env.replicate()
    env.dst.delay = 0.001
    result = await env.validate(mr, concurrency=4)
    assert result.complete
    assert result.requests["head"] == 60
    assert 1 < env.dst.max_in_flight <= 4


# -- negatives and persistence -----------------------------------------------------------------------------


async def test_negative_results_respect_the_cooldown(env: Env) -> None:
    addresses = await env.upload(f"k{i:03d}" for i in range(6))
    mr = await env.commit()
    late = addresses[3]
    await env.replicate(k for k in await env.source_keys() if k != late)
    result = await env.validate(mr)
    assert result.missing_objects == [late]

    # again at once: every fact is cached (positives, negative, open range readers): no request
    result = await env.validate(mr)
    assert result.missing_objects == [late]
    assert result.request_count == 0
    assert result.objects_cooling == 1

    # it arrives, but the cooldown has not passed: still reported missing, still no request
    await env.replicate([late])
    env.clock.advance(COOLDOWN - 1)
    result = await env.validate(mr)
    assert result.missing_objects == [late] and result.request_count == 0

    env.clock.advance(1)
    result = await env.validate(mr)
    assert result.complete
    assert dict(result.requests) == {"head": 1}


# Only durable destinations: facts about a mem:// store are never persisted (its objects die with the
# process; see tests/mirror/test_presence_incarnations.py).
@pytest.mark.parametrize("env", ["local"], indirect=True)
async def test_restart_remembers_positives(env: Env) -> None:
    addresses = await env.upload((f"k{i:03d}" for i in range(50)), slice_objects=10)
    mr = await env.commit()
    late = [addresses[7], addresses[31]]
    await env.replicate(k for k in await env.source_keys() if k not in late)
    result = await env.validate(mr)
    assert result.missing_objects == sorted(late)
    await env.cache.close()

    # restart: new cache over the same file, new (cold) table cache; negatives are not persisted
    await env.replicate(late)
    env.cache = await PresenceCache.open(env.tmp / "presence.sqlite3", clock=env.clock)
    env.dst_tables = TableStore(env.dst, env.dst_ns, TableCache())
    result = await env.validate(mr)
    assert result.complete
    assert result.objects_checked == 2  # only the two that were missing are asked about
    assert result.requests["head"] + result.requests["list"] <= 2
    await env.cache.close()

    # restart again: the commit is known validated: zero requests
    env.cache = await PresenceCache.open(env.tmp / "presence.sqlite3", clock=env.clock)
    env.dst_tables = TableStore(env.dst, env.dst_ns, TableCache())
    result = await env.validate(mr)
    assert result.complete and result.cached
    assert result.request_count == 0


# -- request accounting: cost follows the new content, HEAD vs LIST by density --------------------------


@pytest.mark.parametrize(("kind", "n"), [("memory", 2000), ("local", 600)])  # local: fsync per object
async def test_requests_track_new_content_not_repository_size(kind: str, n: int, tmp_path: Path) -> None:
    k = 10
    async with make_env(kind, tmp_path, raggedness=32) as env:
        await env.upload((f"dir{i % 7}/obj{i:05d}" for i in range(n)), slice_objects=250)
        base = await env.commit("base")
        await env.replicate()
        first = await env.validate(base)
        assert first.complete
        assert first.ranges_total >= n // 60
        assert first.objects_checked == n
        # slices of 250 objects: one LIST each, no HEAD; one GET per table
        assert first.requests["head"] == 0
        assert first.requests["list"] == -(-n // 250)
        assert first.requests["get"] == first.ranges_total + 1

        await env.upload(f"dir{i % 7}/new{i:05d}" for i in range(k))
        child = await env.commit("child")
        await env.replicate()
        result = await env.validate(child)
        assert result.complete
        print(
            f"\n[{kind}] N={n} ranges={first.ranges_total}: first validation {dict(first.requests)}; "
            f"child (+{k} objects, {result.ranges_checked} new ranges, {result.ranges_skipped} reused): "
            f"{dict(result.requests)} = {result.request_count} requests"
        )
        assert result.objects_checked == k
        assert result.ranges_skipped >= first.ranges_total - 2 * k
        assert result.request_count <= 3 * k + 3
        assert result.request_count * 25 < n

        # fewer new objects than the LIST threshold: one HEAD each
        few = 4
        await env.upload(f"dir{i % 7}/few{i:05d}" for i in range(few))
        grandchild = await env.commit("grandchild")
        await env.replicate()
        result = await env.validate(grandchild)
        assert result.complete
        print(f"[{kind}] grandchild (+{few} objects): {dict(result.requests)}")
        assert result.requests["head"] == few and result.requests["list"] == 0
        assert result.request_count <= 3 * few + 3


@pytest.mark.parametrize("kind", ["memory", "local"])
async def test_dense_new_slice_is_listed_not_headed(kind: str, tmp_path: Path) -> None:
    async with make_env(kind, tmp_path, raggedness=16) as env:
        await env.upload(f"base/{i:04d}" for i in range(100))
        base = await env.commit("base")
        await env.replicate()
        assert (await env.validate(base)).complete

        added = await env.upload(f"batch/{i:04d}" for i in range(200))
        assert len({a.rsplit("/", 1)[0] for a in added}) == 1  # one slice
        child = await env.commit("child")
        await env.replicate()
        result = await env.validate(child)
        assert result.complete
        print(f"\n[{kind}] +200 objects in one slice: {dict(result.requests)}")
        assert result.requests["head"] == 0
        assert 1 <= result.requests["list"] <= 3
        assert result.request_count < 40


async def test_sparse_list_falls_back_to_head_within_a_page_budget(tmp_path: Path) -> None:
    async with make_env("memory", tmp_path) as env:
        addresses = await env.upload(f"k{i:03d}" for i in range(8))  # exactly the threshold
        mr = await env.commit()
        await env.replicate()
        # the destination slice also holds many other objects right after the first wanted key
        first = min(addresses)
        for i in range(300):
            await env.dst_inner.put(env.dst_ns.key(f"{first}~{i:04d}"), b"x")
        result = await env.validate(mr, list_page_size=10)
        assert result.complete
        assert result.requests["list"] == 1  # the budget: ceil(8 / 8) page, which saw only the first
        assert result.requests["head"] == 7  # the keys it did not reach


# -- S3 ------------------------------------------------------------------------------------------------------


async def test_s3_source_and_destination_buckets(moto: Callable[[str], MotoServer], tmp_path: Path) -> None:
    server = moto("us-east-1")
    s3 = S3Settings(
        region="us-east-1",
        endpoint_url=server.endpoint,
        access_key_id=ACCESS_KEY,
        secret_access_key=SECRET_KEY,
        max_attempts=2,
        retry_initial_backoff=0.001,
        retry_max_backoff=0.01,
    )
    kw = server.client_kwargs()
    async with new_session().client(
        "s3",
        endpoint_url=kw["endpoint_url"],
        region_name=kw["region_name"],
        aws_access_key_id=kw["aws_access_key_id"],
        aws_secret_access_key=kw["aws_secret_access_key"],
    ) as client:
        for bucket in ("mirror-src", "mirror-dst"):
            await client.create_bucket(Bucket=bucket)
    async with make_env("s3", tmp_path, s3=s3) as env:
        assert isinstance(env.dst_inner, S3BlockStore)
        addresses = await env.upload(f"dir{i % 2}/obj{i:03d}" for i in range(30))
        mr = await env.commit()
        assert len(await env.range_addresses(mr)) >= 2

        result = await env.validate(mr)
        assert not result.metarange_present and dict(result.requests) == {"get": 1}

        late = addresses[4]
        env.clock.advance(COOLDOWN)
        await env.replicate(k for k in await env.source_keys() if k != late)
        result = await env.validate(mr)
        assert result.missing_objects == [late]
        assert result.requests["list"] == 1 and result.requests["head"] == 0  # one dense slice

        await env.replicate([late])
        env.clock.advance(COOLDOWN)
        result = await env.validate(mr)
        assert result.complete
        assert dict(result.requests) == {"head": 1}


def test_memory_store_is_a_block_store() -> None:
    assert isinstance(CountingStore(MemoryBlockStore("x")), BlockStore)


def test_requests_are_planned_sorted_whatever_the_group_sizes() -> None:
    """Big directories and many directories are sorted in slices and merged: same order as sorted()."""
    rng = random.Random(7)
    big = [f"data/big/{rng.randrange(10**9):09d}" for _ in range(3 * validate._SORT_SLICE + 5)]
    small = [f"data/d{rng.randrange(10**9)}/x" for _ in range(validate._SORT_SLICE + 3)]
    keys = big + big[:100] + small  # repeated keys stay repeated, as sorted() keeps them
    rng.shuffle(keys)
    lists, heads = validate._plan_requests(keys, 50)
    assert lists == [("data/big/", sorted(big + big[:100]))]
    assert heads == sorted(small)
