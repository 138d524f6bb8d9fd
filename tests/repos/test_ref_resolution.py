"""Ref resolution in lakeFS's order: an existing full commit id, then a branch, then a tag; and no
new branch or tag may be named like a full commit id (issue 8)."""

from __future__ import annotations

import pytest

from lakefs_core.errors import BadInputError, NotFoundError
from lakefs_core.refs import kvkeys
from lakefs_core.refs.model import Branch, Tag
from lakefs_core.repos.graveler import Graveler
from tests.repos.support import record


async def _commit(g: Graveler, repo: str, branch: str, key: str, content: str) -> str:
    await g.set_entry(repo, branch, record(key, content))
    return (await g.commit(repo, branch, committer="t", message=content)).id


async def test_full_commit_id_wins_over_a_branch_of_that_name(g: Graveler, repo: str) -> None:
    first = await _commit(g, repo, "main", "k", "one")
    second = await _commit(g, repo, "main", "k", "two")
    r = await g.repository(repo)
    # A branch record named like commit `first` but pointing at `second` (as a store written by an
    # older version or another tool may hold): the commit id must still name the commit.
    await g.refs.create_branch(r, Branch(first, second, kvkeys.new_staging_token(repo, first)))
    resolved = await g.resolve(r, first)
    assert resolved.commit.id == first
    assert resolved.branch is None  # a commit: no staged changes visible through it
    assert (await g.get_entry(repo, first, b"k")).identity == (
        await g.get_entry(repo, f"{second}~1", b"k")
    ).identity
    assert (await g.get_entry(repo, first, b"k")).identity != (await g.get_entry(repo, second, b"k")).identity


async def test_a_commit_id_that_is_no_commit_falls_back_to_branch_then_tag(g: Graveler, repo: str) -> None:
    head = await _commit(g, repo, "main", "k", "one")
    r = await g.repository(repo)
    ghost = "a" * 64  # no such commit
    await g.refs.create_tag(r, Tag(ghost, head))
    assert (await g.resolve(r, ghost)).commit.id == head
    with pytest.raises(NotFoundError, match="no such branch, tag or commit"):
        await g.resolve(r, "b" * 64)


async def test_branch_before_tag(g: Graveler, repo: str) -> None:
    first = await _commit(g, repo, "main", "k", "one")
    second = await _commit(g, repo, "main", "k", "two")
    await g.create_tag(repo, "same", first)
    await g.create_branch(repo, "same", second)
    assert (await g.resolve(await g.repository(repo), "same")).commit.id == second


async def test_branch_and_tag_may_not_be_named_like_a_commit_id(g: Graveler, repo: str) -> None:
    head = await _commit(g, repo, "main", "k", "one")
    with pytest.raises(BadInputError, match="commit id"):
        await g.create_branch(repo, head, "main")
    with pytest.raises(BadInputError, match="commit id"):
        await g.create_branch(repo, "f" * 64, "main")
    with pytest.raises(BadInputError):
        await g.create_tag(repo, head, "main")
    with pytest.raises(BadInputError, match="commit id"):
        await g.create_repository("rcid" + head[:8], "mem://rcid/x", default_branch=head)
    # Not 64 hex digits: ordinary names.
    await g.create_branch(repo, head[:63], "main")
    await g.create_branch(repo, head.upper(), "main")
