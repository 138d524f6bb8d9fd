"""The mirroring engine end to end on real drivers: two regions, a replication step, promotions."""

from __future__ import annotations

import contextlib
import logging
import random
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import pytest

from lakefs_core.block import copy_object
from lakefs_core.block.base import ObjectInfo
from lakefs_core.errors import ReadOnlyError
from lakefs_core.format.records import decode_entry
from lakefs_core.kv.memory import MemoryKVStore
from lakefs_core.namespace import StorageNamespace
from lakefs_core.repos.graveler import Graveler
from lakefs_core.repos.objects import Objects
from lakefs_core.repos.stores import StoreRegistry
from lakefs_mirror.db import MirrorsDB
from lakefs_mirror.engine import EngineSettings, MirrorEngine
from lakefs_mirror.metrics import MirrorMetrics
from lakefs_mirror.presence import PresenceCache


@dataclass
class World:
    src: Graveler
    dst: Graveler
    db: MirrorsDB
    presence: PresenceCache
    src_ns: StorageNamespace
    dst_ns: StorageNamespace
    tmp: Path
    clock: Callable[[], datetime] | None = None  # the engines' wall clock (lease expiry); None: real

    def engine(self, holder: str = "a", **settings: float) -> MirrorEngine:
        # The engine reads the source region as a daemon does, from another process: a Graveler of
        # its own over the source KV (its commit cache holds only what it read and verified itself,
        # never what the writers of this test cached before a record was tampered with).
        return MirrorEngine(
            region="eu",
            gravelers={"us": Graveler(self.src.kv, self.src.stores), "eu": self.dst},
            db=self.db,
            presence=self.presence,
            metrics=MirrorMetrics(region="eu"),
            settings=EngineSettings(**settings),  # type: ignore[arg-type]
            holder=holder,
            **({} if self.clock is None else {"clock": self.clock}),
        )

    async def replicate(self, fraction: float = 1.0, seed: int = 0) -> int:
        """Copy a random ``fraction`` of the source namespace's missing keys, in random order."""
        src = await self.src.stores.namespace_store(self.src_ns)
        dst = await self.dst.stores.namespace_store(self.dst_ns)
        keys = [o.key async for o in src.list(self.src_ns.prefix + "/") if isinstance(o, ObjectInfo)]
        keys = [k for k in keys if not await dst.exists(self.dst_ns.prefix + k[len(self.src_ns.prefix) :])]
        random.Random(seed).shuffle(keys)
        chosen = keys[: int(len(keys) * fraction)]
        for key in chosen:
            await copy_object(src, key, dst, self.dst_ns.prefix + key[len(self.src_ns.prefix) :])
        return len(chosen)

    async def assert_mirror_heads_complete(self) -> None:
        """The invariant: every object of every mirror branch head is in the destination."""
        dst_store = await self.dst.stores.namespace_store(self.dst_ns)
        repo = await self.dst.repository("mirror")
        async for branch in self.dst.refs.list_branches(repo):
            async for record in self.dst.list_entries("mirror", branch.commit_id):
                address = decode_entry(record.data).address
                assert await dst_store.exists(self.dst_ns.key(address)), (branch.id, address)


@contextlib.asynccontextmanager
async def open_world(tmp_path: Path, clock: Callable[[], datetime] | None = None) -> AsyncIterator[World]:
    """Two regions on memory stores, a SQLite mirrors database and presence cache under
    ``tmp_path``, and the source repository ``origin``."""
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
        tmp_path,
        clock,
    )
    await src.create_repository("origin", w.src_ns.uri)
    try:
        yield w
    finally:
        await presence.close()
        await db.close()
        await src.stores.close()
        await dst.stores.close()


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    async with open_world(tmp_path) as w:
        yield w


async def write_commit(g: Graveler, n: int, tag: str, branch: str = "main") -> str:
    objects = Objects(g)
    for i in range(n):
        await objects.upload("origin", branch, f"{tag}/part-{i:04d}", f"{tag}-{i}".encode())
    return (await g.commit("origin", branch, committer="t", message=tag)).id


async def add_mirror(w: World, mode: str = "native") -> str:
    m = await w.db.create_mirror(
        source_repo="origin",
        source_region="us",
        name="mirror",
        region="eu",
        storage_namespace=w.dst_ns.uri,
        mode=mode,  # type: ignore[arg-type]
    )
    return m.id


async def mirror_head(w: World, branch: str = "main") -> str:
    return (await w.dst.branch("mirror", branch)).commit_id


