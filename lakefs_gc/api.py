"""The GC daemon's HTTP API, served by :func:`lakefs_core.service.http.build_app`.

Basic auth on every route except ``/_health``, ``/_ready``, ``/metrics`` and ``/openapi.json``;
errors are JSON ``{"message", "field"}`` with the status their class declares.

lakeFS-compatible (same paths, bodies and status codes as lakeFS's API):

- ``GET /api/v1/repositories/{repository}/settings/gc_rules`` -> 200 rules; 404 when the repository
  has no rules (or does not exist);
- ``PUT`` the same path with the rules body -> 204 (stored as lakeFS's protobuf in the namespace);
- ``DELETE`` the same path -> 204;
- ``GET /api/v1/config/garbage-collection`` -> ``{"grace_period": <min_age seconds>}``.

Ours (``S = /service/gc/v1/repositories/{repository}``):

- ``POST S/runs`` ``{"mode": "full"|"mark"|"sweep"|"dry-run", "mark_id", "dry_run",
  "min_age_seconds", "tags"}`` -> 202 the queued run. A sweep names a successful, non-dry-run
  mark (404 unknown, 409 failed, incomplete or dry-run). Read-only (mirror) repositories: 409.
- ``GET S/runs`` (newest first, ``?amount=``) and ``GET S/runs/{run_id}`` -> the runs as their
  files in the namespace tell them, merged with this daemon's queued and running ones.
- ``GET S/hard-delete`` -> the reconciler's status for the repository.
- ``POST S/purges`` -> an audited purge (dry-run unless ``yes``); ``GET S/purges/{audit_id}``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime, timedelta
from typing import Any, Protocol

from aiohttp import web
from pydantic import BaseModel

from lakefs_core import __version__
from lakefs_core.errors import BadInputError, ConflictError, NotFoundError
from lakefs_core.repos.graveler import (
    Graveler,
    Repository,
    StorageNamespace,
    check_run_id,
    validate_repo_id,
)
from lakefs_core.service.http import (
    ReadinessProbe,
    Route,
    ServiceSpec,
    access_key_id,
    build_app,
    json_object,
    parse_model,
)
from lakefs_gc import api_models as m
from lakefs_gc.clock import RunClock
from lakefs_gc.config import GCConfig
from lakefs_gc.metrics import GCMetrics
from lakefs_gc.rules import delete_rules, load_rules, parse_rules_json, save_rules
from lakefs_gc.runs.record import RunRecords
from lakefs_gc.runs.runs import RunProgress, RunRegistry, RunRequest, StoredRun, list_run_ids, read_stored_run


class RepositoryView(Protocol):
    """What the API shows of the daemon's memory of one repository."""

    @property
    def last_reconcile(self) -> Any: ...  # lakefs_gc.reconcile.ReconcileReport | None

    @property
    def last_reconcile_at(self) -> datetime | None: ...

    @property
    def last_reconcile_error(self) -> str | None: ...


class GCServiceView(Protocol):
    """What the API needs of the daemon (:class:`lakefs_gc.service.GCService`), so that the daemon
    builds its app without the app importing the daemon."""

    @property
    def config(self) -> GCConfig: ...

    @property
    def graveler(self) -> Graveler: ...

    @property
    def metrics(self) -> GCMetrics: ...

    @property
    def registry(self) -> RunRegistry: ...

    @property
    def states(self) -> Mapping[str, RepositoryView]: ...

    def is_live(self) -> bool: ...

    def now(self) -> datetime: ...

    @property
    def clock(self) -> RunClock: ...

    def request_run(self, request: RunRequest) -> RunProgress: ...


_SERVICE: web.AppKey[GCServiceView] = web.AppKey("gc_service")
RULES = "/api/v1/repositories/{repository}/settings/gc_rules"
SERVICE = "/service/gc/v1/repositories/{repository}"


def _json(model: BaseModel, status: int = 200) -> web.Response:
    return web.json_response(model.model_dump(mode="json"), status=status)


def _svc(request: web.Request) -> GCServiceView:
    return request.app[_SERVICE]


async def _repository(request: web.Request) -> Repository:
    """The path's repository (400 on a malformed id, 404 when it does not exist)."""
    repo_id = request.match_info["repository"]
    try:
        validate_repo_id(repo_id)
    except BadInputError as e:
        raise BadInputError(str(e), field="repository") from None
    return await _svc(request).graveler.repository(repo_id)


