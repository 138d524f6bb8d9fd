"""Objects: upload (raw body or multipart form), get with one Range, head, stat, list, delete,
delete many, copy (lakeFS's object operations).

- Upload streams the body into :meth:`~lakefs_core.repos.objects.Objects.upload` (never held whole);
  ``x-lakefs-meta-<name>`` headers become user metadata; ``If-None-Match: *`` refuses an existing
  path and ``If-Match: <etag>`` another object with 412, checked before the upload and again
  atomically with the staging (the facade's conditional write): of racing conditional uploads of
  one path exactly one wins.
- Get answers one byte range (``Range: bytes=a-b``, ``a-``, ``-n``) with 206 and ``Content-Range``,
  416 with ``Content-Range: bytes */size`` when the range starts past the end; the bytes stream in
  chunks (flat memory for any size).
- Delete many takes at most 1,000 paths; a missing path is not an error; a refused path is that
  path's error (lakeFS's ``ObjectErrorList``).
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any, Final

from aiohttp import BodyPartReader, web

from lakefs_core.auth import permissions as perms
from lakefs_core.errors import BadInputError, LakeFSError, encode_utf8
from lakefs_core.repos.objects import ObjectStat
from lakefs_core.repos.staging_writes import Condition
from lakefs_server.rest.app import Call
from lakefs_server.rest.models import (
    ObjectCopyCreation,
    PathList,
    UserMetadataUpdate,
    body,
    object_json,
    prefix_json,
)
from lakefs_server.rest.staging_ops import EXPIRES, preconditions, presigned_read
from lakefs_server.rest.wire import amount_of, message_of, page, query_bool, status_of

log = logging.getLogger(__name__)

META_PREFIX: Final = "x-lakefs-meta-"
CHUNK: Final = 1 << 20
MAX_META: Final = 2048
_RANGE = re.compile(r"^bytes=(\d*)-(\d*)$")


def _path(call: Call) -> str:
    path = call.request.query.get("path")
    if not path:
        raise BadInputError("missing", field="path")
    encode_utf8(path, "path")
    return path


def _object_node(action: str, call: Call, path: str) -> perms.Permission:
    return perms.Permission(action, perms.object_arn(call.param("repository"), path))


def _user_metadata(call: Call) -> dict[str, str]:
    meta = {
        name[len(META_PREFIX) :].lower(): value
        for name, value in call.request.headers.items()
        if name.lower().startswith(META_PREFIX)
    }
    if sum(len(k) + len(v) for k, v in meta.items()) > MAX_META:
        raise BadInputError(f"user metadata over {MAX_META} bytes", field="x-lakefs-meta-*")
    return meta


async def _chunks(reader: Any) -> AsyncIterator[bytes]:
    while True:
        chunk = (
            await reader.read(CHUNK)
            if not isinstance(reader, BodyPartReader)
            else await reader.read_chunk(CHUNK)
        )
        if not chunk:
            return
        yield bytes(chunk)


async def _namespace(call: Call) -> str:
    return (await call.deps.graveler.recent_repository(call.param("repository"))).storage_namespace


async def upload_object(call: Call) -> web.StreamResponse:
    path = _path(call)
    await call.authorize(_object_node(perms.WRITE_OBJECT, call, path))
    repo_id, branch = call.param("repository"), call.param("branch")
    if call.request.query.get("storageClass"):
        raise BadInputError("storage classes are not served here", field="storageClass")
    force = query_bool(call.request, "force")
    condition = await preconditions(call, repo_id, branch, path)
    metadata = _user_metadata(call)
    content_type = call.request.headers.get("Content-Type")
    if content_type is not None and content_type.startswith("multipart/form-data"):
        stat = await _upload_form(
            call, repo_id, branch, path, metadata=metadata, force=force, condition=condition
        )
    else:
        stat = await call.deps.objects.upload(
            repo_id,
            branch,
            path,
            _chunks(call.request.content),
            content_type=content_type or "application/octet-stream",
            metadata=metadata,
            force=force,
            condition=condition,
        )
    return web.json_response(object_json(await _namespace(call), stat), status=201)


async def _upload_form(
    call: Call,
    repo_id: str,
    branch: str,
    path: str,
    *,
    metadata: dict[str, str],
    force: bool,
    condition: Condition | None,
) -> ObjectStat:
    reader = await call.request.multipart()
    while True:
        part = await reader.next()
        if part is None:
            raise BadInputError("the form has no content part", field="content")
        if isinstance(part, BodyPartReader) and part.name == "content":
            content_type = part.headers.get("Content-Type") or "application/octet-stream"
            return await call.deps.objects.upload(
                repo_id,
                branch,
                path,
                _chunks(part),
                content_type=content_type,
                metadata=metadata,
                force=force,
                condition=condition,
            )
        if isinstance(part, BodyPartReader):
            await part.release()


def _range(header: str, size: int) -> tuple[int, int] | None:
    """(start, length) of one ``bytes=`` range; None: the whole object; 416 past the end."""
    match = _RANGE.match(header.strip())
    if match is None or match.group(1) == match.group(2) == "":
        return None  # lakeFS ignores a malformed Range and answers the whole object
    first, last = match.group(1), match.group(2)
    if first == "":
        n = int(last)
        if n == 0:
            raise _unsatisfiable(size)
        start = max(size - n, 0)
        return start, size - start
    start = int(first)
    if start >= size:
        raise _unsatisfiable(size)
    end = min(int(last), size - 1) if last else size - 1
    if end < start:
        raise _unsatisfiable(size)
    return start, end - start + 1


class _Unsatisfiable(Exception):
    def __init__(self, size: int) -> None:
        self.size = size


def _unsatisfiable(size: int) -> _Unsatisfiable:
    return _Unsatisfiable(size)


def _headers(stat: ObjectStat) -> dict[str, str]:
    headers = {
        "ETag": f'"{stat.etag.strip(chr(34))}"',
        "Content-Type": stat.content_type or "application/octet-stream",
        "Accept-Ranges": "bytes",
    }
    if stat.last_modified is not None:
        headers["Last-Modified"] = stat.last_modified.strftime("%a, %d %b %Y %H:%M:%S GMT")
    for name, value in stat.metadata.items():
        headers[META_PREFIX + name] = value
    return headers


async def get_object(call: Call) -> web.StreamResponse:
    path = _path(call)
    await call.authorize(_object_node(perms.READ_OBJECT, call, path))
    repo_id = call.param("repository")
    stat = await call.deps.objects.stat(repo_id, call.param("ref"), path)
    if query_bool(call.request, "presign"):
        raise web.HTTPFound(await presigned_read(call, stat))
    headers = _headers(stat)
    try:
        wanted = (
            _range(call.request.headers.get("Range", ""), stat.size)
            if "Range" in call.request.headers
            else None
        )
    except _Unsatisfiable as e:
        return web.json_response(
            {"message": "Requested Range Not Satisfiable"},
            status=416,
            headers={"Content-Range": f"bytes */{e.size}"},
        )
    start, length = wanted if wanted is not None else (0, stat.size)
    if wanted is not None:
        headers["Content-Range"] = f"bytes {start}-{start + length - 1}/{stat.size}"
    chunks = call.deps.objects.read_stat(repo_id, stat, start=start, length=length if wanted else None)
    # The first chunk before the headers: a purged or missing object is still an error answer.
    first = await anext(chunks, b"")
    response = web.StreamResponse(status=206 if wanted is not None else 200, headers=headers)
    response.content_length = length
    await response.prepare(call.request)
    try:
        await response.write(first)
        async for chunk in chunks:
            await response.write(chunk)
        await response.write_eof()
    except (LakeFSError, OSError) as e:
        # The status line is sent: no error answer can follow. Cut the connection, so the client
        # sees a body shorter than its Content-Length (an error), never other bytes in its place.
        log.warning("object %r of %r cut after its headers: %s", path[:200], repo_id, e)
        if call.request.transport is not None:
            call.request.transport.abort()
    finally:
        if isinstance(chunks, AsyncGenerator):
            await chunks.aclose()
    return response


async def head_object(call: Call) -> web.StreamResponse:
    path = _path(call)
    await call.authorize(_object_node(perms.READ_OBJECT, call, path))
    stat = await call.deps.objects.stat(call.param("repository"), call.param("ref"), path)
    headers = _headers(stat)
    status = 200
    if "Range" in call.request.headers:
        try:
            wanted = _range(call.request.headers["Range"], stat.size)
        except _Unsatisfiable as e:
            return web.Response(status=416, headers={"Content-Range": f"bytes */{e.size}"})
        if wanted is not None:
            status = 206
            headers["Content-Range"] = f"bytes {wanted[0]}-{wanted[0] + wanted[1] - 1}/{stat.size}"
            headers["Content-Length"] = str(wanted[1])
    headers.setdefault("Content-Length", str(stat.size))
    return web.Response(status=status, headers=headers)


async def stat_object(call: Call) -> web.StreamResponse:
    path = _path(call)
    await call.authorize(_object_node(perms.READ_OBJECT, call, path))
    stat = await call.deps.objects.stat(call.param("repository"), call.param("ref"), path)
    user_metadata = query_bool(call.request, "user_metadata", True)
    answer = object_json(await _namespace(call), stat, user_metadata=user_metadata)
    if query_bool(call.request, "presign"):
        answer["physical_address"] = await presigned_read(call, stat)
        answer["physical_address_expiry"] = int(time.time()) + EXPIRES
    return web.json_response(answer)


async def list_objects(call: Call) -> web.StreamResponse:
    await call.authorize(perms.Permission(perms.LIST_OBJECTS, perms.repo_arn(call.param("repository"))))
    q = call.request.query
    amount = amount_of(call.request)
    user_metadata = query_bool(call.request, "user_metadata", True)
    listed = await call.deps.objects.list(
        call.param("repository"),
        call.param("ref"),
        prefix=q.get("prefix", ""),
        delimiter=q.get("delimiter", ""),
        after=q.get("after", ""),
        amount=amount,
    )
    namespace = await _namespace(call)
    items = [(s.path, object_json(namespace, s, user_metadata=user_metadata)) for s in listed.objects]
    items += [(p, prefix_json(p)) for p in listed.common_prefixes]
    items.sort(key=lambda item: item[0].encode())
    results = [item for _, item in items]
    return web.json_response(page(results, listed.has_more, listed.next_after, amount))


async def delete_object(call: Call) -> web.StreamResponse:
    path = _path(call)
    await call.authorize(_object_node(perms.DELETE_OBJECT, call, path))
    repo_id, branch = call.param("repository"), call.param("branch")
    await call.deps.objects.delete(repo_id, branch, path, force=query_bool(call.request, "force"))
    return web.Response(status=204)


async def delete_objects(call: Call) -> web.StreamResponse:
    repo_id, branch = call.param("repository"), call.param("branch")
    spec = await body(call.request, PathList)
    force = query_bool(call.request, "force")
    errors: list[dict[str, Any]] = []
    allowed: list[bytes] = []
    for path in spec.paths:
        try:
            if not path:
                raise BadInputError("empty path", field="paths")
            await call.authorize(_object_node(perms.DELETE_OBJECT, call, path))
            allowed.append(encode_utf8(path, "paths"))
        except LakeFSError as e:
            errors.append({"status_code": status_of(e), "message": message_of(e), "path": path})
    if allowed:
        await call.deps.graveler.delete_entries(repo_id, branch, allowed, force=force)
    return web.json_response({"errors": errors})


async def copy_object(call: Call) -> web.StreamResponse:
    dest = call.request.query.get("dest_path")
    if not dest:
        raise BadInputError("missing", field="dest_path")
    spec = await body(call.request, ObjectCopyCreation)
    repo_id, branch = call.param("repository"), call.param("branch")
    src_ref = spec.src_ref or branch
    await call.authorize(
        perms.AllOf(
            (
                _object_node(perms.READ_OBJECT, call, spec.src_path),
                _object_node(perms.WRITE_OBJECT, call, dest),
            )
        )
    )
    source = await call.deps.objects.stat(repo_id, src_ref, spec.src_path)
    # A full copy through the block store to a fresh address, also when ``shallow`` asks lakeFS to
    # share the source's: one address per entry is what hard-delete and GC rely on.
    stat = await call.deps.objects.copy(repo_id, source, repo_id, branch, dest, force=spec.force)
    return web.json_response(object_json(await _namespace(call), stat), status=201)


async def update_user_metadata(call: Call) -> web.StreamResponse:
    """lakeFS's updateObjectUserMetadata: the object's user metadata replaced by ``set`` (204, as
    lakeFS's controller answers)."""
    path = _path(call)
    await call.authorize(_object_node(perms.WRITE_OBJECT, call, path))
    spec = await body(call.request, UserMetadataUpdate)
    if sum(len(k) + len(v) for k, v in spec.set.items()) > MAX_META:
        raise BadInputError(f"user metadata over {MAX_META} bytes", field="set")
    repo_id, branch = call.param("repository"), call.param("branch")
    await call.deps.objects.update_metadata(
        repo_id, branch, path, spec.set, force=query_bool(call.request, "force")
    )
    return web.Response(status=204)


async def underlying_properties(call: Call) -> web.StreamResponse:
    """lakeFS's getUnderlyingProperties: the object's storage class, null for the store's default
    (uploads here always use the default class)."""
    path = _path(call)
    await call.authorize(_object_node(perms.READ_OBJECT, call, path))
    await call.deps.objects.stat(call.param("repository"), call.param("ref"), path)
    return web.json_response({"storage_class": None})


R = "/repositories/{repository}"
ROUTES = [
    ("GET", R + "/refs/{ref}/objects", get_object),
    ("HEAD", R + "/refs/{ref}/objects", head_object),
    ("GET", R + "/refs/{ref}/objects/stat", stat_object),
    ("GET", R + "/refs/{ref}/objects/ls", list_objects),
    ("POST", R + "/branches/{branch}/objects", upload_object),
    ("DELETE", R + "/branches/{branch}/objects", delete_object),
    ("POST", R + "/branches/{branch}/objects/delete", delete_objects),
    ("POST", R + "/branches/{branch}/objects/copy", copy_object),
    ("PUT", R + "/branches/{branch}/objects/stat/user_metadata", update_user_metadata),
    ("GET", R + "/refs/{ref}/objects/underlyingProperties", underlying_properties),
]
