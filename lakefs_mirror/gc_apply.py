"""A mirror applies its source's completed GC sweeps to its own namespace (gc.md §3d, mirror side).

Retention GC runs on the source repository only (it never marks a read-only mirror). Replication
copies objects to the mirror's namespace but never deletes them, so without this the mirror keeps
every object the source ever swept. :func:`apply_source_sweeps` closes that gap for ONE mirror:

1. Find the source runs to apply, through GC's published interface
   (:func:`lakefs_gc.published.finished_runs`, the only GC module the mirror imports): every
   finished, non-dry-run sweep of the source namespace whose run record in the source's KV says
   ``swept`` and whose files match its digests, that the mirrors database has not recorded
   for this mirror (``mirror_gc_applied``), oldest first, at most ``max_runs`` per call. Runs that
   can never be swept (a failed mark, a dry-run mark) are recorded as applied with nothing to do;
   marks not swept yet are left for a later call. lakeFS's own runs are never applied.
2. The protected set: every object the mirror's own branch and tag heads and every ``mirror_head``
   and ``candidate`` of its status rows reference, read through the SOURCE's tables (a candidate's
   tables may not have reached the mirror yet; the source never sweeps ``_lakefs/``), ranges
   de-duplicated. The source pins these commits, so the protected addresses in a sweep are expected
   to be none: any hit is kept, counted and logged at WARNING.
3. Delete, per batch of at most 1,000 addresses the sweep deleted (each checked by GC to be a data
   object: never ``_lakefs/``), the same relative keys in the mirror's namespace, minus the protected
   set and minus what the source still holds: definite knowledge only. When the sweep rescued
   nothing, the source holds exactly its failed keys (:meth:`~lakefs_gc.published.SweptRun.kept_in_source`);
   otherwise each address is checked on the source (one HEAD each), since rescued keys are not
   recorded.
4. Forget the doomed keys in the presence cache (the one way a positive fact goes stale), keep only
   the protected tables' "validated" facts (an older validated range may reference a swept object),
   and record the run in ``mirror_gc_applied`` once every key was deleted. A run with failed deletes
   stays pending and is applied again by the next call (deletes are idempotent).

No resurrection: addresses are never reused, so a late replica of a swept object can only recreate
garbage, which no head references; a heal copies only a candidate's objects, which are protected.
Errors propagate (:mod:`lakefs_core.errors`): a corrupt report or an unreadable table stops the call
before any delete of that batch.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

from lakefs_core.block.base import BlockStore
from lakefs_core.committed.ranges import metarange_range_ids, range_addresses
from lakefs_core.errors import ConflictError, NotFoundError
from lakefs_core.repos.graveler import Graveler, Repository, StorageNamespace
from lakefs_core.service.deleter import KeyDeleter, store_deleter
from lakefs_gc.published import SweptRun, finished_runs
from lakefs_mirror.db import MirrorRecord, MirrorsDB
from lakefs_mirror.presence import PresenceCache, namespace_key

log = logging.getLogger(__name__)

BATCH = 1000  # addresses per delete request (S3's DeleteObjects limit)
SOURCE_CHECKS = 32  # concurrent HEADs on the source when a sweep rescued keys
DEFAULT_MAX_RUNS = 10


@dataclass
class GCApplyReport:
    """What one call did for one mirror (counters in addresses)."""

    mirror_id: str
    applied: list[str] = field(default_factory=list)  # runs recorded as applied, oldest first
    pending: list[str] = field(default_factory=list)  # runs with failed deletes, retried next call
    candidates: int = 0  # addresses in the applied runs' deleted lists
    kept_in_source: int = 0  # still in the source (rescued or failed there): kept
    protected: int = 0  # referenced by the mirror's heads or candidates: kept (expected 0)
    deleted: int = 0
    failed: int = 0
    forgotten: int = 0  # presence facts dropped
    tables_dropped: int = 0  # validated-table facts dropped


@dataclass
class _Sides:
    mirror: MirrorRecord
    src: Graveler
    src_ns: StorageNamespace
    src_store: BlockStore
    dst: Graveler
    dst_repo: Repository
    dst_ns: StorageNamespace
    dst_store: BlockStore

    @property
    def cache_ns(self) -> str:
        """The presence cache's key of the mirror's namespace (as the engine records facts)."""
        return namespace_key(self.dst_ns.uri, self.dst_repo.instance_uid)


@dataclass
class _Protected:
    addresses: set[str]
    tables: set[str]


async def _sides(mirror: MirrorRecord, src: Graveler, dst: Graveler) -> _Sides | None:
    """Both repositories and stores; None while the mirror repository does not exist yet."""
    try:
        dst_repo = await dst.repository(mirror.name)
    except NotFoundError:
        return None
    dst_ns = StorageNamespace.parse(dst_repo.storage_namespace)
    if not dst_repo.read_only or dst_ns.uri != StorageNamespace.parse(mirror.storage_namespace).uri:
        raise ConflictError(
            f"repository {mirror.name!r} is not this mirror's read-only repository: GC sweeps not applied"
        )
    src_repo = await src.repository(mirror.source_repo)
    src_ns = StorageNamespace.parse(src_repo.storage_namespace)
    src_store = await src.namespace_store(src_ns)
    dst_store = await dst.namespace_store(dst_ns)
    return _Sides(mirror, src, src_ns, src_store, dst, dst_repo, dst_ns, dst_store)


async def _runs_to_apply(sides: _Sides, db: MirrorsDB, max_runs: int) -> tuple[list[SweptRun], list[str]]:
    """``(swept runs to apply, runs that will never be swept)``, oldest first."""
    applied = await db.gc_applied_runs(sides.mirror.id)
    todo: list[SweptRun] = []
    never: list[str] = []
    runs = finished_runs(sides.src, sides.mirror.source_repo, sides.src_store, sides.src_ns, skip=applied)
    async for run in runs:
        if run.swept is None:
            never.append(run.run_id)
            continue
        todo.append(run.swept)
        if len(todo) >= max_runs:
            break
    return todo, never


async def _protected(sides: _Sides, db: MirrorsDB) -> _Protected:
    """Every object (namespace-relative) and table the mirror's heads and candidates use."""
    commits: set[str] = set()
    async for branch in sides.dst.list_branches(sides.mirror.name):
        commits.add(branch.commit_id)
    async for tag in sides.dst.list_tags(sides.mirror.name):
        commits.add(tag.commit_id)
    for status in await db.list_status(sides.mirror.id):
        commits.update(c for c in (status.mirror_head, status.candidate) if c)
    metaranges: set[str] = set()
    for commit_id in sorted(commits):
        metaranges.add(await _metarange_of(sides, commit_id))
    metaranges.discard("")  # the empty tree
    out = _Protected(set(), set(metaranges))
    for metarange_id in sorted(metaranges):
        out.tables.update(await metarange_range_ids(sides.src_store, sides.src_ns, metarange_id))
    for range_id in sorted(out.tables - metaranges):
        out.addresses.update(await range_addresses(sides.src_store, sides.src_ns, range_id))
    return out


