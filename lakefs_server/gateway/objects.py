"""GetObject, HeadObject, GetObjectTagging, PutObject and DeleteObject with lakeFS's semantics, plus
what lakeFS lacks: conditional reads (If-Match, If-None-Match, If-Modified-Since,
If-Unmodified-Since, in RFC 9110's order), ``response-*`` overrides, and verified uploads.

- Reads: one byte range (``bytes=a-b``, ``a-``, ``-n``): 206 with Content-Range, an unsatisfiable
  one 416 InvalidRange, a malformed or multi-range header ignored (the whole object, as lakeFS).
  A purged object answers ObjectPurged (410) naming the purge record; an entry whose bytes are
  missing from the store answers NoSuchVersion (lakeFS's code). No byte is sent before the purge
  check answered.
- PutObject: branches only (a tag, a commit id or a missing branch is NoSuchBucket, as lakeFS
  answers); a read-only repository is ErrReadOnlyRepository (403). The body is verified while it
  streams (SigV4 payload hash, chunk and trailer signatures, Content-MD5, ``x-amz-checksum-*``,
  :func:`lakefs_core.auth.payload.body_verifier`) and the verification's last step runs before the
  store commits the object, so a mismatch stores nothing and stages nothing. A body whose
  size on the wire is at most ``SMALL_BODY_BYTES`` (256 KiB) is read whole and verified before
  the upload starts (:func:`put_body`; at most that much memory per request, what a streamed body
  gathers too): the store then writes it in one call, and a mismatch refuses the PUT before any
  journal intent or byte is written. The upload goes
  through :meth:`lakefs_core.repos.objects.Objects.upload`, whose hard-delete journal intent lets
  the reconciler remove whatever a failed upload left. ``If-None-Match: *`` and ``If-Match: <etag>``
  are checked against the branch's current entry before the upload (a cheap early refusal) and
  again atomically with the staging (:mod:`lakefs_core.repos.staging_writes`' conditional write,
  stricter than lakeFS's gateway, which checks before only): of concurrent conditional PUTs of one
  path exactly one wins, the others answer PreconditionFailed (412) and stage nothing.
- DeleteObject: 204 whether or not the object existed (S3's answer).
"""

from __future__ import annotations

import re
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from datetime import datetime
from typing import cast

from aiohttp import web

from lakefs_core.auth.payload import BodyVerifier, body_verifier
from lakefs_core.auth.s3perms import S3Operation
from lakefs_core.errors import NotFoundError
from lakefs_core.format.records import ValueRecord
from lakefs_core.offloop import run_cpu
from lakefs_core.repos.objects import ObjectStat
from lakefs_core.repos.staging_writes import Condition
from lakefs_server.gateway.common import (
    http_date,
    not_a_branch,
    parse_http_date,
    quoted_etag,
    repository,
    require_branch,
    user_metadata,
    write_metadata_headers,
)
from lakefs_server.gateway.errors import S3Error
from lakefs_server.gateway.handler import S3Call, register
from lakefs_server.gateway.xml import xml_response

__all__ = [
    "body_stream",
    "check_write_conditions",
    "etag_matches",
    "parse_range",
    "put_body",
    "stat_object",
]

_RANGE = re.compile(r"bytes=(\d*)-(\d*)")
READ_CHUNK = 1 << 20
OFFLOAD_BYTES = 256 << 10  # body pieces gathered to this size are verified in the CPU pool
# A PUT body of at most this many bytes on the wire (its Content-Length) is read whole, verified and
# handed to the store as bytes: one store call (a local store's one worker-thread hop, not four).
# The same bound as a streamed body's gathered pieces, so a PUT holds no more memory either way.
SMALL_BODY_BYTES = OFFLOAD_BYTES
_OVERRIDES = {
    "response-content-type": "Content-Type",
    "response-content-language": "Content-Language",
    "response-expires": "Expires",
    "response-cache-control": "Cache-Control",
    "response-content-disposition": "Content-Disposition",
    "response-content-encoding": "Content-Encoding",
}


