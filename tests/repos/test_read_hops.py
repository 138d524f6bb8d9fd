"""Reads of a branch in one KV call: the branch record and the live token's entries together
(:meth:`lakefs_core.repos.context.RepoContext.resolve_staged`).

A listing under a prefix and an object read take the token the process saw last as a guess and
read the branch record and that token's first entries in one ``scan_ranges`` call; the entries
count only when the record names that token. These tests count the KV calls of a read (one once
the token is known) and check that a stale guess (a commit moved the branch to a new token, the
branch was deleted, a tag took its name) never shows stale or missing data.

A GET of a small object in a local namespace makes that one KV call and no worker-thread hop of the
block store when the kernel has the file cached (:meth:`LocalBlockStore.get
<lakefs_core.block.local.LocalBlockStore.get>`); otherwise one, with the same bytes and errors.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

import lakefs_core.block.local as local_module
from lakefs_core.block.local_beneath import openat2_in_use
from lakefs_core.errors import NotFoundError
from lakefs_core.kv.base import KeyRange, KVEntry
from lakefs_core.kv.memory import MemoryKVStore
from lakefs_core.refs import kvkeys
from lakefs_core.refs.staging import FIRST_PAGE
from lakefs_core.repos.graveler import Graveler
from lakefs_core.repos.objects import Objects
from tests.repos.support import mem_namespace, unique


class CountingKV(MemoryKVStore):
    """The memory KV store, counting the read calls (``get``, ``scan``, ``scan_ranges``) but the
    purge probe's (an object read's, cached for half a second: not the read of the entry)."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: list[str] = []

    async def get(self, partition: bytes, key: bytes) -> bytes:
        self.reads.append("get")
        return await super().get(partition, key)

    async def scan(
        self, partition: bytes, start: bytes = b"", *, end: bytes | None = None, page_size: int = 1000
    ) -> AsyncIterator[KVEntry]:
        if start != kvkeys.PURGES_ANNOUNCED_KEY:
            self.reads.append("scan")
        async for entry in super().scan(partition, start, end=end, page_size=page_size):
            yield entry

    async def scan_ranges(
        self, ranges: Sequence[KeyRange], *, page_size: int = 1000
    ) -> AsyncIterator[tuple[int, KVEntry]]:
        self.reads.append("scan_ranges")
        async for item in super().scan_ranges(ranges, page_size=page_size):
            yield item


@pytest.fixture
async def kv() -> AsyncIterator[CountingKV]:
    """The conftest's ``g``, ``repo`` and ``objects`` over this counting store."""
    store = CountingKV()
    try:
        yield store
    finally:
        await store.close()


async def test_a_listing_and_a_read_are_one_kv_call_once_the_token_is_known(
    kv: CountingKV, objects: Objects, repo: str
) -> None:
    for i in range(3):
        await objects.upload(repo, "main", f"d/f{i}", b"x")
    await objects.list(repo, "main", prefix="d/")  # learns the live token
    kv.reads.clear()
    page = await objects.list(repo, "main", prefix="d/", delimiter="/")
    assert [o.path for o in page.objects] == ["d/f0", "d/f1", "d/f2"]
    assert kv.reads == ["scan_ranges"]
    kv.reads.clear()
    assert (await objects.stat(repo, "main", "d/f1")).path == "d/f1"
    assert kv.reads == ["scan_ranges"]


async def test_more_staged_entries_than_the_first_page_are_all_listed(objects: Objects, repo: str) -> None:
    paths = [f"p/{i:03d}" for i in range(FIRST_PAGE * 3 + 1)]
    for path in paths:
        await objects.upload(repo, "main", path, b"x")
    await objects.list(repo, "main", prefix="p/", amount=1)
    for amount in (1, FIRST_PAGE, FIRST_PAGE + 1, 1000):
        listed, after = [], ""
        while True:
            page = await objects.list(repo, "main", prefix="p/", after=after, amount=amount)
            listed += [o.path for o in page.objects]
            if not page.has_more:
                break
            after = page.next_after
        assert listed == paths, amount


