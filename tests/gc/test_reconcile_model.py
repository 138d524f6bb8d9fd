"""A model-based test of the hard-delete reconciler (hypothesis RuleBasedStateMachine).

A real Graveler over a memory KV and a memory namespace; rules upload (one object, or a batch
settled by one record), overwrite, delete, commit, reset, create and delete a branch, tag, delete
the repository (a new one takes over), inject the journal's crash points (between intent and PUT,
between PUT and the settle-and-stage write, a stored intent or a settled batch record with nothing
staged (no upload leaves these: forged), between seal and the consumption record, between that
record and the publishing CAS), stall a single or a batch upload past the pending timeout while the
reconciler runs (its staging write then fails, staging nothing, or, when no claim came first,
stages with its objects present), move the clock and reconcile.

Invariants:

- after every step, nothing staged (any value in any token of any branch) or committed (any entry of
  any commit reachable from a branch head or a tag) is missing from the store, and nothing of a
  deleted repository was purged before its grace period;
- ``settle``: with the clock moved past the pending timeout and the grace, ONE reconciliation leaves no
  garbage of the journal's kinds: every uploaded address that is neither live nor in any commit
  record ever written is gone, and so is every ``data/`` object of a deleted repository; no batch
  settle record outlives the pending timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import Coroutine
from typing import Any, TypeVar

import hypothesis.strategies as st
from hypothesis import HealthCheck, settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from lakefs_core.errors import ConflictError, CorruptDataError, NoChangesError, NotFoundError
from lakefs_core.format.records import ValueRecord, decode_entry
from lakefs_core.kv.memory import MemoryKVStore
from lakefs_core.refs import kvkeys
from lakefs_core.repos.graveler import Graveler, StorageNamespace
from lakefs_core.repos.journal import Intent, new_batch_id
from lakefs_core.repos.objects import Objects, UploadItem, new_entry
from lakefs_core.repos.staging_writes import Settle
from lakefs_core.repos.stores import StoreRegistry
from lakefs_core.service.deleter import BatchResult, KeyDeleter, store_deleter
from lakefs_gc.reconcile import ReconcileOptions, reconcile_deleted_repositories, reconcile_repository
from tests.repos.support import Clock, HookedKV, fast_settings, unique
from tests.support.profiles import examples

T = TypeVar("T")
GRACE = 3600.0
PENDING = 4 * 3600.0
OPTIONS = ReconcileOptions(grace_seconds=GRACE, pending_timeout_seconds=PENDING, staged_backoff_seconds=300)
KEYS = st.sampled_from(["a", "b", "c"])
BRANCHES = st.sampled_from(["main", "dev"])
_ids = itertools.count()


class Crash(Exception):
    """An injected crash of the writer."""


Deleted = dict[tuple[str, str], float]  # (store uri, key) -> when a purge deleted it, or -1


class RecordingDeleter:
    """The GC's batch deleter, remembering what it deleted."""

    def __init__(
        self, ns: StorageNamespace, inner: KeyDeleter, deleted: Deleted, clock: Clock | None
    ) -> None:
        self.ns, self.inner, self.deleted, self.clock = ns, inner, deleted, clock

    async def delete_keys(self, keys: list[str]) -> BatchResult:
        out = await self.inner.delete_keys(keys)
        at = -1.0 if self.clock is None else self.clock().timestamp()  # -1: not a purge
        self.deleted.update({(self.ns.store_uri, key): at for key in out.deleted})
        return out


class ReconcileMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.kv = HookedKV(MemoryKVStore())
        self.clock = Clock()
        self.g = Graveler(self.kv, StoreRegistry(), fast_settings(hard_delete_journal=True), clock=self.clock)
        self.objects = Objects(self.g)
        self.uploaded: set[str] = set()  # addresses of the current repository, every upload attempt
        self.deleted_keys: Deleted = {}
        self.dead: list[tuple[StorageNamespace, float]] = []  # deleted repositories' namespaces
        self.branches = {"main"}
        # (repository, commit id) -> the addresses the commit holds: a commit never changes, and the
        # invariant walks every reachable commit after every step
        self.commit_addresses: dict[tuple[str, str], frozenset[str]] = {}
        self.new_repo()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self.loop.run_until_complete(coro)

    def new_repo(self) -> None:
        self.repo = unique()
        self.ns = StorageNamespace(f"mem://model{next(_ids)}x{self.repo}/repo")
        self.run(self.g.create_repository(self.repo, self.ns.uri))
        self.store = self.run(self.g.namespace_store(self.ns))
        self.uploaded = set()
        self.branches = {"main"}

    def teardown(self) -> None:
        self.run(self.g.stores.close())
        self.loop.close()

    # -- writers -----------------------------------------------------------------------------------

    @rule(branch=BRANCHES, key=KEYS)
    def upload(self, branch: str, key: str) -> None:
        if branch not in self.branches:
            return
        stat = self.run(self.objects.upload(self.repo, branch, key, f"{key}{next(_ids)}".encode()))
        self.uploaded.add(stat.physical_address)

    @rule(branch=BRANCHES, key=KEYS, crash=st.sampled_from(["before-put", "after-put", "before-stage"]))
    def crashed_upload(self, branch: str, key: str, crash: str) -> None:
        """Objects.upload's steps, stopped at a crash point."""
        if branch not in self.branches:
            return
        self.run(self._crashed_upload(branch, key, crash))

    async def _crashed_upload(self, branch: str, key: str, crash: str) -> None:
        journal = await self.g.journal(self.repo)
        relative = self.objects.slices.new_relative_address()
        self.uploaded.add(relative)
        intent = await journal.record_intent(relative, branch, key.encode(), self.clock())
        if crash == "before-put":
            return
        info = await self.store.put(self.ns.key(relative), b"body", if_none_match=True)
        if crash == "after-put":
            return
        await journal.mark_stored(intent, self.clock())
        del info  # crash before staging: the entry is never written

    @rule(branch=BRANCHES, keys=st.lists(KEYS, min_size=1, max_size=3, unique=True))
    def upload_batch(self, branch: str, keys: list[str]) -> None:
        if branch not in self.branches:
            return
        items = [UploadItem(key, f"{key}{next(_ids)}".encode()) for key in keys]
        stats = self.run(self.objects.upload_many(self.repo, branch, items))
        self.uploaded |= {stat.physical_address for stat in stats}

    @rule(
        branch=BRANCHES,
        keys=st.lists(KEYS, min_size=1, max_size=3, unique=True),
        crash=st.sampled_from(["before-put", "after-put", "after-settle"]),
    )
    def crashed_batch_upload(self, branch: str, keys: list[str], crash: str) -> None:
        """Objects.upload_many's steps, stopped at a crash point; ``after-settle`` is a settle record
        stored with none of the entries (no driver does that any more: forged)."""
        if branch not in self.branches:
            return
        self.run(self._crashed_batch_upload(branch, keys, crash))

    async def _batch_intents(self, branch: str, keys: list[str]) -> list[Intent]:
        journal = await self.g.journal(self.repo)
        relatives = self.objects.slices.new_relative_addresses(len(keys))
        self.uploaded |= set(relatives)
        batch, now = new_batch_id(), self.clock().timestamp()
        return await journal.record_intents(
            [Intent(a, branch, k.encode(), now, batch=batch) for a, k in zip(relatives, keys, strict=True)]
        )

    async def _crashed_batch_upload(self, branch: str, keys: list[str], crash: str) -> None:
        journal = await self.g.journal(self.repo)
        intents = await self._batch_intents(branch, keys)
        if crash == "before-put":
            return
        for intent in intents:
            await self.store.put(self.ns.key(intent.address), b"body", if_none_match=True)
        if crash == "after-put":
            return
        settle = journal.settle_batch(intents, self.clock(), "forged")  # settled, no entries staged
        await self.kv.set(settle.partition, settle.key, settle.value)

    @rule(branch=BRANCHES, keys=st.lists(KEYS, min_size=1, max_size=3, unique=True), late=st.booleans())
    def stalled_batch_upload(self, branch: str, keys: list[str], late: bool) -> None:
        """A batch upload stalled after its PUTs while the reconciler runs, past the pending timeout
        (``late``) or not: its settle-and-stage write must not stage an address the reconciler
        claimed (it fails, staging nothing), and stages all of them otherwise."""
        if branch not in self.branches:
            return
        journal = self.run(self.g.journal(self.repo))
        intents = self.run(self._batch_intents(branch, keys))
        records = []
        for intent in intents:
            info = self.run(self.store.put(self.ns.key(intent.address), b"body", if_none_match=True))
            records.append(new_entry(intent.key, intent.address, info, None, self.clock())[0])
        self.clock.advance(PENDING + GRACE if late else GRACE)
        self.reconcile()
        self._stage_late(branch, records, journal.settle_batch(intents, self.clock(), "stalled batch"))

    @rule(branch=BRANCHES, key=KEYS, late=st.booleans())
    def stalled_upload(self, branch: str, key: str, late: bool) -> None:
        """Objects.upload stalled between its PUT and its settle-and-stage write while the reconciler
        runs (past the pending timeout, or only past the grace)."""
        if branch not in self.branches:
            return
        journal = self.run(self.g.journal(self.repo))
        relative = self.objects.slices.new_relative_address()
        self.uploaded.add(relative)
        intent = self.run(journal.record_intent(relative, branch, key.encode(), self.clock()))
        info = self.run(self.store.put(self.ns.key(relative), b"body", if_none_match=True))
        record = new_entry(intent.key, relative, info, None, self.clock())[0]
        self.clock.advance(PENDING + GRACE if late else GRACE)
        self.reconcile()
        self._stage_late(branch, [record], journal.settle_single(intent, self.clock(), "stalled"))

    def _stage_late(self, branch: str, records: list[ValueRecord], settle: Settle) -> None:
        try:
            self.run(self.g.set_entries(self.repo, branch, records, settle=settle))
        except ConflictError:
            return  # claimed first: the upload fails, nothing staged (the invariant checks it)
        except NotFoundError:
            return  # the branch was deleted meanwhile
        for record in records:  # staged: each object is there (nothing_live_deleted checks it too)
            address = decode_entry(record.data).address
            assert self.run(self.store.exists(self.ns.key(address))), f"staged {address} without its object"

    @rule(branch=BRANCHES, key=KEYS)
    def delete(self, branch: str, key: str) -> None:
        if branch in self.branches:
            with contextlib.suppress(NotFoundError):
                self.run(self.objects.delete(self.repo, branch, key))

    @rule(branch=BRANCHES, crash=st.sampled_from(["none", "none", "before-consumed", "before-publish"]))
    def commit(self, branch: str, crash: str) -> None:
        if branch not in self.branches:
            return
        repo = self.run(self.g.repository(self.repo))

        def hook(op: str, partition: bytes, key: bytes) -> None:
            if crash == "before-consumed" and key.startswith(kvkeys.GC_CONSUMED_PREFIX):
                raise Crash
            publish = partition == repo.partition and key == kvkeys.branch_key(branch)
            if crash == "before-publish" and publish and self.consumed_since(mark):
                raise Crash

        mark = len(self.kv.ops)
        self.kv.before.append(hook)
        try:
            self.run(self.g.commit(self.repo, branch, committer="m", message="m"))
        except (NoChangesError, Crash):
            pass
        finally:
            self.kv.before.clear()

    def consumed_since(self, mark: int) -> bool:
        return any(k.startswith(kvkeys.GC_CONSUMED_PREFIX) for _, _, k in self.kv.ops[mark:])

    @rule(branch=BRANCHES)
    def reset(self, branch: str) -> None:
        if branch in self.branches:
            self.run(self.g.reset_branch(self.repo, branch))

    @precondition(lambda self: "dev" not in self.branches)
    @rule()
    def create_dev(self) -> None:
        self.run(self.g.create_branch(self.repo, "dev", "main"))
        self.branches.add("dev")

    @precondition(lambda self: "dev" in self.branches)
    @rule(tag=st.booleans())
    def delete_dev(self, tag: bool) -> None:
        if tag:  # keep its head reachable through a tag
            self.run(self.g.create_tag(self.repo, f"t{next(_ids)}", "dev"))
        self.run(self.g.delete_branch(self.repo, "dev"))
        self.branches.discard("dev")

    @rule(key=KEYS)
    def forge_external(self, key: str) -> None:
        """An intent naming an external (full) address or metadata: never deleted."""
        journal = self.run(self.g.journal(self.repo))
        address = f"{self.ns.uri}/_lakefs/dummy" if key == "a" else "_lakefs/dummy"
        if key == "c":
            address = f"mem://elsewhere{next(_ids)}/x/data/s/{next(_ids)}"
        with contextlib.suppress(CorruptDataError):  # journalled already (a repeated forgery)
            self.run(journal.record_intent(address, "main", key.encode(), self.clock()))

    @rule()
    def delete_repository(self) -> None:
        self.run(self.g.delete_repository(self.repo))
        self.dead.append((self.ns, self.clock().timestamp()))
        self.new_repo()

    # -- time and the reconciler -------------------------------------------------------------------

    @rule(seconds=st.sampled_from([60.0, 600.0, GRACE, PENDING]))
    def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)

    @rule()
    def reconcile(self) -> None:
        self.run(self._reconcile())

    async def _reconcile(self) -> None:
        deleter = RecordingDeleter(self.ns, store_deleter(self.store), self.deleted_keys, None)
        await reconcile_repository(self.g, self.repo, deleter=deleter, options=OPTIONS)

        async def deleter_for(ns: StorageNamespace) -> KeyDeleter:
            store = await self.g.namespace_store(ns)
            return RecordingDeleter(ns, store_deleter(store), self.deleted_keys, self.clock)

        await reconcile_deleted_repositories(self.g, deleter_for=deleter_for, options=OPTIONS)

    @rule()
    def settle(self) -> None:
        self.clock.advance(PENDING + GRACE + OPTIONS.staged_backoff_cap_seconds)
        self.reconcile()
        live = self.run(self._live())
        in_commits = self.run(self._in_any_commit())
        for address in self.uploaded - live - in_commits:
            assert not self.run(self.store.exists(self.ns.key(address))), f"garbage {address} left"
        for ns, _ in self.dead:
            store = self.run(self.g.namespace_store(ns))
            left = self.run(_keys(store, ns.data_prefix()))
            assert left == [], f"deleted repository's data left: {left}"
        repo = self.run(self.g.repository(self.repo))
        settles = self.run(_kv_keys(self.kv, repo.partition, kvkeys.GC_SETTLED_PREFIX))
        assert settles == [], f"settle records outlived the pending timeout: {settles}"

    # -- the oracle --------------------------------------------------------------------------------

    async def _addresses(self, records: Any) -> set[str]:
        out: set[str] = set()
        async for record in records:
            if isinstance(record, ValueRecord) and not record.is_tombstone:
                entry = decode_entry(record.data)
                relative = self.ns.relative_of(entry.address, entry.address_type)
                if relative is not None:
                    out.add(relative)
        return out

    async def _commit_addresses(self, commit_id: str) -> frozenset[str]:
        key = (self.repo, commit_id)
        if key not in self.commit_addresses:
            repo = await self.g.repository(self.repo)
            commit = await self.g.get_commit_by_id(self.repo, commit_id)
            metarange = await self.g.metarange(repo, commit.metarange_id)
            self.commit_addresses[key] = frozenset(await self._addresses(metarange.seek_ge(b"")))
        return self.commit_addresses[key]

    async def _live(self) -> set[str]:
        """Staged in any token of any branch, or in any commit reachable from a head or a tag."""
        repo = await self.g.repository(self.repo)
        live: set[str] = set()
        heads: list[str] = []
        async for branch in self.g.list_branches(self.repo):
            heads.append(branch.commit_id)
            for token in (branch.staging_token, *branch.sealed_tokens):
                live |= await self._addresses(self.g.staging.scan(token))
        heads += [tag.commit_id async for tag in self.g.list_tags(self.repo)]
        seen: set[str] = set()
        while heads:
            cid = heads.pop()
            if cid in seen:
                continue
            seen.add(cid)
            commit = await self.g.refs.get_commit(repo, cid)
            heads.extend(commit.parents)
            live |= await self._commit_addresses(cid)
        return live

    async def _in_any_commit(self) -> set[str]:
        out: set[str] = set()
        async for node in self.g.commit_nodes(self.repo):
            out |= await self._commit_addresses(node.id)
        return out

    @invariant()
    def nothing_live_deleted(self) -> None:
        live = self.run(self._live())
        for address in live:
            assert (self.ns.store_uri, self.ns.key(address)) not in self.deleted_keys, address
            assert self.run(self.store.exists(self.ns.key(address))), f"live {address} missing"
        for ns, when in self.dead:  # purged only after the grace period
            early = [k for k, t in self.deleted_keys.items() if when <= t < when + GRACE]
            assert not [k for s, k in early if s == ns.store_uri and k.startswith(ns.data_prefix())]
        assert self.run(self.store.exists(self.ns.dummy_key()))


async def _keys(store: Any, prefix: str) -> list[str]:
    return [k.key async for k in store.list_keys(prefix)]


async def _kv_keys(kv: Any, partition: bytes, prefix: bytes) -> list[bytes]:
    return [e.key async for e in kv.scan(partition, prefix) if e.key.startswith(prefix)]


ReconcileMachine.TestCase.settings = settings(
    max_examples=examples(3),
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestReconcileModel = ReconcileMachine.TestCase
