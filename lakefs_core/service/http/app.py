"""The one aiohttp application builder every daemon serves its API with.

:func:`build_app` takes a daemon's :class:`~lakefs_core.service.http.openapi.Route` table and adds what
every daemon shares:

- **authentication**: HTTP basic auth against the configured access keys, every key compared in
  constant time (:func:`hmac.compare_digest` on both id and secret); a missing or wrong credential
  is 401 with ``WWW-Authenticate: Basic``. Public routes (``/_health``, ``/_ready``, ``/metrics``,
  ``/openapi.json`` and any route marked ``public``) need none; unknown routes are 404 and wrong
  methods 405 (with ``Allow``) before authentication, since the route table is public anyway.
- **one error middleware**: a :class:`~lakefs_core.errors.LakeFSError` becomes the status its
  class declares in ``http_status`` (no per-class branches here), with a JSON body ``{"message",
  "field"}`` (``field`` from the error's ``field`` attribute when it has one). 4xx messages are the
  error's text; 5xx answers never carry internal detail (the error is logged instead): 503 says
  "temporarily unavailable, retry later" with ``Retry-After: 1``, others a fixed text per status.
  Anything that is not a LakeFSError is a 500 "internal error", logged with its traceback.
- ``GET /metrics``: the Prometheus registry, with ``lakefs_<daemon>_api_requests_total{method,
  route,status}``, ``lakefs_<daemon>_api_request_duration_seconds{method,route}`` and
  ``lakefs_<daemon>_build_info{version} 1`` registered in it.
- ``GET /_health`` (liveness): 200 while ``is_live()`` (the daemon loop's heartbeat is fresh), 503
  when the loop hung. Nothing else is consulted: a database outage must not get a healthy process
  restarted.
- ``GET /_ready`` (readiness): runs every :data:`ReadinessProbe` (e.g. "mirrors database reachable",
  "this daemon holds its region's lease"), each returning ``(ok, detail)`` or raising; 200 when
  every probe that ``gates`` readiness is ok, else 503. Probes are bounded by a timeout.
- ``GET /openapi.json``: the document generated from the route table's models.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hmac
import json
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from aiohttp import web
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from pydantic import BaseModel, ConfigDict, SecretStr

from lakefs_core.errors import LakeFSError
from lakefs_core.service.http.body import UnreadableBodyError
from lakefs_core.service.http.openapi import Route, openapi_document

__all__ = [
    "MAX_BODY_BYTES",
    "AccessKeyLike",
    "ErrorBody",
    "Health",
    "ProbeResult",
    "Readiness",
    "ReadinessProbe",
    "ServiceSpec",
    "access_key_id",
    "build_app",
    "error_response",
]

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 1024 * 1024
PROBE_TIMEOUT_SECONDS = 5.0
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
_FIXED_5XX = {
    502: "a store or database refused this daemon's credentials",
    503: "temporarily unavailable, retry later",
    507: "a store or database is full",
}
_HTTP_MESSAGES = {404: "no such route", 405: "method not allowed", 413: "request body too large"}
_ACCESS_KEY_ID = web.RequestKey("access_key_id", str)


class AccessKeyLike(Protocol):
    @property
    def access_key_id(self) -> str: ...

    @property
    def secret_access_key(self) -> SecretStr: ...


class _Out(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Error(_Out):
    """Every error response: ``field`` names the offending input when one is to blame."""

    message: str
    field: str | None = None


ErrorBody = Error  # the name used outside (``Error`` is the schema's name in the document)


class Health(_Out):
    status: Literal["ok", "unavailable"]
    region: str
    message: str | None = None


class ProbeResult(_Out):
    name: str
    ok: bool
    detail: str
    gates: bool


class Readiness(_Out):
    status: Literal["ok", "unavailable"]
    region: str
    checks: list[ProbeResult]


@dataclass(frozen=True)
class ReadinessProbe:
    """A named check for ``/_ready``. ``check()`` returns ``(ok, detail)``; an exception counts as not
    ok (its class name is the detail: messages may carry internals). A probe with ``gates=False``
    is reported but does not make the daemon unready (e.g. "holds the lease": a standby is ready)."""

    name: str
    check: Callable[[], Awaitable[tuple[bool, str]]]
    gates: bool = True


@dataclass(frozen=True)
class ServiceSpec:
    """What a daemon plugs into :func:`build_app`."""

    daemon: str  # "mirror", "gc": metric names are lakefs_<daemon>_...
    region: str
    version: str
    title: str
    description: str
    routes: Sequence[Route]
    access_keys: Sequence[AccessKeyLike]
    registry: CollectorRegistry
    is_live: Callable[[], bool] = lambda: True
    probes: Sequence[ReadinessProbe] = ()


def error_response(
    status: int, message: str, field: str | None = None, headers: dict[str, str] | None = None
) -> web.Response:
    body: dict[str, Any] = {"message": message}
    if field is not None:
        body["field"] = field
    return web.json_response(body, status=status, headers=headers)


def access_key_id(request: web.Request) -> str | None:
    """The access key id that authenticated ``request`` (None on public routes)."""
    return request.get(_ACCESS_KEY_ID)


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


def _authenticated(keys: Sequence[AccessKeyLike], key_id: bytes, secret: bytes) -> str | None:
    """The matching access key id, comparing EVERY configured key in constant time."""
    match: str | None = None
    for key in keys:
        id_ok = hmac.compare_digest(key_id, key.access_key_id.encode("utf-8"))
        secret_ok = hmac.compare_digest(secret, key.secret_access_key.get_secret_value().encode("utf-8"))
        if id_ok and secret_ok:
            match = key.access_key_id
    return match


def _auth_middleware(keys: Sequence[AccessKeyLike], public: frozenset[str], realm: str) -> Any:
    challenge = f'Basic realm="{realm}", charset="UTF-8"'

    @web.middleware
    async def middleware(
        request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        if request.match_info.http_exception is not None or _route_name(request) in public:
            return await handler(request)
        creds = _credentials(request.headers.get("Authorization"))
        if creds is None:
            message = "authentication required (HTTP basic auth with an access key id and secret)"
            return error_response(401, message, headers={"WWW-Authenticate": challenge})
        key_id = _authenticated(keys, *creds)
        if key_id is None:
            return error_response(
                401, "wrong access key id or secret", headers={"WWW-Authenticate": challenge}
            )
        request[_ACCESS_KEY_ID] = key_id
        return await handler(request)

    return middleware


# -- errors ----------------------------------------------------------------------------------------------


def _route_name(request: web.Request) -> str:
    info = request.match_info
    if info.http_exception is not None:
        return "unmatched"
    return info.route.resource.canonical if info.route.resource is not None else "unmatched"


def _lakefs_error_response(request: web.Request, e: LakeFSError) -> web.Response:
    status = type(e).http_status
    where = f"{request.method} {_route_name(request)}"
    if status == 503:
        log.warning("%s: temporarily unavailable: %s: %s", where, type(e).__name__, e)
        return error_response(503, _FIXED_5XX[503], headers={"Retry-After": "1"})
    if status >= 500:
        log.error("%s failed: %s: %s", where, type(e).__name__, e, exc_info=e)
        return error_response(status, _FIXED_5XX.get(status, "internal error"))
    field = getattr(e, "field", None)
    field = field if isinstance(field, str) and field else None
    message = str(e)
    if field is not None:
        message = message.removeprefix(f"{field}: ")
    response = error_response(status, message, field)
    if isinstance(e, UnreadableBodyError):
        response.force_close()  # "Connection: close": the rest of the body is unusable
    return response


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
            message = _HTTP_MESSAGES.get(e.status, e.reason)
            response = error_response(e.status, message, headers=headers or None)
        except LakeFSError as e:
            response = _lakefs_error_response(request, e)
        except Exception:
            log.exception("%s %s failed unexpectedly", request.method, _route_name(request))
            response = error_response(500, "internal error")
        route = _route_name(request)
        method = request.method if request.method in _METHODS else "OTHER"
        requests.labels(method, route, str(response.status)).inc()
        latency.labels(method, route).observe(time.monotonic() - started)
        return response

    return middleware


# -- the shared routes -----------------------------------------------------------------------------------

_SPEC_KEY: web.AppKey[ServiceSpec] = web.AppKey("service_spec")
_OPENAPI_KEY = web.AppKey("openapi", bytes)


async def _health(request: web.Request) -> web.Response:
    spec = request.app[_SPEC_KEY]
    if not spec.is_live():
        log.warning("health: the daemon loop is not live (a pass is hung)")
        body = Health(status="unavailable", region=spec.region, message="daemon loop not live (pass hung)")
        return web.json_response(body.model_dump(exclude_none=True), status=503)
    return web.json_response(Health(status="ok", region=spec.region).model_dump(exclude_none=True))


async def _run_probe(probe: ReadinessProbe) -> ProbeResult:
    try:
        ok, detail = await asyncio.wait_for(probe.check(), PROBE_TIMEOUT_SECONDS)
    except TimeoutError:
        ok, detail = False, f"no answer within {PROBE_TIMEOUT_SECONDS:g} s"
    except Exception as e:  # reported as not ready, never as a 500: readiness is the answer here
        log.warning("ready: probe %s failed: %s: %s", probe.name, type(e).__name__, e)
        ok, detail = False, f"failed ({type(e).__name__})"
    return ProbeResult(name=probe.name, ok=ok, detail=detail, gates=probe.gates)


async def _ready(request: web.Request) -> web.Response:
    spec = request.app[_SPEC_KEY]
    results = list(await asyncio.gather(*(_run_probe(p) for p in spec.probes)))
    ready = all(r.ok for r in results if r.gates)
    body = Readiness(status="ok" if ready else "unavailable", region=spec.region, checks=results)
    return web.json_response(body.model_dump(), status=200 if ready else 503)


async def _metrics(request: web.Request) -> web.Response:
    response = web.Response(body=generate_latest(request.app[_SPEC_KEY].registry))
    response.headers["Content-Type"] = CONTENT_TYPE_LATEST
    return response


async def _openapi(request: web.Request) -> web.Response:
    return web.Response(body=request.app[_OPENAPI_KEY], content_type="application/json")


class _OpenApiDocument(_Out):
    """The OpenAPI 3.0 document (free-form)."""

    model_config = ConfigDict(extra="allow")


def shared_routes() -> list[Route]:
    """The routes every daemon serves, unauthenticated."""
    return [
        Route(
            "GET",
            "/_health",
            _health,
            "health",
            "Liveness: the daemon loop's heartbeat is fresh.",
            response=Health,
            errors=(503,),
            public=True,
            description="Healthy (503 with the same body: the daemon loop hung).",
        ),
        Route(
            "GET",
            "/_ready",
            _ready,
            "ready",
            "Readiness: databases reachable; whether this daemon holds its lease.",
            response=Readiness,
            errors=(503,),
            public=True,
            description="Ready (503 with the same body: a gating check failed).",
        ),
        Route(
            "GET",
            "/metrics",
            _metrics,
            "metrics",
            "Prometheus metrics, text exposition format.",
            public=True,
            content_type="text/plain",
        ),
        Route(
            "GET",
            "/openapi.json",
            _openapi,
            "openapi",
            "This document.",
            response=_OpenApiDocument,
            public=True,
        ),
    ]


def build_app(spec: ServiceSpec) -> web.Application:
    """The daemon's application: ``spec.routes`` plus the shared routes, middlewares and metrics.

    Registers the request metrics and the build-info gauge in ``spec.registry``: build one app per
    registry.
    """
    prefix = f"lakefs_{spec.daemon}"
    requests = Counter(
        f"{prefix}_api_requests",
        "HTTP API requests by method, route template and status.",
        ["method", "route", "status"],
        registry=spec.registry,
    )
    latency = Histogram(
        f"{prefix}_api_request_duration_seconds",
        "HTTP API request latency by method and route template.",
        ["method", "route"],
        registry=spec.registry,
    )
    Gauge(
        f"{prefix}_build_info", "1, labelled with the running version.", ["version"], registry=spec.registry
    ).labels(spec.version).set(1)
    routes = [*shared_routes(), *spec.routes]
    public = frozenset(r.path for r in routes if r.public)
    app = web.Application(
        middlewares=[
            _error_middleware(requests, latency),
            _auth_middleware(spec.access_keys, public, f"lakefs-{spec.daemon}"),
        ],
        client_max_size=MAX_BODY_BYTES,
    )
    app[_SPEC_KEY] = spec
    document = openapi_document(
        routes, title=spec.title, version=spec.version, description=spec.description, error_model=Error
    )
    app[_OPENAPI_KEY] = json.dumps(document, indent=1).encode("utf-8")
    for route in routes:
        app.router.add_route(route.method, route.path, route.handler)
    return app
