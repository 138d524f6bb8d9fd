"""lakeFS's REST API (``/api/v1``) over the Graveler facade.

:func:`create_app` is the factory :mod:`lakefs_server.api_mount` mounts on the S3 listener;
:func:`~lakefs_server.rest.app.build_api_app` builds the same application from explicit dependencies.
"""

from __future__ import annotations

from aiohttp import web

from lakefs_server.context import ServerContext
from lakefs_server.rest.app import RestDeps, StorageInfo, build_api_app
from lakefs_server.rest.auth import Authenticator
from lakefs_server.rest.metrics import RestMetrics

__all__ = ["Authenticator", "RestDeps", "StorageInfo", "build_api_app", "create_app", "storage_info"]


def storage_info(ctx: ServerContext) -> StorageInfo:
    """What ``/config/storage`` reports: S3 (presigning) when the core has an S3 endpoint or region
    configured (``local://`` namespaces are still accepted, and cannot presign), else the local
    store (no presigning)."""
    s3 = ctx.config.core.s3
    if s3.endpoint_url is not None or s3.region is not None:
        return StorageInfo("s3", "s3://example-bucket/prefix", presign=True)
    return StorageInfo("local", "local:///path/to/namespace")


def create_app(ctx: ServerContext) -> web.Application:
    secret = ctx.config.auth.encrypt.secret_key
    if secret is None:  # the configuration requires it; a context built otherwise is a bug
        raise ValueError("auth.encrypt.secret_key is required")
    deps = RestDeps(
        ctx.graveler,
        ctx.objects,
        Authenticator(
            ctx.auth, secret.get_secret_value().encode(), cache_seconds=ctx.config.auth.cache_seconds
        ),
        storage_info(ctx),
        metrics=RestMetrics(ctx.metrics.registry),
    )
    return build_api_app(deps)
