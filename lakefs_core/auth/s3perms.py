"""What each S3 gateway operation requires, as lakeFS's gateway computes it (each handler's
``RequiredPermissions`` in ``pkg/gateway/operations``); pure, for the gateway's handlers.

=============================================  =========================================================
operation                                      required
=============================================  =========================================================
ListBuckets                                    nothing up front; refused unless some statement allows
                                               ``fs:ListRepositories`` (:func:`may_list_buckets`), and
                                               each repository is listed only if allowed on its ARN
                                               (:func:`bucket_visible`)
HeadBucket                                     ``fs:ReadRepository`` on the repository
CreateBucket                                   ``fs:CreateRepository`` on the repository (lakeFS then
                                               answers BucketAlreadyExists, as S3 does)
ListObjects(V2), GetBucketLocation,            ``fs:ListBranches`` on the repository when the delimiter
GetBucketVersioning, ListMultipartUploads      is ``/`` and the prefix holds no ``/`` (branches listed);
                                               ``fs:ListObjects`` on the repository otherwise
DeleteObjects                                  nothing up front; each key ``fs:DeleteObject`` on its
                                               object (:func:`delete_objects_key`), refused keys are
                                               per-key AccessDenied errors
GetObject, HeadObject, ListParts,              ``fs:ReadObject`` on the object
GetObjectTagging
PutObject, UploadPart, CreateMultipartUpload,  ``fs:WriteObject`` on the object
CompleteMultipartUpload
CopyObject, UploadPartCopy                     ``fs:WriteObject`` on the destination AND
                                               ``fs:ReadObject`` on the source
DeleteObject, AbortMultipartUpload             ``fs:DeleteObject`` on the object
=============================================  =========================================================

An object's ARN is ``arn:lakefs:fs:::repository/<repo>/object/<path>``: the path within the ref, the
ref itself is not part of it (as in lakeFS). The REST API's table (issue 35) goes into a module of its
own beside this one, returning the same :mod:`~lakefs_core.auth.permissions` nodes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from urllib.parse import unquote

from lakefs_core.auth import permissions as perms
from lakefs_core.auth.permissions import AllOf, Node, Permission
from lakefs_core.auth.policy import Policy, check_permission, has_action_on_any_resource
from lakefs_core.errors import BadRequestError

__all__ = [
    "CopySource",
    "S3Operation",
    "bucket_visible",
    "delete_objects_key",
    "may_list_buckets",
    "parse_copy_source",
    "s3_required_permissions",
]


class S3Operation(StrEnum):
    LIST_BUCKETS = "ListBuckets"
    HEAD_BUCKET = "HeadBucket"
    CREATE_BUCKET = "CreateBucket"
    LIST_OBJECTS = "ListObjects"
    LIST_OBJECTS_V2 = "ListObjectsV2"
    GET_BUCKET_LOCATION = "GetBucketLocation"
    GET_BUCKET_VERSIONING = "GetBucketVersioning"
    LIST_MULTIPART_UPLOADS = "ListMultipartUploads"
    DELETE_OBJECTS = "DeleteObjects"
    GET_OBJECT = "GetObject"
    HEAD_OBJECT = "HeadObject"
    GET_OBJECT_TAGGING = "GetObjectTagging"
    LIST_PARTS = "ListParts"
    PUT_OBJECT = "PutObject"
    COPY_OBJECT = "CopyObject"
    CREATE_MULTIPART_UPLOAD = "CreateMultipartUpload"
    UPLOAD_PART = "UploadPart"
    UPLOAD_PART_COPY = "UploadPartCopy"
    COMPLETE_MULTIPART_UPLOAD = "CompleteMultipartUpload"
    ABORT_MULTIPART_UPLOAD = "AbortMultipartUpload"
    DELETE_OBJECT = "DeleteObject"


_LISTING = frozenset(
    {
        S3Operation.LIST_OBJECTS,
        S3Operation.LIST_OBJECTS_V2,
        S3Operation.GET_BUCKET_LOCATION,
        S3Operation.GET_BUCKET_VERSIONING,
        S3Operation.LIST_MULTIPART_UPLOADS,
    }
)
_READ = frozenset(
    {S3Operation.GET_OBJECT, S3Operation.HEAD_OBJECT, S3Operation.LIST_PARTS, S3Operation.GET_OBJECT_TAGGING}
)
_WRITE = frozenset(
    {
        S3Operation.PUT_OBJECT,
        S3Operation.UPLOAD_PART,
        S3Operation.CREATE_MULTIPART_UPLOAD,
        S3Operation.COMPLETE_MULTIPART_UPLOAD,
    }
)
_COPY = frozenset({S3Operation.COPY_OBJECT, S3Operation.UPLOAD_PART_COPY})
_DELETE = frozenset({S3Operation.DELETE_OBJECT, S3Operation.ABORT_MULTIPART_UPLOAD})


@dataclass(frozen=True)
class CopySource:
    repo: str
    ref: str
    path: str


def parse_copy_source(header: str) -> CopySource:
    """The ``x-amz-copy-source`` header (``[/]repo/ref/path``, percent-encoded) as lakeFS resolves it;
    a version (``?versionId=``) is refused: lakeFS has no object versions."""
    raw, sep, _query = header.partition("?")
    if sep:
        raise BadRequestError(
            "versionId is not supported", s3_code="InvalidArgument", field="x-amz-copy-source"
        )
    try:
        parts = unquote(raw, errors="strict").lstrip("/").split("/", 2) if raw.isascii() else []
    except UnicodeDecodeError:
        parts = []
    if len(parts) != 3 or not parts[0] or not parts[1]:
        raise BadRequestError(
            "must be /<repository>/<ref>/<path>", s3_code="InvalidArgument", field="x-amz-copy-source"
        )
    return CopySource(*parts)


def s3_required_permissions(
    operation: S3Operation,
    repo: str,
    ref: str | None = None,
    path: str | None = None,
    *,
    copy_source: CopySource | None = None,
    delimiter: str = "",
    prefix: str = "",
) -> Node | None:
    """The permission tree ``operation`` requires (see the module table); ``None`` for the two
    operations lakeFS checks item by item instead (ListBuckets, DeleteObjects). ``ref`` is accepted
    for the caller's symmetry with lakeFS's handlers; no S3 rule depends on it."""
    del ref
    if operation is S3Operation.LIST_BUCKETS or operation is S3Operation.DELETE_OBJECTS:
        return None
    if operation is S3Operation.HEAD_BUCKET:
        return Permission(perms.READ_REPOSITORY, perms.repo_arn(repo))
    if operation is S3Operation.CREATE_BUCKET:
        return Permission(perms.CREATE_REPOSITORY, perms.repo_arn(repo))
    if operation in _LISTING:
        listing_branches = delimiter == "/" and "/" not in prefix
        action = perms.LIST_BRANCHES if listing_branches else perms.LIST_OBJECTS
        return Permission(action, perms.repo_arn(repo))
    if path is None:
        raise BadRequestError(f"{operation} names an object", field="path")
    target = perms.object_arn(repo, path)
    if operation in _READ:
        return Permission(perms.READ_OBJECT, target)
    if operation in _WRITE:
        return Permission(perms.WRITE_OBJECT, target)
    if operation in _DELETE:
        return Permission(perms.DELETE_OBJECT, target)
    if operation in _COPY:
        if copy_source is None:
            raise BadRequestError(f"{operation} needs x-amz-copy-source", field="x-amz-copy-source")
        source = perms.object_arn(copy_source.repo, copy_source.path)
        return AllOf((Permission(perms.WRITE_OBJECT, target), Permission(perms.READ_OBJECT, source)))
    raise BadRequestError(f"unknown S3 operation {operation}", field="operation")


def delete_objects_key(repo: str, path: str) -> Node:
    """What one key of a DeleteObjects request requires."""
    return Permission(perms.DELETE_OBJECT, perms.object_arn(repo, path))


def may_list_buckets(policies: Sequence[Policy]) -> bool:
    """ListBuckets is answered at all (else AccessDenied): some statement allows ``fs:ListRepositories``."""
    return has_action_on_any_resource(policies, perms.LIST_REPOSITORIES)


def bucket_visible(repo: str, username: str, policies: Sequence[Policy]) -> bool:
    """ListBuckets lists ``repo``: ``fs:ListRepositories`` is allowed on its ARN (statements with
    conditions are not considered, as lakeFS's filter does)."""
    return check_permission(perms.repo_arn(repo), username, policies, perms.LIST_REPOSITORIES)
