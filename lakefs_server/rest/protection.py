"""Branch protection rules and repository metadata over REST.

The rules are the facade's (:meth:`~lakefs_core.repos.graveler.Graveler.get_branch_protection`):
lakeFS's ``BranchProtectionRules`` stored as lakeFS stores them, enforced by the facade on every
staging write and commit (merges into a protected branch are how it changes, as in lakeFS), their
ETag lakeFS's checksum; an update with ``If-Match`` is compare-and-swap on it. Repository metadata
is a repository setting stored through the facade as JSON, updated by compare-and-swap on the bytes
read.
"""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from lakefs_core.auth import permissions as perms
from lakefs_core.errors import BadInputError, CorruptDataError
from lakefs_core.repos.protection import Rules
from lakefs_server.rest.app import Call
from lakefs_server.rest.models import BranchProtectionRule

METADATA = "metadata"
MAX_RULES = 100
MAX_METADATA = 1 << 16


def _decode(raw: bytes | None, name: str) -> Any:
    if raw is None:
        return None
    try:
        return json.loads(raw)
    except ValueError as e:
        raise CorruptDataError(f"repository setting {name} is not JSON") from e


async def get_rules(call: Call) -> web.StreamResponse:
    repo_id = call.param("repository")
    await call.authorize(perms.Permission(perms.GET_BRANCH_PROTECTION_RULES, perms.repo_arn(repo_id)))
    rules, etag = await call.deps.graveler.get_branch_protection(repo_id)
    return web.json_response([{"pattern": p} for p in rules.rules], headers={"ETag": etag})


async def set_rules(call: Call) -> web.StreamResponse:
    repo_id = call.param("repository")
    await call.authorize(perms.Permission(perms.SET_BRANCH_PROTECTION_RULES, perms.repo_arn(repo_id)))
    data = await call.request.json() if call.request.can_read_body else None
    if not isinstance(data, list) or len(data) > MAX_RULES:
        raise BadInputError(f"must be a list of at most {MAX_RULES} rules", field="body")
    patterns = sorted({BranchProtectionRule.model_validate(item).pattern for item in data})
    if_match = call.request.headers.get("If-Match")
    etag = None if if_match is None else if_match.strip().strip('"')
    await call.deps.graveler.set_branch_protection(repo_id, Rules.of(patterns), etag)
    return web.Response(status=204)


async def get_metadata(call: Call) -> web.StreamResponse:
    repo_id = call.param("repository")
    await call.authorize(perms.Permission(perms.READ_REPOSITORY, perms.repo_arn(repo_id)))
    return web.json_response(_decode(await call.deps.graveler.setting(repo_id, METADATA), METADATA) or {})


async def _update_metadata(call: Call, change: Any) -> web.StreamResponse:
    repo_id = call.param("repository")
    await call.authorize(perms.Permission(perms.UPDATE_REPOSITORY, perms.repo_arn(repo_id)))
    data = await call.request.json() if call.request.can_read_body else None
    if not isinstance(data, dict):
        raise BadInputError("must be a JSON object", field="body")
    raw = await call.deps.graveler.setting(repo_id, METADATA)
    current: dict[str, str] = _decode(raw, METADATA) or {}
    updated = change(current, data)
    encoded = json.dumps(updated, sort_keys=True).encode()
    if len(encoded) > MAX_METADATA:
        raise BadInputError("repository metadata too large", field="metadata")
    await call.deps.graveler.set_setting(repo_id, METADATA, encoded, raw)
    return web.Response(status=204)


def _set(current: dict[str, str], data: dict[str, Any]) -> dict[str, str]:
    meta = data.get("metadata")
    if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
        raise BadInputError("must map names to strings", field="metadata")
    return {**current, **meta}


def _delete(current: dict[str, str], data: dict[str, Any]) -> dict[str, str]:
    keys = data.get("keys")
    if not isinstance(keys, list):
        raise BadInputError("must be a list of names", field="keys")
    return {k: v for k, v in current.items() if k not in keys}


async def set_metadata(call: Call) -> web.StreamResponse:
    return await _update_metadata(call, _set)


async def delete_metadata(call: Call) -> web.StreamResponse:
    return await _update_metadata(call, _delete)


R = "/repositories/{repository}"
ROUTES = [
    ("GET", R + "/settings/branch_protection", get_rules),
    ("PUT", R + "/settings/branch_protection", set_rules),
    ("GET", R + "/metadata", get_metadata),
    ("POST", R + "/metadata", set_metadata),
    ("DELETE", R + "/metadata", delete_metadata),
]