async def test_native_mode_promotes_only_complete_commits(world: World) -> None:
    w = world
    head = await write_commit(w.src, 30, "a")
    mid = await add_mirror(w)
    engine = w.engine()
    report = await engine.step()
    assert report.active and report.promotions == 0 and report.commits_copied == 1
    repo = await w.dst.repository("mirror")
    assert repo.read_only
    root = await mirror_head(w)
    assert root != head and (await w.dst.get_commit("mirror", root)).message == "Repository created"
    assert (await w.src.get_commit("origin", "main~1")).id == root  # same root commit id

    await w.replicate(0.6)
    report = await engine.step()
    assert report.promotions == 0
    await w.assert_mirror_heads_complete()
    pending = {s.branch: s for s in await w.db.list_status(mid)}["main"]
    assert pending.candidate == head and pending.missing_objects + pending.missing_ranges > 0

    await w.replicate(1.0)
    report = await engine.step()
    assert report.promotions == 1
    assert await mirror_head(w) == head
    await w.assert_mirror_heads_complete()
    assert await Objects(w.dst).read_all("mirror", "main", "a/part-0007") == b"a-7"
    with pytest.raises(ReadOnlyError):
        await Objects(w.dst).upload("mirror", "main", "x", b"y")
    status = {s.branch: s for s in await w.db.list_status(mid)}["main"]
    assert status.mirror_head == head and status.lag_seconds == 0 and status.candidate is None


async def test_skips_intermediate_commits(world: World) -> None:
    w = world
    await add_mirror(w)
    engine = w.engine()
    await write_commit(w.src, 5, "one")
    await w.replicate(1.0)
    await engine.step()
    first = await mirror_head(w)
    for n in range(3):
        await write_commit(w.src, 3, f"more{n}")
    head = (await w.src.branch("origin", "main")).commit_id
    await w.replicate(1.0)
    report = await engine.step()
    assert report.promotions == 1 and report.commits_copied == 3
    assert await mirror_head(w) == head != first
    history = [c.id async for c in w.dst.log("mirror", "main")]
    assert history == [c.id async for c in w.src.log("origin", "main")]


async def test_active_mode_copies_missing_objects(world: World) -> None:
    w = world
    head = await write_commit(w.src, 20, "act")
    await add_mirror(w, mode="active")
    engine = w.engine(active_copy_grace_seconds=0)
    report = await engine.step()
    assert report.promotions == 1, report.errors
    assert await mirror_head(w) == head
    await w.assert_mirror_heads_complete()


async def test_branches_tags_deletion_and_history_rewrite(world: World) -> None:
    w = world
    mid = await add_mirror(w, mode="active")
    engine = w.engine(active_copy_grace_seconds=0)
    c1 = await write_commit(w.src, 3, "base")
    await w.src.create_branch("origin", "dev", "main")
    await w.src.create_tag("origin", "v1", "main")
    await write_commit(w.src, 2, "dev", branch="dev")
    await engine.step()
    dev = (await w.src.branch("origin", "dev")).commit_id
    assert (await w.dst.branch("mirror", "dev")).commit_id == dev
    assert (await w.dst.get_commit("mirror", "v1")).id == c1

    await w.src.delete_branch("origin", "dev")
    await engine.step()
    assert [b.id async for b in w.dst.list_branches("mirror")] == ["main"]

    # The source moves main backwards: the mirror refuses until a resync is requested.
    await write_commit(w.src, 1, "later")
    await engine.step()
    ahead = await mirror_head(w)
    await w.src.reset_branch("origin", "main", c1)
    report = await engine.step()
    assert await mirror_head(w) == ahead and any("resync" in e for e in report.errors)
    await w.db.request_resync(mid)
    await engine.step()
    assert await mirror_head(w) == c1


async def test_only_the_lease_holder_works(world: World) -> None:
    w = world
    await write_commit(w.src, 2, "x")
    await add_mirror(w, mode="active")
    a = w.engine("daemon-a", active_copy_grace_seconds=0)
    b = w.engine("daemon-b", active_copy_grace_seconds=0)
    ra, rb = await a.step(), await b.step()
    assert ra.active and not rb.active
    assert ra.promotions == 1 and rb.promotions == 0


