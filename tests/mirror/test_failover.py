"""Failover and failback (lakefs_mirror.failover) and what a paused mirror reports, on the engine's
two-region world (memory stores, SQLite mirrors database): promote, writes on both sides, failback
keeping the old source's divergence, the reverse mirror catching up, the second promote."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from lakefs_core.errors import ConflictError, ReadOnlyError
from lakefs_core.repos.graveler import Graveler
from lakefs_core.repos.objects import Objects
from lakefs_mirror.engine import EngineSettings, MirrorEngine
from lakefs_mirror.failover import FAILBACK_PREFIX, failback, promote
from lakefs_mirror.metrics import MirrorMetrics
from tests.mirror.test_engine import World, add_mirror, mirror_head, open_world, write_commit


def reverse_engine(w: World) -> MirrorEngine:
    """The old source region's daemon ("us"), mirroring the promoted repository back."""
    return MirrorEngine(
        region="us",
        gravelers={"us": w.src, "eu": w.dst},
        db=w.db,
        presence=w.presence,
        metrics=MirrorMetrics(region="us"),
        settings=EngineSettings(active_copy_grace_seconds=0),
        holder="us-1",
    )


async def commit_on(g: Graveler, repo: str, tag: str, n: int = 3) -> str:
    objects = Objects(g)
    for i in range(n):
        await objects.upload(repo, "main", f"{tag}/part-{i}", f"{tag}-{i}".encode())
    return (await g.commit(repo, "main", committer="t", message=tag)).id


async def assert_heads_complete(g: Graveler, repo: str) -> None:
    """Every object of every branch head of ``repo`` is readable in its own namespace."""
    objects = Objects(g)
    async for branch in g.list_branches(repo):
        page = await objects.list(repo, branch.commit_id, prefix="")
        for obj in page.objects:
            await objects.read_all(repo, branch.commit_id, obj.path)


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    async with open_world(tmp_path) as w:
        yield w


async def test_paused_mirror_reports_the_real_source_head_and_a_growing_lag(tmp_path: Path) -> None:
    now = [datetime.now(UTC)]
    async with open_world(tmp_path, clock=lambda: now[0]) as w:
        mid = await add_mirror(w, mode="active")
        engine = w.engine(active_copy_grace_seconds=0)
        await write_commit(w.src, 3, "a")
        await engine.step()
        caught = {s.branch: s for s in await w.db.list_status(mid)}["main"]
        assert caught.mirror_head == caught.source_head
        await w.db.update_mirror(mid, None, paused=True)
        head = await write_commit(w.src, 3, "b")
        lags = []
        for _ in range(2):
            now[0] += timedelta(seconds=30)
            report = await engine.step()
            assert report.promotions == 0 and not report.errors
            row = {s.branch: s for s in await w.db.list_status(mid)}["main"]
            assert row.source_head == head and row.mirror_head == caught.mirror_head
            assert row.candidate == head and row.lag_seconds is not None
            lags.append(row.lag_seconds)
            labels = {"region": "eu", "mirror": "mirror", "branch": "main"}
            reg = engine.metrics.registry
            assert reg.get_sample_value("lakefs_mirror_commits_pending", labels) == 1
            assert reg.get_sample_value("lakefs_mirror_freshness_lag_seconds", labels) == row.lag_seconds
        assert lags[1] > lags[0] > 0  # the lag alert can fire while paused