async def _store(request: web.Request) -> tuple[Repository, StorageNamespace, Any]:
    repo = await _repository(request)
    ns = StorageNamespace(repo.storage_namespace)
    return repo, ns, await _svc(request).graveler.namespace_store(ns)


# -- lakeFS's rules and configuration ------------------------------------------------------------


async def get_rules(request: web.Request) -> web.Response:
    _, ns, store = await _store(request)
    rules = await load_rules(store, ns)
    if rules is None:
        raise NotFoundError("no GC rules are set for this repository")
    return web.json_response(rules.to_json())


async def put_rules(request: web.Request) -> web.Response:
    repo, ns, store = await _store(request)
    rules = parse_rules_json(await json_object(request))
    await save_rules(store, ns, rules)
    _log_change(request, "set GC rules", repo.id)
    return web.Response(status=204)


async def delete_rules_route(request: web.Request) -> web.Response:
    repo, ns, store = await _store(request)
    await delete_rules(store, ns)
    _log_change(request, "deleted GC rules", repo.id)
    return web.Response(status=204)


async def gc_config(request: web.Request) -> web.Response:
    grace = int(_svc(request).config.schedule.min_age_seconds)
    return _json(m.GarbageCollectionConfig(grace_period=grace))


def _log_change(request: web.Request, what: str, repo_id: str) -> None:
    import logging

    logging.getLogger(__name__).info("%s of %s (by %s)", what, repo_id, access_key_id(request))


# -- runs ------------------------------------------------------------------------------------------


def _run_model(repo_id: str, stored: StoredRun | None, progress: RunProgress | None) -> m.Run:
    run_id = stored.run_id if stored is not None else progress.request.run_id  # type: ignore[union-attr]
    run = m.Run(repository=repo_id, run_id=run_id, state="incomplete")
    if stored is not None:
        run.state = stored.state  # from the run's KV record, never from its files
        if stored.record is not None:
            run.record = stored.record.state
            run.error = stored.record.reason
        if stored.manifest is not None:
            run.mode, run.mark_id = stored.manifest.mode, stored.manifest.mark_id
            run.started_at = stored.manifest.start_time
        if stored.summary is not None:
            run.summary = stored.summary.model_dump(mode="json", exclude_none=True)
        if stored.sweep is not None:
            run.sweep = stored.sweep.model_dump(mode="json")
        run.finished_at = stored.finished_at
        run.file_errors = list(stored.errors)
    if progress is not None:
        run.mode = run.mode or progress.request.mode
        run.requested_at = progress.requested_at
        run.started_at = run.started_at or progress.started_at
        run.finished_at = progress.finished_at or run.finished_at
        run.error = progress.error or run.error
        if progress.state in ("queued", "running", "failed") or stored is None:
            run.state = progress.state
        run.phase = progress.phase
        if progress.request.mode == "sweep":
            run.mark_id = progress.request.run_id
    return run


async def create_run(request: web.Request) -> web.Response:
    svc = _svc(request)
    repo, ns, store = await _store(request)
    if repo.read_only:
        raise ConflictError(f"repository {repo.id!r} is read-only (a mirror): GC never marks it")
    body = parse_model(m.RunCreation, await json_object(request))
    schedule = svc.config.schedule_of(repo.id)
    if body.mode == "sweep":
        if body.mark_id is None:
            raise BadInputError("a sweep names the mark it sweeps", field="mark_id")
        await _check_sweepable(svc, repo.id, store, ns, check_run_id(body.mark_id))
        run_id = body.mark_id
    else:
        if body.mark_id is not None:
            raise BadInputError("only a sweep names a mark", field="mark_id")
        run_id = svc.clock.new_run_id()
    min_age = body.min_age_seconds if body.min_age_seconds is not None else schedule.min_age_seconds
    run = RunRequest(
        repository=repo.id,
        mode=body.mode,
        run_id=run_id,
        dry_run=body.dry_run,
        min_age=timedelta(seconds=min_age),
        tags=body.tags or schedule.tags,
    )
    progress = svc.request_run(run)
    _log_change(request, f"requested a {body.mode} GC run {run_id}", repo.id)
    return _json(_run_model(repo.id, None, progress), status=202)


