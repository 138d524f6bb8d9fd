"""The mirroring daemon's HTTP API (aiohttp): lakeFS's replication API plus status, update and resync.

Routes (``P = /service/replication/v1/repositories/{source_repo}/mirrors``; the daemon's own region
is the SOURCE region of the mirrors it creates):

=========  ==============================  =====================================================
method     path                            what
=========  ==============================  =====================================================
POST       ``P``                           create ``{"name", "region", "storage_namespace"}``
                                           (+ optional ``branch_filter``, ``paused``, ``mode``,
                                           ``mirror_tags``) -> 201 mirror (lakeFS)
GET        ``P``                           list the source repository's mirrors -> 200
                                           ``{"results", "pagination"}`` (lakeFS; ``?after=&amount=``)
GET        ``P/{mirror_id}``               one mirror -> 200 (lakeFS)
DELETE     ``P/{mirror_id}``               delete the mirror and its status -> 204 (lakeFS)
PATCH      ``P/{mirror_id}``               change ``branch_filter``/``paused``/``mode``/``mirror_tags``,
                                           optionally only at ``version`` -> 200 mirror
GET        ``P/{mirror_id}/status``        per branch/tag heads, candidate, missing counts, lag,
                                           last promotion and error -> 200
POST       ``P/{mirror_id}/resync``        request a full re-check -> 202 mirror
GET        ``/_health``                    200 ``{"status": "ok"}`` / 503: DB unreachable or the loop hung
GET        ``/metrics``                    Prometheus text exposition of the given registry
GET        ``/openapi.json``               the OpenAPI 3.0 document (:mod:`lakefs_mirror.openapi`)
=========  ==============================  =====================================================

Authentication: HTTP basic auth with one of the configured ``access_keys`` (compared in constant
time with :func:`hmac.compare_digest`) on every ``/service/...`` route; ``/_health``, ``/metrics`` and
``/openapi.json`` are open (they reveal no mirror data; put them behind the network boundary if the
metrics labels, which carry mirror ids and branch names, are sensitive). A missing or wrong credential
is 401 with ``WWW-Authenticate: Basic``. Unknown routes are 404 and wrong methods 405 (with
``Allow``) before authentication, since the route table is public anyway.

Errors are JSON ``{"message": ..., "field": ...}`` (``field`` names the offending path parameter,
query parameter or body field, e.g. ``storage_namespace`` or ``branch_filter.2``; absent when no
single field is to blame): malformed input is 400 (also a ``mem://`` destination namespace), unknown
repository or mirror 404; a name already used in the destination region (by a mirror, or by a
repository that is not a read-only mirror in that namespace), a destination namespace equal to,
inside or enclosing another mirror's or another repository's, a local system directory, or a stale
``version`` is 409; an unreachable database or KV store 503.
Bad input never yields a 5xx, and a request that fails validation changes nothing (creation is one
database transaction, after all validation). Secrets (the credentials, database URLs) never appear
in responses or logs; request bodies are not logged.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import json
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import Annotated, Any, Literal

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.web_protocol import RequestPayloadError
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from lakefs_core import __version__
from lakefs_core.errors import (
    BadInputError,
    ConflictError,
    LakeFSError,
    NamespaceConflictError,
    NotFoundError,
    PreconditionFailedError,
    TransientError,
)
from lakefs_core.keys import StorageNamespace
from lakefs_core.repos.graveler import Graveler
from lakefs_mirror.config import MirrorConfig
from lakefs_mirror.db import (
    MAX_BRANCH_FILTER,
    MAX_GLOB_LENGTH,
    FieldConflictError,
    Lease,
    Mirror,
    MirrorsDB,
    MirrorStatus,
    check_branch_filter,
)
from lakefs_mirror.openapi import (
    AFTER_PATTERN,
    API_PREFIX,
    GLOB_PATTERN,
    MAX_AMOUNT,
    MAX_NAMESPACE_LENGTH,
    MAX_VERSION,
    MIRROR_ID_PATTERN,
    NAMESPACE_PATTERN,
    REPO_ID_PATTERN,
    fullmatch,
    openapi_document,
)

__all__ = ["PUBLIC_PATHS", "create_app"]

log = logging.getLogger(__name__)

PUBLIC_PATHS = frozenset({"/_health", "/metrics", "/openapi.json"})
MAX_BODY_BYTES = 1024 * 1024
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
_REALM = 'Basic realm="lakefs-mirror", charset="UTF-8"'

SourceRepoExists = Callable[[str], Awaitable[bool]]

_CONFIG_KEY = web.AppKey("config", MirrorConfig)
_DB_KEY = web.AppKey("db", MirrorsDB)
_EXISTS_KEY: web.AppKey[SourceRepoExists] = web.AppKey("source_repo_exists")
_GRAVELERS_KEY: web.AppKey[dict[str, Graveler]] = web.AppKey("gravelers")
_REGISTRY_KEY = web.AppKey("metrics_registry", CollectorRegistry)
_OPENAPI_KEY = web.AppKey("openapi", bytes)
_LIVE_KEY: web.AppKey[Callable[[], bool]] = web.AppKey("is_live")
_ACCESS_KEY_ID = web.RequestKey("access_key_id", str)


# -- request bodies ------------------------------------------------------------------------------------


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


Glob = Annotated[str, Field(min_length=1, max_length=MAX_GLOB_LENGTH)]


class _CreateBody(_Strict):
    name: str
    region: str
    storage_namespace: str
    branch_filter: list[Glob] = Field(
        default_factory=lambda: ["*"], min_length=1, max_length=MAX_BRANCH_FILTER
    )
    paused: bool = False
    mode: Literal["native", "active"] = "native"
    mirror_tags: bool = True


class _UpdateBody(_Strict):
    """Every field optional but never null: which were given is ``model_fields_set``."""

    branch_filter: list[Glob] = Field(
        default_factory=lambda: ["*"], min_length=1, max_length=MAX_BRANCH_FILTER
    )
    paused: bool = False
    mode: Literal["native", "active"] = "native"
    mirror_tags: bool = True
    version: int = Field(default=1, ge=1, le=MAX_VERSION)


class _UnreadableBodyError(BadInputError):
    """The request body could not be decoded; aiohttp will drop the connection after the response."""


def _bad_strings(value: Any) -> str | None:
    """The path of the first string (or key) that is not valid Unicode text (a lone surrogate).

    Iterative: the JSON parser already bounded the depth, this must not add recursion of its own.
    """
    stack: list[tuple[str, Any]] = [("", value)]
    while stack:
        path, node = stack.pop()
        if isinstance(node, str):
            try:
                node.encode("utf-8")
            except UnicodeEncodeError:
                return path or "body"
        elif isinstance(node, dict):
            for k, v in reversed(node.items()):
                sub = f"{path}.{k}" if path else str(k)
                stack.append((sub, v))
                stack.append((sub, k))
        elif isinstance(node, list):
            for i in reversed(range(len(node))):
                stack.append((f"{path}.{i}" if path else str(i), node[i]))
    return None


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


async def _json_object(request: web.Request) -> dict[str, Any]:
    try:
        raw = await request.read()
    except (RequestPayloadError, HttpProcessingError):
        raise _UnreadableBodyError(
            "the body cannot be read (bad Content-Encoding or framing)", field="body"
        ) from None
    if not raw.strip():
        raise BadInputError("a JSON object body is required", field="body")
    try:
        data = json.loads(raw.decode("utf-8"), parse_constant=_reject_constant)
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise BadInputError("the body is not valid JSON", field="body") from None
    if not isinstance(data, dict):
        raise BadInputError("the body must be a JSON object", field="body")
    bad = _bad_strings(data)
    if bad is not None:
        raise BadInputError("strings must be valid Unicode (no lone surrogates)", field=bad)
    return data


def _parse(model: type[_Strict], data: dict[str, Any]) -> Any:
    try:
        return model.model_validate(data)
    except ValidationError as e:
        first = e.errors(include_input=False, include_url=False, include_context=False)[0]
        field = ".".join(str(p) for p in first["loc"]) or "body"
        kind = first["type"]
        if kind == "extra_forbidden":
            message = "unknown field"
        elif kind == "missing":
            message = "required field is missing"
        else:
            message = str(first["msg"])
        raise BadInputError(message, field=field) from None


def _check_globs(globs: list[str]) -> tuple[str, ...]:
    for i, glob in enumerate(globs):
        if not fullmatch(GLOB_PATTERN, glob):
            raise BadInputError("glob patterns must not contain NUL", field=f"branch_filter.{i}")
    return check_branch_filter(globs)


def _check_namespace(value: str) -> str:
    """The normalised destination namespace, or 400: malformed, or a memory store (``mem://``: its
    objects live in one process, so no other reader, nor this daemon after a restart, would see what
    the mirror promoted; the OpenAPI pattern excludes it too)."""
    if value.startswith("mem://"):
        raise BadInputError(
            "a mirror's namespace must be durable and reachable by every reader: use s3:// or "
            "local:///, not a mem:// store",
            field="storage_namespace",
        )
    if len(value) > MAX_NAMESPACE_LENGTH or not fullmatch(NAMESPACE_PATTERN, value):
        raise BadInputError(
            "must be s3://bucket[/prefix] or local:///absolute/path "
            "(path segments of letters, digits, '.', '_' and '-', not starting with '.')",
            field="storage_namespace",
        )
    try:
        return str(StorageNamespace(value))
    except BadInputError as e:
        raise BadInputError(str(e).removeprefix("storage_namespace: "), field="storage_namespace") from None


def _check_local_dirs(namespace: str) -> None:
    """The filesystem root and system directories can be no repository's namespace
    (:meth:`StorageNamespace.check_repository_namespace`, the rule ``repo create`` applies too).

    A 409 like :func:`_check_local_root`: the body matches the schema, the deployment refuses it.
    """
    try:
        StorageNamespace(namespace).check_repository_namespace()
    except BadInputError as e:
        message = str(e).removeprefix("storage_namespace: ")
        raise FieldConflictError(message, field="storage_namespace") from None


def _check_local_root(namespace: str, roots: Sequence[Path], region: str) -> None:
    """A ``local://`` namespace must lie under one of its region's configured ``local_roots``.

    A 409 (not 400): the body is schema-valid; it conflicts with this deployment's configuration.
    """
    ns = StorageNamespace(namespace)
    if ns.scheme != "local" or not roots:
        return
    path = PurePosixPath(ns.store_uri.removeprefix("local://"))
    if not any(path == root or root in path.parents for root in map(PurePosixPath, roots)):
        raise FieldConflictError(
            f"a local namespace in region {region!r} must be under one of its local_roots",
            field="storage_namespace",
        )


# -- responses -------------------------------------------------------------------------------------------


def _iso(when: datetime | None) -> str | None:
    if when is None:
        return None
    return when.astimezone(UTC).isoformat().replace("+00:00", "Z")


def mirror_json(m: Mirror) -> dict[str, Any]:
    """The API representation of a mirror."""
    return {
        "id": m.id,
        "source_repo": m.source_repo,
        "source_region": m.source_region,
        "name": m.name,
        "region": m.region,
        "storage_namespace": m.storage_namespace,
        "branch_filter": list(m.branch_filter),
        "paused": m.paused,
        "mode": m.mode,
        "mirror_tags": m.mirror_tags,
        "created_at": _iso(m.created_at),
        "updated_at": _iso(m.updated_at),
        "resync_requested_at": _iso(m.resync_requested_at),
        "version": m.version,
    }


def status_json(s: MirrorStatus) -> dict[str, Any]:
    """The API representation of one branch's (or tag's) mirroring status."""
    return {
        "kind": s.kind,
        "name": s.branch,
        "source_head": s.source_head,
        "mirror_head": s.mirror_head,
        "candidate": s.candidate,
        "missing_objects": s.missing_objects,
        "missing_ranges": s.missing_ranges,
        "external_objects": s.external_objects,
        "lag_seconds": s.lag_seconds,
        "last_promotion_at": _iso(s.last_promotion_at),
        "last_checked_at": _iso(s.last_checked_at),
        "last_error": s.last_error,
    }


def _leader_json(lease: Lease | None) -> dict[str, Any] | None:
    if lease is None:
        return None
    return {
        "holder": lease.holder,
        "expires_at": _iso(lease.expires_at),
        "live": lease.expires_at > datetime.now(UTC),
    }


def _error(
    status: int, message: str, field: str | None = None, headers: dict[str, str] | None = None
) -> web.Response:
    body: dict[str, Any] = {"message": message}
    if field is not None:
        body["field"] = field
    return web.json_response(body, status=status, headers=headers)


def _unauthorized(message: str) -> web.Response:
    return _error(401, message, headers={"WWW-Authenticate": _REALM})


# -- authentication --------------------------------------------------------------------------------------


def _credentials(header: str | None) -> tuple[bytes, bytes] | None:
    if not header:
        return None
    scheme, _, token = header.strip().partition(" ")
    if scheme.lower() != "basic" or not token.strip():
        return None
    try:
        decoded = base64.b64decode(token.strip(), validate=True)
    except (binascii.Error, ValueError):
        return None
    key_id, sep, secret = decoded.partition(b":")
    if not sep:
        return None
    return key_id, secret


def _authenticated(config: MirrorConfig, key_id: bytes, secret: bytes) -> str | None:
    """The matching access key id, comparing every configured key in constant time."""
    match: str | None = None
    for key in config.access_keys:
        id_ok = hmac.compare_digest(key_id, key.access_key_id.encode("utf-8"))
        secret_ok = hmac.compare_digest(secret, key.secret_access_key.get_secret_value().encode("utf-8"))
        if id_ok and secret_ok:
            match = key.access_key_id
    return match


# -- middlewares -----------------------------------------------------------------------------------------


def _route_name(request: web.Request) -> str:
    info = request.match_info
    if info.http_exception is not None:
        return "unmatched"
    return info.route.resource.canonical if info.route.resource is not None else "unmatched"


def _error_middleware(requests: Counter, latency: Histogram) -> Any:
    @web.middleware
    async def middleware(
        request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        started = time.monotonic()
        response: web.StreamResponse
        try:
            response = await handler(request)
        except web.HTTPException as e:
            if e.status < 400:
                raise
            headers = {k: v for k, v in e.headers.items() if k.lower() in ("allow", "www-authenticate")}
            messages = {404: "no such route", 405: "method not allowed", 413: "request body too large"}
            response = _error(e.status, messages.get(e.status, e.reason), headers=headers or None)
        except BadInputError as e:
            message = str(e)
            if e.field and message.startswith(f"{e.field}: "):
                message = message[len(e.field) + 2 :]
            response = _error(400, message, e.field)
            if isinstance(e, _UnreadableBodyError):
                response.force_close()  # say "Connection: close": the rest of the body is unusable
        except NotFoundError as e:
            response = _error(404, str(e))
        except PreconditionFailedError as e:
            response = _error(409, str(e), "version")
        except FieldConflictError as e:
            response = _error(409, str(e).removeprefix(f"{e.field}: "), e.field)
        except ConflictError as e:
            response = _error(409, str(e))
        except TransientError as e:
            log.warning("%s %s: temporarily unavailable: %s", request.method, _route_name(request), e)
            response = _error(503, "temporarily unavailable, retry later", headers={"Retry-After": "1"})
        except LakeFSError:
            log.exception("%s %s failed", request.method, _route_name(request))
            response = _error(500, "internal error")
        except Exception:
            log.exception("%s %s failed unexpectedly", request.method, _route_name(request))
            response = _error(500, "internal error")
        route = _route_name(request)
        method = request.method if request.method in _METHODS else "OTHER"
        requests.labels(method, route, str(response.status)).inc()
        latency.labels(method, route).observe(time.monotonic() - started)
        return response

    return middleware


@web.middleware
async def _auth_middleware(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    if request.path in PUBLIC_PATHS or request.match_info.http_exception is not None:
        return await handler(request)
    creds = _credentials(request.headers.get("Authorization"))
    if creds is None:
        return _unauthorized("authentication required (HTTP basic auth with an access key id and secret)")
    key_id = _authenticated(request.app[_CONFIG_KEY], *creds)
    if key_id is None:
        return _unauthorized("wrong access key id or secret")
    request[_ACCESS_KEY_ID] = key_id
    return await handler(request)


# -- handlers --------------------------------------------------------------------------------------------


def _source_repo(request: web.Request) -> str:
    repo = request.match_info["source_repo"]
    if not fullmatch(REPO_ID_PATTERN, repo):
        raise BadInputError(
            "invalid repository id: 3-63 characters of a-z, 0-9 and '-', starting with a letter or digit",
            field="source_repo",
        )
    return repo


def _mirror_id(request: web.Request) -> str:
    mirror_id = request.match_info["mirror_id"]
    if not fullmatch(MIRROR_ID_PATTERN, mirror_id):
        raise BadInputError("invalid mirror id: 32 lower-case hex digits", field="mirror_id")
    return mirror_id


async def _own_mirror(request: web.Request) -> Mirror:
    """The mirror named by the path, which must belong to the path's source repository here."""
    repo = _source_repo(request)
    mirror_id = _mirror_id(request)
    config = request.app[_CONFIG_KEY]
    try:
        mirror = await request.app[_DB_KEY].get_mirror(mirror_id)
    except NotFoundError:
        mirror = None
    if mirror is None or mirror.source_repo != repo or mirror.source_region != config.region:
        raise NotFoundError(f"repository {repo!r} has no mirror {mirror_id!r}")
    return mirror


