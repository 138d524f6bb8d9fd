"""Presigned staging (lakeFS's ``staging/backing``) and presigned reads, where the store presigns
(S3 namespaces).

- ``GET .../staging/backing?path=`` issues a fresh address in the repository's namespace, journalled
  as an upload's (:meth:`~lakefs_core.repos.objects.Objects.stage_address`), with a presigned PUT
  URL when ``presign=true``;
- ``PUT .../staging/backing?path=`` links it: only an address issued for that branch and path, still
  pending, holding ``size_bytes`` bytes, is staged (the ETag is the store's). Differences from lakeFS:
  addresses outside the namespace are refused; the repository needs its hard-delete journal (the
  journal's intent is what proves an address was issued here);
- ``presign=true`` on ``getObject`` answers 302 to a presigned GET, on ``statObject`` puts the URL in
  ``physical_address`` (with ``physical_address_expiry``).

A local namespace cannot presign: these answer 400, and ``/config`` says ``pre_sign_support: false``
on a server without S3.
"""

from __future__ import annotations

import time
from typing import Final

from aiohttp import web
from pydantic import Field

from lakefs_core.auth import permissions as perms
from lakefs_core.errors import BadInputError, NotFoundError, PreconditionFailedError
from lakefs_core.repos.objects import ObjectStat
from lakefs_server.rest.app import Call
from lakefs_server.rest.models import RequestBody, body, object_json
from lakefs_server.rest.wire import query_bool

EXPIRES: Final = 15 * 60  # lakeFS's default presigned URL expiry


class StagingLocation(RequestBody):
    physical_address: str = Field(max_length=4096)


class StagingMetadata(RequestBody):
    staging: StagingLocation
    checksum: str = Field(max_length=1024)
    size_bytes: int = Field(ge=0)
    user_metadata: dict[str, str] | None = None
    content_type: str | None = Field(default=None, max_length=1024)
    force: bool = False


def _path(call: Call) -> str:
    path = call.request.query.get("path")
    if not path:
        raise BadInputError("missing", field="path")
    return path


def _write_node(call: Call, path: str) -> perms.Permission:
    return perms.Permission(perms.WRITE_OBJECT, perms.object_arn(call.param("repository"), path))


async def get_physical_address(call: Call) -> web.StreamResponse:
    path = _path(call)
    await call.authorize(_write_node(call, path))
    repo_id, branch = call.param("repository"), call.param("branch")
    staged = await call.deps.objects.stage_address(repo_id, branch, path)
    answer: dict[str, object] = {"physical_address": staged.full_address}
    if query_bool(call.request, "presign"):
        presign = getattr(staged.store, "presign", None)
        if presign is None:
            raise BadInputError("this repository's store cannot presign", field="presign")
        answer["presigned_url"] = await presign(staged.key, method="PUT", expires_seconds=EXPIRES)
        answer["presigned_url_expiry"] = int(time.time()) + EXPIRES
    return web.json_response(answer)


async def link_physical_address(call: Call) -> web.StreamResponse:
    path = _path(call)
    await call.authorize(_write_node(call, path))
    repo_id, branch = call.param("repository"), call.param("branch")
    spec = await body(call.request, StagingMetadata)
    if call.request.headers.get("If-None-Match", "").strip() == "*":
        try:
            await call.deps.objects.stat(repo_id, branch, path)
        except NotFoundError:
            pass
        else:
            raise PreconditionFailedError("path already exists")
    stat = await call.deps.objects.link(
        repo_id,
        branch,
        path,
        spec.staging.physical_address,
        size=spec.size_bytes,
        content_type=spec.content_type,
        metadata=spec.user_metadata,
        force=spec.force,
    )
    repo = await call.deps.graveler.recent_repository(repo_id)
    return web.json_response(object_json(repo.storage_namespace, stat))


async def presigned_read(call: Call, stat: ObjectStat) -> str:
    url = await call.deps.objects.presign_read(call.param("repository"), stat, expires_seconds=EXPIRES)
    if url is None:
        raise BadInputError("this repository's store cannot presign", field="presign")
    return url


R = "/repositories/{repository}/branches/{branch}/staging/backing"
ROUTES = [("GET", R, get_physical_address), ("PUT", R, link_physical_address)]
