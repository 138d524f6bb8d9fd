"""Typed, compare-and-swap access to ref records in a ``KVStore`` (spec section 6).

Every pointer move is a ``set_if`` with an explicit expectation. Reads return the record together
with its predicate (the raw stored bytes) so callers can CAS on exactly what they saw. Immutable
records (commits) are written with ``Expect.ABSENT``; an existing record with the same bytes is
fine (content-addressed), different bytes under the same id are corrupt data.

Storage namespace claims (this project's records, see :mod:`lakefs_core.refs.kvkeys`) hold
``{"repository": <id>, "instance_uid": <uid>}`` as JSON. A released claim is overwritten with
:data:`RELEASED_CLAIM` rather than deleted: the KV offers no delete-if-equals, and an unconditional
delete could remove a claim another creation took meanwhile; a released claim counts as absent.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime

from lakefs_core.errors import ConflictError, CorruptDataError, NotFoundError, PreconditionFailedError
from lakefs_core.kv.base import Expect, KVStore
from lakefs_core.refs import kvkeys
from lakefs_core.refs.model import Branch, Commit, Repository, Tag


def _where(partition: bytes, key: bytes) -> str:
    return f"kv:{partition.decode(errors='replace')}/{key.decode(errors='replace')}"


RELEASED_CLAIM = b'{"released":true}'


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


class RefStore:
    """Repositories, branches, commits, tags and cleanup marks over one KV store."""

    def __init__(self, kv: KVStore) -> None:
        self.kv = kv

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

    # -- branches -----------------------------------------------------------------------------

    async def get_branch(self, repo: Repository, branch: str) -> tuple[Branch, bytes]:
        key = kvkeys.branch_key(branch)
        try:
            raw = await self.kv.get(repo.partition, key)
        except NotFoundError as e:
            raise NotFoundError(f"branch {branch!r} not found in repository {repo.id!r}") from e
        return Branch.from_bytes(raw, _where(repo.partition, key)), raw

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
        key = kvkeys.commit_key(commit_id)
        try:
            raw = await self.kv.get(repo.partition, key)
        except NotFoundError as e:
            raise NotFoundError(f"commit {commit_id!r} not found in repository {repo.id!r}") from e
        return Commit.from_bytes(raw, _where(repo.partition, key))

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

    async def delete_tag(self, repo: Repository, tag: str) -> None:
        await self.get_tag(repo, tag)
        await self.kv.delete(repo.partition, kvkeys.tag_key(tag))

    async def list_tags(self, repo: Repository) -> AsyncIterator[Tag]:
        async for entry in self.kv.scan(repo.partition, kvkeys.TAGS_PREFIX):
            if not entry.key.startswith(kvkeys.TAGS_PREFIX):
                break
            yield Tag.from_bytes(entry.value, _where(repo.partition, entry.key))

    # -- staging tokens awaiting their asynchronous drop ------------------------------------------

    async def mark_for_cleanup(self, tokens: tuple[str, ...], now: datetime | None = None) -> None:
        stamp = str(int((now or datetime.now(UTC)).timestamp())).encode()
        for token in tokens:
            await self.kv.set(kvkeys.CLEANUP_PARTITION, kvkeys.cleanup_key(token), stamp)

    async def pending_cleanup(self) -> AsyncIterator[tuple[str, int]]:
        """``(token, unix seconds when marked)`` for every token awaiting its drop."""
        async for entry in self.kv.scan(kvkeys.CLEANUP_PARTITION):
            try:
                marked = int(entry.value)
            except ValueError:
                marked = 0
            yield entry.key.decode(), marked

    async def unmark_cleanup(self, token: str) -> None:
        await self.kv.delete(kvkeys.CLEANUP_PARTITION, kvkeys.cleanup_key(token))
