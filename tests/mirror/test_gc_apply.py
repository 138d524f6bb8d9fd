"""A mirror applies its source's completed GC sweeps (gc.md §3d): a real source repository marked and
swept by ``run_mark``/``run_sweep``, a real mirror built by the engine (local namespaces, SQLite
mirrors database). The mirror loses exactly what the source swept, never an object its heads or
candidates need, never an object the source still holds, and forgets the swept keys' presence facts."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from lakefs_core.block import copy_object
from lakefs_core.block.base import ObjectInfo
from lakefs_core.compute.executor import LiteExecutor
from lakefs_core.errors import NotFoundError, TamperedError
from lakefs_core.format.records import decode_entry
from lakefs_core.kv.memory import MemoryKVStore
from lakefs_core.namespace import StorageNamespace
from lakefs_core.repos.graveler import Graveler
from lakefs_core.repos.stores import StoreRegistry
from lakefs_core.service.deleter import store_deleter
from lakefs_gc.mark.mark import MarkMode, MarkOptions, run_mark
from lakefs_gc.runs.layout import RunLayout
from lakefs_gc.runs.parts import list_parts, read_lines
from lakefs_gc.sweep.sweep import SweepReport, run_sweep
from lakefs_mirror.db import MirrorsDB
from lakefs_mirror.engine import MirrorEngine
from lakefs_mirror.gc_apply import GCApplyReport, apply_source_sweeps
from lakefs_mirror.metrics import MirrorMetrics
from lakefs_mirror.pins import MirrorPins
from lakefs_mirror.presence import PresenceCache, namespace_key
from tests.gc.mark_support import MARK_NOW, MIN_AGE, Built, Clock, build_repo


def _dir(ns: StorageNamespace) -> str:
    return f"{ns.prefix}/" if ns.prefix else ""


@dataclass
class World:
    src: Graveler
    dst: Graveler
    db: MirrorsDB
    presence: PresenceCache
    built: Built
    dst_ns: StorageNamespace
    mirror_id: str

    def engine(self) -> MirrorEngine:
        return MirrorEngine(
            region="eu",
            gravelers={"us": self.src, "eu": self.dst},
            db=self.db,
            presence=self.presence,
            metrics=MirrorMetrics(region="eu"),
            holder="a",
        )

    async def replicate(self) -> None:
        """Native replication: every source object the mirror's namespace lacks, copied."""
        src_ns = self.built.ns
        src = await self.src.namespace_store(src_ns)
        dst = await self.dst.namespace_store(self.dst_ns)
        src_prefix = _dir(src_ns)
        async for item in src.list(src_prefix):
            if isinstance(item, ObjectInfo):
                target = self.dst_ns.key(item.key[len(src_prefix) :])
                if not await dst.exists(target):
                    await copy_object(src, item.key, dst, target)

    async def dst_objects(self) -> set[str]:
        """The mirror namespace's data objects (relative keys, ``_lakefs/`` left out)."""
        store = await self.dst.namespace_store(self.dst_ns)
        prefix = _dir(self.dst_ns)
        keys = {o.key[len(prefix) :] async for o in store.list(prefix) if isinstance(o, ObjectInfo)}
        return {k for k in keys if not k.startswith("_lakefs/")}

    async def head_objects(self) -> set[str]:
        out: set[str] = set()
        async for branch in self.dst.list_branches("mirror"):
            async for record in self.dst.list_entries("mirror", branch.commit_id):
                entry = decode_entry(record.data)
                relative = self.built.ns.relative_of(entry.address, int(entry.address_type))
                if relative is not None:  # None: an external object, not in the namespace
                    out.add(relative)
        return out

    async def cache_key(self) -> str:
        repo = await self.dst.repository("mirror")
        return namespace_key(self.dst_ns.uri, repo.instance_uid)

    async def apply(self) -> GCApplyReport:
        mirror = await self.db.get_mirror(self.mirror_id)
        return await apply_source_sweeps(
            mirror, src=self.src, dst=self.dst, db=self.db, presence=self.presence
        )


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    clock = Clock()
    src = Graveler(MemoryKVStore(), StoreRegistry(), clock=clock)
    dst = Graveler(MemoryKVStore(), StoreRegistry())
    db = await MirrorsDB.open(f"sqlite+aiosqlite:///{tmp_path / 'mirrors.db'}")
    presence = await PresenceCache.open(tmp_path / "presence.sqlite3", negative_cooldown=0)
    src_root = tmp_path / "src"
    try:
        built = await build_repo(src, clock, "origin", f"local://{src_root}", local_root=str(src_root))
        dst_ns = StorageNamespace.parse(f"local://{tmp_path / 'dst'}")
        mirror = await db.create_mirror(
            source_repo="origin", source_region="us", name="mirror", region="eu", storage_namespace=dst_ns.uri
        )
        w = World(src, dst, db, presence, built, dst_ns, mirror.id)
        engine = w.engine()
        await engine.step()  # creates the mirror repository, copies the commits
        await w.replicate()
        report = await engine.step()
        assert report.promotions >= 3 and not report.errors  # main, dev, tmp (and the tag)
        yield w
    finally:
        await presence.close()
        await db.close()
        await src.stores.close()
        await dst.stores.close()


