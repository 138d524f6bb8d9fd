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
commit (see :mod:`lakefs_core.kv.base`), so the argument holds per record.

An upload of a repository with the hard-delete journal stages its records with a :class:`Settle`:
a compare-and-swap of its journal record (the single upload's intent, or the batch's record) that
must land in the same atomic step as the records, or neither does (``KVStore.set_many_if``). The
step also expects the branch record exactly as read, so the records land in a token that is live at
that moment: a commit seals it only after them (and reads it after sealing), and there is never a
second write of records whose first one landed (which the reconciler could have decided on
meanwhile). A branch that changed is read again and the step retried; a settle key that no longer
holds what the upload expects means the reconciler claimed the upload: nothing was staged, and the
upload fails with :class:`~lakefs_core.errors.ConflictError` naming it.

A staged value's path is 1 to :data:`MAX_PATH_BYTES` bytes without NUL (:func:`check_new_path`), on
every KV driver alike: 1,024 bytes is DynamoDB's limit on a sort key, so a longer path would stage on
SQL and fail on DynamoDB. Tombstones are exempt: an existing longer key (written by lakeFS on SQL)
can still be deleted.

A conditional write (``condition``: S3's ``If-None-Match: *`` and ``If-Match``, lakeFS's
``Set`` with a condition) checks the path's current entry and stages the record in ONE conditional
KV step (:func:`_stage_conditional`): the current entry is the live token's value when it stages
the key, else the sealed tokens' and then the branch's commit's (as lakeFS's ``handleUpdate`` reads
it), and the step expects the live token's key exactly as read (absent when it was) and the branch
record as read (so the sealed tokens and the commit are the ones the check read), with the journal's
settle when given. Of writers racing on one path, each one's check sees the state its write
replaces: exactly one ``If-None-Match: *`` upload of a new path wins, the others are refused and
stage nothing.

:func:`restage_if_unchanged` stages a new record for a key only if the key's staged value in the
live token and the branch record are still what was read (one conditional KV batch, retried on a
change): ``fs update-metadata`` rewrites an entry this way, so an upload landing meanwhile is never
overwritten with the older object.

:func:`reset_changes` drops the uncommitted changes of one path or of a prefix (lakeFS's
``ResetKey``/``ResetPrefix``, ``branch reset --object/--prefix``): each changed key is staged again
with its committed record (a tombstone when it has none), which shadows the older staged values in
every token; like any staged write, a value an upload stages meanwhile on such a key may be
overwritten (a reset discards changes).

A token seen live less than ``write_cache_seconds`` ago (and less than half the cleanup grace) may be
written without reading the branch first: it cannot have been dropped yet (drops wait
``cleanup_grace_seconds``), and the re-read still catches a rotation. The repository record is cached
as long, so a read-only flag set by another process reaches this process's writers within that delay.
A settled step keeps the branch record it found as long (:func:`recent_branch`): an upload takes
it as the record its staging step expects, which that step's compare-and-swap checks.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

from lakefs_core.errors import (
    BadInputError,
    ConflictError,
    NotFoundError,
    PreconditionFailedError,
    TooManyRetriesError,
    TransientError,
)
from lakefs_core.format.records import ValueRecord, decode_staged_entry, encode_staged_entry
from lakefs_core.kv.base import Expect, KVItem
from lakefs_core.refs import kvkeys
from lakefs_core.refs.model import Branch, Repository
from lakefs_core.refs.staging import tombstone
from lakefs_core.repos import protection, reading
from lakefs_core.repos.context import RepoContext
from lakefs_core.repos.retry import cas_retrying, exhausted_as

Condition = Callable[[ValueRecord | None], None]
"""A write's precondition on the path's current entry on the branch (None: it has none): it raises
to refuse the write (:class:`~lakefs_core.errors.PreconditionFailedError` or the caller's own
error, raised as is; nothing is staged)."""


@dataclass(frozen=True)
class Settle:
    """A compare-and-swap staged with the records it guards: ``key`` (in ``partition``) must hold
    ``expected`` and is set to ``value`` in the same atomic step as the records (see the module
    docstring). ``what`` names the upload in the error of one that lost."""

    partition: bytes
    key: bytes
    expected: bytes
    value: bytes
    what: str


async def repository_for_write(ctx: RepoContext, repo_id: str) -> Repository:
    now = time.monotonic()
    repo = ctx.write_cache.repository(repo_id, now, ctx.settings.write_cache_seconds)
    if repo is not None:
        return repo
    repo = await ctx.repository(repo_id)
    ctx.write_cache.keep_repository(repo, now)
    return repo


