"""The read path's purge check (lakefs_core/repos/purge_markers.py), on SQLite + local and PostgreSQL
+ S3 (moto):

- a reader that trusts "no purge here" is never fooled: a purge in another process waits out the
  trust before its first marker, so a read made right after the markers are durable refuses (and the
  trust is real: with an announcement shorter than it, a stale reader would be fooled);
- reads in a repository that never purged cost no marker lookup (one probe per trust period), and
  return what they did; once it has purges, each read costs one marker point read;
- concurrent reads share lookups, and a lookup never answers a read made after it read.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from lakefs_core.errors import InjectedFaultError, PurgedError
from lakefs_core.faults import ENV as FAULT_ENV
from lakefs_core.kv.base import Expect, KVEntry, KVItem, KVStore
from lakefs_core.refs import kvkeys
from lakefs_core.repos import purge_markers
from lakefs_core.repos.graveler import Graveler
from lakefs_core.repos.objects import Objects
from lakefs_core.repos.purge_markers import MarkerReads
from tests.repos.purge_support import BACKENDS, Backend, Spec, open_backend, spec_for
from tests.repos.support import fast_settings


@pytest.fixture(params=BACKENDS)
def spec(request: pytest.FixtureRequest, tmp_path: Path) -> Spec:
    return spec_for(str(request.param), tmp_path, request)


@pytest.fixture
async def b(spec: Spec) -> AsyncIterator[Backend]:
    backend = await open_backend(spec)
    try:
        yield backend
    finally:
        await backend.close()


async def _objects(b: Backend, n: int = 3) -> list[str]:
    paths = [f"f{i:02d}" for i in range(n)]
    for path in paths:
        await b.objects.upload(b.repo, "main", path, path.encode())
    await b.g.commit(b.repo, "main", committer="t", message="m")
    return paths


async def _drain(chunks: AsyncIterator[bytes]) -> bytes:
    return b"".join([c async for c in chunks])


async def _purged_elsewhere(b: Backend, path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another process (its own facade) purges ``path``, crashing before any delete: the markers
    are durable, the bytes are all still there."""
    other = Graveler(b.kv, b.stores, fast_settings())
    monkeypatch.setenv(FAULT_ENV, "purge:delete:1")
    with pytest.raises(InjectedFaultError):
        await other.purge_path(b.repo, "main", path, all_history=False, reason="r", actor="a", yes=True)
    monkeypatch.delenv(FAULT_ENV)


async def test_a_trusting_reader_is_never_fooled(b: Backend, monkeypatch: pytest.MonkeyPatch) -> None:
    paths = await _objects(b)
    reader = Objects(Graveler(b.kv, b.stores, fast_settings()))
    monkeypatch.setattr(purge_markers, "READER_TRUST_SECONDS", 0.3)
    monkeypatch.setattr(purge_markers, "ANNOUNCE_SECONDS", 0.6)
    assert await reader.read_all(b.repo, "main", paths[0]) == b"f00"  # trusts "no purge" now
    await _purged_elsewhere(b, paths[1], monkeypatch)
    with pytest.raises(PurgedError):  # right after the markers: the announcement outlived the trust
        await reader.read_all(b.repo, "main", paths[1])
    assert await reader.read_all(b.repo, "main", paths[2]) == b"f02"


async def test_the_trust_is_real(b: Backend, monkeypatch: pytest.MonkeyPatch) -> None:
    """The previous test is not vacuous: a reader does trust its answer, so an announcement that
    did not outlast the trust would let it return a purged object's bytes."""
    paths = await _objects(b)
    reader = Objects(Graveler(b.kv, b.stores, fast_settings()))
    monkeypatch.setattr(purge_markers, "READER_TRUST_SECONDS", 60.0)
    monkeypatch.setattr(purge_markers, "ANNOUNCE_SECONDS", 0.0)
    assert await reader.read_all(b.repo, "main", paths[0]) == b"f00"
    await _purged_elsewhere(b, paths[1], monkeypatch)
    assert await reader.read_all(b.repo, "main", paths[1]) == b"f01"  # fooled (unsound settings)
    with pytest.raises(PurgedError):  # a reader that asks afresh refuses
        await Objects(Graveler(b.kv, b.stores, fast_settings())).read_all(b.repo, "main", paths[1])


