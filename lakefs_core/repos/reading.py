"""Reading entries of a ref: staged values over committed ones (spec section 7).

On a branch, the live staging token, then the sealed tokens (newest first), then the committed
metarange are consulted; a tombstone means "not found". ``ref@`` and ``~N``/``^N`` refs read
committed data only (:meth:`~lakefs_core.repos.context.RepoContext.resolve`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from lakefs_core.errors import NotFoundError
from lakefs_core.format.records import ValueRecord
from lakefs_core.refs.model import Repository
from lakefs_core.refs.staging import merge_sorted
from lakefs_core.repos.context import RepoContext, Resolved

__all__ = ["entry", "get_entry", "list_entries", "list_resolved"]


async def get_entry(ctx: RepoContext, repo_id: str, ref: str, key: bytes) -> ValueRecord:
    return await entry(ctx, await ctx.repository(repo_id), ref, key)


async def entry(ctx: RepoContext, repo: Repository, ref: str, key: bytes) -> ValueRecord:
    """:func:`get_entry` with the repository record already read (a read that needs it too)."""
    resolved = await ctx.resolve(repo, ref)
    staged = await ctx.staging.lookup(resolved.tokens, key) if resolved.tokens else None
    if staged is not None:
        if staged.is_tombstone:
            raise NotFoundError(f"object {key.decode(errors='replace')!r} not found in {ref!r}")
        return staged
    found = await (await ctx.metarange(repo, resolved.commit.metarange_id)).get(key)
    if found is None:
        raise NotFoundError(f"object {key.decode(errors='replace')!r} not found in {ref!r}")
    return found


async def list_entries(
    ctx: RepoContext, repo_id: str, ref: str, *, prefix: bytes = b"", after: bytes = b"", start: bytes = b""
) -> AsyncIterator[ValueRecord]:
    """Entries under ``prefix`` with key > ``after`` and >= ``start``, staging over committed,
    tombstones hidden."""
    repo = await ctx.repository(repo_id)
    async for record in list_resolved(
        ctx, repo, await ctx.resolve(repo, ref), prefix=prefix, after=after, start=start
    ):
        yield record


async def list_resolved(
    ctx: RepoContext,
    repo: Repository,
    resolved: Resolved,
    *,
    prefix: bytes = b"",
    after: bytes = b"",
    start: bytes = b"",
) -> AsyncIterator[ValueRecord]:
    """:func:`list_entries` of a ref already resolved: a listing that seeks several times (past each
    common prefix) reads one snapshot of the ref and resolves it once."""
    start = max(prefix, start, after + b"\x00" if after else b"")
    committed = await ctx.metarange(repo, resolved.commit.metarange_id)
    sources = [ctx.staging.scan(t, start) for t in resolved.tokens] + [committed.seek_ge(start)]
    async for record in merge_sorted(sources):
        if not record.key.startswith(prefix):
            break
        if not record.is_tombstone:
            yield record
