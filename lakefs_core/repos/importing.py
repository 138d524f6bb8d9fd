"""Import: entries pointing at existing objects in place, written straight into ranges, one commit.

lakectl's ``import --from s3://bucket/prefix --to lakefs://repo/branch/path/``: every object under the
source prefix becomes an entry ``path/<key relative to the source prefix>`` whose address is the
object's FULL address (nothing is copied; retention GC never deletes external addresses). The
entries never pass through staging:

1. **Plan** (:func:`plan_chunks`): the source prefix is listed one level deep (delimiter ``/``); its
   names (sub-prefixes and objects) are cut into contiguous chunks. Keys under one sub-prefix form
   one contiguous block of the sorted key space, so the chunks are disjoint, ordered key intervals.
2. **Ranges** (:func:`build_chunk_ranges`): each chunk is listed (recursively) and its entries are
   written as sorted ranges into the destination namespace's tables by the core's range writer and
   split policy. Chunks are independent: in-process they run one after another, on PySpark each is a
   task on an executor (``lakefs_gc/spark/import_job.py``); only range descriptors come back.
3. **Splice and commit** (:func:`commit_import`): a new metarange is the branch head's, with
   everything under ``path/`` replaced by the imported ranges (lakeFS's import semantics: the
   imported prefix is replaced, the rest kept); unchanged base ranges are reused whole. One commit on
   top of the head, then a compare-and-swap of the branch (a moved branch is re-spliced: the
   imported ranges are reused). Staged changes of the branch stay staged.

An import run for a caller that may stop it (the REST server's import status, canceled from any
process) is given an :class:`ImportWatch`: the import reports to it every :data:`WATCH_EVERY` entries
it built and once before its commit; the watch stops it there by raising
:class:`~lakefs_core.errors.CanceledError`. A stop at a checkpoint leaves no commit and writes
nothing more (the range being written is aborted); the commit itself (splice and branch CAS) is
never interrupted by the watch, so a cancel seen after the last checkpoint lets the import complete.

Killed at any point before the branch CAS, an import leaves no commit (ranges are immutable,
content-addressed files; a re-run finds them already stored). Source keys are hostile: a key whose
entry path would exceed 1,024 bytes or that holds a NUL is refused with :class:`BadInputError`
naming it. A source without objects (a missing local directory, an empty prefix) is
:class:`NotFoundError`, a local source that is a file :class:`BadInputError`; an import that
changes nothing (the same objects again) is :class:`NoChangesError`. A source overlapping the
storage namespace of ANY repository is refused: imported objects must never be data that some
repository's retention GC or hard delete may remove. For the same reason the source is recorded
(:meth:`~lakefs_core.refs.store.RefStore.record_import_source`) before those checks, and no
repository can be created over it while the importing repository lives. A local source is
resolved to its real path first (a dangling symlink in it is refused), and that real path is what
is checked, recorded, listed and addressed (:mod:`lakefs_core.realpaths`).
"""

from __future__ import annotations

import asyncio
import functools
import mimetypes
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, NoReturn

from lakefs_core.block._common import DEFAULT_CONTENT_TYPE
from lakefs_core.block.base import BlockStore, CommonPrefix, ObjectInfo
from lakefs_core.committed.metarange import MetaRange
from lakefs_core.committed.model import RangeInfo
from lakefs_core.committed.tables import TableStore
from lakefs_core.committed.writer import MetaRangeWriter
from lakefs_core.errors import BadInputError, NoChangesError, NotFoundError
from lakefs_core.faults import fault_point
from lakefs_core.format.records import ADDRESS_FULL, ValueRecord, make_entry
from lakefs_core.format.splitter import SplitPolicy
from lakefs_core.namespace import StorageNamespace
from lakefs_core.realpaths import real_namespace
from lakefs_core.refs.model import Commit
from lakefs_core.repos.committing import check_commit_text
from lakefs_core.repos.context import RepoContext
from lakefs_core.repos.namespace_claims import claimed_overlap, first_overlap
from lakefs_core.repos.retry import cas_retrying, exhausted_as
from lakefs_core.repos.staging_writes import MAX_PATH_BYTES