async def _check_destination(request: web.Request, name: str, region: str, namespace: str) -> None:
    """409 unless the destination region's KV lets repository ``name`` live in ``namespace``: no
    other repository may claim or use an overlapping namespace, and a repository already named
    ``name`` there must be a read-only mirror in this very namespace (the engine adopts only such).

    Advisory (a repository may appear between this check and the engine's first pass); the engine's
    ``create_repository`` takes the namespace claim atomically and refuses the same cases.
    """
    dst = request.app[_GRAVELERS_KEY].get(region)
    if dst is None:
        return  # no KV access configured for that region (tests, or an API-only deployment)
    try:
        existing = await dst.repository(name)
    except NotFoundError:
        pass
    else:
        same_ns = (
            StorageNamespace(existing.storage_namespace).canonical == StorageNamespace(namespace).canonical
        )
        if not (existing.read_only and same_ns):
            raise FieldConflictError(
                f"repository {name!r} already exists in region {region!r} and is not a read-only mirror "
                "in this storage namespace: choose another name, or delete that repository first",
                field="name",
            )
    try:
        await dst.check_namespace_available(namespace, name)
    except NamespaceConflictError as e:
        raise FieldConflictError(f"{e} (in region {region!r})", field="storage_namespace") from e


async def _require_source(request: web.Request, repo: str) -> None:
    if not await request.app[_EXISTS_KEY](repo):
        raise NotFoundError(
            f"source repository {repo!r} not found in region {request.app[_CONFIG_KEY].region!r}"
        )


