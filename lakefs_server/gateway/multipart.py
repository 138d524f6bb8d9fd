"""Multipart uploads on every block store (local included): create, upload part, upload part copy
(with a byte range), complete (with ``If-None-Match: *``), abort, list parts, list uploads, and the
sweep of expired uploads.

State, shared by every instance through the KV store (:mod:`lakefs_core.refs.kvkeys`,
partition ``lakefs-open-multipart``): one record per open upload (``uploads/<repo>/<upload>``:
branch, path, content type, user metadata, namespace, creation time, and for a native upload the
object's address and the store's upload id) and one per uploaded part (``parts/<upload>/<part>``:
its ETag, size, and where its bytes are).

On a store with native multipart (:class:`~lakefs_core.block.base.MultipartStore`: S3 and local),
creation reserves the object's fresh address (``data/<slice>/<id>``) and opens the store's upload of
it: every part goes straight into that upload (S3: ``UploadPart``, a part copy within the store
``UploadPartCopy``; local: written in place into the file that becomes the object) and completion
is the store's (``CompleteMultipartUpload``; a rename): no byte is written twice. The completion
runs through :meth:`lakefs_core.repos.objects.Objects.upload_written`: the hard-delete journal's
intent for the address is recorded before the store completes, and the entry is staged with its
settle, as for a PUT. Nothing is at the address before the completion; an aborted or expired
upload is aborted in the store.

On other stores (memory) a part's bytes are an immutable object in the repository's namespace,
``_lakefs/multipart/<upload>/<part>-<token>`` (:func:`lakefs_core.keys.multipart_part_name`),
written first (verified as it streams, like a PUT), then its record swapped in (the object a
re-uploaded part replaces is deleted after the swap), and completion streams the parts in order
into ONE upload through :meth:`lakefs_core.repos.objects.Objects.upload` (written twice).

Complete checks the part list (ascending numbers, known parts with matching ETags, every part but
the last at least 5 MiB, as S3), keeping the client's connection alive with whitespace while it
runs (as S3 does), then forgets the parts and the records. An upload abandoned by its client, or a
completion that died half-way, is aborted by the daemon's sweep once older than
``gateway.multipart_expiry_seconds``: the sweep re-reads the record right before deleting, and
deletes only what the record names; the object of a completion that died before staging is the
journal's to remove. A crash between the store's creation and the record's write (fault point
``multipart:before-record``) leaves a store upload no record names: the same sweep lists each
repository namespace's store uploads (:meth:`~lakefs_core.block.base.MultipartStore.multipart_uploads`:
S3 under the namespace's prefix, local its reserved directory) and aborts those older than the
expiry that no record names, re-reading the records right before each abort.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import secrets
import time
from collections.abc import AsyncIterator
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from aiohttp import web

from lakefs_core import keys
from lakefs_core.auth.s3perms import S3Operation, parse_copy_source
from lakefs_core.block.base import BlockStore, MultipartStore, ObjectInfo, StoredPart
from lakefs_core.errors import CorruptDataError, LakeFSError, NotFoundError, PreconditionFailedError
from lakefs_core.faults import fault_point
from lakefs_core.kv.base import Expect
from lakefs_core.namespace import StorageNamespace
from lakefs_core.refs import kvkeys
from lakefs_core.repos.objects import ObjectStat
from lakefs_core.repos.staging_writes import Condition
from lakefs_server.context import ServerContext
from lakefs_server.gateway.common import quoted_etag, repository, require_branch, user_metadata
from lakefs_server.gateway.errors import S3Error, from_lakefs_error
from lakefs_server.gateway.handler import S3Call, register
from lakefs_server.gateway.objects import body_stream, check_write_conditions, parse_range, stat_object
from lakefs_server.gateway.xml import child_text, children, element, iso8601, read_xml, xml_response

__all__ = ["MIN_PART_BYTES", "sweep_expired"]

log = logging.getLogger(__name__)

MIN_PART_BYTES = 5 * 1024 * 1024
MAX_PARTS = 10_000
KEEPALIVE_SECONDS = 10.0
PARTITION = kvkeys.MULTIPART_PARTITION


@dataclass
class Upload:
    repo: str
    branch: str
    path: str
    namespace: str
    created: float
    content_type: str | None = None
    metadata: dict[str, str] = field(default_factory=dict)
    user: str = ""
    address: str = ""  # a native upload's object address (relative to the namespace)
    store_upload: str = ""  # and the store's upload id ("": parts are objects of their own)

    def encode(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True).encode()

    @classmethod
    def decode(cls, value: bytes) -> Upload:
        try:
            data: dict[str, Any] = json.loads(value)
            return cls(**data)
        except (ValueError, TypeError) as e:
            raise CorruptDataError(f"a multipart upload record is unreadable: {e}") from e


@dataclass
class Part:
    number: int
    address: str
    etag: str
    size: int
    modified: float
    checksum: str = ""  # the store's, of a native part

    def encode(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True).encode()

    @classmethod
    def decode(cls, value: bytes) -> Part:
        try:
            return cls(**json.loads(value))
        except (ValueError, TypeError) as e:
            raise CorruptDataError(f"a multipart part record is unreadable: {e}") from e


def _upload_id(call: S3Call) -> str:
    upload_id = call.query("uploadId") or ""
    if not upload_id or len(upload_id) > 128 or not upload_id.isalnum():
        raise S3Error("NoSuchUpload", "the upload id is not one this server issued")
    return upload_id


async def _upload(call: S3Call, upload_id: str) -> Upload:
    try:
        raw = await call.ctx.core.kv.get(PARTITION, kvkeys.multipart_upload_key(call.repo, upload_id))
    except NotFoundError:
        raise S3Error("NoSuchUpload", "the upload does not exist (completed, aborted or expired)") from None
    upload = Upload.decode(raw)
    if upload.branch != call.ref or upload.path != call.path:
        raise S3Error("NoSuchUpload", "the upload belongs to another key")
    return upload


async def _parts(ctx: ServerContext, upload_id: str, after: int = 0) -> AsyncIterator[Part]:
    prefix = kvkeys.multipart_parts_prefix(upload_id)
    start = kvkeys.multipart_part_key(upload_id, after + 1) if after < MAX_PARTS else prefix + b"\xff"
    async for entry in ctx.core.kv.scan(PARTITION, start):
        if not entry.key.startswith(prefix):
            return
        yield Part.decode(entry.value)


async def _store(call: S3Call | ServerContext, namespace: str) -> tuple[StorageNamespace, BlockStore]:
    ctx = call if isinstance(call, ServerContext) else call.ctx
    ns = StorageNamespace.parse(namespace)
    return ns, await ctx.graveler.namespace_store(ns)


@register(S3Operation.CREATE_MULTIPART_UPLOAD)
async def create(call: S3Call) -> web.StreamResponse:
    repo = await repository(call)
    if repo.read_only:
        raise S3Error("ErrReadOnlyRepository", f"repository {repo.id!r} is read-only")
    await require_branch(call, call.repo, call.ref)
    if not call.path:
        raise S3Error("InvalidArgument", "the key names no object path within the branch")
    upload_id = secrets.token_hex(16)
    upload = Upload(
        call.repo,
        call.ref,
        call.path,
        repo.storage_namespace,
        time.time(),
        call.signed.header("content-type"),
        user_metadata(call),
        call.username,
    )
    ns, store = await _store(call, repo.storage_namespace)
    if isinstance(store, MultipartStore):
        upload.address = call.ctx.objects.slices.new_relative_address()
        upload.store_upload = await store.multipart_create(
            ns.key(upload.address), content_type=upload.content_type, metadata=upload.metadata
        )
        fault_point("multipart:before-record")  # a crash here orphans the store's upload: the sweep's
    key = kvkeys.multipart_upload_key(call.repo, upload_id)
    try:
        await call.ctx.core.kv.set_if(PARTITION, key, upload.encode(), Expect.ABSENT)
    except BaseException:
        if isinstance(store, MultipartStore) and upload.store_upload:  # nothing will name it: drop it
            await asyncio.shield(store.multipart_abort(ns.key(upload.address), upload.store_upload))
        raise
    parts = [
        element("Bucket", call.repo),
        element("Key", call.target.key or ""),
        element("UploadId", upload_id),
    ]
    return xml_response("InitiateMultipartUploadResult", parts)


def _part_number(call: S3Call) -> int:
    raw = call.query("partNumber") or ""
    if not raw.isdigit() or not 1 <= int(raw) <= MAX_PARTS:
        raise S3Error("InvalidArgument", f"partNumber must be an integer between 1 and {MAX_PARTS}")
    return int(raw)


async def _copy_source(call: S3Call) -> tuple[str, ObjectStat, int, int]:
    """The copied object's repository and stat, and the copied range's start and length."""
    source = parse_copy_source(call.signed.header("x-amz-copy-source") or "")
    stat = await stat_object(call, source.repo, source.ref, source.path)
    span = parse_range(call.signed.header("x-amz-copy-source-range"), stat.size)
    start, length = (0, stat.size) if span is None else (span[0], span[1] - span[0] + 1)
    return source.repo, stat, start, length


def _body_length(call: S3Call) -> int:
    """The part's declared length (the decoded length of an aws-chunked body)."""
    decoded = call.signed.header("x-amz-decoded-content-length")
    if decoded is not None and decoded.isdigit():
        return int(decoded)
    if call.request.content_length is None:
        raise S3Error("MissingContentLength", "an uploaded part must declare its length")
    return call.request.content_length