async def _metarange_of(sides: _Sides, commit_id: str) -> str:
    """The commit's metarange id, from the source (it has every commit the mirror has)."""
    try:
        return (await sides.src.get_commit_by_id(sides.mirror.source_repo, commit_id)).metarange_id
    except NotFoundError:
        return (await sides.dst.get_commit_by_id(sides.mirror.name, commit_id)).metarange_id


async def _in_source(sides: _Sides, addresses: list[str]) -> set[str]:
    """The addresses the source namespace still holds (one HEAD each, bounded concurrency)."""
    limit = asyncio.Semaphore(SOURCE_CHECKS)

    async def check(address: str) -> bool:
        async with limit:
            return await sides.src_store.exists(sides.src_ns.key(address))

    found = await asyncio.gather(*(check(a) for a in addresses))
    return {a for a, present in zip(addresses, found, strict=True) if present}


class _RunApplier:
    """One run's deletes in the mirror's namespace."""

    def __init__(
        self, sides: _Sides, protected: _Protected, deleter: KeyDeleter, presence: PresenceCache
    ) -> None:
        self.sides, self.protected, self.deleter, self.presence = sides, protected, deleter, presence

    async def apply(self, run: SweptRun, report: GCApplyReport) -> bool:
        """Apply the swept run ``run``; True when every doomed key was deleted."""
        sides, run_id = self.sides, run.run_id
        failed_in_source = await run.kept_in_source()  # None: rescued keys exist, check each
        ok = True
        async for batch in run.deleted_batches(BATCH):  # every address checked before it comes
            report.candidates += len(batch)
            guarded = [a for a in batch if a in self.protected.addresses]
            if guarded:
                report.protected += len(guarded)
                log.warning(
                    "mirror %s: source run %s swept %d object(s) the mirror's heads or candidates "
                    "reference (kept in the mirror), e.g. %s",
                    sides.mirror.name, run_id, len(guarded), guarded[0],
                    extra={"mirror": sides.mirror.name, "repository": sides.mirror.source_repo},
                )  # fmt: skip
            rest = [a for a in batch if a not in self.protected.addresses]
            kept = (
                failed_in_source & set(rest)
                if failed_in_source is not None
                else await _in_source(sides, rest)
            )
            report.kept_in_source += len(kept)
            doomed = [a for a in rest if a not in kept]
            if not doomed:
                continue
            outcome = await self.deleter.delete_keys([sides.dst_ns.key(a) for a in doomed])
            report.deleted += len(outcome.deleted)
            report.failed += len(outcome.failed)
            ok = ok and not outcome.failed
            report.forgotten += self.presence.forget(sides.cache_ns, doomed)
        return ok


