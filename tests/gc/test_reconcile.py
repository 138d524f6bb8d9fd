"""The hard-delete reconciler (lakefs_gc.reconcile) on real Gravelers (memory and SQLite KV, local
namespace): every fate of an uploaded address that issue 11 lists, through the real upload, commit,
reset and delete paths, deleted through the GC's batch deleter only when it is garbage."""

from __future__ import annotations

import os
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from lakefs_core.block.base import FailedKey
from lakefs_core.config import validate
from lakefs_core.errors import BadInputError, ConfigError, ReadOnlyError
from lakefs_core.format.records import ValueRecord, make_entry
from lakefs_core.kv import open_kv
from lakefs_core.kv.base import KVStore
from lakefs_core.refs import kvkeys
from lakefs_core.repos.graveler import Graveler, StorageNamespace
from lakefs_core.repos.journal import (
    DEFAULT_GRACE_SECONDS,
    DEFAULT_PENDING_TIMEOUT_SECONDS,
    MIN_PENDING_TIMEOUT_SECONDS,
    Intent,
)
from lakefs_core.repos.objects import Objects, UploadItem
from lakefs_core.repos.stores import StoreRegistry
from lakefs_core.service.deleter import BatchResult, KeyDeleter, store_deleter
from lakefs_gc.config import GCConfig
from lakefs_gc.reconcile import (
    ReconcileOptions,
    ReconcileReport,
    reconcile_deleted_repositories,
    reconcile_repository,
)
from tests.repos.support import Clock, HookedKV, fast_settings, unique

GRACE = DEFAULT_GRACE_SECONDS
PENDING = DEFAULT_PENDING_TIMEOUT_SECONDS


@dataclass
class World:
    g: Graveler
    objects: Objects
    repo: str
    clock: Clock
    root: Path  # the namespace's directory
    kv: HookedKV

    def exists(self, address: str) -> bool:
        return (self.root / address).exists()

    def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)

    async def deleter(self) -> KeyDeleter:
        return store_deleter(await self.g.namespace_store(StorageNamespace(f"local://{self.root}")))

    async def reconcile(self, deleter: KeyDeleter | None = None, **options: object) -> ReconcileReport:
        return await reconcile_repository(
            self.g,
            self.repo,
            deleter=deleter or await self.deleter(),
            options=ReconcileOptions(**options),  # type: ignore[arg-type]
        )

    async def upload(self, path: str, body: bytes = b"x", branch: str = "main") -> str:
        return (await self.objects.upload(self.repo, branch, path, body)).physical_address

    async def commit(self, branch: str = "main") -> str:
        return (await self.g.commit(self.repo, branch, committer="t", message="m")).id

    async def intents(self) -> list[Intent]:
        return [i async for i in (await self.g.journal(self.repo)).intents()]


@pytest.fixture(params=["memory", "sqlite"])
async def kv(request: pytest.FixtureRequest, sqlite_url: str) -> AsyncIterator[KVStore]:
    store = await open_kv("memory://" if request.param == "memory" else sqlite_url)
    try:
        yield store
    finally:
        await store.close()


async def make_world(kv: KVStore, local_root: Path) -> World:
    hooked, clock = HookedKV(kv), Clock()
    g = Graveler(hooked, StoreRegistry(), fast_settings(hard_delete_journal=True), clock=clock)
    repo = unique()
    root = local_root / repo
    await g.create_repository(repo, f"local://{root}")
    return World(g, Objects(g), repo, clock, root, hooked)


@pytest.fixture
async def world(kv: KVStore, local_root: Path) -> AsyncIterator[World]:
    w = await make_world(kv, local_root)
    try:
        yield w
    finally:
        await w.g.stores.close()


