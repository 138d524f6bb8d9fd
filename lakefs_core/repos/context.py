"""What the repository helpers work with: :class:`RepoContext`, built by the ``Graveler`` facade.

The helpers of :mod:`lakefs_core.repos` (``staging_writes``, ``reading``, ``committing``, ``admin``,
``namespace_claims``, ``importing``, ``journal``, ``objects``, ``purge``) take a context, never the
facade: the facade (:mod:`.graveler`) builds one and delegates to them, so no helper imports it.

A context holds the KV store and the stores of refs and staging over it, the block-store opener
(:class:`~lakefs_core.repos.stores.StoreRegistry`, with the table cache), the settings, the clock,
the writers' caches as objects with methods (:class:`WriteCache`, :class:`JournalFlags`), and the
listings' cache of committed directories (:class:`~lakefs_core.repos.listing.ListingCache`),
and answers what every helper asks: a repository record, whether it may be written, a ref resolved
in lakeFS's order, a metarange, a namespace's block store.

Public entry points of the helpers accept anything with a ``context`` (:class:`HasContext`): a
``Graveler`` or a context itself (whose ``context`` is itself).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import lru_cache
from typing import Protocol, TypeVar

from lakefs_core.block.base import BlockStore
from lakefs_core.committed.metarange import MetaRange
from lakefs_core.committed.tables import TableStore
from lakefs_core.errors import NotFoundError, ReadOnlyError
from lakefs_core.format.splitter import SplitPolicy
from lakefs_core.kv.base import KVEntry, KVStore
from lakefs_core.namespace import StorageNamespace
from lakefs_core.refs import kvkeys
from lakefs_core.refs.ids import is_commit_id
from lakefs_core.refs.model import Branch, Commit, Repository
from lakefs_core.refs.staging import StagingArea
from lakefs_core.refs.store import RefStore, no_branch_message
from lakefs_core.repos.listing import DEFAULT_TOTAL_CHILDREN, ListingCache
from lakefs_core.repos.protection import ProtectionCache
from lakefs_core.repos.refexpr import parse_ref
from lakefs_core.repos.stores import StoreRegistry

__all__ = [
    "GravelerSettings",
    "HasContext",
    "JournalFlags",
    "RepoContext",
    "Resolved",
    "WriteCache",
    "utcnow",
]


# Branches a process remembers in each of its per-branch caches (the guesses of resolve_staged,
# the writers' live tokens and branch records): a long-lived server sees branches come and go, and
# a forgotten one only costs a read.
_SEEN_BRANCHES = 10_000

_K = TypeVar("_K")
_V = TypeVar("_V")


def _keep(cache: dict[_K, _V], key: _K, value: _V) -> None:
    """``cache[key] = value``, the cache emptied first when it holds :data:`_SEEN_BRANCHES` keys."""
    if len(cache) >= _SEEN_BRANCHES and key not in cache:
        cache.clear()
    cache[key] = value


@dataclass(frozen=True)
class GravelerSettings:
    commit_attempts: int = 20
    write_attempts: int = 20
    backoff_initial: float = 0.005
    backoff_max: float = 0.5
    cleanup_grace_seconds: float = 30.0
    split_policy: SplitPolicy = field(default_factory=SplitPolicy)
    # Staged writes reuse the repository record and the live staging token seen within this many
    # seconds (the writer protocol's re-read catches a stale token; see ``staging_writes``). A
    # read-only flag set by another process therefore reaches this process's writers within this delay.
    write_cache_seconds: float = 1.0
    # Writers check branch protection rules read within this many seconds (lakeFS's settings cache
    # keeps them 3 s): a rule added by another process binds this process's writers within it.
    protection_cache_seconds: float = 3.0
    # The hard-delete journal (journal.py) for repositories created without an explicit choice. Off
    # in the library (a repository shared with a writer that keeps no journal must not have it); the
    # project's configuration turns it on for new repositories.
    hard_delete_journal: bool = False
    # REST imports (import_status): the running process refreshes an import's status record every
    # import_heartbeat_seconds (lakeFS's statusUpdateInterval); a record not refreshed for
    # import_stale_seconds reads as failed (its process died). The schema checks stale >= several
    # heartbeats (lakefs_core.settings.CoreSettings).
    import_heartbeat_seconds: float = 1.0
    import_stale_seconds: float = 60.0
    # The listings' cache of committed directories (.listing): at most this many children in all
    # (0: no cache). The core's configuration sets it (CoreSettings.listing_cache_children).
    listing_cache_children: int = DEFAULT_TOTAL_CHILDREN


@dataclass(frozen=True)
class Resolved:
    """A ref resolved to a commit; ``branch`` is set when staged changes are visible through it."""

    commit: Commit
    branch: Branch | None = None

    @property
    def tokens(self) -> tuple[str, ...]:
        if self.branch is None:
            return ()
        return (self.branch.staging_token, *self.branch.sealed_tokens)


@lru_cache(maxsize=256)
def _namespace(uri: str) -> StorageNamespace:
    """A repository's namespace, parsed once per process (immutable; a bad one is never kept)."""
    return StorageNamespace.parse(uri)


