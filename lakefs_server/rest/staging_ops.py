"""Presigned staging (lakeFS's ``staging/backing``) and presigned reads, where the store presigns
(S3 namespaces).

- ``GET .../staging/backing?path=`` issues a fresh address in the repository's namespace, journalled
  as an upload's (:meth:`~lakefs_core.repos.objects.Objects.stage_address`), with a presigned PUT
  URL when ``presign=true``;
- ``PUT .../staging/backing?path=`` links it: only an address issued for that branch and path, still
  pending, holding ``size_bytes`` bytes, is staged (the ETag is the store's); ``If-None-Match: *``
  and ``If-Match`` are checked atomically with the staging (:func:`preconditions`, shared with the
  upload). Differences from lakeFS:
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
from lakefs_core.errors import BadInputError, PreconditionFailedError
from lakefs_core.format.records import ValueRecord
from lakefs_core.repos.objects import ObjectStat
from lakefs_core.repos.staging_writes import Condition
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


def write_condition(none_match: str | None, match: str | None) -> Condition:
    """``If-None-Match: *`` (the path must not exist) and ``If-Match: <etag>`` (it must hold that
    object) as a check of the path's current entry (None: none), lakeFS's 412 messages."""

    def check(current: ValueRecord | None) -> None:
        if current is None:
            if match is not None:
                raise PreconditionFailedError("path does not exist")
            return
        if none_match is not None:
            raise PreconditionFailedError("path already exists")
        if match is not None and match.strip().strip('"') != ObjectStat.from_record(current).etag.strip('"'):
            raise PreconditionFailedError("the object's ETag does not match If-Match")

    return check


async def preconditions(call: Call, repo_id: str, branch: str, path: str) -> Condition | None:
    """The request's write condition (:func:`write_condition`; None: it has none), checked now
    against the branch (a refusal before the upload) and to be checked again by the staging."""
    headers = call.request.headers
    none_match, match = headers.get("If-None-Match"), headers.get("If-Match")
    if none_match is None and match is None:
        return None
    if none_match is not None and none_match.strip() != "*":
        raise BadInputError("only If-None-Match: * is supported", field="If-None-Match")
    condition = write_condition(none_match, match)
    await call.deps.objects.check_condition(repo_id, branch, path, condition)
    return condition


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
    condition = await preconditions(call, repo_id, branch, path)
    stat = await call.deps.objects.link(
        repo_id,
        branch,
        path,
        spec.staging.physical_address,
        size=spec.size_bytes,
        content_type=spec.content_type,
        metadata=spec.user_metadata,
        force=spec.force,
        condition=condition,
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
