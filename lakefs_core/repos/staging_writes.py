"""Staged writes of the :class:`~lakefs_core.repos.graveler.Graveler` facade: one entry or a batch,
on its :class:`~lakefs_core.repos.context.RepoContext`.

The writer protocol that keeps "an acknowledged write lands in exactly one commit" (spec section 7):

1. write to the branch's live staging token;
2. re-read the branch. If the token is still live, any commit that seals it later does so after the
   write landed, so that commit (or a later one) carries it: acknowledge. If a commit rotated the token
   meanwhile, that commit may have read the token before or after the write: write again to the new
   live token. The repeat is harmless either way: staged writes are idempotent by identity, so a
   second commit carrying an identical value changes nothing.

A batch (:func:`set_entries`) follows the same protocol with one KV ``set_many_then_get`` per
attempt (the batch, then the branch record): every record of the batch is stored before the re-read
or, on SQL, in the same transaction with no change to the branch ordered between the read and the
commit (see :mod:`lakefs_core.kv.base`), so the argument holds per record. Extra KV items (the
journal's batch settle record) may ride in the first write of the batch; they are idempotent
upserts too.

A staged value's path is 1 to :data:`MAX_PATH_BYTES` bytes without NUL (:func:`check_new_path`), on
every KV driver alike: 1,024 bytes is DynamoDB's limit on a sort key, so a longer path would stage on
SQL and fail on DynamoDB. Tombstones are exempt: an existing longer key (written by lakeFS on SQL)
can still be deleted.

A token seen live less than ``write_cache_seconds`` ago (and less than half the cleanup grace) may be
written without reading the branch first: it cannot have been dropped yet (drops wait
``cleanup_grace_seconds``), and the re-read still catches a rotation. The repository record is cached
as long, so a read-only flag set by another process reaches this process's writers within that delay.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Sequence

from lakefs_core.errors import BadInputError, NotFoundError, TooManyRetriesError
from lakefs_core.format.records import ValueRecord, encode_staged_entry
from lakefs_core.kv.base import KVItem
from lakefs_core.refs import kvkeys
from lakefs_core.refs.model import Branch, Repository
from lakefs_core.repos.context import RepoContext


async def repository_for_write(ctx: RepoContext, repo_id: str) -> Repository:
    now = time.monotonic()
    repo = ctx.write_cache.repository(repo_id, now, ctx.settings.write_cache_seconds)
    if repo is not None:
        return repo
    repo = await ctx.repository(repo_id)
    ctx.write_cache.keep_repository(repo, now)
    return repo


async def branch_for_write(ctx: RepoContext, repo: Repository, branch_id: str) -> Branch:
    try:
        return (await ctx.refs.get_branch(repo, branch_id))[0]
    except NotFoundError:
        # The repository may have been deleted or re-created: forget what was cached for it.
        ctx.write_cache.forget(repo, branch_id)
        raise


async def _write_then_branch(
    ctx: RepoContext, repo: Repository, branch_id: str, items: Iterable[KVItem]
) -> Branch:
    try:
        return await ctx.refs.set_many_then_get_branch(repo, items, branch_id)
    except NotFoundError:
        ctx.write_cache.forget(repo, branch_id)  # as branch_for_write: deleted or re-created meanwhile
        raise


async def _live_token(ctx: RepoContext, repo: Repository, branch_id: str) -> str:
    limit = min(ctx.settings.write_cache_seconds, ctx.settings.cleanup_grace_seconds / 2)
    cached = ctx.write_cache.live_token(repo, branch_id, time.monotonic(), limit)
    if cached is not None:
        return cached
    return (await branch_for_write(ctx, repo, branch_id)).staging_token


MAX_PATH_BYTES = 1024


def check_new_path(key: bytes) -> None:
    """Refuse a path no new value may be staged under (see the module docstring), naming it."""
    if not key:
        raise BadInputError("must not be empty", field="path")
    if len(key) > MAX_PATH_BYTES or b"\0" in key:
        shown = key if len(key) <= 80 else key[:64] + b"..."
        raise BadInputError(
            f"{shown.decode(errors='replace')!r} must be at most {MAX_PATH_BYTES} bytes without NUL "
            f"({len(key)} bytes given)",
            field="path",
        )


async def stage_entry(
    ctx: RepoContext, repo_id: str, branch_id: str, record: ValueRecord, *, force: bool = False
) -> None:
    """Stage one record (two KV operations in the common case: the write and the re-read)."""
    if not record.key:
        raise BadInputError("must not be empty", field="path")
    if record.identity:  # a value, not a tombstone
        check_new_path(record.key)
    repo = await repository_for_write(ctx, repo_id)
    ctx.writable(repo, force)
    token = await _live_token(ctx, repo, branch_id)
    for _ in range(ctx.settings.write_attempts):
        await ctx.staging.set(token, record)
        again = await branch_for_write(ctx, repo, branch_id)
        if again.staging_token == token:
            ctx.write_cache.keep_live_token(repo, branch_id, token, time.monotonic())
            return
        token = again.staging_token  # a commit sealed the token we wrote to: write again
    raise TooManyRetriesError(f"branch {branch_id!r}: staging token kept rotating during a write")


async def set_entries(
    ctx: RepoContext,
    repo_id: str,
    branch_id: str,
    records: Sequence[ValueRecord],
    *,
    force: bool = False,
    with_items: Sequence[KVItem] = (),
) -> None:
    """Stage ``records`` in one KV batch per attempt (a key given twice keeps its last record)."""
    for key, identity, _ in records:
        if not key or (identity and (len(key) > MAX_PATH_BYTES or b"\0" in key)):
            check_new_path(key)  # raises, naming what is wrong
    repo = await repository_for_write(ctx, repo_id)
    ctx.writable(repo, force)
    if not records:
        if with_items:
            await ctx.kv.set_many(with_items)
        return
    token = await _live_token(ctx, repo, branch_id)
    encoded: list[tuple[bytes, bytes]] = []
    items: Iterable[KVItem] = _encoding(records, with_items, kvkeys.staging_partition(token), encoded)
    for _ in range(ctx.settings.write_attempts):
        again = await _write_then_branch(ctx, repo, branch_id, items)
        if again.staging_token == token:
            ctx.write_cache.keep_live_token(repo, branch_id, token, time.monotonic())
            return
        token = again.staging_token  # a commit sealed the token we wrote to: write the batch again
        partition = kvkeys.staging_partition(token)
        if len(encoded) != len(records):  # a store that stored the batch took all of it; if not, anew
            encoded[:] = [(record.key, encode_staged_entry(record)) for record in records]
        items = [(partition, key, value) for key, value in encoded]  # with_items are stored already
    raise TooManyRetriesError(f"branch {branch_id!r}: staging token kept rotating during a batch write")


def _encoding(
    records: Sequence[ValueRecord],
    extra: Sequence[KVItem],
    partition: bytes,
    encoded: list[tuple[bytes, bytes]],
) -> Iterator[KVItem]:
    """A batch's first items: ``extra``, then each record encoded only as the KV store takes it
    (PostgreSQL streams a batch to the server while it takes the rest, so the encoding overlaps
    the server's inserts; other stores take the whole batch first). ``encoded`` keeps each
    record's ``(key, value)`` for a repeat. A record that cannot be encoded raises from the store's
    batch, before anything of it is stored."""
    yield from extra
    append = encoded.append
    for record in records:
        value = encode_staged_entry(record)
        append((record.key, value))
        yield partition, record.key, value