async def create_mirror(request: web.Request) -> web.Response:
    repo = _source_repo(request)
    body: _CreateBody = _parse(_CreateBody, await _json_object(request))
    config = request.app[_CONFIG_KEY]
    if not fullmatch(REPO_ID_PATTERN, body.name):
        raise BadInputError(
            "invalid repository id: 3-63 characters of a-z, 0-9 and '-', starting with a letter or digit",
            field="name",
        )
    if body.region not in config.regions:
        raise BadInputError(
            f"must be a configured region ({', '.join(sorted(config.regions))})", field="region"
        )
    namespace = _check_namespace(body.storage_namespace)
    _check_local_root(namespace, config.regions[body.region].local_roots, body.region)
    _check_local_dirs(namespace)
    globs = _check_globs(body.branch_filter)
    if body.region == config.region and body.name == repo:
        raise FieldConflictError("a mirror cannot replace its own source repository", field="name")
    await _require_source(request, repo)
    await _check_destination(request, body.name, body.region, namespace)
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
        request.get(_ACCESS_KEY_ID),
    )
    return web.json_response(mirror_json(mirror), status=201)


def _query_amount(request: web.Request) -> int:
    raw = request.query.get("amount")
    if raw is None:
        return MAX_AMOUNT
    if not fullmatch("^-?[0-9]{1,12}$", raw) or not 1 <= int(raw) <= MAX_AMOUNT:
        raise BadInputError(f"must be an integer from 1 to {MAX_AMOUNT}", field="amount")
    return int(raw)


