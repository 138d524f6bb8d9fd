"""The mirroring engine: one :meth:`MirrorEngine.step` is one pass over this region's mirrors.

For every mirror whose destination is this region (not promoted, see :mod:`lakefs_mirror.failover`;
a paused one only has its status and lag metrics follow the source head):

1. create the read-only mirror repository on first sight, seeded with the source's root commit so
   both histories share commit ids;
2. for each source branch matching the mirror's filter (and each tag, if enabled): copy the commit
   records the mirror lacks, verbatim (``CommitData`` bytes, so ids match), after recomputing each
   id and refusing a mismatch. Missing commits are written oldest first (by generation), so a
   commit present in the mirror always has its ancestors present too, even after a crash;
3. validate the *newest* source head (intermediate commits are skipped, which bounds lag when
   commits outpace replication): metarange, ranges and data objects must all be present and the
   tables readable in the mirror's namespace (:mod:`lakefs_mirror.validate`). If the newest head is
   still incomplete, the candidate recorded by an earlier pass (an ancestor of the head) is checked
   too and promoted when complete, so a source that commits faster than replication completes any
   single commit cannot starve the mirror (the candidate sticks until it arrives, as in lakeFS);
4. promote with a compare-and-swap on the mirror branch, only to a commit that descends from the
   current mirror head (or anywhere after an explicit resync). A branch never points at an
   unvalidated commit: promotion is a single CAS after validation, so a crash at any point leaves
   the previous, validated head;
5. in ``active`` mode, copy objects that are still missing after a grace period from the source
   namespace (for stores without replication, and to heal objects S3 reports as FAILED).

A mirror that was caught up and error-free at its last pass, and whose source heads (and record)
have not changed since, is skipped (:mod:`lakefs_mirror.quiet`): an idle pass costs O(changed
mirrors), and every mirror is still visited every ``full_pass_seconds``.

Only the holder of the region's lease in the mirrors database runs passes; a standby daemon's
:meth:`step` does nothing until the lease expires and it takes over (it only drops the metric
series of mirrors that were deleted).

Errors: an error while mirroring one branch or tag (or the mirror as a whole) is recorded in the
ref's status, counted in ``lakefs_mirror_pass_errors_total{mirror,kind}`` and reported in
:attr:`PassReport.errors`; the pass goes on with the other refs and mirrors. The failing ref (or
mirror) then waits out an error cooldown (:class:`ErrorCooldown`: ``error_cooldown_seconds``,
doubling per consecutive failure up to ``error_cooldown_max_seconds``, with jitter; reset by a
success) before it is tried again. ``lakefs_mirror_consecutive_failures{mirror}`` counts the passes
in a row in which a mirror met an error or was waiting out one's cooldown.
"""

from __future__ import annotations

import fnmatch
import logging
import random
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import overload

from lakefs_core.block import copy_object
from lakefs_core.errors import (
    ConflictError,
    CorruptDataError,
    LakeFSError,
    NotFoundError,
    PreconditionFailedError,
)
from lakefs_core.repos.graveler import Commit, Graveler, Repository, StorageNamespace
from lakefs_core.service.lease import Lease
from lakefs_mirror.db import MirrorRecord, MirrorsDB, StatusKind, StatusRow
from lakefs_mirror.failover import FAILBACK_PREFIX
from lakefs_mirror.gc_apply import apply_source_purges, apply_source_sweeps
from lakefs_mirror.metrics import MirrorMetrics
from lakefs_mirror.presence import PresenceCache, namespace_key
from lakefs_mirror.quiet import Fingerprint, QuietMirrors, fingerprints
from lakefs_mirror.validate import ValidationResult, Validator

log = logging.getLogger(__name__)

MAX_LAG_WALK = 10_000


@dataclass(frozen=True)
class EngineSettings:
    lease_ttl_seconds: float = 30.0
    active_copy_grace_seconds: float = 30.0
    active_copy_limit: int = 2000  # objects copied per branch per pass
    active_rounds: int = 4  # validate/copy rounds per branch per pass in active mode
    validation_workers: int = 16
    error_cooldown_seconds: float = 0.0  # first back-off of a failing ref or mirror (0: none)
    error_cooldown_max_seconds: float = 600.0  # cap of the doubling back-off
    full_pass_seconds: float = 60.0  # every mirror is visited at least this often (lakefs_mirror.quiet)


