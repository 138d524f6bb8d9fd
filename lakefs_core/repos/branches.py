"""Branches and tags for the :class:`~lakefs_core.repos.graveler.Graveler` facade: creation, deletion,
reset (user moves; the administrative compare-and-swap moves are :mod:`.admin`'s).

- Every change refuses a read-only repository unless ``force`` (a mirror's own moves).
- A new branch gets a fresh, empty staging token at its source's commit.
- Deleting a branch (never the default one) or resetting it marks its old tokens for cleanup as
  ``discarded``: their entries are garbage for retention GC and hard delete.
- A reset checks branch protection (a staging write, or a reset with ``to_ref``), then swaps the
  branch record by compare-and-swap, retried while the branch keeps changing.

Each function takes the facade's :class:`~lakefs_core.repos.context.RepoContext`; none imports the
facade.
"""

from __future__ import annotations

from dataclasses import replace

from lakefs_core.errors import ConflictError
from lakefs_core.refs import kvkeys
from lakefs_core.refs.ids import validate_branch_id, validate_tag_id
from lakefs_core.refs.model import Branch, Tag
from lakefs_core.repos import protection
from lakefs_core.repos.context import RepoContext
from lakefs_core.repos.retry import cas_retrying, exhausted_as


async def create_branch(
    ctx: RepoContext, repo_id: str, name: str, source_ref: str, *, force: bool, hidden: bool
) -> Branch:
    repo = await ctx.repository(repo_id)
    ctx.writable(repo, force)
    validate_branch_id(name)
    source = await ctx.resolve(repo, source_ref)
    branch = Branch(name, source.commit.id, kvkeys.new_staging_token(repo.id, name), hidden=hidden)
    await ctx.refs.create_branch(repo, branch)
    return branch


async def delete_branch(ctx: RepoContext, repo_id: str, name: str, *, force: bool) -> None:
    repo = await ctx.repository(repo_id)
    ctx.writable(repo, force)
    if name == repo.default_branch:
        raise ConflictError(f"cannot delete the default branch {name!r} of repository {repo.id!r}")
    branch, _ = await ctx.refs.get_branch(repo, name)
    await ctx.refs.delete_branch(repo, name)
    ctx.write_cache.forget(repo, name)  # this process's uploads to it fail before writing bytes
    tokens = (branch.staging_token, *branch.sealed_tokens)
    await ctx.refs.mark_for_cleanup(tokens, ctx.clock(), "discarded")


async def reset_branch(
    ctx: RepoContext, repo_id: str, name: str, to_ref: str | None, *, force: bool
) -> Branch:
    repo = await ctx.repository(repo_id)
    ctx.writable(repo, force)
    if to_ref is None:
        await protection.check(ctx, repo, name, protection.Action.STAGING_WRITE)
    else:
        await protection.check_reset(ctx, repo, name)
    target = (await ctx.resolve(repo, to_ref)).commit.id if to_ref is not None else None
    with exhausted_as(f"branch {name!r} kept changing during reset"):
        async for attempt in cas_retrying(ctx.settings):
            with attempt:
                branch, raw = await ctx.refs.get_branch(repo, name)
                reset = replace(
                    branch,
                    staging_token=kvkeys.new_staging_token(repo.id, name),
                    sealed_tokens=(),
                    commit_id=target or branch.commit_id,
                )
                await ctx.refs.cas_branch(repo, reset, raw)
    tokens = (branch.staging_token, *branch.sealed_tokens)
    await ctx.refs.mark_for_cleanup(tokens, ctx.clock(), "discarded")
    return reset


async def create_tag(ctx: RepoContext, repo_id: str, tag: str, ref: str, *, force: bool) -> Tag:
    repo = await ctx.repository(repo_id)
    ctx.writable(repo, force)
    validate_tag_id(tag)
    record = Tag(tag, (await ctx.resolve(repo, ref)).commit.id)
    await ctx.refs.create_tag(repo, record)
    return record


async def delete_tag(ctx: RepoContext, repo_id: str, tag: str, *, force: bool) -> None:
    repo = await ctx.repository(repo_id)
    ctx.writable(repo, force)
    await ctx.refs.delete_tag(repo, tag)
