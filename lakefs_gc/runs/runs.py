"""GC runs as the daemon sees them: requests, the executor seam, and the registry of runs.

Contract:

- :class:`RunRequest` is one run to do: ``repository``, ``mode`` (``full``: mark then sweep;
  ``mark``; ``dry-run``: a mark that is never swept; ``sweep``: sweep the existing mark ``run_id``,
  with ``dry_run`` only verifying and counting), ``run_id`` (a fresh id of the run clock,
  :meth:`lakefs_gc.clock.RunClock.new_run_id`, for a mark; the mark's id for a sweep), retention
  ``now`` (None: the run clock's now when the mark claims the run), ``min_age`` and the ``tags``
  policy.
- :class:`RunExecutor` is the seam the daemon calls: ``await executor(graveler, request, progress)
  -> RunResult``. It raises a :class:`~lakefs_core.errors.LakeFSError` when the run fails, and sets
  ``progress.phase`` (``mark``/``sweep``) as it goes, so a failure is counted against its phase.
  :class:`lakefs_gc.runner.CoreRunExecutor` is the real one (the mark on the configured Spark
  executor, in-process or as a child process, then the sweep).
- :class:`RunRegistry` answers the runs of a repository, merged with this daemon's in-memory state
  of the runs it was asked for through the API (``queued``) or is running. The queue is in memory:
  a restart forgets queued requests (the API says so).
- :func:`read_stored_run`: what a run did. Its ``state`` comes from its run record in the KV
  (:mod:`lakefs_gc.runs.record`), never from the namespace, where anyone with access to the bucket
  can write: ``marked`` (record ``complete``: a mark that may be swept), ``swept``, ``failed``, and
  ``incomplete`` without a record (running on another daemon, killed before its record, not ours:
  lakeFS's runs; nothing can be swept from it). The files (``run.json``, ``summary.json``,
  ``sweep.json``) are detail only, each bounded, parsed strictly, naming this run (and repository),
  and, when the run has a record, shown only if its SHA-256 is the record's; anything else is left
  out and named in ``errors``. The scheduler's decisions (resume a sweep, when the last run was)
  read the same verified view.
"""

from __future__ import annotations

import asyncio
import collections
import json
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, Protocol, TypeVar

from pydantic import BaseModel, ConfigDict, StrictBool, StrictInt, StrictStr, ValidationError

from lakefs_core.block.base import BlockStore, CommonPrefix
from lakefs_core.errors import BadInputError, ConflictError, CorruptDataError, NotFoundError
from lakefs_core.repos.graveler import Graveler, StorageNamespace, check_run_id
from lakefs_gc.runs.layout import RunLayout
from lakefs_gc.runs.parts import file_name, ns_relative
from lakefs_gc.runs.record import FileDigest, RunRecord, RunRecords, digest_of
from lakefs_gc.runs.reports import (
    MAX_MANIFEST_BYTES,
    MAX_SUMMARY_BYTES,
    RunManifest,
    Summary,
    parse_manifest,
    parse_summary,
)

log = logging.getLogger(__name__)

RunMode = Literal["full", "mark", "sweep", "dry-run"]
RunState = Literal["queued", "running", "incomplete", "failed", "marked", "swept"]
MAX_SWEEP_REPORT_BYTES = 64 << 10
MAX_QUEUE = 100  # queued API requests per daemon: a client loop must not grow memory without bound
_FINISHED_KEPT = 200  # finished runs remembered in memory (their files stay in the namespace)
_OUR_RUN_ID = re.compile(r"(\d{8}T\d{6})(\d{3})Z-[0-9a-f]{16}")


def run_id_time(run_id: str) -> datetime | None:
    """The run clock's time when ``run_id`` was made (None: not one of ours, e.g. lakeFS's)."""
    m = _OUR_RUN_ID.fullmatch(run_id)
    if m is None:
        return None
    try:
        at = datetime.strptime(m.group(1), "%Y%m%dT%H%M%S").replace(tzinfo=UTC)
    except ValueError:
        return None
    return at + timedelta(milliseconds=int(m.group(2)))


@dataclass(frozen=True)
class RunRequest:
    repository: str
    mode: RunMode
    run_id: str
    now: datetime | None = None
    dry_run: bool = False
    min_age: timedelta = timedelta(hours=24)
    tags: Literal["pin", "ignore"] = "pin"

    def __post_init__(self) -> None:
        check_run_id(self.run_id)
        if self.mode not in ("full", "mark", "sweep", "dry-run"):
            raise BadInputError("must be full, mark, sweep or dry-run", field="mode")
        if self.dry_run and self.mode != "sweep":
            raise BadInputError(
                "dry_run applies to sweep runs (use mode dry-run for a mark)", field="dry_run"
            )
        if self.now is not None and self.now.tzinfo is None:
            raise BadInputError("must be timezone-aware", field="now")


@dataclass
class RunResult:
    """What a run did (the counters feed the metrics; the documents are the run's reports)."""

    run_id: str
    summary: dict[str, Any] | None = None  # summary.json's fields
    sweep: dict[str, Any] | None = None  # sweep.json's fields
    listed: int = 0
    marked: int = 0
    deleted: int = 0
    delete_failures: int = 0
    throttled: int = 0
    rescued: int = 0
    pinned_commits: int | None = None


