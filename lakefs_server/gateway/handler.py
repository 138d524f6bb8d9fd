"""One S3 request, end to end: target, authentication, operation, authorisation, dispatch, errors.

:func:`handle` is the S3 side of the listener (:mod:`lakefs_server.router`). Every request:

1. its target (repository, ref, path) from the Host and the RAW path (:mod:`.target`);
2. authenticated (SigV4 header or presigned, SigV2 header: :func:`lakefs_core.auth.signature.authenticate`);
   an anonymous request is AccessDenied;
3. classified into an :class:`~lakefs_core.auth.s3perms.S3Operation` by method, target, query
   subresources and headers (lakeFS's rules; the unsupported subresources answer NotImplemented);
4. authorised with the user's effective policies against the operation's required permissions
   (:func:`lakefs_core.auth.s3perms.s3_required_permissions`; ListBuckets and DeleteObjects filter
   item by item in their operations);
5. dispatched to the operation registered in :data:`OPERATIONS`.

Any failure is S3 XML (:mod:`.errors`): a :class:`~.errors.S3Error` as raised, a core exception mapped
by class, anything else InternalError (logged with its traceback, never sent).
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from aiohttp import web

from lakefs_core.auth.s3perms import S3Operation, parse_copy_source, s3_required_permissions
from lakefs_core.auth.signature import authenticate
from lakefs_core.auth.signed import SignedRequest, VerifiedRequest
from lakefs_core.errors import AuthenticationError, BadRequestError, LakeFSError
from lakefs_server.context import ServerContext
from lakefs_server.gateway.errors import S3Error, error_response, from_lakefs_error
from lakefs_server.gateway.target import Target, bucket_of_host, parse_target

__all__ = ["OPERATIONS", "S3Call", "classify", "handle", "register", "signed_request"]

log = logging.getLogger(__name__)

# Subresources S3 has and lakeFS does not serve: ERRLakeFSNotSupported (405), as lakeFS answers them.
UNSUPPORTED = frozenset(
    {
        "acl", "policy", "cors", "lifecycle", "tagging", "website", "logging", "notification",
        "replication", "encryption", "object-lock", "requestPayment", "accelerate", "analytics",
        "inventory", "metrics", "intelligent-tiering", "ownershipControls", "publicAccessBlock",
        "policyStatus", "retention", "legal-hold", "torrent", "restore", "select", "attributes",
        "versions", "events", "lambdaArn",
    }
)  # fmt: skip


@dataclass
class S3Call:
    """One authenticated S3 request, as the operations see it."""

    ctx: ServerContext
    request: web.Request
    signed: SignedRequest
    verified: VerifiedRequest
    target: Target
    username: str
    operation: S3Operation
    request_id: str
    started: float = field(default_factory=time.monotonic)

    @property
    def repo(self) -> str:
        if self.target.bucket is None:
            raise S3Error("InvalidRequest", "the request names no bucket")
        return self.target.bucket

    @property
    def ref(self) -> str:
        ref = self.target.ref
        if not ref:
            raise S3Error("InvalidRequest", "the key names no ref")
        return ref

    @property
    def path(self) -> str:
        path = self.target.path
        if path is None:
            raise S3Error("NoSuchKey", "the key names no object path within its ref")
        return path

    def query(self, name: str) -> str | None:
        return self.signed.query(name)

    def has_query(self, name: str) -> bool:
        return self.signed.has_query(name)


Operation = Callable[[S3Call], Awaitable[web.StreamResponse]]
OPERATIONS: dict[S3Operation, Operation] = {}


def register(*operations: S3Operation) -> Callable[[Operation], Operation]:
    """Decorator: the function serves ``operations``."""

    def wrap(fn: Operation) -> Operation:
        for op in operations:
            OPERATIONS[op] = fn
        return fn

    return wrap


_SIGNED = "lakefs_server.signed"  # the request's key for its SignedRequest (built once per request)


def signed_request(request: web.Request, host_bucket: str | None) -> SignedRequest:
    """The request as its signature sees it: method, RAW path and query, headers in order (built
    once per request: the router's decision and the handler read the same one)."""
    found = request.get(_SIGNED)
    if isinstance(found, SignedRequest) and found.bucket == host_bucket:
        return found
    raw_path, _, raw_query = request.raw_path.partition("?")
    signed = SignedRequest(
        request.method,
        raw_path,
        raw_query,
        tuple(request.headers.items()),
        bucket=host_bucket,
    )
    request[_SIGNED] = signed
    return signed


def classify(method: str, target: Target, signed: SignedRequest) -> S3Operation:
    """The operation a request asks for (lakeFS's routing by method, target and subresources)."""
    names = {n.decode("latin-1") for n, _, _ in signed.query_pairs()}
    unsupported = names & UNSUPPORTED
    if target.bucket is None:
        if method == "GET":
            return S3Operation.LIST_BUCKETS
        raise S3Error("MethodNotAllowed", "the service supports GET only")
    if target.key is not None and method == "GET" and unsupported == {"tagging"}:
        return S3Operation.GET_OBJECT_TAGGING  # lakeFS answers an empty tag set
    if unsupported:
        raise S3Error("ERRLakeFSNotSupported", f"the {sorted(unsupported)[0]} subresource is not supported")
    if target.key is None:
        return _bucket_operation(method, names, signed)
    copy = signed.header("x-amz-copy-source") is not None
    if method in ("GET", "HEAD"):
        if "uploadId" in names and method == "GET":
            return S3Operation.LIST_PARTS
        return S3Operation.GET_OBJECT if method == "GET" else S3Operation.HEAD_OBJECT
    if method == "PUT":
        if "uploadId" in names or "partNumber" in names:
            return S3Operation.UPLOAD_PART_COPY if copy else S3Operation.UPLOAD_PART
        return S3Operation.COPY_OBJECT if copy else S3Operation.PUT_OBJECT
    if method == "POST":
        if "uploads" in names:
            return S3Operation.CREATE_MULTIPART_UPLOAD
        if "uploadId" in names:
            return S3Operation.COMPLETE_MULTIPART_UPLOAD
        raise S3Error("NotImplemented", "this POST is not supported")
    if method == "DELETE":
        return S3Operation.ABORT_MULTIPART_UPLOAD if "uploadId" in names else S3Operation.DELETE_OBJECT
    raise S3Error("MethodNotAllowed", f"{method} is not an S3 object method")


def _bucket_operation(method: str, names: set[str], signed: SignedRequest) -> S3Operation:
    if method == "GET":
        if "location" in names:
            return S3Operation.GET_BUCKET_LOCATION
        if "versioning" in names:
            return S3Operation.GET_BUCKET_VERSIONING
        if "uploads" in names:
            return S3Operation.LIST_MULTIPART_UPLOADS
        if signed.query("list-type") == "2":
            return S3Operation.LIST_OBJECTS_V2
        return S3Operation.LIST_OBJECTS
    if method == "HEAD":
        return S3Operation.HEAD_BUCKET
    if method == "POST" and "delete" in names:
        return S3Operation.DELETE_OBJECTS
    if method == "PUT":
        return S3Operation.CREATE_BUCKET
    raise S3Error("NotImplemented", f"{method} on a bucket is not supported")


async def _authorize(call: S3Call) -> None:
    target, signed = call.target, call.signed
    copy_source = None
    if call.operation in (S3Operation.COPY_OBJECT, S3Operation.UPLOAD_PART_COPY):
        copy_source = parse_copy_source(signed.header("x-amz-copy-source") or "")
    node = s3_required_permissions(
        call.operation,
        target.bucket or "",
        target.ref,
        target.path,
        copy_source=copy_source,
        delimiter=signed.query("delimiter") or "",
        prefix=signed.query("prefix") or "",
    )
    if node is not None:
        await call.ctx.auth.authorize(call.username, node, {"SourceIp": call.request.remote or ""})


async def handle(ctx: ServerContext, request: web.Request) -> web.StreamResponse:
    """Serve one S3 request (see the module), counting it in the server's metrics."""
    started = time.monotonic()
    state: dict[str, str] = {"operation": "Unknown"}
    response = await _handle(ctx, request, state)
    ctx.metrics.observe_request(state["operation"], response.status, time.monotonic() - started)
    if "auth_failure" in state:
        ctx.metrics.auth_failures.labels(state["auth_failure"]).inc()
    return response


async def _handle(ctx: ServerContext, request: web.Request, state: dict[str, str]) -> web.StreamResponse:
    request_id = secrets.token_hex(8).upper()
    head = request.method == "HEAD"
    resource = request.raw_path.partition("?")[0]
    try:
        host_bucket, _ = bucket_of_host(request.host, ctx.config.gateway.domain_names)
        signed = signed_request(request, host_bucket)
        target = parse_target(signed.raw_path, host_bucket)
        try:
            credential, verified = await authenticate(signed, ctx.auth, time.time())
        except (AuthenticationError, BadRequestError) as e:
            state["auth_failure"] = str(getattr(e, "s3_code", "AccessDenied"))
            raise
        operation = classify(request.method, target, signed)
        state["operation"] = str(operation)
        call = S3Call(ctx, request, signed, verified, target, credential.username, operation, request_id)
        await _authorize(call)
        serve = OPERATIONS.get(operation)
        if serve is None:
            raise S3Error("NotImplemented", f"{operation} is not implemented")
        response = await serve(call)
    except S3Error as e:
        return error_response(e, resource, request_id, head=head)
    except LakeFSError as e:
        error = from_lakefs_error(e)
        if error.status >= 500:
            log.error("%s %s failed: %s: %s", request.method, resource, type(e).__name__, e, exc_info=e)
        return error_response(error, resource, request_id, head=head)
    except (ConnectionResetError, web.HTTPException):
        raise
    except Exception:
        log.exception("%s %s failed unexpectedly", request.method, resource)
        return error_response(S3Error("InternalError", "internal error"), resource, request_id, head=head)
    if not response.prepared:  # a streamed answer sets it before it starts
        response.headers["x-amz-request-id"] = request_id
    return response
