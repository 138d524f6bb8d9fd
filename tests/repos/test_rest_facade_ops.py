"""The facade operations lakeFS's REST API needed: cherry-pick, merge base of two refs, dropping a
path's uncommitted changes (exact or prefix; model-based), repository settings (compare-and-swap),
hidden branches, copies to fresh journalled addresses and import statuses in the KV."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lakefs_core.committed.model import MergeStrategy
from lakefs_core.errors import (
    BadInputError,
    ConflictError,
    MergeConflictError,
    NotFoundError,
    PreconditionFailedError,
)
from lakefs_core.kv.memory import MemoryKVStore
from lakefs_core.repos.graveler import Graveler
from lakefs_core.repos.import_status import CANCELED, STOPPED, ImportStatuses
from lakefs_core.repos.objects import Objects
from lakefs_core.repos.stores import StoreRegistry
from tests.repos.support import collect, fast_settings, mem_namespace, new_graveler, record, unique
from tests.support.profiles import examples


async def commit(g: Graveler, repo: str, branch: str = "main", message: str = "c") -> str:
    return (await g.commit(repo, branch, committer="tester", message=message)).id


async def content(g: Graveler, repo: str, ref: str) -> dict[bytes, bytes]:
    return {r.key: r.identity async for r in g.list_entries(repo, ref)}


async def test_cherry_pick_refusals(g: Graveler, repo: str) -> None:
    await g.set_entry(repo, "main", record("a", "base"))
    await commit(g, repo)
    await g.create_branch(repo, "other", "main")
    await g.set_entry(repo, "other", record("a", "other"))
    change = await commit(g, repo, "other")
    await g.set_entry(repo, "main", record("a", "main"))
    await commit(g, repo)
    with pytest.raises(MergeConflictError):
        await g.cherry_pick(repo, "main", change, committer="t")
    await g.set_entry(repo, "main", record("dirty"))
    with pytest.raises(ConflictError, match="uncommitted"):
        await g.cherry_pick(repo, "main", change, committer="t")
    await g.reset_branch(repo, "main")
    await g.create_branch(repo, "m", "other")
    await g.set_entry(repo, "main", record("z"))
    await commit(g, repo)
    merged = await g.merge(repo, "main", "m", committer="t", strategy=MergeStrategy.SOURCE_WINS)
    with pytest.raises(BadInputError, match="parent_number"):
        await g.cherry_pick(repo, "main", merged.id, committer="t")


async def test_merge_base(g: Graveler, repo: str) -> None:
    await g.set_entry(repo, "main", record("a"))
    base = await commit(g, repo)
    await g.create_branch(repo, "f", "main")
    await g.set_entry(repo, "f", record("f"))
    await commit(g, repo, "f")
    await g.set_entry(repo, "main", record("m"))
    await commit(g, repo)
    found = await g.merge_base(repo, "main", "f")
    assert found is not None and found.id == base


async def test_settings_compare_and_swap(g: Graveler, repo: str) -> None:
    assert await g.setting(repo, "branch_protection") is None
    await g.set_setting(repo, "branch_protection", b'["main"]', None)
    with pytest.raises(PreconditionFailedError):
        await g.set_setting(repo, "branch_protection", b"[]", None)
    with pytest.raises(PreconditionFailedError):
        await g.set_setting(repo, "branch_protection", b"[]", b'["other"]')
    await g.set_setting(repo, "branch_protection", b"[]", b'["main"]')
    assert await g.setting(repo, "branch_protection") == b"[]"
    with pytest.raises(BadInputError):
        await g.setting(repo, "a/b")


async def test_hidden_branch(g: Graveler, repo: str) -> None:
    made = await g.create_branch(repo, "tx-1", "main", hidden=True)
    assert made.hidden and (await g.branch(repo, "tx-1")).hidden
    assert [b.id for b in await collect(g.list_branches(repo)) if not b.hidden] == ["main"]


KEYS = st.sampled_from(["a", "a/x", "a/y", "ab", "b/z", "b"])
OPS = st.lists(st.tuples(st.sampled_from(["put", "delete"]), KEYS), max_size=12)


@settings(
    max_examples=examples(0.6), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(committed=st.sets(KEYS), ops=OPS, path=KEYS, prefix=st.booleans())
def test_reset_path_model(committed: set[str], ops: list[tuple[str, str]], path: str, prefix: bool) -> None:
    """Against a model: after reset_changes, exactly the uncommitted changes under ``path`` (or to it)
    are gone, every other change is kept, and the committed data is untouched."""
    asyncio.run(_reset_path_case(committed, ops, path, prefix))


async def _reset_path_case(committed: set[str], ops: list[tuple[str, str]], path: str, prefix: bool) -> None:
    kv, stores = MemoryKVStore(), StoreRegistry()
    try:
        g = new_graveler(kv, stores)
        repo = unique()
        await g.create_repository(repo, mem_namespace())
        for key in sorted(committed):
            await g.set_entry(repo, "main", record(key, "committed"))
        if committed:
            await commit(g, repo)
        before = await content(g, repo, "main")
        for i, (op, key) in enumerate(ops):
            if op == "put":
                await g.set_entry(repo, "main", record(key, f"v{i}"))
            elif key.encode() in await content(g, repo, "main"):
                await g.delete_entry(repo, "main", key.encode())
        staged = await content(g, repo, "main")

        def hit(key: bytes) -> bool:
            return key.startswith(path.encode()) if prefix else key == path.encode()

        await g.reset_changes(repo, "main", path.encode(), prefix=prefix)
        expected = {k: v for k, v in staged.items() if not hit(k)}
        expected |= {k: v for k, v in before.items() if hit(k)}
        assert await content(g, repo, "main") == expected
        assert await content(g, repo, "main@") == before
    finally:
        await stores.close()
        await kv.close()


async def test_squash_merge_has_one_parent(g: Graveler, repo: str) -> None:
    await g.set_entry(repo, "main", record("a"))
    await commit(g, repo)
    await g.create_branch(repo, "f", "main")
    await g.set_entry(repo, "f", rec := record("f"))
    await commit(g, repo, "f")
    await g.set_entry(repo, "f", record("g"))
    await commit(g, repo, "f")
    head = await g.get_commit(repo, "main")
    squashed = await g.merge(repo, "f", "main", committer="t", squash=True)
    assert squashed.parents == (head.id,) and squashed.generation == head.generation + 1
    assert (await content(g, repo, "main"))[b"f"] == rec.identity


async def test_presigned_staging_link(g: Graveler) -> None:
    """stage_address journals the address (pending) as an upload's; link settles it with the entry,
    only for the branch and path it was issued for, only with the bytes in place, only once; a
    repository without the journal cannot issue addresses."""
    objects = Objects(g)
    repo = unique()
    await g.create_repository(repo, mem_namespace(), hard_delete_journal=True)
    staged = await objects.stage_address(repo, "main", "p")
    journal = await g.journal(repo)
    intent = await journal.intent(staged.relative)
    assert intent is not None and intent.state == "pending" and intent.key == b"p"
    with pytest.raises(NotFoundError):  # nothing written there yet
        await objects.link(repo, "main", "p", staged.full_address, size=3)
    await staged.store.put(staged.key, b"abc")
    with pytest.raises(BadInputError, match="another branch or path"):
        await objects.link(repo, "main", "q", staged.full_address, size=3)
    with pytest.raises(BadInputError, match="3 bytes"):
        await objects.link(repo, "main", "p", staged.full_address, size=4)
    stat = await objects.link(repo, "main", "p", staged.full_address, size=3, metadata={"k": "v"})
    assert stat.size == 3 and stat.metadata == {"k": "v"}
    assert await objects.read_all(repo, "main", "p") == b"abc"
    settled = await journal.intent(staged.relative)
    assert settled is not None and settled.state == "stored"
    with pytest.raises(BadInputError, match="no longer pending"):
        await objects.link(repo, "main", "p", staged.full_address, size=3)
    plain = unique()
    await g.create_repository(plain, mem_namespace(), hard_delete_journal=False)
    with pytest.raises(BadInputError, match="journal"):
        await objects.stage_address(plain, "main", "p")


async def test_link_after_the_reconciler_claimed_stages_nothing(g: Graveler) -> None:
    objects = Objects(g)
    repo = unique()
    await g.create_repository(repo, mem_namespace(), hard_delete_journal=True)
    staged = await objects.stage_address(repo, "main", "p")
    await staged.store.put(staged.key, b"abc")
    journal = await g.journal(repo)
    intent = await journal.intent(staged.relative)
    assert intent is not None
    await journal.claim(intent)  # the pending timeout passed: the reconciler takes it
    with pytest.raises(BadInputError, match="no longer pending"):
        await objects.link(repo, "main", "p", staged.full_address, size=3)
    assert await collect(g.list_entries(repo, "main")) == []


async def test_copy_journals_a_fresh_address(g: Graveler) -> None:
    """Objects.copy writes the bytes to a fresh address, journalled (pending before the copy,
    stored with the staged entry) as an upload's, across repositories too; a purged source or
    missing source data copies nothing."""
    objects = Objects(g)
    repo, other = unique(), unique()
    await g.create_repository(repo, mem_namespace(), hard_delete_journal=True)
    await g.create_repository(other, mem_namespace(), hard_delete_journal=True)
    src = await objects.upload(repo, "main", "src", b"bytes", content_type="x/y", metadata={"a": "b"})
    for target in (repo, other):
        copied = await objects.copy(repo, src, target, "main", "dst")
        assert copied.physical_address != src.physical_address
        assert (copied.etag, copied.content_type, copied.metadata) == (src.etag, "x/y", {"a": "b"})
        assert await objects.read_all(target, "main", "dst") == b"bytes"
        intent = await (await g.journal(target)).intent(copied.physical_address)
        assert intent is not None and intent.state == "stored" and intent.key == b"dst"
    replaced = await objects.copy(repo, src, repo, "main", "dst2", content_type="", metadata={})
    assert (replaced.content_type, replaced.metadata) == ("", {})
    ns, store = await objects._namespace(await g.repository(repo))
    await store.delete(ns.key(src.physical_address))
    with pytest.raises(NotFoundError, match="missing") as missing:
        await objects.copy(repo, src, repo, "main", "dst3")
    assert isinstance(missing.value.__cause__, NotFoundError)
    assert [e.key for e in await collect(g.list_entries(repo, "main"))] == [b"dst", b"dst2", b"src"]


async def test_import_statuses_shared_through_the_kv() -> None:
    """An import's status written by one process is read and cancelled by another (two facades on
    one KV); the running side sees the cancel at its next refresh; a status no process refreshes is
    failed after a minute; a day later it is deleted."""
    now = [datetime(2026, 1, 1, tzinfo=UTC)]
    kv = MemoryKVStore()
    runner, other = (ImportStatuses(new_graveler(kv, clock=lambda: now[0])) for _ in range(2))
    repo = unique()
    g = new_graveler(kv, clock=lambda: now[0])
    await g.create_repository(repo, mem_namespace())
    head = await g.get_commit(repo, "main")
    started = await runner.create(repo)
    assert (await other.get(repo, started.id)).running
    await runner.update(repo, started.id, lambda s: replace(s, progress=5, commit=head, metarange_id="m"))
    seen = await other.get(repo, started.id)
    assert (seen.progress, seen.commit, seen.metarange_id) == (5, head, "m") and seen.running
    assert (await other.cancel(repo, started.id)).error == CANCELED
    refreshed = await runner.update(repo, started.id, lambda s: s if s.running else None)
    assert not refreshed.running and refreshed.error == CANCELED  # the runner stops its import
    with pytest.raises(ConflictError):
        await other.cancel(repo, started.id)
    orphan = await runner.create(repo)  # its process dies: nothing refreshes it
    now[0] += timedelta(seconds=61)
    assert (await other.get(repo, orphan.id)).error == STOPPED
    with pytest.raises(ConflictError):
        await other.cancel(repo, orphan.id)
    fresh = await runner.create(repo)
    now[0] += timedelta(hours=24) - timedelta(seconds=1)
    assert await other.expire(repo) == 2
    with pytest.raises(NotFoundError):
        await other.get(repo, started.id)
    assert (await other.get(repo, fresh.id)).id == fresh.id
    with pytest.raises(BadInputError):
        await other.get(repo, "a/b")


async def test_import_stale_timeout_is_the_settings() -> None:
    """A reader judges a status stale with its core's ``import_stale_seconds`` (not lakeFS's fixed
    minute), and the refresh interval is the core's ``import_heartbeat_seconds``."""
    now = [datetime(2026, 1, 1, tzinfo=UTC)]
    kv = MemoryKVStore()
    settings = replace(fast_settings(), import_heartbeat_seconds=0.25, import_stale_seconds=5.0)
    statuses = ImportStatuses(Graveler(kv, StoreRegistry(), settings, clock=lambda: now[0]))
    repo = unique()
    await new_graveler(kv).create_repository(repo, mem_namespace())
    assert statuses.heartbeat_seconds == 0.25
    orphan = await statuses.create(repo)
    now[0] += timedelta(seconds=5)
    assert (await statuses.get(repo, orphan.id)).running  # not yet: stale only beyond 5 s
    now[0] += timedelta(milliseconds=1)
    assert (await statuses.get(repo, orphan.id)).error == STOPPED
    with pytest.raises(ConflictError):
        await statuses.cancel(repo, orphan.id)
