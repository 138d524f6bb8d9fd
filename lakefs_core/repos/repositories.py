"""Repositories' lifecycle for the :class:`~lakefs_core.repos.graveler.Graveler` facade: creation,
the read-only flag, deletion.

- :func:`create_repository` claims the storage namespace in the KV first
  (:mod:`.namespace_claims`), writes lakeFS's marker ``_lakefs/dummy`` create-only (unless told not
  to), then the first commit ("Repository created", empty metarange) and the default branch, and the
  repository record LAST (``SetIf`` absent): a crash leaves unreachable records in a fresh
  partition, never a half repository. The claim is settled whatever happens (released when the
  creation failed and no repository of this id owns it).
- :func:`set_read_only` flips the flag with compare-and-swap on the record.
- :func:`delete_repository` marks the record ``in_deletion``, records the namespace in
  ``deleted-repos/`` (so its objects can be purged later instead of being orphaned), drops the
  staging tokens and every record of the partition, then the repository record, and releases the
  namespace claim LAST, only this instance's (a re-creation under the same id may own it).

Each function takes the facade's :class:`~lakefs_core.repos.context.RepoContext`; none imports the
facade.
"""

from __future__ import annotations

import contextlib
import uuid
from dataclasses import replace

from lakefs_core.errors import BadInputError, ConflictError, NotFoundError
from lakefs_core.namespace import StorageNamespace
from lakefs_core.realpaths import real_namespace
from lakefs_core.refs import kvkeys
from lakefs_core.refs.ids import validate_branch_id, validate_repo_id
from lakefs_core.refs.model import Branch, Commit, Repository
from lakefs_core.refs.store import claim_value
from lakefs_core.repos import namespace_claims
from lakefs_core.repos.context import RepoContext
from lakefs_core.repos.journal import GCSettings
from lakefs_core.repos.retry import cas_retrying, exhausted_as

INITIAL_COMMIT_MESSAGE = "Repository created"


async def create_repository(
    ctx: RepoContext,
    repo_id: str,
    storage_namespace: str,
    default_branch: str,
    *,
    read_only: bool,
    claim_namespace: bool,
    initial_commit: Commit | None,
    hard_delete_journal: bool | None,
    reuse_namespace: bool,
    bare: bool,
) -> Repository:
    """See :meth:`lakefs_core.repos.graveler.Graveler.create_repository`."""
    if bare and initial_commit is not None:
        raise BadInputError("a bare repository has no initial commit", field="initial_commit")
    if initial_commit is not None and (initial_commit.parents or initial_commit.metarange_id):
        raise BadInputError("must be a root commit with an empty tree", field="initial_commit")
    validate_repo_id(repo_id)
    validate_branch_id(default_branch)
    # Recorded and claimed at its real path: where a symlink leads, not how the path reads.
    ns = (await real_namespace(storage_namespace)).check_repository_namespace()
    try:
        existing, _ = await ctx.refs.get_repository_raw(repo_id)
    except NotFoundError:
        pass
    else:
        state = " (being deleted)" if existing.in_deletion else ""
        raise ConflictError(f"repository {repo_id!r} already exists{state}")
    instance_uid = uuid.uuid4().hex
    claim = await namespace_claims.claim(ctx, ns, repo_id, instance_uid)
    try:
        if claim_namespace and not bare:
            await namespace_claims.write_marker(ctx, ns, repo_id, reuse=reuse_namespace)
        repo = Repository(repo_id, ns.uri, default_branch, ctx.clock(), instance_uid, read_only=read_only)
        journal_on = ctx.settings.hard_delete_journal if hard_delete_journal is None else hard_delete_journal
        await _create_records(ctx, repo, initial_commit=initial_commit, bare=bare, journal_on=journal_on)
    except BaseException:
        await namespace_claims.settle(ctx, ns, repo_id, claim)
        raise
    await namespace_claims.settle(ctx, ns, repo_id, claim)
    return repo


async def _create_records(
    ctx: RepoContext, repo: Repository, *, initial_commit: Commit | None, bare: bool, journal_on: bool
) -> None:
    if not bare:
        first = initial_commit or Commit.create(
            committer="", message=INITIAL_COMMIT_MESSAGE, metarange_id="", creation_date=repo.creation_date
        )
        await ctx.refs.put_commit(repo, first)
        token = kvkeys.new_staging_token(repo.id, repo.default_branch)
        await ctx.refs.create_branch(repo, Branch(repo.default_branch, first.id, token))
    if journal_on:  # before the repository record: no upload can precede it
        settings = GCSettings(True, since=0.0)
        await ctx.kv.set(repo.partition, kvkeys.gc_settings_key(), settings.to_bytes())
    await ctx.refs.create_repository(repo)


async def set_read_only(ctx: RepoContext, repo_id: str, read_only: bool) -> Repository:
    with exhausted_as(f"repository {repo_id!r} kept changing"):
        async for attempt in cas_retrying(ctx.settings):
            with attempt:
                repo, raw = await ctx.refs.get_repository_raw(repo_id)
                updated = replace(repo, read_only=read_only)
                await ctx.refs.update_repository(updated, raw)
    ctx.write_cache.forget_repository(repo_id)
    return updated


async def delete_repository(ctx: RepoContext, repo_id: str) -> None:
    """See the module docstring (the namespace's objects are left alone)."""
    ctx.write_cache.forget_repository(repo_id)
    repo, raw = await ctx.refs.get_repository_raw(repo_id)
    if not repo.in_deletion:
        marked = replace(repo, in_deletion=True)
        await ctx.refs.update_repository(marked, raw)
    await ctx.refs.record_deleted_repository(repo, ctx.clock())
    async for branch in ctx.refs.list_branches(repo):
        for token in (branch.staging_token, *branch.sealed_tokens):
            await ctx.staging.drop(token)
    keys = [e.key async for e in ctx.kv.scan(repo.partition)]
    for key in keys:
        await ctx.kv.delete(repo.partition, key)
    await ctx.refs.delete_repository_record(repo_id)
    # Last: the namespace stays claimed while any record of the repository exists. Only this
    # instance's claim is released (a re-creation under the same id may have taken it over).
    with contextlib.suppress(BadInputError):
        canonical = StorageNamespace.parse(repo.storage_namespace).canonical
        claim = await ctx.refs.get_namespace_claim(canonical)
        if claim is not None and claim.raw == claim_value(repo.id, repo.instance_uid):
            await ctx.refs.release_namespace_claim(canonical, claim.raw)