async def test_batch_uploads_are_reconciled_a_grace_after_their_batch_and_its_record_pruned(
    world: World,
) -> None:
    w = world
    stats = await w.objects.upload_many(w.repo, "main", [UploadItem(p, p.encode()) for p in "abc"])
    old = {s.path: s.physical_address for s in stats}
    await w.upload("a", b"2")  # overwrites a's batch address
    await w.commit()
    report = await w.reconcile()
    assert (report.candidates, report.waiting, report.settled_pruned) == (0, 4, 0)
    w.advance(GRACE)
    report = await w.reconcile()
    # three committed (b, c and the new a: retention GC's), the overwritten batch address deleted
    assert (report.candidates, report.deleted, report.committed, report.waiting) == (4, 1, 3, 0)
    assert not w.exists(old["a"]) and w.exists(old["b"])
    assert await w.intents() == []
    assert report.settled_pruned == 0  # its batch's record stays until the pending timeout
    w.advance(PENDING + 2 * 300)
    assert (await w.reconcile()).settled_pruned == 1
    repo = await w.g.repository(w.repo)
    left = [e async for e in w.kv.scan(repo.partition, kvkeys.GC_SETTLED_PREFIX)]
    assert [e for e in left if e.key.startswith(kvkeys.GC_SETTLED_PREFIX)] == []


async def test_overwrite_before_commit_deletes_only_the_old_address(world: World) -> None:
    w = world
    old = await w.upload("a", b"1")
    new = await w.upload("a", b"2")
    report = await w.reconcile()
    assert (report.candidates, report.deleted, report.waiting) == (0, 0, 2)  # inside the grace
    w.advance(GRACE)
    report = await w.reconcile()
    assert (report.candidates, report.deleted, report.staged, report.rescued) == (2, 1, 1, 0)
    assert not w.exists(old) and w.exists(new)
    assert [i.address for i in await w.intents()] == [new]  # settled; the staged one postponed
    assert report.oldest_undecided_age_seconds == GRACE


async def test_committed_object_is_never_deleted_and_its_intent_dropped(world: World) -> None:
    w = world
    address = await w.upload("a")
    await w.commit()
    w.advance(GRACE)
    report = await w.reconcile()
    assert (report.committed, report.deleted) == (1, 0)
    assert w.exists(address) and await w.intents() == []
    # Overwritten and committed again: still in the first commit, still not the journal's.
    newer = await w.upload("a", b"newer")
    await w.commit()
    w.advance(GRACE)
    report = await w.reconcile()
    assert (report.committed, report.deleted) == (1, 0) and w.exists(address) and w.exists(newer)


async def test_staged_object_is_never_deleted_and_rechecked_with_backoff(world: World) -> None:
    w = world
    address = await w.upload("a")
    w.advance(GRACE)
    assert (await w.reconcile(staged_backoff_seconds=100.0)).staged == 1
    [intent] = await w.intents()
    assert intent.checks == 1 and intent.next_check == w.clock().timestamp() + 100
    assert (await w.reconcile(staged_backoff_seconds=100.0)).candidates == 0  # postponed
    w.advance(100)
    assert (await w.reconcile(staged_backoff_seconds=100.0)).staged == 1
    [intent] = await w.intents()
    assert intent.checks == 2 and intent.next_check == w.clock().timestamp() + 200  # doubled
    assert w.exists(address)
    await w.objects.delete(w.repo, "main", "a")  # now garbage: deleted at the next check
    w.advance(200)
    assert (await w.reconcile(staged_backoff_seconds=100.0)).deleted == 1 and not w.exists(address)


async def test_delete_before_commit_is_deleted(world: World) -> None:
    w = world
    address = await w.upload("a")
    kept = await w.upload("b")
    await w.objects.delete(w.repo, "main", "a")
    await w.commit()
    w.advance(GRACE)
    report = await w.reconcile()
    assert (report.deleted, report.committed) == (1, 1)
    assert not w.exists(address) and w.exists(kept)


async def test_branch_reset_is_deleted(world: World) -> None:
    w = world
    committed = await w.upload("c")
    await w.commit()
    address = await w.upload("a")
    await w.g.reset_branch(w.repo, "main")
    w.advance(GRACE)
    report = await w.reconcile()
    assert (report.deleted, report.committed) == (1, 1)
    assert not w.exists(address) and w.exists(committed)


async def test_branch_delete_deletes_staged_but_not_committed(world: World) -> None:
    w = world
    await w.g.create_branch(w.repo, "dev", "main")
    committed = await w.upload("c", branch="dev")
    await w.commit("dev")
    staged = await w.upload("s", branch="dev")
    await w.g.create_tag(w.repo, "v1", "dev")
    await w.g.delete_branch(w.repo, "dev")
    w.advance(GRACE)
    report = await w.reconcile()
    assert (report.deleted, report.committed) == (1, 1)
    assert not w.exists(staged) and w.exists(committed)
    assert await w.objects.read_all(w.repo, "v1", "c") == b"x"


