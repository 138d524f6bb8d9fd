"""Storage namespace claims: one repository per storage namespace, and no nesting (spec section 6).

A repository owns its namespace exclusively: another repository's namespace may not equal it, lie
inside it or enclose it. Atomic without multi-key transactions:

1. CAS the claim key of namespace N from absent (or released, or left by an earlier attempt of the
   SAME repository id) to ours;
2. then look for a live claim of another repository equal to, enclosing or nested in N, and for a
   repository record (one created before claims existed, or by lakeFS itself, has no claim)
   overlapping N; on a conflict, release ours and refuse.

Of two overlapping creations, the later of the two step-1 writes is followed by a step-2 read that
sees the earlier one (the KV is linearizable), so they never both succeed; at worst both fail. On
one namespace exactly one step-1 CAS wins.

Step 2 also refuses a namespace over a live repository's import source (equal, inside or
enclosing): that repository's entries point at objects there, which the new repository's retention
GC, hard delete or purge would treat as its own. The import records its source before it checks the
claims (:func:`claimed_overlap`), so of an import and a creation over the same objects one sees the
other. :func:`settle` runs after a creation attempt, whatever its outcome. Used by
:meth:`~lakefs_core.repos.graveler.Graveler.create_repository`; :func:`first_overlap` also serves the
import's refusal of sources inside repositories' namespaces.

Local locations are compared at their REAL paths (:mod:`lakefs_core.realpaths`, issue 32): N is
resolved (strictly: a dangling symlink is refused) before it is claimed and recorded, so claims,
repository records and import sources written since hold real paths; and every other side is ALSO
resolved at check time, where it leads now, since a record written before (or by lakeFS) may hold a
path through a symlink, and a path may lead elsewhere once a link is swapped in. So step 2 scans
the claims, import sources and repository records whole rather than by N's prefixes (creation and
import are rare; a few thousand records cost milliseconds), and a record whose path cannot be
resolved now counts as overlapping. :func:`check_for_gc` is the same check at GC time, plus: the
namespace must still resolve to the path recorded for it.

A GC daemon checks every repository every reconciliation interval, so scanning and resolving every
record per check would cost O(repositories) per repository. :class:`NamespaceIndex` resolves the
records ONCE and answers each check by its namespace's ancestors and a range of its descendants;
``check_for_gc(..., index=...)`` uses it. An index is a snapshot: a repository created, or an import
recorded, after it was taken is not in it, which is sound because such a creation or import is
itself refused when it overlaps a repository that exists (its own check sees that repository's
record), and a repository's own namespace is still resolved per check. A symlink swapped into a
path after the snapshot is the local block store's business (no write or delete follows one
beneath a root). Callers keep an index for a bounded time (the GC daemon: a minute).
"""

from __future__ import annotations

import bisect
import contextlib
from collections.abc import AsyncIterable, AsyncIterator, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from lakefs_core.errors import (
    BadInputError,
    NamespaceConflictError,
    NotFoundError,
    PreconditionFailedError,
    TooManyRetriesError,
)
from lakefs_core.kv.base import Expect
from lakefs_core.namespace import StorageNamespace
from lakefs_core.realpaths import real_locations, real_namespace
from lakefs_core.refs.store import NamespaceClaim, claim_value
from lakefs_core.repos.context import HasContext, RepoContext


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


async def check_available(ctx: RepoContext, storage_namespace: str, repo_id: str) -> StorageNamespace:
    """Raise :class:`NamespaceConflictError` if a repository other than ``repo_id`` claims or uses
    a namespace equal to, inside or enclosing ``storage_namespace`` (a read-only check, e.g. for an
    API to refuse early; only :meth:`create_repository` claims atomically). Compared at its real
    path (:mod:`lakefs_core.realpaths`), which is returned."""
    ns = (await real_namespace(storage_namespace)).check_repository_namespace()
    current = await ctx.refs.get_namespace_claim(ns.canonical)
    if current is not None and current.owner not in (None, repo_id):
        raise NamespaceConflictError(
            f"storage namespace {ns.uri} is already in use by repository {current.owner!r}"
        )
    await _check_overlaps(ctx, ns, repo_id)
    return ns


