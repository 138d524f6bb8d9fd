"""Guards in apply_changes and diff (lakefs_core/committed/apply/py, lakefs_core/committed/diff/py).

- A tombstone for a key the base does not hold is no effective change, on the async-iterable path
  of ``apply_changes`` as on the plain-iterable one: nothing to apply raises NoChangesError; at the
  repository level, uploading a key, deleting it and committing is refused and leaves the head.
- ``diff`` compares records by identity: two records of one key with the same identity but
  different stored bytes are not a change; at the repository level, the same bytes uploaded as one
  key on two branches and committed on both diff to nothing.
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator

import pytest

from lakefs_core.committed.apply import apply_changes
from lakefs_core.committed.diff import diff
from lakefs_core.committed.model import Change
from lakefs_core.errors import NoChangesError
from lakefs_core.kv.memory import MemoryKVStore
from lakefs_core.repos.graveler import Graveler
from lakefs_core.repos.objects import Objects
from lakefs_core.repos.stores import StoreRegistry
from tests.committed.support import as_async, memory_tables, rec, written
from tests.repos.support import mem_namespace, new_graveler, unique


@pytest.mark.parametrize("stream", ["async", "sync"])
@pytest.mark.parametrize("keys", [["z"], ["0"], ["0", "c", "z"]], ids=["after", "before", "around"])
async def test_tombstones_for_absent_keys_are_no_changes(stream: str, keys: list[str]) -> None:
    tables = memory_tables()
    base = await written(tables, [rec("a"), rec("b")])
    changes = [Change(k.encode(), None) for k in keys]
    with pytest.raises(NoChangesError):
        await apply_changes(tables, base, as_async(changes) if stream == "async" else changes)
    result = await apply_changes(
        tables, base, as_async(changes) if stream == "async" else changes, allow_empty=True
    )
    assert result.effective_changes == 0


async def test_async_tombstone_next_to_a_real_insert_counts_once() -> None:
    tables = memory_tables()
    base = await written(tables, [rec("a")])
    result = await apply_changes(tables, base, as_async([Change(b"b", rec("b")), Change(b"c", None)]))
    assert result.effective_changes == 1


async def test_same_identity_different_bytes_is_no_diff() -> None:
    tables = memory_tables()
    identity = hashlib.sha256(b"same object").digest()
    left = await written(tables, [rec("a"), rec("k", b"stored-one-way", identity)])
    right = await written(tables, [rec("a"), rec("k", b"stored-another-way", identity)])
    assert left.id != right.id
    assert [d async for d in diff(left, right)] == []
    changed = await written(tables, [rec("a"), rec("k", b"other", hashlib.sha256(b"other").digest())])
    assert [d.key async for d in diff(left, changed)] == [b"k"]


@pytest.fixture
async def g() -> AsyncIterator[Graveler]:
    kv, stores = MemoryKVStore(), StoreRegistry()
    try:
        yield new_graveler(kv, stores)
    finally:
        await stores.close()
        await kv.close()


@pytest.fixture
async def repo(g: Graveler) -> str:
    repo_id = unique()
    await g.create_repository(repo_id, mem_namespace())
    return repo_id


async def test_upload_then_delete_of_an_uncommitted_key_commits_nothing(g: Graveler, repo: str) -> None:
    o = Objects(g)
    await o.upload(repo, "main", "x", b"1")
    await g.commit(repo, "main", committer="t", message="x")
    await o.upload(repo, "main", "y", b"2")
    await o.delete(repo, "main", "y")
    head = (await g.branch(repo, "main")).commit_id
    with pytest.raises(NoChangesError):
        await g.commit(repo, "main", committer="t", message="y")
    assert (await g.branch(repo, "main")).commit_id == head
    assert (await g.get_commit(repo, "main")).id == head
    page = await o.list(repo, "main", amount=10)
    assert [s.path for s in page.objects] == ["x"]


async def test_same_bytes_committed_on_two_branches_diff_to_nothing(g: Graveler, repo: str) -> None:
    o = Objects(g)
    await o.upload(repo, "main", "base", b"b")
    await g.commit(repo, "main", committer="t", message="base")
    await g.create_branch(repo, "dev", "main")
    await o.upload(repo, "main", "k", b"same")
    await g.commit(repo, "main", committer="t", message="main")
    await o.upload(repo, "dev", "k", b"same")
    await g.commit(repo, "dev", committer="t", message="dev")
    assert [d async for d in g.diff(repo, "main", "dev")] == []