async def test_crash_between_put_and_stage_is_deleted_after_the_pending_timeout(world: World) -> None:
    w = world
    seen: list[str] = []

    def crash(op: str, partition: bytes, key: bytes) -> None:
        if op == "set_many_if" and seen:
            raise RuntimeError("crash after the PUT")  # in its settle-and-stage write
        if op == "set_if" and key.startswith(kvkeys.GC_INTENTS_PREFIX):
            seen.append(key[len(kvkeys.GC_INTENTS_PREFIX) :].decode())

    w.kv.before.append(crash)
    with pytest.raises(RuntimeError):
        await w.upload("a")
    w.kv.before.clear()
    [address] = seen
    assert w.exists(address)
    w.advance(GRACE)
    assert (await w.reconcile()).deleted == 0 and w.exists(address)  # the PUT may be in flight
    w.advance(PENDING)
    report = await w.reconcile()
    assert report.deleted == 1 and not w.exists(address) and await w.intents() == []


async def test_crash_between_intent_and_put_is_harmless(world: World) -> None:
    w = world

    def crash(op: str, partition: bytes, key: bytes) -> None:
        if op == "set_if" and key.startswith(kvkeys.GC_INTENTS_PREFIX):
            raise RuntimeError("crash before the PUT")

    w.kv.after.append(crash)  # the pending intent is written, then the process dies
    with pytest.raises(RuntimeError):
        await w.upload("a")
    w.kv.after.clear()
    [intent] = await w.intents()
    assert intent.state == "pending" and not w.exists(intent.address)
    w.advance(PENDING)
    report = await w.reconcile()
    assert (report.deleted, report.failed) == (1, 0) and await w.intents() == []


async def test_external_and_metadata_addresses_are_never_deleted(world: World) -> None:
    w = world
    outside = w.root.parent / f"{w.repo}-outside.bin"
    outside.write_bytes(b"theirs")
    journal = await w.g.journal(w.repo)
    for address in (
        f"local://{outside}",
        f"local://{w.root}/data/x/y",
        "_lakefs/dummy",
        "data/../_lakefs/dummy",
    ):
        await journal.record_intent(address, "main", b"k", w.clock())
    w.advance(PENDING)
    report = await w.reconcile()
    assert (report.refused, report.deleted) == (4, 0)
    assert outside.read_bytes() == b"theirs" and (w.root / "_lakefs" / "dummy").exists()
    assert await w.intents() == []  # handed to the listing-based retention GC


async def test_rescued_when_staged_between_decision_and_delete(world: World) -> None:
    w = world
    address = await w.upload("a")
    await w.objects.delete(w.repo, "main", "a")
    w.advance(GRACE)
    staged: list[bool] = []

    async def stage_after_claim(op: str, partition: bytes, key: bytes) -> None:
        if op == "set_if" and key == kvkeys.gc_intent_key(address) and not staged:
            staged.append(True)  # a writer stages the address again (forged: no API does this)
            identity, data = make_entry(address, 1, "e" * 32, last_modified=w.clock())
            await w.g.set_entry(w.repo, "main", ValueRecord(b"a", identity, data))

    w.kv.after.append(stage_after_claim)
    report = await w.reconcile()
    w.kv.after.clear()
    assert staged and (report.rescued, report.deleted, report.staged) == (1, 0, 1)
    assert w.exists(address)


class FailingDeleter:
    async def delete_keys(self, keys: list[str]) -> BatchResult:
        return BatchResult(failed=[FailedKey(k, "AccessDenied", False) for k in keys])


async def test_failed_delete_stays_journalled_and_is_retried(world: World) -> None:
    w = world
    address = await w.upload("a")
    await w.g.reset_branch(w.repo, "main")
    w.advance(GRACE)
    report = await w.reconcile(FailingDeleter())
    assert (report.failed, report.deleted) == (1, 0) and w.exists(address)
    [intent] = await w.intents()
    assert intent.state == "deleting"
    report = await w.reconcile()
    assert (report.candidates, report.deleted) == (1, 1) and not w.exists(address)