async def test_promote_refused_while_the_source_is_reachable_and_the_mirror_runs(world: World) -> None:
    w = world
    mid = await add_mirror(w, mode="active")
    await write_commit(w.src, 3, "a")
    await w.engine(active_copy_grace_seconds=0).step()
    gravelers = {"us": w.src, "eu": w.dst}
    with pytest.raises(ConflictError, match="reachable"):
        await promote(w.db, gravelers, mid)
    assert await w.db.promotion(mid) is None and (await w.dst.repository("mirror")).read_only
    # Planned switch: paused, source reachable -> the source turns read-only first, writes move over.
    await w.db.update_mirror(mid, None, paused=True)
    p = await promote(w.db, gravelers, mid)
    assert p.source_reachable and not p.forced
    assert (await w.src.repository("origin")).read_only
    assert not (await w.dst.repository("mirror")).read_only
    assert p.heads["branch:main"] == p.source_heads["branch:main"] == await mirror_head(w)
    with pytest.raises(ReadOnlyError):
        await Objects(w.src).upload("origin", "main", "late", b"x")
    # A second promote is idempotent (completes an interrupted one), and mirroring stopped.
    assert (await promote(w.db, gravelers, mid)).promoted_at == p.promoted_at
    assert await w.db.mirrors_for_region("eu") == []


async def test_failover_failback_keeps_both_sides_commits(world: World) -> None:
    w = world
    mid = await add_mirror(w, mode="active")
    engine = w.engine(active_copy_grace_seconds=0)
    acked_src = [await write_commit(w.src, 3, "a"), await write_commit(w.src, 3, "b")]
    await engine.step()
    last_mirrored = await mirror_head(w)
    assert last_mirrored == acked_src[-1]
    # The source region goes dark (this daemon cannot reach it) after more acknowledged commits.
    lost_region_commit = await write_commit(w.src, 3, "c")
    p = await promote(w.db, {"eu": w.dst}, mid)
    assert not p.source_reachable and p.heads["branch:main"] == last_mirrored
    assert p.source_heads["branch:main"] == last_mirrored  # what the daemon last saw
    await assert_heads_complete(w.dst, "mirror")
    acked_dst = [await commit_on(w.dst, "mirror", f"eu{i}") for i in range(2)]
    assert (await engine.step()).mirrors == 0  # no more mirroring into the promoted repository

    # The source region is back: fail back. Its commit after the last mirrored one is kept.
    stamp = datetime(2026, 2, 3, 4, 5, 6, tzinfo=UTC)
    result = await failback(w.db, {"us": w.src, "eu": w.dst}, mid, mode="active", clock=lambda: stamp)
    keeper = f"{FAILBACK_PREFIX}20260203T040506Z-main"
    assert result.kept == {"branch:main": keeper}
    assert (await w.src.branch("origin", keeper)).commit_id == lost_region_commit
    assert (await w.src.branch("origin", "main")).commit_id == last_mirrored
    assert (await w.src.repository("origin")).read_only
    assert keeper in result.note and (await w.db.failback_of(result.reverse.id)) is not None
    with pytest.raises(ConflictError, match="already failed back"):
        await failback(w.db, {"us": w.src, "eu": w.dst}, mid)

    back = reverse_engine(w)
    report = await back.step()
    assert report.promotions == 1, report.errors
    assert (await w.src.branch("origin", "main")).commit_id == acked_dst[-1]
    assert (await w.src.branch("origin", keeper)).commit_id == lost_region_commit  # never overwritten
    await assert_heads_complete(w.src, "origin")
    history = [c.id async for c in w.src.log("origin", "main")]
    assert set(acked_src + acked_dst) <= set(history)

    # Second promote returns writes to the original region.
    with pytest.raises(ConflictError):
        await promote(w.db, {"us": w.src, "eu": w.dst}, result.reverse.id)
    await w.db.update_mirror(result.reverse.id, None, paused=True)
    await promote(w.db, {"us": w.src, "eu": w.dst}, result.reverse.id)
    assert not (await w.src.repository("origin")).read_only
    assert (await w.dst.repository("mirror")).read_only
    final = await commit_on(w.src, "origin", "home")
    assert (await w.src.get_commit_by_id("origin", final)).parents == (acked_dst[-1],)
    assert (await back.step()).mirrors == 0


async def test_promote_unknown_or_not_promoted(world: World) -> None:
    w = world
    mid = await add_mirror(w)
    with pytest.raises(ConflictError, match="not promoted"):
        await failback(w.db, {"us": w.src, "eu": w.dst}, mid)
