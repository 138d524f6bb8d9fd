"""Typed, compare-and-swap access to ref records in a ``KVStore`` (spec section 6).

Every pointer move is a ``set_if`` with an explicit expectation. Reads return the record together
with its predicate (the raw stored bytes) so callers can CAS on exactly what they saw. Immutable
records (commits) are written with ``Expect.ABSENT``; an existing record with the same bytes is
fine (content-addressed), different bytes under the same id are corrupt data.

Storage namespace claims (this project's records, see :mod:`lakefs_core.refs.kvkeys`) hold
``{"repository": <id>, "instance_uid": <uid>}`` as JSON. A released claim is overwritten with
:data:`RELEASED_CLAIM` rather than deleted: the KV offers no delete-if-equals, and an unconditional
delete could remove a claim another creation took meanwhile; a released claim counts as absent.

Cleanup marks keep lakeFS's shape (``cleanup-tokens/<token>`` = the marking time in Unix seconds, as
text). Their reason (``committed``: the token's entries are in a commit; ``discarded``: a reset or a
branch deletion threw them away) is a separate record, ``token-fates/<token>`` in ``lakefs-open-gc``,
written before the mark and removed after it, so older readers of the mark keep working. A mark
without a fate (written by lakeFS or an older version) reads as ``unknown``: still dropped by the
token cleaner, never treated as garbage by the hard-delete reconciler.

An import leaves ``{"repository": <id>, "instance_uid": <uid>, "t": <unix s>}`` per source and
repository (:mod:`lakefs_core.repos.importing`): that repository's entries point at objects there, so
no repository may be created over them while it lives.

A deleted repository leaves ``deleted-repos/<repo>-<uid>`` = ``{"ns": <namespace>, "t": <unix s>}`` so
the objects of its namespace can be purged later instead of being orphaned.

Commit records read are kept in a bounded LRU (:data:`COMMIT_CACHE_SIZE`, as lakeFS's
``graveler.commit_cache``): a commit id is content-addressed and its record is never rewritten, and
the key includes the repository's partition (id and instance uid), so a deleted and re-created
repository never sees its predecessor's commits. Every branch, tag and repository read still goes
to the KV store.
"""

from __future__ import annotations

import contextlib
import json
from collections import OrderedDict
from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal

from lakefs_core.errors import (
    BadInputError,
    ConflictError,
    CorruptDataError,
    NotFoundError,
    PreconditionFailedError,
    TooManyRetriesError,
)
from lakefs_core.kv.base import Expect, KeyRange, KVEntry, KVItem, KVStore
from lakefs_core.kv.ranges import point_range, prefix_range, scan_ranges
from lakefs_core.refs import kvkeys
from lakefs_core.refs.model import Branch, Commit, Repository, Tag


def where_of(partition: bytes, key: bytes) -> str:
    """How errors name a KV record: ``kv:<partition>/<key>``."""
    return _where(partition, key)


def no_branch_message(repo: Repository, branch: str) -> str:
    """The message for a missing branch: the default branch is missing only from a bare repository
    (it cannot be deleted), which has no commit until refs are restored into it."""
    if branch == repo.default_branch:
        return (
            f"repository {repo.id!r} has no commits: its default branch {branch!r} does not exist"
            " (a bare repository; restore refs into it first)"
        )
    return f"branch {branch!r} not found in repository {repo.id!r}"


def _where(partition: bytes, key: bytes) -> str:
    return f"kv:{partition.decode(errors='replace')}/{key.decode(errors='replace')}"


RELEASED_CLAIM = b'{"released":true}'
CleanupReason = Literal["committed", "discarded"]
CLEANUP_REASONS: frozenset[str] = frozenset(("committed", "discarded"))
MAX_GC_RECORD = 4096  # bytes: our JSON records are far smaller; anything bigger is hostile
COMMIT_CACHE_SIZE = 4096  # commit records kept per RefStore (~1-2 MB); lakeFS keeps 50,000 for 3 s


@dataclass(frozen=True)
class CleanupMark:
    """A token awaiting its drop: when it was marked (Unix seconds, 0 if unreadable) and why."""

    token: str
    marked: int
    reason: Literal["committed", "discarded", "unknown"]


