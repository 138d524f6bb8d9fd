"""lakeFS's REST API (``/api/v1``) over the Graveler facade: :func:`build_api_app`."""

from lakefs_server.rest.app import RestDeps, StorageInfo, build_api_app
from lakefs_server.rest.auth import Authenticator

__all__ = ["Authenticator", "RestDeps", "StorageInfo", "build_api_app"]
