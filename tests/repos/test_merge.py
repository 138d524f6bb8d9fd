"""Merge (three-way, strategies, fast-forward shortcut, refusals), merge base, and revert."""

from __future__ import annotations

import pytest

from lakefs_core.committed.model import DiffType, MergeStrategy
from lakefs_core.errors import BadInputError, ConflictError, MergeConflictError, NoChangesError
from lakefs_core.repos.committing import MERGE_STRATEGY_KEY, merge_base
from lakefs_core.repos.graveler import Graveler
from tests.repos.support import collect, record


async def commit(g: Graveler, repo: str, branch: str = "main", message: str = "c") -> str:
    return (await g.commit(repo, branch, committer="tester", message=message)).id


async def content(g: Graveler, repo: str, ref: str) -> dict[bytes, bytes]:
    return {r.key: r.identity async for r in g.list_entries(repo, ref)}


async def setup_diverged(g: Graveler, repo: str) -> dict[str, bytes]:
    """main: base {a, b, c}; feature changes a, deletes b, adds f; main changes c, adds m.

    Returns the identities of the records written."""
    ids: dict[str, bytes] = {}
    for k in ("a", "b", "c"):
        rec = record(k, "base")
        ids[f"{k}.base"] = rec.identity
        await g.set_entry(repo, "main", rec)
    await commit(g, repo, message="base")
    await g.create_branch(repo, "feature", "main")
    await g.set_entry(repo, "feature", rec := record("a", "feature"))
    ids["a.feature"] = rec.identity
    await g.delete_entry(repo, "feature", b"b")
    await g.set_entry(repo, "feature", rec := record("f", "feature"))
    ids["f.feature"] = rec.identity
    await commit(g, repo, "feature", message="feature work")
    await g.set_entry(repo, "main", rec := record("c", "main"))
    ids["c.main"] = rec.identity
    await g.set_entry(repo, "main", rec := record("m", "main"))
    ids["m.main"] = rec.identity
    await commit(g, repo, message="main work")
    return ids


async def test_three_way_merge(g: Graveler, repo: str) -> None:
    ids = await setup_diverged(g, repo)
    dest_head = await g.get_commit(repo, "main")
    source_head = await g.get_commit(repo, "feature")
    merged = await g.merge(repo, "feature", "main", committer="merger", metadata={"why": "test"})
    assert merged.parents == (dest_head.id, source_head.id)
    assert merged.generation == max(dest_head.generation, source_head.generation) + 1
    assert merged.message == "Merge 'feature' into 'main'"
    assert merged.metadata == {"why": "test"}
    assert MERGE_STRATEGY_KEY not in merged.metadata
    assert merged.id == merged.computed_id()
    assert (await g.get_commit(repo, "main")).id == merged.id
    assert await content(g, repo, "main") == {
        b"a": ids["a.feature"],
        b"c": ids["c.main"],
        b"f": ids["f.feature"],
        b"m": ids["m.main"],
    }
    # The source is untouched.
    assert (await g.get_commit(repo, "feature")).id == source_head.id
    # Merging again: nothing new.
    with pytest.raises(NoChangesError):
        await g.merge(repo, "feature", "main", committer="merger")


async def test_merge_fast_forward_shortcut_reuses_the_source_tree(g: Graveler, repo: str) -> None:
    await g.set_entry(repo, "main", record("a"))
    await commit(g, repo)
    await g.create_branch(repo, "feature", "main")
    await g.set_entry(repo, "feature", record("f"))
    await commit(g, repo, "feature")
    dest = await g.get_commit(repo, "main")
    source = await g.get_commit(repo, "feature")
    merged = await g.merge(repo, "feature", "main", committer="t", message="ff")
    # Still a merge commit (lakeFS does not move the branch pointer), with the source's metarange.
    assert merged.parents == (dest.id, source.id)
    assert merged.metarange_id == source.metarange_id
    assert merged.message == "ff"
    assert await content(g, repo, "main") == await content(g, repo, "feature")


