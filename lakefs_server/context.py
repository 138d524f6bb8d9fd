"""What a request handler of either API (the S3 gateway, lakeFS's REST API) works with.

:class:`ServerContext` is built once per process by :mod:`lakefs_server.service` and handed to
:func:`lakefs_server.router.create_s3_app` and to the REST API's factory (:mod:`lakefs_server.api_mount`).
It holds no per-request state; its caches (the auth store's, the core's table cache) are the only
per-instance state of the server, so several instances on one KV store answer alike.
"""

from __future__ import annotations

from dataclasses import dataclass

from lakefs_core.auth.store import AuthStore
from lakefs_core.repos.graveler import Graveler
from lakefs_core.repos.objects import Objects
from lakefs_core.wiring import Core
from lakefs_server.config import ServerConfig
from lakefs_server.metrics import ServerMetrics

__all__ = ["ServerContext"]


@dataclass
class ServerContext:
    """One server process's shared objects (see the module docstring)."""

    config: ServerConfig
    core: Core
    auth: AuthStore
    metrics: ServerMetrics

    @property
    def graveler(self) -> Graveler:
        return self.core.graveler

    @property
    def objects(self) -> Objects:
        return self.core.objects