@dataclass
class RunProgress:
    """The in-memory state of a run this daemon was asked for or runs."""

    request: RunRequest
    requested_at: datetime
    state: RunState = "queued"
    phase: Literal["queued", "mark", "sweep", "done"] = "queued"
    started_at: datetime | None = None
    finished_at: datetime | None = None
    error: str | None = None
    result: RunResult | None = None


class RunExecutor(Protocol):
    async def __call__(self, graveler: Graveler, request: RunRequest, progress: RunProgress) -> RunResult: ...


# -- reading runs from the namespace ----------------------------------------------------------------


class SweepDoc(BaseModel):
    """The fields of ``sweep.json`` the API shows (other fields are ignored)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    mark_id: StrictStr
    candidates: StrictInt = 0
    deleted: StrictInt = 0
    failed: StrictInt = 0
    rescued: StrictInt = 0
    throttled: StrictInt = 0
    dry_run: StrictBool = False
    start_time: StrictStr | None = None
    end_time: StrictStr | None = None


async def read_sweep_report(store: BlockStore, key: str) -> SweepDoc | None:
    """``sweep.json`` (None when absent); bounded and validated, :class:`CorruptDataError` otherwise."""
    try:
        raw = await store.get(key, length=MAX_SWEEP_REPORT_BYTES + 1)
    except NotFoundError:
        return None
    return parse_sweep_report(raw, file=f"{store.uri.rstrip('/')}/{key}")


def parse_sweep_report(raw: bytes, *, file: str) -> SweepDoc:
    """``sweep.json``'s bytes, bounded and validated (:class:`CorruptDataError` naming ``file``)."""
    if len(raw) > MAX_SWEEP_REPORT_BYTES:
        raise CorruptDataError(f"larger than {MAX_SWEEP_REPORT_BYTES} bytes", file=file)
    try:
        return SweepDoc.model_validate(json.loads(raw))
    except (ValueError, ValidationError) as e:
        raise CorruptDataError(f"invalid sweep report: {type(e).__name__}", file=file) from None


_STATE_OF_RECORD: dict[str, RunState] = {"complete": "marked", "swept": "swept", "failed": "failed"}


_Doc = TypeVar("_Doc", RunManifest, Summary, SweepDoc)


@dataclass
class StoredRun:
    """One run: its KV record (the state) and the files that match it (detail)."""

    run_id: str
    record: RunRecord | None = None  # None: the KV has no record of the run
    manifest: RunManifest | None = None  # None: absent (lakeFS's own runs), or not as recorded
    summary: Summary | None = None
    sweep: SweepDoc | None = None
    errors: list[str] = field(default_factory=list)  # files (or a record) left out, named

    @property
    def has_files(self) -> bool:
        return self.manifest is not None or self.summary is not None or self.sweep is not None

    @property
    def state(self) -> RunState:
        return "incomplete" if self.record is None else _STATE_OF_RECORD[self.record.state]

    @property
    def succeeded(self) -> bool:
        """Did the run do what its mode asked (a full run: swept)? A mode not vouched for by the
        record (``run.json`` absent or not as recorded) is not taken as success."""
        if self.state == "swept":
            return True
        return self.state == "marked" and self.manifest is not None and self.manifest.mode != "full"

    @property
    def resumable(self) -> bool:
        """A full run whose mark succeeded and whose sweep has not finished (killed mid-sweep)."""
        return self.manifest is not None and self.manifest.mode == "full" and self.state == "marked"

    @property
    def finished_at(self) -> datetime | None:
        if self.sweep is not None and self.sweep.end_time:
            try:
                return datetime.fromisoformat(self.sweep.end_time.replace("Z", "+00:00"))
            except ValueError:
                return None
        return None


async def list_run_ids(store: BlockStore, ns: StorageNamespace) -> list[str]:
    """Every run directory's id under ``unified/``, newest first (ids that are not run ids skipped)."""
    base = ns.gc_runs_prefix()
    found: list[str] = []
    async for item in store.list(base, delimiter="/"):
        if not isinstance(item, CommonPrefix):
            continue
        name = item.prefix[len(base) :].rstrip("/")
        try:
            found.append(check_run_id(name))
        except BadInputError:
            log.warning("ignoring %s: not a GC run directory", item.prefix)
    return sorted(found, reverse=True)