async def _store_part(
    call: S3Call, upload: Upload, upload_id: str, number: int, copy: bool
) -> tuple[StoredPart, str, dict[str, str]]:
    """Store the part's bytes: its stored form, its object's address ("" for a native part),
    and the verified checksums of an uploaded body."""
    ns, store = await _store(call, upload.namespace)
    verified: dict[str, str] = {}
    body: AsyncIterator[bytes]
    if copy:
        repo, stat, start, length = await _copy_source(call)
        if isinstance(store, MultipartStore) and upload.store_upload:
            source_store, source_key = await call.ctx.objects.source_key(repo, stat)
            if source_store.uri == store.uri:  # the store copies the range itself (S3: UploadPartCopy)
                key = ns.key(upload.address)
                copied = await store.multipart_copy_part(
                    key, upload.store_upload, number, src_key=source_key, start=start, length=length
                )
                return copied, "", verified
        body = call.ctx.objects.read_stat(repo, stat, start=start, length=length)
    else:
        length = _body_length(call)
        body, verified = await body_stream(call)
    if isinstance(store, MultipartStore) and upload.store_upload:
        stored = await store.multipart_part(ns.key(upload.address), upload.store_upload, number, body, length)
        return stored, "", verified
    address = keys.multipart_part_name(upload_id, number, secrets.token_hex(8))
    info = await store.put(ns.key(address), body, if_none_match=True)
    return StoredPart(number, info.etag, info.size), address, verified