def utcnow() -> datetime:
    return datetime.now(UTC)


class WriteCache:
    """The repository records, live staging tokens and branch records writers saw recently
    (``staging_writes``).

    Times are the caller's monotonic clock, passed in: an entry older than ``max_age`` is a miss.
    """

    def __init__(self) -> None:
        self._repos: dict[str, tuple[float, Repository]] = {}
        self._tokens: dict[tuple[bytes, str], tuple[float, str]] = {}
        self._branches: dict[tuple[bytes, str], tuple[float, Branch, bytes]] = {}

    def repository(self, repo_id: str, now: float, max_age: float) -> Repository | None:
        hit = self._repos.get(repo_id)
        return hit[1] if hit is not None and now - hit[0] < max_age else None

    def keep_repository(self, repo: Repository, now: float) -> None:
        self._repos[repo.id] = (now, repo)

    def forget_repository(self, repo_id: str) -> None:
        self._repos.pop(repo_id, None)

    def live_token(self, repo: Repository, branch_id: str, now: float, max_age: float) -> str | None:
        hit = self._tokens.get((repo.partition, branch_id))
        return hit[1] if hit is not None and now - hit[0] < max_age else None

    def keep_live_token(self, repo: Repository, branch_id: str, token: str, now: float) -> None:
        _keep(self._tokens, (repo.partition, branch_id), (now, token))

    def branch(
        self, repo: Repository, branch_id: str, now: float, max_age: float
    ) -> tuple[Branch, bytes] | None:
        """The branch and its record's bytes as a settled staging step last found them."""
        hit = self._branches.get((repo.partition, branch_id))
        return (hit[1], hit[2]) if hit is not None and now - hit[0] < max_age else None

    def keep_branch(self, repo: Repository, branch_id: str, branch: Branch, raw: bytes, now: float) -> None:
        _keep(self._branches, (repo.partition, branch_id), (now, branch, raw))
        _keep(self._tokens, (repo.partition, branch_id), (now, branch.staging_token))

    def forget(self, repo: Repository, branch_id: str) -> None:
        """The repository may have been deleted or re-created: forget its record and the branch's
        token and record."""
        self._repos.pop(repo.id, None)
        self._tokens.pop((repo.partition, branch_id), None)
        self._branches.pop((repo.partition, branch_id), None)


class JournalFlags:
    """Whether each repository keeps the hard-delete journal, as read recently (``journal``)."""

    def __init__(self) -> None:
        self._flags: dict[bytes, tuple[float, bool]] = {}

    def get(self, repo: Repository, now: float, max_age: float) -> bool | None:
        hit = self._flags.get(repo.partition)
        return hit[1] if hit is not None and now - hit[0] < max_age else None

    def keep(self, repo: Repository, on: bool, now: float) -> None:
        self._flags[repo.partition] = (now, on)

    def forget(self, repo: Repository) -> None:
        self._flags.pop(repo.partition, None)


class HasContext(Protocol):
    """A ``Graveler`` or a :class:`RepoContext`: what the helpers' public entry points accept."""

    @property
    def context(self) -> RepoContext: ...


