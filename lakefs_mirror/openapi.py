"""The OpenAPI 3.0 document of the mirroring API (served at ``GET /openapi.json``).

The document is the contract the server enforces: every pattern, bound, enum and
``additionalProperties: false`` below is checked by :mod:`lakefs_mirror.api` with the same
constants (so a request valid by the schema is never refused as malformed, and one invalid by the
schema never accepted). ``region`` is an enum of the configured regions, so the document is built per
configuration by :func:`openapi_document`.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Sequence
from typing import Any

from lakefs_mirror.db import MAX_BRANCH_FILTER, MAX_GLOB_LENGTH, MIRROR_MODES, STATUS_KINDS

__all__ = [
    "AFTER_PATTERN",
    "API_PREFIX",
    "GLOB_PATTERN",
    "MAX_AMOUNT",
    "MAX_NAMESPACE_LENGTH",
    "MAX_VERSION",
    "MIRROR_ID_PATTERN",
    "NAMESPACE_PATTERN",
    "REPO_ID_PATTERN",
    "fullmatch",
    "openapi_document",
]

API_PREFIX = "/service/replication/v1"

REPO_ID_PATTERN = "^[a-z0-9][a-z0-9-]{2,62}$"
MIRROR_ID_PATTERN = "^[0-9a-f]{32}$"
AFTER_PATTERN = "^[0-9a-f]{0,32}$"
GLOB_PATTERN = "^[^\\x00]+$"
_SEGMENTS = "(/[A-Za-z0-9_-][A-Za-z0-9._-]*)"
NAMESPACE_PATTERN = (
    f"^s3://[A-Za-z0-9][A-Za-z0-9._-]{{1,253}}[A-Za-z0-9]{_SEGMENTS}*/?$|^local://{_SEGMENTS}+/?$"
)
MAX_NAMESPACE_LENGTH = 1024
MAX_VERSION = 2**31 - 1
MAX_AMOUNT = 1000

_compiled: dict[str, re.Pattern[str]] = {}


def fullmatch(pattern: str, value: str) -> bool:
    """Does ``value`` match the schema ``pattern`` as ECMA-262 reads it (``$`` only at the very end)?"""
    compiled = _compiled.get(pattern)
    if compiled is None:
        compiled = _compiled[pattern] = re.compile(pattern)
    return compiled.fullmatch(value) is not None


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(schema: dict[str, Any]) -> dict[str, Any]:
    return {"application/json": {"schema": schema}}


def _error(description: str, headers: dict[str, Any] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"description": description, "content": _json(_ref("Error"))}
    if headers:
        out["headers"] = headers
    return out


_UNAUTHORIZED = _error(
    "Missing or wrong credentials (HTTP basic auth with a configured access key id and secret).",
    {"WWW-Authenticate": {"description": "Basic challenge", "schema": {"type": "string"}, "required": True}},
)
_UNAVAILABLE = _error("The mirrors database or the source region's KV store is temporarily unreachable.")


def _responses(ok: dict[str, Any], *codes: str) -> dict[str, Any]:
    table = {
        "400": _error("Malformed request; `field` names the offending parameter or body field."),
        "401": _UNAUTHORIZED,
        "404": _error("No such source repository or mirror."),
        "409": _error("Conflicts with the current state; `field` names what collided."),
        "503": _UNAVAILABLE,
    }
    out = dict(ok)
    for code in codes:
        out[code] = table[code]
    return out


def _path_param(name: str, pattern: str, description: str) -> dict[str, Any]:
    return {
        "name": name,
        "in": "path",
        "required": True,
        "description": description,
        "schema": {"type": "string", "pattern": pattern},
    }


def _schemas(regions: Sequence[str]) -> dict[str, Any]:
    glob = {"type": "string", "minLength": 1, "maxLength": MAX_GLOB_LENGTH, "pattern": GLOB_PATTERN}
    branch_filter = {
        "type": "array",
        "minItems": 1,
        "maxItems": MAX_BRANCH_FILTER,
        "items": glob,
        "description": "fnmatch globs; a branch (or tag) is mirrored when any glob matches its name.",
    }
    namespace = {
        "type": "string",
        "maxLength": MAX_NAMESPACE_LENGTH,
        "pattern": NAMESPACE_PATTERN,
        "description": "Destination storage namespace: s3://bucket/prefix or local:///abs/path (durable; not mem://)",
    }
    region = {"type": "string", "enum": list(regions), "description": "A configured region."}
    mode = {
        "type": "string",
        "enum": list(MIRROR_MODES),
        "description": "native: wait for S3 Replication; active: also copy objects it has not delivered "
        "after the grace period.",
    }
    timestamp = {"type": "string", "format": "date-time"}
    nullable_timestamp = {"type": "string", "format": "date-time", "nullable": True}
    nullable_string = {"type": "string", "nullable": True}
    count = {"type": "integer", "minimum": 0}
    mirror_props: dict[str, Any] = {
        "id": {"type": "string", "pattern": MIRROR_ID_PATTERN},
        "source_repo": {"type": "string", "pattern": REPO_ID_PATTERN},
        "source_region": {"type": "string"},
        "name": {"type": "string", "pattern": REPO_ID_PATTERN},
        "region": {"type": "string"},
        "storage_namespace": {"type": "string"},
        "branch_filter": {"type": "array", "items": {"type": "string"}},
        "paused": {"type": "boolean"},
        "mode": {"type": "string", "enum": list(MIRROR_MODES)},
        "mirror_tags": {"type": "boolean"},
        "created_at": timestamp,
        "updated_at": timestamp,
        "resync_requested_at": nullable_timestamp,
        "version": {"type": "integer", "minimum": 1},
    }
    status_props: dict[str, Any] = {
        "kind": {"type": "string", "enum": list(STATUS_KINDS)},
        "name": {"type": "string", "description": "Branch or tag name."},
        "source_head": nullable_string,
        "mirror_head": nullable_string,
        "candidate": {**nullable_string, "description": "Source commit being validated."},
        "missing_objects": count,
        "missing_ranges": count,
        "external_objects": count,
        "lag_seconds": {"type": "number", "nullable": True},
        "last_promotion_at": nullable_timestamp,
        "last_checked_at": nullable_timestamp,
        "last_error": nullable_string,
    }
    leader_props: dict[str, Any] = {
        "holder": {"type": "string"},
        "expires_at": timestamp,
        "live": {"type": "boolean"},
    }
    leader = {
        "type": "object",
        "required": list(leader_props),
        "additionalProperties": False,
        "properties": leader_props,
        "description": "The destination region's daemon holding the region lease (null: none yet).",
    }
    return {
        "Error": {
            "type": "object",
            "required": ["message"],
            "additionalProperties": False,
            "properties": {"message": {"type": "string"}, "field": {"type": "string"}},
        },
        "MirrorCreation": {
            "type": "object",
            "required": ["name", "region", "storage_namespace"],
            "additionalProperties": False,
            "properties": {
                "name": {
                    "type": "string",
                    "pattern": REPO_ID_PATTERN,
                    "description": "Id of the read-only mirror repository in the destination region.",
                },
                "region": region,
                "storage_namespace": namespace,
                "branch_filter": branch_filter,
                "paused": {"type": "boolean"},
                "mode": mode,
                "mirror_tags": {"type": "boolean"},
            },
        },
        "MirrorUpdate": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "branch_filter": branch_filter,
                "paused": {"type": "boolean"},
                "mode": mode,
                "mirror_tags": {"type": "boolean"},
                "version": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": MAX_VERSION,
                    "description": "Apply only if the mirror is still at this version (else 409).",
                },
            },
        },
        "Mirror": {
            "type": "object",
            "required": list(mirror_props),
            "additionalProperties": False,
            "properties": mirror_props,
        },
        "Pagination": {
            "type": "object",
            "required": ["has_more", "next_offset", "results", "max_per_page"],
            "additionalProperties": False,
            "properties": {
                "has_more": {"type": "boolean"},
                "next_offset": {"type": "string"},
                "results": {"type": "integer", "minimum": 0},
                "max_per_page": {"type": "integer", "minimum": 1},
            },
        },
        "MirrorList": {
            "type": "object",
            "required": ["results", "pagination"],
            "additionalProperties": False,
            "properties": {
                "results": {"type": "array", "items": _ref("Mirror")},
                "pagination": _ref("Pagination"),
            },
        },
        "BranchStatus": {
            "type": "object",
            "required": list(status_props),
            "additionalProperties": False,
            "properties": status_props,
        },
        "MirrorStatus": {
            "type": "object",
            "required": ["mirror", "destination_leader", "results"],
            "additionalProperties": False,
            "properties": {
                "mirror": _ref("Mirror"),
                "destination_leader": {**leader, "nullable": True},
                "results": {"type": "array", "items": _ref("BranchStatus")},
            },
        },
        "Health": {
            "type": "object",
            "required": ["status", "region"],
            "additionalProperties": False,
            "properties": {
                "status": {"type": "string", "enum": ["ok", "unavailable"]},
                "region": {"type": "string"},
                "message": {"type": "string"},
            },
        },
    }


def openapi_document(regions: Sequence[str], *, this_region: str, version: str = "0.1.0") -> dict[str, Any]:
    """The OpenAPI 3.0.3 document for a daemon in ``this_region`` with ``regions`` configured."""
    source_repo = _path_param(
        "source_repo", REPO_ID_PATTERN, f"Source repository (in this daemon's region, {this_region})."
    )
    mirror_id = _path_param("mirror_id", MIRROR_ID_PATTERN, "Mirror id, as returned on creation.")
    mirrors = f"{API_PREFIX}/repositories/{{source_repo}}/mirrors"
    one = f"{mirrors}/{{mirror_id}}"
    by_id = {
        "source_repo": "$request.path.source_repo",
        "mirror_id": "$response.body#/id",
    }
    links = {
        "GetMirror": {"operationId": "getMirror", "parameters": by_id},
        "UpdateMirror": {"operationId": "updateMirror", "parameters": by_id},
        "GetMirrorStatus": {"operationId": "getMirrorStatus", "parameters": by_id},
        "ResyncMirror": {"operationId": "resyncMirror", "parameters": by_id},
        "DeleteMirror": {"operationId": "deleteMirror", "parameters": by_id},
    }
    mirror_ok = {"description": "The mirror.", "content": _json(_ref("Mirror"))}
    paths: dict[str, Any] = {
        "/_health": {
            "get": {
                "operationId": "health",
                "summary": "Liveness and mirrors-database reachability (no authentication).",
                "security": [],
                "responses": {
                    "200": {"description": "Healthy.", "content": _json(_ref("Health"))},
                    "503": {"description": "Mirrors database unreachable.", "content": _json(_ref("Health"))},
                },
            }
        },
        "/metrics": {
            "get": {
                "operationId": "metrics",
                "summary": "Prometheus metrics, text exposition format (no authentication).",
                "security": [],
                "responses": {
                    "200": {
                        "description": "Metrics.",
                        "content": {"text/plain": {"schema": {"type": "string"}}},
                    }
                },
            }
        },
        "/openapi.json": {
            "get": {
                "operationId": "openapi",
                "summary": "This document (no authentication).",
                "security": [],
                "responses": {
                    "200": {"description": "OpenAPI 3.0 document.", "content": _json({"type": "object"})}
                },
            }
        },
        mirrors: {
            "parameters": [source_repo],
            "post": {
                "operationId": "createMirror",
                "summary": "Create a mirror of the source repository in another (or this) region (lakeFS).",
                "requestBody": {"required": True, "content": _json(_ref("MirrorCreation"))},
                "responses": _responses(
                    {"201": {**mirror_ok, "description": "Created.", "links": links}},
                    "400",
                    "401",
                    "404",
                    "409",
                    "503",
                ),
            },
            "get": {
                "operationId": "listMirrors",
                "summary": "List the mirrors of the source repository, by id (lakeFS).",
                "parameters": [
                    {
                        "name": "after",
                        "in": "query",
                        "required": False,
                        "description": "Return mirrors whose id sorts after this one.",
                        "schema": {"type": "string", "pattern": AFTER_PATTERN},
                    },
                    {
                        "name": "amount",
                        "in": "query",
                        "required": False,
                        "description": "Page size.",
                        "schema": {
                            "type": "integer",
                            "minimum": 1,
                            "maximum": MAX_AMOUNT,
                            "default": MAX_AMOUNT,
                        },
                    },
                ],
                "responses": _responses(
                    {"200": {"description": "A page of mirrors.", "content": _json(_ref("MirrorList"))}},
                    "400",
                    "401",
                    "404",
                    "503",
                ),
            },
        },
        one: {
            "parameters": [source_repo, mirror_id],
            "get": {
                "operationId": "getMirror",
                "summary": "One mirror (lakeFS).",
                "responses": _responses({"200": mirror_ok}, "400", "401", "404", "503"),
            },
            "patch": {
                "operationId": "updateMirror",
                "summary": "Change branch filter, pause, mode or tag mirroring (optionally at a version).",
                "requestBody": {"required": True, "content": _json(_ref("MirrorUpdate"))},
                "responses": _responses({"200": mirror_ok}, "400", "401", "404", "409", "503"),
            },
            "delete": {
                "operationId": "deleteMirror",
                "summary": "Delete the mirror and its status (lakeFS).",
                "responses": _responses({"204": {"description": "Deleted."}}, "400", "401", "404", "503"),
            },
        },
        f"{one}/status": {
            "parameters": [source_repo, mirror_id],
            "get": {
                "operationId": "getMirrorStatus",
                "summary": "Per branch/tag: heads, candidate, missing objects and ranges, lag, errors.",
                "responses": _responses(
                    {"200": {"description": "Status.", "content": _json(_ref("MirrorStatus"))}},
                    "400",
                    "401",
                    "404",
                    "503",
                ),
            },
        },
        f"{one}/resync": {
            "parameters": [source_repo, mirror_id],
            "post": {
                "operationId": "resyncMirror",
                "summary": "Ask the destination daemon to re-check every branch from scratch.",
                "responses": _responses(
                    {"202": {**mirror_ok, "description": "Resync requested."}},
                    "400",
                    "401",
                    "404",
                    "503",
                ),
            },
        },
    }
    return copy.deepcopy(
        {
            "openapi": "3.0.3",
            "info": {
                "title": "lakefs-mirror replication API",
                "version": version,
                "description": (
                    "lakeFS-compatible transactional mirroring API of one region's daemon (this one: "
                    f"{this_region}). The four lakeFS calls (create, list, get, delete mirrors) work "
                    "unchanged; status, update and resync go beyond lakeFS. All /service routes need "
                    "HTTP basic auth; /_health, /metrics and /openapi.json do not. Errors are JSON "
                    '{"message", "field"}.'
                ),
            },
            "paths": paths,
            "components": {
                "schemas": _schemas(regions),
                "securitySchemes": {"basicAuth": {"type": "http", "scheme": "basic"}},
            },
            "security": [{"basicAuth": []}],
        }
    )