@register(S3Operation.UPLOAD_PART, S3Operation.UPLOAD_PART_COPY)
async def upload_part(call: S3Call) -> web.StreamResponse:
    upload_id, number = _upload_id(call), _part_number(call)
    upload = await _upload(call, upload_id)
    ns, store = await _store(call, upload.namespace)
    copy = call.operation is S3Operation.UPLOAD_PART_COPY
    stored, address, verified = await _store_part(call, upload, upload_id, number, copy)
    info = stored
    part = Part(number, address, stored.etag, stored.size, time.time(), stored.checksum)
    key = kvkeys.multipart_part_key(upload_id, number)
    kv = call.ctx.core.kv
    try:
        raw: bytes | None = await kv.get(PARTITION, key)
    except NotFoundError:
        raw = None
    previous = Part.decode(raw) if raw is not None else None
    try:
        expected = Expect.ABSENT if raw is None else Expect.equals(raw)
        await kv.set_if(PARTITION, key, part.encode(), expected)
    except PreconditionFailedError:
        if address:
            await store.delete(ns.key(address))
        raise S3Error("OperationAborted", "the part was uploaded again concurrently; retry") from None
    if previous is not None and previous.address and previous.address != address:
        await store.delete(ns.key(previous.address))
    if copy:
        result = [
            element("ETag", quoted_etag(info.etag)),
            element("LastModified", iso8601(datetime.now(UTC))),
        ]
        return xml_response("CopyPartResult", result)
    headers = {"ETag": quoted_etag(info.etag)}
    headers.update({k: v for k, v in verified.items() if k.startswith("x-amz-checksum-")})
    return web.Response(status=200, headers=headers)