async def test_merge_conflict_lists_keys_and_changes_nothing(g: Graveler, repo: str) -> None:
    await g.set_entry(repo, "main", record("x", "base"))
    await g.set_entry(repo, "main", record("y", "base"))
    await commit(g, repo)
    await g.create_branch(repo, "feature", "main")
    await g.set_entry(repo, "feature", record("x", "feature"))
    await g.delete_entry(repo, "feature", b"y")
    await g.set_entry(repo, "feature", record("z", "feature"))
    await commit(g, repo, "feature")
    await g.set_entry(repo, "main", record("x", "main"))
    await g.set_entry(repo, "main", record("y", "main"))
    await g.set_entry(repo, "main", record("z", "main"))
    head = await commit(g, repo)
    with pytest.raises(MergeConflictError) as info:
        await g.merge(repo, "feature", "main", committer="t")
    assert sorted(info.value.keys) == [b"x", b"y", b"z"]
    assert (await g.get_commit(repo, "main")).id == head


async def test_same_change_on_both_sides_is_not_a_conflict(g: Graveler, repo: str) -> None:
    await g.set_entry(repo, "main", record("base"))
    await commit(g, repo)
    await g.create_branch(repo, "feature", "main")
    same = record("x", "same")
    await g.set_entry(repo, "feature", same)
    await g.set_entry(repo, "feature", record("only-feature"))
    await commit(g, repo, "feature")
    await g.set_entry(repo, "main", same)
    await commit(g, repo)
    await g.merge(repo, "feature", "main", committer="t")
    assert set(await content(g, repo, "main")) == {b"base", b"x", b"only-feature"}


@pytest.mark.parametrize("strategy", [MergeStrategy.SOURCE_WINS, MergeStrategy.DEST_WINS])
async def test_merge_strategies(g: Graveler, repo: str, strategy: MergeStrategy) -> None:
    await g.set_entry(repo, "main", record("x", "base"))
    await g.set_entry(repo, "main", record("y", "base"))
    await commit(g, repo)
    await g.create_branch(repo, "feature", "main")
    await g.set_entry(repo, "feature", fx := record("x", "feature"))
    await g.delete_entry(repo, "feature", b"y")
    await g.set_entry(repo, "feature", ff := record("f", "feature"))
    await commit(g, repo, "feature")
    await g.set_entry(repo, "main", mx := record("x", "main"))
    await g.set_entry(repo, "main", my := record("y", "main"))
    await commit(g, repo)
    merged = await g.merge(repo, "feature", "main", committer="t", strategy=strategy)
    assert merged.metadata[MERGE_STRATEGY_KEY] == strategy.value
    got = await content(g, repo, "main")
    if strategy is MergeStrategy.SOURCE_WINS:
        assert got == {b"x": fx.identity, b"f": ff.identity}
    else:
        assert got == {b"x": mx.identity, b"y": my.identity, b"f": ff.identity}


async def test_merge_refuses_dirty_destination(g: Graveler, repo: str) -> None:
    await setup_diverged(g, repo)
    await g.set_entry(repo, "main", record("dirty"))
    with pytest.raises(ConflictError, match="uncommitted"):
        await g.merge(repo, "feature", "main", committer="t")
    # A dirty source is fine: only its committed state is merged.
    await g.reset_branch(repo, "main")
    await g.set_entry(repo, "feature", record("staged-on-source"))
    await g.merge(repo, "feature", "main", committer="t")
    assert b"staged-on-source" not in await content(g, repo, "main")


async def test_merge_already_merged_and_ancestor_sources(g: Graveler, repo: str) -> None:
    await g.set_entry(repo, "main", record("a"))
    await commit(g, repo)
    await g.create_branch(repo, "feature", "main")
    # Source equal to destination.
    with pytest.raises(NoChangesError):
        await g.merge(repo, "feature", "main", committer="t")
    # Source is an ancestor of the destination.
    await g.set_entry(repo, "main", record("b"))
    await commit(g, repo)
    with pytest.raises(NoChangesError):
        await g.merge(repo, "feature", "main", committer="t")
    with pytest.raises(NoChangesError):
        await g.merge(repo, "main~1", "main", committer="t")