def parse_range(header: str | None, size: int) -> tuple[int, int] | None:
    """``(start, end inclusive)`` of a single satisfiable range; ``None`` to serve the whole object;
    S3Error InvalidRange when unsatisfiable."""
    if not header:
        return None
    found = _RANGE.fullmatch(header.strip())
    if found is None:
        return None  # malformed or several ranges: ignored, as lakeFS and RFC 9110 allow
    first, last = found.groups()
    if not first and not last:
        return None
    if not first:
        suffix = int(last)
        if suffix == 0 or size == 0:
            raise S3Error("InvalidRange", "the requested range is not satisfiable", RangeRequested=header)
        return max(0, size - suffix), size - 1
    start = int(first)
    end = size - 1 if not last else min(int(last), size - 1)
    if start >= size or (last and int(last) < start):
        raise S3Error("InvalidRange", "the requested range is not satisfiable", RangeRequested=header)
    return start, end


def etag_matches(header: str, etag: str) -> bool:
    bare = etag.strip('"')
    return any(
        tag.strip() == "*" or tag.strip().removeprefix("W/").strip('"') == bare for tag in header.split(",")
    )


def _seconds(when: datetime | None) -> int:
    return int(when.timestamp()) if when is not None else 0


def check_read_conditions(call: S3Call, stat: ObjectStat) -> None:
    """RFC 9110 §13.2.2's order: If-Match, else If-Unmodified-Since (412); If-None-Match, else
    If-Modified-Since (304)."""
    signed = call.signed
    if_match = signed.header("if-match")
    if if_match is not None:
        if not etag_matches(if_match, stat.etag):
            raise S3Error(
                "PreconditionFailed", "If-Match does not match the object's ETag", Condition="If-Match"
            )
    else:
        since = parse_http_date(signed.header("if-unmodified-since"))
        if since is not None and _seconds(stat.last_modified) > since.timestamp():
            raise S3Error(
                "PreconditionFailed", "the object was modified since", Condition="If-Unmodified-Since"
            )
    if_none = signed.header("if-none-match")
    if if_none is not None:
        if etag_matches(if_none, stat.etag):
            raise S3Error("NotModified", "not modified")
    else:
        since = parse_http_date(signed.header("if-modified-since"))
        if since is not None and _seconds(stat.last_modified) <= since.timestamp():
            raise S3Error("NotModified", "not modified")


async def stat_object(call: S3Call, repo_id: str, ref: str, path: str) -> ObjectStat:
    """The entry of ``path`` at ``ref``; NoSuchBucket / NoSuchKey / ObjectPurged."""
    await repository(call, repo_id)
    if not path:
        raise S3Error("NoSuchKey", "the key names no object")
    try:
        return await call.ctx.objects.stat(repo_id, ref, path)
    except NotFoundError as e:
        if type(e) is not NotFoundError:  # PurgedError: handled by the caller's mapping
            raise
        raise S3Error("NoSuchKey", f"{path[:200]!r} not found at {ref!r}") from None


def _object_headers(call: S3Call, stat: ObjectStat) -> dict[str, str]:
    headers = {
        "Last-Modified": http_date(stat.last_modified),
        "ETag": quoted_etag(stat.etag),
        "Content-Type": stat.content_type or "application/octet-stream",
        "Accept-Ranges": "bytes",
    }
    write_metadata_headers(headers, stat.metadata)
    for param, header in _OVERRIDES.items():
        value = call.query(param)
        if value is not None:
            if "\r" in value or "\n" in value:
                raise S3Error("InvalidArgument", f"{param} must be a single line")
            headers[header] = value
    return headers