async def branch_for_write(ctx: RepoContext, repo: Repository, branch_id: str) -> Branch:
    return (await branch_and_raw(ctx, repo, branch_id))[0]


async def branch_and_raw(ctx: RepoContext, repo: Repository, branch_id: str) -> tuple[Branch, bytes]:
    """The branch and its record's bytes as stored (what :func:`stage_entry`'s ``branch_read``
    takes); a missing branch forgets what this process cached for the repository."""
    try:
        return await ctx.refs.get_branch(repo, branch_id)
    except NotFoundError:
        # The repository may have been deleted or re-created: forget what was cached for it.
        ctx.write_cache.forget(repo, branch_id)
        raise


async def recent_branch(ctx: RepoContext, repo: Repository, branch_id: str) -> tuple[Branch, bytes]:
    """The branch and its record's bytes as a settled staging step of this process last found them
    (as recent as a cached live token), else read now: what :func:`stage_entry`'s ``branch_read``
    takes. A record older than the store's is harmless there: the step expects it, so it fails and
    reads again (and a branch deleted since fails the upload at its staging)."""
    limit = min(ctx.settings.write_cache_seconds, ctx.settings.cleanup_grace_seconds / 2)
    cached = ctx.write_cache.branch(repo, branch_id, time.monotonic(), limit)
    return cached if cached is not None else await branch_and_raw(ctx, repo, branch_id)


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
    ctx: RepoContext,
    repo_id: str,
    branch_id: str,
    record: ValueRecord,
    *,
    force: bool = False,
    settle: Settle | None = None,
    condition: Condition | None = None,
    branch_read: tuple[Branch, bytes] | None = None,
) -> None:
    """Stage one record (two KV operations in the common case: the write and the re-read), with
    ``settle`` in the same atomic step when given, only if ``condition`` holds for the path's
    current entry when given (see the module docstring). ``branch_read``: the branch as the caller
    read it (:func:`branch_and_raw`) for a settled write to expect first, saving a read (a branch
    changed since costs a read and an attempt more, as any change does)."""
    if not record.key:
        raise BadInputError("must not be empty", field="path")
    if record.identity:  # a value, not a tombstone
        check_new_path(record.key)
    repo = await repository_for_write(ctx, repo_id)
    ctx.writable(repo, force)
    await protection.check(ctx, repo, branch_id, protection.Action.STAGING_WRITE)
    if condition is not None:
        await _stage_conditional(ctx, repo, branch_id, record, settle=settle, condition=condition)
        return
    if settle is not None:
        await _stage_settled(ctx, repo, branch_id, [record], settle, branch_read=branch_read)
        return
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
    settle: Settle | None = None,
) -> None:
    """Stage ``records`` in one KV batch per attempt (a key given twice keeps its last record),
    with ``settle`` in the same atomic step when given (see the module docstring)."""
    for key, identity, _ in records:
        if not key or (identity and (len(key) > MAX_PATH_BYTES or b"\0" in key)):
            check_new_path(key)  # raises, naming what is wrong
    repo = await repository_for_write(ctx, repo_id)
    ctx.writable(repo, force)
    await protection.check(ctx, repo, branch_id, protection.Action.STAGING_WRITE)
    if settle is not None:
        await _stage_settled(ctx, repo, branch_id, records, settle)
        return
    if not records:
        return
    token = await _live_token(ctx, repo, branch_id)
    encoded: list[tuple[bytes, bytes]] = []
    items: Iterable[KVItem] = _encoding(records, (), kvkeys.staging_partition(token), encoded)
    for _ in range(ctx.settings.write_attempts):
        again = await _write_then_branch(ctx, repo, branch_id, items)
        if again.staging_token == token:
            ctx.write_cache.keep_live_token(repo, branch_id, token, time.monotonic())
            return
        token = again.staging_token  # a commit sealed the token we wrote to: write the batch again
        items = _again(records, encoded, kvkeys.staging_partition(token))
    raise TooManyRetriesError(f"branch {branch_id!r}: staging token kept rotating during a batch write")


def _again(
    records: Sequence[ValueRecord], encoded: list[tuple[bytes, bytes]], partition: bytes
) -> list[KVItem]:
    """The records as items of ``partition`` for another attempt, encoded once: a store that took
    the first attempt's items took all of them, else they are encoded anew."""
    if len(encoded) != len(records):
        encoded[:] = [(record.key, encode_staged_entry(record)) for record in records]
    return [(partition, key, value) for key, value in encoded]