class RepoContext:
    """The state and the common reads of one process's repositories (see the module docstring)."""

    def __init__(
        self,
        kv: KVStore,
        stores: StoreRegistry,
        settings: GravelerSettings | None = None,
        *,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self.kv = kv
        self.stores = stores
        self.settings = settings or GravelerSettings()
        self.clock = clock
        self.refs = RefStore(kv)
        self.staging = StagingArea(kv)
        self.write_cache = WriteCache()
        self.journal_flags = JournalFlags()
        self.protection = ProtectionCache()
        # children of committed directories, by metarange id (immutable: never stale; .listing)
        self.listings = ListingCache(self.settings.listing_cache_children)
        # (repository partition, branch) -> the live staging token its last read found: a guess
        # for resolve_staged, never trusted without the branch record read with it
        self._seen_tokens: dict[tuple[bytes, str], str] = {}

    @property
    def context(self) -> RepoContext:
        return self

    async def repository(self, repo_id: str) -> Repository:
        return await self.refs.get_repository(repo_id)

    def writable(self, repo: Repository, force: bool) -> None:
        if repo.read_only and not force:
            raise ReadOnlyError(f"repository {repo.id!r} is read-only")

    async def resolve(self, repo: Repository, ref: str) -> Resolved:
        """Resolve ``ref`` in lakeFS's order: an existing full commit id, then a branch, then a tag."""
        expr = parse_ref(ref)
        branch: Branch | None = None
        commit: Commit | None = None
        if is_commit_id(expr.base):
            with contextlib.suppress(NotFoundError):
                commit = await self.refs.get_commit(repo, expr.base)
        if commit is None:
            try:
                branch, _ = await self.refs.get_branch(repo, expr.base)
                commit_id = branch.commit_id
            except NotFoundError:
                try:
                    commit_id = (await self.refs.get_tag(repo, expr.base)).commit_id
                except NotFoundError:
                    if expr.base == repo.default_branch:  # a bare repository
                        raise NotFoundError(no_branch_message(repo, expr.base)) from None
                    what = f"ref {expr.base!r} not found in repository {repo.id!r}"
                    raise NotFoundError(f"{what} (no such branch, tag or commit)") from None
            commit = await self.refs.get_commit(repo, commit_id)
        for op, n in expr.modifiers:
            commit = await self._walk(repo, commit, op, n, ref)
        if branch is not None and expr.plain:
            self._see_token(repo, branch)
        return Resolved(commit, branch if expr.plain else None)

    async def resolve_staged(
        self, repo: Repository, ref: str, start: bytes, end: bytes, size: int
    ) -> tuple[Resolved, list[KVEntry] | None]:
        """:meth:`resolve`, and on a branch also the first ``size`` staged entries of its live token
        in ``[start, end)``, read in the SAME KV call as the branch record (one hop to SQLite's
        thread instead of two) when the token is the one this process's last read of the branch
        found (``None`` otherwise: the caller reads them itself). The token is only a guess: the
        entries are used only if the branch record read with them names that very token, and the
        branch is read before them, as :meth:`resolve` then a staging read would."""
        expr = parse_ref(ref)
        guess = self._seen_tokens.get((repo.partition, expr.base))
        if guess is None or not expr.plain or is_commit_id(expr.base):
            return await self.resolve(repo, ref), None
        staged = (kvkeys.staging_partition(guess), start, end)
        branch, entries = await self.refs.get_branch_then_range(repo, expr.base, staged, size)
        if branch is None:  # deleted meanwhile, or a tag now: lakeFS's order, from the start
            self._seen_tokens.pop((repo.partition, expr.base), None)
            return await self.resolve(repo, ref), None
        commit = await self.refs.get_commit(repo, branch.commit_id)
        self._see_token(repo, branch)
        return Resolved(commit, branch), entries if branch.staging_token == guess else None

    def _see_token(self, repo: Repository, branch: Branch) -> None:
        _keep(self._seen_tokens, (repo.partition, branch.id), branch.staging_token)

    async def _walk(self, repo: Repository, commit: Commit, op: str, n: int, ref: str) -> Commit:
        if op == "^":
            if n == 0:
                return commit
            if n > len(commit.parents):
                raise NotFoundError(f"{ref!r}: commit {commit.id[:12]} has no parent number {n}")
            return await self.refs.get_commit(repo, commit.parents[n - 1])
        for _ in range(n):
            if not commit.parents:
                raise NotFoundError(f"{ref!r}: history is shorter than that")
            commit = await self.refs.get_commit(repo, commit.parents[0])
        return commit

    async def namespace_store(self, namespace: StorageNamespace) -> BlockStore:
        """The block store holding ``namespace`` (opened once per process)."""
        return await self.stores.namespace_store(namespace)

    async def source_store(self, source: StorageNamespace) -> BlockStore:
        """The block store an import lists ``source`` from (:meth:`StoreRegistry.source_store`)."""
        return await self.stores.source_store(source)

    async def namespace_tables(self, namespace: StorageNamespace) -> TableStore:
        """The ranges and metaranges of ``namespace``, through the shared table cache."""
        return await self.stores.tables(namespace)

    async def metarange(self, repo: Repository, metarange_id: str) -> MetaRange:
        tables = await self.stores.tables(_namespace(repo.storage_namespace))
        return await MetaRange.load(tables, metarange_id)

    async def has_uncommitted(self, repo: Repository, branch: Branch) -> bool:
        for token in (branch.staging_token, *branch.sealed_tokens):
            if not await self.staging.is_empty(token):
                return True
        return False