async def check_for_gc(
    repos: HasContext, repo_id: str, *, index: NamespaceIndex | None = None
) -> StorageNamespace:
    """What GC (mark, sweep, the hard-delete reconciler) checks before it deletes anything in the
    namespace of ``repo_id``: that it still resolves to the real path recorded for it, and overlaps
    no other repository's namespace (live or being deleted) and no import source of a live
    repository (its own included), every side compared where it leads NOW (or when ``index`` was
    taken: see the module docstring). One :class:`NamespaceConflictError` naming what is wrong
    otherwise; the namespace is returned."""
    ctx = repos.context
    repo = await ctx.repository(repo_id)
    ns = await check_recorded(repo.storage_namespace, f"repository {repo_id!r}")
    # Claims without a record are creations in flight: each is refused by its own step 2, which
    # sees this repository's record, before it writes anything.
    if index is None:
        await _check_overlaps(ctx, ns, repo_id, claims=False)
    else:
        index.check(ns, repo_id)
    return ns


@dataclass
class NamespaceIndex:
    """Every repository record's namespace (being deleted too) and every live repository's import
    source, as stored and where each led when :meth:`load` ran, indexed by canonical form: one
    :meth:`check` costs a dictionary probe per ancestor of the namespace and a bisection, whatever
    the number of records (see the module docstring for why a snapshot is sound)."""

    _at: dict[str, list[_Place]] = field(default_factory=dict)
    _keys: list[str] = field(default_factory=list)
    _unknown: list[_Place] = field(default_factory=list)  # where they lead is unknown: overlap any local

    @classmethod
    async def load(cls, repos: HasContext) -> NamespaceIndex:
        ctx = repos.context
        records = [r async for r in ctx.refs.list_repositories(include_deleting=True)]
        named = [(_Owner(r.id, None), r.storage_namespace) for r in records]
        uids = {r.id: r.instance_uid for r in records}
        named += [
            (_Owner(src.repo, src.source), src.source)
            async for src in ctx.refs.import_sources("", within=True)
            if uids.get(src.repo) == src.instance_uid  # the importing repository and its entries live
        ]
        index = cls()
        for (owner, uri), now in zip(named, await real_locations([u for _, u in named]), strict=True):
            index._add(owner, uri, now)
        index._keys = sorted(index._at)
        return index

    def _add(self, owner: _Owner, uri: str, now: StorageNamespace | BadInputError | None) -> None:
        try:
            stored: StorageNamespace | None = StorageNamespace.parse(uri)
        except BadInputError:
            stored = None
        if isinstance(now, BadInputError):
            self._unknown.append(_Place(owner, f"{_shown(uri)} (where it leads is unknown: {now})"))
        for where in {w.canonical: w for w in (stored, now) if isinstance(w, StorageNamespace)}.values():
            shown = where.uri if where is stored else f"{_shown(uri)} (which leads to {where.uri})"
            self._at.setdefault(where.canonical, []).append(_Place(owner, shown, where))

    def check(self, ns: StorageNamespace, repo_id: str) -> None:
        """Raise :class:`NamespaceConflictError` for the first record overlapping ``ns`` other than
        ``repo_id``'s own repository record (its import sources count)."""
        canonical = ns.canonical
        start = bisect.bisect_left(self._keys, canonical)
        inside = []
        for key in self._keys[start:]:
            if not key.startswith(canonical):
                break
            inside.append(key)
        unknown = self._unknown if ns.scheme == "local" else []
        for key in [*ns.ancestors(), *inside]:
            for place in self._at.get(key, ()):
                self._refuse_place(ns, repo_id, place)
        for place in unknown:
            self._refuse_place(ns, repo_id, place)

    @staticmethod
    def _refuse_place(ns: StorageNamespace, repo_id: str, place: _Place) -> None:
        owner = place.owner
        if owner.source is None and owner.repo == repo_id:
            return  # the repository's own record
        relation = "may overlap" if place.where is None else _relation(ns, place.where)
        if owner.source is None:
            _refuse(ns, Overlap(owner.repo, place.shown, relation))
        raise NamespaceConflictError(
            f"storage namespace {ns.uri} {relation} {place.shown}, from which repository "
            f"{owner.repo!r} imported objects its entries point at"
        )


