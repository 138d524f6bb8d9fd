"""The retention walk over a history built by a real Graveler (memory KV and block stores) with a
controlled clock: branches, a merge, a tag and a deleted branch's dangling commit."""

from __future__ import annotations

from datetime import timedelta

from lakefs_core.kv.memory import MemoryKVStore
from lakefs_core.repos.graveler import Graveler
from lakefs_core.repos.stores import StoreRegistry
from lakefs_gc.mark.active import TagsPolicy, compute_active
from lakefs_gc.rules import GCRules
from tests.repos.support import WHEN, Clock, mem_namespace, new_graveler, record, unique


async def build(g: Graveler, clock: Clock) -> tuple[str, dict[str, str]]:
    """Day 0 init; 1 c1 (main); 5 g1 (branch 'gone', later deleted); 10 c2; 11 d1 (dev, from c2);
    20 c3 (main); 25 m1 = merge dev into main; tag v1 -> c1."""
    repo = unique()
    await g.create_repository(repo, mem_namespace())
    ids: dict[str, str] = {"init": (await g.branch(repo, "main")).commit_id}

    async def commit(branch: str, name: str, day: int) -> None:
        clock.now = WHEN + timedelta(days=day)
        await g.set_entry(repo, branch, record(f"{name}-key", name))
        ids[name] = (await g.commit(repo, branch, committer="t", message=name)).id

    await commit("main", "c1", 1)
    clock.now = WHEN + timedelta(days=5)
    await g.create_branch(repo, "gone", "main")
    await commit("gone", "g1", 5)
    await g.delete_branch(repo, "gone")
    await commit("main", "c2", 10)
    await g.create_branch(repo, "dev", "main")
    await commit("dev", "d1", 11)
    await commit("main", "c3", 20)
    clock.now = WHEN + timedelta(days=25)
    ids["m1"] = (await g.merge(repo, "dev", "main", committer="t", message="merge")).id
    await g.create_tag(repo, "v1", ids["c1"])
    return repo, ids


async def active_names(
    g: Graveler, repo: str, ids: dict[str, str], rules: GCRules | None, policy: TagsPolicy = "pin"
) -> set[str]:
    # Refs first, then the commit scan (the documented order).
    branches = {b.id: b.commit_id async for b in g.list_branches(repo)}
    tags = {t.id: t.commit_id async for t in g.list_tags(repo)}

    result = await compute_active(
        g.commit_nodes(repo),
        branches=branches,
        tags=tags,
        rules=rules,
        now=WHEN + timedelta(days=30),
        tags_policy=policy,
    )
    async with result:
        by_id = {v: k for k, v in ids.items()}
        assert result.num_commits == len(ids)
        return {by_id[c] async for c, _ in result.active()}


async def test_walk_over_real_history() -> None:
    kv, stores, clock = MemoryKVStore(), StoreRegistry(), Clock()
    try:
        g = new_graveler(kv, stores, clock=clock)
        repo, ids = await build(g, clock)
        everything = set(ids)
        assert await active_names(g, repo, ids, None) == everything
        # Default 7 days (threshold day 23): main keeps m1 and its first older commit c3. dev keeps
        # its head d1 only (a head is always active). The tag pins c1; g1 is an old dangling leaf.
        rules = GCRules.of(7)
        assert await active_names(g, repo, ids, rules) == {"m1", "c3", "d1", "c1"}
        assert await active_names(g, repo, ids, rules, "ignore") == {"m1", "c3", "d1"}
        # dev retained 30 days (threshold day 0): d1, c2, c1 and init (the first not after day 0).
        rules = GCRules.of(7, {"dev": 30})
        assert await active_names(g, repo, ids, rules, "ignore") == {"m1", "c3", "d1", "c2", "c1", "init"}
        # 26 days default (threshold day 4): g1 (day 5) is a dangling leaf inside the retention, so it
        # is active; main keeps everything after day 4 plus c1; init (day 0) expires.
        expected = everything - {"init"}
        assert await active_names(g, repo, ids, GCRules.of(26), "ignore") == expected
    finally:
        await stores.close()
        await kv.close()