async def test_a_commit_between_reads_is_seen_and_the_old_token_never_used(
    kv: CountingKV, g: Graveler, objects: Objects, repo: str
) -> None:
    await objects.upload(repo, "main", "d/a", b"a")
    await objects.upload(repo, "main", "d/gone", b"g")
    await objects.list(repo, "main", prefix="d/")  # the guess: the token before the commit
    await g.commit(repo, "main", committer="t", message="m")
    await objects.upload(repo, "main", "d/b", b"b")  # staged under the new token
    kv.reads.clear()
    page = await objects.list(repo, "main", prefix="d/")
    assert [o.path for o in page.objects] == ["d/a", "d/b", "d/gone"]
    # the branch with the old token's entries, the new commit's record, the new token apart
    assert kv.reads == ["scan_ranges", "get", "scan"]
    await objects.delete(repo, "main", "d/gone")  # a tombstone under the new token
    await g.commit(repo, "main", committer="t", message="m2")
    kv.reads.clear()
    with pytest.raises(NotFoundError):  # the old guess holds the tombstone: never used
        await objects.stat(repo, "main", "d/gone")
    assert kv.reads[0] == "scan_ranges"
    assert (await objects.stat(repo, "main", "d/b")).path == "d/b"
    kv.reads.clear()
    assert [o.path for o in (await objects.list(repo, "main", prefix="d/")).objects] == ["d/a", "d/b"]
    assert kv.reads == ["scan_ranges"]  # the new token is the guess now


async def test_a_branch_replaced_by_a_tag_of_its_name_resolves_as_the_tag(
    g: Graveler, objects: Objects, repo: str
) -> None:
    await objects.upload(repo, "main", "d/a", b"a")
    commit = await g.commit(repo, "main", committer="t", message="m")
    await g.create_branch(repo, "x", "main")
    await objects.upload(repo, "x", "d/staged", b"s")
    assert len((await objects.list(repo, "x", prefix="d/")).objects) == 2  # the guess for x
    await g.delete_branch(repo, "x")
    await g.create_tag(repo, "x", commit.id)
    page = await objects.list(repo, "x", prefix="d/")
    assert [o.path for o in page.objects] == ["d/a"]  # the tag's commit, nothing staged
    assert (await objects.stat(repo, "x", "d/a")).path == "d/a"


async def test_a_journalled_upload_reads_nothing_once_its_branch_is_known(
    kv: CountingKV, g: Graveler, objects: Objects
) -> None:
    """An upload with the hard-delete journal takes the repository, the branch record (as its last
    settled staging found it), the journal flag and the protection rules as recently seen: its KV
    calls are its two writes. A commit meanwhile makes that record stale: the staging step, which
    expects it, reads the branch again and stages under the new token."""
    repo = unique()
    await g.create_repository(repo, mem_namespace(), hard_delete_journal=True)
    await objects.upload(repo, "main", "u/a", b"a")  # learns what it may take as recently seen
    kv.reads.clear()
    await objects.upload(repo, "main", "u/b", b"b")
    assert kv.reads == []
    await g.commit(repo, "main", committer="t", message="m")
    await objects.upload(repo, "main", "u/c", b"c")
    assert "get" in kv.reads  # the stale record refused, the branch read again
    commit = await g.commit(repo, "main", committer="t", message="m2")
    listed = await objects.list(repo, commit.id, prefix="u/")
    assert [o.path for o in listed.objects] == ["u/a", "u/b", "u/c"]


async def test_an_upload_to_a_branch_this_process_deleted_writes_no_bytes(
    g: Graveler, objects: Objects
) -> None:
    """Deleting a branch forgets its record as recently seen: an upload to it fails before writing
    a byte or recording an intent, as it did when every upload read the branch first."""
    from lakefs_core.namespace import StorageNamespace
    from lakefs_core.repos.journal import Journal

    repo = unique()
    await g.create_repository(repo, mem_namespace(), hard_delete_journal=True)
    await g.create_branch(repo, "b", "main")
    await objects.upload(repo, "b", "x/1", b"1")  # b's record now as recently seen
    await g.delete_branch(repo, "b")
    record = await g.repository(repo)
    store = await g.namespace_store(StorageNamespace.parse(record.storage_namespace))
    before = [o async for o in store.list("")]
    with pytest.raises(NotFoundError):
        await objects.upload(repo, "b", "x/2", b"2")
    assert [o async for o in store.list("")] == before
    assert [i.key for i in [i async for i in Journal(g, record).intents()]] == [b"x/1"]