@dataclass(frozen=True)
class _Owner:
    repo: str
    source: str | None  # None: the repository's namespace; else one of its import sources


@dataclass(frozen=True)
class _Place:
    owner: _Owner
    shown: str
    where: StorageNamespace | None = None


async def check_recorded(stored: str, whose: str) -> StorageNamespace:
    """``stored`` (a namespace as a record holds it) if it is in normal form and resolves to itself
    (:func:`~lakefs_core.realpaths.real_namespace`); a namespace that leads elsewhere than it reads
    (a symlink swapped in after its creation, or a record written through one) is refused: what is
    there now was never checked as this repository's."""
    try:
        recorded = StorageNamespace.parse(stored)
        real = await real_namespace(stored)
    except BadInputError as e:
        raise NamespaceConflictError(
            f"storage namespace {stored[:300]!r} of {whose} cannot be resolved ({e}): "
            "GC deletes nothing in it"
        ) from None
    if real.uri != recorded.uri:
        raise NamespaceConflictError(
            f"storage namespace {recorded.uri} of {whose} now leads to {real.uri}, not the real path "
            "recorded for it: GC deletes nothing in it"
        )
    return recorded


async def _check_overlaps(
    ctx: RepoContext, ns: StorageNamespace, repo_id: str, *, claims: bool = True
) -> None:
    """Every live claim (with ``claims``), import source and repository record (being deleted too)
    of others against ``ns``: a scan of each partition, since records written before real paths
    were stored, or whose path leads elsewhere now, are found by no prefix of ``ns``."""
    if claims:
        others = ((c.owner, c.namespace) async for c in _live_claims(ctx) if c.owner not in (None, repo_id))
        _refuse(ns, await first_overlap(others, ns))
    await _check_import_sources(ctx, ns)
    # Repositories created before namespace claims existed (or by lakeFS itself) have no claim.
    repos = ctx.refs.list_repositories(include_deleting=True)
    recorded = ((r.id, r.storage_namespace) async for r in repos if r.id != repo_id)
    _refuse(ns, await first_overlap(recorded, ns))


def _refuse(ns: StorageNamespace, found: Overlap | None) -> None:
    if found is not None:
        raise NamespaceConflictError(
            f"storage namespace {ns.uri} {found.relation} {found.shown}, the storage namespace of "
            f"repository {found.name!r}"
        )


def _live_claims(ctx: RepoContext) -> AsyncIterator[NamespaceClaim]:
    return ctx.refs.namespace_claims_within("")  # every live claim: "" is a prefix of every key


async def _check_import_sources(ctx: RepoContext, ns: StorageNamespace) -> None:
    """Refuse ``ns`` over a source a live repository imported from (its entries point there)."""
    sources = [src async for src in ctx.refs.import_sources("", within=True)]
    for found in await overlapping(((str(i), s.source) for i, s in enumerate(sources)), ns):
        src = sources[int(found.name)]
        try:
            repo, _ = await ctx.refs.get_repository_raw(src.repo)
        except NotFoundError:
            continue  # the importing repository is gone, and its entries with it
        if repo.instance_uid == src.instance_uid:
            raise NamespaceConflictError(
                f"storage namespace {ns.uri} {found.relation} {found.shown}, from which repository "
                f"{src.repo!r} imported objects its entries point at"
            )


async def claimed_overlap(ctx: RepoContext, ns: StorageNamespace) -> Overlap | None:
    """A live claim equal to, enclosing or inside ``ns`` (a repository being created has its claim
    before its record), or None; ``name`` is the claiming repository."""
    claims = ((c.owner, c.namespace) async for c in _live_claims(ctx) if c.owner is not None)
    return await first_overlap(claims, ns)


@dataclass(frozen=True)
class Overlap:
    """Another location found overlapping: whose (``name``), as shown in a message (``shown``: the
    stored form, and where it leads now when that differs), and ``relation`` ("equals", "is
    inside", "encloses", or "may overlap" when where it leads is unknown)."""

    name: str
    shown: str
    relation: str


def _shown(uri: str) -> str:
    """A stored location in a message: its normal form if it has one (no canonical trailing "/")."""
    try:
        return StorageNamespace.parse(uri).uri
    except BadInputError:
        return repr(uri[:300])