async def _requested_parts(call: S3Call, upload_id: str) -> list[Part]:
    document = await read_xml(call.request, "CompleteMultipartUpload")
    requested: list[tuple[int, str]] = []
    for item in children(document, "Part"):
        raw_number, etag = child_text(item, "PartNumber") or "", child_text(item, "ETag") or ""
        if not raw_number.strip().isdigit() or len(raw_number) > 6:
            raise S3Error("MalformedXML", "every Part names its PartNumber")
        requested.append((int(raw_number), etag.strip().strip('"')))
    if not requested:
        raise S3Error("MalformedXML", "the upload names no parts")
    if any(b[0] <= a[0] for a, b in itertools.pairwise(requested)):
        raise S3Error("InvalidPartOrder", "the parts must be listed in ascending order")
    stored = {part.number: part async for part in _parts(call.ctx, upload_id)}
    chosen = []
    for number, etag in requested:
        part = stored.get(number)
        if part is None or (etag and etag != part.etag.strip('"')):
            raise S3Error("InvalidPart", f"part {number} was not uploaded or its ETag differs")
        chosen.append(part)
    for part in chosen[:-1]:
        if part.size < MIN_PART_BYTES:
            raise S3Error("EntityTooSmall", f"part {part.number} is smaller than 5 MiB and not the last")
    return chosen


async def _concatenated(store: BlockStore, ns: StorageNamespace, parts: list[Part]) -> AsyncIterator[bytes]:
    for part in parts:
        async for chunk in store.stream(ns.key(part.address)):
            yield chunk


async def _completion(
    ctx: ServerContext,
    upload: Upload,
    store: BlockStore,
    ns: StorageNamespace,
    parts: list[Part],
    *,
    condition: Condition | None,
) -> ObjectStat:
    """Make the parts the object and stage it (only if ``condition`` then holds: the request's
    ``If-None-Match: *``): the store's own completion for a native upload (journalled before it
    runs), else one upload of the concatenated parts."""
    if not (isinstance(store, MultipartStore) and upload.store_upload):
        return await ctx.objects.upload(
            upload.repo,
            upload.branch,
            upload.path,
            _concatenated(store, ns, parts),
            content_type=upload.content_type,
            metadata=upload.metadata or None,
            condition=condition,
        )
    native, stored = store, [StoredPart(p.number, p.etag, p.size, p.checksum) for p in parts]

    async def complete(_: BlockStore, key: str) -> ObjectInfo:
        info = await native.multipart_complete(key, upload.store_upload, stored, if_none_match=True)
        return replace(info, content_type=info.content_type or upload.content_type)

    return await ctx.objects.upload_written(
        upload.repo,
        upload.branch,
        upload.path,
        upload.address,
        complete,
        metadata=upload.metadata or None,
        condition=condition,
    )


@register(S3Operation.COMPLETE_MULTIPART_UPLOAD)
async def complete(call: S3Call) -> web.StreamResponse:
    upload_id = _upload_id(call)
    upload = await _upload(call, upload_id)
    parts = await _requested_parts(call, upload_id)
    condition = await check_write_conditions(call)
    ns, store = await _store(call, upload.namespace)
    response = web.StreamResponse(status=200, headers={"Content-Type": "application/xml"})
    response.headers["x-amz-request-id"] = call.request_id
    await response.prepare(call.request)
    await response.write(b'<?xml version="1.0" encoding="UTF-8"?>\n')
    task = asyncio.ensure_future(_completion(call.ctx, upload, store, ns, parts, condition=condition))
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=KEEPALIVE_SECONDS)
            if done:
                break
            await response.write(b" ")  # S3's keep-alive while a completion runs
        stat = task.result()
    except S3Error as e:
        await response.write(_error_xml(e.code, e.message, call.request_id))
        await response.write_eof()
        return response
    except Exception as e:
        if not isinstance(e, LakeFSError):
            log.exception("completing multipart upload %s failed", upload_id)
        mapped = (
            from_lakefs_error(e) if isinstance(e, LakeFSError) else S3Error("InternalError", "internal error")
        )
        await response.write(_error_xml(mapped.code, mapped.message, call.request_id))
        await response.write_eof()
        return response
    finally:
        if not task.done():
            task.cancel()
    await _forget(call.ctx, upload, upload_id, store, ns, completed=True)
    body = (
        '<CompleteMultipartUploadResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
        + element("Location", f"/{call.repo}/{call.target.key or ''}")
        + element("Bucket", call.repo)
        + element("Key", call.target.key or "")
        + element("ETag", quoted_etag(stat.etag))
        + "</CompleteMultipartUploadResult>"
    )
    await response.write(body.encode())
    await response.write_eof()
    return response