async def _stage_settled(
    ctx: RepoContext,
    repo: Repository,
    branch_id: str,
    records: Sequence[ValueRecord],
    settle: Settle,
    *,
    branch_read: tuple[Branch, bytes] | None = None,
) -> None:
    """``records`` and ``settle`` in one conditional KV batch, expecting the settle key and the
    branch record as read (``branch_read``, else now); a changed branch is read again and the batch
    retried after a backoff (a commit moves it twice), a changed settle key is the upload's loss
    (see the module docstring). The step expects the record, so when it was read does not matter:
    the records land in a token live at the step, or not at all."""
    branch_key = kvkeys.branch_key(branch_id)
    branch, raw = branch_read or await branch_and_raw(ctx, repo, branch_id)
    settling = (settle.partition, settle.key, settle.value)
    encoded: list[tuple[bytes, bytes]] = []
    items: Iterable[KVItem] = _encoding(
        records, (settling,), kvkeys.staging_partition(branch.staging_token), encoded
    )
    with exhausted_as(f"branch {branch_id!r} kept changing during a staging write"):
        async for attempt in cas_retrying(ctx.settings):
            with attempt:
                expected = [
                    (settle.partition, settle.key, Expect.equals(settle.expected)),
                    (repo.partition, branch_key, Expect.equals(raw)),
                ]
                try:
                    await ctx.kv.set_many_if(items, expected)
                except TransientError:
                    # Outcome unknown: the settle key holding our value proves it landed (nobody
                    # else writes that value there); anything else leaves it unknown.
                    if await _settled(ctx, settle):
                        break
                    raise
                except PreconditionFailedError:
                    if await _lost(ctx, settle):
                        raise ConflictError(
                            f"{settle.what} lost to the hard-delete reconciler: its journal record "
                            "was claimed before the upload could stage it (the upload took longer "
                            "than the reconciler's pending timeout); nothing was staged"
                        ) from None
                    branch, raw = await branch_and_raw(ctx, repo, branch_id)  # the branch moved
                    partition = kvkeys.staging_partition(branch.staging_token)
                    items = [settling, *_again(records, encoded, partition)]
                    raise
    # the record the step just found: the next upload's branch_read (recent_branch)
    ctx.write_cache.keep_branch(repo, branch_id, branch, raw, time.monotonic())


async def _stage_conditional(
    ctx: RepoContext,
    repo: Repository,
    branch_id: str,
    record: ValueRecord,
    *,
    settle: Settle | None,
    condition: Condition,
) -> None:
    """``record`` staged iff ``condition`` holds for the path's current entry, in one conditional
    KV batch with ``settle`` (see the module docstring); a change to the live key, the branch or
    the settle key between the read and the batch reads again and checks again."""
    key, value = record.key, encode_staged_entry(record)
    branch_key = kvkeys.branch_key(branch_id)
    refused: Exception | None = None
    with exhausted_as(f"branch {branch_id!r}: {key!r} kept changing during a conditional write"):
        async for attempt in cas_retrying(ctx.settings):
            with attempt:
                branch, raw, live, live_raw = await _branch_and_live(ctx, repo, branch_id, key)
                if live_raw is None:
                    current = await reading.unstaged_entry(ctx, repo, branch, key)
                else:
                    staged = decode_staged_entry(live_raw, file=f"kv:{branch.staging_token}")
                    current = None if staged.is_tombstone else staged
                try:
                    condition(current)
                except Exception as e:  # the caller's refusal: raised below, never retried
                    refused = e
                    break
                items: list[KVItem] = [(live, key, value)]
                expected = [
                    (live, key, Expect.ABSENT if live_raw is None else Expect.equals(live_raw)),
                    (repo.partition, branch_key, Expect.equals(raw)),
                ]
                if settle is not None:
                    items.append((settle.partition, settle.key, settle.value))
                    expected.append((settle.partition, settle.key, Expect.equals(settle.expected)))
                try:
                    await ctx.kv.set_many_if(items, expected)
                except TransientError:
                    # Outcome unknown: our own settle value, or our own record (a fresh address:
                    # nobody else stages these bytes), proves it landed; else it stays unknown.
                    if await _landed(ctx, live, key, value, settle):
                        break
                    raise
                except PreconditionFailedError:
                    if settle is not None and await _lost(ctx, settle):
                        raise ConflictError(
                            f"{settle.what} lost to the hard-delete reconciler: its journal record "
                            "was claimed before the upload could stage it; nothing was staged"
                        ) from None
                    raise  # the key or the branch changed: read and check again
    if refused is not None:
        raise refused
    ctx.write_cache.keep_live_token(repo, branch_id, branch.staging_token, time.monotonic())


