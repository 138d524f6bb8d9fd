"""Model-based GC safety test: a hypothesis state machine drives the real core (memory KV, local
namespace, injectable clock, the hard-delete journal on in half the examples) and the real mark /
re-verify / sweep (lite executor) and hard-delete reconciler, and checks the results against the
independent oracle of :mod:`tests.gc.model_support`.

Rules: uploads and deletes (staged), commits, merges, reverts, branch resets (soft, and hard to an
older commit), branch create/delete, tag create/delete, pins (an in-test :class:`PinSource`), GC
rules, clock moves, mark and full GC runs (``min_age`` of an hour, or 0), re-verify, sweep, a sweep
crashed at a fault point then resumed with the same mark id, reconciler passes, and slow uploaders:
an upload (single or batch) held between its PUTs and its staging write (a hook of the model's KV
connection) while any of the other rules run (the clock moving past the grace and the pending
timeout, reconciler passes, GC runs), then let go.

Invariants:

- after every step, every object the oracle calls live (objects of the active commits, of every
  branch's head and staging area) is still stored (I1), and every object ever deleted was in some
  mark's deleted set or deleted by the reconciler;
- every mark's deleted set equals the oracle's garbage at the mark's ``now``: stored objects outside
  ``_lakefs/``, not ``dummy``, older than ``now - min_age``, not live and not journalled (an address
  whose intent the journal still holds is never marked, whatever ``min_age``: a slow upload's
  object before its staging write is one);
- a slow upload, let go, either staged every entry with its object present, or failed
  (``ConflictError``: the reconciler claimed it first) with none of its entries staged;
- re-verification reports as live again every marked object the oracle calls live now;
- a complete sweep deletes exactly its mark's set minus what re-verification rescued.

Refs only ever move to *intact* commits (every object still stored): moving a ref to a commit GC
already expired and swept is data loss by design, not a GC bug. Objects get the model clock as their
mtime, so ``min_age`` is exercised too.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import shutil
import tempfile
from collections.abc import Coroutine
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from lakefs_core.block.base import BlockStore
from lakefs_core.block.local import LocalBlockStore
from lakefs_core.compute.executor import LiteExecutor
from lakefs_core.errors import (
    BadInputError,
    ConflictError,
    InjectedFaultError,
    NoChangesError,
    NotFoundError,
)
from lakefs_core.kv.memory import MemoryKVStore
from lakefs_core.refs import kvkeys
from lakefs_core.repos.graveler import Graveler, GravelerSettings, StorageNamespace, StoreRegistry
from lakefs_core.repos.objects import Objects, UploadItem
from lakefs_core.service.deleter import BatchResult, KeyDeleter, store_deleter
from lakefs_gc.faults import ENV
from lakefs_gc.mark.mark import MarkOptions, run_mark
from lakefs_gc.reconcile import ReconcileOptions, reconcile_repository
from lakefs_gc.rules import GCRules, save_rules, widest_rules
from lakefs_gc.runs.layout import RunLayout
from lakefs_gc.runs.parts import list_parts, read_lines
from lakefs_gc.sweep.reverify import Reverifier
from lakefs_gc.sweep.sweep import SweepOptions, SweepReport, load_mark, run_sweep
from tests.gc.mark_support import set_mtime, stored_objects
from tests.gc.model_support import Listings, Node, oracle_active
from tests.repos.support import HookedKV
from tests.support.profiles import examples

T = TypeVar("T")
RulesAt = tuple[GCRules | None, datetime]  # rules and the clock they are applied at
REPO = "repo1"
MIN_AGE = timedelta(hours=1)
MIN_AGES = (MIN_AGE, timedelta(0))
GRACE = 3600.0  # the reconciler's grace and pending timeout (their defaults)
PENDING = 86400.0
PATHS = ("a", "b", "c", "d/e")
BRANCH_NAMES = ("b1", "b2", "b3")
TAG_NAMES = ("t1", "t2")
# Spill and work files on tmpfs when there is one (the disk is shared with other jobs).
SCRATCH = Path("/dev/shm") if os.access("/dev/shm", os.W_OK) else None
CONFLICTS = (ConflictError, NotFoundError, BadInputError)  # refused operations (a user's mistake)


class ModelClock:
    """The Graveler's clock; starts an hour ahead of real time so every data slice id (real hours)
    is older than every mtime the model gives an object."""

    def __init__(self) -> None:
        self.now = (datetime.now(UTC) + timedelta(hours=1)).replace(microsecond=0)

    def __call__(self) -> datetime:
        return self.now


class NoSyncStores(StoreRegistry):
    """Local stores without fsync: the model writes thousands of small files on a disk shared with
    other jobs, where an fsync can stall for minutes. Durability is not what this test checks."""

    async def block_store(self, store_uri: str) -> BlockStore:
        if store_uri.startswith("local://") and store_uri not in self._stores:
            self._stores[store_uri] = LocalBlockStore(Path(store_uri.removeprefix("local://")), fsync=False)
        return await super().block_store(store_uri)


class FakePins:
    """The :class:`lakefs_gc.pins.PinSource` seam: a mutable set of pinned commit ids."""

    def __init__(self) -> None:
        self.pins: set[str] = set()

    async def pinned_commits(self, repo_id: str) -> set[str]:
        return set(self.pins)


async def marked_set(g: Graveler, ns: StorageNamespace, run_id: str) -> set[str]:
    store = await g.namespace_store(ns)
    out: set[str] = set()
    for key in await list_parts(store, RunLayout(ns, run_id).deleted_text):
        async for lines in read_lines(store, key):
            out.update(lines)
    return out


def sweep_options(**kw: Any) -> SweepOptions:
    """Sweep options whose checkpoints and re-verifications are counted in batches only. The
    sweep's wall-clock triggers (a checkpoint every 10 s, a re-verification every 10 min) made an
    example's outcome depend on the machine's speed: on a loaded machine a crashed sweep had
    checkpointed one batch further, its resumed sweep then completed where a fast run's crashed
    again, so the set of pending marks (a rule precondition) differed between hypothesis's runs
    of one example: ``FlakyStrategyDefinition: Inconsistent data generation!``."""
    return SweepOptions(
        workdir=SCRATCH, checkpoint_every_seconds=math.inf, reverify_every_seconds=math.inf, **kw
    )


def pick(items: list[T] | tuple[T, ...], i: int) -> T:
    return items[i % len(items)]


@dataclass
class SlowUpload:
    """An upload held right before its staging write (its PUTs done, its intents pending)."""

    branch: str
    paths: list[str]
    release: asyncio.Event = field(default_factory=asyncio.Event)
    held: asyncio.Event = field(default_factory=asyncio.Event)
    addresses: list[str] = field(default_factory=list)
    task: asyncio.Future[object] | None = None


class RecordingDeleter:
    """The reconciler's deleter, remembering the addresses it deleted."""

    def __init__(self, inner: KeyDeleter, ns: StorageNamespace, deleted: set[str]) -> None:
        self.inner, self.prefix, self.deleted = inner, f"{ns.prefix}/" if ns.prefix else "", deleted

    async def delete_keys(self, keys: list[str]) -> BatchResult:
        out = await self.inner.delete_keys(keys)
        self.deleted.update(key[len(self.prefix) :] for key in out.deleted)
        return out


class GCModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.root = Path(tempfile.mkdtemp(prefix="gc-model-"))
        self.clock = ModelClock()
        self.kv = HookedKV(MemoryKVStore())
        self.kv.before.append(self._hold_staging)
        settings = GravelerSettings(hard_delete_journal=True)
        self.g = Graveler(self.kv, NoSyncStores(), settings, clock=self.clock)
        self.objects = Objects(self.g)
        self.ns = StorageNamespace(f"local://{self.root / 'ns'}")
        self.listings = Listings(self.g, REPO, self.ns)
        self.pins = FakePins()
        self.gc_rules: GCRules | None = GCRules.of(2)
        self.nodes: dict[str, Node] = {}
        self.pending: list[str] = []  # successful marks not yet completely swept
        self.mark_rules: dict[str, RulesAt] = {}  # each mark's rules and now
        self.ever_marked: set[str] = set()
        self.gone: set[str] = set()  # objects the model saw deleted
        self.known: set[str] = set()  # objects the model saw stored
        self.dead: set[str] = set()  # commits that lost objects while expired (by design)
        self.reconciled: set[str] = set()  # objects the reconciler deleted
        self.slow: list[SlowUpload] = []  # uploads held before their staging write
        self.holding: SlowUpload | None = None  # the upload whose staging write is held next
        self.journal_on = True
        self.stats = {"marked": 0, "rescued": 0, "deleted": 0, "crashed": 0, "revived": 0}
        self.stats.update({"slow_won": 0, "slow_lost": 0, "reconciled": 0, "journalled_kept": 0})
        self.run(self._setup())

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self.loop.run_until_complete(coro)

    def teardown(self) -> None:
        if os.environ.get("GC_MODEL_STATS"):
            with open(os.environ["GC_MODEL_STATS"], "a") as f:
                f.write(f"{self.stats}\n")
        try:
            self.run(self._end_slow_uploads())
            self.run(self.g.stores.close())
        finally:
            self.loop.close()
            shutil.rmtree(self.root, ignore_errors=True)

    async def _end_slow_uploads(self) -> None:
        """Let every held upload end (a task left pending would outlive the loop)."""
        for slow in self.slow:
            slow.release.set()
            if slow.task is not None:
                await asyncio.wait([slow.task])

    async def _setup(self) -> None:
        await self.g.create_repository(REPO, self.ns.uri)
        await self._save_rules()
        await self._learn((await self.g.get_commit(REPO, "main")).id)

    async def _save_rules(self) -> None:
        assert self.gc_rules is not None
        await save_rules(await self.g.namespace_store(self.ns), self.ns, self.gc_rules)

    async def _learn(self, commit_id: str) -> None:
        c = await self.g.get_commit_by_id(REPO, commit_id)
        parent = (c.parents[0] if c.version >= 1 else c.parents[-1]) if c.parents else None
        self.nodes[c.id] = Node(c.id, c.creation_date, parent)

    # -- the model's view ------------------------------------------------------------------------

    async def branches(self) -> dict[str, str]:
        return {b.id: b.commit_id async for b in self.g.list_branches(REPO)}

    async def tags(self) -> dict[str, str]:
        return {t.id: t.commit_id async for t in self.g.list_tags(REPO)}

    async def stored(self) -> dict[str, datetime]:
        return await stored_objects(await self.g.namespace_store(self.ns), self.ns)

    async def active(self, at: RulesAt | None = None) -> tuple[set[str], dict[str, str]]:
        """The active commits under the current rules and clock, or ``at`` (rules, now)."""
        rules, now = at if at is not None else (self.gc_rules, self.clock.now)
        branches = await self.branches()
        active = oracle_active(
            self.nodes,
            branches=branches,
            tags=(await self.tags()).values(),
            pins=self.pins.pins,
            rules=rules,
            now=now,
        )
        return active, branches

    async def live(self, *, safe: bool = False, at: RulesAt | None = None) -> set[str]:
        """What GC must keep; ``safe``: without the commits that lost objects while expired (a
        longer retention set later cannot bring their objects back: not a GC fault)."""
        active, branches = await self.active(at)
        return await self.listings.live(active - self.dead if safe else active, branches)

    async def intact(self) -> list[str]:
        """Known commits whose objects are all still stored, in creation order (commit ids hash
        real timestamps: sorting by id would make a replayed example pick other commits)."""
        stored = set(await self.stored())
        return [cid for cid in self.nodes if await self.listings.commit(cid) <= stored]

    async def branch_names(self) -> list[str]:
        return sorted(await self.branches())

    async def journalled(self) -> set[str]:
        """Addresses with an intent in the journal (read from the KV keys, not through lakefs_gc)."""
        partition = (await self.g.repository(REPO)).partition
        prefix = kvkeys.GC_INTENTS_PREFIX
        found = [e.key async for e in self.kv.inner.scan(partition, prefix)]
        return {k[len(prefix) :].decode() for k in found if k.startswith(prefix)}

    # -- data and history ------------------------------------------------------------------------

    @initialize(
        steps=st.lists(
            st.tuples(st.sampled_from(PATHS), st.sampled_from((1, 12, 30, 60)), st.booleans()),
            min_size=2,
            max_size=6,
        ),
        journal=st.booleans(),
    )
    def history(self, steps: list[tuple[str, int, bool]], journal: bool) -> None:
        """A history to start from: commits on main hours or days apart, overwriting paths, some
        with a side branch committed then deleted (a dangling leaf). The hard-delete journal is on
        in half the examples (slow uploads need it: without it, ``min_age`` is their only guard)."""

        async def go() -> None:
            self.journal_on = journal
            if not journal:
                await self.g.set_hard_delete_journal(REPO, False)
            for i, (path, hours, side) in enumerate(steps):
                await self._put("main", path, f"h{i}")
                await self._learn((await self.g.commit(REPO, "main", committer="m", message="h")).id)
                if side:
                    await self.g.create_branch(REPO, "side", "main")
                    await self._put("side", path, f"s{i}")
                    await self._learn((await self.g.commit(REPO, "side", committer="m", message="s")).id)
                    await self.g.delete_branch(REPO, "side")
                self.clock.now += timedelta(hours=hours)

        self.run(go())

    async def _put(self, branch: str, path: str, tag: str) -> None:
        body = f"{branch}/{path}@{self.clock.now}#{tag}".encode()
        stat = await self.objects.upload(REPO, branch, path, body)
        set_mtime(str(self.root / "ns"), stat.physical_address, self.clock.now)

    @rule(b=st.integers(0, 9), p=st.sampled_from(PATHS), n=st.integers(1, 3), then_commit=st.booleans())
    def upload(self, b: int, p: str, n: int, then_commit: bool) -> None:
        """Upload ``n`` objects (overwriting: staged garbage), then maybe commit them."""

        async def go() -> None:
            branch = pick(await self.branch_names(), b)
            for i in range(n):
                await self._put(branch, pick(PATHS, PATHS.index(p) + i), str(i))
            if then_commit:
                with contextlib.suppress(NoChangesError):  # the same bytes again: no effective change
                    await self._learn((await self.g.commit(REPO, branch, committer="m", message="u")).id)

        self.run(go())

    @rule(b=st.integers(0, 9), p=st.sampled_from(PATHS))
    def delete_path(self, b: int, p: str) -> None:
        async def go() -> None:
            with contextlib.suppress(*CONFLICTS):
                await self.objects.delete(REPO, pick(await self.branch_names(), b), p)

        self.run(go())

    @rule(b=st.integers(0, 9))
    def commit(self, b: int) -> None:
        async def go() -> None:
            branch = pick(await self.branch_names(), b)
            c = await self.g.commit(REPO, branch, committer="m", message="c", allow_empty=True)
            await self._learn(c.id)

        self.run(go())

    @rule(src=st.integers(0, 9), dst=st.integers(0, 9))
    def merge(self, src: int, dst: int) -> None:
        async def go() -> None:
            names = await self.branch_names()
            with contextlib.suppress(*CONFLICTS):
                c = await self.g.merge(REPO, pick(names, src), pick(names, dst), committer="m")
                await self._learn(c.id)

        self.run(go())

    @rule(b=st.integers(0, 9), back=st.integers(0, 5))
    def revert(self, b: int, back: int) -> None:
        """Revert the ``back``-th first-parent ancestor of a head whose parent is intact."""

        async def go() -> None:
            branch = pick(await self.branch_names(), b)
            x: Node | None = self.nodes[(await self.branches())[branch]]
            for _ in range(back):
                if x is None or x.main_parent is None:
                    return
                x = self.nodes[x.main_parent]
            if x is None or x.main_parent is None or x.main_parent not in await self.intact():
                return
            with contextlib.suppress(*CONFLICTS):
                c = await self.g.revert(REPO, branch, x.id, committer="m")
                await self._learn(c.id)

        self.run(go())

    @rule(b=st.integers(0, 9), hard=st.booleans(), to=st.integers(0, 99))
    def reset(self, b: int, hard: bool, to: int) -> None:
        async def go() -> None:
            branch = pick(await self.branch_names(), b)
            dest = pick(await self.intact(), to) if hard else None
            await self.g.reset_branch(REPO, branch, dest)

        self.run(go())

    @rule(name=st.sampled_from(BRANCH_NAMES), to=st.integers(0, 99))
    def create_branch(self, name: str, to: int) -> None:
        async def go() -> None:
            with contextlib.suppress(ConflictError):
                await self.g.create_branch(REPO, name, pick(await self.intact(), to))

        self.run(go())

    @rule(name=st.sampled_from(BRANCH_NAMES))
    def delete_branch(self, name: str) -> None:
        async def go() -> None:
            with contextlib.suppress(NotFoundError):
                await self.g.delete_branch(REPO, name)

        self.run(go())

    @rule(name=st.sampled_from(TAG_NAMES), to=st.integers(0, 99))
    def create_tag(self, name: str, to: int) -> None:
        async def go() -> None:
            with contextlib.suppress(ConflictError):
                await self.g.create_tag(REPO, name, pick(await self.intact(), to))

        self.run(go())

    @rule(name=st.sampled_from(TAG_NAMES))
    def delete_tag(self, name: str) -> None:
        async def go() -> None:
            with contextlib.suppress(NotFoundError):
                await self.g.delete_tag(REPO, name)

        self.run(go())

    @rule(to=st.integers(0, 99), add=st.booleans())
    def pin(self, to: int, add: bool) -> None:
        if add:
            self.pins.pins.add(pick(self.run(self.intact()), to))
        elif self.pins.pins:
            self.pins.pins.discard(pick([c for c in self.nodes if c in self.pins.pins], to))

    @rule(how=st.sampled_from(("branch", "tag", "pin", "reset")), to=st.integers(0, 99))
    def revive(self, how: str, to: int) -> None:
        """Point a ref at an EXPIRED commit whose objects are still stored (the race re-verification
        exists for: a pending mark may hold its objects)."""

        async def go() -> None:
            active, branches = await self.active()
            expired = [c for c in await self.intact() if c not in active]
            if not expired:
                return
            cid = pick(expired, to)
            if how == "pin":
                self.pins.pins.add(cid)
            elif how == "tag":
                with contextlib.suppress(ConflictError):
                    await self.g.create_tag(REPO, pick(TAG_NAMES, to), cid)
            elif how == "reset":
                await self.g.reset_branch(REPO, pick(sorted(branches), to), cid)
            else:
                with contextlib.suppress(ConflictError):
                    await self.g.create_branch(REPO, pick(BRANCH_NAMES, to), cid)

        self.run(go())

    @rule(
        default=st.integers(1, 4),
        branch_days=st.dictionaries(st.sampled_from(("main", *BRANCH_NAMES)), st.integers(0, 6), max_size=2),
    )
    def set_rules(self, default: int, branch_days: dict[str, int]) -> None:
        self.gc_rules = GCRules.of(default, branch_days)
        self.run(self._save_rules())

    @rule(hours=st.sampled_from((2, 24, 72, 150)))
    def advance_clock(self, hours: int) -> None:
        self.clock.now += timedelta(hours=hours)

    # -- GC ------------------------------------------------------------------------------------

    @rule(min_age=st.sampled_from(MIN_AGES))
    def mark(self, min_age: timedelta) -> None:
        self.run(self._mark(min_age))

    async def _mark(self, min_age: timedelta) -> str:
        now = self.clock.now
        live, stored, journalled = await self.live(), await self.stored(), await self.journalled()
        with LiteExecutor(workers=2, spill_dir=SCRATCH) as executor:
            options = MarkOptions(now=now, min_age=min_age, workdir=SCRATCH)
            result = await run_mark(self.g, REPO, executor, options=options, pins=self.pins)
        marked = await marked_set(self.g, self.ns, result.run_id)
        cutoff = now - min_age
        old = {a for a, m in stored.items() if m < cutoff and a != "dummy" and a not in live}
        garbage = old - journalled
        self.stats["journalled_kept"] += len(old & journalled)
        assert marked == garbage, (
            f"mark {result.run_id}: marked but live/kept {sorted(marked - garbage)}, "
            f"garbage not marked {sorted(garbage - marked)}"
        )
        self.pending.append(result.run_id)
        self.mark_rules[result.run_id] = (self.gc_rules, now)
        self.stats["marked"] += len(marked)
        self.ever_marked |= marked
        return result.run_id

    @precondition(lambda self: self.pending)
    @rule(which=st.integers(0, 9))
    def reverify(self, which: int) -> None:
        async def go() -> None:
            mark_id = pick(self.pending, which)
            layout, manifest = await load_mark(self.g, REPO, mark_id)
            marked = sorted(await marked_set(self.g, self.ns, mark_id))
            async with Reverifier(self.g, REPO, layout, manifest, pins=self.pins, workdir=SCRATCH) as rv:
                await rv.verify()
                revived = await rv.live_among(marked)
            self.stats["revived"] += len(revived)
            # Re-verification decides with the mark's now and the wider of the mark's rules and
            # today's (a retention lengthened since the mark is honoured; a shortened one is not).
            rules, now = self.mark_rules[mark_id]
            missed = (set(marked) & await self.live(at=(widest_rules(rules, self.gc_rules), now))) - revived
            assert not missed, f"re-verification of {mark_id} misses live objects {sorted(missed)}"

        self.run(go())

    @precondition(lambda self: self.pending)
    @rule(which=st.integers(0, 9))
    def sweep(self, which: int) -> None:
        mark_id = pick(self.pending, which)
        self.run(self._sweep(mark_id, sweep_options(batch_size=2, reverify_every_batches=2)))

    async def _sweep(self, mark_id: str, options: SweepOptions) -> SweepReport:
        marked = await marked_set(self.g, self.ns, mark_id)
        before = set(await self.stored())
        store = await self.g.namespace_store(self.ns)
        report = await run_sweep(
            self.g, REPO, mark_id, deleter=store_deleter(store), options=options, pins=self.pins
        )
        deleted = before - set(await self.stored())
        assert deleted <= marked, f"sweep of {mark_id} deleted unmarked {sorted(deleted - marked)}"
        assert report.failed == 0 and report.candidates == len(marked)
        self.pending.remove(mark_id)
        self.stats["rescued"] += report.rescued
        self.stats["deleted"] += report.deleted
        return report

    @precondition(lambda self: self.pending)
    @rule(which=st.integers(0, 9), n=st.integers(1, 3), every=st.integers(1, 2))
    def crash_sweep(self, which: int, n: int, every: int) -> None:
        """A sweep that crashes after its ``n``-th batch (of one key); the mark stays pending."""
        mark_id = pick(self.pending, which)
        before = set(self.run(self.stored()))
        options = sweep_options(batch_size=1, checkpoint_every_batches=every, reverify_every_batches=1)
        os.environ[ENV] = f"sweep:batch:{n}"
        try:
            self.run(self._sweep(mark_id, options))  # fewer than n batches: it completes
        except InjectedFaultError:
            self.stats["crashed"] += 1
            gone = before - set(self.run(self.stored()))
            assert len(gone) <= n, f"a crashed sweep deleted {len(gone)} > {n} batches of one key"
        finally:
            del os.environ[ENV]

    @rule(min_age=st.sampled_from(MIN_AGES))
    def full_gc(self, min_age: timedelta) -> None:
        """A full run at the current clock: the store then holds no garbage of this ``now``."""

        async def go() -> None:
            mark_id = await self._mark(min_age)
            marked = await marked_set(self.g, self.ns, mark_id)
            report = await self._sweep(mark_id, sweep_options())
            assert report.rescued == 0 and report.deleted == len(marked)
            assert not marked & set(await self.stored())

        self.run(go())

    # -- the hard-delete reconciler and slow uploaders ---------------------------------------------

    @rule()
    def reconcile(self) -> None:
        async def go() -> None:
            store = await self.g.namespace_store(self.ns)
            before = len(self.reconciled)
            deleter = RecordingDeleter(store_deleter(store), self.ns, self.reconciled)
            options = ReconcileOptions(
                grace_seconds=GRACE, pending_timeout_seconds=PENDING, now=self.clock.now
            )
            await reconcile_repository(self.g, REPO, deleter=deleter, options=options)
            self.stats["reconciled"] += len(self.reconciled) - before

        self.run(go())

    async def _hold_staging(self, op: str, partition: bytes, key: bytes) -> None:
        """The KV hook that holds a slow upload at its settle-and-stage write (the first item of
        that conditional batch is the settle: its intent, or its batch record)."""
        slow = self.holding
        if slow is None or op != "set_many_if" or slow.held.is_set():
            return
        if key.startswith(kvkeys.GC_INTENTS_PREFIX):
            slow.addresses = [key[len(kvkeys.GC_INTENTS_PREFIX) :].decode()]
        elif key.startswith(kvkeys.GC_SETTLED_PREFIX):
            batch = key[len(kvkeys.GC_SETTLED_PREFIX) :].decode()
            journal = await self.g.journal(REPO)
            slow.addresses = [i.address async for i in journal.intents() if i.batch == batch]
        else:
            return
        for address in slow.addresses:  # PUT at the model's clock, as every object
            set_mtime(str(self.root / "ns"), address, self.clock.now)
        self.holding = None
        slow.held.set()
        await slow.release.wait()

    @precondition(lambda self: self.journal_on and len(self.slow) < 3)
    @rule(b=st.integers(0, 9), p=st.sampled_from(PATHS), n=st.integers(1, 2))
    def slow_upload(self, b: int, p: str, n: int) -> None:
        """Start an upload of ``n`` objects (one: ``Objects.upload``; more: ``upload_many``) and
        hold it between its PUTs and its staging write."""

        async def go() -> None:
            branch = pick(await self.branch_names(), b)
            paths = [pick(PATHS, PATHS.index(p) + i) for i in range(n)]
            slow = self.holding = SlowUpload(branch, paths)
            body = f"slow@{self.clock.now}".encode()
            if n == 1:
                slow.task = asyncio.ensure_future(self.objects.upload(REPO, branch, paths[0], body))
            else:
                items = [UploadItem(path, body) for path in paths]
                slow.task = asyncio.ensure_future(self.objects.upload_many(REPO, branch, items))
            held = asyncio.ensure_future(slow.held.wait())
            await asyncio.wait([slow.task, held], return_when=asyncio.FIRST_COMPLETED)
            held.cancel()
            self.holding = None
            assert slow.held.is_set(), f"a slow upload ended before its staging write: {slow.task}"
            self.slow.append(slow)

        self.run(go())

    @precondition(lambda self: self.slow)
    @rule(which=st.integers(0, 9), stall=st.sampled_from((0.0, GRACE + 60, PENDING + 60)))
    def finish_slow_upload(self, which: int, stall: float) -> None:
        """Let a slow upload go on, after a further ``stall``: the clock moved that much and a
        reconciler pass (past the grace: the issue's case; past the pending timeout: the upload's
        intent is claimed). It stages every entry with its objects present, or fails (claimed by
        the reconciler meanwhile, or its branch deleted) with none staged."""
        slow = self.slow.pop(which % len(self.slow))
        if stall:
            self.clock.now += timedelta(seconds=stall)
            self.reconcile()

        async def go() -> None:
            assert slow.task is not None
            slow.release.set()
            await asyncio.wait([slow.task])
            error = slow.task.exception()
            store = await self.g.namespace_store(self.ns)
            staged: list[str] = []
            for path in slow.paths:
                with contextlib.suppress(NotFoundError):
                    address = (await self.objects.stat(REPO, slow.branch, path)).physical_address
                    if address in slow.addresses:
                        staged.append(address)
            if error is None:
                self.stats["slow_won"] += 1
                assert sorted(staged) == sorted(slow.addresses), (staged, slow.addresses)
                for address in staged:
                    assert await store.exists(self.ns.key(address)), f"staged {address}: object gone"
            else:
                self.stats["slow_lost"] += 1
                assert isinstance(error, ConflictError | NotFoundError), repr(error)
                assert staged == [], f"a failed upload staged {staged}"

        self.run(go())

    # -- invariants ------------------------------------------------------------------------------

    @invariant()
    def nothing_live_deleted(self) -> None:
        async def go() -> None:
            stored = set(await self.stored())
            self.gone |= self.known - stored
            self.known |= stored
            lost = await self.live(safe=True) - stored
            assert not lost, f"live objects deleted: {sorted(lost)}"
            for cid in self.nodes.keys() - self.dead:
                if not await self.listings.commit(cid) <= stored:
                    self.dead.add(cid)
            deleters = self.ever_marked | self.reconciled
            assert self.gone <= deleters, f"deleted but never marked nor reconciled: {self.gone - deleters}"

        self.run(go())


GCModel.TestCase.settings = settings(
    max_examples=examples(1.2),
    stateful_step_count=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestGCModel = GCModel.TestCase