async def list_mirrors(request: web.Request) -> web.Response:
    repo = _source_repo(request)
    after = request.query.get("after", "")
    if not fullmatch(AFTER_PATTERN, after):
        raise BadInputError("must be a mirror id (up to 32 lower-case hex digits)", field="after")
    amount = _query_amount(request)
    config = request.app[_CONFIG_KEY]
    page = await request.app[_DB_KEY].list_mirrors(
        source_repo=repo, source_region=config.region, after=after, limit=amount + 1
    )
    if not page and not after:
        await _require_source(request, repo)
    has_more = len(page) > amount
    page = page[:amount]
    return web.json_response(
        {
            "results": [mirror_json(m) for m in page],
            "pagination": {
                "has_more": has_more,
                "next_offset": page[-1].id if has_more else "",
                "results": len(page),
                "max_per_page": amount,
            },
        }
    )


async def get_mirror(request: web.Request) -> web.Response:
    return web.json_response(mirror_json(await _own_mirror(request)))


async def update_mirror(request: web.Request) -> web.Response:
    mirror = await _own_mirror(request)
    body: _UpdateBody = _parse(_UpdateBody, await _json_object(request))
    given = body.model_fields_set
    changes: dict[str, Any] = {}
    if "branch_filter" in given:
        changes["branch_filter"] = _check_globs(body.branch_filter)
    for key in ("paused", "mode", "mirror_tags"):
        if key in given:
            changes[key] = getattr(body, key)
    version = body.version if "version" in given else None
    updated = await request.app[_DB_KEY].update_mirror(mirror.id, version, **changes)
    if changes:
        log.info("updated mirror %s: %s (by %s)", mirror.id, sorted(changes), request.get(_ACCESS_KEY_ID))
    return web.json_response(mirror_json(updated))


