"""Storage namespace claims: one repository per storage namespace, and no nesting (spec section 6).

A repository owns its namespace exclusively: another repository's namespace may not equal it, lie
inside it or enclose it. Atomic without multi-key transactions:

1. CAS the claim key of namespace N from absent (or released, or left by an earlier attempt of the
   SAME repository id) to ours;
2. then look for a live claim of another repository on every ancestor of N and on every namespace
   nested in N, and for an older repository record (created before claims existed, or by lakeFS
   itself) overlapping N; on a conflict, release ours and refuse.

Of two overlapping creations, the later of the two step-1 writes is followed by a step-2 read that
sees the earlier one (the KV is linearizable), so they never both succeed; at worst both fail. On
one namespace exactly one step-1 CAS wins.

Step 2 also refuses a namespace over a live repository's import source (equal, inside or
enclosing): that repository's entries point at objects there, which the new repository's retention
GC, hard delete or purge would treat as its own. The import records its source before it checks the
claims (:func:`claimed_overlap`), so of an import and a creation over the same objects one sees the
other. :func:`settle` runs after a creation attempt, whatever
its outcome. Used by :meth:`~lakefs_core.repos.graveler.Graveler.create_repository`;
:func:`first_overlap` also serves the import's refusal of sources inside repositories' namespaces.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterable

from lakefs_core.errors import (
    BadInputError,
    NamespaceConflictError,
    NotFoundError,
    PreconditionFailedError,
    TooManyRetriesError,
)
from lakefs_core.kv.base import Expect
from lakefs_core.namespace import StorageNamespace
from lakefs_core.refs.store import claim_value
from lakefs_core.repos.context import RepoContext


async def claim(ctx: RepoContext, ns: StorageNamespace, repo_id: str, instance_uid: str) -> bytes:
    """Claim ``ns`` for ``repo_id``; returns the claim value written (see the module docstring)."""
    value = claim_value(repo_id, instance_uid)
    for _ in range(ctx.settings.write_attempts):
        current = await ctx.refs.get_namespace_claim(ns.canonical)
        if current is not None and current.owner not in (None, repo_id):
            raise NamespaceConflictError(
                f"storage namespace {ns.uri} is already in use by repository {current.owner!r}"
            )
        expected = Expect.ABSENT if current is None else Expect.equals(current.raw)
        try:
            await ctx.refs.set_namespace_claim(ns.canonical, value, expected)
            break
        except PreconditionFailedError:
            continue
    else:
        raise TooManyRetriesError(f"the claim on storage namespace {ns.uri} kept changing")
    try:
        await _check_overlaps(ctx, ns, repo_id)
    except BaseException:
        await ctx.refs.release_namespace_claim(ns.canonical, value)
        raise
    return value


async def check_available(ctx: RepoContext, storage_namespace: str, repo_id: str) -> None:
    """Raise :class:`NamespaceConflictError` if a repository other than ``repo_id`` claims or uses
    a namespace equal to, inside or enclosing ``storage_namespace`` (a read-only check, e.g. for an
    API to refuse early; only :meth:`create_repository` claims atomically)."""
    ns = StorageNamespace.parse(storage_namespace).check_repository_namespace()
    current = await ctx.refs.get_namespace_claim(ns.canonical)
    if current is not None and current.owner not in (None, repo_id):
        raise NamespaceConflictError(
            f"storage namespace {ns.uri} is already in use by repository {current.owner!r}"
        )
    await _check_overlaps(ctx, ns, repo_id)


async def _check_overlaps(ctx: RepoContext, ns: StorageNamespace, repo_id: str) -> None:
    for ancestor in ns.ancestors():
        claim = await ctx.refs.get_namespace_claim(ancestor)
        if claim is not None and claim.owner not in (None, repo_id):
            raise NamespaceConflictError(
                f"storage namespace {ns.uri} is inside {ancestor.rstrip('/')}, the storage "
                f"namespace of repository {claim.owner!r}"
            )
    async for claim in ctx.refs.namespace_claims_within(ns.canonical):
        if claim.owner != repo_id and claim.namespace != ns.canonical:
            raise NamespaceConflictError(
                f"storage namespace {ns.uri} encloses {claim.namespace.rstrip('/')}, the storage "
                f"namespace of repository {claim.owner!r}"
            )
    await _check_import_sources(ctx, ns)
    # Repositories created before namespace claims existed (or by lakeFS itself) have no claim.
    repos = ctx.refs.list_repositories(include_deleting=True)
    found = await first_overlap(((r.id, r.storage_namespace) async for r in repos if r.id != repo_id), ns)
    if found is not None:
        name, other = found
        raise NamespaceConflictError(
            f"storage namespace {ns.uri} overlaps {other.uri}, the storage namespace of repository {name!r}"
        )


async def _check_import_sources(ctx: RepoContext, ns: StorageNamespace) -> None:
    scans = [ctx.refs.import_sources(a, within=False) for a in ns.ancestors()]
    scans.append(ctx.refs.import_sources(ns.canonical, within=True))
    for scan in scans:
        async for src in scan:
            try:
                repo, _ = await ctx.refs.get_repository_raw(src.repo)
            except NotFoundError:
                continue  # the importing repository is gone, and its entries with it
            if repo.instance_uid == src.instance_uid:
                raise NamespaceConflictError(
                    f"storage namespace {ns.uri} overlaps {src.source.rstrip('/')}, from which "
                    f"repository {src.repo!r} imported objects its entries point at"
                )


async def claimed_overlap(ctx: RepoContext, ns: StorageNamespace) -> tuple[str, str] | None:
    """``(repository, canonical namespace)`` of a live claim equal to, enclosing or inside ``ns``
    (a repository being created has its claim before its record), or None."""
    for ancestor in ns.ancestors():
        claim = await ctx.refs.get_namespace_claim(ancestor)
        if claim is not None and claim.owner is not None:
            return claim.owner, claim.namespace
    async for claim in ctx.refs.namespace_claims_within(ns.canonical):
        if claim.owner is not None:  # always: namespace_claims_within yields live claims only
            return claim.owner, claim.namespace
    return None


async def first_overlap(
    named: AsyncIterable[tuple[str, str]], ns: StorageNamespace
) -> tuple[str, StorageNamespace] | None:
    """The first ``(name, namespace URI)`` of ``named`` whose namespace equals, lies inside or
    encloses ``ns``, with that namespace parsed; ``None`` if there is none."""
    async for name, uri in named:
        try:
            other = StorageNamespace.parse(uri)
        except BadInputError:
            continue  # a scheme this library cannot open (gs://, https://) overlaps none of ours
        if other.overlaps(ns):
            return name, other
    return None


async def settle(ctx: RepoContext, ns: StorageNamespace, repo_id: str, value: bytes) -> None:
    """After a creation attempt: if a repository ``repo_id`` exists now (ours, or a concurrent
    attempt's under the same id) the claim names its instance uid; otherwise release ours."""
    try:
        repo, _ = await ctx.refs.get_repository_raw(repo_id)
    except NotFoundError:
        await ctx.refs.release_namespace_claim(ns.canonical, value)
        return
    current = await ctx.refs.get_namespace_claim(ns.canonical)
    wanted = claim_value(repo_id, repo.instance_uid)
    if current is not None and current.owner == repo_id and current.raw != wanted:
        with contextlib.suppress(PreconditionFailedError):
            await ctx.refs.set_namespace_claim(ns.canonical, wanted, Expect.equals(current.raw))