async def gc_source(
    w: World,
    *,
    pins: bool = True,
    mode: MarkMode = "full",
    before_sweep: Callable[[], Awaitable[None]] | None = None,
) -> str:
    source_pins = MirrorPins(w.db) if pins else None
    with LiteExecutor(workers=2) as lite:
        marked = await run_mark(
            w.src,
            "origin",
            lite,
            options=MarkOptions(now=MARK_NOW, min_age=MIN_AGE, mode=mode),
            pins=source_pins,
        )
    if mode != "dry-run":
        if before_sweep is not None:
            await before_sweep()
        store = await w.src.namespace_store(w.built.ns)
        await run_sweep(w.src, "origin", marked.run_id, deleter=store_deleter(store), pins=source_pins)
    return marked.run_id


async def marked(w: World, run_id: str) -> set[str]:
    store = await w.src.namespace_store(w.built.ns)
    out: set[str] = set()
    for key in await list_parts(store, RunLayout(w.built.ns, run_id).deleted_text):
        async for lines in read_lines(store, key):
            out.update(lines)
    return out


async def test_mirror_applies_a_completed_sweep(world: World) -> None:
    w = world
    before = await w.dst_objects()
    key = await w.cache_key()
    dry = await gc_source(w, mode="dry-run")  # never swept: recorded with nothing to do
    run_id = await gc_source(w)
    swept = await marked(w, run_id)
    a = w.built.addr
    assert {a["g1"], a["s2old"], a["t1"], "legacy-obj"} <= swept <= before
    for address in swept:  # what the engine may have learnt about them
        w.presence.mark_present(key, address)
    w.presence.mark_validated(key, "stale-range")

    report = await w.apply()
    assert report.applied == [run_id] and not report.pending
    assert report.candidates == len(swept) and report.protected == 0 and report.kept_in_source == 0
    assert report.deleted == len(swept) and report.failed == 0
    assert report.forgotten == len(swept) and report.tables_dropped >= 1
    after = await w.dst_objects()
    assert after == before - swept  # exactly the swept keys, nothing else
    assert not (await w.head_objects()) - after  # every mirror head is still complete
    assert not any(w.presence.is_present(key, s) for s in swept)
    assert not w.presence.is_validated(key, "stale-range")
    assert await w.db.gc_applied_runs(w.mirror_id) == {dry, run_id}

    again = await w.apply()  # applied once: nothing more to do
    assert again.applied == [] and again.deleted == 0 and again.candidates == 0


