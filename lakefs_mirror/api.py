"""The mirroring daemon's HTTP API: lakeFS's replication API plus status, update and resync.

Served by :func:`lakefs_core.service.http.build_app` (basic auth, errors by ``http_status``, ``/_health``,
``/_ready``, ``/metrics``, ``/openapi.json`` generated from :mod:`lakefs_mirror.api_models`).
Routes (``P = /service/replication/v1/repositories/{source_repo}/mirrors``):

=========  ==============================  =====================================================
method     path                            what
=========  ==============================  =====================================================
POST       ``P``                           create ``{"name", "region", "storage_namespace"}``
                                           (+ optional ``branch_filter``, ``paused``, ``mode``,
                                           ``mirror_tags``) -> 201 mirror (lakeFS)
GET        ``P``                           list the source repository's mirrors -> 200
                                           ``{"results", "pagination"}`` (lakeFS; ``?after=&amount=``,
                                           ``&source_region=``, default this daemon's region)
GET        ``P/{mirror_id}``               one mirror -> 200 (lakeFS)
DELETE     ``P/{mirror_id}``               delete the mirror and its status -> 204 (lakeFS)
PATCH      ``P/{mirror_id}``               change ``branch_filter``/``paused``/``mode``/``mirror_tags``,
                                           optionally only at ``version`` -> 200 mirror
GET        ``P/{mirror_id}/status``        per branch/tag heads, candidate, missing counts, lag,
                                           last promotion and error, and ``blocked_reason`` -> 200
POST       ``P/{mirror_id}/resync``        request a full re-check -> 202 mirror
POST       ``P/{mirror_id}/promote``       failover (``{"force"}``): destination writable, mirroring
                                           stops -> 200 promotion (:mod:`lakefs_mirror.failover`)
POST       ``P/{mirror_id}/failback``      after a promotion: keep the old source's divergence on
                                           ``failback-*`` branches, create the reverse mirror -> 201
=========  ==============================  =====================================================

Any daemon answers for any mirror: every region's daemons share the mirrors database, and a mirror
is addressed by its (global) id under its source repository's name, so the routes by id work on
every daemon. Creation makes THIS daemon's region the source region; listing defaults to it.

Creation checks, in order, before the one database transaction that creates the mirror: the body
(400 naming the field), then the admission rules of :mod:`lakefs_mirror.admission` (``local_roots``
and system directories 409, the source repository exists here 404, the destination region's KV
lets repository ``name`` live in the namespace 409, the namespace probe 422/503).

Deletion removes the mirror record and its status rows only. The destination repository stays, read
only, with its branches, tags and objects: nothing is deleted from the destination on a request.
Re-creating a mirror of the same source repository under the same name and namespace ADOPTS that
repository (the engine continues from its heads); any other use of the name is refused with a 409
saying to delete the leftover repository (``lakefs-core repo delete lakefs://NAME`` with the
destination region's configuration) or to choose another name.

Secrets (the credentials, database URLs) never appear in responses or logs; bodies are not logged.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from aiohttp import web
from prometheus_client import CollectorRegistry
from pydantic import BaseModel

from lakefs_core import __version__
from lakefs_core.errors import (
    NotFoundError,
    PreconditionFailedError,
)
from lakefs_core.repos.graveler import Graveler
from lakefs_core.service.http import (
    ReadinessProbe,
    Route,
    ServiceSpec,
    access_key_id,
    build_app,
    json_object,
    parse_model,
)
from lakefs_mirror import api_models as m
from lakefs_mirror import failover
from lakefs_mirror.admission import (
    Admission,
    NamespaceProbe,
    SourceRepoExists,
    progress_warnings,
    require_source,
)
from lakefs_mirror.config import MirrorConfig
from lakefs_mirror.db import (
    FieldConflictError,
    Lease,
    Mirror,
    MirrorsDB,
    MirrorStatus,
    Promotion,
    check_branch_filter,
)

__all__ = ["create_app", "mirror_json", "status_json"]

log = logging.getLogger(__name__)


_CONFIG_KEY = web.AppKey("config", MirrorConfig)
_DB_KEY = web.AppKey("db", MirrorsDB)
_EXISTS_KEY: web.AppKey[SourceRepoExists] = web.AppKey("source_repo_exists")
_GRAVELERS_KEY: web.AppKey[dict[str, Graveler]] = web.AppKey("gravelers")
_PROBE_KEY: web.AppKey[NamespaceProbe | None] = web.AppKey("namespace_probe")
_MODELS_KEY = web.AppKey("models", m.RegionalModels)


# -- responses -------------------------------------------------------------------------------------------


def _iso(when: datetime | None) -> str | None:
    if when is None:
        return None
    return when.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _mirror_model(mirror: Mirror) -> m.Mirror:
    return m.Mirror(
        id=mirror.id,
        source_repo=mirror.source_repo,
        source_region=mirror.source_region,
        name=mirror.name,
        region=mirror.region,
        storage_namespace=mirror.storage_namespace,
        branch_filter=list(mirror.branch_filter),
        paused=mirror.paused,
        mode=mirror.mode,
        mirror_tags=mirror.mirror_tags,
        created_at=_iso(mirror.created_at) or "",
        updated_at=_iso(mirror.updated_at) or "",
        resync_requested_at=_iso(mirror.resync_requested_at),
        version=mirror.version,
        warnings=progress_warnings(mirror),
    )


def mirror_json(mirror: Mirror) -> dict[str, Any]:
    """The API representation of a mirror."""
    return _mirror_model(mirror).model_dump()


def _row_blocked(s: MirrorStatus) -> str | None:
    """Why one branch (tag) does not progress, from its status row (None: up to date or moving)."""
    if s.last_error:
        return f"last error: {s.last_error}"
    if s.candidate is not None and s.candidate != s.mirror_head and (s.missing_objects or s.missing_ranges):
        return (
            f"waiting for {s.missing_objects} object(s) and {s.missing_ranges} range(s) of commit "
            f"{s.candidate[:12]} to arrive in the destination namespace"
        )
    return None


def _status_model(s: MirrorStatus, blocked: str | None) -> m.BranchStatus:
    return m.BranchStatus(
        kind=s.kind,
        name=s.branch,
        source_head=s.source_head,
        mirror_head=s.mirror_head,
        candidate=s.candidate,
        missing_objects=s.missing_objects,
        missing_ranges=s.missing_ranges,
        external_objects=s.external_objects,
        lag_seconds=s.lag_seconds,
        last_promotion_at=_iso(s.last_promotion_at),
        last_checked_at=_iso(s.last_checked_at),
        last_error=s.last_error,
        blocked_reason=blocked or _row_blocked(s),
        caught_up=_caught_up(s),
    )


def _caught_up(s: MirrorStatus) -> bool:
    """The mirror head is the source head (a mirror head is only ever a fully validated commit)."""
    return (
        s.source_head is not None
        and s.mirror_head == s.source_head
        and not s.last_error
        and s.missing_objects == 0
        and s.missing_ranges == 0
    )


def _promotion_model(p: Promotion | None) -> m.Promotion | None:
    if p is None:
        return None
    return m.Promotion(
        promoted_at=_iso(p.promoted_at) or "",
        forced=p.forced,
        source_reachable=p.source_reachable,
        heads=p.heads,
        source_heads=p.source_heads,
        note=p.note,
        failback_mirror_id=p.failback_mirror_id,
    )


def status_json(s: MirrorStatus) -> dict[str, Any]:
    """The API representation of one branch's (or tag's) mirroring status."""
    return _status_model(s, None).model_dump()


def _mirror_blocked(
    mirror: Mirror, lease: Lease | None, now: datetime, promotion: Promotion | None = None
) -> str | None:
    """Why nothing of the mirror progresses: promoted, paused, or no live daemon in its destination
    region."""
    if promotion is not None:
        return (
            f"promoted at {_iso(promotion.promoted_at)}: repository {mirror.name!r} in {mirror.region!r} is "
            "writable and no longer mirrored (POST .../failback once the source region is back)"
        )
    if mirror.paused:
        return 'paused (PATCH {"paused": false} to resume)'
    if lease is None:
        return (
            f"no daemon of region {mirror.region!r} has taken its lease: "
            "is a lakefs-mirror daemon running there?"
        )
    if lease.expires_at <= now:
        return (
            f"no daemon holds region {mirror.region!r}'s lease (the last holder, {lease.holder}, let it "
            f"expire at {_iso(lease.expires_at)}): is a lakefs-mirror daemon running there?"
        )
    return None


def _json(model: BaseModel, status: int = 200) -> web.Response:
    return web.json_response(model.model_dump(), status=status)


# -- input checks ----------------------------------------------------------------------------------------


def _path(request: web.Request, model: type[m.RepoPath]) -> Any:
    return parse_model(model, request.match_info, m.HINTS)


def _admission(request: web.Request) -> Admission:
    app = request.app
    gravelers: dict[str, Graveler] = app[_GRAVELERS_KEY]
    return Admission(app[_CONFIG_KEY], gravelers, app[_EXISTS_KEY], app[_PROBE_KEY])


async def _own_mirror(request: web.Request) -> Mirror:
    """The mirror named by the path, which must belong to the path's source repository (any region:
    mirror ids are global, and every daemon reads the shared mirrors database)."""
    path: m.MirrorPath = _path(request, m.MirrorPath)
    try:
        mirror = await request.app[_DB_KEY].get_mirror(path.mirror_id)
    except NotFoundError:
        mirror = None
    if mirror is None or mirror.source_repo != path.source_repo:
        raise NotFoundError(f"repository {path.source_repo!r} has no mirror {path.mirror_id!r}")
    return mirror


async def _optional_object(request: web.Request) -> dict[str, Any]:
    """The JSON object body, or {} for an empty one (every field of the request has a default)."""
    if not (await request.read()).strip():
        return {}
    return await json_object(request)


# -- handlers --------------------------------------------------------------------------------------------


async def create_mirror(request: web.Request) -> web.Response:
    repo = _path(request, m.RepoPath).source_repo
    config = request.app[_CONFIG_KEY]
    body = parse_model(request.app[_MODELS_KEY].creation, await json_object(request), m.HINTS)
    live = await request.app[_DB_KEY].mirror_named(body.region, body.name)
    if live is not None:  # a live mirror, not a leftover repository: say so before anything else
        raise FieldConflictError(
            f"mirror {live.id} ({live.source_region}/{live.source_repo} -> {live.region}/{live.name}) "
            f"already exists and is live under this name: DELETE it first to replace it, or choose "
            "another name",
            field="name",
        )
    namespace, globs = await _admission(request).admit(
        repo,
        name=body.name,
        region=body.region,
        storage_namespace=body.storage_namespace,
        branch_filter=body.branch_filter,
    )
    mirror = await request.app[_DB_KEY].create_mirror(
        source_repo=repo,
        source_region=config.region,
        name=body.name,
        region=body.region,
        storage_namespace=namespace,
        branch_filter=globs,
        paused=body.paused,
        mode=body.mode,
        mirror_tags=body.mirror_tags,
    )
    log.info(
        "created mirror %s: %s/%s -> %s/%s (by %s)",
        mirror.id,
        config.region,
        repo,
        mirror.region,
        mirror.name,
        access_key_id(request),
    )
    return _json(_mirror_model(mirror), 201)


async def list_mirrors(request: web.Request) -> web.Response:
    repo = _path(request, m.RepoPath).source_repo
    query = parse_model(
        request.app[_MODELS_KEY].list_query, {k: request.query[k] for k in request.query}, m.HINTS
    )
    region = query.source_region or request.app[_CONFIG_KEY].region
    amount = query.amount
    page = await request.app[_DB_KEY].list_mirrors(
        source_repo=repo, source_region=region, after=query.after, limit=amount + 1
    )
    if not page and not query.after:
        await require_source(_admission(request), repo, region)
    has_more = len(page) > amount
    page = page[:amount]
    pagination = m.Pagination(
        has_more=has_more, next_offset=page[-1].id if has_more else "", results=len(page), max_per_page=amount
    )
    return _json(m.MirrorList(results=[_mirror_model(x) for x in page], pagination=pagination))


async def get_mirror(request: web.Request) -> web.Response:
    return _json(_mirror_model(await _own_mirror(request)))


async def update_mirror(request: web.Request) -> web.Response:
    mirror = await _own_mirror(request)
    body = parse_model(m.MirrorUpdate, await json_object(request), m.HINTS)
    given = body.model_fields_set
    changes: dict[str, Any] = {}
    if "branch_filter" in given:
        changes["branch_filter"] = check_branch_filter(body.branch_filter)
    for key in ("paused", "mode", "mirror_tags"):
        if key in given:
            changes[key] = getattr(body, key)
    version = body.version if "version" in given else None
    try:
        updated = await request.app[_DB_KEY].update_mirror(mirror.id, version, **changes)
    except PreconditionFailedError as e:
        raise FieldConflictError(str(e), field="version") from e
    if changes:
        log.info("updated mirror %s: %s (by %s)", mirror.id, sorted(changes), access_key_id(request))
    return _json(_mirror_model(updated))


async def delete_mirror(request: web.Request) -> web.Response:
    mirror = await _own_mirror(request)
    await request.app[_DB_KEY].delete_mirror(mirror.id)
    log.info(
        "deleted mirror %s (by %s); repository %r stays in region %s, read-only",
        mirror.id,
        access_key_id(request),
        mirror.name,
        mirror.region,
    )
    return web.Response(status=204)


async def mirror_status(request: web.Request) -> web.Response:
    mirror = await _own_mirror(request)
    db = request.app[_DB_KEY]
    rows = await db.list_status(mirror.id)
    lease = await db.lease(mirror.region)
    promotion = await db.promotion(mirror.id)
    reverse_of = await db.failback_of(mirror.id)
    now = datetime.now(UTC)
    blocked = _mirror_blocked(mirror, lease, now, promotion)
    results = [_status_model(s, blocked) for s in rows]
    leader = (
        None
        if lease is None
        else m.Leader(
            holder=lease.holder, expires_at=_iso(lease.expires_at) or "", live=lease.expires_at > now
        )
    )
    return _json(
        m.MirrorStatus(
            mirror=_mirror_model(mirror),
            destination_leader=leader,
            blocked_reason=blocked,
            results=results,
            caught_up=bool(results) and blocked is None and all(r.caught_up for r in results),
            warnings=progress_warnings(mirror),
            promotion=_promotion_model(promotion),
            failback=None if reverse_of is None else reverse_of.note,
        )
    )


async def promote_mirror(request: web.Request) -> web.Response:
    mirror = await _own_mirror(request)
    body = parse_model(m.PromoteRequest, await _optional_object(request), m.HINTS)
    gravelers: dict[str, Graveler] = request.app[_GRAVELERS_KEY]
    promotion = await failover.promote(request.app[_DB_KEY], gravelers, mirror.id, force=body.force)
    log.info(
        "promoted mirror %s: %s/%s is writable (forced: %s, source reachable: %s) (by %s)",
        mirror.id,
        mirror.region,
        mirror.name,
        promotion.forced,
        promotion.source_reachable,
        access_key_id(request),
    )
    model = _promotion_model(promotion)
    assert model is not None
    return _json(model)


async def failback_mirror(request: web.Request) -> web.Response:
    mirror = await _own_mirror(request)
    body = parse_model(m.FailbackRequest, await _optional_object(request), m.HINTS)
    gravelers: dict[str, Graveler] = request.app[_GRAVELERS_KEY]
    result = await failover.failback(request.app[_DB_KEY], gravelers, mirror.id, mode=body.mode)
    log.info(
        "failback of mirror %s: reverse mirror %s; %s (by %s)",
        mirror.id,
        result.reverse.id,
        result.note,
        access_key_id(request),
    )
    return _json(
        m.FailbackResponse(reverse_mirror=_mirror_model(result.reverse), kept=result.kept, note=result.note),
        201,
    )


async def resync_mirror(request: web.Request) -> web.Response:
    mirror = await _own_mirror(request)
    updated = await request.app[_DB_KEY].request_resync(mirror.id)
    log.info("resync requested for mirror %s (by %s)", mirror.id, access_key_id(request))
    return _json(_mirror_model(updated), 202)


# -- the application -------------------------------------------------------------------------------------

_BY_ID = {"source_repo": "$request.path.source_repo", "mirror_id": "$response.body#/id"}
_LINKS = {
    name: {"operationId": op, "parameters": _BY_ID}
    for name, op in (
        ("GetMirror", "getMirror"),
        ("UpdateMirror", "updateMirror"),
        ("GetMirrorStatus", "getMirrorStatus"),
        ("ResyncMirror", "resyncMirror"),
        ("PromoteMirror", "promoteMirror"),
        ("FailbackMirror", "failbackMirror"),
        ("DeleteMirror", "deleteMirror"),
    )
}


_MIRRORS = f"{m.API_PREFIX}/repositories/{{source_repo}}/mirrors"
_ONE = f"{_MIRRORS}/{{mirror_id}}"


def routes(models: m.RegionalModels) -> list[Route]:
    """The mirror routes (the shared ones come from :func:`lakefs_core.service.http.build_app`)."""
    mirrors = _MIRRORS
    return [
        Route(
            "POST",
            mirrors,
            create_mirror,
            "createMirror",
            "Create a mirror of the source repository in another (or this) region (lakeFS).",
            status=201,
            response=m.Mirror,
            request=models.creation,
            path_params=m.RepoPath,
            errors=(404, 409, 422),
            links=_LINKS,
            description="Created.",
        ),
        Route(
            "GET",
            mirrors,
            list_mirrors,
            "listMirrors",
            "List the mirrors of the source repository, by id (lakeFS).",
            response=m.MirrorList,
            path_params=m.RepoPath,
            query=models.list_query,
            errors=(404,),
        ),
        *_by_id_routes(),
    ]


def _by_id_routes() -> list[Route]:
    """The routes of one mirror (any daemon answers them: mirror ids are global)."""
    one = _ONE
    return [
        Route(
            "GET",
            one,
            get_mirror,
            "getMirror",
            "One mirror (lakeFS).",
            response=m.Mirror,
            path_params=m.MirrorPath,
            errors=(404,),
        ),
        Route(
            "PATCH",
            one,
            update_mirror,
            "updateMirror",
            "Change branch filter, pause, mode or tag mirroring (optionally at a version).",
            response=m.Mirror,
            request=m.MirrorUpdate,
            path_params=m.MirrorPath,
            errors=(404, 409),
        ),
        Route(
            "DELETE",
            one,
            delete_mirror,
            "deleteMirror",
            "Delete the mirror and its status (lakeFS); the destination repository stays, read-only.",
            status=204,
            path_params=m.MirrorPath,
            errors=(404,),
            description="Deleted.",
        ),
        Route(
            "GET",
            f"{one}/status",
            mirror_status,
            "getMirrorStatus",
            "Per branch/tag: heads, candidate, missing objects and ranges, lag, errors, blocking reason.",
            response=m.MirrorStatus,
            path_params=m.MirrorPath,
            errors=(404,),
        ),
        *_failover_routes(),
    ]


def _failover_routes() -> list[Route]:
    """The routes acting on one mirror's mirroring: promote, fail back, resync."""
    one = _ONE
    return [
        Route(
            "POST",
            f"{one}/promote",
            promote_mirror,
            "promoteMirror",
            "Failover: make the destination repository writable at its validated heads; mirroring stops.",
            response=m.Promotion,
            request=m.PromoteRequest,
            path_params=m.MirrorPath,
            errors=(404, 409, 503),
        ),
        Route(
            "POST",
            f"{one}/failback",
            failback_mirror,
            "failbackMirror",
            "After a promotion: keep what diverged on the old source and create the reverse mirror.",
            status=201,
            response=m.FailbackResponse,
            request=m.FailbackRequest,
            path_params=m.MirrorPath,
            errors=(404, 409, 503),
            description="Reverse mirror created.",
        ),
        Route(
            "POST",
            f"{one}/resync",
            resync_mirror,
            "resyncMirror",
            "Ask the destination daemon to re-check every branch from scratch.",
            status=202,
            response=m.Mirror,
            path_params=m.MirrorPath,
            errors=(404,),
            description="Resync requested.",
        ),
    ]


