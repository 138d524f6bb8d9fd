"""The mirroring engine's last-line safety checks, each shown to matter on real drivers.

- The region lease is re-checked right before a promotion: a daemon that stalled past its lease's
  TTL in mid-pass, while another daemon took the lease over, must not move a mirror branch (two
  daemons promoting at once could move it backwards). The take-over happens on the real SQL lease;
  only its timing is arranged, by a wrapper around the engine's lease contender.
- A source commit record whose fields do not hash to its id is never copied: not as the root commit
  that seeds a new mirror repository (which is stored without the facade's own check), and not in
  the middle of a history (then nothing of that history is copied).

Real stores throughout (memory KV and block stores, the SQLite mirrors database); clocks are
injected, and the corruption is written straight into the source's KV, as a bad disk or a buggy
writer would leave it.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from lakefs_core.block import copy_object
from lakefs_core.block.base import ObjectInfo
from lakefs_core.errors import NotFoundError
from lakefs_core.keys import StorageNamespace
from lakefs_core.kv.memory import MemoryKVStore
from lakefs_core.lease import Lease, LeaseState
from lakefs_core.refs import kvkeys
from lakefs_core.repos.graveler import Commit, Graveler
from lakefs_core.repos.objects import Objects
from lakefs_core.repos.stores import StoreRegistry
from lakefs_mirror.db import MirrorsDB
from lakefs_mirror.engine import EngineSettings, MirrorEngine
from lakefs_mirror.metrics import MirrorMetrics
from lakefs_mirror.presence import PresenceCache

START = datetime(2026, 1, 1, tzinfo=UTC)
TTL = 30.0


class Clock:
    """A settable wall clock shared by the engines (lease expiry is judged with it)."""

    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


@dataclass
class World:
    src: Graveler
    dst: Graveler
    db: MirrorsDB
    presence: PresenceCache
    src_ns: StorageNamespace
    dst_ns: StorageNamespace
    clock: Clock

    def engine(self, holder: str) -> MirrorEngine:
        return MirrorEngine(
            region="eu",
            gravelers={"us": self.src, "eu": self.dst},
            db=self.db,
            presence=self.presence,
            metrics=MirrorMetrics(region="eu"),
            settings=EngineSettings(lease_ttl_seconds=TTL),
            holder=holder,
            clock=self.clock,
        )

    async def replicate(self) -> None:
        """Copy every source namespace key the destination namespace lacks (S3 Replication, done)."""
        src = await self.src.stores.namespace_store(self.src_ns)
        dst = await self.dst.stores.namespace_store(self.dst_ns)
        async for info in src.list(self.src_ns.prefix + "/"):
            if isinstance(info, ObjectInfo):
                key = self.dst_ns.prefix + info.key[len(self.src_ns.prefix) :]
                if not await dst.exists(key):
                    await copy_object(src, info.key, dst, key)

    async def add_mirror(self) -> str:
        m = await self.db.create_mirror(
            source_repo="origin",
            source_region="us",
            name="mirror",
            region="eu",
            storage_namespace=self.dst_ns.uri,
            mode="native",
        )
        return m.id

    async def corrupt_source_commit(self, commit_id: str) -> Commit:
        """Rewrite a stored source commit's message in place: its fields no longer hash to its id."""
        repo = await self.src.repository("origin")
        stored = await self.src.get_commit_by_id("origin", commit_id)
        forged = replace(stored, message=stored.message + " (rewritten)", raw=None)
        assert forged.id == commit_id and forged.computed_id() != commit_id
        await self.src.kv.set(repo.partition, kvkeys.commit_key(commit_id), forged.to_bytes())
        return forged


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    name = uuid.uuid4().hex[:8]
    src = Graveler(MemoryKVStore(), StoreRegistry())
    dst = Graveler(MemoryKVStore(), StoreRegistry())
    db = await MirrorsDB.open(f"sqlite+aiosqlite:///{tmp_path / 'mirrors.db'}")
    presence = await PresenceCache.open(tmp_path / "presence.sqlite3", negative_cooldown=0)
    w = World(
        src,
        dst,
        db,
        presence,
        StorageNamespace.parse(f"mem://src{name}/repo"),
        StorageNamespace.parse(f"mem://dst{name}/repo"),
        Clock(),
    )
    await src.create_repository("origin", w.src_ns.uri)
    try:
        yield w
    finally:
        await presence.close()
        await db.close()
        await src.stores.close()
        await dst.stores.close()


async def write_commit(g: Graveler, n: int, tag: str) -> str:
    objects = Objects(g)
    for i in range(n):
        await objects.upload("origin", "main", f"{tag}/part-{i:04d}", f"{tag}-{i}".encode())
    return (await g.commit("origin", "main", committer="t", message=tag)).id


