"""Commit, merge and revert: the operations that move a branch to a new commit (spec section 7).

Commit:

1. rotate the staging token with a CAS on the branch record (``sealed = [staging] + sealed``, new
   live token); the tokens sealed at that moment are *owned* by this commit;
2. build the new metarange from the head commit's metarange plus the owned tokens (newest wins);
3. store the commit record (``SetIf`` absent; an identical existing record is fine);
4. CAS the branch to the new commit, removing the owned tokens from ``sealed``. If the CAS fails,
   re-read the branch: tokens another commit already published are no longer owned; if the head
   moved, rebuild on top of it with the tokens still owned; if nothing is owned any more, the
   changes were committed by a concurrent commit, whose head is returned. Bounded, with backoff.
   If the owned tokens change nothing on the head (empty, or rewrites of committed values), the
   branch is CASed to just unseal them and :class:`NoChangesError` is raised.
5. mark the consumed tokens for the asynchronous drop (``cleanup-tokens``, reason ``committed``).

With the hard-delete journal on (:mod:`.journal`), each attempt records ``gc-consumed/<branch>/<token>/
<commit>`` for its owned tokens after storing its commit record and before its branch CAS (for a no-op
attempt, ``<commit>`` is the unchanged head, which holds whatever those tokens staged).

Each staged write is therefore in exactly one commit, and first-parent history stays linear.

Merge finds the best common ancestor (highest generation reachable from both sides), runs the
three-way metarange merge and stores a merge commit with parents ``[destination, source]``.
Revert applies the inverse of a commit (a three-way merge with the commit as base and its parent as
source). Both refuse a destination with uncommitted changes and retry their CAS like commit.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import datetime

from lakefs_core.committed.apply import apply_changes
from lakefs_core.committed.merge import merge as merge_metaranges
from lakefs_core.committed.metarange import MetaRange
from lakefs_core.committed.model import MergeStrategy
from lakefs_core.errors import (
    BadInputError,
    ConflictError,
    NoChangesError,
    PreconditionFailedError,
    encode_utf8,
)
from lakefs_core.refs import kvkeys
from lakefs_core.refs.model import Branch, Commit, Repository
from lakefs_core.refs.staging import merged_changes
from lakefs_core.repos import protection
from lakefs_core.repos.context import RepoContext
from lakefs_core.repos.journal import Journal, journal_enabled
from lakefs_core.repos.retry import cas_retrying, exhausted_as

MERGE_STRATEGY_KEY = ".lakefs.merge.strategy"


async def _rotate(ctx: RepoContext, repo: Repository, branch_id: str) -> tuple[Branch, bytes, frozenset[str]]:
    with exhausted_as(f"branch {branch_id!r} kept changing while sealing its staging token"):
        async for attempt in cas_retrying(ctx.settings):
            with attempt:
                branch, raw = await ctx.refs.get_branch(repo, branch_id)
                sealed = (branch.staging_token, *branch.sealed_tokens)
                rotated = replace(
                    branch,
                    staging_token=kvkeys.new_staging_token(repo.id, branch_id),
                    sealed_tokens=sealed,
                )
                raw = await ctx.refs.cas_branch(repo, rotated, raw)
    return rotated, raw, frozenset(sealed)


def child_commit(
    ctx: RepoContext,
    parent: Commit,
    metarange_id: str,
    *,
    committer: str,
    message: str,
    metadata: Mapping[str, str],
    date: datetime | None = None,
) -> Commit:
    """A new commit of ``metarange_id`` whose only parent is ``parent`` (a commit, a revert, a
    cherry-pick, a commit of given entries), dated ``date`` (lakeFS's commit date override) or by
    the context's clock."""
    return Commit.create(
        committer=committer,
        message=message,
        metarange_id=metarange_id,
        creation_date=ctx.clock() if date is None else date,
        metadata=metadata,
        parents=(parent.id,),
        generation=parent.generation + 1,
    )


async def _build_commit(
    ctx: RepoContext,
    repo: Repository,
    parent_id: str,
    tokens: tuple[str, ...],
    *,
    committer: str,
    message: str,
    metadata: Mapping[str, str],
    allow_empty: bool,
    date: datetime | None,
) -> Commit | None:
    """The commit of ``tokens`` on ``parent_id``, stored; None when they change nothing there
    (empty, or rewrites of committed values): the caller unseals them anyway, or every such
    attempt would leave one more sealed token behind and the branch would look dirty forever."""
    parent = await ctx.refs.get_commit(repo, parent_id)
    base = await ctx.metarange(repo, parent.metarange_id)
    try:
        result = await apply_changes(
            base.tables,
            base,
            merged_changes(ctx.staging, tokens),
            policy=ctx.settings.split_policy,
            allow_empty=allow_empty,
        )
    except NoChangesError:
        return None
    commit = child_commit(
        ctx, parent, result.metarange_id, committer=committer, message=message, metadata=metadata, date=date
    )
    await ctx.refs.put_commit(repo, commit)
    return commit


def check_commit_text(committer: str, message: str | None, metadata: Mapping[str, str] | None) -> None:
    """Refuse, before anything moves, text no commit can hold: a commit's fields are UTF-8 (its id
    hashes them, its record stores them), so a lone surrogate (argv or environment bytes the OS
    could not decode) is named by field instead of failing half-way through the commit."""
    fields: list[tuple[str, object]] = [("committer", committer), ("message", message)]
    for key, value in (metadata or {}).items():
        fields += [("metadata", key), (f"metadata[{key!r}]", value)]  # the key is checked first
    for field, text in fields:
        if isinstance(text, str):
            encode_utf8(text, field)


async def commit(
    ctx: RepoContext,
    repo_id: str,
    branch_id: str,
    *,
    committer: str,
    message: str,
    metadata: Mapping[str, str] | None = None,
    allow_empty: bool = False,
    force: bool = False,
    date: datetime | None = None,
) -> Commit:
    """Commit the branch's staged changes (see the module docstring); ``date`` overrides the
    commit's creation date (lakeFS's ``date``: an aware datetime, whole seconds are kept)."""
    if not message:
        raise BadInputError("a commit needs a message", field="message")
    check_commit_text(committer, message, metadata)
    repo = await _committable(ctx, repo_id, branch_id, allow_empty=allow_empty, force=force)
    branch, raw, owned = await _rotate(ctx, repo, branch_id)
    sealed_on = branch.commit_id
    built: tuple[tuple[str, tuple[str, ...]], Commit | None] | None = None
    recorded: set[tuple[str, tuple[str, ...]]] = set()
    attempts = cas_retrying(ctx.settings)
    with exhausted_as(f"branch {branch_id!r}: too many concurrent commits"):
        async for attempt in attempts:
            with attempt:
                mine = tuple(t for t in branch.sealed_tokens if t in owned)
                if not mine:
                    return await _committed_meanwhile(ctx, repo, branch_id, branch.commit_id, sealed_on)
                if built is None or built[0] != (branch.commit_id, mine):
                    made = await _build_commit(
                        ctx,
                        repo,
                        branch.commit_id,
                        mine,
                        committer=committer,
                        message=message,
                        metadata=metadata or {},
                        allow_empty=allow_empty,
                        date=date,
                    )
                    built = ((branch.commit_id, mine), made)
                new_commit = built[1]
                target = new_commit.id if new_commit is not None else branch.commit_id
                if (target, mine) not in recorded:
                    await _record_consumed(ctx, repo, branch_id, mine, target)
                    recorded.add((target, mine))
                rest = tuple(t for t in branch.sealed_tokens if t not in owned)
                published = replace(branch, commit_id=target, sealed_tokens=rest)  # target: head if no commit
                try:
                    await ctx.refs.cas_branch(repo, published, raw)
                except PreconditionFailedError:
                    branch, raw = await ctx.refs.get_branch(repo, branch_id)
                    raise
    await ctx.refs.mark_for_cleanup(mine, ctx.clock(), "committed")
    if new_commit is None:
        raise NoChangesError(f"branch {branch_id!r} has no effective uncommitted changes")
    return new_commit


async def _committable(
    ctx: RepoContext,
    repo_id: str,
    branch_id: str,
    *,
    allow_empty: bool,
    force: bool,
) -> Repository:
    """The repository, once a commit of ``branch_id`` may start: a writable repository, the
    branch's protection, and (unless ``allow_empty``) changes staged on the branch."""
    repo = await ctx.repository(repo_id)
    ctx.writable(repo, force)
    await protection.check(ctx, repo, branch_id, protection.Action.COMMIT)
    current, _ = await ctx.refs.get_branch(repo, branch_id)
    if not allow_empty and not await ctx.has_uncommitted(repo, current):
        raise NoChangesError(f"branch {branch_id!r} has no uncommitted changes")
    return repo


async def _committed_meanwhile(
    ctx: RepoContext, repo: Repository, branch_id: str, head: str, sealed_on: str
) -> Commit:
    """The commit a concurrent commit made of our sealed tokens (none of them is on the branch any
    more): the branch's ``head``, unless it is still ``sealed_on`` (the tokens were unsealed as
    no-ops: :class:`NoChangesError`)."""
    if head == sealed_on:  # unsealed as no-ops by a concurrent commit
        raise NoChangesError(f"branch {branch_id!r} has no effective uncommitted changes")
    # A concurrent commit published our tokens: our writes are in it.
    return await ctx.refs.get_commit(repo, head)


async def _record_consumed(
    ctx: RepoContext, repo: Repository, branch_id: str, tokens: tuple[str, ...], commit_id: str
) -> None:
    # Read the flag fresh, right before the CAS: a journal turned on meanwhile must see this record
    # (intents older than the switch are not decided by the journal, see journal.py).
    if await journal_enabled(ctx, repo, cached=False):
        await Journal(ctx, repo).record_consumed(branch_id, tokens, commit_id, ctx.clock())


async def merge_base(ctx: RepoContext, repo: Repository, a: Commit, b: Commit) -> Commit | None:
    """The common ancestor of ``a`` and ``b`` with the highest generation (None if unrelated)."""
    seen: dict[str, int] = {}  # commit id -> sides that reach it (1 = a, 2 = b)
    commits = {a.id: a, b.id: b}
    heap: list[tuple[int, str]] = []
    for c, side in ((a, 1), (b, 2)):
        if c.id not in seen:
            heapq.heappush(heap, (-c.generation, c.id))
        seen[c.id] = seen.get(c.id, 0) | side
    done: set[str] = set()
    while heap:
        _, cid = heapq.heappop(heap)
        if cid in done:
            continue
        done.add(cid)
        if seen[cid] == 3:
            return commits[cid]
        for parent_id in commits[cid].parents:
            if parent_id not in commits:
                commits[parent_id] = await ctx.refs.get_commit(repo, parent_id)
            if parent_id not in seen:
                heapq.heappush(heap, (-commits[parent_id].generation, parent_id))
            seen[parent_id] = seen.get(parent_id, 0) | seen[cid]
    return None


async def _ensure_clean(ctx: RepoContext, repo: Repository, branch: Branch) -> None:
    if await ctx.has_uncommitted(repo, branch):
        raise ConflictError(f"branch {branch.id!r} has uncommitted changes; commit or reset them first")


async def _three_way(
    ctx: RepoContext, base: MetaRange, source: MetaRange, dest: MetaRange, strategy: MergeStrategy
) -> str:
    result = await merge_metaranges(
        dest.tables, base, source, dest, strategy, policy=ctx.settings.split_policy
    )
    return result.metarange_id


async def merge(
    ctx: RepoContext,
    repo_id: str,
    source_ref: str,
    dest_branch: str,
    *,
    committer: str,
    message: str | None = None,
    strategy: MergeStrategy = MergeStrategy.NONE,
    metadata: Mapping[str, str] | None = None,
    force: bool = False,
    squash: bool = False,
) -> Commit:
    """Merge ``source_ref`` into ``dest_branch`` (three-way, conflicts by ``strategy``); with
    ``squash`` the merge commit has the destination's head as its only parent (lakeFS's squash merge:
    the source's history does not become the destination's)."""
    check_commit_text(committer, message, metadata)
    repo = await ctx.repository(repo_id)
    ctx.writable(repo, force)
    meta = dict(metadata or {})
    if strategy is not MergeStrategy.NONE:
        meta[MERGE_STRATEGY_KEY] = strategy.value
    with exhausted_as(f"branch {dest_branch!r}: too many concurrent updates during merge"):
        async for attempt in cas_retrying(ctx.settings):
            with attempt:
                dest, raw = await ctx.refs.get_branch(repo, dest_branch)
                await _ensure_clean(ctx, repo, dest)
                source = (await ctx.resolve(repo, source_ref)).commit
                head = await ctx.refs.get_commit(repo, dest.commit_id)
                base = await merge_base(ctx, repo, source, head)
                if base is not None and base.id == source.id:
                    raise NoChangesError(f"{source_ref!r} is already merged into {dest_branch!r}")
                metarange_id = await _three_way(
                    ctx,
                    await ctx.metarange(repo, base.metarange_id if base else ""),
                    await ctx.metarange(repo, source.metarange_id),
                    await ctx.metarange(repo, head.metarange_id),
                    strategy,
                )
                made = Commit.create(
                    committer=committer,
                    message=message or f"Merge '{source_ref}' into '{dest_branch}'",
                    metarange_id=metarange_id,
                    creation_date=ctx.clock(),
                    metadata=meta,
                    parents=(head.id,) if squash else (head.id, source.id),
                    generation=head.generation + 1 if squash else max(head.generation, source.generation) + 1,
                )
                await ctx.refs.put_commit(repo, made)
                await ctx.refs.cas_branch(repo, replace(dest, commit_id=made.id), raw)
    return made


async def revert(
    ctx: RepoContext,
    repo_id: str,
    branch_id: str,
    commit_ref: str,
    *,
    committer: str,
    parent_number: int = 1,
    message: str | None = None,
    metadata: Mapping[str, str] | None = None,
    allow_empty: bool = False,
    force: bool = False,
) -> Commit:
    """Undo ``commit_ref``'s change (against its parent ``parent_number``) on the branch, in a new
    commit: a three-way merge with the commit as base and its parent as source. ``message`` and
    ``metadata`` are the new commit's (lakeFS's commit overrides); without ``allow_empty`` a revert
    that changes nothing on the head is :class:`NoChangesError`, as lakeFS's."""
    check_commit_text(committer, message, metadata)
    repo = await ctx.repository(repo_id)
    ctx.writable(repo, force)
    target = (await ctx.resolve(repo, commit_ref)).commit
    if not target.parents:
        raise BadInputError("cannot revert a commit without parents", field="commit")
    parent = await _parent(ctx, repo, target, parent_number)

    def made(head: Commit, metarange_id: str) -> Commit:
        revert_message = message or f"Revert {target.id}"
        return child_commit(
            ctx, head, metarange_id, committer=committer, message=revert_message, metadata=metadata or {}
        )

    sides = (target, parent)
    return await _apply_change(
        ctx, repo, branch_id, doing="revert", sides=sides, made=made, allow_empty=allow_empty
    )


async def cherry_pick(
    ctx: RepoContext,
    repo_id: str,
    branch_id: str,
    commit_ref: str,
    *,
    committer: str,
    parent_number: int | None = None,
    message: str | None = None,
    metadata: Mapping[str, str] | None = None,
    force: bool = False,
) -> Commit:
    """Apply ``commit_ref``'s change (against its parent ``parent_number``) to the branch in a new
    commit, as lakeFS's cherry-pick: a three-way merge with the parent as base and the commit as
    source; the new commit keeps the original's message and metadata (or ``message`` and
    ``metadata``, lakeFS's commit overrides, when given) plus ``cherry-pick-origin`` /
    ``cherry-pick-committer``. A merge commit needs ``parent_number``."""
    check_commit_text(committer, message, metadata)
    repo = await ctx.repository(repo_id)
    ctx.writable(repo, force)
    target = (await ctx.resolve(repo, commit_ref)).commit
    if parent_number is None and len(target.parents) > 1:
        raise BadInputError("a merge commit: say which parent's side to apply", field="parent_number")
    base = await _parent(ctx, repo, target, parent_number or 1) if target.parents else None

    def made(head: Commit, metarange_id: str) -> Commit:
        picked = {
            **(target.metadata if metadata is None else metadata),
            "cherry-pick-origin": target.id,
            "cherry-pick-committer": target.committer,
        }
        return child_commit(
            ctx, head, metarange_id, committer=committer, message=message or target.message, metadata=picked
        )

    return await _apply_change(ctx, repo, branch_id, doing="cherry-pick", sides=(base, target), made=made)


async def _parent(ctx: RepoContext, repo: Repository, commit: Commit, parent_number: int) -> Commit:
    if not 1 <= parent_number <= len(commit.parents):
        raise BadInputError(f"commit has {len(commit.parents)} parent(s)", field="parent_number")
    return await ctx.refs.get_commit(repo, commit.parents[parent_number - 1])


async def _apply_change(
    ctx: RepoContext,
    repo: Repository,
    branch_id: str,
    *,
    doing: str,
    sides: tuple[Commit | None, Commit],
    made: Callable[[Commit, str], Commit],
    allow_empty: bool | None = None,
) -> Commit:
    """Merge the change from ``sides[0]`` (the base; None: the empty tree) to ``sides[1]`` into the
    branch head and commit it with ``made(head, metarange_id)``, moving the branch by
    compare-and-swap (retried); the branch must have no uncommitted changes. ``allow_empty`` (a
    revert's, as lakeFS's): False refuses a change that leaves the head's tree as it is with
    :class:`NoChangesError`, True commits it anyway; None (cherry-pick, as lakeFS's) refuses only a
    source the head already holds."""
    base, source = sides
    with exhausted_as(f"branch {branch_id!r}: too many concurrent updates during {doing}"):
        async for attempt in cas_retrying(ctx.settings):
            with attempt:
                branch, raw = await ctx.refs.get_branch(repo, branch_id)
                await _ensure_clean(ctx, repo, branch)
                head = await ctx.refs.get_commit(repo, branch.commit_id)
                try:
                    metarange_id = await _three_way(
                        ctx,
                        await ctx.metarange(repo, base.metarange_id if base is not None else ""),
                        await ctx.metarange(repo, source.metarange_id),
                        await ctx.metarange(repo, head.metarange_id),
                        MergeStrategy.NONE,
                    )
                except NoChangesError:
                    if not allow_empty:
                        raise
                    metarange_id = head.metarange_id
                if metarange_id == head.metarange_id and allow_empty is False:
                    raise NoChangesError(f"{doing}: nothing changes on branch {branch_id!r}")
                commit = made(head, metarange_id)
                await ctx.refs.put_commit(repo, commit)
                await ctx.refs.cas_branch(repo, replace(branch, commit_id=commit.id), raw)
    return commit