async def test_merge_from_tag_and_commit_id(g: Graveler, repo: str) -> None:
    await g.set_entry(repo, "main", record("a"))
    await commit(g, repo)
    await g.create_branch(repo, "feature", "main")
    await g.set_entry(repo, "feature", record("f1"))
    f1 = await commit(g, repo, "feature")
    await g.set_entry(repo, "feature", record("f2"))
    await commit(g, repo, "feature")
    await g.create_tag(repo, "rel", f1)
    merged = await g.merge(repo, "rel", "main", committer="t")
    assert merged.parents[1] == f1
    assert set(await content(g, repo, "main")) == {b"a", b"f1"}
    merged2 = await g.merge(repo, "feature", "main", committer="t")
    assert set(await content(g, repo, "main")) == {b"a", b"f1", b"f2"}
    base = await merge_base(
        g,
        await g.repository(repo),
        await g.get_commit(repo, "feature"),
        await g.get_commit(repo, merged2.parents[0]),
    )
    assert base is not None and base.id == f1


async def test_criss_cross_merges(g: Graveler, repo: str) -> None:
    await g.set_entry(repo, "main", record("a"))
    await commit(g, repo)
    await g.create_branch(repo, "feature", "main")
    for i in range(3):
        await g.set_entry(repo, "main", record(f"m{i}"))
        await commit(g, repo)
        await g.set_entry(repo, "feature", record(f"f{i}"))
        await commit(g, repo, "feature")
        await g.merge(repo, "feature", "main", committer="t")
        await g.merge(repo, "main", "feature", committer="t")
    assert await content(g, repo, "main") == await content(g, repo, "feature")
    assert len(await content(g, repo, "main")) == 7


async def test_merge_base(g: Graveler, repo: str) -> None:
    r = await g.repository(repo)
    root = await g.get_commit(repo, "main")
    await g.set_entry(repo, "main", record("a"))
    c1 = await commit(g, repo)
    await g.create_branch(repo, "x", "main")
    await g.set_entry(repo, "x", record("x"))
    await commit(g, repo, "x")
    await g.set_entry(repo, "main", record("m"))
    await commit(g, repo)
    base = await merge_base(g, r, await g.get_commit(repo, "main"), await g.get_commit(repo, "x"))
    assert base is not None and base.id == c1
    same = await merge_base(g, r, root, root)
    assert same is not None and same.id == root.id
    anc = await merge_base(g, r, root, await g.get_commit(repo, "main"))
    assert anc is not None and anc.id == root.id


# -- revert -----------------------------------------------------------------------------------------------


async def test_revert_a_commit(g: Graveler, repo: str) -> None:
    await g.set_entry(repo, "main", a1 := record("a", "1"))
    await g.set_entry(repo, "main", b1 := record("b", "1"))
    await commit(g, repo)
    await g.set_entry(repo, "main", record("a", "2"))
    await g.delete_entry(repo, "main", b"b")
    await g.set_entry(repo, "main", record("c"))
    target = await commit(g, repo)
    await g.set_entry(repo, "main", d := record("d"))
    later = await commit(g, repo)
    reverted = await g.revert(repo, "main", target, committer="reverter")
    assert reverted.parents == (later,)
    assert reverted.message == f"Revert {target}"
    assert await content(g, repo, "main") == {b"a": a1.identity, b"b": b1.identity, b"d": d.identity}
    changes = {(x.type, x.key) for x in await collect(g.diff(repo, later, reverted.id))}
    assert changes == {(DiffType.CHANGED, b"a"), (DiffType.ADDED, b"b"), (DiffType.REMOVED, b"c")}