@register(S3Operation.HEAD_OBJECT, S3Operation.GET_OBJECT)
async def get_object(call: S3Call) -> web.StreamResponse:
    if call.has_query("uploadId"):
        raise S3Error("InvalidRequest", "ListParts is a GET")
    if call.operation is S3Operation.GET_OBJECT and call.has_query("versioning"):
        return xml_response("VersioningConfiguration", [])
    stat = await stat_object(call, call.repo, call.ref, call.path)
    try:
        check_read_conditions(call, stat)
    except S3Error as e:
        if e.code != "NotModified":
            raise
        headers = {"ETag": quoted_etag(stat.etag), "Last-Modified": http_date(stat.last_modified)}
        return web.Response(status=304, headers=headers)
    headers = _object_headers(call, stat)
    span = parse_range(call.signed.header("range"), stat.size)
    start, length, status = 0, stat.size, 200
    if span is not None:
        start, length, status = span[0], span[1] - span[0] + 1, 206
        headers["Content-Range"] = f"bytes {span[0]}-{span[1]}/{stat.size}"
    headers["Content-Length"] = str(length)
    if call.operation is S3Operation.HEAD_OBJECT:
        return web.Response(status=status, headers=headers)
    # an async generator (closed below, so the store's stream is released on a client that left)
    chunks = cast(
        AsyncGenerator[bytes, None], call.ctx.objects.read_stat(call.repo, stat, start=start, length=length)
    )
    try:
        first = await anext(chunks, None) if length else None
    except NotFoundError as e:
        await chunks.aclose()
        if type(e) is not NotFoundError:
            raise
        raise S3Error("NoSuchVersion", f"the data of {call.path[:200]!r} is missing from the store") from None
    if len(first or b"") == length:
        # The whole answer is read (a small object is one store read): one Response sends the
        # headers and the body in one write to the socket, where a stream sends them in two.
        await chunks.aclose()
        call.ctx.metrics.sent.inc(length)
        return web.Response(status=status, headers=headers, body=first)
    response = web.StreamResponse(status=status, headers=headers)
    response.headers["x-amz-request-id"] = call.request_id
    response.content_length = length
    await response.prepare(call.request)
    sent = 0
    try:
        if first is not None:
            await response.write(first)
            sent += len(first)
        async for chunk in chunks:
            await response.write(chunk)
            sent += len(chunk)
    finally:
        await chunks.aclose()
        call.ctx.metrics.sent.inc(sent)
    await response.write_eof()
    return response


@register(S3Operation.GET_OBJECT_TAGGING)
async def get_object_tagging(call: S3Call) -> web.StreamResponse:
    await stat_object(call, call.repo, call.ref, call.path)
    return xml_response("Tagging", ["<TagSet></TagSet>"])


async def body_stream(
    call: S3Call, head: Sequence[bytes] = (), verifier: BodyVerifier | None = None
) -> tuple[AsyncIterator[bytes], dict[str, str]]:
    """The request body's object bytes, verified as they stream; the dict is filled with the
    verified checksums (by header name) once the stream ended without error. The stream raises
    before its end when anything does not match, so a store writing it never commits it. ``head``:
    the body's first pieces, already read (with ``verifier``, the request's, which saw none yet).

    The verification (SHA-256, MD5, CRCs, chunk signatures: they release the GIL) runs in the CPU
    pool on pieces of at least ``OFFLOAD_BYTES``: the socket hands aiohttp's reader at most about
    128 KiB at a time, so the received pieces are gathered first (a body's last piece, under
    ``OFFLOAD_BYTES``, and small bodies are verified on the loop: a hop costs more than they do)."""
    verifier = verifier or body_verifier(call.verified, call.signed)
    verified: dict[str, str] = {}
    metrics = call.ctx.metrics

    async def stream() -> AsyncIterator[bytes]:
        pending: list[bytes] = list(head)
        size = sum(len(piece) for piece in pending)
        async for chunk in call.request.content.iter_chunked(READ_CHUNK):
            pending.append(chunk)
            size += len(chunk)
            if size < OFFLOAD_BYTES:
                continue
            piece = _joined(pending)
            pending, size = [], 0
            data = await _feed(verifier, piece)
            if data:
                metrics.received.inc(len(data))
                yield data
        if pending:  # the last piece; with ``head`` it may be longer than OFFLOAD_BYTES
            data = await _feed(verifier, _joined(pending))
            if data:
                metrics.received.inc(len(data))
                yield data
        verified.update(verifier.finish())

    return stream(), verified


def _joined(pieces: Sequence[bytes]) -> bytes:
    return pieces[0] if len(pieces) == 1 else b"".join(pieces)


async def _feed(verifier: BodyVerifier, piece: bytes) -> bytes:
    """``verifier.feed(piece)``: in the CPU pool from ``OFFLOAD_BYTES`` on, on the loop below (a
    hop costs more than verifying a small piece)."""
    return await run_cpu(verifier.feed, piece) if len(piece) >= OFFLOAD_BYTES else verifier.feed(piece)