def create_app(
    config: MirrorConfig,
    db: MirrorsDB,
    *,
    source_repo_exists: SourceRepoExists,
    metrics_registry: CollectorRegistry,
    gravelers: Mapping[str, Graveler] | None = None,
    is_live: Callable[[], bool] | None = None,
    namespace_probe: NamespaceProbe | None = None,
    lease_holder: Callable[[], str] | None = None,
) -> web.Application:
    """The API of this region's daemon.

    ``source_repo_exists(repo_id)`` answers whether a repository exists in this (the source) region;
    it may raise :class:`~lakefs_core.errors.TransientError` (-> 503). ``gravelers`` (region ->
    Graveler over that region's KV) lets creation refuse a destination namespace or name already
    taken there (409) and adopt a leftover mirror repository; regions without one are not checked.
    ``namespace_probe`` (e.g. :func:`store_probe`) checks that the destination namespace is usable
    (422). ``metrics_registry`` gets the API's request metrics and ``lakefs_mirror_build_info``;
    create one app per registry. ``is_live()`` is the daemon loop's liveness (``/_health``);
    ``lease_holder()`` names this daemon's lease holder id, which ``/_ready`` compares with the
    region's lease row (reported, not gating: a standby daemon is ready too).
    """
    models = m.regional_models(list(config.regions))
    app_gravelers = dict(gravelers or {})
    probes = [ReadinessProbe("mirrors_database", _db_probe(db))]
    for region, g in sorted(app_gravelers.items()):
        probes.append(ReadinessProbe(f"kv_{region}", _kv_probe(g)))
    if lease_holder is not None:
        probes.append(
            ReadinessProbe("holds_lease", _lease_probe(db, config.region, lease_holder), gates=False)
        )
    spec = ServiceSpec(
        daemon="mirror",
        region=config.region,
        version=__version__,
        title="lakefs-mirror replication API",
        description=(
            "lakeFS-compatible transactional mirroring API; every region's daemon (this one: "
            f"{config.region}) answers for every mirror. The four lakeFS calls (create, list, get, "
            "delete mirrors) work unchanged; status, update and resync go beyond lakeFS. All /service "
            "routes need HTTP basic auth; /_health, /_ready, /metrics and /openapi.json do not. Errors "
            'are JSON {"message", "field"}.'
        ),
        routes=routes(models),
        access_keys=config.access_keys,
        registry=metrics_registry,
        is_live=is_live or (lambda: True),
        probes=probes,
    )
    app = build_app(spec)
    app[_CONFIG_KEY] = config
    app[_DB_KEY] = db
    app[_EXISTS_KEY] = source_repo_exists
    app[_GRAVELERS_KEY] = app_gravelers
    app[_PROBE_KEY] = namespace_probe
    app[_MODELS_KEY] = models
    return app


def _db_probe(db: MirrorsDB) -> Callable[[], Awaitable[tuple[bool, str]]]:
    async def check() -> tuple[bool, str]:
        await db.ping()
        return True, "reachable"

    return check


def _kv_probe(g: Graveler) -> Callable[[], Awaitable[tuple[bool, str]]]:
    async def check() -> tuple[bool, str]:
        async for _ in g.list_repositories():
            break  # one read answered: the KV store is reachable
        return True, "reachable"

    return check


def _lease_probe(
    db: MirrorsDB, region: str, holder: Callable[[], str]
) -> Callable[[], Awaitable[tuple[bool, str]]]:
    async def check() -> tuple[bool, str]:
        lease = await db.lease(region)
        if lease is not None and lease.holder == holder() and lease.expires_at > datetime.now(UTC):
            return True, f"this daemon holds region {region!r}'s lease (it runs the region's mirrors)"
        return False, f"standby: this daemon does not hold region {region!r}'s lease"

    return check