async def delete_mirror(request: web.Request) -> web.Response:
    mirror = await _own_mirror(request)
    await request.app[_DB_KEY].delete_mirror(mirror.id)
    log.info("deleted mirror %s (by %s)", mirror.id, request.get(_ACCESS_KEY_ID))
    return web.Response(status=204)


async def mirror_status(request: web.Request) -> web.Response:
    mirror = await _own_mirror(request)
    db = request.app[_DB_KEY]
    rows = await db.list_status(mirror.id)
    lease = await db.lease(mirror.region)
    return web.json_response(
        {
            "mirror": mirror_json(mirror),
            "destination_leader": _leader_json(lease),
            "results": [status_json(s) for s in rows],
        }
    )


async def resync_mirror(request: web.Request) -> web.Response:
    mirror = await _own_mirror(request)
    updated = await request.app[_DB_KEY].request_resync(mirror.id)
    log.info("resync requested for mirror %s (by %s)", mirror.id, request.get(_ACCESS_KEY_ID))
    return web.json_response(mirror_json(updated), status=202)


async def health(request: web.Request) -> web.Response:
    region = request.app[_CONFIG_KEY].region
    if not request.app[_LIVE_KEY]():
        log.warning("health: the daemon loop is not live (a pass is hung)")
        return web.json_response(
            {"status": "unavailable", "region": region, "message": "daemon loop not live (pass hung)"},
            status=503,
        )
    try:
        await request.app[_DB_KEY].ping()
    except LakeFSError as e:
        log.warning("health: mirrors database unreachable: %s", e)
        return web.json_response(
            {"status": "unavailable", "region": region, "message": "mirrors database unreachable"}, status=503
        )
    return web.json_response({"status": "ok", "region": region})


