"""Where lakeFS's REST API (``/api/v1``) is mounted on the S3 listener.

The REST API lives in ``lakefs_server.rest``. That package publishes one factory::

    def create_app(ctx: lakefs_server.context.ServerContext) -> aiohttp.web.Application

:func:`rest_app` calls it when the package is installed; until then (or when it is absent)
:func:`rest_app` returns ``None`` and the router answers ``/api/v1/...`` with lakeFS's JSON 404
(:func:`not_found`). The package is looked up by name, so the router does not depend on it at import
time and a server without it still starts.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import cast

from aiohttp import web

from lakefs_server.context import ServerContext

__all__ = ["API_PREFIX", "REST_MODULE", "not_found", "rest_app"]

API_PREFIX = "/api/v1"
REST_MODULE = "lakefs_server.rest"


def rest_app(ctx: ServerContext) -> web.Application | None:
    """The REST API's application (mounted under :data:`API_PREFIX`), or ``None`` without one."""
    try:
        module = importlib.import_module(REST_MODULE)
    except ModuleNotFoundError as e:
        if e.name != REST_MODULE:
            raise  # the package exists but something it imports does not: a real error
        return None
    factory = cast(Callable[[ServerContext], web.Application], module.create_app)
    return factory(ctx)


async def not_found(request: web.Request) -> web.Response:
    """lakeFS's answer to an API path it does not serve: 404 with ``{"message": ...}``."""
    return web.json_response({"message": "invalid API endpoint"}, status=404)
