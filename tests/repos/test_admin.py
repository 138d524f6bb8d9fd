"""The Graveler facade's administrative ref moves and history queries (lakefs_core.repos.admin)."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import UTC, datetime

import pytest

from lakefs_core.errors import (
    BadInputError,
    CorruptDataError,
    NotFoundError,
    PreconditionFailedError,
    ReadOnlyError,
)
from lakefs_core.repos.graveler import Commit, Graveler
from tests.repos.support import mem_namespace, record, unique


async def _commit(g: Graveler, repo: str, branch: str = "main", key: str = "k") -> Commit:
    await g.set_entry(repo, branch, record(key, unique("v")))
    return await g.commit(repo, branch, committer="t", message=key)


async def test_set_branch_head_if_moves_only_from_expected(g: Graveler, repo: str) -> None:
    first = await g.branch(repo, "main")
    c1 = await _commit(g, repo, key="a")
    c2 = await _commit(g, repo, key="b")
    moved = await g.set_branch_head_if(repo, "main", c2.id, first.commit_id)
    assert moved.commit_id == first.commit_id and (await g.branch(repo, "main")).commit_id == first.commit_id
    assert moved.staging_token == (await g.branch(repo, "main")).staging_token  # staging kept
    with pytest.raises(PreconditionFailedError, match="moved"):
        await g.set_branch_head_if(repo, "main", c2.id, c1.id)  # it is no longer at c2
    assert (await g.branch(repo, "main")).commit_id == first.commit_id


async def test_set_branch_head_if_creates_when_expected_is_none(g: Graveler, repo: str) -> None:
    c1 = await _commit(g, repo)
    created = await g.set_branch_head_if(repo, "feature", None, c1.id)
    assert (await g.branch(repo, "feature")) == created and created.commit_id == c1.id
    assert created.sealed_tokens == ()
    with pytest.raises(PreconditionFailedError, match="moved"):
        await g.set_branch_head_if(repo, "feature", None, c1.id)  # exists now


async def test_refs_never_point_at_missing_commits_or_bad_names(g: Graveler, repo: str) -> None:
    head = (await g.branch(repo, "main")).commit_id
    with pytest.raises(NotFoundError):
        await g.set_branch_head_if(repo, "main", head, "f" * 64)
    with pytest.raises(NotFoundError):
        await g.set_tag_if(repo, "v1", None, "f" * 64)
    with pytest.raises(BadInputError):
        await g.set_branch_head_if(repo, "bad name", None, head)
    with pytest.raises(BadInputError):
        await g.set_tag_if(repo, "bad name", None, head)
    assert (await g.branch(repo, "main")).commit_id == head


async def test_set_tag_if_is_compare_and_swap(g: Graveler, repo: str) -> None:
    c1 = await _commit(g, repo, key="a")
    c2 = await _commit(g, repo, key="b")
    assert (await g.set_tag_if(repo, "v1", None, c1.id)).commit_id == c1.id
    with pytest.raises(PreconditionFailedError):
        await g.set_tag_if(repo, "v1", None, c2.id)
    with pytest.raises(PreconditionFailedError):
        await g.set_tag_if(repo, "v1", c2.id, c1.id)
    await g.set_tag_if(repo, "v1", c1.id, c2.id)
    assert (await g.tag(repo, "v1")).commit_id == c2.id


async def test_racing_moves_from_one_head_have_one_winner(g: Graveler, repo: str) -> None:
    base = (await g.branch(repo, "main")).commit_id
    targets = [await _commit(g, repo, key=f"k{i}") for i in range(4)]
    await g.set_branch_head_if(repo, "main", targets[-1].id, base)
    outcomes = await asyncio.gather(
        *(g.set_branch_head_if(repo, "main", base, t.id) for t in targets), return_exceptions=True
    )
    winners = [o for o in outcomes if not isinstance(o, BaseException)]
    assert len(winners) == 1
    assert all(isinstance(o, PreconditionFailedError) for o in outcomes if isinstance(o, BaseException))
    assert (await g.branch(repo, "main")).commit_id == winners[0].commit_id


async def test_read_only_repositories_need_force(g: Graveler) -> None:
    repo = unique()
    await g.create_repository(repo, mem_namespace(), read_only=True)
    head = await g.get_commit_by_id(repo, (await g.branch(repo, "main")).commit_id)
    child = Commit.create(
        committer="mirror",
        message="m",
        metarange_id="",
        creation_date=datetime.now(UTC),
        parents=(head.id,),
        generation=head.generation + 1,
    )
    for attempt in (
        g.put_commit(repo, child),
        g.set_branch_head_if(repo, "main", head.id, head.id),
        g.set_tag_if(repo, "v1", None, head.id),
    ):
        with pytest.raises(ReadOnlyError):
            await attempt
    await g.put_commit(repo, child, force=True)
    await g.put_commit(repo, child, force=True)  # idempotent
    assert await g.has_commit(repo, child.id)
    await g.set_branch_head_if(repo, "main", head.id, child.id, force=True)
    await g.set_tag_if(repo, "v1", None, child.id, force=True)
    assert (await g.branch(repo, "main")).commit_id == child.id
    assert (await g.tag(repo, "v1")).commit_id == child.id


async def test_put_commit_refuses_a_record_that_does_not_hash_to_its_id(g: Graveler, repo: str) -> None:
    head = await g.get_commit_by_id(repo, (await g.branch(repo, "main")).commit_id)
    forged = replace(head, message="rewritten history")
    with pytest.raises(CorruptDataError):
        await g.put_commit(repo, forged)
    assert (await g.get_commit_by_id(repo, head.id)).message == head.message


async def test_is_descendant_and_commit_reads(g: Graveler, repo: str) -> None:
    root = (await g.branch(repo, "main")).commit_id
    c1 = await _commit(g, repo, key="a")
    await g.create_branch(repo, "side", c1.id)
    side = await _commit(g, repo, branch="side", key="s")
    c2 = await _commit(g, repo, key="b")
    merged = await g.merge(repo, "side", "main", committer="t")
    assert await g.is_descendant(repo, merged.id, side.id)  # through the second parent
    assert await g.is_descendant(repo, merged.id, root)
    assert await g.is_descendant(repo, c2.id, c2.id)
    assert not await g.is_descendant(repo, c2.id, side.id)
    assert not await g.is_descendant(repo, c1.id, c2.id)
    assert await g.has_commit(repo, side.id) and not await g.has_commit(repo, "f" * 64)
    with pytest.raises(NotFoundError):
        await g.get_commit_by_id(repo, "main")  # ids only: no ref resolution
    with pytest.raises(NotFoundError):
        await g.is_descendant(repo, c2.id, "f" * 64)