class ErrorCooldown:
    """Back-off per failing key: after the n-th consecutive failure the key waits
    ``min(cap, base * 2**(n-1))`` scaled by a random factor in [0.5, 1] (jitter, so many refs that
    failed together do not retry in lockstep); a success resets it. ``base`` 0 disables it."""

    def __init__(
        self,
        base: float,
        cap: float,
        *,
        clock: Callable[[], float] = time.monotonic,
        rng: Callable[[], float] = random.random,
    ) -> None:
        self.base, self.cap = base, max(cap, base)
        self.clock, self.rng = clock, rng
        self._state: dict[tuple[str, ...], tuple[int, float]] = {}  # key -> (failures, until)

    def failed(self, key: tuple[str, ...]) -> float:
        """Record a failure of ``key``; returns how long it now waits."""
        failures = self._state.get(key, (0, 0.0))[0] + 1
        delay = min(self.cap, self.base * 2.0 ** min(failures - 1, 30)) * (0.5 + 0.5 * self.rng())
        self._state[key] = (failures, self.clock() + delay)
        return delay

    def succeeded(self, key: tuple[str, ...]) -> None:
        self._state.pop(key, None)

    def waiting(self, key: tuple[str, ...]) -> bool:
        state = self._state.get(key)
        return state is not None and self.clock() < state[1]

    def forget(self, mirror_id: str) -> None:
        """Drop every key of a mirror (keys start with the mirror id)."""
        for key in [k for k in self._state if k[0] == mirror_id]:
            del self._state[key]


@dataclass
class BranchReport:
    name: str
    kind: StatusKind
    source_head: str
    mirror_head: str | None
    promoted: bool = False
    complete: bool = False
    error: str | None = None
    candidate: str | None = None  # the commit awaiting promotion (None when up to date)


@dataclass
class PassReport:
    active: bool
    mirrors: int = 0  # mirrors visited
    skipped: int = 0  # settled mirrors whose source did not change (lakefs_mirror.quiet)
    promotions: int = 0
    commits_copied: int = 0
    branches: list[BranchReport] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


@dataclass
class _Ctx:
    mirror: MirrorRecord
    src: Graveler
    dst: Graveler
    src_repo: Repository
    dst_repo: Repository
    resync: bool
    candidates: dict[tuple[str, str], str | None] = field(default_factory=dict)
    unhealthy: bool = False  # a ref failed, or was skipped while waiting out its error cooldown


def utcnow() -> datetime:
    return datetime.now(UTC)