async def test_revert_conflict(g: Graveler, repo: str) -> None:
    await g.set_entry(repo, "main", record("a", "1"))
    await commit(g, repo)
    await g.set_entry(repo, "main", record("a", "2"))
    target = await commit(g, repo)
    await g.set_entry(repo, "main", record("a", "3"))
    head = await commit(g, repo)
    with pytest.raises(MergeConflictError) as info:
        await g.revert(repo, "main", target, committer="t")
    assert info.value.keys == [b"a"]
    assert (await g.get_commit(repo, "main")).id == head


async def test_revert_a_merge_commit(g: Graveler, repo: str) -> None:
    ids = await setup_diverged(g, repo)
    before = await content(g, repo, "main")
    merged = await g.merge(repo, "feature", "main", committer="t")
    reverted = await g.revert(repo, "main", merged.id, committer="t", parent_number=1)
    assert reverted.parents == (merged.id,)
    assert await content(g, repo, "main") == before
    assert before[b"c"] == ids["c.main"]
    # Reverting with parent 2 instead undoes what main brought in relative to feature.
    await g.create_branch(repo, "other", merged.id)
    await g.revert(repo, "other", merged.id, committer="t", parent_number=2)
    assert await content(g, repo, "other") == await content(g, repo, "feature")


async def test_revert_refusals(g: Graveler, repo: str) -> None:
    root = (await g.get_commit(repo, "main")).id
    with pytest.raises(BadInputError):
        await g.revert(repo, "main", root, committer="t")
    await g.set_entry(repo, "main", record("a"))
    c1 = await commit(g, repo)
    with pytest.raises(BadInputError):
        await g.revert(repo, "main", c1, committer="t", parent_number=2)
    with pytest.raises(BadInputError):
        await g.revert(repo, "main", c1, committer="t", parent_number=0)
    await g.set_entry(repo, "main", record("dirty"))
    with pytest.raises(ConflictError, match="uncommitted"):
        await g.revert(repo, "main", c1, committer="t")


async def test_cherry_pick_applies_a_commits_change(g: Graveler, repo: str) -> None:
    # issue 38 (lakeFS's CherryPick): the feature commit's change lands on main, keeping the
    # original's message and metadata plus the cherry-pick keys; main's own work stays
    ids = await setup_diverged(g, repo)
    picked_from = await g.get_commit(repo, "feature")
    made = await g.cherry_pick(repo, "main", "feature", committer="picker")
    head_before = made.parents[0]
    assert made.message == "feature work" and made.committer == "picker"
    assert made.metadata["cherry-pick-origin"] == picked_from.id
    assert made.metadata["cherry-pick-committer"] == picked_from.committer
    assert await content(g, repo, "main") == {
        b"a": ids["a.feature"],
        b"c": ids["c.main"],
        b"f": ids["f.feature"],
        b"m": ids["m.main"],
    }
    changes = {(x.type, x.key) for x in await collect(g.diff(repo, head_before, made.id))}
    assert changes == {(DiffType.CHANGED, b"a"), (DiffType.REMOVED, b"b"), (DiffType.ADDED, b"f")}
    # applied again: the change is already there
    with pytest.raises(NoChangesError):
        await g.cherry_pick(repo, "main", "feature", committer="picker")


async def test_cherry_pick_of_a_merge_commit_needs_its_parent(g: Graveler, repo: str) -> None:
    await setup_diverged(g, repo)
    merged = await g.merge(repo, "feature", "main", committer="t")
    await g.create_branch(repo, "other", "main~1")
    with pytest.raises(BadInputError, match="merge commit"):
        await g.cherry_pick(repo, "other", merged.id, committer="t")
    with pytest.raises(BadInputError, match="parent"):
        await g.cherry_pick(repo, "other", merged.id, committer="t", parent_number=3)
    # parent 1 (main's side): the merge's change relative to main is feature's work
    await g.cherry_pick(repo, "other", merged.id, committer="t", parent_number=1)
    assert await content(g, repo, "other") == await content(g, repo, merged.id)
