"""The ``/api/v1`` sub-application: lakeFS's REST API over the Graveler facade.

:func:`build_api_app` returns an aiohttp application whose routes are lakeFS's paths (relative to
``/api/v1``); the server mounts it there. Every request except ``/healthcheck`` and ``/auth/login``
is authenticated (:mod:`.auth`), and every handler authorises its operation with lakeFS's
action/resource table (:mod:`.perms`) before it touches anything. Errors of the core's tree answer
``{"message": ...}`` with lakeFS's status (:mod:`.wire`); anything unexpected is a 500 with a
generic message and a log line, never a traceback.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Final

from aiohttp import web

from lakefs_core.auth.permissions import Node
from lakefs_core.errors import LakeFSError
from lakefs_core.repos.graveler import Graveler
from lakefs_core.repos.objects import Objects
from lakefs_server.rest.auth import Authenticator, Principal
from lakefs_server.rest.metrics import RestMetrics
from lakefs_server.rest.wire import error_json, message_of, status_of

log = logging.getLogger(__name__)

PUBLIC: Final = frozenset({"/healthcheck", "/auth/login"})


@dataclass(frozen=True)
class StorageInfo:
    """What ``/config/storage`` reports about the one block store of this server."""

    blockstore_type: str  # "local" | "s3" | "mem"
    namespace_example: str
    presign: bool = False
    default_namespace_prefix: str = ""


@dataclass
class RestDeps:
    """Everything the handlers use: the facade, object operations, authentication, what to report."""

    graveler: Graveler
    objects: Objects
    auth: Authenticator
    storage: StorageInfo
    version: str = "1.60.0"
    metrics: RestMetrics | None = None
    imports: dict[str, Any] = field(default_factory=dict)  # running and finished imports by id


DEPS: Final = web.AppKey("lakefs_rest_deps", RestDeps)


class Call:
    """One request as the handlers see it: the request, its principal, the dependencies."""

    def __init__(self, request: web.Request, principal: Principal | None, deps: RestDeps) -> None:
        self.request = request
        self.principal = principal
        self.deps = deps

    @property
    def username(self) -> str:
        return self.principal.username if self.principal is not None else ""

    def param(self, name: str) -> str:
        return self.request.match_info[name]

    async def authorize(self, node: Node) -> None:
        await self.deps.auth.store.authorize(self.username, node, {"SourceIp": self.request.remote or ""})


Handler = Callable[[Call], Awaitable[web.StreamResponse]]


def endpoint(handler: Handler, *, public: bool) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    operation = handler.__name__

    async def run(request: web.Request) -> web.StreamResponse:
        deps = request.app[DEPS]
        started = time.perf_counter()
        status = 500
        try:
            principal = None if public else await deps.auth.principal(request)
            response = await handler(Call(request, principal, deps))
            status = response.status
            return response
        except LakeFSError as e:
            status = status_of(e)
            raise
        except web.HTTPException as e:
            status = e.status
            raise
        finally:
            if deps.metrics is not None:
                deps.metrics.requests.labels(operation, str(status)).inc()
                deps.metrics.latency.labels(operation).observe(time.perf_counter() - started)

    run.__name__ = handler.__name__
    return run


@web.middleware
async def errors_middleware(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    try:
        return await handler(request)
    except LakeFSError as e:
        return error_json(status_of(e), message_of(e))
    except web.HTTPException as e:
        if e.status < 400:
            raise
        # No route is lakeFS's "invalid API endpoint" (api_mount.not_found's words too).
        message = "invalid API endpoint" if e.status == 404 else e.reason or "error"
        return error_json(e.status, message, headers={k: v for k, v in e.headers.items() if k == "Allow"})
    except Exception:
        log.exception("internal error serving %s %s", request.method, request.path[:200])
        return error_json(500, "internal error")


def build_api_app(deps: RestDeps) -> web.Application:
    """The ``/api/v1`` application (see the module)."""
    from lakefs_server.rest import import_ops, routes

    app = web.Application(middlewares=[errors_middleware], client_max_size=1024**2)
    app[DEPS] = deps
    app.on_shutdown.append(import_ops.stop_imports)
    for method, path, handler in routes.table():
        app.router.add_route(method, path, endpoint(handler, public=path in PUBLIC))
    return app
