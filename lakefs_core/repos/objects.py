"""Objects: bytes in the storage namespace, described by staged and committed entries.

Upload streams the body to a brand-new physical address ``<ns>/data/<slice>/<id>`` (create-only,
so an address is never reused), then stages an ``Entry`` (size, ETag, content type, user metadata,
last modified) for the path. The entry bytes are produced once here and carried verbatim into ranges
by commits. Reads resolve the entry (staging over committed) and stream its address, RELATIVE to
the namespace or FULL. Listing supports a prefix, a delimiter (common prefixes are skipped by
re-seeking, not by reading every key under them) and pagination with an ``after`` cursor; a listing
that staging does not change in its key range pages through the cached children of the commit's
directory instead (:mod:`.listing`).

Every read of an object's entry or bytes (:meth:`Objects.stat`, :meth:`~Objects.read`,
:meth:`~Objects.read_stat`) first checks the object's ``purged/`` marker and answers
:class:`~lakefs_core.errors.PurgedError` when an audited purge (:mod:`.purge`) names it, whether or
not the bytes are still in the store (:mod:`.purge_markers`: in a repository that never purged this
costs one KV read per process every half second; once it has purges, a marker lookup per read,
shared by concurrent reads). Listings are not reads: a purged object's entry is still listed, and
:meth:`Objects.describe` answers an entry with the id of the purge that destroyed its object (what
``fs stat`` shows); reading the bytes is what refuses.

With the repository's hard-delete journal on (:mod:`.journal`), upload writes the address's intent
(``pending``) before the PUT and settles it (CAS to ``stored``) in the same atomic KV step that
stages the entry (:class:`~lakefs_core.repos.staging_writes.Settle`); if the reconciler claimed the
intent first (the upload outlived its pending timeout, however long it stalled and wherever), that
step stores nothing and the upload fails with :class:`~lakefs_core.errors.ConflictError` (exit
code 3, HTTP 409): never an entry whose object is being deleted. Upload and :meth:`Objects.copy`
(which journals and stages its fresh address the same way) are the only paths that write a data
object into a namespace for an entry (a mirror copies committed objects of its source, which are not
uploads), and they never reuse an address: keep both true, or journal the new path too.

:meth:`Objects.upload_many` is the batch form (``fs upload --recursive``): one repository and branch
read per batch, bounded concurrent PUTs, the journal's intents and the batch's open record in one KV
batch before them, and every staged entry with the batch's settle in one conditional KV batch after
them (on a KV store whose conditional batches are bounded, DynamoDB's 100 items, the batch is
journalled and settled in parts of that size, each all or nothing; the PUTs and the parts are
:mod:`.object_batches`'s). The values these operations take and return (:class:`ObjectStat`,
:class:`UploadItem`, ...) are defined in :mod:`.object_values` and imported from here.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import (
    AsyncGenerator,
    AsyncIterable,
    AsyncIterator,
    Awaitable,
    Callable,
    Mapping,
    Sequence,
)
from dataclasses import dataclass, replace
from datetime import datetime

from lakefs_core.block import copy_object
from lakefs_core.block._common import normalize_metadata
from lakefs_core.block.base import BlockStore, ObjectInfo
from lakefs_core.errors import (
    BadInputError,
    ConflictError,
    LakeFSError,
    NotFoundError,
    PurgedError,
    encode_utf8,
)
from lakefs_core.faults import fault_point
from lakefs_core.format.proto import catalog_pb2
from lakefs_core.format.records import (
    ValueRecord,
    decode_entry,
    make_entry,
)
from lakefs_core.keys import SliceAllocator
from lakefs_core.namespace import StorageNamespace
from lakefs_core.refs.model import Branch, Repository
from lakefs_core.refs.staging import FIRST_PAGE, RecordCursor, tombstone
from lakefs_core.repos import protection, reading, staging_writes
from lakefs_core.repos.context import HasContext, Resolved
from lakefs_core.repos.journal import Intent, Journal, journal_enabled
from lakefs_core.repos.listing import walk
from lakefs_core.repos.object_batches import PUT_BATCH_WINDOW, journal_parts, put_all, record_intents
from lakefs_core.repos.object_values import (
    BlockingBody,
    Body,
    ListPage,
    ObjectStat,
    StagedAddress,
    UploadItem,
    new_entry,
)
from lakefs_core.repos.purge_markers import MarkerReads, lookup_markers
from lakefs_core.repos.reading import prefix_successor
from lakefs_core.repos.staging_writes import Condition, Settle, check_new_path

__all__ = [  # the values are defined in .object_values; this is their public import path
    "MAX_LIST_AMOUNT",
    "PUT_BATCH_WINDOW",
    "BlockingBody",
    "Body",
    "ListPage",
    "ObjectStat",
    "Objects",
    "StagedAddress",
    "UploadItem",
    "new_entry",
    "prefix_successor",
]

MAX_LIST_AMOUNT = 10_000
MAX_COPY_OBJECT = 5 << 30  # S3's CopyObject copies at most 5 GiB; a larger copy streams
# reads of at most this many bytes are one BlockStore.get (a stream's chunk: the same memory), not a
# stream: a local store's stream costs two worker-thread hops (open, read), a get one
SMALL_READ_BYTES = 1 << 20


@dataclass(frozen=True)
class _Write:
    """A write in progress to a fresh address: where, for which path, and its journal intent."""

    repo: Repository
    branch: str
    key: bytes
    relative: str
    journal: Journal | None
    intent: Intent | None
    force: bool
    branch_read: tuple[Branch, bytes]  # as read before the write: what the staging step expects first


def _path_bytes(path: str) -> bytes:
    if not path or path.startswith("/"):
        raise BadInputError("object paths are non-empty and relative (no leading '/')", field="path")
    return encode_utf8(path, "path")


def _new_path_bytes(path: str) -> bytes:
    """A path to upload to: checked before any byte is written (the staging write checks it too)."""
    key = _path_bytes(path)
    check_new_path(key)
    return key


def _relative(repo: Repository, stat: ObjectStat) -> str | None:
    """The address a purge marker would name for ``stat``'s object; None for an external or
    non-normal address (purge skips or refuses those, so they have no marker)."""
    address_type = catalog_pb2.Entry.AddressType.Value(stat.address_type)
    try:
        return StorageNamespace.parse(repo.storage_namespace).relative_of(stat.physical_address, address_type)
    except BadInputError:
        return None


class Objects:
    """Object operations of a :class:`~lakefs_core.repos.graveler.Graveler` (or of its context)."""

    def __init__(self, repos: HasContext) -> None:
        self.ctx = repos.context
        self.slices = SliceAllocator()
        self.markers = MarkerReads(self.ctx)

    async def _namespace(self, repo: Repository) -> tuple[StorageNamespace, BlockStore]:
        ns = StorageNamespace.parse(repo.storage_namespace)
        return ns, await self.ctx.stores.namespace_store(ns)

    async def _fresh_address(
        self, repo: Repository, branch: str, key: bytes, force: bool, relative: str | None = None
    ) -> tuple[_Write, StorageNamespace, BlockStore]:
        """A fresh address for a write of ``key`` to ``branch``, checked and journalled (its
        ``pending`` intent) before any byte is written there. ``relative``: the caller's reserved
        address (a multipart upload's), whose intent an earlier attempt of the same write may have
        left pending."""
        self.ctx.writable(repo, force)
        # fail before writing bytes for an unknown branch (as recently seen); the staging step
        # expects this record, so one no longer current costs an attempt, never a wrong staging
        branch_read = await staging_writes.recent_branch(self.ctx, repo, branch)
        await protection.check(self.ctx, repo, branch, protection.Action.STAGING_WRITE)  # so too here
        ns, store = await self._namespace(repo)
        journal = Journal(self.ctx, repo) if await journal_enabled(self.ctx, repo) else None
        intent: Intent | None = None
        if relative is None:
            relative = self.slices.new_relative_address()
            intent = await journal.record_intent(relative, branch, key, self.ctx.clock()) if journal else None
        elif journal is not None:
            intent = await _fresh_intent(journal, relative, branch, key, self.ctx.clock())
        return _Write(repo, branch, key, relative, journal, intent, force, branch_read), ns, store

    async def _stage_written(
        self,
        write: _Write,
        info: ObjectInfo,
        metadata: Mapping[str, str] | None,
        what: str,
        condition: Condition | None = None,
    ) -> ObjectStat:
        """Stage the entry of the object written at ``write``'s address, settling its intent in the
        same KV step, only if ``condition`` holds then for the path's current entry (when given:
        ``If-None-Match: *``, ``If-Match``, see :mod:`~lakefs_core.repos.staging_writes`; a refused
        write stages nothing, and its bytes are left to the journal's reconciler, or GC, as a
        failed upload's are)."""
        when = info.last_modified or self.ctx.clock()
        record, stat = new_entry(write.key, write.relative, info, metadata, when)
        settle: Settle | None = None
        if write.journal is not None and write.intent is not None:
            settle = write.journal.settle_single(write.intent, self.ctx.clock(), what)
        await staging_writes.stage_entry(
            self.ctx,
            write.repo.id,
            write.branch,
            record,
            force=write.force,
            settle=settle,
            condition=condition,
            branch_read=write.branch_read,
        )
        return stat

    async def upload(
        self,
        repo_id: str,
        branch: str,
        path: str,
        body: bytes | AsyncIterable[bytes],
        *,
        content_type: str | None = None,
        metadata: Mapping[str, str] | None = None,
        force: bool = False,
        condition: Condition | None = None,
    ) -> ObjectStat:
        """Store ``body`` at a fresh address and stage its entry for ``path``, only if
        ``condition`` holds when the entry is staged (:meth:`_stage_written`)."""

        async def put(store: BlockStore, target: str) -> ObjectInfo:
            return await store.put(
                target, body, if_none_match=True, content_type=content_type, metadata=metadata
            )

        return await self._write_and_stage(
            repo_id,
            branch,
            path,
            relative=None,
            write=put,
            metadata=metadata,
            force=force,
            condition=condition,
        )

    async def upload_written(
        self,
        repo_id: str,
        branch: str,
        path: str,
        relative: str,
        write: Callable[[BlockStore, str], Awaitable[ObjectInfo]],
        *,
        metadata: Mapping[str, str] | None = None,
        force: bool = False,
        condition: Condition | None = None,
    ) -> ObjectStat:
        """:meth:`upload` of an object the caller stores itself: ``write(store, key)`` creates it
        at ``relative`` (an address from :attr:`slices` that nothing has written yet: a multipart
        upload's final key, whose parts the store holds apart until this completes it). The
        journal's intent is recorded right before ``write`` and settled with the staging, as for
        any upload; a retry of the same write (an earlier attempt failed after recording it) takes
        the intent it left while it is still pending for this branch and path."""
        return await self._write_and_stage(
            repo_id,
            branch,
            path,
            relative=relative,
            write=write,
            metadata=metadata,
            force=force,
            condition=condition,
        )

    async def _write_and_stage(
        self,
        repo_id: str,
        branch: str,
        path: str,
        *,
        relative: str | None,
        write: Callable[[BlockStore, str], Awaitable[ObjectInfo]],
        metadata: Mapping[str, str] | None,
        force: bool,
        condition: Condition | None = None,
    ) -> ObjectStat:
        key = _new_path_bytes(path)
        # The record as writers see it (at most write_cache_seconds old; the staging step uses it
        # too): a repository deleted or re-created meanwhile fails the branch read, which forgets it.
        repo = await staging_writes.repository_for_write(self.ctx, repo_id)
        target, ns, store = await self._fresh_address(repo, branch, key, force, relative)
        info = await write(store, ns.key(target.relative))
        fault_point("upload:before-stage")  # stall tests: PUT done, neither settled nor staged yet
        return await self._stage_written(
            target, info, metadata, f"upload of {path[:200]!r} to branch {branch!r}", condition
        )

    async def copy(
        self,
        src_repo_id: str,
        source: ObjectStat,
        repo_id: str,
        branch: str,
        path: str,
        *,
        content_type: str | None = None,
        metadata: Mapping[str, str] | None = None,
        force: bool = False,
        condition: Condition | None = None,
    ) -> ObjectStat:
        """Stage ``path`` on ``branch`` for a copy of the object ``source`` describes (an entry of
        ``src_repo_id``: its address, so a concurrent overwrite of its path never mixes two objects).
        The block store copies the bytes to a FRESH address of this repository's namespace
        (server-side within one S3 store, a file copy within a local one, streamed across stores),
        journalled and staged as :meth:`upload` does: two entries never share an address, which
        hard-delete and GC rely on. ``content_type``/``metadata`` default to the source's. Missing
        source data is :class:`NotFoundError` caused by the store's; a purged source is
        :class:`PurgedError`, checked before and again after the bytes are copied."""
        key = _new_path_bytes(path)
        src_repo = await self.ctx.repository(src_repo_id)
        await self._refuse_purged(src_repo, source)
        address_type = catalog_pb2.Entry.AddressType.Value(source.address_type)
        src_uri, src_key = StorageNamespace.parse(src_repo.storage_namespace).address_key(
            source.physical_address, address_type
        )
        src_store = await self.ctx.stores.block_store(src_uri)
        write, ns, store = await self._fresh_address(await self.ctx.repository(repo_id), branch, key, force)
        # S3's CopyObject is server-side but not create-only everywhere (some S3 implementations ignore
        # its condition, so the store streams a create-only copy through this process instead); the
        # address is fresh (80 random bits) and journalled, so an unconditional copy overwrites nothing.
        server_side = src_store is store and store.uri.startswith("s3://") and source.size <= MAX_COPY_OBJECT
        try:
            target = ns.key(write.relative)
            info = await copy_object(src_store, src_key, store, target, if_none_match=not server_side)
        except NotFoundError as e:
            await self._refuse_purged(src_repo, source)
            raise NotFoundError(f"data of {source.path!r} is missing at {source.physical_address}") from e
        await self._refuse_purged(src_repo, source)  # a purge begun meanwhile: stage no copy of it
        info = replace(info, content_type=source.content_type if content_type is None else content_type)
        meta = source.metadata if metadata is None else metadata
        what = f"copy to {path[:200]!r} on branch {branch!r}"
        return await self._stage_written(write, info, meta, what, condition)

    async def upload_many(
        self,
        repo_id: str,
        branch: str,
        items: Sequence[UploadItem],
        *,
        concurrency: int = 8,
        on_stored: Callable[[UploadItem, ObjectInfo], None] | None = None,
        force: bool = False,
        write_gate: asyncio.Lock | None = None,
    ) -> list[ObjectStat]:
        """Upload a batch: one repository and branch read, the PUTs ``concurrency`` at a time, then
        every entry staged in ONE KV batch (:func:`~lakefs_core.repos.staging_writes.set_entries`).
        With the journal on, the intents of the whole batch are recorded in one KV batch before the
        PUTs and settled by a compare-and-swap of the batch's record in the staging batch
        (:meth:`Journal.settle_batch`): a batch the reconciler claimed first stages nothing and fails
        with :class:`~lakefs_core.errors.ConflictError` (in parts on DynamoDB: see the module
        docstring; earlier parts stay staged). The first failing PUT fails the batch (nothing is
        staged; the objects already written are garbage the journal or retention GC removes). Small
        bodies (bytes, :class:`BlockingBody`) are written by the store's ``put_batch``,
        ``PUT_BATCH_WINDOW`` at a time; streamed ones one PUT each. ``on_stored`` is called after
        each object is stored (progress; per window for batched ones). Results are in the order of
        ``items``. Concurrent batches sharing a ``write_gate`` write their objects one batch at a
        time, in the order they reach the gate (each holds it for its PUTs only): a batch's journal
        and staging writes then overlap the next batch's PUTs, where two batches writing at once
        would split the writer threads and finish together."""
        if concurrency < 1:
            raise BadInputError("must be at least 1", field="concurrency")
        keys = [_new_path_bytes(item.path) for item in items]
        repo = await self.ctx.repository(repo_id)
        self.ctx.writable(repo, force)
        await protection.check(self.ctx, repo, branch, protection.Action.STAGING_WRITE)  # before PUTs
        await self.ctx.refs.get_branch(repo, branch)  # fail before writing bytes for an unknown branch
        await protection.check(self.ctx, repo, branch, protection.Action.STAGING_WRITE)  # so too here
        ns, store = await self._namespace(repo)
        addresses = self.slices.new_relative_addresses(len(items))
        journal = Journal(self.ctx, repo) if await journal_enabled(self.ctx, repo) else None
        parts = journal_parts(self.ctx.kv.max_conditional_items, len(items), journal is not None)
        intents: list[Intent] = []
        if journal is not None:
            now = self.ctx.clock().timestamp()
            intents = await record_intents(journal, parts, addresses, keys, branch=branch, now=now)
        targets = [ns.key(address) for address in addresses]
        async with write_gate or contextlib.nullcontext():
            infos = await put_all(store, items, targets, concurrency, on_stored)
        if write_gate is not None:
            await asyncio.sleep(0)  # the next batch's PUTs start before this batch's entries are built
        built = [
            new_entry(key, address, info, item.metadata, info.last_modified or self.ctx.clock())
            for key, address, info, item in zip(keys, addresses, infos, items, strict=True)
        ]
        fault_point("upload:before-stage")
        for part in parts:
            settle: Settle | None = None
            if journal is not None:
                what = f"batch upload of {len(part)} objects ({items[part.start].path[:200]!r}, ...)"
                settle = journal.settle_batch(intents[part.start : part.stop], self.ctx.clock(), what)
            records = [built[i][0] for i in part]
            await staging_writes.set_entries(self.ctx, repo_id, branch, records, force=force, settle=settle)
        return [stat for _, stat in built]

    # -- presigned staging: the client PUTs the bytes itself, then links them --------------------

    async def stage_address(
        self, repo_id: str, branch: str, path: str, *, force: bool = False
    ) -> StagedAddress:
        """A fresh address for ``path`` on ``branch`` that the client will write itself (lakeFS's
        ``staging/backing``), journalled as an upload's address is before its PUT: the journal's
        ``pending`` intent is what :meth:`link` later settles, so the reconciler deletes whatever a
        client wrote there and never linked. Needs the repository's hard-delete journal (without it
        nothing would prove an address was issued here: :class:`BadInputError`)."""
        key = _new_path_bytes(path)
        repo = await self.ctx.repository(repo_id)
        self.ctx.writable(repo, force)
        await self.ctx.refs.get_branch(repo, branch)
        await protection.check(self.ctx, repo, branch, protection.Action.STAGING_WRITE)
        if not await journal_enabled(self.ctx, repo):
            raise BadInputError(
                "presigned staging needs the repository's hard-delete journal", field="presign"
            )
        ns, store = await self._namespace(repo)
        relative = self.slices.new_relative_address()
        await Journal(self.ctx, repo).record_intent(relative, branch, key, self.ctx.clock())
        return StagedAddress(relative, ns.full_address(relative), store, ns.key(relative))

    async def link(
        self,
        repo_id: str,
        branch: str,
        path: str,
        physical_address: str,
        *,
        size: int,
        content_type: str | None = None,
        metadata: Mapping[str, str] | None = None,
        force: bool = False,
        condition: Condition | None = None,
    ) -> ObjectStat:
        """Stage ``path`` on ``branch`` for the object a client wrote at an address from
        :meth:`stage_address` (lakeFS's link): only a pending intent issued for this branch and path
        is accepted, the object must be there with ``size`` bytes (its ETag is the store's), and
        the entry is staged in the same conditional KV step that settles the intent (as
        :meth:`upload` does; an intent the reconciler claimed first stages nothing), only if
        ``condition`` holds when given (as :meth:`upload`)."""
        key = _new_path_bytes(path)
        repo = await self.ctx.repository(repo_id)
        self.ctx.writable(repo, force)
        ns, store = await self._namespace(repo)
        relative = ns.relative_of(physical_address, catalog_pb2.Entry.AddressType.FULL)
        journal = Journal(self.ctx, repo)
        intent = await journal.intent(relative) if relative is not None else None
        if relative is None or intent is None or intent.state != "pending":
            raise BadInputError(
                "not an address issued for staging here (or no longer pending)", field="physical_address"
            )
        if intent.branch != branch or intent.key != key:
            raise BadInputError("the address was issued for another branch or path", field="physical_address")
        info = await store.head(ns.key(relative))
        if info.size != size:
            raise BadInputError(f"the object has {info.size} bytes, not {size}", field="size_bytes")
        if content_type is not None:
            info = replace(info, content_type=content_type)
        record, stat = new_entry(key, relative, info, metadata, info.last_modified or self.ctx.clock())
        settle = journal.settle_single(
            intent, self.ctx.clock(), f"link of {path[:200]!r} to branch {branch!r}"
        )
        await staging_writes.stage_entry(
            self.ctx, repo_id, branch, record, force=force, settle=settle, condition=condition
        )
        return stat

    async def source_key(self, repo_id: str, stat: ObjectStat) -> tuple[BlockStore, str]:
        """The store and key of the object ``stat`` describes, for a server-side copy of its bytes;
        :class:`PurgedError` when an audited purge destroyed it (as :meth:`read_stat`)."""
        repo = await staging_writes.repository_for_write(self.ctx, repo_id)
        await self._refuse_purged(repo, stat)
        ns = StorageNamespace.parse(repo.storage_namespace)
        address_type = catalog_pb2.Entry.AddressType.Value(stat.address_type)
        store_uri, key = ns.address_key(stat.physical_address, address_type)
        return await self.ctx.stores.block_store(store_uri), key

    async def presign_read(self, repo_id: str, stat: ObjectStat, *, expires_seconds: int) -> str | None:
        """A URL reading ``stat``'s object directly from its store, or None when that store cannot
        presign (a local namespace). The purge check runs first, as for any read."""
        repo = await staging_writes.repository_for_write(self.ctx, repo_id)
        await self._refuse_purged(repo, stat)
        ns = StorageNamespace.parse(repo.storage_namespace)
        address_type = catalog_pb2.Entry.AddressType.Value(stat.address_type)
        store_uri, key = ns.address_key(stat.physical_address, address_type)
        store = await self.ctx.stores.block_store(store_uri)
        presign = getattr(store, "presign", None)
        if presign is None:
            return None
        return str(await presign(key, method="GET", expires_seconds=expires_seconds))

    async def check_condition(self, repo_id: str, branch: str, path: str, condition: Condition) -> None:
        """Apply a write's ``condition`` to the path's current entry on ``branch`` now (a refusal
        before any byte is stored; the upload checks it again atomically with its staging)."""
        try:
            current: ValueRecord | None = await reading.get_entry(
                self.ctx, repo_id, branch, _path_bytes(path)
            )
        except NotFoundError as e:
            if type(e) is not NotFoundError:  # (a purged object's entry is an entry)
                raise
            current = None  # no entry (or no branch, which the upload then answers)
        condition(current)

    async def stat(self, repo_id: str, ref: str, path: str) -> ObjectStat:
        """The object's entry; :class:`PurgedError` when an audited purge destroyed (or is
        destroying) its object."""
        # The repository record as writers see it (at most write_cache_seconds old, dropped at once
        # when this process deletes the repository or changes read-only): the branch and entry
        # reads below are fresh, and a stat is answered per request by the REST API's clients.
        repo = await staging_writes.repository_for_write(self.ctx, repo_id)
        return await self._stat(repo, ref, path)

    async def _stat(self, repo: Repository, ref: str, path: str) -> ObjectStat:
        stat = ObjectStat.from_record(await reading.entry(self.ctx, repo, ref, _path_bytes(path)))
        await self._refuse_purged(repo, stat)
        return stat

    async def describe(self, repo_id: str, ref: str, path: str) -> tuple[ObjectStat, str | None]:
        """The object's entry and the audit id of the purge that destroyed its object (``None``:
        not purged), for showing it (``fs stat``); reading its bytes still fails with
        :class:`PurgedError`."""
        repo = await self.ctx.repository(repo_id)
        stat = ObjectStat.from_record(await reading.entry(self.ctx, repo, ref, _path_bytes(path)))
        return stat, await self._purge_audit(repo, stat)

    async def purged(self, repo_id: str, stats: Sequence[ObjectStat]) -> dict[str, str]:
        """Path -> audit id of those of ``stats`` (a listing's page) whose object an audited purge
        destroyed: listings still list them, so a command can show them as purged. A repository
        that never purged answers from the cached probe; else one paged scan of the markers."""
        repo = await self.ctx.repository(repo_id)
        if not stats or not await self.markers.has_purges(repo):
            return {}
        paths = {rel: s.path for s in stats if (rel := _relative(repo, s)) is not None}
        found = await lookup_markers(self.ctx, repo, paths, probe=False)
        return {paths[rel]: audit for rel, audit in found.items()}

    async def read(
        self, repo_id: str, ref: str, path: str, *, start: int = 0, length: int | None = None
    ) -> AsyncIterator[bytes]:
        """Stream the object's bytes (a byte range when ``start``/``length`` are given)."""
        repo = await self.ctx.repository(repo_id)
        stat = ObjectStat.from_record(await reading.entry(self.ctx, repo, ref, _path_bytes(path)))
        async for chunk in self._checked_stream(repo, stat, start, length):
            yield chunk

    async def read_stat(
        self, repo_id: str, stat: ObjectStat, *, start: int = 0, length: int | None = None
    ) -> AsyncIterator[bytes]:
        """Stream the bytes of the object ``stat`` describes (its address: the same bytes however
        often it is read, whatever happens to the path meanwhile); :class:`PurgedError` when an
        audited purge destroyed it since, even if its bytes are still in the store."""
        repo = await staging_writes.repository_for_write(
            self.ctx, repo_id
        )  # once per object of a bulk download
        async for chunk in self._checked_stream(repo, stat, start, length):
            yield chunk

    async def _refuse_purged(self, repo: Repository, stat: ObjectStat) -> None:
        """Before any of the object's bytes is returned, its ``purged/`` marker is checked: a purge
        makes every reader look markers up before it writes one, and writes its markers before
        its first delete (:mod:`.purge_markers`), so a read made after the markers are durable
        refuses. A read checked earlier either streams bytes not yet deleted (it ran before the
        purge) or finds them gone and checks again (``_stream``)."""
        audit = await self._purge_audit(repo, stat)
        if audit is not None:
            raise _purged(stat, audit)

    async def _purge_audit(self, repo: Repository, stat: ObjectStat) -> str | None:
        """The audit id of the purge whose marker names the object's address, if any."""
        relative = _relative(repo, stat) if await self.markers.has_purges(repo) else None
        return None if relative is None else await self.markers.audit_of(repo, relative)

    async def _checked_stream(
        self, repo: Repository, stat: ObjectStat, start: int, length: int | None
    ) -> AsyncIterator[bytes]:
        """The object's bytes, none of them before its marker lookup (:meth:`_refuse_purged`)
        answered "not purged". The lookup runs while the store fetches the first chunk, so a
        remote store's first-byte latency hides it."""
        chunks = self._stream(repo, stat, start, length)
        relative = _relative(repo, stat) if await self.markers.has_purges(repo) else None
        if relative is None:  # no purge in the repository, or an address no purge names
            async for chunk in chunks:
                yield chunk
            return
        lookup = asyncio.ensure_future(self.markers.audit_of(repo, relative))
        try:
            try:
                first = await anext(chunks, None)
            except Exception as e:
                # A purged object answers purged whatever else its read met (gone, or a store
                # refusing its path); an unanswered lookup leaves the read's own error.
                audit = await _answer(lookup)
                if audit is not None:
                    raise _purged(stat, audit) from e
                raise
            except BaseException:
                lookup.cancel()
                raise
            audit = await lookup
            if audit is not None:
                raise _purged(stat, audit)
            if first is not None:
                yield first
            async for chunk in chunks:
                yield chunk
        finally:
            await chunks.aclose()

    async def _stream(
        self, repo: Repository, stat: ObjectStat, start: int, length: int | None
    ) -> AsyncGenerator[bytes, None]:
        ns = StorageNamespace.parse(repo.storage_namespace)
        address_type = catalog_pb2.Entry.AddressType.Value(stat.address_type)
        store_uri, key = ns.address_key(stat.physical_address, address_type)
        store = await self.ctx.stores.block_store(store_uri)
        remaining = stat.size - start if length is None else length
        try:
            if 0 < remaining <= SMALL_READ_BYTES:  # one store call: a local store's one thread hop, not two
                data = await store.get(key, start=start, length=length)
                if data:
                    yield data
            else:
                async for chunk in store.stream(key, start=start, length=length):
                    yield chunk
        except NotFoundError as e:
            # Missing on purpose? A purge that started after the lookup left a marker (HTTP 410).
            await self._refuse_purged(repo, stat)
            raise NotFoundError(f"data of {stat.path!r} is missing at {stat.physical_address}") from e

    async def update_metadata(
        self, repo_id: str, branch: str, path: str, metadata: Mapping[str, str], *, force: bool = False
    ) -> ObjectStat:
        """Replace the object's user metadata (lakectl's ``fs update-metadata``, lakeFS's
        UpdateObjectUserMetadata): its entry is staged again with the same address, size, ETag, time
        and content type, only if nothing changed it meanwhile (a concurrent upload wins); a purged
        object is :class:`PurgedError`."""
        key = _path_bytes(path)
        repo = await self.ctx.repository(repo_id)
        await self._refuse_purged(repo, await self._stat(repo, branch, path))
        meta = normalize_metadata(metadata)

        def change(current: ValueRecord) -> ValueRecord:
            stat, entry = ObjectStat.from_record(current), decode_entry(current.data)
            identity, data = make_entry(
                stat.physical_address,
                stat.size,
                stat.etag,
                last_modified=stat.last_modified,
                metadata=meta,
                content_type=stat.content_type,
                address_type=entry.address_type,
            )
            return ValueRecord(key, identity, data)

        made = await staging_writes.restage_if_unchanged(self.ctx, repo_id, branch, key, change, force=force)
        return ObjectStat.from_record(made)

    async def presign(self, repo_id: str, ref: str, path: str, *, expires_seconds: int) -> str:
        """A presigned GET URL of the object's bytes (lakectl's ``fs presign``): only an object in
        an S3 store has one (:class:`BadInputError` otherwise); a purged one is :class:`PurgedError`."""
        stat = await self.stat(repo_id, ref, path)
        url = await self.presign_read(repo_id, stat, expires_seconds=expires_seconds)
        if url is None:
            raise BadInputError(f"{stat.path!r}: only S3 objects can be presigned", field="PATH")
        return url

    async def read_all(self, repo_id: str, ref: str, path: str) -> bytes:
        return b"".join([chunk async for chunk in self.read(repo_id, ref, path)])

    async def delete(self, repo_id: str, branch: str, path: str, *, force: bool = False) -> None:
        key = _path_bytes(path)
        await reading.get_entry(self.ctx, repo_id, branch, key)  # NotFoundError for a missing object
        await staging_writes.stage_entry(self.ctx, repo_id, branch, tombstone(key), force=force)

    async def list(
        self,
        repo_id: str,
        ref: str,
        *,
        prefix: str = "",
        delimiter: str = "",
        after: str = "",
        amount: int = 1000,
    ) -> ListPage:
        if not 1 <= amount <= MAX_LIST_AMOUNT:
            raise BadInputError(f"must be between 1 and {MAX_LIST_AMOUNT}", field="amount")
        pfx, delim = encode_utf8(prefix, "prefix"), encode_utf8(delimiter, "delimiter")
        start = b""
        last = encode_utf8(after, "after")
        repo = await staging_writes.repository_for_write(self.ctx, repo_id)  # as stat
        if last:
            start = last + b"\x00"
        if delim and last.endswith(delim) and last.startswith(pfx) and len(last) > len(pfx):
            # The cursor is a common prefix from the previous page: continue after all of it.
            successor = prefix_successor(last)
            if successor is None:
                return ListPage([], [], False, "")
            start = successor
        # Resolved once: every re-seek below reads one snapshot. Under a prefix, the branch record
        # and the live token's first page are one KV call (reading.cursor_range bounds the page).
        first, end = reading.cursor_range(pfx, start)
        if end is None:
            resolved, live = await self.ctx.resolve(repo, ref), None
        else:
            resolved, live = await self.ctx.resolve_staged(repo, ref, first, end, FIRST_PAGE)
        staged, live = await reading.staged_in_range(self.ctx, resolved, first, end, live)
        if not staged:  # the commit's entries are the ref's here: its directory may be cached
            page = await self._cached_page(repo, resolved, pfx, delim, start=start, amount=amount)
            if page is not None:
                return page
        cursor = await reading.entry_cursor(
            self.ctx, repo, resolved, prefix=pfx, start=start, live_first=live
        )
        return (await walk(cursor, pfx, delim, amount)).page(0, amount)

    async def _cached_page(
        self, repo: Repository, resolved: Resolved, pfx: bytes, delim: bytes, *, start: bytes, amount: int
    ) -> ListPage | None:
        """The page from the cached children of the commit's directory (:mod:`.listing`); None
        when the cache cannot answer it: walk instead."""
        committed = Resolved(resolved.commit)  # no staging tokens: the metarange's entries only

        async def open_cursor(first: bytes) -> RecordCursor:
            return await reading.entry_cursor(self.ctx, repo, committed, prefix=pfx, start=first)

        key = (resolved.commit.metarange_id, pfx, delim)
        return await self.ctx.listings.page(key, start, amount, open_cursor)


async def _fresh_intent(journal: Journal, relative: str, branch: str, key: bytes, now: datetime) -> Intent:
    """The pending intent for ``relative``: recorded now, or left by an earlier attempt of the same
    write (only that one can have journalled a fresh address for this branch and key)."""
    earlier = await journal.intent(relative)
    if earlier is None:
        return await journal.record_intent(relative, branch, key, now)
    if earlier.state != "pending" or earlier.branch != branch or earlier.key != key:
        raise ConflictError(f"address {relative} was journalled for another write, or claimed since")
    return earlier


async def _answer(lookup: asyncio.Future[str | None]) -> str | None:
    """The marker lookup's answer, or None when it failed (the caller keeps its own error)."""
    try:
        return await lookup
    except LakeFSError:
        return None


def _purged(stat: ObjectStat, audit: str) -> PurgedError:
    return PurgedError(f"{stat.path!r} was purged (audit record {audit})", audit_id=audit)