def _error_xml(code: str, message: str, request_id: str) -> bytes:
    return (
        "<Error>"
        + element("Code", code)
        + element("Message", message)
        + element("RequestId", request_id)
        + "</Error>"
    ).encode()


async def _forget(
    ctx: ServerContext,
    upload: Upload,
    upload_id: str,
    store: BlockStore,
    ns: StorageNamespace,
    *,
    completed: bool = False,
) -> None:
    """Delete the part objects (or abort the store's upload, unless ``completed``), the part
    records, then the upload record (last: a sweep finds a half-forgotten upload by it)."""
    parts = [part async for part in _parts(ctx, upload_id)]
    if isinstance(store, MultipartStore) and upload.store_upload and not completed:
        await store.multipart_abort(ns.key(upload.address), upload.store_upload)
    own = [ns.key(part.address) for part in parts if part.address]
    if own:
        await store.delete_many(own)
    kv = ctx.core.kv
    for part in parts:
        await kv.delete(PARTITION, kvkeys.multipart_part_key(upload_id, part.number))
    await kv.delete(PARTITION, kvkeys.multipart_upload_key(upload.repo, upload_id))


@register(S3Operation.ABORT_MULTIPART_UPLOAD)
async def abort(call: S3Call) -> web.StreamResponse:
    upload_id = _upload_id(call)
    upload = await _upload(call, upload_id)
    ns, store = await _store(call, upload.namespace)
    await _forget(call.ctx, upload, upload_id, store, ns)
    return web.Response(status=204)


@register(S3Operation.LIST_PARTS)
async def list_parts(call: S3Call) -> web.StreamResponse:
    upload_id = _upload_id(call)
    await _upload(call, upload_id)
    raw_max, raw_marker = call.query("max-parts") or "1000", call.query("part-number-marker") or "0"
    if not raw_max.isdigit() or not raw_marker.isdigit():
        raise S3Error("InvalidArgument", "max-parts and part-number-marker are integers")
    limit, marker = min(int(raw_max), 1000), min(int(raw_marker), MAX_PARTS)
    out: list[str] = []
    truncated, last = False, marker
    async for part in _parts(call.ctx, upload_id, marker):
        if len(out) == limit:
            truncated = True
            break
        out.append(
            "<Part>"
            + element("PartNumber", part.number)
            + element("LastModified", iso8601(datetime.fromtimestamp(part.modified, UTC)))
            + element("ETag", quoted_etag(part.etag))
            + element("Size", part.size)
            + "</Part>"
        )
        last = part.number
    head = [
        element("Bucket", call.repo),
        element("Key", call.target.key or ""),
        element("UploadId", upload_id),
        element("PartNumberMarker", marker),
        element("NextPartNumberMarker", last),
        element("MaxParts", limit),
        element("IsTruncated", truncated),
        "<StorageClass>STANDARD</StorageClass>",
    ]
    return xml_response("ListPartsResult", [*head, *out])


