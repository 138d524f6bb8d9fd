"""Branch protection rules and repository metadata: settings of a repository, stored through the
facade (:meth:`~lakefs_core.repos.graveler.Graveler.setting`) as JSON.

A protected branch refuses staging writes and commits (403, lakeFS's messages); a rule's pattern
matches as lakeFS's (``*`` any run of characters, ``?`` one). Rules are read per process at most once
a second: a new rule holds for every write that starts a second after it is set. Updates are
compare-and-swap against the ETag the reader got (``If-Match``), as lakeFS's.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import time
from typing import Any

from aiohttp import web

from lakefs_core.auth import permissions as perms
from lakefs_core.errors import BadInputError, CorruptDataError, PreconditionFailedError
from lakefs_server.rest.app import Call
from lakefs_server.rest.models import BranchProtectionRule
from lakefs_server.rest.wire import ProtectedBranchError

CACHE_SECONDS = 1.0
PROTECTION = "branch_protection"
METADATA = "metadata"
MAX_RULES = 100
MAX_METADATA = 1 << 16
_cache: dict[tuple[int, str], tuple[float, tuple[str, ...]]] = {}

__all__ = ["ProtectedBranchError", "check", "matches"]


def matches(patterns: tuple[str, ...], branch: str) -> bool:
    return any(fnmatch.fnmatchcase(branch, p) for p in patterns)


def _etag(raw: bytes | None) -> str:
    return hashlib.md5(raw or b"", usedforsecurity=False).hexdigest()


def _decode(raw: bytes | None, name: str) -> Any:
    if raw is None:
        return None
    try:
        return json.loads(raw)
    except ValueError as e:
        raise CorruptDataError(f"repository setting {name} is not JSON") from e


async def check(call: Call, repo_id: str, branch: str, *, commit: bool = False) -> None:
    """Refuse a write (``commit``: a commit) to a protected branch."""
    key = (id(call.deps), repo_id)
    now = time.monotonic()
    cached = _cache.get(key)
    if cached is None or now - cached[0] > CACHE_SECONDS:
        rules = _decode(await call.deps.graveler.setting(repo_id, PROTECTION), PROTECTION) or []
        cached = (now, tuple(str(r) for r in rules))
        _cache[key] = cached
    if matches(cached[1], branch):
        what = "commit to" if commit else "write to"
        raise ProtectedBranchError(f"cannot {what} protected branch")


async def get_rules(call: Call) -> web.StreamResponse:
    repo_id = call.param("repository")
    await call.authorize(perms.Permission(perms.GET_BRANCH_PROTECTION_RULES, perms.repo_arn(repo_id)))
    raw = await call.deps.graveler.setting(repo_id, PROTECTION)
    rules = _decode(raw, PROTECTION) or []
    return web.json_response([{"pattern": p} for p in rules], headers={"ETag": _etag(raw)})


async def set_rules(call: Call) -> web.StreamResponse:
    repo_id = call.param("repository")
    await call.authorize(perms.Permission(perms.SET_BRANCH_PROTECTION_RULES, perms.repo_arn(repo_id)))
    data = await call.request.json() if call.request.can_read_body else None
    if not isinstance(data, list) or len(data) > MAX_RULES:
        raise BadInputError(f"must be a list of at most {MAX_RULES} rules", field="body")
    patterns = sorted({BranchProtectionRule.model_validate(item).pattern for item in data})
    raw = await call.deps.graveler.setting(repo_id, PROTECTION)
    if_match = call.request.headers.get("If-Match")
    if if_match is not None and if_match.strip('"') != _etag(raw):
        raise PreconditionFailedError("branch protection rules changed since they were read")
    await call.deps.graveler.set_setting(repo_id, PROTECTION, json.dumps(patterns).encode(), raw)
    _cache.pop((id(call.deps), repo_id), None)
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