@dataclass(frozen=True)
class DeletedRepository:
    """What a deleted repository left behind: its namespace, and when it was deleted (Unix seconds)."""

    repo: str
    instance_uid: str
    namespace: str
    deleted_at: float


@dataclass(frozen=True)
class ImportSource:
    """A source some repository imported from: its entries point at objects under ``source``."""

    source: str  # canonical form
    repo: str
    instance_uid: str
    raw: bytes


def _import_source(key: bytes, raw: bytes) -> ImportSource:
    where = _where(kvkeys.IMPORT_SOURCES_PARTITION, key)
    doc = parse_json_record(raw, where, "an import source record")
    repo, uid = doc.get("repository"), doc.get("instance_uid")
    source, sep, _ = key.partition(b"\0")
    if not isinstance(repo, str) or not isinstance(uid, str) or not sep:
        raise CorruptDataError(
            "an import source record needs a string repository and instance_uid", file=where
        )
    return ImportSource(source.decode(errors="replace"), repo, uid, raw)


def _marked_at(raw: bytes) -> int:
    try:
        return int(raw)
    except ValueError:
        return 0  # lakeFS's own marks carry no time: due at once, as before


def parse_json_record(raw: bytes, where: str, what: str, limit: int = MAX_GC_RECORD) -> dict[str, object]:
    """Parse one of our small JSON records, hostile until checked: bounded size, an object."""
    if len(raw) > limit:
        raise CorruptDataError(f"{what} is {len(raw)} bytes (at most {limit})", file=where)
    try:
        doc = json.loads(raw)
    except ValueError:
        doc = None
    if not isinstance(doc, dict):
        raise CorruptDataError(f"{what} is not a JSON object", file=where)
    return doc


@dataclass(frozen=True)
class NamespaceClaim:
    """A stored namespace claim: ``owner`` is None once released; ``raw`` is its CAS predicate."""

    namespace: str  # canonical form
    owner: str | None
    instance_uid: str
    raw: bytes


def claim_value(repo: str, instance_uid: str) -> bytes:
    return json.dumps({"repository": repo, "instance_uid": instance_uid}, sort_keys=True).encode()


def _claim(namespace: str, raw: bytes) -> NamespaceClaim:
    try:
        doc = json.loads(raw)
    except ValueError:
        doc = None
    if not isinstance(doc, dict):
        msg = "a namespace claim is not a JSON object"
        raise CorruptDataError(msg, file=_where(kvkeys.NAMESPACES_PARTITION, namespace.encode()))
    owner, uid = doc.get("repository"), doc.get("instance_uid", "")
    return NamespaceClaim(namespace, owner if isinstance(owner, str) else None, str(uid), raw)


REFS_PAGE = 4096  # branch and tag records per page of RefStore.refs_of_many (~1 MB)
REFS_BATCH = 10_000  # repositories per batched read of RefStore.refs_of_many
# refs_of_many leaves an unreadable record's repository out instead of raising: the record's name
# would never be shown, so it is not formatted (2,000 decodes per mirror pass at 1,000 mirrors)
_UNREPORTED = "kv"


@dataclass(frozen=True)
class RepoRefs:
    """One repository's record and its branches (and tags), as :meth:`RefStore.refs_of_many` read them."""

    repository: Repository
    branches: tuple[Branch, ...]
    tags: tuple[Tag, ...]


