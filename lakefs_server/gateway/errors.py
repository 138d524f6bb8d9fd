"""S3 errors as lakeFS's gateway answers them: an XML ``<Error>`` with lakeFS's code, message and status.

:class:`S3Error` is raised by the operations with an explicit code; :func:`from_lakefs_error` maps
the core's exception tree (by class and its ``s3_code`` where it has one) so the handler answers
every failure as S3 XML, never a traceback. 5xx answers carry a fixed text (the error is logged by
the handler), 4xx the error's own message, which never holds a secret.
"""

from __future__ import annotations

from xml.sax.saxutils import escape

from aiohttp import web

from lakefs_core.errors import (
    AccessDeniedError,
    AuthenticationError,
    BadInputError,
    BadRequestError,
    ConflictError,
    LakeFSError,
    NotFoundError,
    PermissionDeniedError,
    PreconditionFailedError,
    PurgedError,
    ReadOnlyError,
    StorageFullError,
    TooManyRetriesError,
    TransientError,
)

__all__ = ["S3Error", "error_response", "from_lakefs_error"]

# lakeFS's codes (pkg/gateway/errors) and their statuses.
STATUS = {
    "AccessDenied": 403,
    "InvalidAccessKeyId": 403,
    "SignatureDoesNotMatch": 403,
    "RequestTimeTooSkewed": 403,
    "AuthorizationHeaderMalformed": 400,
    "XAmzContentSHA256Mismatch": 400,
    "BadDigest": 400,
    "InvalidDigest": 400,
    "IncompleteBody": 400,
    "InvalidArgument": 400,
    "InvalidRequest": 400,
    "InvalidBucketName": 400,
    "InvalidPart": 400,
    "InvalidPartOrder": 400,
    "EntityTooSmall": 400,
    "EntityTooLarge": 400,
    "MalformedXML": 400,
    "MissingContentLength": 411,
    "MalformedTrailerError": 400,
    "KeyTooLongError": 400,
    "BadRequest": 400,
    "InvalidRange": 416,
    "NoSuchBucket": 404,
    "NoSuchKey": 404,
    "NoSuchUpload": 404,
    "NoSuchVersion": 404,
    "ObjectPurged": 410,
    "MethodNotAllowed": 405,
    "PreconditionFailed": 412,
    "ConditionalRequestConflict": 409,
    "OperationAborted": 409,
    "ErrReadOnlyRepository": 403,
    "ERRLakeFSNotSupported": 405,
    "MetadataTooLarge": 400,
    "NotModified": 304,
    "BucketAlreadyExists": 409,
    "NotImplemented": 501,
    "InternalError": 500,
    "SlowDown": 503,
    "ServiceUnavailable": 503,
    "InsufficientStorage": 507,
}


class S3Error(Exception):
    """An S3 error answer: ``code`` (one of :data:`STATUS`), a message, optional extra XML fields."""

    def __init__(self, code: str, message: str, *, status: int | None = None, **extra: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status if status is not None else STATUS.get(code, 400)
        self.extra = extra


def from_lakefs_error(e: LakeFSError, *, missing: str = "NoSuchKey") -> S3Error:
    """The S3 answer to a core exception; ``missing`` is the code of a NotFoundError here."""
    code = getattr(e, "s3_code", None)
    if isinstance(e, PurgedError):
        return S3Error("ObjectPurged", str(e), PurgeRecord=e.audit_id)
    if isinstance(e, NotFoundError):
        return S3Error(missing, str(e))
    if isinstance(e, (AuthenticationError, BadRequestError)) and isinstance(code, str):
        return S3Error(code, str(e), status=e.http_status if code not in STATUS else None)
    if isinstance(e, PermissionDeniedError):
        return S3Error("AccessDenied", str(e))
    if isinstance(e, PreconditionFailedError):
        return S3Error("PreconditionFailed", str(e))
    if isinstance(e, ReadOnlyError):
        return S3Error("ErrReadOnlyRepository", str(e))
    if isinstance(e, (TooManyRetriesError, TransientError)):
        return S3Error("SlowDown", "temporarily unavailable, retry later")
    if isinstance(e, ConflictError):
        return S3Error("OperationAborted", str(e))
    if isinstance(e, BadInputError):
        return S3Error("InvalidArgument", str(e))
    if isinstance(e, StorageFullError):
        return S3Error("InsufficientStorage", "a store is full")
    if isinstance(e, AccessDeniedError):
        return S3Error("InternalError", "a store or database refused the server's credentials", status=502)
    return S3Error("InternalError", "internal error")


def error_response(error: S3Error, resource: str, request_id: str, *, head: bool = False) -> web.Response:
    """The XML answer (no body for HEAD, as S3 answers HEAD errors)."""
    fields = "".join(f"<{k}>{escape(v)}</{k}>" for k, v in error.extra.items())
    body = (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f"<Error><Code>{error.code}</Code><Message>{escape(error.message)}</Message>"
        f"<Resource>{escape(resource)}</Resource>{fields}<RequestId>{request_id}</RequestId>"
        f"<HostId>{request_id}</HostId></Error>"
    )
    headers = {"x-amz-request-id": request_id}
    if error.code == "SlowDown":
        headers["Retry-After"] = "1"
    if head:
        return web.Response(status=error.status, headers=headers)
    return web.Response(
        status=error.status, body=body.encode(), content_type="application/xml", headers=headers
    )
