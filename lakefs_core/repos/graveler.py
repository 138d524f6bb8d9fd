"""Graveler over KV: repositories, branches, tags, refs and staged entries (spec sections 6-7).

Layout and records follow lakeFS exactly, so a mirror or GC pointed at the same KV store and
namespaces sees what it would see in a lakeFS installation.

- Repository creation writes the first commit ("Repository created", empty metarange), then the
  default branch, then the repository record last (``SetIf`` absent): a crash leaves unreachable
  records in a fresh partition, never a half repository. Before that, the storage namespace is
  claimed for it alone (:mod:`.namespace_claims`). Creation, the read-only flag and deletion live
  in :mod:`.repositories`; branch and tag changes in :mod:`.branches`; log and diffs in
  :mod:`.history`.
- Reads on a branch consult the live staging token, then the sealed tokens (newest first), then
  the committed metarange; a tombstone means "not found". ``ref@`` and ``~N``/``^N`` refs read
  committed data only.
- Writers write to the live token and re-read the branch; if a commit rotated the token meanwhile
  the write is repeated on the new token (idempotent by identity), so no write is lost to a commit.
  One entry or a batch in one KV ``set_many``: :mod:`.staging_writes`.
- Read-only repositories (mirrors) refuse every write unless the caller passes ``force=True``.
- The facade holds no state of its own: it builds a :class:`~lakefs_core.repos.context.RepoContext`
  (KV, refs, staging, block stores, settings, clock, the writers' caches) and delegates to the
  helpers, which take that context and never import this module (``repositories``, ``branches``,
  ``history``, ``reading``, ``staging_writes``, ``admin``, ``namespace_claims``, ``committing``,
  ``importing``, ``journal``, ``purge``, ``protection``;
  :class:`~lakefs_core.repos.objects.Objects` takes the facade or its context).
- Daemons use this facade for repositories: administrative compare-and-swap ref moves, verbatim
  commit copies and ancestry queries live in :mod:`.admin`; the model types, :class:`StorageNamespace`
  and :func:`~lakefs_core.keys.table_name` are re-exported here for them. Committed data
  (:mod:`lakefs_core.committed`) and block stores are the other seam they read (GC, mirror validation).

Commits, merges and reverts live in :mod:`.committing`; object bytes in :mod:`.objects`; the
hard-delete journal and retention GC's uncommitted seam in :mod:`.journal` (reached through
:meth:`Graveler.journal` and :meth:`Graveler.staged_addresses`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING

from lakefs_core.block.base import BlockStore
from lakefs_core.committed.metarange import MetaRange
from lakefs_core.committed.model import DiffRecord, MergeStrategy
from lakefs_core.committed.tables import TableStore
from lakefs_core.errors import (
    NotFoundError,
)
from lakefs_core.format.records import ValueRecord
from lakefs_core.keys import (
    DATA_DIR,
    DUMMY_NAME,
    TABLES_DIR,
    AddressType,
    RunIds,
    check_run_id,
    new_run_id,
    slice_hour,
    table_name,
)
from lakefs_core.kv.base import Expect, KVStore
from lakefs_core.namespace import StorageNamespace
from lakefs_core.refs import kvkeys
from lakefs_core.refs.ids import is_commit_id, validate_branch_id, validate_repo_id
from lakefs_core.refs.model import (
    Branch,
    Commit,
    CommitNode,
    Repository,
    Tag,
)
from lakefs_core.refs.staging import StagingArea, tombstone
from lakefs_core.refs.store import DeletedRepository, RefStore, RepoRefs
from lakefs_core.repos import (
    admin,
    branches,
    history,
    namespace_claims,
    protection,
    reading,
    repositories,
    staging_writes,
)
from lakefs_core.repos.context import GravelerSettings, RepoContext, Resolved, utcnow
from lakefs_core.repos.journal import (
    DEFAULT_CLOCK_SKEW_SECONDS,
    Decision,
    GCSettings,
    Intent,
    Journal,
    forget_deleted_repository,
    journal_enabled,
)
from lakefs_core.repos.journal import staged_addresses as journal_staged_addresses
from lakefs_core.repos.repositories import INITIAL_COMMIT_MESSAGE
from lakefs_core.repos.stores import StoreRegistry

if TYPE_CHECKING:
    from lakefs_core.repos import importing, purge
    from lakefs_core.repos.purge import PurgeRecord, PurgeReport

# Imported by the methods that use them (commits, imports, purges): an upload or a listing never
# loads them, ~20 ms of every command's start-up. A daemon loads them before it freezes its start-up
# heap (``freeze_startup_heap(preload=LAZY_MODULES)``), so none is imported on its event loop.
LAZY_MODULES = (
    "lakefs_core.repos.committing",
    "lakefs_core.repos.entry_commits",
    "lakefs_core.repos.importing",
    "lakefs_core.repos.purge",
)


def __getattr__(name: str) -> object:
    """The re-exported purge records, imported on first use (see the TYPE_CHECKING block)."""
    if name in ("PurgeRecord", "PurgeReport"):
        from lakefs_core.repos import purge

        return getattr(purge, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# The facade is the seam for daemons: what they need of the model and of the key layout is
# re-exported here, so they never import lakefs_core.refs, repos.stores or the key modules.
__all__ = [
    "DATA_DIR",
    "DEFAULT_CLOCK_SKEW_SECONDS",
    "DUMMY_NAME",
    "INITIAL_COMMIT_MESSAGE",
    "LAZY_MODULES",
    "TABLES_DIR",
    "AddressType",
    "Branch",
    "Commit",
    "CommitNode",
    "Decision",
    "Graveler",
    "GravelerSettings",
    "Intent",
    "Journal",
    "PurgeRecord",
    "PurgeReport",
    "RepoRefs",
    "Repository",
    "Resolved",
    "RunIds",
    "StorageNamespace",
    "StoreRegistry",
    "Tag",
    "check_run_id",
    "forget_deleted_repository",
    "is_commit_id",
    "new_run_id",
    "slice_hour",
    "table_name",
    "validate_branch_id",
    "validate_repo_id",
]


class Graveler:
    """Versioned repositories over one KV store and the block stores of their namespaces."""

    def __init__(
        self,
        kv: KVStore,
        stores: StoreRegistry,
        settings: GravelerSettings | None = None,
        *,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        # Everything the helpers work with; the facade keeps no state of its own.
        self.context = RepoContext(kv, stores, settings, clock=clock)

    @property
    def kv(self) -> KVStore:
        return self.context.kv

    @property
    def stores(self) -> StoreRegistry:
        return self.context.stores

    @stores.setter
    def stores(self, stores: StoreRegistry) -> None:
        self.context.stores = stores

    @property
    def settings(self) -> GravelerSettings:
        return self.context.settings

    @property
    def clock(self) -> Callable[[], datetime]:
        return self.context.clock

    @property
    def refs(self) -> RefStore:
        return self.context.refs

    @property
    def staging(self) -> StagingArea:
        return self.context.staging

    # -- repositories -----------------------------------------------------------------------------

    async def create_repository(
        self,
        repo_id: str,
        storage_namespace: str,
        default_branch: str = "main",
        *,
        read_only: bool = False,
        claim_namespace: bool = True,
        initial_commit: Commit | None = None,
        hard_delete_journal: bool | None = None,
        reuse_namespace: bool = False,
        bare: bool = False,
    ) -> Repository:
        """Create a repository owning ``storage_namespace`` exclusively.

        The namespace is claimed in the KV first (:mod:`.namespace_claims`): one that equals, lies
        inside or encloses another repository's is refused with :class:`NamespaceConflictError`, and
        so are the filesystem root and system directories (:class:`BadInputError`). With
        ``claim_namespace`` the lakeFS marker ``_lakefs/dummy`` is also written create-only (mirrors,
        whose namespace receives a replica of the source's marker, pass False; they still take the KV
        claim). ``initial_commit`` seeds the repository with an existing root commit record (a mirror
        copies its source's, so their histories share ids). The claim is released again when the
        creation fails, unless a repository of this id exists by then (it owns the claim).
        ``hard_delete_journal`` (default: the settings') turns the journal on from the start.
        A local namespace is recorded, claimed and compared at its real path (a dangling symlink
        in it is refused): the record returned shows it.

        As lakeFS, a namespace that already holds a repository's ``_lakefs/dummy`` is refused
        (:class:`NamespaceConflictError` naming the marker and, when known, the deleted repository
        that left it), with one exception: the marker of this very id with no deleted repository
        behind it (a creation that crashed after writing it, retried). ``reuse_namespace`` is the
        user's explicit consent to take over such a namespace (a live repository's is still refused
        by the claim).

        ``bare`` (lakeFS's CreateBareRepository, the target of a refs restore) writes the repository
        record alone: no commit, no branch (its default branch does not exist until one is restored),
        and, as lakeFS's plumbing call, no ``_lakefs/dummy`` marker; the namespace is still claimed."""
        return await repositories.create_repository(
            self.context,
            repo_id,
            storage_namespace,
            default_branch,
            read_only=read_only,
            claim_namespace=claim_namespace,
            initial_commit=initial_commit,
            hard_delete_journal=hard_delete_journal,
            reuse_namespace=reuse_namespace,
            bare=bare,
        )

    async def check_namespace_available(self, storage_namespace: str, repo_id: str) -> None:
        """Raise :class:`NamespaceConflictError` if a repository other than ``repo_id`` claims or uses
        a namespace equal to, inside or enclosing ``storage_namespace`` (a read-only check, e.g. for an
        API to refuse early; only :meth:`create_repository` claims atomically)."""
        await namespace_claims.check_available(self.context, storage_namespace, repo_id)

    async def repository(self, repo_id: str) -> Repository:
        return await self.refs.get_repository(repo_id)

    async def recent_repository(self, repo_id: str) -> Repository:
        """The repository record as read at most ``write_cache_seconds`` ago (the one writers use):
        for paths that need it once per object, such as reading many objects' bytes."""
        return await staging_writes.repository_for_write(self.context, repo_id)

    def list_repositories(self) -> AsyncIterator[Repository]:
        return self.refs.list_repositories()

    async def set_read_only(self, repo_id: str, read_only: bool) -> Repository:
        return await repositories.set_read_only(self.context, repo_id, read_only)

    async def delete_repository(self, repo_id: str) -> None:
        """Mark the repository as being deleted, record its namespace in ``deleted-repos/`` (so its
        objects can be purged later instead of being orphaned), drop its staging and records, then its
        record, then release its storage namespace claim (the namespace's objects are left alone)."""
        await repositories.delete_repository(self.context, repo_id)

    def writable(self, repo: Repository, force: bool) -> None:
        self.context.writable(repo, force)

    # -- refs ---------------------------------------------------------------------------------------

    async def resolve(self, repo: Repository, ref: str) -> Resolved:
        """Resolve ``ref`` in lakeFS's order: an existing full commit id, then a branch, then a tag."""
        return await self.context.resolve(repo, ref)

    async def namespace_store(self, namespace: StorageNamespace) -> BlockStore:
        """The block store holding ``namespace`` (opened once per process)."""
        return await self.context.namespace_store(namespace)

    async def source_store(self, source: StorageNamespace) -> BlockStore:
        """The block store an import lists ``source`` from (:meth:`StoreRegistry.source_store`)."""
        return await self.context.source_store(source)

    async def namespace_tables(self, namespace: StorageNamespace) -> TableStore:
        """The ranges and metaranges of ``namespace``, through the shared table cache."""
        return await self.context.namespace_tables(namespace)

    async def metarange(self, repo: Repository, metarange_id: str) -> MetaRange:
        return await self.context.metarange(repo, metarange_id)

    # -- branches -------------------------------------------------------------------------------------

    async def create_branch(
        self, repo_id: str, name: str, source_ref: str, *, force: bool = False, hidden: bool = False
    ) -> Branch:
        """A new branch at ``source_ref``'s commit; ``hidden`` ones are left out of listings unless
        asked for (lakeFS's ephemeral transaction branches)."""
        return await branches.create_branch(
            self.context, repo_id, name, source_ref, force=force, hidden=hidden
        )

    async def branch(self, repo_id: str, name: str) -> Branch:
        repo = await self.repository(repo_id)
        return (await self.refs.get_branch(repo, name))[0]

    async def list_branches(self, repo_id: str, after: str = "") -> AsyncIterator[Branch]:
        repo = await self.repository(repo_id)
        async for branch in self.refs.list_branches(repo, after):
            yield branch

    async def delete_branch(self, repo_id: str, name: str, *, force: bool = False) -> None:
        """Delete a branch (never the default one); its uncommitted changes are discarded."""
        await branches.delete_branch(self.context, repo_id, name, force=force)

    async def reset_branch(
        self, repo_id: str, name: str, to_ref: str | None = None, *, force: bool = False
    ) -> Branch:
        """Drop uncommitted changes; with ``to_ref``, also move the branch to that commit."""
        return await branches.reset_branch(self.context, repo_id, name, to_ref, force=force)

    async def reset_changes(
        self, repo_id: str, branch_id: str, path: bytes, *, prefix: bool, force: bool = False
    ) -> list[bytes]:
        """Drop the uncommitted changes of one path or a prefix (lakeFS's ResetKey/ResetPrefix)."""
        return await staging_writes.reset_changes(
            self.context, repo_id, branch_id, path, prefix=prefix, force=force
        )

    # -- branch protection (see protection.py) ---------------------------------------------------------

    async def get_branch_protection(self, repo_id: str) -> tuple[protection.Rules, str]:
        """The repository's branch protection rules and their checksum (lakeFS's ETag; ``""``: none)."""
        return await protection.get_rules(self.context, await self.repository(repo_id))

    async def set_branch_protection(self, repo_id: str, rules: protection.Rules, if_match: str | None) -> str:
        """Store ``rules`` iff the stored ones have checksum ``if_match`` (``""``: none stored; ``None``:
        unconditionally), else :class:`PreconditionFailedError`; the new checksum."""
        return await protection.set_rules(self.context, await self.repository(repo_id), rules, if_match)

    async def setting(self, repo_id: str, name: str) -> bytes | None:
        """A repository setting's stored bytes (the REST server's branch protection rules and
        metadata), None when never set."""
        repo = await self.repository(repo_id)
        try:
            return await self.kv.get(repo.partition, kvkeys.settings_key(name))
        except NotFoundError:
            return None

    async def set_setting(self, repo_id: str, name: str, value: bytes, expected: bytes | None) -> None:
        """Replace a setting iff it still holds ``expected`` (None: absent);
        :class:`PreconditionFailedError` when it changed meanwhile."""
        repo = await self.repository(repo_id)
        expect = Expect.ABSENT if expected is None else Expect("equals", expected)
        await self.kv.set_if(repo.partition, kvkeys.settings_key(name), value, expect)

    # -- tags ------------------------------------------------------------------------------------------

    async def create_tag(self, repo_id: str, tag: str, ref: str, *, force: bool = False) -> Tag:
        return await branches.create_tag(self.context, repo_id, tag, ref, force=force)

    async def delete_tag(self, repo_id: str, tag: str, *, force: bool = False) -> None:
        await branches.delete_tag(self.context, repo_id, tag, force=force)

    async def list_tags(self, repo_id: str) -> AsyncIterator[Tag]:
        repo = await self.repository(repo_id)
        async for tag in self.refs.list_tags(repo):
            yield tag

    async def refs_of_many(self, repo_ids: Sequence[str], *, tags: bool = False) -> dict[str, RepoRefs]:
        """Many repositories' branches (and tags) in two batched KV reads; a repository that cannot
        be read is left out (see :meth:`RefStore.refs_of_many`)."""
        return await self.refs.refs_of_many(repo_ids, tags=tags)

    async def tag(self, repo_id: str, tag: str) -> Tag:
        repo = await self.repository(repo_id)
        return await self.refs.get_tag(repo, tag)

    # -- administrative moves and history queries (see admin.py) -------------------------------------

    async def set_branch_head_if(
        self, repo_id: str, branch: str, expected: str | None, new_commit: str, *, force: bool = False
    ) -> Branch:
        """Move ``branch`` to ``new_commit`` iff its head is ``expected`` (None: create it)."""
        return await admin.set_branch_head_if(
            self.context, repo_id, branch, expected, new_commit, force=force
        )

    async def set_tag_if(
        self, repo_id: str, tag: str, expected: str | None, commit_id: str, *, force: bool = False
    ) -> Tag:
        """Point ``tag`` at ``commit_id`` iff it points at ``expected`` (None: create it)."""
        return await admin.set_tag_if(self.context, repo_id, tag, expected, commit_id, force=force)

    async def put_commit(self, repo_id: str, commit: Commit, *, force: bool = False) -> None:
        """Store a commit record verbatim (checked to hash to its id; idempotent)."""
        await admin.put_commit(self.context, repo_id, commit, force=force)

    async def get_commit_by_id(self, repo_id: str, commit_id: str) -> Commit:
        """The commit record ``commit_id`` (no ref resolution); :class:`NotFoundError` if absent."""
        repo = await self.repository(repo_id)
        return await self.refs.get_commit(repo, commit_id)

    async def has_commit(self, repo_id: str, commit_id: str) -> bool:
        repo = await self.repository(repo_id)
        return await self.refs.has_commit(repo, commit_id)

    async def is_descendant(self, repo_id: str, commit_id: str, ancestor_id: str) -> bool:
        """True iff ``ancestor_id`` is ``commit_id`` or one of its ancestors."""
        return await admin.is_descendant(self.context, repo_id, commit_id, ancestor_id)

    # -- entries --------------------------------------------------------------------------------------

    async def get_entry(self, repo_id: str, ref: str, key: bytes) -> ValueRecord:
        """The entry at ``key`` of ``ref``: staged over committed, a tombstone is "not found"."""
        return await reading.get_entry(self.context, repo_id, ref, key)

    async def entry(self, repo: Repository, ref: str, key: bytes) -> ValueRecord:
        """:meth:`get_entry` with the repository record already read (a read that needs it too)."""
        return await reading.entry(self.context, repo, ref, key)

    async def set_entry(
        self,
        repo_id: str,
        branch_id: str,
        record: ValueRecord,
        *,
        force: bool = False,
        settle: staging_writes.Settle | None = None,
    ) -> None:
        """Stage ``record`` (or a tombstone) on the branch, surviving concurrent token rotations (the
        writer protocol of :mod:`.staging_writes`: write, re-read the branch, repeat if rotated);
        with ``settle`` (an upload's journal record) only together with that compare-and-swap."""
        await staging_writes.stage_entry(self.context, repo_id, branch_id, record, force=force, settle=settle)

    async def set_entries(
        self,
        repo_id: str,
        branch_id: str,
        records: Sequence[ValueRecord],
        *,
        force: bool = False,
        settle: staging_writes.Settle | None = None,
    ) -> None:
        """Stage ``records`` in one KV batch (one transaction on SQL, ``BatchWriteItem`` on DynamoDB)
        with :meth:`set_entry`'s guarantee per record; with ``settle`` (the journal's batch
        record) in one conditional batch with that compare-and-swap (``TransactWriteItems``)."""
        await staging_writes.set_entries(
            self.context, repo_id, branch_id, records, force=force, settle=settle
        )

    async def delete_entry(self, repo_id: str, branch_id: str, key: bytes, *, force: bool = False) -> None:
        await self.get_entry(repo_id, branch_id, key)  # NotFoundError for a missing object
        await self.set_entry(repo_id, branch_id, tombstone(key), force=force)

    async def delete_entries(
        self, repo_id: str, branch_id: str, keys: Sequence[bytes], *, force: bool = False
    ) -> None:
        """Stage a tombstone for each of ``keys`` in one KV batch (as :meth:`set_entries`). Keys are
        not checked for existence: a tombstone over nothing hides nothing. Only tombstones: values
        are staged by uploads alone (the hard-delete journal's invariant)."""
        records = [tombstone(key) for key in keys]
        await staging_writes.set_entries(self.context, repo_id, branch_id, records, force=force)

    async def list_entries(
        self, repo_id: str, ref: str, *, prefix: bytes = b"", after: bytes = b"", start: bytes = b""
    ) -> AsyncIterator[ValueRecord]:
        """Entries under ``prefix`` with key > ``after`` and >= ``start``, staging over committed,
        tombstones hidden."""
        async for record in reading.list_entries(
            self.context, repo_id, ref, prefix=prefix, after=after, start=start
        ):
            yield record

    # -- history and diff -----------------------------------------------------------------------------

    async def get_commit(self, repo_id: str, ref: str) -> Commit:
        repo = await self.repository(repo_id)
        return (await self.resolve(repo, ref)).commit

    async def log(
        self, repo_id: str, ref: str, *, amount: int | None = None, after: str | None = None
    ) -> AsyncIterator[Commit]:
        """First-parent history from ``ref``; ``after`` continues a page after that commit id."""
        async for commit in history.log(self.context, repo_id, ref, amount=amount, after=after):
            yield commit

    async def commit_nodes(self, repo_id: str) -> AsyncIterator[CommitNode]:
        """Every commit of the repository (reachable or not, in KV key order), as slim graph nodes.

        A stream: nothing is held beyond the current KV page, so a repository with millions of commits
        is enumerated in bounded memory (retention GC builds its on-disk graph from this).
        """
        repo = await self.repository(repo_id)
        async for commit in self.refs.list_commits(repo):
            yield commit.node()

    async def diff(self, repo_id: str, left_ref: str, right_ref: str) -> AsyncIterator[DiffRecord]:
        """Committed differences from ``left_ref`` to ``right_ref``."""
        async for record in history.diff(self.context, repo_id, left_ref, right_ref):
            yield record

    async def diff_uncommitted(self, repo_id: str, branch_id: str) -> AsyncIterator[DiffRecord]:
        """Staged changes of a branch against its head commit."""
        async for record in history.diff_uncommitted(self.context, repo_id, branch_id):
            yield record

    async def has_uncommitted(self, repo: Repository, branch: Branch) -> bool:
        return await self.context.has_uncommitted(repo, branch)

    # -- commits, merges, reverts (see committing.py) -------------------------------------------------

    async def commit(
        self,
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
        """Commit the branch's staged changes; ``date`` overrides the creation date (lakeFS's)."""
        from lakefs_core.repos import committing

        return await committing.commit(
            self.context,
            repo_id,
            branch_id,
            committer=committer,
            message=message,
            metadata=metadata,
            allow_empty=allow_empty,
            force=force,
            date=date,
        )

    async def commit_entries(
        self,
        repo_id: str,
        branch_id: str,
        records: Sequence[ValueRecord],
        *,
        committer: str,
        message: str,
        metadata: Mapping[str, str] | None = None,
        expected_head: str | None = None,
        replace_prefix: bytes | None = None,
        batches: Sequence[tuple[str, float]] = (),
        job_token: str = "",
        force: bool = False,
    ) -> Commit:
        """ONE commit of the branch head plus exactly ``records`` (an overwrite also removes the
        other keys under ``replace_prefix``), swapped in by a compare-and-swap on the branch: on
        ``expected_head`` only, or rebuilt on a moved head when it is None. Staged changes stay
        staged. ``batches``/``job_token``: the journal's part (see :mod:`.entry_commits`)."""
        from lakefs_core.repos import entry_commits

        return await entry_commits.commit_entries(
            self.context, repo_id, branch_id, records,
            committer=committer, message=message, metadata=metadata, expected_head=expected_head,
            replace_prefix=replace_prefix, batches=batches, job_token=job_token, force=force,
        )  # fmt: skip

    async def merge(
        self,
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
        """Merge ``source_ref`` into ``dest_branch``; ``squash``: one parent (see committing.merge)."""
        from lakefs_core.repos import committing

        return await committing.merge(
            self.context,
            repo_id,
            source_ref,
            dest_branch,
            committer=committer,
            message=message,
            strategy=strategy,
            metadata=metadata,
            force=force,
            squash=squash,
        )

    async def revert(
        self,
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
        """Undo ``commit_ref``'s change on the branch in a new commit (see committing.revert)."""
        from lakefs_core.repos import committing

        return await committing.revert(
            self.context,
            repo_id,
            branch_id,
            commit_ref,
            committer=committer,
            parent_number=parent_number,
            message=message,
            metadata=metadata,
            allow_empty=allow_empty,
            force=force,
        )

    async def cherry_pick(
        self,
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
        """Apply what ``commit_ref`` changed against its parent onto the branch as a new commit
        (``message``/``metadata``: lakeFS's commit overrides, see committing.cherry_pick)."""
        from lakefs_core.repos import committing

        return await committing.cherry_pick(
            self.context,
            repo_id,
            branch_id,
            commit_ref,
            committer=committer,
            parent_number=parent_number,
            message=message,
            metadata=metadata,
            force=force,
        )

    async def merge_base(self, repo_id: str, left_ref: str, right_ref: str) -> Commit | None:
        """The best common ancestor of two refs (None when their histories are unrelated)."""
        from lakefs_core.repos import committing

        repo = await self.repository(repo_id)
        left = (await self.resolve(repo, left_ref)).commit
        right = (await self.resolve(repo, right_ref)).commit
        return await committing.merge_base(self.context, repo, left, right)

    async def sweep_temp_files(self, ns: StorageNamespace) -> int:
        """Remove leftover temporary files of interrupted writes in a LOCAL namespace's store (older
        than the store's grace); 0 for other stores. Returns how many were removed."""
        from lakefs_core.block.local import LocalBlockStore

        store = await self.namespace_store(ns)
        return await store.sweep_leftovers() if isinstance(store, LocalBlockStore) else 0

    # -- import (see importing.py) ---------------------------------------------------------------------

    async def import_objects(
        self,
        repo_id: str,
        branch_id: str,
        path: str,
        source_uri: str,
        *,
        committer: str,
        message: str | None = None,
        watch: importing.ImportWatch | None = None,
    ) -> importing.ImportResult:
        """Entries for every object under ``source_uri`` (full addresses, nothing copied) under ``path``,
        in one commit on the branch (in this process; PySpark: ``lakefs_core.compute.import_job``);
        ``watch`` sees its progress and may stop it before the commit (see ``importing``)."""
        from lakefs_core.repos import importing

        return await importing.import_objects(
            self.context, repo_id, branch_id, path, source_uri, committer=committer, message=message,
            watch=watch or importing.NO_WATCH,
        )  # fmt: skip

    # -- audited purge (see purge.py) ----------------------------------------------------------------

    async def purge_path(
        self, repo_id: str, ref: str, path: str, *, all_history: bool, reason: str, actor: str, yes: bool
    ) -> purge.PurgeReport:
        """Destroy the objects ``path`` had (dry run unless ``yes``); history stays unchanged."""
        from lakefs_core.repos import purge

        return await purge.purge_path(
            self.context, repo_id, ref, path, all_history=all_history, reason=reason, actor=actor, yes=yes
        )

    async def purge_record(self, repo_id: str, audit_id: str) -> purge.PurgeRecord:
        from lakefs_core.repos import purge

        return await purge.purge_record(self.context, repo_id, audit_id)

    async def list_purges(self, repo_id: str) -> list[purge.PurgeRecord]:
        from lakefs_core.repos import purge

        return await purge.list_purges(self.context, repo_id)

    async def purged_addresses(self, repo_id: str, addresses: Sequence[str]) -> dict[str, str]:
        """Relative address -> audit id, for the addresses an audited purge destroyed."""
        from lakefs_core.repos import purge

        return await purge.purged_addresses(self.context, await self.repository(repo_id), addresses)

    async def record_purge(self, repo_id: str, record: purge.PurgeRecord) -> purge.PurgeRecord:
        """Apply a purge record (a mirror applying its source's purge; read-only repositories too)."""
        from lakefs_core.repos import purge

        return await purge.record_purge(self.context, await self.repository(repo_id), record)

    async def complete_stuck_purges(
        self, repo_id: str, *, older_than: datetime, limit: int
    ) -> list[purge.PurgeRecord]:
        """Complete up to ``limit`` purges left unfinished since before ``older_than`` (the GC daemon)."""
        from lakefs_core.repos import purge

        repo = await self.repository(repo_id)
        return await purge.complete_stuck_purges(self.context, repo, older_than=older_than, limit=limit)

    # -- retention GC and the hard-delete journal (see journal.py) -----------------------------------

    async def journal(self, repo_id: str) -> Journal:
        """The hard-delete journal of the repository (its reconciler's reads and moves)."""
        return Journal(self.context, await self.repository(repo_id))

    async def journal_enabled(self, repo: Repository, *, cached: bool = True) -> bool:
        """Whether the repository keeps the journal; ``cached`` answers may be ``write_cache_seconds``
        old (uploads); commits read it fresh, so a commit never skips its consumption record."""
        return await journal_enabled(self.context, repo, cached=cached)

    async def set_hard_delete_journal(self, repo_id: str, on: bool) -> None:
        """Turn the journal on or off. Turning it on records when: intents older than that (plus the
        clock-skew margin) are handed to retention GC, as commits before it recorded nothing."""
        repo = await self.repository(repo_id)
        settings = GCSettings(on, since=self.clock().timestamp() if on else 0.0)
        await self.kv.set(repo.partition, kvkeys.gc_settings_key(), settings.to_bytes())
        self.context.journal_flags.forget(repo)

    async def staged_addresses(self, repo_id: str) -> AsyncIterator[tuple[str, str, int]]:
        """``(branch, address, address_type)``: the newest staged value of every key on every branch
        (hidden ones too), tombstones, shadowed values and tokens marked for cleanup skipped; a
        stream in bounded memory (retention GC's uncommitted set)."""
        repo = await self.repository(repo_id)
        async for row in journal_staged_addresses(self.context, repo):
            yield row

    def deleted_repositories(self) -> AsyncIterator[DeletedRepository]:
        """Namespaces that deleted repositories left behind (and nobody purged and forgot yet)."""
        return self.refs.deleted_repositories()
