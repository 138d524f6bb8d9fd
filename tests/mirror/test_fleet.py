"""At fleet scale an idle pass costs O(changed mirrors) (lakefs_mirror.quiet): settled mirrors whose
source did not move are skipped, a changed one is visited and promoted in the same pass, and every
``full_pass_seconds`` all are visited. Real engine, memory stores, SQLite mirrors database."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lakefs_core.namespace import StorageNamespace
from lakefs_core.repos.graveler import Graveler
from lakefs_core.repos.objects import Objects
from lakefs_mirror.engine import EngineSettings, MirrorEngine
from lakefs_mirror.metrics import MirrorMetrics
from tests.mirror.test_engine import World, open_world


async def commit(g: Graveler, repo: str, tag: str) -> str:
    await Objects(g).upload(repo, "main", f"{tag}/x", tag.encode())
    return (await g.commit(repo, "main", committer="t", message=tag)).id


async def mirrored_repo(w: World, name: str, **settings: Any) -> None:
    """Source repository ``name`` with one commit, mirrored into eu as ``<name>-m`` (active mode)."""
    await w.src.create_repository(name, f"mem://fleet-src/{name}")
    await commit(w.src, name, "first")
    await w.db.create_mirror(
        source_repo=name,
        source_region="us",
        name=f"{name}-m",
        region="eu",
        storage_namespace=StorageNamespace.parse(f"mem://fleet-dst/{name}").uri,
        mode="active",
        **settings,
    )


async def test_idle_pass_skips_settled_mirrors_and_visits_changed_ones(tmp_path: Path) -> None:
    now = [1000.0]
    async with open_world(tmp_path) as w:
        names = [f"repo-{i}" for i in range(4)]
        for name in names:
            await mirrored_repo(w, name)
        engine = make_engine(w, now)
        first = await engine.step()
        assert first.mirrors == 4 and first.promotions == 4 and not first.errors
        now[0] += 1
        idle = await engine.step()
        assert (idle.mirrors, idle.skipped, idle.promotions) == (0, 4, 0)
        head = await commit(w.src, "repo-2", "second")
        now[0] += 1
        changed = await engine.step()
        assert (changed.mirrors, changed.skipped, changed.promotions) == (1, 3, 1)
        assert (await w.dst.branch("repo-2-m", "main")).commit_id == head
        now[0] += 1
        assert (await engine.step()).skipped == 4
        # a resync request changes the record: visited
        mirror = await w.db.mirror_named("eu", "repo-1-m")
        assert mirror is not None
        await w.db.request_resync(mirror.id)
        now[0] += 1
        assert (await engine.step()).mirrors == 1
        now[0] += 60  # the full pass: everything visited again
        full = await engine.step()
        assert full.mirrors == 4 and full.skipped == 0


def make_engine(w: World, now: list[float]) -> MirrorEngine:
    return MirrorEngine(
        region="eu",
        gravelers={"us": w.src, "eu": w.dst},
        db=w.db,
        presence=w.presence,
        metrics=MirrorMetrics(region="eu"),
        settings=EngineSettings(active_copy_grace_seconds=0, full_pass_seconds=60),
        holder="fleet",
        monotonic=lambda: now[0],
    )


async def test_tags_wanted_branches_and_a_vanished_source_are_noticed(tmp_path: Path) -> None:
    """The batched fingerprints (one read of the records, one scan of the refs for all mirrors)
    see what the per-mirror reads saw: a new tag and a new wanted branch are visited, a branch
    outside the filter is not, a mirror whose source is gone is visited and reports it."""
    now = [1000.0]
    async with open_world(tmp_path) as w:
        for name, tags in (("tagged", True), ("filtered", False), ("doomed", False)):
            await mirrored_repo(w, name, mirror_tags=tags, branch_filter=["main", "rel-*"])
        engine = make_engine(w, now)
        assert (await engine.step()).promotions == 3
        now[0] += 1
        assert (await engine.step()).skipped == 3
        await w.src.create_tag("tagged", "v1", "main")
        await w.src.create_tag("filtered", "v1", "main")  # tags not mirrored: no change
        await w.src.create_branch("filtered", "dev", "main")  # outside the filter: no change
        now[0] += 1
        rep = await engine.step()
        assert (rep.mirrors, rep.skipped) == (1, 2), rep
        assert (await w.dst.tag("tagged-m", "v1")).commit_id == (await w.src.tag("tagged", "v1")).commit_id
        await w.src.create_branch("filtered", "rel-1", "main")
        await w.src.delete_repository("doomed")
        now[0] += 1
        rep = await engine.step()
        assert (rep.mirrors, rep.skipped) == (2, 1), rep
        assert any("doomed" in e for e in rep.errors), rep.errors
        assert (await w.dst.branch("filtered-m", "rel-1")).commit_id
        now[0] += 1
        rep = await engine.step()
        assert (rep.mirrors, rep.skipped) == (1, 2), rep  # the broken one stays unsettled
