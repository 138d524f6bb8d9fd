"""The service and bucket operations: ListBuckets, HeadBucket, GetBucketLocation,
GetBucketVersioning, CreateBucket (lakeFS's answers), and DeleteObjects.

- ListBuckets answers AccessDenied unless some statement of the user allows
  ``fs:ListRepositories``, then lists the repositories (``prefix`` filters by name) each allowed on
  its ARN (:func:`lakefs_core.auth.s3perms.bucket_visible`).
- GetBucketLocation answers an empty constraint for us-east-1 and the configured region otherwise;
  GetBucketVersioning an empty configuration (lakeFS has no object versions); CreateBucket on an
  existing repository BucketAlreadyExists (repositories are created through lakeFS's API).
- DeleteObjects: 1 to 1,000 keys, each authorised on its own (``fs:DeleteObject``; refused keys are
  per-key AccessDenied errors), the keys of one branch deleted in ONE staging batch (tombstones;
  missing keys count as deleted, as S3 answers), per-key errors for keys naming no branch.
"""

from __future__ import annotations

from collections import defaultdict

from aiohttp import web

from lakefs_core.auth.policy import authorize
from lakefs_core.auth.s3perms import S3Operation, bucket_visible, delete_objects_key, may_list_buckets
from lakefs_core.errors import LakeFSError, NotFoundError, PermissionDeniedError
from lakefs_server.gateway.common import repository
from lakefs_server.gateway.errors import S3Error, from_lakefs_error
from lakefs_server.gateway.handler import S3Call, register
from lakefs_server.gateway.xml import child_text, children, element, iso8601, read_xml, xml_response

__all__ = ["MAX_DELETE_KEYS"]

MAX_DELETE_KEYS = 1000


@register(S3Operation.LIST_BUCKETS)
async def list_buckets(call: S3Call) -> web.StreamResponse:
    policies = await call.ctx.auth.effective_policies(call.username)
    if not may_list_buckets(policies):
        raise S3Error("AccessDenied", f"user {call.username}: not allowed to fs:ListRepositories")
    prefix = call.query("prefix") or ""
    buckets = []
    async for repo in call.ctx.graveler.list_repositories():
        if repo.id.startswith(prefix) and bucket_visible(repo.id, call.username, policies):
            buckets.append(
                "<Bucket>"
                + element("Name", repo.id)
                + element("CreationDate", iso8601(repo.creation_date))
                + "</Bucket>"
            )
    owner = "<Owner>" + element("ID", call.username) + element("DisplayName", call.username) + "</Owner>"
    return xml_response("ListAllMyBucketsResult", [owner, "<Buckets>", *buckets, "</Buckets>"])


@register(S3Operation.HEAD_BUCKET)
async def head_bucket(call: S3Call) -> web.StreamResponse:
    await repository(call)
    return web.Response(status=200, headers={"x-amz-bucket-region": call.ctx.config.gateway.region})


@register(S3Operation.GET_BUCKET_LOCATION)
async def bucket_location(call: S3Call) -> web.StreamResponse:
    await repository(call)
    region = call.ctx.config.gateway.region
    return xml_response("LocationConstraint", [] if region == "us-east-1" else [region.replace("<", "")])


@register(S3Operation.GET_BUCKET_VERSIONING)
async def bucket_versioning(call: S3Call) -> web.StreamResponse:
    await repository(call)
    return xml_response("VersioningConfiguration", [])


@register(S3Operation.CREATE_BUCKET)
async def create_bucket(call: S3Call) -> web.StreamResponse:
    await repository(call)
    raise S3Error("BucketAlreadyExists", f"repository {call.repo!r} exists", status=409)


def _delete_error(key: str, code: str, message: str) -> str:
    return "<Error>" + element("Key", key) + element("Code", code) + element("Message", message) + "</Error>"


@register(S3Operation.DELETE_OBJECTS)
async def delete_objects(call: S3Call) -> web.StreamResponse:
    repo = await repository(call)
    if repo.read_only:
        raise S3Error("ErrReadOnlyRepository", f"repository {repo.id!r} is read-only")
    document = await read_xml(call.request, "Delete")
    objects = children(document, "Object")
    if not 1 <= len(objects) <= MAX_DELETE_KEYS:
        raise S3Error("MalformedXML", f"a DeleteObjects request names 1 to {MAX_DELETE_KEYS} keys")
    quiet = (child_text(document, "Quiet") or "").strip().lower() == "true"
    policies = await call.ctx.auth.effective_policies(call.username)
    context = {"SourceIp": call.request.remote or ""}
    errors: list[str] = []
    by_branch: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for obj in objects:
        key = child_text(obj, "Key")
        if not key:
            raise S3Error("MalformedXML", "every Object names a Key")
        ref, sep, path = key.partition("/")
        if not sep or not path:
            errors.append(_delete_error(key, "ErrDeletingKey", "the key names no ref and path"))
            continue
        try:
            authorize(delete_objects_key(call.repo, path), call.username, policies, context)
        except PermissionDeniedError:
            errors.append(_delete_error(key, "AccessDenied", "Access Denied"))
            continue
        by_branch[ref].append((key, path))
    deleted: list[str] = []
    for branch, items in by_branch.items():
        try:
            await call.ctx.graveler.branch(call.repo, branch)
            await call.ctx.graveler.delete_entries(call.repo, branch, [p.encode() for _, p in items])
        except LakeFSError as e:
            if isinstance(e, NotFoundError):
                code, message = "NoSuchBucket", f"{branch!r} is not a branch"
            else:
                mapped = from_lakefs_error(e)
                code, message = mapped.code, mapped.message
            errors.extend(_delete_error(key, code, message) for key, _ in items)
            continue
        deleted.extend(key for key, _ in items)
    parts = [] if quiet else ["<Deleted>" + element("Key", key) + "</Deleted>" for key in deleted]
    return xml_response("DeleteResult", [*parts, *errors])