async def _check_sweepable(
    svc: GCServiceView, repo_id: str, store: Any, ns: StorageNamespace, mark_id: str
) -> None:
    """Refuse early what the sweep would refuse, from the run's KV record (the sweep itself checks
    again, and every file, before any delete)."""
    stored = await read_stored_run(svc.graveler, repo_id, store, ns, mark_id)
    if stored.record is None and not stored.has_files:
        raise NotFoundError(f"no GC run {mark_id!r} in this repository")
    if stored.record is None:
        raise ConflictError(f"mark {mark_id!r} has no run record in the KV (unfinished or abandoned): "
                            "it can never be swept")  # fmt: skip
    if stored.state == "failed":
        raise ConflictError(f"mark {mark_id!r} is failed: it can never be swept")
    if stored.manifest is not None and stored.manifest.mode == "dry-run":
        raise ConflictError(f"mark {mark_id!r} was a dry run: it can never be swept")


async def list_runs(request: web.Request) -> web.Response:
    svc = _svc(request)
    repo, ns, store = await _store(request)
    query = parse_model(m.ListQuery, dict(request.query))
    memory = {p.request.run_id: p for p in svc.registry.of_repository(repo.id)}
    # Every run the KV has a record of (its directory may be gone), and every run directory (lakeFS's
    # runs, runs without a record: shown as incomplete).
    recorded = await RunRecords(svc.graveler, repo.id).run_ids()
    ids = sorted(set(await list_run_ids(store, ns)) | set(recorded), reverse=True)
    results: list[m.Run] = []
    for progress in memory.values():
        if progress.request.run_id not in ids and progress.request.mode != "sweep":
            results.append(_run_model(repo.id, None, progress))
    for run_id in ids[: query.amount]:
        stored = await read_stored_run(svc.graveler, repo.id, store, ns, run_id)
        results.append(_run_model(repo.id, stored, memory.get(run_id)))
    return _json(m.RunList(results=results[: query.amount]))


async def get_run(request: web.Request) -> web.Response:
    svc = _svc(request)
    repo, ns, store = await _store(request)
    run_id = request.match_info["run_id"]
    try:
        check_run_id(run_id)
    except BadInputError:
        raise BadInputError(f"{run_id!r} is not a GC run id", field="run_id") from None
    found = svc.registry.find(repo.id, run_id)
    progress = found[-1] if found else None
    stored = await read_stored_run(svc.graveler, repo.id, store, ns, run_id)
    if stored.record is None and not stored.has_files and not stored.errors:
        if progress is None:
            raise NotFoundError(f"no GC run {run_id!r} in repository {repo.id!r}")
        return _json(_run_model(repo.id, None, progress))
    return _json(_run_model(repo.id, stored, progress))


# -- hard delete -----------------------------------------------------------------------------------


async def hard_delete_status(request: web.Request) -> web.Response:
    svc = _svc(request)
    repo = await _repository(request)
    hd = svc.config.hard_delete
    journal = await svc.graveler.journal(repo.id)
    enabled = (await journal.settings()).hard_delete_journal
    now = svc.now().timestamp()
    count, oldest = 0, None
    async for intent in journal.intents():
        count += 1
        oldest = intent.t if oldest is None else min(oldest, intent.t)
        if count >= 100_000:
            break  # bounded: the figure is then a lower bound
    state = svc.states.get(repo.id)
    last = None
    if state is not None and state.last_reconcile is not None and state.last_reconcile_at is not None:
        r = state.last_reconcile
        last = m.Reconciliation(
            finished_at=state.last_reconcile_at,
            dry_run=False,
            candidates=r.candidates,
            deleted=r.deleted,
            rescued=r.rescued,
            committed=r.committed,
            staged=r.staged,
            waiting=r.waiting,
            failed=r.failed,
            oldest_undecided_age_seconds=r.oldest_undecided_age_seconds,
        )
    status = m.HardDeleteStatus(
        repository=repo.id,
        journal_enabled=enabled,
        reconciler_enabled=hd.enabled,
        grace_seconds=hd.grace_seconds,
        pending_timeout_seconds=hd.pending_timeout_seconds,
        undecided_intents=count,
        oldest_undecided_age_seconds=None if oldest is None else max(0.0, now - oldest),
        last_pass=last,
        last_error=state.last_reconcile_error if state is not None else None,
    )
    return _json(status)


# -- audited purge ---------------------------------------------------------------------------------