async def test_reads_cost_no_lookup_until_the_repository_purges(
    b: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    paths = await _objects(b)
    monkeypatch.setattr(purge_markers, "READER_TRUST_SECONDS", 600.0)  # no expiry during the test
    counting = CountingKV(b.kv)
    objects = Objects(Graveler(counting, b.stores, fast_settings()))
    stat = await objects.stat(b.repo, "main", paths[0])
    assert counting.scans() == 1 and counting.markers() == 0  # the one probe of this process
    for read in (
        objects.read_all(b.repo, "main", paths[1]),
        objects.stat(b.repo, "main", paths[2]),
        _drain(objects.read_stat(b.repo, stat)),
    ):
        counting.clear()
        await read
        assert counting.scans() == 0 and counting.markers() == 0, counting.calls
    assert [await objects.read_all(b.repo, "main", p) for p in paths] == [b"f00", b"f01", b"f02"]

    await b.g.purge_path(b.repo, "main", paths[0], all_history=False, reason="r", actor="a", yes=True)
    fresh = Objects(Graveler(counting, b.stores, fast_settings()))  # a process started now
    await fresh.read_all(b.repo, "main", paths[1])  # its first read probes: the repository purged
    counting.clear()
    assert await fresh.read_all(b.repo, "main", paths[1]) == b"f01"
    assert counting.markers() == 1 and counting.scans() == 0, counting.calls
    counting.clear()
    with pytest.raises(PurgedError):
        await _drain(fresh.read_stat(b.repo, stat))  # paths[0]'s object: purged, deleted
    assert counting.markers() >= 1 and counting.scans() == 0, counting.calls


async def test_concurrent_reads_share_marker_lookups(b: Backend) -> None:
    """``fs download -r`` reads many objects at once: in a repository with purges their lookups are
    grouped (far fewer KV reads than objects), and every read still returns its own bytes."""
    paths = await _objects(b, 13)
    repo = await b.g.repository(b.repo)
    await b.kv.set_if(repo.partition, kvkeys.PURGES_ANNOUNCED_KEY, b"1", Expect.ABSENT)
    stats = (await b.objects.list(b.repo, "main")).objects
    counting = CountingKV(b.kv)
    g = Graveler(counting, b.stores, fast_settings())
    objects = Objects(g)
    await g.recent_repository(b.repo)  # the bulk path's repository record, read once (one cache)
    assert await objects.markers.has_purges(repo)
    counting.clear()
    bodies = await asyncio.gather(*(_drain(objects.read_stat(b.repo, st)) for st in stats))
    assert bodies == [p.encode() for p in paths]
    lookups = counting.markers() + counting.scans()
    assert 1 <= lookups <= 4, counting.calls  # one point read, then one probe for the rest


async def test_a_lookup_never_answers_a_read_made_after_it_read(b: Backend) -> None:
    """A lookup in flight has read "no marker"; a purge then writes the marker; a read made now
    must wait for the next lookup, never take the answer of the one in flight."""
    paths = await _objects(b, 1)
    address = (await b.objects.stat(b.repo, "main", paths[0])).physical_address
    repo = await b.g.repository(b.repo)
    await b.kv.set_if(repo.partition, kvkeys.PURGES_ANNOUNCED_KEY, b"1", Expect.ABSENT)
    held = HeldKV(b.kv)
    markers = MarkerReads(Graveler(held, b.stores, fast_settings()))  # type: ignore[arg-type]
    first = asyncio.create_task(markers.audit_of(repo, address))
    await held.reading.wait()  # the first lookup has read: no marker yet
    await b.kv.set(repo.partition, kvkeys.purged_key(address), b"purge-late")
    second = asyncio.create_task(markers.audit_of(repo, address))
    await asyncio.sleep(0.05)
    held.release.set()
    assert await first is None  # its read came before the marker
    assert await second == "purge-late"


class HeldKV:
    """A real KV store whose ``purged/`` point reads are answered only once ``release`` is set (with
    the value read before the hold)."""

    def __init__(self, inner: KVStore) -> None:
        self.inner = inner
        self.reading = asyncio.Event()
        self.release = asyncio.Event()

    async def get(self, partition: bytes, key: bytes) -> bytes:
        try:
            return await self.inner.get(partition, key)
        finally:
            if key.startswith(kvkeys.PURGED_PREFIX):
                self.reading.set()
                await self.release.wait()

    def scan(
        self, partition: bytes, start: bytes = b"", *, end: bytes | None = None, page_size: int = 1000
    ) -> AsyncIterator[KVEntry]:
        return self.inner.scan(partition, start, end=end, page_size=page_size)


class CountingKV:
    """A real KV store, its calls counted (``calls``: method names; ``keys``: keys read)."""

    def __init__(self, inner: KVStore) -> None:
        self.inner = inner
        self.calls: list[str] = []
        self.keys: list[bytes] = []

    def clear(self) -> None:
        self.calls.clear()
        self.keys.clear()

    def markers(self) -> int:
        """``purged/`` markers read since :meth:`clear`."""
        return sum(k.startswith(kvkeys.PURGED_PREFIX) for k in self.keys)

    def scans(self) -> int:
        """Scans from the announcement or the markers since :meth:`clear` (the purge probes)."""
        return self.calls.count("scan:purged")

    async def get(self, partition: bytes, key: bytes) -> bytes:
        self.calls.append("get")
        self.keys.append(key)
        return await self.inner.get(partition, key)

    async def set(self, partition: bytes, key: bytes, value: bytes) -> None:
        self.calls.append("set")
        await self.inner.set(partition, key, value)

    async def set_if(self, partition: bytes, key: bytes, value: bytes, expected: Expect) -> None:
        self.calls.append("set_if")
        await self.inner.set_if(partition, key, value, expected)

    async def set_many(self, items: list[KVItem]) -> None:
        self.calls.append("set_many")
        await self.inner.set_many(items)

    async def set_many_then_get(self, items: list[KVItem], partition: bytes, key: bytes) -> bytes:
        self.calls.append("set_many_then_get")
        return await self.inner.set_many_then_get(items, partition, key)

    async def delete(self, partition: bytes, key: bytes) -> None:
        self.calls.append("delete")
        await self.inner.delete(partition, key)

    def scan(
        self, partition: bytes, start: bytes = b"", *, end: bytes | None = None, page_size: int = 1000
    ) -> AsyncIterator[KVEntry]:
        purge_probe = start.startswith(kvkeys.PURGES_ANNOUNCED_KEY)
        self.calls.append("scan:purged" if purge_probe else "scan")
        return self.inner.scan(partition, start, end=end, page_size=page_size)

    async def close(self) -> None:
        await self.inner.close()
