"""A commit of given entries against a branch head: what a distributed writer (the Spark data source's
job) publishes, without going through the branch's staging area.

:func:`commit_entries` builds ONE commit whose parent is the branch head and whose tree is that head's
plus exactly ``records`` (and, for an overwrite, tombstones for every other key under
``replace_prefix``), then moves the branch to it with a compare-and-swap on the branch record. The
branch's staging tokens are left as they are: other writers' uncommitted changes stay staged, never
swept into this commit.

- ``expected_head`` set: the commit is made on that head only; a branch that moved is
  :class:`~lakefs_core.errors.ConflictError` (nothing published). ``None``: a moved head (or a
  concurrent token rotation) rebuilds on the new head, bounded like every CAS loop
  (:func:`~lakefs_core.repos.retry.cas_retrying`).
- With the hard-delete journal on, the writer recorded its objects' intents in batches
  (:meth:`~lakefs_core.repos.journal.Journal.record_intents`, one per task attempt) and passes the
  batches it publishes as ``batches`` (``(batch id, earliest intent time)``). Each attempt, after
  storing its commit record and before its branch CAS: a consumption record names the commit (under
  ``job_token``, a token no staging area uses), so the reconciler's decision for these addresses
  is ``committed`` once the CAS lands; then the batches are settled (their open record CASed to
  settled). A batch whose record is gone was fenced by the reconciler (the job outlived the pending
  timeout): :class:`ConflictError`, nothing published. Batches not passed (failed or speculative
  attempts) stay pending and their objects are deleted by the reconciler.
- Read-only repositories refuse (:class:`~lakefs_core.errors.ReadOnlyError`) unless ``force``; a
  branch whose protection rules block commits refuses (:class:`~lakefs_core.errors.ProtectedBranchError`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import replace

from lakefs_core.committed.apply import apply_changes
from lakefs_core.committed.metarange import MetaRange
from lakefs_core.committed.model import Change
from lakefs_core.errors import BadInputError, ConflictError, PreconditionFailedError
from lakefs_core.format.records import ValueRecord
from lakefs_core.refs.ids import validate_branch_id
from lakefs_core.refs.model import Commit, Repository
from lakefs_core.repos import protection
from lakefs_core.repos.committing import check_commit_text, child_commit
from lakefs_core.repos.context import RepoContext
from lakefs_core.repos.journal import Journal, journal_enabled
from lakefs_core.repos.retry import cas_retrying, exhausted_as
from lakefs_core.repos.staging_writes import check_new_path

Batch = tuple[str, float]  # (batch id, earliest intent time of the batch)


def _sorted_records(records: Sequence[ValueRecord]) -> list[ValueRecord]:
    out = sorted(records, key=lambda r: r.key)
    for i, record in enumerate(out):
        check_new_path(record.key)
        if record.is_tombstone:
            raise BadInputError(f"entry {record.key!r} is a tombstone, not a value", field="entries")
        if i and out[i - 1].key == record.key:
            raise BadInputError(f"path {record.key.decode(errors='replace')!r} given twice", field="entries")
    return out


async def _changes(
    base: MetaRange, records: list[ValueRecord], replace_prefix: bytes | None
) -> AsyncIterator[Change]:
    """``records`` in key order, with deletions for the other keys of ``base`` under the prefix."""
    if replace_prefix is None:
        for record in records:
            yield Change(record.key, record)
        return
    pending = iter(records)
    nxt = next(pending, None)
    async for old in base.seek_ge(replace_prefix):
        if not old.key.startswith(replace_prefix):
            break
        while nxt is not None and nxt.key < old.key:
            yield Change(nxt.key, nxt)
            nxt = next(pending, None)
        if nxt is not None and nxt.key == old.key:
            yield Change(nxt.key, nxt)
            nxt = next(pending, None)
        else:
            yield Change(old.key, None)
    while nxt is not None:
        yield Change(nxt.key, nxt)
        nxt = next(pending, None)


async def _build(
    ctx: RepoContext,
    repo: Repository,
    parent_id: str,
    records: list[ValueRecord],
    replace_prefix: bytes | None,
    *,
    committer: str,
    message: str,
    metadata: Mapping[str, str],
) -> Commit:
    parent = await ctx.refs.get_commit(repo, parent_id)
    base = await ctx.metarange(repo, parent.metarange_id)
    result = await apply_changes(
        base.tables,
        base,
        _changes(base, records, replace_prefix),
        policy=ctx.settings.split_policy,
        allow_empty=True,  # an append of nothing (or an overwrite with the same files) still commits
    )
    commit = child_commit(
        ctx, parent, result.metarange_id, committer=committer, message=message, metadata=metadata
    )
    await ctx.refs.put_commit(repo, commit)
    return commit


async def commit_entries(
    ctx: RepoContext,
    repo_id: str,
    branch_id: str,
    records: Sequence[ValueRecord],
    *,
    committer: str,
    message: str,
    metadata: Mapping[str, str] | None = None,
    expected_head: str | None = None,
    replace_prefix: bytes | None = None,
    batches: Sequence[Batch] = (),
    job_token: str = "",
    force: bool = False,
) -> Commit:
    """One commit of ``records`` on the branch head (see the module)."""
    if not message:
        raise BadInputError("a commit needs a message", field="message")
    check_commit_text(committer, message, metadata)
    validate_branch_id(branch_id)
    ordered = _sorted_records(records)
    if replace_prefix is not None and any(not r.key.startswith(replace_prefix) for r in ordered):
        raise BadInputError("every entry of an overwrite must lie under its prefix", field="entries")
    repo = await ctx.repository(repo_id)
    ctx.writable(repo, force)
    await protection.check(ctx, repo, branch_id, protection.Action.COMMIT)
    journal = Journal(ctx, repo) if await journal_enabled(ctx, repo, cached=False) else None
    if journal is not None and batches and not job_token:
        raise BadInputError("a journalled commit of batches needs a job token", field="job_token")
    built: dict[str, Commit] = {}
    settled = False
    made: Commit | None = None
    with exhausted_as(f"branch {branch_id!r}: too many concurrent commits"):
        async for attempt in cas_retrying(ctx.settings):
            with attempt:
                branch, raw = await ctx.refs.get_branch(repo, branch_id)
                if expected_head is not None and branch.commit_id != expected_head:
                    raise ConflictError(
                        f"branch {branch_id!r} moved from {expected_head} to {branch.commit_id}"
                    )
                made = built.get(branch.commit_id)
                if made is None:
                    made = await _build(
                        ctx, repo, branch.commit_id, ordered, replace_prefix,
                        committer=committer, message=message, metadata=dict(metadata or {}),
                    )  # fmt: skip
                    built = {branch.commit_id: made}
                if journal is not None and job_token:
                    await journal.record_consumed(branch_id, (job_token,), made.id, ctx.clock())
                if journal is not None and not settled:
                    await journal.settle_batches(batches, ctx.clock())
                    settled = True
                try:
                    await ctx.refs.cas_branch(repo, replace(branch, commit_id=made.id), raw)
                except PreconditionFailedError:
                    if expected_head is not None:
                        raise ConflictError(f"branch {branch_id!r} moved during the commit") from None
                    raise
    assert made is not None  # the loop ran, or raised
    return made
