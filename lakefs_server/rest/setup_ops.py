"""Setup operations: configuration, version, storage, health, the current user and login."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from lakefs_core.auth import permissions as perms
from lakefs_server.rest.app import Call
from lakefs_server.rest.auth import COOKIE
from lakefs_server.rest.models import LoginInformation, body
from lakefs_server.rest.wire import unix

NAMESPACE_REGEX = "^(local|s3)://"


def _version(call: Call) -> dict[str, Any]:
    return {
        "version": call.deps.version,
        "version_context": "lakeFS",
        "latest_version": call.deps.version,
        "upgrade_recommended": False,
        "upgrade_url": "",
    }


def _storage(call: Call) -> dict[str, Any]:
    info = call.deps.storage
    regex = NAMESPACE_REGEX
    return {
        "blockstore_type": info.blockstore_type,
        "blockstore_namespace_example": info.namespace_example,
        "blockstore_namespace_ValidityRegex": regex,
        "default_namespace_prefix": info.default_namespace_prefix,
        "pre_sign_support": info.presign,
        "pre_sign_support_ui": info.presign,
        "import_support": True,
        "import_validity_regex": regex,
        "pre_sign_multipart_upload": False,
        "blockstore_id": "",
        "blockstore_description": "",
    }


async def healthcheck(call: Call) -> web.StreamResponse:
    return web.Response(status=204)


async def get_config(call: Call) -> web.StreamResponse:
    await call.authorize(perms.Permission(perms.READ_CONFIG, perms.ALL))
    return web.json_response(
        {"version_config": _version(call), "storage_config": _storage(call), "storage_config_list": []}
    )


async def get_version(call: Call) -> web.StreamResponse:
    return web.json_response(_version(call))


async def get_storage_config(call: Call) -> web.StreamResponse:
    await call.authorize(perms.Permission(perms.READ_CONFIG, perms.ALL))
    return web.json_response(_storage(call))


async def get_current_user(call: Call) -> web.StreamResponse:
    assert call.principal is not None
    user = call.principal.user
    return web.json_response(
        {
            "user": {
                "id": user.username,
                "creation_date": unix(user.created_at),
                "friendly_name": user.friendly_name or None,
                "email": user.email or None,
            }
        }
    )


async def login(call: Call) -> web.StreamResponse:
    info = await body(call.request, LoginInformation)
    user = await call.deps.auth.check_key(info.access_key_id, info.secret_access_key)
    token, expires = call.deps.auth.issue(user.username)
    response = web.json_response({"token": token, "token_expiration": expires})
    response.set_cookie(COOKIE, token, httponly=True, samesite="Strict", path="/")
    return response


ROUTES = [
    ("GET", "/healthcheck", healthcheck),
    ("GET", "/config", get_config),
    ("GET", "/config/version", get_version),
    ("GET", "/config/storage", get_storage_config),
    ("GET", "/user", get_current_user),
    ("POST", "/auth/login", login),
]