async def test_dry_run_changes_nothing(world: World) -> None:
    w = world
    address = await w.upload("a")
    await w.g.reset_branch(w.repo, "main")
    w.advance(GRACE)
    before = await w.intents()
    report = await reconcile_repository(w.g, w.repo, deleter=None)
    assert (report.deletable, report.deleted, report.dry_run) == (1, 0, True)
    report = await w.reconcile(dry_run=True)
    assert report.deletable == 1 and w.exists(address) and await w.intents() == before


async def test_read_only_repository_is_never_reconciled(world: World) -> None:
    w = world
    await w.g.set_read_only(w.repo, True)
    with pytest.raises(ReadOnlyError):
        await w.reconcile()


async def test_consumed_records_are_pruned_once_no_intent_needs_them(world: World) -> None:
    w = world
    await w.g.create_branch(w.repo, "dev", "main")
    staged = await w.upload("s", branch="dev")  # undecided for a while: it needs older records
    await w.upload("a")
    await w.commit()
    w.advance(3 * GRACE)
    journal = await w.g.journal(w.repo)
    report = await w.reconcile()
    assert (report.committed, report.staged, report.consumed_pruned) == (1, 1, 0)
    assert [c async for c in journal.consumed_since("main", 0)] != []
    await w.g.reset_branch(w.repo, "dev")
    w.advance(GRACE)
    report = await w.reconcile()
    assert (report.deleted, report.consumed_pruned) == (1, 1) and not w.exists(staged)
    assert [c async for c in journal.consumed_since("main", 0)] == []


async def test_interrupted_write_temp_files_are_swept(kv: KVStore, local_root: Path) -> None:
    repo_root = local_root / "pre"
    (repo_root / "data" / "s").mkdir(parents=True)
    leftover = repo_root / "data" / "s" / f".lakefs-tmp-{'a' * 32}"
    leftover.write_bytes(b"half")
    old = time.time() - 2 * 3600
    os.utime(leftover, (old, old))
    hooked, clock = HookedKV(kv), Clock()
    g = Graveler(hooked, StoreRegistry(), fast_settings(hard_delete_journal=True), clock=clock)
    try:
        await g.create_repository("pre", f"local://{repo_root}")
        w = World(g, Objects(g), "pre", clock, repo_root, hooked)
        report = await w.reconcile()
        assert report.temp_files_deleted == 1 and not leftover.exists()
    finally:
        await g.stores.close()


# -- deleted repositories ------------------------------------------------------------------------------


async def test_deleted_repository_data_is_purged_after_the_grace(world: World) -> None:
    w = world
    first = await w.upload("a")
    await w.commit()
    second = await w.upload("b")
    await w.g.delete_repository(w.repo)
    store = await w.g.namespace_store(StorageNamespace(f"local://{w.root}"))

    async def deleter_for(ns: StorageNamespace) -> KeyDeleter:
        return store_deleter(await w.g.namespace_store(ns))

    [report] = await reconcile_deleted_repositories(w.g, deleter_for=deleter_for)
    assert report.waiting == 1 and w.exists(first) and w.exists(second)
    w.advance(GRACE)
    [report] = await reconcile_deleted_repositories(w.g, deleter_for=None)  # dry run
    assert (report.deletable, report.deleted) == (2, 0) and w.exists(first)
    [report] = await reconcile_deleted_repositories(w.g, deleter_for=deleter_for)
    assert (report.repository, report.deleted, report.failed) == (w.repo, 2, 0)
    assert not w.exists(first) and not w.exists(second)
    assert [
        k async for k in store.list_keys(StorageNamespace(f"local://{w.root}").tables_prefix())
    ] != []  # metadata left alone
    assert [r async for r in w.g.deleted_repositories()] == []  # record dropped


async def test_deleted_repository_namespace_claimed_again_is_kept(world: World) -> None:
    w = world
    old = await w.upload("a")
    await w.g.delete_repository(w.repo)
    # the same namespace, live again (taken over explicitly: issue 38 refuses it silently)
    await w.g.create_repository(w.repo, f"local://{w.root}", reuse_namespace=True)
    new = await w.upload("b")
    w.advance(GRACE)

    async def deleter_for(ns: StorageNamespace) -> KeyDeleter:
        return store_deleter(await w.g.namespace_store(ns))

    [report] = await reconcile_deleted_repositories(w.g, deleter_for=deleter_for)
    assert (report.deleted, report.rescued) == (0, 1)
    assert w.exists(old) and w.exists(new)
    assert [r async for r in w.g.deleted_repositories()] == []  # kept with its new owner