async def test_objects_the_mirror_needs_are_kept_and_reported(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    """A source GC that was not told about the mirror (no pins) sweeps what a mirror candidate needs:
    the mirror keeps it, counts it and says so at WARNING."""
    w = world
    status = (await w.db.list_status(w.mirror_id))[0]
    await w.db.upsert_status(replace(status, branch="gone", candidate=w.built.commits["g"]))
    run_id = await gc_source(w, pins=False)
    g1 = w.built.addr["g1"]
    assert g1 in await marked(w, run_id)
    with caplog.at_level(logging.WARNING, logger="lakefs_mirror.gc_apply"):
        report = await w.apply()
    assert report.protected == 1 and report.applied == [run_id]
    assert g1 in await w.dst_objects()
    assert any("reference (kept in the mirror)" in r.getMessage() for r in caplog.records)


async def test_keys_the_source_rescued_are_kept(world: World) -> None:
    """A branch created at an expired commit between mark and sweep: the sweep rescues its objects
    (not recorded per key), so the mirror checks the source and keeps what is still there."""
    w = world
    g1 = w.built.addr["g1"]

    async def revive() -> None:
        await w.src.create_branch("origin", "revive", w.built.commits["g"])

    run_id = await gc_source(w, before_sweep=revive)
    store = await w.src.namespace_store(w.built.ns)
    sweep = SweepReport.model_validate_json(await store.get(RunLayout(w.built.ns, run_id).sweep_report))
    assert sweep.rescued >= 1 and await store.exists(w.built.ns.key(g1))
    before = await w.dst_objects()
    report = await w.apply()
    assert report.kept_in_source == sweep.rescued and report.applied == [run_id]
    after = await w.dst_objects()
    assert g1 in after and after == before - (await marked(w, run_id) - {g1})


async def test_a_tampered_report_deletes_nothing(world: World) -> None:
    w = world
    run_id = await gc_source(w)
    store = await w.src.namespace_store(w.built.ns)
    parts = await list_parts(store, RunLayout(w.built.ns, run_id).deleted_text)
    body = await store.get(parts[0])
    await store.put(parts[0], body + b"_lakefs/not-a-data-object\n")
    before = await w.dst_objects()
    with pytest.raises(TamperedError, match="the run record says") as refused:
        await w.apply()
    assert refused.value.reason == "digest" and refused.value.exit_code == 18
    assert await w.dst_objects() == before
    assert await w.db.gc_applied_runs(w.mirror_id) == set()
    await store.put(parts[0], body)
    # The failed keys the sweep left, edited (fewer keys kept in the source): refused too.
    failed = RunLayout(w.built.ns, run_id).failed
    await store.put(failed, b"data/planted\tInternalError\n")
    with pytest.raises(TamperedError, match=r"failed\.text"):
        await w.apply()
    await store.delete(failed)
    # A run the KV does not record as swept is never applied, whatever its files say: the run's
    # files copied under a newer run id (its sweep.json, deleted list and all).
    planted = "29991231T000000000Z-00000000000000aa"
    src_prefix = w.built.ns.gc_path(run_id) + "/"
    async for item in store.list(src_prefix):
        if isinstance(item, ObjectInfo):
            key = w.built.ns.gc_path(planted, *item.key[len(src_prefix) :].split("/"))
            await store.put(key, (await store.get(item.key)).replace(run_id.encode(), planted.encode()))
    report = await w.apply()
    assert report.applied == [run_id] and planted not in await w.db.gc_applied_runs(w.mirror_id)
    assert await w.dst_objects() == before - await marked(w, run_id)


async def test_gc_applied_rows(tmp_path: Path) -> None:
    async with await MirrorsDB.open(f"sqlite+aiosqlite:///{tmp_path / 'm.db'}") as db:
        m = await db.create_mirror(
            source_repo="r", source_region="us", name="m", region="eu", storage_namespace="mem://b/m"
        )
        await db.set_gc_applied(m.id, "run-1")
        await db.set_gc_applied(m.id, "run-1")  # idempotent
        await db.set_gc_applied(m.id, "run-2")
        assert await db.gc_applied_runs(m.id) == {"run-1", "run-2"}
        with pytest.raises(NotFoundError):
            await db.set_gc_applied("0" * 32, "run-1")
        await db.delete_mirror(m.id)
        assert await db.gc_applied_runs(m.id) == set()  # cascaded with the mirror


def test_presence_forget_and_retain_tables() -> None:
    cache = PresenceCache()
    ns = namespace_key("s3://bucket/repo", "uid1")
    other = namespace_key("s3://bucket/repo", "uid2")
    for key in ("data/s/a", "data/s/b", "data/s/c"):
        cache.mark_present(ns, key)
    cache.mark_present(other, "data/s/a")
    cache.mark_missing(ns, "data/s/d")
    # Relative keys, or store keys carrying the namespace's prefix; unknown keys are fine.
    assert cache.forget(ns, ["data/s/a", "repo/data/s/b", "data/s/d", "data/s/zz"]) == 2
    assert not cache.is_present(ns, "data/s/a") and not cache.is_present(ns, "data/s/b")
    assert cache.is_present(ns, "data/s/c") and cache.is_present(other, "data/s/a")
    assert not cache.recently_missing(ns, "data/s/d")
    for table in ("t1", "t2", "t3"):
        cache.mark_validated(ns, table)
    cache.mark_validated(other, "t1")
    assert cache.retain_tables(ns, {"t2"}) == 2
    assert cache.is_validated(ns, "t2") and not cache.is_validated(ns, "t1")
    assert cache.is_validated(other, "t1")


async def test_source_purge_applies_to_the_mirror(world: World) -> None:
    """A source's audited purge reaches the mirror: record and markers copied, the mirror's copies
    deleted, reads there answer PurgedError naming the same record, and objects that will never
    arrive do not block the next promotion."""
    from lakefs_core.errors import PurgedError
    from lakefs_core.repos.objects import Objects

    w = world
    a3 = w.built.addr["a3"]
    assert a3 in await w.dst_objects()
    report = await w.src.purge_path(
        "origin", "main", "a3", all_history=True, reason="erasure request", actor="dpo", yes=True
    )
    assert report.addresses == [a3] and report.audit_id
    engine = w.engine()
    step = await engine.step()
    assert not step.errors
    assert a3 not in await w.dst_objects()
    (copy,) = await w.dst.list_purges("mirror")
    assert copy.audit_id == report.audit_id and copy.source == f"origin/{report.audit_id}"
    assert copy.state == "done" and copy.reason == "erasure request"
    with pytest.raises(PurgedError, match=report.audit_id):
        await Objects(w.dst).read_all("mirror", "main", "a3")
    # The next source commit still reaches the mirror: a purged object is settled, not missing.
    await Objects(w.src).upload("origin", "main", "after-purge", b"new")
    head = await w.src.commit("origin", "main", committer="t", message="after the purge")
    await w.replicate()
    step = await engine.step()
    assert not step.errors
    assert (await w.dst.branch("mirror", "main")).commit_id == head.id
    assert await Objects(w.dst).read_all("mirror", "main", "after-purge") == b"new"
    # Applied once: another pass changes nothing.
    await engine.step()
    assert len(await w.dst.list_purges("mirror")) == 1