@pytest.fixture
async def local_repo(g: Graveler, tmp_path: Path) -> str:
    """A fresh repository on a local namespace under ``tmp_path``."""
    repo_id = unique()
    await g.create_repository(repo_id, f"local://{tmp_path / 'ns'}")
    return repo_id


def count_store_hops(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The local block store's worker-thread hops, by the function each ran."""
    hops: list[str] = []
    run = local_module._run

    async def counted(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        hops.append(getattr(fn, "__name__", repr(fn)))
        return await run(fn, *args, **kwargs)

    monkeypatch.setattr(local_module, "_run", counted)
    return hops


@pytest.mark.skipif(not hasattr(os, "RWF_NOWAIT") or not openat2_in_use(), reason="needs RWF_NOWAIT, openat2")
async def test_a_small_get_of_a_cached_local_object_makes_no_store_hop(
    kv: CountingKV, objects: Objects, local_repo: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A GET of a small object: one KV call (branch and entry), and its bytes read on the loop
    with calls that cannot wait for the disk (the file was just written: it is cached), none of
    them in a worker thread; a range likewise."""
    hops = count_store_hops(monkeypatch)
    body = bytes(range(256)) * 4
    await objects.upload(local_repo, "main", "d/small", body)
    await objects.stat(local_repo, "main", "d/small")  # learns the live token
    kv.reads.clear()
    hops.clear()
    stat = await objects.stat(local_repo, "main", "d/small")
    for start, length in ((0, None), (10, 7), (1000, 99)):
        chunks = [c async for c in objects.read_stat(local_repo, stat, start=start, length=length)]
        assert b"".join(chunks) == body[start : None if length is None else start + length]
    assert kv.reads == ["scan_ranges"]
    assert hops == []


async def test_a_small_get_the_cache_cannot_answer_reads_in_a_thread(
    objects: Objects, local_repo: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When the read on the loop refuses (a path or page not cached, no openat2), the worker thread
    reads the same bytes; missing data is still NotFoundError (the gateway's NoSuchVersion)."""
    hops = count_store_hops(monkeypatch)
    monkeypatch.setattr(local_module, "open_file_cached", lambda *_: None)
    body = b"y" * 1024
    await objects.upload(local_repo, "main", "d/small", body)
    stat = await objects.stat(local_repo, "main", "d/small")
    hops.clear()
    assert b"".join([c async for c in objects.read_stat(local_repo, stat, start=3, length=5)]) == body[3:8]
    assert hops == ["read"]
    monkeypatch.undo()
    for path in (tmp_path / "ns").rglob("*"):
        if path.is_file() and path.read_bytes() == body:
            path.unlink()
    with pytest.raises(NotFoundError) as caught:
        [c async for c in objects.read_stat(local_repo, stat)]
    assert type(caught.value) is NotFoundError


def test_the_per_branch_caches_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """A long-lived process sees branches come and go: what it remembers per branch (the writers'
    live tokens and branch records) stays under a bound; a forgotten branch only costs a read."""
    from lakefs_core.refs.model import Branch, Repository
    from lakefs_core.repos import context

    monkeypatch.setattr(context, "_SEEN_BRANCHES", 3)
    cache = context.WriteCache()
    repo = Repository("r", "mem://r", "main", datetime.now(UTC), "uid")
    for i in range(10):
        branch = Branch(f"b{i}", "c" * 64, f"token{i}")
        cache.keep_branch(repo, branch.id, branch, b"raw", now=0.0)
        assert len(cache._branches) <= 3 and len(cache._tokens) <= 3
    assert cache.live_token(repo, "b9", 0.5, 1.0) == "token9"
    assert cache.branch(repo, "b9", 0.5, 1.0) == (Branch("b9", "c" * 64, "token9"), b"raw")
    assert cache.branch(repo, "b0", 0.5, 1.0) is None