async def test_negative_cooldown_delays_rechecks(world: World) -> None:
    w = world
    clock = [1000.0]
    w.presence = await PresenceCache.open(None, negative_cooldown=60, clock=lambda: clock[0])
    head = await write_commit(w.src, 4, "cool")
    await add_mirror(w)
    engine = w.engine()
    await w.replicate(0.5)
    assert (await engine.step()).promotions == 0
    await w.replicate(1.0)
    assert (await engine.step()).promotions == 0  # the missing keys are cooling down
    clock[0] += 61
    assert (await engine.step()).promotions == 1
    assert await mirror_head(w) == head


async def test_a_recorded_candidate_is_promoted_while_newer_heads_keep_arriving(world: World) -> None:
    """Commits outpacing replication: the newest head is never complete, yet the mirror advances."""
    w = world
    await add_mirror(w)
    engine = w.engine()
    first = await write_commit(w.src, 4, "c0")
    assert (await engine.step()).promotions == 0  # records c0 as the candidate
    heads = [first]
    for n in range(1, 4):
        await w.replicate(1.0)  # everything so far arrives...
        heads.append(await write_commit(w.src, 4, f"c{n}"))  # ...but a newer commit lands meanwhile
        report = await engine.step()
        assert report.promotions == 1, report
        # The mirror advanced to the candidate of the previous pass, never to an incomplete head.
        assert await mirror_head(w) == heads[n - 1]
        await w.assert_mirror_heads_complete()
    await w.replicate(1.0)
    assert (await engine.step()).promotions == 1
    assert await mirror_head(w) == heads[-1]


async def test_refuses_to_adopt_a_repository_that_is_not_a_mirror(world: World) -> None:
    w = world
    await write_commit(w.src, 2, "x")
    await w.dst.create_repository("mirror", w.dst_ns.uri)  # an ordinary, writable repository
    before = await mirror_head(w)
    await add_mirror(w, mode="active")
    report = await w.engine(active_copy_grace_seconds=0).step()
    assert report.promotions == 0
    assert any("not a read-only mirror" in e for e in report.errors)
    assert await mirror_head(w) == before


async def test_lifecycle_logs_carry_the_mirror_context(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    """INFO: lease acquired, repository created, each promotion (from/to), paused, resumed, deleted;
    DEBUG: a pass summary. Records carry the logfmt context fields (mirror, repository, branch)."""
    caplog.set_level(logging.DEBUG)
    w = world
    c1 = await write_commit(w.src, 2, "one")
    await w.src.create_tag("origin", "v1", "main")
    mid = await add_mirror(w, mode="active")
    engine = w.engine("daemon-a", active_copy_grace_seconds=0)
    root = (await w.src.get_commit("origin", "main~1")).id
    await engine.step()
    # the source re-points its tag: the mirror moves its own tag by compare-and-swap
    await w.src.delete_tag("origin", "v1")
    c2 = await write_commit(w.src, 1, "two")
    await w.src.create_tag("origin", "v1", "main")
    assert (await engine.step()).promotions == 2
    assert (await w.dst.tag("mirror", "v1")).commit_id == c2
    await w.db.update_mirror(mid, None, paused=True)
    await engine.step()
    await w.db.update_mirror(mid, None, paused=False)
    await engine.step()
    await w.db.delete_mirror(mid)
    await engine.step()

    ours = [r for r in caplog.records if r.name.startswith(("lakefs_mirror", "lakefs_core.service.lease"))]
    info = [
        (r.getMessage(), r.__dict__.get("mirror"), r.__dict__.get("branch")) for r in ours if r.levelno == 20
    ]
    assert info == [
        ("lease eu acquired by daemon-a", None, None),
        ("mirror mirror of us/origin active", "mirror", None),
        (f"mirror repository mirror created in eu ({w.dst_ns.uri})", "mirror", None),
        (f"promoted branch main from {root[:12]} to {c1[:12]}", "mirror", "main"),
        (f"promoted tag v1 from (none) to {c1[:12]}", "mirror", "v1"),
        (f"promoted branch main from {c1[:12]} to {c2[:12]}", "mirror", "main"),
        (f"promoted tag v1 from {c1[:12]} to {c2[:12]}", "mirror", "v1"),
        ("mirror mirror paused", "mirror", None),
        ("mirror mirror resumed", "mirror", None),
        ("mirror mirror deleted", "mirror", None),
    ]
    assert all(
        r.__dict__.get("repository") == "origin" for r in ours if r.levelno == 20 and "mirror" in r.__dict__
    )
    assert any(r.levelno == 10 and r.getMessage().startswith("pass: 1 mirrors, 2 promotions") for r in ours)
