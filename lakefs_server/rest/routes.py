"""The route table: every served operation, by lakeFS's method and path under ``/api/v1``."""

from __future__ import annotations

from lakefs_server.rest import (
    import_ops,
    objects_ops,
    protection,
    refs_ops,
    repos_ops,
    setup_ops,
    staging_ops,
)
from lakefs_server.rest.app import Handler


def table() -> list[tuple[str, str, Handler]]:
    return [
        *setup_ops.ROUTES,
        *repos_ops.ROUTES,
        *protection.ROUTES,
        *refs_ops.ROUTES,
        *objects_ops.ROUTES,
        *import_ops.ROUTES,
        *staging_ops.ROUTES,
    ]