class RefStore:
    """Repositories, branches, commits, tags and cleanup marks over one KV store."""

    def __init__(self, kv: KVStore) -> None:
        self.kv = kv
        self._commits: OrderedDict[tuple[bytes, str], Commit] = OrderedDict()

    def _cached_commit(self, repo: Repository, commit: Commit) -> Commit:
        self._commits[(repo.partition, commit.id)] = commit
        if len(self._commits) > COMMIT_CACHE_SIZE:
            self._commits.popitem(last=False)
        return commit

    # -- repositories -------------------------------------------------------------------------

    async def get_repository_raw(self, repo: str) -> tuple[Repository, bytes]:
        key = kvkeys.repo_key(repo)
        try:
            raw = await self.kv.get(kvkeys.GRAVELER_PARTITION, key)
        except NotFoundError as e:
            raise NotFoundError(f"repository {repo!r} not found") from e
        return Repository.from_bytes(raw, _where(kvkeys.GRAVELER_PARTITION, key)), raw

    async def get_repository(self, repo: str) -> Repository:
        record, _ = await self.get_repository_raw(repo)
        if record.in_deletion:
            raise NotFoundError(f"repository {repo!r} not found (being deleted)")
        return record

    async def refs_of_many(self, repos: Sequence[str], *, tags: bool) -> dict[str, RepoRefs]:
        """The branches (and, with ``tags``, the tags) of many repositories in two batched KV reads
        (:func:`lakefs_core.kv.ranges.scan_ranges`): their repository records, then the
        ``branches/`` (and ``tags/``) ranges of their partitions. A repository that is missing,
        being deleted, misnamed or unreadable is left out (its own read says why). Repositories
        are read ``REFS_BATCH`` at a time (so two reads per that many)."""
        unique = list(dict.fromkeys(repos))
        out: dict[str, RepoRefs] = {}
        for first in range(0, len(unique), REFS_BATCH):
            out.update(await self._refs_of_batch(unique[first : first + REFS_BATCH], tags=tags))
        return out

    async def _refs_of_batch(self, repos: Sequence[str], *, tags: bool) -> dict[str, RepoRefs]:
        ranges, named = [], []
        for repo in repos:
            with contextlib.suppress(BadInputError):
                ranges.append(point_range(kvkeys.GRAVELER_PARTITION, kvkeys.repo_key(repo)))
                named.append(repo)
        records: dict[str, Repository] = {}
        # one page: a point range holds at most one entry, and the caller holds the names already
        async for index, entry in scan_ranges(self.kv, ranges, page_size=len(ranges) + 1):
            with contextlib.suppress(CorruptDataError):
                record = Repository.from_bytes(entry.value, _UNREPORTED)
                if not record.in_deletion and record.id == named[index]:
                    records[named[index]] = record
        order = list(records)
        kinds = (kvkeys.BRANCHES_PREFIX, kvkeys.TAGS_PREFIX) if tags else (kvkeys.BRANCHES_PREFIX,)
        ref_ranges = [prefix_range(p, kind) for p in (records[r].partition for r in order) for kind in kinds]
        found: dict[str, tuple[list[Branch], list[Tag]]] = {r: ([], []) for r in order}
        broken: set[str] = set()
        async for index, entry in scan_ranges(self.kv, ref_ranges, page_size=REFS_PAGE):
            repo, is_tag = order[index // len(kinds)], index % len(kinds) == 1
            try:
                if is_tag:
                    found[repo][1].append(Tag.from_bytes(entry.value, _UNREPORTED))
                else:
                    found[repo][0].append(Branch.from_bytes(entry.value, _UNREPORTED))
            except CorruptDataError:
                broken.add(repo)
        return {
            r: RepoRefs(records[r], tuple(found[r][0]), tuple(found[r][1])) for r in order if r not in broken
        }

    async def create_repository(self, record: Repository) -> None:
        try:
            await self.kv.set_if(
                kvkeys.GRAVELER_PARTITION, kvkeys.repo_key(record.id), record.to_bytes(), Expect.ABSENT
            )
        except PreconditionFailedError as e:
            raise ConflictError(f"repository {record.id!r} already exists") from e

    async def update_repository(self, record: Repository, expected: bytes) -> None:
        await self.kv.set_if(
            kvkeys.GRAVELER_PARTITION, kvkeys.repo_key(record.id), record.to_bytes(), Expect.equals(expected)
        )

    async def delete_repository_record(self, repo: str) -> None:
        await self.kv.delete(kvkeys.GRAVELER_PARTITION, kvkeys.repo_key(repo))

    async def list_repositories(self, *, include_deleting: bool = False) -> AsyncIterator[Repository]:
        """Every repository record; those being deleted only with ``include_deleting``."""
        async for entry in self.kv.scan(kvkeys.GRAVELER_PARTITION, kvkeys.REPOS_PREFIX):
            if not entry.key.startswith(kvkeys.REPOS_PREFIX):
                break
            record = Repository.from_bytes(entry.value, _where(kvkeys.GRAVELER_PARTITION, entry.key))
            if include_deleting or not record.in_deletion:
                yield record

    # -- storage namespace claims -------------------------------------------------------------

    async def get_namespace_claim(self, canonical: str) -> NamespaceClaim | None:
        """The claim stored for a canonical namespace (possibly released), or None."""
        try:
            raw = await self.kv.get(kvkeys.NAMESPACES_PARTITION, kvkeys.namespace_claim_key(canonical))
        except NotFoundError:
            return None
        return _claim(canonical, raw)

    async def set_namespace_claim(self, canonical: str, value: bytes, expected: Expect) -> None:
        """Write a claim under a CAS expectation (PreconditionFailedError when it does not hold)."""
        await self.kv.set_if(
            kvkeys.NAMESPACES_PARTITION, kvkeys.namespace_claim_key(canonical), value, expected
        )

    async def release_namespace_claim(self, canonical: str, expected: bytes) -> bool:
        """Mark the claim released iff it still holds ``expected``; False when it did not."""
        try:
            await self.set_namespace_claim(canonical, RELEASED_CLAIM, Expect.equals(expected))
        except (PreconditionFailedError, NotFoundError):
            return False
        return True

    async def namespace_claims_within(self, canonical: str) -> AsyncIterator[NamespaceClaim]:
        """Live (unreleased) claims of ``canonical`` and every namespace nested in it."""
        start = kvkeys.namespace_claim_key(canonical)
        async for entry in self.kv.scan(kvkeys.NAMESPACES_PARTITION, start):
            if not entry.key.startswith(start):
                break
            claim = _claim(entry.key.decode(errors="replace"), entry.value)
            if claim.owner is not None:
                yield claim

    # -- import sources ----------------------------------------------------------------------

    async def record_import_source(self, canonical: str, repo: Repository, now: float) -> bool:
        """Record that ``repo`` (this instance) imports from ``canonical``; True if this call
        created the record, False if it was there already (a stale one of an earlier instance of
        the same id is replaced, and counts as created)."""
        key = kvkeys.import_source_key(canonical, repo.id)
        value = json.dumps({"repository": repo.id, "instance_uid": repo.instance_uid, "t": now}).encode()
        expected = Expect.ABSENT
        for _ in range(3):
            try:
                await self.kv.set_if(kvkeys.IMPORT_SOURCES_PARTITION, key, value, expected)
                return True
            except PreconditionFailedError:
                pass
            try:
                raw = await self.kv.get(kvkeys.IMPORT_SOURCES_PARTITION, key)
            except NotFoundError:
                expected = Expect.ABSENT
                continue
            if _import_source(key, raw).instance_uid == repo.instance_uid:
                return False
            expected = Expect.equals(raw)
        raise TooManyRetriesError(f"the import source record of {canonical} kept changing")

    async def forget_import_source(self, canonical: str, repo: str) -> None:
        """Drop the record of a refused import that created it (nothing was committed from it)."""
        await self.kv.delete(kvkeys.IMPORT_SOURCES_PARTITION, kvkeys.import_source_key(canonical, repo))

    async def import_sources(self, canonical: str, *, within: bool) -> AsyncIterator[ImportSource]:
        """The records of exactly the source ``canonical`` or, ``within``, of it and every source
        nested in it."""
        exact = kvkeys.import_source_prefix(canonical)  # refuses a NUL in ``canonical``
        start = canonical.encode() if within else exact
        async for entry in self.kv.scan(kvkeys.IMPORT_SOURCES_PARTITION, start):
            if not entry.key.startswith(start):
                break
            yield _import_source(entry.key, entry.value)

    # -- branches -----------------------------------------------------------------------------

    async def get_branch(self, repo: Repository, branch: str) -> tuple[Branch, bytes]:
        key = kvkeys.branch_key(branch)
        try:
            raw = await self.kv.get(repo.partition, key)
        except NotFoundError as e:
            raise NotFoundError(no_branch_message(repo, branch)) from e
        return Branch.from_bytes(raw, _where(repo.partition, key)), raw

    async def get_branch_then_range(
        self, repo: Repository, branch: str, other: KeyRange, size: int
    ) -> tuple[Branch | None, list[KVEntry]]:
        """The branch record (``None``: absent) and the first ``size`` entries of ``other``, in ONE
        store call (:func:`~lakefs_core.kv.ranges.scan_ranges`: one hop to SQLite's thread, which
        reads the branch first; one statement on PostgreSQL; concurrent Queries on DynamoDB). A
        caller guesses ``other`` (a staging token's range) from an earlier read and uses the
        entries only if the record names that token: the two reads are never further apart than
        a :meth:`get_branch` and a staging read after it, well within the grace before a committed
        token's entries are dropped (``cleanup_grace_seconds``)."""
        key = kvkeys.branch_key(branch)
        raw: bytes | None = None
        entries: list[KVEntry] = []
        if size > 0:
            ranges = [point_range(repo.partition, key), other]
            found = scan_ranges(self.kv, ranges, page_size=size + 1)
            async with contextlib.aclosing(found) as items:  # type: ignore[type-var]
                async for index, entry in items:
                    if index == 0:
                        raw = entry.value
                        continue
                    entries.append(entry)
                    if len(entries) == size:  # never ask for a second page
                        break
        if raw is None:
            return None, entries
        return Branch.from_bytes(raw, _where(repo.partition, key)), entries

    async def set_many_then_get_branch(
        self, repo: Repository, items: Iterable[KVItem], branch: str
    ) -> Branch:
        """Store ``items`` (one KV batch), then read the branch record with no change to it ordered
        between the read and the batch (:meth:`KVStore.set_many_then_get`): a staging writer's
        "write, then re-read the branch" in one transaction on SQL."""
        key = kvkeys.branch_key(branch)
        try:
            raw = await self.kv.set_many_then_get(items, repo.partition, key)
        except NotFoundError as e:
            raise NotFoundError(no_branch_message(repo, branch)) from e
        return Branch.from_bytes(raw, _where(repo.partition, key))

    async def create_branch(self, repo: Repository, branch: Branch) -> bytes:
        raw = branch.to_bytes()
        try:
            await self.kv.set_if(repo.partition, kvkeys.branch_key(branch.id), raw, Expect.ABSENT)
        except PreconditionFailedError as e:
            raise ConflictError(f"branch {branch.id!r} already exists in repository {repo.id!r}") from e
        return raw

    async def cas_branch(self, repo: Repository, branch: Branch, expected: bytes) -> bytes:
        """Replace the branch record iff it still holds ``expected``; returns the new bytes."""
        raw = branch.to_bytes()
        await self.kv.set_if(repo.partition, kvkeys.branch_key(branch.id), raw, Expect.equals(expected))
        return raw

    async def delete_branch(self, repo: Repository, branch: str) -> None:
        await self.kv.delete(repo.partition, kvkeys.branch_key(branch))

    async def list_branches(self, repo: Repository, after: str = "") -> AsyncIterator[Branch]:
        start = kvkeys.branch_key(after) + b"\x00" if after else kvkeys.BRANCHES_PREFIX
        async for entry in self.kv.scan(repo.partition, start):
            if not entry.key.startswith(kvkeys.BRANCHES_PREFIX):
                break
            yield Branch.from_bytes(entry.value, _where(repo.partition, entry.key))

    # -- commits ------------------------------------------------------------------------------

    async def put_commit(self, repo: Repository, commit: Commit) -> None:
        """Store an immutable commit record (idempotent for identical bytes)."""
        key = kvkeys.commit_key(commit.id)
        raw = commit.to_bytes()
        try:
            await self.kv.set_if(repo.partition, key, raw, Expect.ABSENT)
        except PreconditionFailedError:
            existing = await self.kv.get(repo.partition, key)
            if existing != raw and Commit.from_bytes(existing, _where(repo.partition, key)) != commit:
                where = _where(repo.partition, key)
                msg = f"commit {commit.id} already stored with other content"
                raise CorruptDataError(msg, file=where) from None

    async def get_commit(self, repo: Repository, commit_id: str) -> Commit:
        hit = self._commits.get((repo.partition, commit_id))
        if hit is not None:
            self._commits.move_to_end((repo.partition, commit_id))
            return hit
        key = kvkeys.commit_key(commit_id)
        try:
            raw = await self.kv.get(repo.partition, key)
        except NotFoundError as e:
            raise NotFoundError(f"commit {commit_id!r} not found in repository {repo.id!r}") from e
        commit = Commit.from_bytes(raw, _where(repo.partition, key))
        if commit.id != commit_id:  # a record stored under another id: never cached
            return commit
        return self._cached_commit(repo, commit)

    async def has_commit(self, repo: Repository, commit_id: str) -> bool:
        try:
            await self.kv.get(repo.partition, kvkeys.commit_key(commit_id))
        except NotFoundError:
            return False
        return True

    async def list_commits(self, repo: Repository) -> AsyncIterator[Commit]:
        async for entry in self.kv.scan(repo.partition, kvkeys.COMMITS_PREFIX):
            if not entry.key.startswith(kvkeys.COMMITS_PREFIX):
                break
            yield Commit.from_bytes(entry.value, _where(repo.partition, entry.key))

    # -- tags ---------------------------------------------------------------------------------

    async def create_tag(self, repo: Repository, tag: Tag) -> None:
        try:
            await self.kv.set_if(repo.partition, kvkeys.tag_key(tag.id), tag.to_bytes(), Expect.ABSENT)
        except PreconditionFailedError as e:
            raise ConflictError(f"tag {tag.id!r} already exists in repository {repo.id!r}") from e

    async def get_tag(self, repo: Repository, tag: str) -> Tag:
        key = kvkeys.tag_key(tag)
        try:
            raw = await self.kv.get(repo.partition, key)
        except NotFoundError as e:
            raise NotFoundError(f"tag {tag!r} not found in repository {repo.id!r}") from e
        return Tag.from_bytes(raw, _where(repo.partition, key))

    async def get_tag_raw(self, repo: Repository, tag: str) -> tuple[Tag, bytes]:
        """The tag and its stored bytes (the predicate for :meth:`cas_tag`)."""
        key = kvkeys.tag_key(tag)
        try:
            raw = await self.kv.get(repo.partition, key)
        except NotFoundError as e:
            raise NotFoundError(f"tag {tag!r} not found in repository {repo.id!r}") from e
        return Tag.from_bytes(raw, _where(repo.partition, key)), raw

    async def cas_tag(self, repo: Repository, tag: Tag, expected: bytes) -> None:
        """Replace the tag record iff it still holds ``expected`` (administrative moves only: lakeFS
        tags are immutable to users)."""
        await self.kv.set_if(repo.partition, kvkeys.tag_key(tag.id), tag.to_bytes(), Expect.equals(expected))

    async def delete_tag(self, repo: Repository, tag: str) -> None:
        await self.get_tag(repo, tag)
        await self.kv.delete(repo.partition, kvkeys.tag_key(tag))

    async def list_tags(self, repo: Repository) -> AsyncIterator[Tag]:
        async for entry in self.kv.scan(repo.partition, kvkeys.TAGS_PREFIX):
            if not entry.key.startswith(kvkeys.TAGS_PREFIX):
                break
            yield Tag.from_bytes(entry.value, _where(repo.partition, entry.key))

    # -- staging tokens awaiting their asynchronous drop ------------------------------------------

    async def mark_for_cleanup(
        self, tokens: tuple[str, ...], now: datetime | None, reason: CleanupReason
    ) -> None:
        """Mark ``tokens`` for their asynchronous drop, recording why (fate first, then the mark: a
        mark never exists without its fate, except lakeFS's and older versions' marks)."""
        if reason not in CLEANUP_REASONS:
            raise BadInputError(f"must be one of {sorted(CLEANUP_REASONS)}", field="reason")
        stamp = str(int((now or datetime.now(UTC)).timestamp())).encode()
        for token in tokens:
            await self.kv.set(kvkeys.GC_PARTITION, kvkeys.token_fate_key(token), reason.encode())
            await self.kv.set(kvkeys.CLEANUP_PARTITION, kvkeys.cleanup_key(token), stamp)

    async def pending_cleanup(self) -> AsyncIterator[tuple[str, int]]:
        """``(token, unix seconds when marked)`` for every token awaiting its drop."""
        async for entry in self.kv.scan(kvkeys.CLEANUP_PARTITION):
            yield entry.key.decode(), _marked_at(entry.value)

    async def _fate(self, token: str) -> Literal["committed", "discarded", "unknown"]:
        try:
            raw = await self.kv.get(kvkeys.GC_PARTITION, kvkeys.token_fate_key(token))
        except NotFoundError:
            return "unknown"
        if raw == b"committed":
            return "committed"
        if raw == b"discarded":
            return "discarded"
        return "unknown"  # never trust a fate we cannot read: unknown is never garbage

    async def cleanup_mark(self, token: str) -> CleanupMark | None:
        """The cleanup mark of ``token`` with its reason, or None if it is not marked."""
        try:
            raw = await self.kv.get(kvkeys.CLEANUP_PARTITION, kvkeys.cleanup_key(token))
        except NotFoundError:
            return None
        return CleanupMark(token, _marked_at(raw), await self._fate(token))

    async def cleanup_marks(self) -> AsyncIterator[CleanupMark]:
        """Every token awaiting its drop, with when and why it was marked."""
        async for token, marked in self.pending_cleanup():
            yield CleanupMark(token, marked, await self._fate(token))

    async def unmark_cleanup(self, token: str) -> None:
        """Remove the mark, then its fate (a crash between leaves only a small, inert fate record)."""
        await self.kv.delete(kvkeys.CLEANUP_PARTITION, kvkeys.cleanup_key(token))
        await self.kv.delete(kvkeys.GC_PARTITION, kvkeys.token_fate_key(token))

    # -- staging tokens of branches (retention GC's uncommitted scan) ----------------------------

    async def live_tokens(self, repo: Repository) -> AsyncIterator[tuple[str, str]]:
        """``(branch, token)`` for the live and sealed tokens of every branch, hidden ones too; each
        branch's tokens newest first (live, then sealed in their stored order)."""
        async for branch in self.list_branches(repo):
            for token in (branch.staging_token, *branch.sealed_tokens):
                yield branch.id, token

    # -- namespaces of deleted repositories ------------------------------------------------------

    async def record_deleted_repository(self, repo: Repository, now: datetime) -> None:
        """Leave ``deleted-repos/<repo>-<uid>`` (create-only: a resumed deletion keeps the first time)."""
        value = json.dumps({"ns": repo.storage_namespace, "t": now.timestamp()}, sort_keys=True).encode()
        key = kvkeys.deleted_repo_key(repo.id, repo.instance_uid)
        with contextlib.suppress(PreconditionFailedError):  # recorded by an interrupted deletion
            await self.kv.set_if(kvkeys.GC_PARTITION, key, value, Expect.ABSENT)

    async def deleted_repositories(self) -> AsyncIterator[DeletedRepository]:
        """Every deleted repository whose namespace has not been purged and forgotten yet."""
        prefix = kvkeys.DELETED_REPOS_PREFIX
        async for entry in self.kv.scan(kvkeys.GC_PARTITION, prefix):
            if not entry.key.startswith(prefix):
                break
            where = _where(kvkeys.GC_PARTITION, entry.key)
            doc = parse_json_record(entry.value, where, "a deleted-repository record")
            ns, when = doc.get("ns"), doc.get("t")
            if (
                not isinstance(ns, str)
                or not ns
                or isinstance(when, bool)
                or not isinstance(when, int | float)
            ):
                raise CorruptDataError(
                    "a deleted-repository record needs a string ns and a number t", file=where
                )
            name = kvkeys.name_after(prefix, entry.key)
            repo, sep, uid = name.rpartition("-")
            if not sep or not repo or not uid:
                raise CorruptDataError("a deleted-repository key is not <repo>-<instance uid>", file=where)
            yield DeletedRepository(repo, uid, ns, float(when))

    async def forget_deleted_repository(self, repo: str, instance_uid: str) -> None:
        """Drop the record once the namespace has been purged (or claimed again and kept)."""
        await self.kv.delete(kvkeys.GC_PARTITION, kvkeys.deleted_repo_key(repo, instance_uid))
