"""Reading entries of a ref: staged values over committed ones (spec section 7).

On a branch, the live staging token, then the sealed tokens (newest first), then the committed
metarange are consulted; a tombstone means "not found". ``ref@`` and ``~N``/``^N`` refs read
committed data only (:meth:`~lakefs_core.repos.context.RepoContext.resolve`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence

from lakefs_core.errors import NotFoundError
from lakefs_core.format.records import ValueRecord, decode_staged_entry
from lakefs_core.kv.base import KVEntry
from lakefs_core.refs.model import Branch, Repository
from lakefs_core.refs.staging import MergedCursor, RecordCursor
from lakefs_core.repos.context import RepoContext, Resolved

__all__ = [
    "EntryCursor",
    "cursor_range",
    "entry",
    "entry_cursor",
    "get_entry",
    "list_entries",
    "list_resolved",
    "prefix_successor",
    "staged_in_range",
    "unstaged_entry",
]


async def get_entry(ctx: RepoContext, repo_id: str, ref: str, key: bytes) -> ValueRecord:
    return await entry(ctx, await ctx.repository(repo_id), ref, key)


async def entry(ctx: RepoContext, repo: Repository, ref: str, key: bytes) -> ValueRecord:
    """:func:`get_entry` with the repository record already read (a read that needs it too). On a
    branch whose live token this process has seen, the branch record and the key's entry in that
    token are one KV call (:meth:`RepoContext.resolve_staged`)."""
    resolved, live = await ctx.resolve_staged(repo, ref, key, key + b"\x00", 1)
    tokens = resolved.tokens
    staged: ValueRecord | None = None
    if live is not None:  # the live token is read: a record there wins, else the sealed ones
        token, tokens = tokens[0], tokens[1:]
        if live:
            staged = decode_staged_entry(live[0].value, file=f"kv:{token}")
    if staged is None and tokens:
        staged = await ctx.staging.lookup(tokens, key)
    if staged is not None:
        if staged.is_tombstone:
            raise NotFoundError(f"object {key.decode(errors='replace')!r} not found in {ref!r}")
        return staged
    found = await (await ctx.metarange(repo, resolved.commit.metarange_id)).get(key)
    if found is None:
        raise NotFoundError(f"object {key.decode(errors='replace')!r} not found in {ref!r}")
    return found


async def unstaged_entry(
    ctx: RepoContext, repo: Repository, branch: Branch, key: bytes
) -> ValueRecord | None:
    """``key``'s entry on ``branch`` below its live token: the sealed tokens (newest first), then
    the branch's commit; None when it has none (or a tombstone hides it)."""
    sealed = await ctx.staging.lookup(branch.sealed_tokens, key) if branch.sealed_tokens else None
    if sealed is not None:
        return None if sealed.is_tombstone else sealed
    commit = await ctx.refs.get_commit(repo, branch.commit_id)
    return await (await ctx.metarange(repo, commit.metarange_id)).get(key)


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


def prefix_successor(prefix: bytes) -> bytes | None:
    """The smallest key greater than every key starting with ``prefix`` (None: no such key)."""
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        return None
    return stripped[:-1] + bytes([stripped[-1] + 1])


class EntryCursor(MergedCursor):
    """A ref's entries under a prefix in key order, staging over committed, tombstones hidden,
    seekable forward (:meth:`seek_ge`): every source is read only below the prefix's successor, and
    a seek costs each source a small read at most (:mod:`lakefs_core.refs.staging`)."""

    def __init__(self, sources: Sequence[RecordCursor]) -> None:
        super().__init__(sources, hide_tombstones=True)

    async def __aiter__(self) -> AsyncIterator[ValueRecord]:
        while (record := await self.next()) is not None:
            yield record


def cursor_range(prefix: bytes, start: bytes) -> tuple[bytes, bytes | None]:
    """The ``[start, end)`` an :func:`entry_cursor` of ``prefix`` from ``start`` reads."""
    return max(prefix, start), prefix_successor(prefix) if prefix else None


async def entry_cursor(
    ctx: RepoContext,
    repo: Repository,
    resolved: Resolved,
    *,
    prefix: bytes = b"",
    start: bytes = b"",
    live_first: list[KVEntry] | None = None,
) -> EntryCursor:
    """An :class:`EntryCursor` of a ref already resolved, from ``start`` on: a listing that seeks
    (past each common prefix) reads one snapshot of the ref. ``live_first``: the first
    :data:`~lakefs_core.refs.staging.FIRST_PAGE` entries of the live token in the cursor's range,
    already read (:meth:`RepoContext.resolve_staged`)."""
    start, end = cursor_range(prefix, start)
    committed = await ctx.metarange(repo, resolved.commit.metarange_id)
    staged = [
        ctx.staging.cursor(t, start, end, live_first if i == 0 else None)
        for i, t in enumerate(resolved.tokens)
    ]
    return EntryCursor([*staged, committed.cursor(start, end)])


async def list_resolved(
    ctx: RepoContext,
    repo: Repository,
    resolved: Resolved,
    *,
    prefix: bytes = b"",
    after: bytes = b"",
    start: bytes = b"",
) -> AsyncIterator[ValueRecord]:
    """:func:`list_entries` of a ref already resolved."""
    start = max(start, after + b"\x00" if after else b"")
    async for record in await entry_cursor(ctx, repo, resolved, prefix=prefix, start=start):
        yield record


async def staged_in_range(
    ctx: RepoContext, resolved: Resolved, start: bytes, end: bytes | None, live: list[KVEntry] | None
) -> tuple[bool, list[KVEntry] | None]:
    """Whether a staging token of ``resolved`` (live or sealed) has a record in ``[start, end)``,
    i.e. whether the ref's entries there may differ from its commit's; and the live token's first
    page in that range (``live``, the page :meth:`RepoContext.resolve_staged` read, or read here
    when it is None) for :func:`entry_cursor`, so a listing that walks reads it once."""
    tokens = resolved.tokens
    if not tokens:
        return False, live
    if live is None:
        live = await ctx.staging.first_page(tokens[0], start, end)
    if live:
        return True, live
    for token in tokens[1:]:
        if await ctx.staging.first_page(token, start, end, 1):
            return True, live
    return False, live