async def read_stored_run(
    graveler: Graveler, repo_id: str, store: BlockStore, ns: StorageNamespace, run_id: str
) -> StoredRun:
    """The run's KV record and the files that match it (see the module docstring); whatever is
    left out is named in ``errors``, never guessed at."""
    layout = RunLayout(ns, run_id)
    run = StoredRun(run_id)
    try:
        found = await RunRecords(graveler, repo_id).read(run_id)
    except CorruptDataError as e:  # the KV's own bytes are wrong: nothing is vouched for
        run.errors.append(str(e))
        found = None
    run.record = None if found is None else found[1]
    recorded = None if run.record is None else run.record.files
    run.manifest = await _detail(
        run, store, ns, layout.manifest, limit=MAX_MANIFEST_BYTES, parse=parse_manifest, recorded=recorded,
        foreign=lambda m: None if (m.run_id, m.repository) == (run_id, repo_id)
        else f"names {m.repository!r} run {m.run_id}",
    )  # fmt: skip
    run.summary = await _detail(
        run, store, ns, layout.summary, limit=MAX_SUMMARY_BYTES, parse=parse_summary, recorded=recorded,
        foreign=lambda m: None if m.run_id == run_id else f"names run {m.run_id}",
    )  # fmt: skip
    run.sweep = await _detail(
        run, store, ns, layout.sweep_report, limit=MAX_SWEEP_REPORT_BYTES, parse=parse_sweep_report,
        recorded=None if run.record is None else run.record.sweep_files,
        foreign=lambda m: None if m.mark_id == run_id else f"names mark {m.mark_id}",
    )  # fmt: skip
    return run


async def _detail(
    run: StoredRun,
    store: BlockStore,
    ns: StorageNamespace,
    key: str,
    *,
    limit: int,
    parse: Callable[..., _Doc],
    recorded: dict[str, FileDigest] | None,
    foreign: Callable[[_Doc], str | None],
) -> _Doc | None:
    """One of the run's small files, parsed: None when absent, and when it cannot be shown (named
    in ``run.errors``): too large or malformed, for a run with a record not as recorded, or naming
    another run (``foreign`` says how, else None).
    ``recorded`` None: the run has no record, its files vouch for nothing and are shown as found."""
    name = file_name(store, key)
    try:
        raw = await store.get(key, length=limit + 1)
    except NotFoundError:
        return None
    if recorded is not None and recorded.get(ns_relative(ns, key)) != digest_of(raw):
        run.errors.append(f"{name}: not the file the run's KV record lists: left out")
        return None
    try:
        doc = parse(raw, file=name)
    except CorruptDataError as e:
        run.errors.append(str(e))
        return None
    if (how := foreign(doc)) is not None:
        run.errors.append(f"{name}: {how}: left out")
        return None
    return doc


# -- the registry -----------------------------------------------------------------------------------


class RunRegistry:
    """Runs requested through the API (a FIFO queue) and those this daemon runs, by run id."""

    def __init__(self) -> None:
        self._runs: dict[str, RunProgress] = {}
        self._queue: collections.deque[str] = collections.deque()
        self._finished: collections.deque[str] = collections.deque()
        self.wakeup = asyncio.Event()  # set when a request arrives (the loop may start it early)

    def request(self, request: RunRequest, now: datetime) -> RunProgress:
        """Queue ``request``; :class:`ConflictError` when the queue is full or the run is known."""
        if len(self._queue) >= MAX_QUEUE:
            raise ConflictError(f"{MAX_QUEUE} runs are already queued on this daemon; retry later")
        for other in self._runs.values():
            same = other.request.repository == request.repository and other.request.run_id == request.run_id
            if same and other.state in ("queued", "running"):
                raise ConflictError(
                    f"run {request.run_id} of {request.repository!r} is already {other.state}"
                )
        progress = RunProgress(request=request, requested_at=now)
        self._runs[self._key(request)] = progress
        self._queue.append(self._key(request))
        self.wakeup.set()
        return progress

    @staticmethod
    def _key(request: RunRequest) -> str:
        return f"{request.repository}/{request.mode}/{request.run_id}"

    def next_queued(self) -> RunProgress | None:
        while self._queue:
            progress = self._runs.get(self._queue.popleft())
            if progress is not None and progress.state == "queued":
                return progress
        self.wakeup.clear()
        return None

    def requeue(self, progress: RunProgress) -> None:
        """Put a queued run back at the head of the queue (its repository was busy)."""
        self._queue.appendleft(self._key(progress.request))
        self.wakeup.set()

    def queued(self) -> list[RunProgress]:
        return [self._runs[k] for k in self._queue if k in self._runs]

    def track(self, request: RunRequest, now: datetime) -> RunProgress:
        """A run this daemon starts on its own schedule."""
        progress = RunProgress(request=request, requested_at=now)
        self._runs[self._key(request)] = progress
        return progress

    def started(self, progress: RunProgress, now: datetime) -> None:
        progress.state, progress.started_at = "running", now

    def finished(self, progress: RunProgress, now: datetime, error: BaseException | None) -> None:
        progress.finished_at, progress.phase = now, "done"
        if error is not None:
            progress.state = "failed"
            progress.error = f"{type(error).__name__}: {error}"
        else:
            swept = progress.result is not None and progress.result.sweep is not None
            progress.state = "swept" if swept and not progress.request.dry_run else "marked"
        key = self._key(progress.request)
        self._finished.append(key)
        while len(self._finished) > _FINISHED_KEPT:
            self._runs.pop(self._finished.popleft(), None)

    def of_repository(self, repo_id: str) -> list[RunProgress]:
        return [p for p in self._runs.values() if p.request.repository == repo_id]

    def find(self, repo_id: str, run_id: str) -> list[RunProgress]:
        return [p for p in self.of_repository(repo_id) if p.request.run_id == run_id]