async def create_purge(request: web.Request) -> web.Response:
    svc = _svc(request)
    repo = await _repository(request)
    body = parse_model(m.PurgeCreation, await json_object(request))
    report = await svc.graveler.purge_path(
        repo.id,
        body.ref,
        body.path,
        all_history=body.all_history,
        reason=body.reason,
        actor=f"{access_key_id(request)}@lakefs-gc-api",
        yes=body.yes,
    )
    if body.yes:
        svc.metrics.purges.labels(repo.id).inc()
        svc.metrics.purged.labels(repo.id).inc(report.deleted)
        _log_change(request, f"purged {len(report.addresses)} object(s), audit {report.audit_id}", repo.id)
    return web.json_response(report.model_dump(mode="json"), status=201 if body.yes else 200)


async def get_purge(request: web.Request) -> web.Response:
    svc = _svc(request)
    repo = await _repository(request)
    record = await svc.graveler.purge_record(repo.id, request.match_info["audit_id"])
    return web.json_response(record.model_dump(mode="json"))


# -- the route table -------------------------------------------------------------------------------


def routes() -> list[Route]:
    repo_path = m.RepoPath
    return [
        Route("GET", RULES, get_rules, "getGCRules", "The repository's GC rules (lakeFS).",
              response=m.GarbageCollectionRules, path_params=repo_path, errors=(404,)),
        Route("PUT", RULES, put_rules, "setGCRules", "Set the repository's GC rules (lakeFS).", status=204,
              request=m.GarbageCollectionRules, path_params=repo_path, errors=(404,), description="Set."),
        Route("DELETE", RULES, delete_rules_route, "deleteGCRules", "Delete the GC rules (lakeFS).",
              status=204, path_params=repo_path, errors=(404,), description="Deleted."),
        Route("GET", "/api/v1/config/garbage-collection", gc_config, "getGarbageCollectionConfig",
              "The GC grace period: objects younger than it are never collected (lakeFS).",
              response=m.GarbageCollectionConfig),
        Route("POST", f"{SERVICE}/runs", create_run, "createRun", "Queue a GC run in a mode.", status=202,
              response=m.Run, request=m.RunCreation, path_params=repo_path, errors=(404, 409),
              description="Queued."),
        Route("GET", f"{SERVICE}/runs", list_runs, "listRuns", "The repository's GC runs, newest first.",
              response=m.RunList, path_params=repo_path, query=m.ListQuery, errors=(404,)),
        Route("GET", f"{SERVICE}/runs/{{run_id}}", get_run, "getRun", "One run: progress, summary, sweep.",
              response=m.Run, path_params=m.RunPath, errors=(404,)),
        Route("GET", f"{SERVICE}/hard-delete", hard_delete_status, "getHardDeleteStatus",
              "The hard-delete journal and reconciler of the repository.", response=m.HardDeleteStatus,
              path_params=repo_path, errors=(404,)),
        Route("POST", f"{SERVICE}/purges", create_purge, "purgePath",
              "Audited purge of a path's objects (dry run unless yes); history stays unchanged.",
              status=201, response=m.PurgeReportModel, request=m.PurgeCreation, path_params=repo_path,
              errors=(404,), description="Purged (200 with the same body for a dry run)."),
        Route("GET", f"{SERVICE}/purges/{{audit_id}}", get_purge, "getPurge", "One purge's audit record.",
              response=m.PurgeRecordModel, path_params=m.PurgePath, errors=(404,)),
    ]  # fmt: skip


def create_app(service: GCServiceView, extra_routes: list[Route] | None = None) -> web.Application:
    spec = ServiceSpec(
        daemon="gc",
        region=service.config.region,
        version=__version__,
        title="lakefs-gc API",
        description=(
            "Retention garbage collection and hard delete. The gc_rules and garbage-collection config "
            "routes are lakeFS's; /service/gc/v1 routes are this project's. All routes but /_health, "
            '/_ready, /metrics and /openapi.json need HTTP basic auth. Errors are JSON {"message", "field"}.'
        ),
        routes=[*routes(), *(extra_routes or [])],
        access_keys=service.config.access_keys,
        registry=service.metrics.registry,
        is_live=service.is_live,
        probes=[ReadinessProbe("kv", _kv_probe(service))],
    )
    app = build_app(spec)
    app[_SERVICE] = service
    return app


def _kv_probe(service: GCServiceView) -> Callable[[], Awaitable[tuple[bool, str]]]:
    async def check() -> tuple[bool, str]:
        async for _ in service.graveler.list_repositories():
            break
        return True, "reachable"

    return check