async def metrics(request: web.Request) -> web.Response:
    payload = generate_latest(request.app[_REGISTRY_KEY])
    response = web.Response(body=payload)
    response.headers["Content-Type"] = CONTENT_TYPE_LATEST
    return response


async def openapi(request: web.Request) -> web.Response:
    return web.Response(body=request.app[_OPENAPI_KEY], content_type="application/json")


# -- the application -------------------------------------------------------------------------------------


def create_app(
    config: MirrorConfig,
    db: MirrorsDB,
    *,
    source_repo_exists: SourceRepoExists,
    metrics_registry: CollectorRegistry,
    gravelers: Mapping[str, Graveler] | None = None,
    is_live: Callable[[], bool] | None = None,
) -> web.Application:
    """The API of this region's daemon.

    ``source_repo_exists(repo_id)`` answers whether a repository exists in this (the source) region
    (e.g. ``Graveler.repository`` not raising :class:`NotFoundError`); it may raise
    :class:`~lakefs_core.errors.TransientError` (-> 503). ``gravelers`` (region -> Graveler over that
    region's KV) lets creation refuse a destination namespace or name already taken by a repository
    there (409); regions without one are not checked. Request metrics
    (``lakefs_mirror_api_requests_total``, ``lakefs_mirror_api_request_duration_seconds``) are
    registered in ``metrics_registry``, which ``GET /metrics`` exposes; create one app per registry.
    ``is_live()`` is the daemon loop's liveness (:meth:`DaemonLoop.is_live`): ``/_health`` answers
    503 while it is false (a hung pass).
    """
    requests = Counter(
        "lakefs_mirror_api_requests",
        "HTTP API requests by method, route template and status.",
        ["method", "route", "status"],
        registry=metrics_registry,
    )
    latency = Histogram(
        "lakefs_mirror_api_request_duration_seconds",
        "HTTP API request latency by method and route template.",
        ["method", "route"],
        registry=metrics_registry,
    )
    app = web.Application(
        middlewares=[_error_middleware(requests, latency), _auth_middleware], client_max_size=MAX_BODY_BYTES
    )
    app[_CONFIG_KEY] = config
    app[_DB_KEY] = db
    app[_EXISTS_KEY] = source_repo_exists
    app[_GRAVELERS_KEY] = dict(gravelers or {})
    app[_REGISTRY_KEY] = metrics_registry
    app[_LIVE_KEY] = is_live or (lambda: True)
    document = openapi_document(sorted(config.regions), this_region=config.region, version=__version__)
    app[_OPENAPI_KEY] = json.dumps(document, indent=1).encode("utf-8")

    mirrors = f"{API_PREFIX}/repositories/{{source_repo}}/mirrors"
    one = f"{mirrors}/{{mirror_id}}"
    app.router.add_get("/_health", health, allow_head=False)
    app.router.add_get("/metrics", metrics, allow_head=False)
    app.router.add_get("/openapi.json", openapi, allow_head=False)
    app.router.add_post(mirrors, create_mirror)
    app.router.add_get(mirrors, list_mirrors, allow_head=False)
    app.router.add_get(one, get_mirror, allow_head=False)
    app.router.add_patch(one, update_mirror)
    app.router.add_delete(one, delete_mirror)
    app.router.add_get(f"{one}/status", mirror_status, allow_head=False)
    app.router.add_post(f"{one}/resync", resync_mirror)
    return app
