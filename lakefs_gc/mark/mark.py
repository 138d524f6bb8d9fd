"""The GC mark: which objects of a repository's namespace are garbage (gc.md §3a).

:func:`run_mark` runs the six steps; the driver side is async (KV, refs, reports), the executor side
is the same partition functions on any :class:`~lakefs_core.compute.Executor` (in-process lite, or
PySpark locally or on a cluster), run from a worker thread:

1. Claim: refuse a read-only (mirror) repository; snapshot the rules (lakeFS's protobuf) and the pins
   (:class:`~lakefs_gc.pins.PinSource`; failing to read them aborts); write ``run.json`` create-only.
   The repository lease is the CALLER's (the daemon's ``gc/<repo>`` lease, the CLI's).
2. Uncommitted addresses (:mod:`.uncommitted`), BEFORE the commits.
3. Active commits (:mod:`.active`, on an on-disk map): refs read first, then the commit scan;
   ``commits.csv`` and the distinct metarange ids written as parts.
4. Listing plan (:mod:`.listing`): slices younger than the cutoff dropped; ``cutoff = now - min_age``.
5. Executors: metaranges -> distinct ranges (saved as ``ranges.txt``) -> committed addresses;
   candidates listed per slice with ``mtime < cutoff``; ``candidates - committed - uncommitted``
   written as ``deleted.text/part-NNNNN`` and ``deleted/part-NNNNN.snappy.parquet`` (lakeFS's
   Parquet report, :mod:`.parquet`) by the executors, then ``deleted/_SUCCESS`` by the driver.
6. ``summary.json`` create-only: lakeFS's fields plus ours. A failure after the claim writes
   ``success=false`` if it can.
7. The run record in the KV LAST (:mod:`lakefs_gc.runs.record`, state ``complete``): the SHA-256 of
   every file written above except the Parquet report, each computed while the file was written (on
   the executors for their parts). Without it a run is abandoned and nothing is ever swept from it.

The driver never holds the addresses: staging and commits stream to parts, executors read them.
:func:`mark_job` is the same mark as a named job (``gc-mark``) for ``spark-submit``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any, Literal

from lakefs_core.block.base import BlockStore
from lakefs_core.compute.executor import Dataset, Executor
from lakefs_core.compute.partition import StoreRef, WrittenPart, part_name, store_ref
from lakefs_core.errors import BadInputError, LakeFSError, ReadOnlyError
from lakefs_core.repos.graveler import Graveler, StorageNamespace
from lakefs_core.repos.namespace_claims import check_for_gc
from lakefs_gc.clock import RunClock, check_offset
from lakefs_gc.faults import fault_point
from lakefs_gc.mark.active import TagsPolicy, compute_active
from lakefs_gc.mark.committed import addresses_partition, range_ids_partition
from lakefs_gc.mark.listing import candidates_partition, plan_slices
from lakefs_gc.mark.parquet import write_parquet_part, write_success_marker
from lakefs_gc.mark.uncommitted import parts_partition, write_uncommitted
from lakefs_gc.pins import PinSource, pinned_now
from lakefs_gc.rules import load_rules
from lakefs_gc.runs.layout import RunLayout
from lakefs_gc.runs.parts import list_parts, ns_relative, write_parts
from lakefs_gc.runs.record import Digester, FileDigest, RunRecord, RunRecords, digest_of
from lakefs_gc.runs.reports import RunManifest, Summary, write_commits_csv, write_manifest, write_summary

log = logging.getLogger("lakefs_gc.mark.mark")

DEFAULT_MIN_AGE = timedelta(hours=24)
MarkMode = Literal["full", "mark", "dry-run"]
_Digests = dict[str, FileDigest]


@dataclass(frozen=True)
class MarkOptions:
    """``now``: retention "now" (default: ``clock``'s now at the claim); ``clock``: the run's clock
    (default: the Graveler's, no offset), the source of the run id, ``start_time`` and the record's
    ``end_time``; ``mode`` is recorded in ``run.json`` (a ``dry-run`` mark is never swept);
    ``partitions``: executor parallelism (default: its own)."""

    now: datetime | None = None
    min_age: timedelta = DEFAULT_MIN_AGE
    tags_policy: TagsPolicy = "pin"
    mode: MarkMode = "mark"
    run_id: str | None = None
    partitions: int | None = None
    workdir: Path | None = None  # the commit map's directory (default: the system temp dir)
    clock: RunClock | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.min_age, timedelta) or self.min_age < timedelta(0):
            raise BadInputError("must be a duration >= 0", field="min_age")
        if self.now is not None and (not isinstance(self.now, datetime) or self.now.tzinfo is None):
            raise BadInputError("must be a timezone-aware datetime", field="now")
        if self.mode not in ("full", "mark", "dry-run"):
            raise BadInputError("must be full, mark or dry-run", field="mode")
        if self.tags_policy not in ("pin", "ignore"):
            raise BadInputError("must be pin or ignore", field="tags")
        if self.partitions is not None and not 1 <= self.partitions <= 100_000:
            raise BadInputError("must be between 1 and 100000", field="partitions")


@dataclass(frozen=True)
class MarkResult:
    repository: str
    namespace: str
    run_id: str
    manifest: RunManifest
    summary: Summary


@dataclass(frozen=True)
class _Plan:
    """What the executor phase needs; every field picklable (it travels to Spark tasks)."""

    ref: StoreRef
    cutoff_ts: float
    items: list[str]
    metarange_parts: list[str]
    uncommitted_parts: list[str]
    ranges_dir: str  # namespace-relative, for write_text_parts
    deleted_dir: str
    partitions: int
    parquet_dir: str = ""  # namespace-relative ``deleted/``; empty: no Parquet report


@dataclass
class _Counts:
    listed: int = 0
    ranges_read: int = 0
    deleted: int = 0
    digests: dict[str, FileDigest] = field(default_factory=dict)  # namespace-relative path -> digest

    def add_parts(self, relative_dir: str, parts: list[WrittenPart]) -> int:
        """Record the parts' digests; returns their lines."""
        for index, part in enumerate(parts):
            self.digests[f"{relative_dir}/{part_name(index)}"] = FileDigest(
                sha256=part.sha256, size=part.size
            )
        return sum(part.lines for part in parts)


def _n(partitions: int, items: int) -> int:
    return max(1, min(partitions, items))


def executor_phase(executor: Executor, plan: _Plan) -> _Counts:
    """Steps 5-6 on the executors (blocking). Every dataset it persists is released on return."""
    ref, p = plan.ref, plan.partitions
    persisted: list[Dataset[str]] = []
    try:
        metaranges = executor.parallelize(plan.metarange_parts, _n(p, len(plan.metarange_parts)))
        ranges = metaranges.flat_map_partitions(partial(range_ids_partition, ref)).distinct(p).persist()
        persisted.append(ranges)
        counts = _Counts()
        counts.ranges_read = counts.add_parts(
            plan.ranges_dir, ranges.write_text_parts_digested(ref, plan.ranges_dir)
        )
        committed = ranges.flat_map_partitions(partial(addresses_partition, ref))
        listing = executor.parallelize(plan.items, _n(p, len(plan.items)))
        candidates = listing.flat_map_partitions(partial(candidates_partition, ref, plan.cutoff_ts)).persist()
        persisted.append(candidates)
        counts.listed = candidates.count()
        staged = executor.parallelize(plan.uncommitted_parts, _n(p, len(plan.uncommitted_parts)))
        uncommitted = staged.flat_map_partitions(partial(parts_partition, ref))
        deleted = executor.anti_join(executor.anti_join(candidates, committed, p), uncommitted, p).persist()
        persisted.append(deleted)
        counts.deleted = counts.add_parts(
            plan.deleted_dir, deleted.write_text_parts_digested(ref, plan.deleted_dir)
        )
        if plan.parquet_dir:
            deleted.write_parts(ref, plan.parquet_dir, write_parquet_part)
        return counts
    finally:
        for ds in persisted:
            ds.unpersist()


async def _nonempty(ids: AsyncIterator[str]) -> AsyncIterator[str]:
    async for metarange_id in ids:
        if metarange_id:  # "" is the empty tree: no ranges
            yield metarange_id


async def _claim(
    graveler: Graveler,
    repo_id: str,
    options: MarkOptions,
    pins: PinSource | None,
    digests: _Digests,
    *,
    clock: RunClock,
) -> tuple[StorageNamespace, RunLayout, RunManifest]:
    repo = await graveler.repository(repo_id)
    if repo.read_only:
        raise ReadOnlyError(f"repository {repo_id!r} is read-only (a mirror): GC never marks it")
    ns = StorageNamespace(repo.storage_namespace)
    store = await graveler.namespace_store(ns)
    start = clock.now()
    now = options.now or start
    rules = await load_rules(store, ns)
    pinned = await pinned_now(pins, repo_id)
    run_id = options.run_id or clock.new_run_id()
    manifest = RunManifest(
        run_id=run_id,
        repository=repo_id,
        mode=options.mode,
        start_time=start,
        now=now,
        cutoff_time=now - options.min_age,
        min_age_seconds=int(options.min_age.total_seconds()),
        rules=rules,
        tags_policy=options.tags_policy,
        pins=tuple(pinned),
    )
    layout = RunLayout(ns, run_id)
    await write_manifest(store, layout.manifest, manifest)
    digests[layout.manifest] = digest_of(manifest.to_bytes())
    return ns, layout, manifest


async def _driver_steps(
    graveler: Graveler,
    repo_id: str,
    layout: RunLayout,
    manifest: RunManifest,
    *,
    workdir: Path | None,
    digests: _Digests,
) -> tuple[int, int, int]:
    """Steps 2-3: ``(uncommitted, active commits, expired commits)``."""
    ns = layout.ns
    store = await graveler.namespace_store(ns)
    _, uncommitted = await write_uncommitted(graveler, repo_id, ns, layout.uncommitted, digests=digests)
    branches = {b.id: b.commit_id async for b in graveler.list_branches(repo_id)}
    tags = {t.id: t.commit_id async for t in graveler.list_tags(repo_id)}
    active = await compute_active(
        graveler.commit_nodes(repo_id),
        branches=branches,
        tags=tags,
        pins=manifest.pins,
        rules=manifest.rules,
        now=manifest.now,
        tags_policy=manifest.tags_policy,
        workdir=workdir,
    )
    async with active:
        csv = Digester()
        await write_commits_csv(store, layout.commits_csv, active.active(), digester=csv)
        digests[layout.commits_csv] = csv.result()
        await write_parts(store, layout.metaranges, _nonempty(active.metaranges()), digests=digests)
        return uncommitted, active.num_active, active.num_commits - active.num_active


async def run_mark(
    graveler: Graveler,
    repo_id: str,
    executor: Executor,
    *,
    options: MarkOptions | None = None,
    pins: PinSource | None = None,
) -> MarkResult:
    """Mark repository ``repo_id``; returns the run's manifest and (successful) summary."""
    await check_for_gc(graveler, repo_id)  # its namespace still leads where recorded, overlapping none
    options = options or MarkOptions()
    clock = options.clock or RunClock(graveler.clock)
    digests: _Digests = {}  # store key -> digest, of every file the driver writes
    ns, layout, manifest = await _claim(graveler, repo_id, options, pins, digests, clock=clock)
    fault_point("mark:claimed")
    store = await graveler.namespace_store(ns)
    try:
        uncommitted, active, expired = await _driver_steps(
            graveler, repo_id, layout, manifest, workdir=options.workdir, digests=digests
        )
        ref = store_ref(graveler.stores.s3, ns)
        items, first_slice = await asyncio.to_thread(plan_slices, ref, manifest.cutoff_time)
        plan = _Plan(
            ref=ref,
            cutoff_ts=manifest.cutoff_time.timestamp(),
            items=items,
            metarange_parts=await list_parts(store, layout.metaranges),
            uncommitted_parts=await list_parts(store, layout.uncommitted),
            ranges_dir=ns_relative(ns, layout.ranges),
            deleted_dir=ns_relative(ns, layout.deleted_text),
            partitions=options.partitions or executor.default_parallelism,
            parquet_dir=ns_relative(ns, layout.deleted_parquet),
        )
        counts = await asyncio.to_thread(executor_phase, executor, plan)
        await write_success_marker(store, ns, manifest.run_id)
        fault_point("mark:before-summary")
    except LakeFSError as e:
        await _write_failure(graveler, store, layout, manifest, e, digests=digests, end=clock.now())
        raise
    summary = Summary(
        run_id=manifest.run_id,
        success=True,
        first_slice=first_slice,
        start_time=manifest.start_time,
        cutoff_time=manifest.cutoff_time,
        num_deleted_objects=counts.deleted,
        active_commits=active,
        expired_commits=expired,
        ranges_read=counts.ranges_read,
        listed=counts.listed,
        uncommitted=uncommitted,
    )
    await write_summary(store, layout.summary, summary)
    digests[layout.summary] = digest_of(summary.to_bytes())
    fault_point("mark:before-record")
    files = {ns_relative(ns, key): digest for key, digest in digests.items()} | counts.digests
    record = RunRecord(
        run_id=manifest.run_id,
        repository=repo_id,
        state="complete",
        start_time=manifest.start_time,
        end_time=clock.now(),
        rules=manifest.rules,
        files=files,
    )
    await RunRecords(graveler, repo_id).write(record, replacing=None)
    log.info(
        "marked %s run %s: %d candidates, %d to delete, %d active commits, %d ranges",
        repo_id, manifest.run_id, counts.listed, counts.deleted, active, counts.ranges_read,
    )  # fmt: skip
    return MarkResult(repo_id, ns.uri, manifest.run_id, manifest, summary)


async def _write_failure(
    graveler: Graveler,
    store: BlockStore,
    layout: RunLayout,
    manifest: RunManifest,
    error: LakeFSError,
    *,
    digests: _Digests,
    end: datetime,
) -> None:
    """Record ``success=false`` (lakeFS's shape), then a ``failed`` run record in the KV: the
    record is what the API and the scheduler believe (a summary anyone could have written is not),
    and a sweep refuses it. The original error is what the caller sees; a second failure here is
    attached to it as a note."""
    summary = Summary(
        run_id=manifest.run_id,
        success=False,
        first_slice="",
        start_time=manifest.start_time,
        cutoff_time=manifest.cutoff_time,
        num_deleted_objects=0,
    )
    try:
        await write_summary(store, layout.summary, summary)
        digests = {**digests, layout.summary: digest_of(summary.to_bytes())}
    except LakeFSError as second:
        error.add_note(f"the failed run's summary could not be written either: {second}")
    record = RunRecord(
        run_id=manifest.run_id,
        repository=manifest.repository,
        state="failed",
        reason=f"mark: {type(error).__name__}: {error}"[:1000],
        start_time=manifest.start_time,
        end_time=end,
        rules=manifest.rules,
        files={ns_relative(layout.ns, key): digest for key, digest in digests.items()},
    )
    try:
        await RunRecords(graveler, manifest.repository).write(record, replacing=None)
    except LakeFSError as second:
        error.add_note(f"the failed run's KV record could not be written either: {second}")


# -- the spark-submit job ------------------------------------------------------------------------

JOB_NAME = "gc-mark"
_JOB_KEYS = {
    "config", "repository", "now", "min_age_seconds", "tags", "mode", "run_id", "pins", "partitions",
    "clock_offset_seconds",
}  # fmt: skip


def _job_options(args: Mapping[str, Any]) -> tuple[MarkOptions, float]:
    """The mark's options and the run clock's offset (the clock itself needs the opened core)."""
    from lakefs_gc.runs.reports import parse_instant

    unknown = sorted(set(args) - _JOB_KEYS)
    if unknown:
        raise BadInputError(f"unknown keys {unknown}", field="args")
    now = args.get("now")
    min_age = args.get("min_age_seconds", int(DEFAULT_MIN_AGE.total_seconds()))
    if not isinstance(min_age, int) or isinstance(min_age, bool) or min_age < 0:
        raise BadInputError("must be an int >= 0", field="min_age_seconds")
    try:
        when = parse_instant(now) if now is not None else None
    except ValueError as e:
        raise BadInputError(str(e), field="now") from None
    offset = check_offset(args.get("clock_offset_seconds", 0.0))
    options = MarkOptions(
        now=when,
        min_age=timedelta(seconds=min_age),
        tags_policy=args.get("tags", "pin"),
        mode=args.get("mode", "mark"),
        run_id=args.get("run_id"),
        partitions=args.get("partitions"),
    )
    return options, offset


def mark_job(executor: Executor, args: Mapping[str, Any]) -> dict[str, Any]:
    """Job ``gc-mark``: ``{"config": <core config file>, "repository": R, "now"?, "min_age_seconds"?,
    "tags"?, "mode"?, "run_id"?, "pins"?: [commit ids read by the parent], "partitions"?,
    "clock_offset_seconds"?: the parent's run clock offset}``. The config file is a path (its secrets
    never travel as job arguments). Result: the summary fields."""
    from lakefs_core.coreconfig import default_kv_url, load_core_config
    from lakefs_core.wiring import open_core
    from lakefs_gc.pins import StaticPins

    options, offset = _job_options(args)
    config, repo = args.get("config"), args.get("repository")
    if not isinstance(config, str) or not isinstance(repo, str):
        raise BadInputError("config and repository must be strings", field="args")
    pins = StaticPins(args.get("pins") or ())
    settings = load_core_config(Path(config))

    async def go() -> MarkResult:
        async with await open_core(settings, default_kv_url=default_kv_url()) as core:
            clock = RunClock(core.graveler.clock, offset)  # the parent's clock: same base, same offset
            return await run_mark(
                core.graveler, repo, executor, options=replace(options, clock=clock), pins=pins
            )

    result = asyncio.run(go())
    return {"job": JOB_NAME, "executor": executor.name, "repository": repo, **_summary_json(result.summary)}


def _summary_json(summary: Summary) -> dict[str, Any]:
    import json

    loaded: dict[str, Any] = json.loads(summary.to_bytes())
    return loaded
