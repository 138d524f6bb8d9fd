"""History and differences for the :class:`~lakefs_core.repos.graveler.Graveler` facade.

- :func:`log`: first-parent history from a ref, paged by ``amount`` and ``after`` (a commit id).
- :func:`diff`: committed differences between two refs' metaranges.
- :func:`diff_uncommitted`: a branch's staged changes (live token, then sealed ones, newest first)
  against its head commit; a tombstone over nothing is no change.

All are streams: nothing is held beyond the current page of the KV or of a table. Each function
takes the facade's :class:`~lakefs_core.repos.context.RepoContext`; none imports the facade.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from lakefs_core.committed.diff import diff as diff_metaranges
from lakefs_core.committed.model import DiffRecord, DiffType
from lakefs_core.refs.model import Commit
from lakefs_core.repos.context import RepoContext


async def log(
    ctx: RepoContext, repo_id: str, ref: str, *, amount: int | None, after: str | None
) -> AsyncIterator[Commit]:
    repo = await ctx.repository(repo_id)
    commit: Commit | None = (await ctx.resolve(repo, ref)).commit
    skipping = after is not None
    n = 0
    while commit is not None and (amount is None or n < amount):
        if not skipping:
            yield commit
            n += 1
        elif commit.id == after:
            skipping = False
        commit = await ctx.refs.get_commit(repo, commit.parents[0]) if commit.parents else None


async def diff(ctx: RepoContext, repo_id: str, left_ref: str, right_ref: str) -> AsyncIterator[DiffRecord]:
    repo = await ctx.repository(repo_id)
    left = await ctx.metarange(repo, (await ctx.resolve(repo, left_ref)).commit.metarange_id)
    right = await ctx.metarange(repo, (await ctx.resolve(repo, right_ref)).commit.metarange_id)
    async for record in diff_metaranges(left, right):
        yield record


async def diff_uncommitted(ctx: RepoContext, repo_id: str, branch_id: str) -> AsyncIterator[DiffRecord]:
    repo = await ctx.repository(repo_id)
    branch, _ = await ctx.refs.get_branch(repo, branch_id)
    head = await ctx.refs.get_commit(repo, branch.commit_id)
    committed = await ctx.metarange(repo, head.metarange_id)
    async for staged in ctx.staging.merged((branch.staging_token, *branch.sealed_tokens)):
        old = await committed.get(staged.key)
        if staged.is_tombstone:
            if old is not None:
                yield DiffRecord(DiffType.REMOVED, staged.key, old, None)
        elif old is None:
            yield DiffRecord(DiffType.ADDED, staged.key, None, staged)
        elif old.identity != staged.identity:
            yield DiffRecord(DiffType.CHANGED, staged.key, old, staged)
