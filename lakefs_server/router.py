"""The S3 listener's application: which requests are S3, which are lakeFS's REST API.

lakeFS's routing rule, kept: a request is S3 when it carries an AWS signature (header or query,
:func:`lakefs_core.auth.signature.is_aws_signed`) or its Host is a configured ``domain_names`` entry
or under one (virtual-host style). Otherwise a path under ``/api/v1`` is the REST API, mounted from
``lakefs_server.rest`` (:mod:`lakefs_server.api_mount`; a lakeFS-style JSON 404 while it is absent),
and any other path is S3 too (an anonymous S3 request is answered AccessDenied in XML; lakeFS would
serve its web UI there, which this server has not).

The routing decision is a middleware of the top application, so it runs before the REST API's own
middlewares and an AWS-signed ``/api/v1/...`` (a bucket named ``api``) still reaches S3. The S3
handler streams request bodies itself, so aiohttp's ``client_max_size`` limits the REST API only.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web

from lakefs_core.auth.signature import is_aws_signed
from lakefs_core.errors import BadRequestError
from lakefs_server import api_mount
from lakefs_server.context import ServerContext
from lakefs_server.gateway import operations as _operations  # registers the operations
from lakefs_server.gateway.handler import handle, signed_request
from lakefs_server.gateway.target import bucket_of_host

__all__ = ["create_s3_app", "is_s3_request"]

del _operations
REST_MAX_BODY_BYTES = 16 * 1024 * 1024  # lakeFS's JSON bodies; object uploads go through S3


def is_s3_request(request: web.Request, domains: list[str]) -> bool:
    """lakeFS's rule (see the module): AWS-signed, or a Host under a configured domain, or not the API."""
    host_bucket, under_domain = bucket_of_host(request.host, domains)
    if under_domain:
        return True
    try:
        if is_aws_signed(signed_request(request, host_bucket)):
            return True
    except BadRequestError:
        return True  # too long to be an API request; S3 answers it in XML
    path = request.raw_path
    return not (
        path == api_mount.API_PREFIX
        or path.startswith((api_mount.API_PREFIX + "/", api_mount.API_PREFIX + "?"))
    )


def create_s3_app(ctx: ServerContext) -> web.Application:
    """The listener's application (see the module)."""
    domains = ctx.config.gateway.domain_names

    async def s3(request: web.Request) -> web.StreamResponse:
        return await handle(ctx, request)

    @web.middleware
    async def route(
        request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        if is_s3_request(request, domains):
            return await s3(request)
        return await handler(request)

    app = web.Application(middlewares=[route], client_max_size=REST_MAX_BODY_BYTES)
    rest = api_mount.rest_app(ctx)
    if rest is not None:
        app.add_subapp(api_mount.API_PREFIX, rest)
    else:
        app.router.add_route("*", api_mount.API_PREFIX + "{tail:(/.*)?}", api_mount.not_found)
    app.router.add_route("*", "/{tail:.*}", s3)
    return app