async def apply_source_sweeps(
    mirror: MirrorRecord,
    *,
    src: Graveler,
    dst: Graveler,
    db: MirrorsDB,
    presence: PresenceCache,
    deleter: KeyDeleter | None = None,
    max_runs: int = DEFAULT_MAX_RUNS,
) -> GCApplyReport:
    """Apply the completed GC sweeps of ``mirror``'s source to its namespace (see the module
    docstring). ``src``/``dst`` are the Gravelers of the source and mirror regions; ``deleter``
    defaults to the GC sweep's rate-limited batch deleter on the mirror's store."""
    report = GCApplyReport(mirror.id)
    sides = await _sides(mirror, src, dst)
    if sides is None:
        return report
    todo, never = await _runs_to_apply(sides, db, max_runs)
    for run_id in never:
        await db.set_gc_applied(mirror.id, run_id)
    if not todo:
        return report
    protected = await _protected(sides, db)
    applier = _RunApplier(sides, protected, deleter or store_deleter(sides.dst_store), presence)
    for run in todo:
        if await applier.apply(run, report):
            await db.set_gc_applied(mirror.id, run.run_id)
            report.applied.append(run.run_id)
        else:
            report.pending.append(run.run_id)
    if report.deleted or report.failed:
        report.tables_dropped = presence.retain_tables(sides.cache_ns, protected.tables)
    log.info(
        "mirror %s: applied %d source GC run(s): %d deleted, %d failed, %d kept (in source), "
        "%d kept (protected)",
        mirror.name, len(report.applied), report.deleted, report.failed, report.kept_in_source,
        report.protected, extra={"mirror": mirror.name, "repository": mirror.source_repo},
    )  # fmt: skip
    return report


async def apply_source_purges(
    src: Graveler, src_repo_id: str, dst: Graveler, dst_repo: Repository, presence: PresenceCache
) -> int:
    """Apply every audited purge of the source repository not yet applied to the mirror: the audit
    record and markers are copied into the mirror repository (``source`` names the source record),
    the mirror's copies deleted, and the addresses forgotten in the presence cache. Returns how many
    purges were applied. Reads of a purged object on the mirror then answer "purged" too."""
    records = await src.list_purges(src_repo_id)
    if not records:
        return 0
    applied = {r.source for r in await dst.list_purges(dst_repo.id) if r.state == "done"}
    cache_ns = namespace_key(StorageNamespace.parse(dst_repo.storage_namespace).uri, dst_repo.instance_uid)
    n = 0
    for record in records:
        source = f"{src_repo_id}/{record.audit_id}"
        if record.state != "done" or source in applied:
            continue  # a purge still deleting at the source is applied once it is done there
        copy = record.model_copy(update={"source": source, "state": "deleting", "deleted": 0})
        await dst.record_purge(dst_repo.id, copy)
        presence.forget(cache_ns, record.addresses)
        log.info("applied purge %s of %s to mirror %s", record.audit_id, src_repo_id, dst_repo.id)
        n += 1
    return n