async def put_body(call: S3Call) -> tuple[bytes | AsyncIterator[bytes], dict[str, str]]:
    """A PutObject's body and its verified checksums (by header name): a body of at most
    ``SMALL_BODY_BYTES`` on the wire is read whole and verified now, and answered as bytes (the
    checksums filled; a mismatch raises before the caller stores anything); a longer one (by its
    Content-Length, or found longer while reading one without) is :func:`body_stream`'s, from the
    pieces already read (the checksums filled when it ended)."""
    verifier = body_verifier(call.verified, call.signed)
    length = call.request.content_length
    head: list[bytes] = []
    if length is None or length <= SMALL_BODY_BYTES:
        size = 0
        async for chunk in call.request.content.iter_chunked(READ_CHUNK):
            head.append(chunk)
            size += len(chunk)
            if size > SMALL_BODY_BYTES:
                break
        else:
            data = await _feed(verifier, _joined(head))
            checksums = verifier.finish()
            call.ctx.metrics.received.inc(len(data))
            return data, checksums
    return await body_stream(call, head, verifier)


def _write_condition(if_none: str | None, if_match: str | None) -> Condition:
    """The check of ``If-None-Match: *`` / ``If-Match`` on the path's current entry (None: none),
    raising the S3 error a refused write answers."""

    def check(current: ValueRecord | None) -> None:
        if if_none is not None and current is not None:
            raise S3Error(
                "PreconditionFailed", "the object exists (If-None-Match: *)", Condition="If-None-Match"
            )
        if if_match is not None:
            if current is None:
                raise S3Error("NoSuchKey", "If-Match names an object that does not exist")
            if not etag_matches(if_match, ObjectStat.from_record(current).etag):
                raise S3Error(
                    "PreconditionFailed", "If-Match does not match the object's ETag", Condition="If-Match"
                )

    return check


async def check_write_conditions(call: S3Call) -> Condition | None:
    """``If-None-Match: *`` / ``If-Match`` of a write, checked now against the branch's current
    entry (a refusal before any byte is stored); the condition to stage the upload with, so that it
    holds when the entry is staged too (None: the write has none)."""
    if_none = call.signed.header("if-none-match")
    if_match = call.signed.header("if-match")
    if if_none is None and if_match is None:
        return None
    if if_none is not None and if_none.strip() != "*":
        raise S3Error("NotImplemented", "If-None-Match on a write supports '*' only")
    condition = _write_condition(if_none, if_match)
    await call.ctx.objects.check_condition(call.repo, call.ref, call.path, condition)
    return condition


@register(S3Operation.PUT_OBJECT)
async def put_object(call: S3Call) -> web.StreamResponse:
    if call.has_query("tagging"):
        raise S3Error("ERRLakeFSNotSupported", "object tagging is not supported")
    repo = await repository(call)
    if repo.read_only:
        raise S3Error("ErrReadOnlyRepository", f"repository {repo.id!r} is read-only")
    path = call.path
    if not path:
        raise S3Error("InvalidArgument", "the key names no object path within the branch")
    metadata = user_metadata(call)
    condition = await check_write_conditions(call)
    body, verified = await put_body(call)
    try:
        # The upload reads the branch before it writes a byte: a tag, a commit id or a missing
        # branch fails there (one KV read fewer than checking it here first).
        stat = await call.ctx.objects.upload(
            call.repo,
            call.ref,
            path,
            body,
            content_type=call.signed.header("content-type"),
            metadata=metadata or None,
            condition=condition,
        )
    except NotFoundError as e:
        if type(e) is not NotFoundError:
            raise
        raise not_a_branch(call.repo, call.ref) from None
    headers = {"ETag": quoted_etag(stat.etag)}
    headers.update({k: v for k, v in verified.items() if k.startswith("x-amz-checksum-")})
    return web.Response(status=200, headers=headers)


@register(S3Operation.DELETE_OBJECT)
async def delete_object(call: S3Call) -> web.StreamResponse:
    repo = await repository(call)
    if repo.read_only:
        raise S3Error("ErrReadOnlyRepository", f"repository {repo.id!r} is read-only")
    await require_branch(call, call.repo, call.ref)
    try:
        await call.ctx.objects.delete(call.repo, call.ref, call.path)
    except NotFoundError as e:
        if type(e) is not NotFoundError:
            raise
    return web.Response(status=204)