async def _branch_and_live(
    ctx: RepoContext, repo: Repository, branch_id: str, key: bytes
) -> tuple[Branch, bytes, bytes, bytes | None]:
    """The branch (and its raw record), its live token's partition and what that token stages
    for ``key`` (None: nothing): what a compare-and-swap of ``key`` expects."""
    branch, raw = await branch_and_raw(ctx, repo, branch_id)
    live = kvkeys.staging_partition(branch.staging_token)
    try:
        return branch, raw, live, await ctx.kv.get(live, key)
    except NotFoundError:
        return branch, raw, live, None


async def _landed(ctx: RepoContext, live: bytes, key: bytes, value: bytes, settle: Settle | None) -> bool:
    if settle is not None:
        return await _settled(ctx, settle)
    try:
        return await ctx.kv.get(live, key) == value
    except NotFoundError:
        return False


async def _settled(ctx: RepoContext, settle: Settle) -> bool:
    """Whether the settle key holds the upload's own settled value (its write landed)."""
    try:
        return await ctx.kv.get(settle.partition, settle.key) == settle.value
    except NotFoundError:
        return False


async def _lost(ctx: RepoContext, settle: Settle) -> bool:
    """Whether the settle key no longer holds what the upload expects (claimed, or gone)."""
    try:
        return await ctx.kv.get(settle.partition, settle.key) != settle.expected
    except NotFoundError:
        return True


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


RESET_BATCH = 1000  # records staged per KV batch by reset_changes


async def reset_changes(
    ctx: RepoContext, repo_id: str, branch_id: str, path: bytes, *, prefix: bool, force: bool = False
) -> list[bytes]:
    """Drop the uncommitted changes of ``path`` (``prefix``: of every key starting with it) on the
    branch; the keys whose changes were dropped, in order (see the module docstring)."""
    repo = await ctx.repository(repo_id)
    ctx.writable(repo, force)
    await protection.check(ctx, repo, branch_id, protection.Action.STAGING_WRITE)
    branch, _ = await ctx.refs.get_branch(repo, branch_id)
    head = await ctx.refs.get_commit(repo, branch.commit_id)
    committed = await ctx.metarange(repo, head.metarange_id)
    resets: list[ValueRecord] = []
    async for staged in ctx.staging.merged((branch.staging_token, *branch.sealed_tokens), start=path):
        if not staged.key.startswith(path) or (not prefix and staged.key != path):
            break
        old = await committed.get(staged.key)
        if (old is None and staged.is_tombstone) or (old is not None and old.identity == staged.identity):
            continue  # staged, but no change against the commit
        resets.append(old if old is not None else tombstone(staged.key))
    for start in range(0, len(resets), RESET_BATCH):
        await set_entries(ctx, repo_id, branch_id, resets[start : start + RESET_BATCH], force=force)
    return [r.key for r in resets]


async def restage_if_unchanged(
    ctx: RepoContext,
    repo_id: str,
    branch_id: str,
    key: bytes,
    change: Callable[[ValueRecord], ValueRecord],
    *,
    force: bool = False,
) -> ValueRecord:
    """Stage ``change(current)`` for ``key``, where ``current`` is the key's entry on the branch
    (staged, else committed; :class:`NotFoundError` when it has none), in one conditional batch that
    expects the live token's value of ``key`` and the branch record as read: a write or a commit
    in between makes it read again and retry (see the module docstring)."""
    repo = await repository_for_write(ctx, repo_id)
    ctx.writable(repo, force)
    await protection.check(ctx, repo, branch_id, protection.Action.STAGING_WRITE)
    branch_key = kvkeys.branch_key(branch_id)
    with exhausted_as(f"branch {branch_id!r}: {key!r} kept changing during an update"):
        async for attempt in cas_retrying(ctx.settings):
            with attempt:
                branch, raw, live, live_raw = await _branch_and_live(ctx, repo, branch_id, key)
                current = await reading.entry(ctx, repo, branch_id, key)
                made = change(current)
                encoded = encode_staged_entry(made)
                if live_raw is not None:
                    expected = [
                        (live, key, Expect.equals(live_raw)),
                        (repo.partition, branch_key, Expect.equals(raw)),
                    ]
                    await ctx.kv.set_many_if([(live, key, encoded)], expected)
                    continue
                # A batch cannot expect an absent key (PostgreSQL cannot lock a missing row): insert
                # it if still absent, then the writer protocol's re-read of the branch (a commit that
                # sealed the token meanwhile: read and write again; the repeat is idempotent).
                await ctx.kv.set_if(live, key, encoded, Expect.ABSENT)
                again, _ = await branch_and_raw(ctx, repo, branch_id)
                if again.staging_token != branch.staging_token:
                    raise PreconditionFailedError(f"branch {branch_id!r}: its staging token rotated")
    return made
