"""The HTTP platform every daemon serves its API on (see :mod:`lakefs_core.service.http.app`).

- :mod:`lakefs_core.service.http.app`: :func:`build_app` (auth, error mapping by ``http_status``,
  ``/metrics``, ``/_health``, ``/_ready``, ``/openapi.json``, build info);
- :mod:`lakefs_core.service.http.openapi`: the :class:`Route` table and the generated OpenAPI document;
- :mod:`lakefs_core.service.http.body`: hostile request input into pydantic models;
- :mod:`lakefs_core.service.http.runner`: :class:`ApiRunner`, JSON answers to what aiohttp's parser rejects.
"""

from lakefs_core.service.http.app import (
    MAX_BODY_BYTES,
    ErrorBody,
    ReadinessProbe,
    ServiceSpec,
    access_key_id,
    build_app,
    error_response,
)
from lakefs_core.service.http.body import UnreadableBodyError, json_object, parse_model
from lakefs_core.service.http.openapi import Route, openapi_document
from lakefs_core.service.http.runner import ApiRunner, serve_api

__all__ = [
    "MAX_BODY_BYTES",
    "ApiRunner",
    "ErrorBody",
    "ReadinessProbe",
    "Route",
    "ServiceSpec",
    "UnreadableBodyError",
    "access_key_id",
    "build_app",
    "error_response",
    "json_object",
    "openapi_document",
    "parse_model",
    "serve_api",
]
