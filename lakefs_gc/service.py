"""The GC daemon: per-repository schedules, leases, runs in the background, reconciliation, the API.

Contract:

- :meth:`GCService.step` is one scheduling pass: it lists the repositories of the core, skips
  read-only (mirror) repositories and those the configuration does not select, starts the runs
  the API queued, then the scheduled runs that are due, and the hard-delete reconciliation of each
  repository whose interval has passed. Runs and reconciliations are background tasks (a GC run
  may take hours; a pass never does), at most ``max_concurrent_runs`` GC runs at once and one
  task per repository. :meth:`GCService.drain` waits for them (``--once``).
- **Leases**: a run or a reconciliation of a repository holds the KV lease ``gc/<repo>`` (the
  CLI's ``lakefs-gc mark``/``sweep`` take the same lease), renewed in the background; a lease lost
  mid-run cancels the run (a cancelled run deletes nothing more; a sweep resumes from its
  checkpoint) and counts as a FAILED run (``--once`` exits 1), whereas a scheduled run that finds
  the lease held by another process is skipped (that process runs it). Several daemons on one core
  therefore never work on one repository at once.
- **Schedules**: a repository is due ``interval_seconds`` (with +/- ``jitter_fraction`` jitter,
  drawn per run) after its newest finished run, as the run files in its namespace tell (so a
  restarted daemon, or another daemon, does not repeat a run); a repository never collected is due
  at once plus a jitter of up to ``jitter_fraction`` of the interval.
- **Crash recovery** (run state lives in the namespace, spec §3b): before a scheduled run, the
  newest run of the repository is looked at under the lease: a full run whose mark succeeded but
  whose sweep never finished is resumed (the sweep continues from its checkpoint after
  re-verification); a run without ``summary.json`` (or with a successful one but no KV run
  record: killed between the two) was killed during its mark, deleted nothing, and is abandoned
  (counted once as ``runs_total{phase="mark",outcome="abandoned"}``): it delays no new run.
- **Run records**: after each run, under its lease, the repository's run records in the KV older
  than the ``run_records_kept`` newest runs are retired (:mod:`lakefs_gc.runs.retention`).
- **Unfinished purges**: every ``hard_delete.interval_seconds`` each repository's audited purges
  still ``deleting`` ``hard_delete.grace_seconds`` after their record was written (the purging
  process died) are completed, a bounded number per check (:meth:`GCService._maybe_finish_purges`).
- **One clock** (:class:`~lakefs_gc.clock.RunClock`): the core's clock plus ``clock_offset_seconds``
  (demos show retention in seconds with it) is the time of everything a run records (retention
  ``now``, run ids, ``run.json``, ``summary.json``, the run record, ``sweep.json``), of the schedule
  (compared with those times), of the API's run states and of ``last_success``. Leases are judged
  on the real clock (other processes do not share the offset); the intervals between this
  daemon's own checks are monotonic.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import socket
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from aiohttp import web

from lakefs_core.errors import ConflictError, LakeFSError, NamespaceConflictError, StartupError, TamperedError
from lakefs_core.fileperm import make_private_dir
from lakefs_core.repos.graveler import Graveler, Repository, StorageNamespace
from lakefs_core.repos.namespace_claims import NamespaceIndex
from lakefs_core.service.daemon import DaemonLoop
from lakefs_core.service.http import serve_api
from lakefs_core.service.lease import kv_lease
from lakefs_core.wiring import Core, open_core
from lakefs_gc.clock import RunClock
from lakefs_gc.config import GCConfig, config_startup_problems
from lakefs_gc.metrics import GCMetrics
from lakefs_gc.pins import PinSource
from lakefs_gc.runner import CoreRunExecutor
from lakefs_gc.runs.record import RunRecords
from lakefs_gc.runs.retention import retire_old_runs
from lakefs_gc.runs.runs import (
    RunExecutor,
    RunProgress,
    RunRegistry,
    RunRequest,
    StoredRun,
    list_run_ids,
    read_stored_run,
    run_id_time,
)

log = logging.getLogger(__name__)

DELETED_REPOS = "_deleted-repositories"  # its lease name; never a repository id (they have no '_')
PURGES_PER_PASS = 8  # unfinished audited purges completed per repository per check
NAMESPACE_INDEX_SECONDS = 60.0  # how long reconciliations share one NamespaceIndex


@dataclass
class PassReport:
    repositories: int = 0
    started_runs: list[str] = field(default_factory=list)
    started_reconciles: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


@dataclass
class RepoState:
    """What this daemon remembers of one repository between passes."""

    next_run: float | None = None  # Unix seconds on the run clock; None: read the namespace to decide
    next_reconcile: float = 0.0  # monotonic seconds (as next_purge_check)
    last_reconcile: Any = None  # lakefs_gc.reconcile.ReconcileReport
    last_reconcile_at: datetime | None = None
    last_reconcile_error: str | None = None
    abandoned_seen: set[str] = field(default_factory=set)
    next_purge_check: float = 0.0


class GCService:
    """One GC daemon: opened from a :class:`GCConfig` by :meth:`open`, closed by :meth:`close`."""

    def __init__(
        self,
        config: GCConfig,
        core: Core,
        *,
        metrics: GCMetrics | None = None,
        executor: RunExecutor | None = None,
        pins: PinSource | None = None,
        close_pins: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.config = config
        self.core = core
        self.graveler: Graveler = core.graveler
        self.metrics = metrics or GCMetrics(config.region)
        self.pins = pins
        self._close_pins = close_pins
        self.clock = RunClock(self.graveler.clock, config.clock_offset_seconds)
        self.executor: RunExecutor = executor or _executor_for(config, pins, self.clock)
        self.registry = RunRegistry()
        # Unique per process: two daemons on one host must never share a lease holder.
        self.holder = f"lakefs-gc@{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:12]}"
        self.states: dict[str, RepoState] = {}
        self._leases: set[str] = set()  # leases whose acquisition was logged: later passes log at DEBUG
        self._runs: dict[str, asyncio.Task[None]] = {}  # repo -> its GC run task
        self._reconciles: dict[str, asyncio.Task[None]] = {}
        self._next_deleted_pass = 0.0
        self._namespaces: tuple[float, NamespaceIndex | None] = (0.0, None)
        self._namespace_lock = asyncio.Lock()
        self.last_deleted_reports: list[Any] = []  # lakefs_gc.reconcile.ReconcileReport
        self.runner: web.AppRunner | None = None
        self.bound_port: int | None = None
        self.loop: DaemonLoop | None = None
        self.failed_runs = 0  # runs that failed since start (``--once`` exits 1 when any did)
        self._closed = False

    # -- opening and closing -------------------------------------------------------------------

    @classmethod
    async def open(cls, config: GCConfig, *, serve_api: bool = True, **kwargs: Any) -> GCService:
        _preflight(config)
        core = await open_core(config.core, kv_key="core.kv_url", s3_key="core.s3")
        pins: PinSource | None = kwargs.pop("pins", None)
        close_pins = None
        try:
            if pins is None and config.mirrors_db_url is not None:
                from lakefs_gc.pins import open_mirror_pins

                opened = await open_mirror_pins(
                    config.mirrors_db_url.get_secret_value(), source_region=config.region
                )
                pins, close_pins = opened, opened.aclose
            service = cls(config, core, pins=pins, close_pins=close_pins, **kwargs)
        except BaseException:
            await core.aclose()
            raise
        if serve_api:
            try:
                await service._serve()
            except BaseException:
                await service.close()
                raise
        return service

    async def _serve(self) -> None:
        from lakefs_gc.api import create_app

        self.runner, self.bound_port = await serve_api(
            create_app(self), self.config.listen_host, self.config.listen_port
        )
        log.info("API listening on %s:%s", self.config.listen_host, self.bound_port)

    async def close(self) -> None:
        """Stop serving, cancel running work (a cancelled run deletes nothing more), close stores."""
        if self._closed:
            return
        self._closed = True
        if self.runner is not None:
            await self.runner.cleanup()
        tasks = [*self._runs.values(), *self._reconciles.values()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        try:
            if self._close_pins is not None:
                await self._close_pins()
        finally:
            await self.core.aclose()

    def record_errors(self, consecutive: int) -> None:
        """The daemon loop's count of passes failed in a row (``consecutive_errors``)."""
        self.metrics.consecutive_errors.set(consecutive)

    def is_live(self) -> bool:
        return self.loop is None or self.loop.is_live()

    # -- time --------------------------------------------------------------------------------------

    def now(self) -> datetime:
        """The run clock's now: the core's clock plus ``clock_offset_seconds``."""
        return self.clock.now()

    # -- one pass ------------------------------------------------------------------------------

    async def step(self) -> PassReport:
        report = PassReport()
        repos = await self._selected_repositories()
        report.repositories = len(repos)
        for gone in self.metrics.known_repos() - {r.id for r in repos}:
            self.metrics.forget(gone)
            self.states.pop(gone, None)
        self._start_queued(report)
        for repo in repos:
            self.metrics.known(repo.id)
            try:
                await self._maybe_schedule(repo, report)
            except LakeFSError as e:  # one repository's trouble must not stop the others
                report.errors.append(f"{repo.id}: {type(e).__name__}: {e}")
            self._maybe_reconcile(repo, report)
            self._maybe_finish_purges(repo)
        self._maybe_purge_deleted(report)
        for error in report.errors:
            log.warning("%s", error)
        return report

    async def step_and_wait(self) -> PassReport:
        """One pass, then wait for everything it started (``--once``); fails when a run failed."""
        report = await self.step()
        await self.drain()
        if self.failed_runs or report.errors:
            raise ConflictError(f"{self.failed_runs} run(s) failed; {len(report.errors)} pass error(s)")
        return report

    async def drain(self) -> None:
        """Wait until no run or reconciliation is running and nothing queued can start."""
        while True:
            self._start_queued(PassReport())
            tasks = [*self._runs.values(), *self._reconciles.values()]
            if not tasks:
                return
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _selected_repositories(self) -> list[Repository]:
        selected = []
        async for repo in self.graveler.list_repositories():
            if repo.read_only or repo.in_deletion:
                continue  # GC never marks a read-only (mirror) repository
            if self.config.repositories.selects(repo.id):
                selected.append(repo)
        return selected

    def state(self, repo_id: str) -> RepoState:
        return self.states.setdefault(repo_id, RepoState())

    # -- GC runs -------------------------------------------------------------------------------

    def request_run(self, request: RunRequest) -> RunProgress:
        """Queue an API request (started at once when there is capacity)."""
        progress = self.registry.request(request, self.now())
        self._start_queued(PassReport())
        return progress

    def _capacity(self) -> bool:
        return len(self._runs) < self.config.max_concurrent_runs

    def _start_queued(self, report: PassReport) -> None:
        skipped: list[RunProgress] = []
        while self._capacity() and not self._closed:
            progress = self.registry.next_queued()
            if progress is None:
                break
            if progress.request.repository in self._runs:
                skipped.append(progress)  # one run per repository at a time: wait for it
                continue
            self._launch(progress, scheduled=False)
            report.started_runs.append(progress.request.run_id)
        for progress in reversed(skipped):  # keep their order at the head of the queue
            self.registry.requeue(progress)

    async def _maybe_schedule(self, repo: Repository, report: PassReport) -> None:
        schedule = self.config.schedule_of(repo.id)
        if not schedule.enabled or repo.id in self._runs or not self._capacity():
            return
        state = self.state(repo.id)
        if state.next_run is not None and state.next_run > self.clock.timestamp():
            return
        # Due by this daemon's memory (or unknown): read the namespace, another daemon may have run
        # it, and a killed run's sweep must be finished first, whatever the interval says.
        last, resumable = await self._newest_runs(repo)
        jitter = schedule.interval_seconds * schedule.jitter_fraction
        if last is None:
            state.next_run = self.clock.timestamp() + (
                random.uniform(0, jitter) if state.next_run is None else 0.0
            )
        else:
            state.next_run = last + schedule.interval_seconds + random.uniform(-jitter, jitter)
        if resumable is not None:
            request = RunRequest(repository=repo.id, mode="sweep", run_id=resumable)
        elif state.next_run <= self.clock.timestamp():
            request = RunRequest(
                repository=repo.id,
                mode=schedule.mode,
                run_id=self.clock.new_run_id(),
                min_age=timedelta(seconds=schedule.min_age_seconds),
                tags=schedule.tags,
            )
        else:
            return
        progress = self.registry.track(request, self.now())
        self._launch(progress, scheduled=True)
        report.started_runs.append(request.run_id)

    async def _newest_runs(self, repo: Repository) -> tuple[float | None, str | None]:
        """When the newest run that got past its mark started, and the id of a full run whose
        mark succeeded but whose sweep never finished (killed: to be resumed), if that is it.
        Also restores ``last_success_timestamp_seconds`` from the files after a restart."""
        ns = StorageNamespace(repo.storage_namespace)
        store = await self.graveler.namespace_store(ns)
        newest: tuple[float | None, str | None] = (None, None)
        # The runs the KV has records of: directories planted in the namespace (with ids of any
        # time) can neither push the real runs out of this window nor pose as one.
        for run_id in (await RunRecords(self.graveler, repo.id).run_ids())[:20]:
            stored = await read_stored_run(self.graveler, repo.id, store, ns, run_id)
            if stored.record is None:
                # No KV record: killed during its mark or before its record (it deleted nothing and
                # can never be swept), or files someone else wrote: neither counts as a run nor
                # delays the next one by an interval, whatever the files say.
                continue
            at = (stored.finished_at or run_id_time(run_id) or stored.record.start_time).timestamp()
            if newest[0] is None:
                # A failed run (its mark failed, or its sweep was refused) is never resumed: a
                # refused sweep would be refused again every pass, and a new run is due after the
                # interval. ``resumable`` needs a ``complete`` record and a full mark's run.json.
                newest = (at, run_id if stored.resumable else None)
            if stored.succeeded:
                self._restore_last_success(repo.id, at)
                break
        return newest

    def _restore_last_success(self, repo_id: str, at: float) -> None:
        gauge = self.metrics.last_success.labels(repo_id)
        if gauge._value.get() < at:  # never move it back (this process may have seen a later one)
            gauge.set(at)

    def _launch(self, progress: RunProgress, *, scheduled: bool) -> None:
        repo_id = progress.request.repository
        task = asyncio.create_task(self._run(progress, scheduled=scheduled), name=f"gc-run-{repo_id}")
        self._runs[repo_id] = task
        task.add_done_callback(self._forget_task(self._runs, repo_id))

    @staticmethod
    def _forget_task(
        tasks: dict[str, asyncio.Task[None]], repo_id: str
    ) -> Callable[[asyncio.Task[None]], None]:
        def done(task: asyncio.Task[None]) -> None:
            if tasks.get(repo_id) is task:
                del tasks[repo_id]

        return done

    async def _run(self, progress: RunProgress, *, scheduled: bool) -> None:
        repo_id = progress.request.repository
        acquired = False
        try:
            async with self.holding(repo_id):
                acquired = True
                if scheduled and progress.request.mode != "sweep":
                    await self._recover(progress.request)
                await self._execute(progress)
                await self._retire_old_runs(repo_id)
        except Exception as e:
            if isinstance(e, ConflictError) and scheduled and not acquired:
                # Another daemon (or a CLI run) holds the repository: it runs it.
                log.info("%s: %s", repo_id, e)
                self.registry.finished(progress, self.now(), e)
                self.state(repo_id).next_run = None
                return
            # Anything else, a lease lost mid-run included, stopped the run before it did its job:
            # a failure, never a skip (``--once`` must not exit 0 leaving the garbage in place).
            self._failed(progress, progress.phase if progress.phase in ("mark", "sweep") else "run", e)
        finally:
            self.metrics.in_progress.labels(repo_id).set(0)
            self.state(repo_id).next_run = None  # recomputed from the namespace next pass

    async def _retire_old_runs(self, repo_id: str) -> None:
        """After a run, under its lease: the KV keeps ``run_records_kept`` run records of the
        repository (:mod:`lakefs_gc.runs.retention`), never one this daemon has queued or runs.
        A failure is logged: the run succeeded, the next one retires what this one left."""

        def protected() -> set[str]:
            return {p.request.run_id for p in self.registry.of_repository(repo_id)
                    if p.state in ("queued", "running") and p.request.mode == "sweep"}  # fmt: skip

        try:
            await retire_old_runs(
                RunRecords(self.graveler, repo_id), keep=self.config.run_records_kept, protected=protected
            )
        except LakeFSError as e:
            log.warning("retiring old GC run records of %s failed: %s: %s", repo_id, type(e).__name__, e)

    def _failed(self, progress: RunProgress, phase: str, error: BaseException) -> None:
        repo_id = progress.request.repository
        log.error("GC run %s of %s failed in %s: %s: %s", progress.request.run_id, repo_id, phase,
                  type(error).__name__, error)  # fmt: skip
        self.metrics.runs.labels(repo_id, phase, "failure").inc()
        if isinstance(error, TamperedError):
            self.metrics.refusals.labels(repo_id, error.reason).inc()
        elif isinstance(error, NamespaceConflictError):  # GC refuses the namespace: nothing deleted
            self.metrics.refusals.labels(repo_id, "namespace").inc()
        self.failed_runs += 1
        if progress.state != "failed":
            self.registry.finished(progress, self.now(), error)
        else:  # recorded as "cancelled" by _execute; the cause (a lost lease) is known now
            progress.error = f"{type(error).__name__}: {error}"

    async def _execute(self, progress: RunProgress) -> None:
        request = progress.request
        repo_id = request.repository
        self.registry.started(progress, self.now())
        self.metrics.in_progress.labels(repo_id).set(1)
        log.info("GC run %s of %s (%s) started", request.run_id, repo_id, request.mode)
        try:
            result = await self.executor(self.graveler, request, progress)
        except BaseException as e:
            if not isinstance(e, Exception):
                self.registry.finished(progress, self.now(), ConflictError("cancelled"))
            raise
        progress.result = result
        m = self.metrics
        m.listed.labels(repo_id).inc(result.listed)
        m.marked.labels(repo_id).inc(result.marked)
        m.deleted.labels(repo_id).inc(result.deleted)
        m.delete_failures.labels(repo_id).inc(result.delete_failures)
        m.throttled.labels(repo_id).inc(result.throttled)
        m.rescued.labels(repo_id).inc(result.rescued)
        if result.pinned_commits is not None:
            m.pinned.labels(repo_id).set(result.pinned_commits)
        if result.summary is not None:
            m.runs.labels(repo_id, "mark", "success").inc()
        if result.sweep is not None:
            m.runs.labels(repo_id, "sweep", "success").inc()
        m.runs.labels(repo_id, "run", "success").inc()
        m.last_success.labels(repo_id).set(self.clock.timestamp())
        self.registry.finished(progress, self.now(), None)
        log.info("GC run %s of %s finished: %d marked, %d deleted, %d rescued", request.run_id, repo_id,
                 result.marked, result.deleted, result.rescued)  # fmt: skip

    async def _recover(self, request: RunRequest) -> None:
        """Count runs killed during their mark (no ``summary.json``, or no KV record: nothing was
        deleted) as abandoned, once each. Killed sweeps are resumed by :meth:`_maybe_schedule`
        before any new run."""
        repo = await self.graveler.repository(request.repository)
        ns = StorageNamespace(repo.storage_namespace)
        store = await self.graveler.namespace_store(ns)
        state = self.state(request.repository)
        for run_id in (await list_run_ids(store, ns))[:5]:
            if run_id == request.run_id or run_id in state.abandoned_seen:
                continue
            stored: StoredRun = await read_stored_run(self.graveler, request.repository, store, ns, run_id)
            if stored.record is not None:
                return  # a finished mark: older runs were looked at when it was started
            if stored.manifest is not None:
                state.abandoned_seen.add(run_id)
                self.metrics.runs.labels(request.repository, "mark", "abandoned").inc()
                log.warning("GC run %s of %s was killed during its mark: abandoned (nothing was deleted)",
                            run_id, request.repository)  # fmt: skip

    @contextlib.asynccontextmanager
    async def holding(self, repo_id: str) -> AsyncIterator[None]:
        """Hold ``gc/<repo>`` for the block, renewed; losing it cancels the block's task."""
        ttl = self.config.lease_ttl_seconds
        lease = kv_lease(
            self.core.kv,
            f"gc/{repo_id}",
            self.holder,
            ttl,
            extra={"repository": repo_id},
            announced=self._leases,
        )
        if not await lease.try_acquire():
            raise ConflictError(f"another GC process holds repository {repo_id!r} (lease gc/{repo_id})")
        me = asyncio.current_task()
        lost = False

        async def renew() -> None:
            nonlocal lost
            while True:
                await asyncio.sleep(ttl / 3)
                try:
                    ok = await lease.renew()
                except LakeFSError as e:
                    log.warning("renewing the lease of %s failed: %s", repo_id, e)
                    continue  # retried until the lease expires
                if not ok:
                    lost = True
                    if me is not None:
                        me.cancel()
                    return

        renewer = asyncio.create_task(renew())
        try:
            yield
        except asyncio.CancelledError:
            if lost:
                raise ConflictError(f"lost the GC lease of {repo_id!r}; the run stopped") from None
            raise
        finally:
            renewer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renewer
            if not lost:
                with contextlib.suppress(LakeFSError):
                    await lease.release()

    # -- hard-delete reconciliation --------------------------------------------------------------

    def _maybe_reconcile(self, repo: Repository, report: PassReport) -> None:
        hd = self.config.hard_delete
        repo_id = repo.id
        state = self.state(repo_id)
        if not hd.enabled or repo_id in self._reconciles or repo_id in self._runs:
            return
        if state.next_reconcile > time.monotonic():
            return
        state.next_reconcile = time.monotonic() + hd.interval_seconds
        task = asyncio.create_task(self._reconcile(repo_id), name=f"gc-reconcile-{repo_id}")
        self._reconciles[repo_id] = task
        task.add_done_callback(self._forget_task(self._reconciles, repo_id))
        report.started_reconciles.append(repo_id)

    async def _reconcile(self, repo_id: str) -> None:
        state = self.state(repo_id)
        try:
            async with self.holding(repo_id):
                report = await self.reconcile_once(repo_id)
        except ConflictError as e:
            log.info("%s: reconciliation skipped: %s", repo_id, e)
            return
        except Exception as e:
            state.last_reconcile_error = f"{type(e).__name__}: {e}"
            self.metrics.hd_passes.labels(repo_id, "failure").inc()
            log.error("reconciliation of %s failed: %s", repo_id, state.last_reconcile_error)
            return
        state.last_reconcile, state.last_reconcile_at = report, self.now()
        state.last_reconcile_error = None
        m = self.metrics
        m.hd_passes.labels(repo_id, "success").inc()
        m.hd_candidates.labels(repo_id).set(report.candidates)
        m.hd_deleted.labels(repo_id).inc(report.deleted)
        m.hd_rescued.labels(repo_id).inc(report.rescued)
        m.hd_oldest.labels(repo_id).set(report.oldest_undecided_age_seconds or 0.0)

    def _maybe_purge_deleted(self, report: PassReport) -> None:
        """Once per reconciliation interval: the namespaces deleted repositories left (their
        ``data/`` purged after the grace when no repository claims them), under one global lease."""
        hd = self.config.hard_delete
        if not hd.enabled or DELETED_REPOS in self._reconciles or self._next_deleted_pass > time.monotonic():
            return
        self._next_deleted_pass = time.monotonic() + hd.interval_seconds
        task = asyncio.create_task(self._purge_deleted(), name="gc-deleted-repositories")
        self._reconciles[DELETED_REPOS] = task
        task.add_done_callback(self._forget_task(self._reconciles, DELETED_REPOS))
        report.started_reconciles.append(DELETED_REPOS)

    async def _purge_deleted(self) -> None:
        from lakefs_core.service.deleter import store_deleter
        from lakefs_gc.reconcile import ReconcileOptions, reconcile_deleted_repositories

        hd = self.config.hard_delete

        async def deleter_for(ns: StorageNamespace) -> Any:
            return store_deleter(await self.graveler.namespace_store(ns))

        options = ReconcileOptions(grace_seconds=hd.grace_seconds, clock=self.clock)
        try:
            async with self.holding(DELETED_REPOS):
                reports = await reconcile_deleted_repositories(
                    self.graveler, deleter_for=deleter_for, options=options
                )
        except ConflictError as e:
            log.info("deleted repositories: skipped: %s", e)
            return
        except Exception as e:
            log.error("purging the namespaces of deleted repositories failed: %s: %s", type(e).__name__, e)
            return
        self.last_deleted_reports = reports
        for r in reports:
            if r.deleted:
                log.info("purged %d objects of deleted repository %s", r.deleted, r.repository)
            for error in r.errors:
                log.warning("%s", error)

    # -- audited purges whose process died ---------------------------------------------------------

    def _maybe_finish_purges(self, repo: Repository) -> None:
        """Every ``hard_delete.interval_seconds``, a background task completes the purges of the
        repository whose record is still ``deleting`` ``hard_delete.grace_seconds`` after it was
        written (their process died), at most :data:`PURGES_PER_PASS` at a time. Completing deletes
        only the data objects the record names. No lease: two processes completing one record at
        once delete the same objects and settle it once (compare-and-swap)."""
        key = f"purges:{repo.id}"  # never a repository id (they have no ':')
        state = self.state(repo.id)
        if key in self._reconciles or state.next_purge_check > time.monotonic() or self._closed:
            return
        state.next_purge_check = time.monotonic() + self.config.hard_delete.interval_seconds
        task = asyncio.create_task(self._finish_purges(repo.id), name=f"gc-purges-{repo.id}")
        self._reconciles[key] = task
        task.add_done_callback(self._forget_task(self._reconciles, key))

    async def _finish_purges(self, repo_id: str) -> None:
        older_than = self.now() - timedelta(seconds=self.config.hard_delete.grace_seconds)
        try:
            done = await self.graveler.complete_stuck_purges(
                repo_id, older_than=older_than, limit=PURGES_PER_PASS
            )
        except Exception as e:
            log.error("completing the unfinished purges of %s failed: %s: %s", repo_id, type(e).__name__, e)
            return
        for record in done:
            self.metrics.purged.labels(repo_id).inc(record.deleted)
            log.warning("completed purge %s of %s left unfinished since %s: %d object(s) deleted",
                        record.audit_id, repo_id, record.created_at.isoformat(), record.deleted)  # fmt: skip

    async def reconcile_once(self, repo_id: str) -> Any:
        """One reconciliation of ``repo_id`` (the caller holds its lease)."""
        from lakefs_core.service.deleter import store_deleter
        from lakefs_gc.reconcile import ReconcileOptions, reconcile_repository

        hd = self.config.hard_delete
        repo = await self.graveler.repository(repo_id)
        store = await self.graveler.namespace_store(StorageNamespace(repo.storage_namespace))
        options = ReconcileOptions(
            grace_seconds=hd.grace_seconds,
            pending_timeout_seconds=hd.pending_timeout_seconds,
            staged_backoff_seconds=hd.staged_backoff_seconds,
            max_intents=hd.max_intents_per_pass,
            clock=self.clock,
        )
        return await reconcile_repository(
            self.graveler,
            repo_id,
            deleter=store_deleter(store),
            options=options,
            namespaces=await self._namespace_index(),
        )

    async def _namespace_index(self) -> NamespaceIndex:
        """The namespaces of every repository and import source, resolved at most
        :data:`NAMESPACE_INDEX_SECONDS` ago, shared by the reconciliations of all repositories (one
        scan and one resolution of every record per minute instead of per repository)."""
        async with self._namespace_lock:
            taken, index = self._namespaces
            if index is None or time.monotonic() - taken > NAMESPACE_INDEX_SECONDS:
                index = await NamespaceIndex.load(self.graveler)
                self._namespaces = (time.monotonic(), index)
            return index


def _executor_for(config: GCConfig, pins: PinSource | None, clock: RunClock) -> CoreRunExecutor:
    spark = config.spark
    return CoreRunExecutor(
        core_settings=config.core,
        spark_master=spark.master,
        spark_lite=spark.mode == "lite",
        submit=spark.mode == "submit",
        spark_conf=dict(spark.conf),
        partitions=spark.partitions,
        pins=pins,
        workdir=config.workdir,
        job_timeout=spark.job_timeout_seconds,
        clock=clock,
    )


def _preflight(config: GCConfig) -> None:
    problems = config_startup_problems(config)
    if problems:
        (key, first), rest = problems[0], problems[1:]
        raise StartupError(first + "".join(f"; {k}: {m}" for k, m in rest), key=key)
    if config.workdir is not None:
        try:
            make_private_dir(config.workdir)
        except OSError as e:
            raise StartupError(f"cannot create {config.workdir}: {e.strerror or e}", key="workdir") from e