async def test_deleted_repository_claimed_during_the_purge_stops_it(world: World) -> None:
    w = world
    for i in range(3):
        await w.upload(f"k{i}")
    await w.g.delete_repository(w.repo)
    w.advance(GRACE)
    other = Graveler(w.kv.inner, w.g.stores, w.g.settings, clock=w.clock)

    async def deleter_for(ns: StorageNamespace) -> KeyDeleter:
        # Right after the first check: another process creates a repository on the namespace.
        await other.create_repository(unique(), f"local://{w.root}", claim_namespace=False)
        return store_deleter(await w.g.namespace_store(ns))

    [report] = await reconcile_deleted_repositories(w.g, deleter_for=deleter_for)
    assert report.deleted == 0
    store = await w.g.namespace_store(StorageNamespace(f"local://{w.root}"))
    assert len([k async for k in store.list_keys(StorageNamespace(f"local://{w.root}").data_prefix())]) == 3
    assert [r.repo async for r in w.g.deleted_repositories()] == [w.repo]  # kept for a later pass


def test_options_refuse_a_pending_timeout_below_the_journal_minimum() -> None:
    """Uploads settle by compare-and-swap, so a short pending timeout deletes nothing staged, but it
    fails every upload slower than it: below the journal's minimum it is refused, naming both."""
    with pytest.raises(BadInputError, match=r"30 s is below .* minimum pending timeout of 3600 s") as e:
        ReconcileOptions(pending_timeout_seconds=30)
    assert e.value.field == "pending_timeout_seconds"  # type: ignore[attr-defined]
    assert ReconcileOptions(pending_timeout_seconds=MIN_PENDING_TIMEOUT_SECONDS, grace_seconds=0)


MINIMUM = "is below the hard-delete journal's minimum pending timeout of 3600 s"


@pytest.mark.parametrize(
    ("hard_delete", "message"),
    [
        ({"pending_timeout_seconds": 30}, f"30 s {MINIMUM}"),
        ({"pending_timeout_seconds": 3599.5}, f"3599.5 s {MINIMUM}"),
        ({"grace_seconds": "inf"}, "finite"),
        ({"pending_timeout_seconds": "inf"}, "finite"),
        ({"pending_timeout_seconds": "nan"}, "greater than or equal to 0"),
    ],
)
def test_the_daemon_configuration_refuses_an_unsound_reconciler(
    hard_delete: dict[str, object], message: str
) -> None:
    data = {
        "core": {"kv_url": "sqlite:////tmp/x.sqlite3"},
        "access_keys": [{"access_key_id": "a", "secret_access_key": "s"}],
        "hard_delete": hard_delete,
    }
    with pytest.raises(ConfigError) as e:
        validate(GCConfig, data, [])
    assert "hard_delete." in str(e.value) and message in str(e.value), str(e.value)


async def test_a_batch_that_never_staged_is_fenced_once_and_deleted(world: World) -> None:
    """A batch upload that died after its PUTs: past the pending timeout the reconciler claims its
    intents, deleting the batch's record once (the first claim fences the upload; the others know),
    and deletes every object."""
    w = world

    def crash(op: str, partition: bytes, key: bytes) -> None:
        if op == "set_many_if":
            raise RuntimeError("crash after the PUTs")

    w.kv.before.append(crash)
    with pytest.raises(RuntimeError):
        await w.objects.upload_many(w.repo, "main", [UploadItem(f"k{i}", b"x") for i in range(5)])
    w.kv.before.clear()
    addresses = [i.address for i in await w.intents()]
    assert len(addresses) == 5 and all(w.exists(a) for a in addresses)
    w.advance(PENDING)
    w.kv.ops.clear()
    report = await w.reconcile()
    assert (report.deleted, report.failed, report.rescued) == (5, 0, 0)
    assert not any(w.exists(a) for a in addresses) and await w.intents() == []
    fences = [k for op, _, k in w.kv.ops if op == "delete" and k.startswith(kvkeys.GC_SETTLED_PREFIX)]
    assert len(fences) == 1