class MirrorEngine:
    def __init__(
        self,
        *,
        region: str,
        gravelers: Mapping[str, Graveler],
        db: MirrorsDB,
        presence: PresenceCache,
        metrics: MirrorMetrics,
        settings: EngineSettings | None = None,
        holder: str | None = None,
        clock: Callable[[], datetime] = utcnow,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        if region not in gravelers:
            raise LakeFSError(f"no settings for this daemon's region {region!r}")
        self.region = region
        self.gravelers = gravelers
        self.db = db
        self.presence = presence
        self.metrics = metrics
        self.settings = settings or EngineSettings()
        self.holder = holder or f"{uuid.uuid4().hex[:12]}"
        self.clock = clock
        self.monotonic = monotonic  # the active-mode grace's clock (and the cooldowns', quiet passes')
        # One contender object for the daemon's life: it remembers whether it held the lease, so
        # acquired / lost / handed over are logged once each.
        self.lease: Lease = db.region_lease(region, self.holder, self.settings.lease_ttl_seconds)
        # Active mode, per (mirror, ref): the candidate metarange being healed and since when it has
        # been incomplete, and since when each of its keys has been seen missing (only keys still
        # missing are kept, so keys that replication delivered do not accumulate).
        # Active-mode heal bookkeeping per (mirror, branch or tag, candidate metarange): when the
        # candidate was first found incomplete, and when each missing key was first seen missing.
        self._missing_since: dict[tuple[str, str, str], tuple[float, dict[str, float]]] = {}
        self._heal_slots: dict[tuple[str, str], list[str]] = {}
        self._seen_hits = 0
        self._seen_misses = 0
        self.cooldown = ErrorCooldown(
            self.settings.error_cooldown_seconds, self.settings.error_cooldown_max_seconds, clock=monotonic
        )
        self._failures: dict[str, int] = {}  # mirror id -> consecutive unhealthy passes
        self.quiet = QuietMirrors(self.settings.full_pass_seconds, monotonic)
        self._known: dict[str, MirrorRecord] = {}  # mirror id -> as last seen (lifecycle logs)

    # -- the pass -------------------------------------------------------------------------------

    async def step(self) -> PassReport:
        now = self.clock()
        if not await self.lease.try_acquire(now):
            self.metrics.lease_held.set(0)
            self._drop_deleted(await self.db.mirrors_for_region(self.region))
            return PassReport(active=False)
        self.metrics.lease_held.set(1)
        report = PassReport(active=True)
        mirrors = await self.db.mirrors_for_region(self.region)
        self._drop_deleted(mirrors)
        full = self.quiet.start_pass()
        fps = await self._fingerprints([m for m in mirrors if not m.paused])
        for mirror in mirrors:
            self.metrics.known_mirror(mirror.name, mirror.id, mirror.source_repo, mirror.source_region)
            self._note_lifecycle(mirror)
            if mirror.paused:
                self.quiet.settle(mirror.id, None)
                await self._observe_paused(mirror, report)
                continue
            fp = fps.get(mirror.id)
            if not full and fp is not None and self.quiet.unchanged(mirror.id, fp):
                report.skipped += 1
                self._count_health(mirror, True)
                continue
            report.mirrors += 1
            first = len(report.branches)
            healthy = await self._mirror_pass(mirror, report)
            self._count_health(mirror, healthy)
            caught_up = all(
                b.error is None and b.mirror_head == b.source_head for b in report.branches[first:]
            )
            self.quiet.settle(mirror.id, fp if healthy and caught_up else None)
        self.quiet.finish_pass(full)
        self.metrics.last_pass.set(time.time())
        log.debug(
            "pass: %d mirrors, %d promotions, %d commits copied, %d errors",
            report.mirrors,
            report.promotions,
            report.commits_copied,
            len(report.errors),
        )
        stats = self.presence.stats
        self.metrics.cache_hits.inc(max(0, stats.hits - self._seen_hits))
        self.metrics.cache_misses.inc(max(0, stats.misses - self._seen_misses))
        self._seen_hits, self._seen_misses = stats.hits, stats.misses
        await self.presence.flush()
        return report

    async def _fingerprints(self, mirrors: list[MirrorRecord]) -> dict[str, Fingerprint]:
        """The mirrors' source fingerprints (:mod:`lakefs_mirror.quiet`), batched per source region;
        a mirror left out (its source cannot be read) is visited, and the visit reports the error."""
        by_region: dict[str, list[MirrorRecord]] = {}
        for mirror in mirrors:
            by_region.setdefault(mirror.source_region, []).append(mirror)
        out: dict[str, Fingerprint] = {}
        for region, group in by_region.items():
            src = self.gravelers.get(region)
            if src is None:
                continue
            try:
                out.update(await fingerprints(src, group))
            except LakeFSError:
                continue  # every mirror of the region is visited and reports the error
        return out

    async def _mirror_pass(self, mirror: MirrorRecord, report: PassReport) -> bool:
        """Mirror one mirror (unless it waits out an error cooldown); returns whether it was healthy."""
        key = (mirror.id,)
        if self.cooldown.waiting(key):
            return False
        try:
            healthy = await self._sync_mirror(mirror, report)
        except LakeFSError as e:
            report.errors.append(f"mirror {mirror.id}: {e}")
            self.metrics.failed(mirror.name, e)
            self.cooldown.failed(key)
            return False
        self.cooldown.succeeded(key)
        return healthy

    async def _observe_paused(self, mirror: MirrorRecord, report: PassReport) -> None:
        """A paused mirror promotes nothing, but its status and lag metrics follow the source: the
        real source head, the growing lag and commits_pending (so the lag alert fires)."""
        try:
            ctx = await self._context(mirror, create=False)
            if ctx is None:
                return
            previous = {(s.kind, s.branch): s for s in await self.db.list_status(mirror.id)}
            async for branch in ctx.src.list_branches(ctx.src_repo.id):
                if not self._wanted(mirror, branch.id):
                    continue
                out = BranchReport(
                    branch.id, "branch", branch.commit_id, await self._mirror_head(ctx, "branch", branch.id)
                )
                before = previous.get(("branch", branch.id))
                out.candidate = before.candidate if before is not None else None
                await self._record_status(ctx, out, None, keep=before)
        except LakeFSError as e:
            report.errors.append(f"mirror {mirror.id} (paused): {e}")

    def _count_health(self, mirror: MirrorRecord, healthy: bool) -> None:
        before = self._failures.get(mirror.id)
        failures = 0 if healthy else (before or 0) + 1
        if failures != before:  # an idle pass of a healthy fleet sets nothing (1,000 label lookups)
            self._failures[mirror.id] = failures
            self.metrics.consecutive_failures.labels(self.region, mirror.name).set(failures)

    def _note_lifecycle(self, mirror: MirrorRecord) -> None:
        """INFO when this daemon first works on a mirror, and when it sees it paused or resumed."""
        before = self._known.get(mirror.id)
        if before is mirror:  # the same record as last pass (MirrorsDB reuses unchanged rows' records)
            return
        extra = {"mirror": mirror.name, "repository": mirror.source_repo}
        if before is None:
            state = " (paused)" if mirror.paused else ""
            log.info(
                "mirror %s of %s/%s active%s",
                mirror.name,
                mirror.source_region,
                mirror.source_repo,
                state,
                extra=extra,
            )
        elif before.paused != mirror.paused:
            log.info("mirror %s %s", mirror.name, "paused" if mirror.paused else "resumed", extra=extra)
        self._known[mirror.id] = mirror

    def _drop_deleted(self, mirrors: list[MirrorRecord]) -> None:
        """Forget the series and per-mirror state of mirrors no longer in the database."""
        ids = {m.id for m in mirrors}
        self.quiet.forget_except(ids)
        for mirror_id in set(self._known) - ids:
            gone = self._known.pop(mirror_id)
            log.info(
                "mirror %s deleted", gone.name, extra={"mirror": gone.name, "repository": gone.source_repo}
            )
        names = {m.name for m in mirrors}
        for name in self.metrics.known_mirrors() - names:
            self.metrics.forget_mirror(name)
        for mirror_id in set(self._failures) - ids:
            del self._failures[mirror_id]
            self.cooldown.forget(mirror_id)
        for slot in [s for s in self._missing_since if s[0] not in ids]:
            del self._missing_since[slot]
        for heal in [h for h in self._heal_slots if h[0] not in ids]:
            del self._heal_slots[heal]

    async def _lease_still_ours(self) -> bool:
        return await self.lease.try_acquire(self.clock())

    @overload
    async def _context(self, mirror: MirrorRecord) -> _Ctx: ...
    @overload
    async def _context(self, mirror: MirrorRecord, *, create: bool) -> _Ctx | None: ...
    async def _context(self, mirror: MirrorRecord, *, create: bool = True) -> _Ctx | None:
        """The mirror's two repositories; without ``create``, None while the mirror repository
        does not exist yet."""
        src = self.gravelers.get(mirror.source_region)
        if src is None:
            raise LakeFSError(f"source region {mirror.source_region!r} is not configured")
        dst = self.gravelers[self.region]
        src_repo = await src.repository(mirror.source_repo)
        try:
            dst_repo = await dst.repository(mirror.name)
        except NotFoundError:
            if not create:
                return None
            dst_repo = await self._create_mirror_repo(src, src_repo, dst, mirror)
        else:
            # Never adopt a repository that is not a mirror: its branches would be overwritten.
            if not dst_repo.read_only:
                raise ConflictError(
                    f"repository {mirror.name!r} already exists in region {self.region!r} and is not a "
                    "read-only mirror; refusing to mirror into it"
                )
            if (
                StorageNamespace.parse(dst_repo.storage_namespace).uri
                != StorageNamespace.parse(mirror.storage_namespace).uri
            ):
                raise ConflictError(
                    f"repository {mirror.name!r} in region {self.region!r} lives in another storage "
                    "namespace than the mirror's"
                )
        return _Ctx(mirror, src, dst, src_repo, dst_repo, mirror.resync_requested_at is not None)

    async def _create_mirror_repo(
        self, src: Graveler, src_repo: Repository, dst: Graveler, mirror: MirrorRecord
    ) -> Repository:
        root: Commit | None = None
        async for commit in src.log(src_repo.id, src_repo.default_branch):
            root = commit  # the first-parent walk ends at the root commit
        if root is None:
            raise NotFoundError(f"repository {src_repo.id!r} has no root commit")
        self._check_id(root)
        repo = await dst.create_repository(
            mirror.name,
            mirror.storage_namespace,
            src_repo.default_branch,
            read_only=True,
            claim_namespace=False,
            initial_commit=root,
        )
        log.info(
            "mirror repository %s created in %s (%s)",
            mirror.name,
            self.region,
            mirror.storage_namespace,
            extra={"mirror": mirror.name, "repository": src_repo.id},
        )
        return repo

    async def _sync_mirror(self, mirror: MirrorRecord, report: PassReport) -> bool:
        """One pass over a mirror's refs; returns False if a ref failed or is cooling down."""
        ctx = await self._context(mirror)
        ctx.candidates = {(s.kind, s.branch): s.candidate for s in await self.db.list_status(mirror.id)}
        source_branches = [
            b async for b in ctx.src.list_branches(ctx.src_repo.id) if self._wanted(mirror, b.id)
        ]
        wanted = {b.id for b in source_branches}
        for branch in source_branches:
            await self._sync_ref(ctx, "branch", branch.id, branch.commit_id, report)
        async for mbranch in ctx.dst.list_branches(ctx.dst_repo.id):
            if (
                mbranch.id not in wanted
                and mbranch.id != ctx.dst_repo.default_branch
                and not mbranch.id.startswith(FAILBACK_PREFIX)  # kept by a failback: never deleted
                and self._wanted(mirror, mbranch.id)
            ):
                await ctx.dst.delete_branch(ctx.dst_repo.id, mbranch.id, force=True)
                await self.db.delete_status(mirror.id, "branch", mbranch.id)
                self.metrics.forget(mirror.name, mbranch.id)
        if mirror.mirror_tags:
            await self._sync_tags(ctx, report)
        # After the refs moved: a completed source GC sweep is applied to the mirror's namespace,
        # minus whatever the (now current) mirror heads and candidates reference.
        await apply_source_sweeps(mirror, src=ctx.src, dst=ctx.dst, db=self.db, presence=self.presence)
        await apply_source_purges(ctx.src, ctx.src_repo.id, ctx.dst, ctx.dst_repo, self.presence)
        if mirror.resync_requested_at is not None:
            await self.db.clear_resync(mirror.id, mirror.resync_requested_at)
        return not ctx.unhealthy

    @staticmethod
    def _wanted(mirror: MirrorRecord, name: str) -> bool:
        return any(fnmatch.fnmatchcase(name, pattern) for pattern in mirror.branch_filter)

    async def _sync_tags(self, ctx: _Ctx, report: PassReport) -> None:
        source_tags = {t.id: t async for t in ctx.src.list_tags(ctx.src_repo.id)}
        for tag in source_tags.values():
            await self._sync_ref(ctx, "tag", tag.id, tag.commit_id, report)
        async for mtag in ctx.dst.list_tags(ctx.dst_repo.id):
            if mtag.id not in source_tags:
                await ctx.dst.delete_tag(ctx.dst_repo.id, mtag.id, force=True)
                await self.db.delete_status(ctx.mirror.id, "tag", mtag.id)

    # -- one branch or tag ------------------------------------------------------------------------

    async def _sync_ref(
        self, ctx: _Ctx, kind: StatusKind, name: str, head_id: str, report: PassReport
    ) -> None:
        """Mirror one ref and append its :class:`BranchReport` (nothing while it cools down)."""
        key = (ctx.mirror.id, kind, name)
        if self.cooldown.waiting(key):
            ctx.unhealthy = True
            return
        mirror_head = await self._mirror_head(ctx, kind, name)
        out = BranchReport(name, kind, head_id, mirror_head)
        result: ValidationResult | None = None
        try:
            head = await ctx.src.get_commit_by_id(ctx.src_repo.id, head_id)
            report.commits_copied += await self._copy_commits(ctx, head)
            if mirror_head == head.id:
                out.complete = True
            else:
                result = await self._validate(ctx, head, label=name)
                out.complete, out.candidate = result.complete, head.id
                if result.complete:
                    if await self._promote(ctx, kind, name, head, mirror_head):
                        out.promoted, out.mirror_head = True, head.id
                        report.promotions += 1
                else:
                    older = await self._try_previous_candidate(ctx, kind, name, head, out=out, report=report)
                    result = older or result
        except LakeFSError as e:
            out.error = str(e)
            report.errors.append(f"{kind} {name}: {e}")
            self.metrics.failed(ctx.mirror.name, e)
            self.cooldown.failed(key)
            ctx.unhealthy = True
        else:
            self.cooldown.succeeded(key)
        await self._record_status(ctx, out, result)
        report.branches.append(out)

    async def _try_previous_candidate(
        self, ctx: _Ctx, kind: StatusKind, name: str, head: Commit, *, out: BranchReport, report: PassReport
    ) -> ValidationResult | None:
        """The newest head is incomplete: promote the earlier candidate if it has fully arrived.

        Returns the earlier candidate's validation when it stays the candidate (still incomplete),
        so the status reports what that commit still misses.
        """
        previous = ctx.candidates.get((kind, name))
        if previous is None or previous in (head.id, out.mirror_head):
            return None
        if not await ctx.dst.has_commit(ctx.dst_repo.id, previous):
            return None
        if not await ctx.dst.is_descendant(ctx.dst_repo.id, head.id, previous):
            return None  # the source moved elsewhere: the old candidate is no longer on its way
        older = await ctx.dst.get_commit_by_id(ctx.dst_repo.id, previous)
        result = await self._validate(ctx, older, label=name)
        if not result.complete:
            out.candidate = previous  # sticky until it arrives
            return result
        if await self._promote(ctx, kind, name, older, out.mirror_head):
            out.promoted, out.mirror_head = True, older.id
            report.promotions += 1
        return None

    async def _mirror_head(self, ctx: _Ctx, kind: str, name: str) -> str | None:
        try:
            if kind == "branch":
                return (await ctx.dst.branch(ctx.dst_repo.id, name)).commit_id
            return (await ctx.dst.tag(ctx.dst_repo.id, name)).commit_id
        except NotFoundError:
            return None

    @staticmethod
    def _check_id(commit: Commit) -> None:
        if commit.computed_id() != commit.id:
            raise CorruptDataError(f"source commit {commit.id} does not hash to its id; refusing to copy it")

    async def _copy_commits(self, ctx: _Ctx, head: Commit) -> int:
        """Copy every commit reachable from ``head`` that the mirror lacks, oldest first."""
        missing: dict[str, Commit] = {}
        stack = [head]
        while stack:
            commit = stack.pop()
            if commit.id in missing or await ctx.dst.has_commit(ctx.dst_repo.id, commit.id):
                continue
            self._check_id(commit)
            missing[commit.id] = commit
            for parent in commit.parents:
                if parent not in missing:
                    stack.append(await ctx.src.get_commit_by_id(ctx.src_repo.id, parent))
        for commit in sorted(missing.values(), key=lambda c: c.generation):
            await ctx.dst.put_commit(ctx.dst_repo.id, commit, force=True)
        if missing:
            self.metrics.commits_copied.labels(self.region, ctx.mirror.name).inc(len(missing))
        return len(missing)

    async def _validate(self, ctx: _Ctx, head: Commit, *, label: str) -> ValidationResult:
        ns = StorageNamespace.parse(ctx.mirror.storage_namespace)
        validator = Validator(
            await ctx.dst.namespace_tables(ns),
            await ctx.dst.namespace_store(ns),
            ns,
            self.presence,
            concurrency=self.settings.validation_workers,
            incarnation=ctx.dst_repo.instance_uid,
            purged=lambda rels: ctx.src.purged_addresses(ctx.src_repo.id, rels),
        )
        rounds = self.settings.active_rounds if ctx.mirror.mode == "active" else 1
        for n in range(rounds):
            started = time.perf_counter()
            result = await validator.validate(head.metarange_id)
            self.metrics.validation_duration.labels(self.region, ctx.mirror.name).observe(
                time.perf_counter() - started
            )
            for op, count in result.requests.items():
                self.metrics.store_requests.labels(self.region, op).inc(count)
            if result.complete or ctx.mirror.mode != "active" or n == rounds - 1:
                return result
            if not await self._heal(ctx, result, label):
                return result
        return result

    async def _heal(self, ctx: _Ctx, result: ValidationResult, label: str) -> int:
        """Active mode: copy what has been missing longer than the grace period; returns copies made."""
        now = self.monotonic()
        grace = self.settings.active_copy_grace_seconds
        src_ns = StorageNamespace.parse(ctx.src_repo.storage_namespace)
        dst_ns = StorageNamespace.parse(ctx.mirror.storage_namespace)
        src_store = await ctx.src.namespace_store(src_ns)
        dst_store = await ctx.dst.namespace_store(dst_ns)
        keys = [(src_ns.table_key(t), dst_ns.table_key(t)) for t in result.missing_tables()]
        keys += [(src_ns.key(a), dst_ns.key(a)) for a in result.missing_objects]
        # A key's grace runs from when it was first seen missing or, if earlier, from when this
        # candidate was first found incomplete: objects below a missing range (or metarange) cannot
        # be seen before it arrives, yet replication has had the whole time to deliver them.
        slot = (ctx.mirror.id, label, result.metarange_id)
        candidate_since, seen = self._missing_since.get(slot, (now, {}))
        seen = {dst_key: seen.get(dst_key, now) for _, dst_key in keys}
        self._missing_since[slot] = (candidate_since, seen)
        self._keep_recent_slots(ctx.mirror.id, label, result.metarange_id)
        copied = 0
        for src_key, dst_key in keys[: self.settings.active_copy_limit]:
            if now - min(seen[dst_key], candidate_since) < grace:
                continue
            try:
                info = await copy_object(src_store, src_key, dst_store, dst_key, if_none_match=True)
            except PreconditionFailedError:
                pass  # arrived meanwhile
            except NotFoundError:
                log.warning("mirror %s: %s is missing at the source too", ctx.mirror.id, src_key)
                continue
            else:
                self.metrics.copy_bytes.labels(self.region, ctx.mirror.name).inc(info.size)
            self.presence.forget_negative(namespace_key(dst_ns.uri, ctx.dst_repo.instance_uid), dst_key)
            seen.pop(dst_key, None)
            copied += 1
        return copied

    def _keep_recent_slots(self, mirror_id: str, label: str, metarange_id: str, keep: int = 2) -> None:
        """Bound the heal bookkeeping: the newest head and the sticky candidate, per branch."""
        recent = self._heal_slots.setdefault((mirror_id, label), [])
        if metarange_id in recent:
            recent.remove(metarange_id)
        recent.append(metarange_id)
        while len(recent) > keep:
            self._missing_since.pop((mirror_id, label, recent.pop(0)), None)

    async def _promote(self, ctx: _Ctx, kind: str, name: str, head: Commit, mirror_head: str | None) -> bool:
        repo_id = ctx.dst_repo.id
        forward = mirror_head is None or await ctx.dst.is_descendant(repo_id, head.id, mirror_head)
        if not forward and not ctx.resync:
            assert mirror_head is not None
            raise LakeFSError(
                f"source {kind} {name!r} moved to {head.id[:12]}, which does not descend from the mirror "
                f"head {mirror_head[:12]}; request a resync to follow it"
            )
        if not await self._lease_still_ours():
            raise LakeFSError("lost the region lease before promotion; another daemon is active")
        try:
            # force: the mirror repository is read-only to everyone but its mirror.
            if kind == "tag":
                await ctx.dst.set_tag_if(repo_id, name, mirror_head, head.id, force=True)
            else:
                await ctx.dst.set_branch_head_if(repo_id, name, mirror_head, head.id, force=True)
        except PreconditionFailedError:
            return False  # moved under us: the next pass re-evaluates
        log.info(
            "promoted %s %s from %s to %s",
            kind,
            name,
            mirror_head[:12] if mirror_head else "(none)",
            head.id[:12],
            extra=self._extra(ctx, name),
        )
        self.metrics.promotions.labels(self.region, ctx.mirror.name, name).inc()
        return True

    @staticmethod
    def _extra(ctx: _Ctx, branch: str | None = None) -> dict[str, str]:
        """The log context fields (lakefs_core.service.logfmt.CONTEXT_FIELDS) of a mirror's records."""
        extra = {"mirror": ctx.mirror.name, "repository": ctx.src_repo.id}
        if branch is not None:
            extra["branch"] = branch
        return extra

    # -- status and metrics -----------------------------------------------------------------------------

    async def _lag(self, ctx: _Ctx, head_id: str, mirror_head: str | None) -> tuple[float, int]:
        """Freshness lag (age of the oldest first-parent source commit not on the mirror) and count."""
        if head_id == mirror_head:
            return 0.0, 0
        oldest: Commit | None = None
        pending = 0
        async for commit in ctx.src.log(ctx.src_repo.id, head_id, amount=MAX_LAG_WALK):
            if commit.id == mirror_head:
                break
            oldest, pending = commit, pending + 1
        if oldest is None:
            return 0.0, 0
        return max(0.0, (self.clock() - oldest.creation_date).total_seconds()), pending

    async def _record_status(
        self, ctx: _Ctx, out: BranchReport, result: ValidationResult | None, *, keep: StatusRow | None = None
    ) -> None:
        """Record a ref's status and metrics; ``keep``: the row whose missing counts stay (a paused
        mirror validates nothing, so what it last knew is still the best answer)."""
        try:
            lag, pending = await self._lag(ctx, out.source_head, out.mirror_head)
        except LakeFSError:
            lag, pending = -1.0, -1
        missing_objects = result.missing_object_count if result and not result.complete else 0
        missing_ranges = result.missing_table_count if result and not result.complete else 0
        if keep is not None and out.mirror_head != out.source_head:
            missing_objects, missing_ranges = keep.missing_objects, keep.missing_ranges
        now = self.clock()
        await self.db.upsert_status(
            StatusRow(
                mirror_id=ctx.mirror.id,
                kind=out.kind,
                branch=out.name,
                source_head=out.source_head,
                mirror_head=out.mirror_head,
                candidate=None if out.mirror_head == out.source_head else (out.candidate or out.source_head),
                missing_objects=missing_objects,
                missing_ranges=missing_ranges,
                external_objects=result.external_object_count if result else 0,
                lag_seconds=lag,
                last_promotion_at=now if out.promoted else None,
                last_checked_at=now,
                last_error=out.error,
            )
        )
        self.metrics.promotions.labels(self.region, ctx.mirror.name, out.name)  # exists at 0
        if out.kind == "branch":
            labels = (self.region, ctx.mirror.name, out.name)
            self.metrics.freshness_lag.labels(*labels).set(max(lag, 0.0))
            self.metrics.commits_pending.labels(*labels).set(max(pending, 0))
            self.metrics.missing_objects.labels(*labels).set(missing_objects)
            self.metrics.missing_ranges.labels(*labels).set(missing_ranges)