# -- the lease re-check before promotion -------------------------------------------------------------


class TakenOverMidPass:
    """The engine's real lease contender; right after its first successful acquire (the start of a
    pass), this daemon stalls past the TTL and ``rival`` takes the lease over. Later calls go to the
    real lease, which now answers for itself."""

    def __init__(self, inner: Lease, rival: Lease, clock: Clock) -> None:
        self.inner, self.rival, self.clock = inner, rival, clock
        self.acquires = 0

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def holder(self) -> str:
        return self.inner.holder

    async def try_acquire(self, now: datetime | float | None = None) -> bool:
        got = await self.inner.try_acquire(now)
        self.acquires += 1
        if self.acquires == 1 and got:
            self.clock.advance(TTL + 1)  # a long GC pause, a slow store...
            assert await self.rival.try_acquire(self.clock())  # the standby takes over
        return got

    async def renew(self, now: datetime | float | None = None) -> bool:
        return await self.inner.renew(now)

    async def release(self) -> bool:
        return await self.inner.release()

    async def current(self) -> LeaseState | None:
        return await self.inner.current()


async def test_a_daemon_that_lost_its_lease_mid_pass_does_not_promote(world: World) -> None:
    w = world
    head = await write_commit(w.src, 5, "a")
    mid = await w.add_mirror()
    await w.replicate()  # the head is complete in the mirror's namespace: promotable on sight
    a, b = w.engine("daemon-a"), w.engine("daemon-b")
    a.lease = TakenOverMidPass(a.lease, b.lease, w.clock)

    report = await a.step()
    assert report.active  # it held the lease when the pass began
    assert report.promotions == 0, report
    assert any("lost the region lease" in e for e in report.errors), report.errors
    assert a.lease.acquires == 2  # the start of the pass, and the re-check before promoting
    root = (await w.src.get_commit("origin", "main~1")).id
    assert (await w.dst.branch("mirror", "main")).commit_id == root != head
    status = {s.branch: s for s in await w.db.list_status(mid)}["main"]
    assert status.mirror_head == root and status.candidate == head
    assert status.last_error is not None and "lost the region lease" in status.last_error
    assert status.last_promotion_at is None
    holder = await w.db.lease("eu")
    assert holder is not None and holder.holder == "daemon-b"

    # The new holder promotes; the old one stays on standby.
    assert (await b.step()).promotions == 1
    assert (await w.dst.branch("mirror", "main")).commit_id == head
    assert not (await a.step()).active


# -- commit records that do not hash to their ids ----------------------------------------------------


async def test_a_corrupt_source_root_commit_does_not_seed_the_mirror(world: World) -> None:
    """The root commit seeds the mirror repository through create_repository, which stores it
    verbatim (no facade check): only the engine's own check stands between it and the mirror."""
    w = world
    await write_commit(w.src, 2, "a")
    root = (await w.src.get_commit("origin", "main~1")).id
    forged = await w.corrupt_source_commit(root)
    await w.add_mirror()
    await w.replicate()

    report = await w.engine("daemon-a").step()
    assert report.active and report.promotions == 0 and report.commits_copied == 0
    assert any("does not hash" in e and root in e for e in report.errors), report.errors
    with pytest.raises(NotFoundError):
        await w.dst.repository("mirror")  # not created around the forged record
    async for repo in w.dst.list_repositories():
        assert not await w.dst.has_commit(repo.id, forged.id), repo.id


async def test_a_corrupt_commit_in_the_history_stops_the_whole_copy(world: World) -> None:
    """A forged commit in the middle of a history: the engine refuses it while walking, before it
    writes anything, so no commit of that history (not even its intact ancestors) is copied and the
    mirror branch stays put."""
    w = world
    await w.add_mirror()
    engine = w.engine("daemon-a")
    assert (await engine.step()).promotions == 0  # the mirror repository exists, seeded with root
    root = (await w.dst.branch("mirror", "main")).commit_id
    c1 = await write_commit(w.src, 2, "one")
    c2 = await write_commit(w.src, 2, "two")
    c3 = await write_commit(w.src, 2, "three")
    await w.corrupt_source_commit(c2)
    await w.replicate()

    report = await engine.step()
    assert report.promotions == 0 and report.commits_copied == 0, report
    assert any(f"source commit {c2} does not hash" in e for e in report.errors), report.errors
    for cid in (c1, c2, c3):
        assert not await w.dst.has_commit("mirror", cid), cid
    assert (await w.dst.branch("mirror", "main")).commit_id == root