@register(S3Operation.LIST_MULTIPART_UPLOADS)
async def list_uploads(call: S3Call) -> web.StreamResponse:
    await repository(call)
    if call.query("prefix") or call.query("delimiter") or call.query("encoding-type"):
        raise S3Error(
            "NotImplemented", "prefix, delimiter and encoding-type are not supported here (as lakeFS)"
        )
    raw_max = call.query("max-uploads") or "1000"
    if not raw_max.isdigit():
        raise S3Error("InvalidArgument", "max-uploads is an integer")
    limit = min(int(raw_max), 1000)
    prefix = kvkeys.multipart_uploads_prefix(call.repo)
    uploads: list[tuple[str, str, Upload]] = []
    async for entry in call.ctx.core.kv.scan(PARTITION, prefix):
        if not entry.key.startswith(prefix):
            break
        upload = Upload.decode(entry.value)
        uploads.append((f"{upload.branch}/{upload.path}", entry.key[len(prefix) :].decode(), upload))
    uploads.sort(key=lambda u: (u[0], u[1]))
    key_marker, id_marker = call.query("key-marker") or "", call.query("upload-id-marker") or ""
    if key_marker:
        uploads = [u for u in uploads if (u[0], u[1]) > (key_marker, id_marker if id_marker else "\uffff")]
    truncated = len(uploads) > limit
    out = [
        "<Upload>"
        + element("Key", key)
        + element("UploadId", upload_id)
        + "<Initiator>" + element("ID", upload.user) + element("DisplayName", upload.user) + "</Initiator>"
        + "<Owner>" + element("ID", upload.user) + element("DisplayName", upload.user) + "</Owner>"
        + "<StorageClass>STANDARD</StorageClass>"
        + element("Initiated", iso8601(datetime.fromtimestamp(upload.created, UTC)))
        + "</Upload>"
        for key, upload_id, upload in uploads[:limit]
    ]  # fmt: skip
    head = [
        element("Bucket", call.repo),
        element("KeyMarker", key_marker),
        element("UploadIdMarker", id_marker),
    ]
    if truncated:
        last = uploads[limit - 1]
        head += [element("NextKeyMarker", last[0]), element("NextUploadIdMarker", last[1])]
    head += [element("MaxUploads", limit), element("IsTruncated", truncated)]
    return xml_response("ListMultipartUploadsResult", [*head, *out])


async def sweep_expired(ctx: ServerContext) -> int:
    """Abort every multipart upload older than ``gateway.multipart_expiry_seconds``; the number aborted."""
    deadline = time.time() - ctx.config.gateway.multipart_expiry_seconds
    expired: list[tuple[bytes, str, Upload]] = []
    async for entry in ctx.core.kv.scan(PARTITION, kvkeys.MULTIPART_UPLOADS_PREFIX):
        if not entry.key.startswith(kvkeys.MULTIPART_UPLOADS_PREFIX):
            break
        upload = Upload.decode(entry.value)
        if upload.created < deadline:
            expired.append((entry.key, entry.key.rpartition(b"/")[2].decode(), upload))
    aborted = 0
    for key, upload_id, upload in expired:
        try:  # re-read right before deleting: a completion may have forgotten it meanwhile
            current = Upload.decode(await ctx.core.kv.get(PARTITION, key))
        except NotFoundError:
            continue
        if current.created >= deadline:
            continue
        ns, store = await _store(ctx, upload.namespace)
        await _forget(ctx, upload, upload_id, store, ns)
        aborted += 1
    return aborted + await _sweep_orphans(ctx, deadline)


async def _recorded_store_uploads(ctx: ServerContext) -> set[str]:
    """The store upload ids every open upload's KV record names."""
    named: set[str] = set()
    async for entry in ctx.core.kv.scan(PARTITION, kvkeys.MULTIPART_UPLOADS_PREFIX):
        if not entry.key.startswith(kvkeys.MULTIPART_UPLOADS_PREFIX):
            break
        named.add(Upload.decode(entry.value).store_upload)
    return named


async def _sweep_orphans(ctx: ServerContext, deadline: float) -> int:
    """Abort the store uploads started before ``deadline`` that no KV record names: a crash between
    the store's creation and the record's write left them (nothing else would ever abort them). Only
    in a repository's namespace (S3: keys under its prefix; local: the store's reserved directory),
    and only after re-reading the records right before each abort."""
    namespaces: set[str] = set()
    async for repo in ctx.graveler.list_repositories():
        namespaces.add(repo.storage_namespace)
    recorded = await _recorded_store_uploads(ctx)
    aborted = 0
    for namespace in sorted(namespaces):
        ns, store = await _store(ctx, namespace)
        if not isinstance(store, MultipartStore):
            continue
        prefix = ns.prefix + "/" if ns.prefix else ""
        orphans = [
            upload
            async for upload in store.multipart_uploads(prefix)
            if upload.initiated < deadline and upload.upload_id not in recorded
        ]
        for orphan in orphans:
            if orphan.upload_id in await _recorded_store_uploads(ctx):
                continue  # recorded meanwhile: the upload's, not ours
            log.info("aborting orphaned multipart upload %s of %s", orphan.upload_id, namespace)
            await store.multipart_abort(orphan.key, orphan.upload_id)
            aborted += 1
    return aborted