def _relation(ns: StorageNamespace, other: StorageNamespace) -> str:
    if ns.canonical == other.canonical:
        return "equals"
    return "is inside" if ns.canonical.startswith(other.canonical) else "encloses"


async def first_overlap(
    named: AsyncIterable[tuple[str, str]] | Iterable[tuple[str, str]], ns: StorageNamespace
) -> Overlap | None:
    """The first ``(name, stored location)`` of ``named`` that equals, lies inside or encloses
    ``ns``, or None (see :func:`overlapping`)."""
    found = await overlapping(named, ns, first=True)
    return found[0] if found else None


async def overlapping(
    named: AsyncIterable[tuple[str, str]] | Iterable[tuple[str, str]],
    ns: StorageNamespace,
    *,
    first: bool = False,
) -> list[Overlap]:
    """Those ``(name, stored location)`` of ``named`` that equal, lie inside or enclose ``ns``
    (normal, and real for a local one) as stored or where they lead NOW; with ``first``, at most
    one (resolving nothing when one overlaps as stored). One whose path cannot be resolved now
    overlaps (unknown is never safe). A scheme this library cannot open (gs://) overlaps nothing."""
    items = [x async for x in named] if isinstance(named, AsyncIterable) else list(named)
    found: list[Overlap] = []
    late: list[tuple[str, str]] = []
    for name, uri in items:  # as stored: no I/O
        try:
            other = StorageNamespace.parse(uri)
        except BadInputError:
            other = None  # not normal (or not ours): only where it leads can tell
        if other is not None and other.overlaps(ns):
            found.append(Overlap(name, other.uri, _relation(ns, other)))
            if first:
                return found
        else:
            late.append((name, uri))
    if ns.scheme != "local":
        return found  # a local path leads into no other store
    for (name, uri), now in zip(late, await real_locations([u for _, u in late]), strict=True):
        if isinstance(now, BadInputError):
            found.append(Overlap(name, f"{_shown(uri)} (where it leads is unknown: {now})", "may overlap"))
        elif now is not None and now.overlaps(ns):
            found.append(Overlap(name, f"{_shown(uri)} (which leads to {now.uri})", _relation(ns, now)))
        else:
            continue
        if first:
            break
    return found


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


async def deleted_repository_at(ctx: RepoContext, ns: StorageNamespace) -> str | None:
    """The deleted repository (of this KV) whose namespace was ``ns``, described for a message, or
    None. Creation asks when ``ns`` already holds a repository marker: a deleted repository's data
    is never taken over silently (GC still collects what it left there)."""
    async for gone in ctx.refs.deleted_repositories():
        with contextlib.suppress(BadInputError):
            if StorageNamespace.parse(gone.namespace).canonical == ns.canonical:
                when = datetime.fromtimestamp(gone.deleted_at, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
                return f"repository {gone.repo!r}, deleted {when}"
    return None


async def write_marker(ctx: RepoContext, ns: StorageNamespace, repo_id: str, *, reuse: bool) -> None:
    """Write the lakeFS marker ``_lakefs/dummy`` of a repository being created, create-only (see
    :meth:`~lakefs_core.repos.graveler.Graveler.create_repository` for what an existing one means)."""
    # The marker names its repository, so a creation that crashed after writing it can be
    # retried under the same id; any other id, or a deleted repository's, is refused.
    store = await ctx.stores.namespace_store(ns)
    marker = f"lakefs-open repository {repo_id}\n".encode()
    try:
        await store.put(ns.dummy_key(), marker, if_none_match=True)
        return
    except PreconditionFailedError as e:
        found = e
    if reuse:
        await store.put(ns.dummy_key(), marker)  # the user's explicit consent (see the docstring)
        return
    deleted = await deleted_repository_at(ctx, ns)
    if await store.get(ns.dummy_key()) == marker and deleted is None:
        return  # this id's crashed creation, retried
    held = f"a deleted repository ({deleted})" if deleted else "a repository"
    msg = (
        f"storage namespace {ns.uri} is already in use by {held}: {ns.dummy_key()} exists; "
        "reusing it needs an explicit choice (lakefs-core repo create --reuse-namespace)"
    )
    raise NamespaceConflictError(msg) from found