MAX_KEY_BYTES = MAX_PATH_BYTES  # an entry path, as for any staged write
DEFAULT_CHUNK_NAMES = 64  # top-level names per chunk when no chunk count is asked for
WATCH_EVERY = 1000  # entries built between two checkpoints of a watched import (one listing page)


class ImportWatch:
    """Progress and stop requests of an import in this process (see the module). This base watch
    never stops the import; a subclass raises :class:`~lakefs_core.errors.CanceledError` from a
    checkpoint to stop it."""

    async def built(self, entries: int) -> None:
        """Checkpoint: ``entries`` more entries were built since the last call."""

    async def committing(self) -> None:
        """Last checkpoint, before the commit: nothing after it stops the import."""


NO_WATCH = ImportWatch()


@dataclass(frozen=True)
class Chunk:
    """One contiguous piece of the source: sub-prefixes to list and objects listed at the top."""

    index: int
    prefixes: tuple[str, ...] = ()  # full store keys ending in '/'
    objects: tuple[tuple[str, int, str, float | None], ...] = ()  # (key, size, etag, mtime)
    order: tuple[str, ...] = ()  # every name of the chunk in key order ('p:' prefix, 'o:' object)

    def to_json(self) -> dict[str, Any]:
        objects = [list(o) for o in self.objects]
        return {
            "index": self.index,
            "prefixes": list(self.prefixes),
            "objects": objects,
            "order": list(self.order),
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> Chunk:
        try:
            return cls(
                int(doc["index"]),
                tuple(str(p) for p in doc["prefixes"]),
                tuple(
                    (str(k), int(s), str(e), None if m is None else float(m)) for k, s, e, m in doc["objects"]
                ),
                tuple(str(o) for o in doc["order"]),
            )
        except (KeyError, TypeError, ValueError) as e:
            raise BadInputError(f"not an import chunk: {type(e).__name__}", field="chunk") from None


def normalize_dest_prefix(path: str) -> str:
    """The entries' key prefix: ``''`` (the whole branch) or a path ending in ``/``."""
    try:
        size = len(path.encode()) if isinstance(path, str) else -1
    except UnicodeEncodeError:  # a lone surrogate
        size = -1
    if size < 0 or size > MAX_KEY_BYTES or "\0" in path:
        raise BadInputError("must be a UTF-8 path of at most 1024 bytes without NUL", field="path")
    return path if not path or path.endswith("/") else path + "/"


def source_namespace(uri: str) -> StorageNamespace:
    """The import source as a namespace-shaped location (``s3://bucket/prefix``, ``local:///dir``),
    in normal form (see :func:`real_source` for where a local one leads)."""
    return StorageNamespace.parse(_source_uri(uri))


def _source_uri(uri: str) -> str:
    return "local://" + uri if isinstance(uri, str) and uri.startswith("/") else uri


async def real_source(uri: str) -> StorageNamespace:
    """The import source at its real path (:mod:`lakefs_core.realpaths`, strict: a dangling symlink
    is refused): what is recorded, compared, listed and addressed by the entries."""
    return await real_namespace(_source_uri(uri), field="source")


async def check_source_is_external(ctx: RepoContext, source: StorageNamespace) -> None:
    """Refuse a source inside or enclosing ANY repository's storage namespace, this one's included
    (as lakeFS does), or a deleted repository's not yet purged: imported entries are external
    objects, and that repository's retention GC, hard delete or purge would remove them. ``source``
    is real; every namespace is compared as stored and where it leads now."""
    repos = ((r.id, r.storage_namespace) async for r in ctx.refs.list_repositories(include_deleting=True))
    found = await first_overlap(repos, source)
    if found is not None:
        _refuse_overlap(source, found.shown, f"the storage namespace of repository {found.name!r}")
    # A deleted repository's namespace is purged by the hard-delete reconciler once its grace ends.
    found = await first_overlap(
        ((d.repo, d.namespace) async for d in ctx.refs.deleted_repositories()), source
    )
    if found is not None:
        whose = f"the storage namespace of the deleted repository {found.name!r}, whose data is to be purged"
        _refuse_overlap(source, found.shown, whose)
    # A repository being created has claimed its namespace before its record exists.
    claimed = await claimed_overlap(ctx, source)
    if claimed is not None:
        _refuse_overlap(source, claimed.shown, f"the storage namespace of repository {claimed.name!r}")


def _refuse_overlap(source: StorageNamespace, other: str, whose: str) -> NoReturn:
    raise BadInputError(f"{source.uri} overlaps {other}, {whose}", field="source")


async def check_source_exists(source: StorageNamespace) -> None:
    """A local source must be a directory (a missing one is :class:`NotFoundError`); an object store
    prefix is checked by listing it (:func:`finish_import` refuses one without objects)."""
    if source.scheme != "local":
        return
    path = source.store_uri[len("local://") :]
    if await asyncio.to_thread(os.path.isdir, path):
        return
    if await asyncio.to_thread(os.path.lexists, path):
        raise BadInputError(f"{source.uri} is not a directory", field="source")
    raise NotFoundError(f"no such directory: {source.uri}")


def _mtime(info: ObjectInfo) -> float | None:
    return info.last_modified.timestamp() if info.last_modified is not None else None


async def plan_chunks(store: BlockStore, source: StorageNamespace, chunks: int | None = None) -> list[Chunk]:
    """Cut the source's top-level names into contiguous chunks (see the module)."""
    base = f"{source.prefix}/" if source.prefix else ""
    names: list[tuple[str, ObjectInfo | None]] = []
    async for item in store.list(base, delimiter="/"):
        if isinstance(item, CommonPrefix):
            if item.prefix != f"{base}_lakefs/":  # a namespace's metadata is never imported
                names.append((item.prefix, None))
        else:
            names.append((item.key, item))
    names.sort(key=lambda n: n[0])
    per = max(1, -(-len(names) // chunks)) if chunks else DEFAULT_CHUNK_NAMES
    out: list[Chunk] = []
    for start in range(0, len(names), per):
        group = names[start : start + per]
        out.append(
            Chunk(
                len(out),
                tuple(n for n, info in group if info is None),
                tuple((i.key, i.size, i.etag, _mtime(i)) for _, i in group if i is not None),
                tuple(("p:" if info is None else "o:") + n for n, info in group),
            )
        )
    return out


def _record(
    source: StorageNamespace,
    base: str,
    dest_prefix: str,
    key: str,
    *,
    size: int,
    etag: str,
    mtime: float | None,
) -> ValueRecord:
    relative = key[len(base) :]
    path = dest_prefix + relative
    raw = path.encode("utf-8", "surrogateescape")
    if len(raw) > MAX_KEY_BYTES or "\0" in path or not relative:
        raise BadInputError(f"source object {key!r} cannot be an entry (path over 1024 bytes or NUL)",
                            field="source")  # fmt: skip
    when = datetime.fromtimestamp(mtime, UTC) if mtime is not None else None
    identity, data = make_entry(
        source.full_address(relative),
        size,
        etag.strip('"'),
        last_modified=when,
        address_type=ADDRESS_FULL,
        content_type=content_type_of(relative),
    )
    return ValueRecord(raw, identity, data)


@functools.cache
def _types() -> mimetypes.MimeTypes:
    # Python's built-in table only (no /etc/mime.types): the same entry bytes on every machine, so
    # an import repeated elsewhere writes the same ranges.
    return mimetypes.MimeTypes(filenames=())


def content_type_of(path: str) -> str:
    """The content type an imported object's entry records, from its name's extension (a listing
    carries none); the default type when the extension says nothing."""
    guessed, encoding = _types().guess_type(path, strict=False)
    if guessed is None or encoding is not None:  # x.csv.gz is gzip data, not CSV
        return DEFAULT_CONTENT_TYPE
    return guessed


async def build_chunk_ranges(
    store: BlockStore,
    source: StorageNamespace,
    tables: TableStore,
    chunk: Chunk,
    *,
    dest_prefix: str,
    policy: SplitPolicy | None = None,
    watch: ImportWatch = NO_WATCH,
) -> tuple[list[RangeInfo], int]:
    """Write the chunk's entries as ranges into ``tables``; returns the ranges and the entry count.
    ``watch`` sees every :data:`WATCH_EVERY` entries (and the rest at the end) and may stop it."""
    base = f"{source.prefix}/" if source.prefix else ""
    writer = MetaRangeWriter(tables, policy)
    objects = {key: (size, etag, mtime) for key, size, etag, mtime in chunk.objects}
    count = reported = 0
    try:
        for name in chunk.order:
            if count - reported >= WATCH_EVERY:
                reported = await _checkpoint(watch, count, reported)
            kind, key = name[:2], name[2:]
            if kind == "o:":
                size, etag, mtime = objects[key]
                await writer.add(_record(source, base, dest_prefix, key, size=size, etag=etag, mtime=mtime))
                count += 1
                continue
            async for item in store.list(key):
                if isinstance(item, ObjectInfo):
                    record = _record(
                        source,
                        base,
                        dest_prefix,
                        item.key,
                        size=item.size,
                        etag=item.etag,
                        mtime=_mtime(item),
                    )
                    await writer.add(record)
                    count += 1
                    if count - reported >= WATCH_EVERY:
                        reported = await _checkpoint(watch, count, reported)
        await _checkpoint(watch, count, reported)
        ranges = await writer.close_ranges()
    except BaseException:
        await writer.abort()
        raise
    return ranges, count


async def _checkpoint(watch: ImportWatch, count: int, reported: int) -> int:
    await watch.built(count - reported)
    return count


def _prefix_end(prefix: bytes) -> bytes | None:
    stripped = prefix.rstrip(b"\xff")
    return None if not stripped else stripped[:-1] + bytes([stripped[-1] + 1])


async def splice(base: MetaRange, prefix: bytes, imported: Sequence[RangeInfo], policy: SplitPolicy) -> str:
    """A metarange: ``base`` with every key under ``prefix`` replaced by the ``imported`` ranges."""
    writer = MetaRangeWriter(base.tables, policy)
    hi = _prefix_end(prefix) if prefix else b""
    try:
        for i, info in enumerate(base.ranges):  # what sorts before the prefix
            if info.max_key < prefix:
                await writer.add_range(info)
            elif info.min_key < prefix:
                for record in await base.range_records(i):
                    if record.key < prefix:
                        await writer.add(record)
        for info in imported:
            await writer.add_range(info)
        if hi is not None and hi != b"":
            for i, info in enumerate(base.ranges):  # what sorts after it
                if info.min_key >= hi:
                    await writer.add_range(info)
                elif info.max_key >= hi:
                    for record in await base.range_records(i):
                        if record.key >= hi:
                            await writer.add(record)
        metarange_id, _ = await writer.close()
    except BaseException:
        await writer.abort()
        raise
    return metarange_id


@dataclass(frozen=True)
class ImportResult:
    commit_id: str
    metarange_id: str
    entries: int
    ranges: int
    chunks: int
    seconds: float
    source: str = ""  # the source's real location, as recorded and addressed

    def to_json(self) -> dict[str, Any]:
        return {"commit_id": self.commit_id, "metarange_id": self.metarange_id, "entries": self.entries,
                "ranges": self.ranges, "chunks": self.chunks, "seconds": round(self.seconds, 3),
                "source": self.source}  # fmt: skip


async def commit_import(
    ctx: RepoContext,
    repo_id: str,
    branch_id: str,
    dest_prefix: str,
    imported: Sequence[RangeInfo],
    *,
    source_uri: str,
    committer: str,
    message: str,
) -> Commit:
    """Splice the imported ranges over ``dest_prefix`` of the branch head and commit (module step 3)."""
    repo = await ctx.repository(repo_id)
    ctx.writable(repo, False)
    prefix = normalize_dest_prefix(dest_prefix).encode()
    metadata = {"import_source": source_uri, "import_destination": dest_prefix}
    with exhausted_as(f"branch {branch_id!r}: too many concurrent updates during import"):
        async for attempt in cas_retrying(ctx.settings):
            with attempt:
                branch, raw = await ctx.refs.get_branch(repo, branch_id)
                head = await ctx.refs.get_commit(repo, branch.commit_id)
                base = await ctx.metarange(repo, head.metarange_id)
                metarange_id = await splice(base, prefix, imported, ctx.settings.split_policy)
                if metarange_id == head.metarange_id:
                    raise NoChangesError(f"importing {source_uri} changes nothing on {branch_id!r}")
                made = Commit.create(
                    committer=committer,
                    message=message,
                    metarange_id=metarange_id,
                    creation_date=ctx.clock(),
                    metadata=metadata,
                    parents=(head.id,),
                    generation=head.generation + 1,
                )
                await ctx.refs.put_commit(repo, made)
                await ctx.refs.cas_branch(repo, replace(branch, commit_id=made.id), raw)
    return made


@dataclass(frozen=True)
class ImportTarget:
    """What every import checks before any work (:func:`prepare_import`)."""

    repo_id: str
    branch_id: str
    dest_prefix: str
    source: StorageNamespace
    namespace: StorageNamespace
    started: float


async def prepare_import(
    ctx: RepoContext,
    repo_id: str,
    branch_id: str,
    dest_path: str,
    source_uri: str,
    *,
    committer: str = "",
    message: str | None = None,
) -> ImportTarget:
    """Check the commit's text, the destination (writable repository, existing branch, path) and
    the source (not overlapping the repository's namespace) before any listing or writing."""
    started = time.perf_counter()
    check_commit_text(committer, message, None)
    dest_prefix = normalize_dest_prefix(dest_path)
    repo = await ctx.repository(repo_id)
    ctx.writable(repo, False)
    await ctx.refs.get_branch(repo, branch_id)  # an unknown branch fails before any work
    source = await real_source(source_uri)
    namespace = StorageNamespace.parse(repo.storage_namespace)
    # Recorded before the checks (see namespace_claims): no repository is created over it later.
    created = await ctx.refs.record_import_source(source.canonical, repo, time.time())
    try:
        await check_source_is_external(ctx, source)  # this repository's namespace included
        await check_source_exists(source)
    except BaseException:
        if created:  # nothing can be imported from it by this call: leave no record behind
            await ctx.refs.forget_import_source(source.canonical, repo.id)
        raise
    return ImportTarget(repo_id, branch_id, dest_prefix, source, namespace, started)


async def finish_import(
    ctx: RepoContext,
    target: ImportTarget,
    ranges: list[RangeInfo],
    *,
    entries: int,
    chunks: int,
    committer: str,
    message: str | None,
) -> ImportResult:
    """Commit the built ranges (none: :class:`NotFoundError`, the source holds no objects)."""
    if entries == 0:
        raise NotFoundError(f"no objects under {target.source.uri}")
    fault_point("import:before-commit")  # crash tests: ranges stored, no commit yet
    made = await commit_import(
        ctx, target.repo_id, target.branch_id, target.dest_prefix, ranges, source_uri=target.source.uri,
        committer=committer, message=message or f"Import {target.source.uri} to {target.dest_prefix or '/'}",
    )  # fmt: skip
    seconds = time.perf_counter() - target.started
    return ImportResult(made.id, made.metarange_id, entries, len(ranges), chunks, seconds, target.source.uri)


async def import_objects(
    ctx: RepoContext,
    repo_id: str,
    branch_id: str,
    dest_path: str,
    source_uri: str,
    *,
    committer: str,
    message: str | None = None,
    watch: ImportWatch = NO_WATCH,
) -> ImportResult:
    """The whole import in this process (small imports; large ones: the ``core-import`` Spark job),
    reporting to ``watch``, which may stop it before its commit
    (:class:`~lakefs_core.errors.CanceledError`)."""
    target = await prepare_import(
        ctx, repo_id, branch_id, dest_path, source_uri, committer=committer, message=message
    )
    store = await ctx.source_store(target.source)
    tables = await ctx.namespace_tables(target.namespace)
    ranges: list[RangeInfo] = []
    entries = 0
    chunks = await plan_chunks(store, target.source)
    for chunk in chunks:
        built, n = await build_chunk_ranges(
            store,
            target.source,
            tables,
            chunk,
            dest_prefix=target.dest_prefix,
            policy=ctx.settings.split_policy,
            watch=watch,
        )
        ranges += built
        entries += n
    if entries:  # an empty source is refused by finish_import, canceled or not
        await watch.committing()
    return await finish_import(
        ctx, target, ranges, entries=entries, chunks=len(chunks), committer=committer, message=message
    )
