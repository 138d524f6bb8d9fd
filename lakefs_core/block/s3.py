"""S3 :class:`~lakefs_core.block.base.BlockStore` (``s3://bucket``) through aioboto3.

One store holds ONE aiobotocore client for its whole life: open it with ``await store.open()`` (or
``async with S3BlockStore(...)``, or let the first operation open it) and ``await store.close()`` it.
The client belongs to the event loop it was opened on.

Behaviour on top of the common contract:

- ``put`` of up to ``multipart_threshold`` bytes is one ``PutObject``; larger bodies (bytes or streamed)
  go through a multipart upload (parts of ``multipart_chunk`` bytes, growing after every 2,000 parts so
  10,000 parts reach S3's 5 TiB limit; up to ``multipart_concurrency`` parts in flight). A failed or
  cancelled multipart upload is aborted. ``if_none_match=True`` sends ``If-None-Match: *`` on
  ``PutObject``/``CompleteMultipartUpload``; HTTP 412 becomes
  :class:`~lakefs_core.errors.PreconditionFailedError` (409 ``ConditionalRequestConflict`` is a race
  with another conditional write and is retried).
- Ambiguous create-only writes: when an attempt failed transiently (its outcome unknown) and a retry
  gets 412, the object now stored is compared with what we wrote (MD5 ETag for single-part puts, the
  multipart ETag computed from the part ETags for multipart uploads). Equal means our write landed:
  success. Otherwise 412 stands. The same check resolves a retried ``CompleteMultipartUpload`` that
  answers ``NoSuchUpload``.
- Transient failures (HTTP 5xx but 507, and 429, ``SlowDown``, ``RequestTimeout``, throttling codes, 409
  ``ConditionalRequestConflict``/``OperationAborted``, connection errors, read timeouts, truncated
  bodies) are retried with tenacity (exponential backoff with full jitter, ``max_attempts`` attempts in
  all; botocore's own retries are off), then raised as :class:`~lakefs_core.errors.TransientError`, or
  :class:`~lakefs_core.errors.UnreachableError` when the endpoint could not be connected to.
  ``stream`` resumes an interrupted body with a ranged ``GetObject`` pinned by ``If-Match`` to the
  ETag it started with (a replaced object raises :class:`~lakefs_core.errors.ConflictError`).
- ``NoSuchKey``/404 -> :class:`~lakefs_core.errors.NotFoundError`; ``NoSuchBucket`` ->
  ``NotFoundError`` naming the bucket; ``AccessDenied``/403 and credential errors ->
  :class:`AccessDeniedError`; other 4xx -> :class:`~lakefs_core.errors.BadInputError`; a full
  S3-compatible store (HTTP 507, MinIO's ``XMinioStorageFull``) ->
  :class:`~lakefs_core.errors.StorageFullError`, not retried.
- ``put`` returns ``last_modified=None`` (``PutObject`` does not report it; ``head`` does).
- ``copy`` is one server-side ``CopyObject`` (S3 limits it to sources up to 5 GiB) followed by a
  ``HeadObject`` of the copy. A create-only copy streams the object through ``put`` instead (see
  :meth:`S3BlockStore.copy`).
- ``list_keys`` is ``ListObjectsV2`` reduced to key, size and mtime; ``delete_batch`` is ONE
  ``DeleteObjects`` (``Quiet=False``, an optional ``ETag`` per key) without retries or sleeps: the
  outcome per key, ``throttled`` and ``Retry-After`` go back to the caller's limiter.
- Credentials never appear in messages, logs or ``repr``.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import functools
import hashlib
import heapq
import logging
import random
import re
from collections.abc import (
    AsyncGenerator,
    AsyncIterable,
    AsyncIterator,
    Awaitable,
    Callable,
    Mapping,
    Sequence,
)
from contextlib import AsyncExitStack
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

import aioboto3
from aiobotocore.config import AioConfig
from botocore.exceptions import ClientError
from botocore.handlers import add_expect_header
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception,
    stop_after_attempt,
    wait_random_exponential,
)

from lakefs_core.block._common import (
    Rechunker,
    check_body,
    check_delete_batch,
    check_key,
    check_list_args,
    check_list_keys_args,
    check_positive,
    check_range,
    closed_error,
    iter_body,
    normalize_content_type,
    normalize_metadata,
    put_batch_by_puts,
)
from lakefs_core.block.aws_session import SharedTLSSession, new_session
from lakefs_core.block.base import (
    MAX_DELETE_BATCH,
    Body,
    CommonPrefix,
    DeleteResult,
    FailedKey,
    KeyInfo,
    ObjectInfo,
    OpenUpload,
    PutItem,
    StoredPart,
)
from lakefs_core.block.s3_errors import (
    ACCESS_CODES,
    THROTTLE_CODES,
    TRANSIENT_CODES,
    error_code,
    is_precondition,
    is_throttle,
    is_transient,
    retry_after_seconds,
    translate_error,
)
from lakefs_core.block.s3_multipart import (
    MAX_PARTS,
    MultipartUpload,
    NativeMultipart,
    multipart_etag,
    resolving_retries,
    strip_etag,
)
from lakefs_core.block.s3_settings import MIB, S3Settings
from lakefs_core.errors import (
    AccessDeniedError,
    BadInputError,
    ConflictError,
    LakeFSError,
    NotFoundError,
    TransientError,
)

if TYPE_CHECKING:
    from types_aiobotocore_s3.client import S3Client

__all__ = [
    "MAX_PARTS",
    "AccessDeniedError",
    "S3BlockStore",
    "S3Settings",
    "is_transient",
    "multipart_etag",
]

log = logging.getLogger(__name__)

T = TypeVar("T")

DELETE_BATCH = 1000

_BUCKET = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{1,253}[A-Za-z0-9]")


def _sort_key(item: ObjectInfo | CommonPrefix) -> str:
    return item.key if isinstance(item, ObjectInfo) else item.prefix


def _delete_outcome(keys: Sequence[str], resp: Mapping[str, Any]) -> DeleteResult:
    """The per-key outcome of a ``DeleteObjects`` answer for the batch ``keys``; whatever it names
    outside the batch is ignored (it cannot vouch for keys we did not send)."""
    asked = set(keys)
    result = DeleteResult()
    failed: dict[str, FailedKey] = {}
    for err in resp.get("Errors") or []:
        key, code = str(err.get("Key", "")), str(err.get("Code", "") or "Unknown")
        if key in asked and key not in failed:
            failed[key] = FailedKey(key, code, code in TRANSIENT_CODES)
            result.throttled = result.throttled or code in THROTTLE_CODES
    deleted = {str(d.get("Key", "")) for d in resp.get("Deleted") or []}
    for key in keys:
        if key in failed:
            result.failed.append(failed[key])
        elif key in deleted:
            result.deleted.append(key)
        else:
            result.failed.append(FailedKey(key, "NoOutcome", True))
    return result


MAX_PRESIGN_SECONDS = 7 * 24 * 3600  # SigV4 query auth's longest validity


class S3BlockStore:
    """A block store in one S3 bucket. ``session``: the aioboto3 session its client is made from (a
    new one by default, :func:`~lakefs_core.block.aws_session.new_session`: botocore's S3 model is
    parsed once per process, not per session); stores made in one thread may share one."""

    def __init__(
        self, bucket: str, *, settings: S3Settings | None = None, session: aioboto3.Session | None = None
    ) -> None:
        if not isinstance(bucket, str) or not _BUCKET.fullmatch(bucket):
            raise BadInputError(f"{bucket!r} is not a valid bucket name", field="bucket")
        self._bucket = bucket
        self._settings = settings if settings is not None else S3Settings()
        self._session = session
        self._client_ref: S3Client | None = None
        self._stack: AsyncExitStack | None = None
        self._open_lock = asyncio.Lock()
        self._closed = False

    @property
    def uri(self) -> str:
        return f"s3://{self._bucket}"

    @property
    def bucket(self) -> str:
        return self._bucket

    @property
    def settings(self) -> S3Settings:
        return self._settings

    def __repr__(self) -> str:
        return f"S3BlockStore({self._bucket!r}, endpoint_url={self._settings.endpoint_url!r})"

    # -- lifecycle ----------------------------------------------------------------------------------

    async def open(self) -> S3BlockStore:
        """Create the store's client (idempotent). Returns ``self``."""
        async with self._open_lock:
            if self._closed:
                raise closed_error(self.uri)
            if self._client_ref is not None:
                return self
            s = self._settings
            style = s.addressing_style or ("path" if s.endpoint_url else "auto")
            config = AioConfig(
                region_name=s.region,
                connect_timeout=s.connect_timeout,
                read_timeout=s.read_timeout,
                max_pool_connections=s.max_pool_connections,
                retries={"total_max_attempts": 1, "mode": "standard"},  # tenacity retries, not botocore
                s3={"addressing_style": style},
                # SigV4 everywhere (what requests use already), presigned URLs included: botocore
                # would presign with SigV2 otherwise, which lakeFS and newer regions refuse
                signature_version="s3v4",
                request_checksum_calculation=s.request_checksum_calculation,
                response_checksum_validation="when_supported",
                http_session_cls=SharedTLSSession,  # one TLS context per process, not per client
            )
            session = self._session or new_session()
            stack = AsyncExitStack()
            try:
                client = await stack.enter_async_context(
                    session.client(
                        "s3",
                        region_name=s.region,
                        endpoint_url=s.endpoint_url,
                        aws_access_key_id=s.access_key_id,
                        aws_secret_access_key=s.secret_access_key,
                        aws_session_token=s.session_token,
                        config=config,
                    )
                )
            except BaseException as e:
                await stack.aclose()
                if isinstance(e, Exception):
                    raise self._translate(e, "open client", None) from e
                raise
            # botocore asks for "Expect: 100-continue" on every PUT/POST with a file-like body, and
            # aiohttp waits for the interim answer without any timeout (its sock_read does not cover
            # that wait): a server or proxy that took the request and went silent held a PutObject
            # forever, past read_timeout and every retry. The bodies are in memory, so the body is
            # simply sent; read_timeout then bounds the wait for the answer.
            client.meta.events.unregister("before-call.s3", add_expect_header)
            self._stack, self._client_ref = stack, client
            return self

    async def close(self) -> None:
        async with self._open_lock:
            self._closed = True
            stack, self._stack, self._client_ref = self._stack, None, None
            if stack is not None:
                await stack.aclose()

    async def __aenter__(self) -> S3BlockStore:
        return await self.open()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def _client(self) -> S3Client:
        client = self._client_ref
        if client is None:
            if self._closed:
                raise closed_error(self.uri)
            await self.open()
            client = self._client_ref
            assert client is not None
        return client

    # -- errors and retries -------------------------------------------------------------------------

    def _where(self, key: str | None) -> str:
        return f"{self.uri}/{key}" if key else self.uri

    def _translate(self, e: BaseException, op: str, key: str | None) -> LakeFSError:
        where = f"{op} {self._where(key)}"
        return translate_error(e, where, bucket=self._bucket, key=key, settings=self._settings)

    def _log_retry(self, op: str, key: str | None) -> Callable[[RetryCallState], None]:
        def before_sleep(state: RetryCallState) -> None:
            exc = state.outcome.exception() if state.outcome is not None else None
            what = error_code(exc) if isinstance(exc, ClientError) else type(exc).__name__
            log.warning(
                "%s %s: transient %s, retrying (attempt %d of %d)",
                op,
                self._where(key),
                what,
                state.attempt_number,
                self._settings.max_attempts,
            )

        return before_sleep

    def _backoff(self, failures: int) -> float:
        """The sleep before retry number ``failures``: exponential with full jitter (like tenacity's)."""
        s = self._settings
        high = min(s.retry_max_backoff, s.retry_initial_backoff * 2 ** max(0, failures - 1))
        return random.uniform(0, high)

    async def _call(self, op: str, key: str | None, fn: Callable[[], Awaitable[T]]) -> T:
        """Run ``fn`` with bounded retries of transient errors; translate what finally escapes."""
        s = self._settings
        retrying = AsyncRetrying(
            stop=stop_after_attempt(s.max_attempts),
            wait=wait_random_exponential(multiplier=s.retry_initial_backoff, max=s.retry_max_backoff),
            retry=retry_if_exception(is_transient),
            before_sleep=self._log_retry(op, key),
            reraise=True,
        )
        try:
            async for attempt in retrying:
                with attempt:
                    return await fn()
        except LakeFSError:
            raise
        except Exception as e:
            raise self._translate(e, op, key) from e
        raise AssertionError("unreachable: tenacity re-raises the last error")  # pragma: no cover

    async def _stored_etag(self, key: str) -> str | None:
        try:
            return (await self.head(key)).etag
        except NotFoundError:
            return None

    # -- BlockStore ---------------------------------------------------------------------------------

    async def put(
        self,
        key: str,
        body: Body,
        *,
        if_none_match: bool = False,
        content_type: str | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> ObjectInfo:
        check_key(key)
        check_body(body)
        ctype = normalize_content_type(content_type)
        meta = normalize_metadata(metadata)
        self._check_open()
        threshold = self._settings.multipart_threshold
        if isinstance(body, (bytes, bytearray, memoryview)):
            data = bytes(body)
            if len(data) <= threshold:
                return await self._put_single(key, data, if_none_match=if_none_match, ctype=ctype, meta=meta)
            return await self._multipart(key).put(
                data, None, if_none_match=if_none_match, ctype=ctype, meta=meta
            )
        async with contextlib.aclosing(iter_body(body)) as chunks:
            buf = bytearray()
            async for chunk in chunks:
                buf += chunk
                if len(buf) > threshold:
                    return await self._multipart(key).put(
                        bytes(buf), chunks, if_none_match=if_none_match, ctype=ctype, meta=meta
                    )
            return await self._put_single(
                key, bytes(buf), if_none_match=if_none_match, ctype=ctype, meta=meta
            )

    def _check_open(self) -> None:
        if self._closed:
            raise closed_error(self.uri)

    async def _put_single(
        self, key: str, data: bytes, *, if_none_match: bool, ctype: str, meta: dict[str, str]
    ) -> ObjectInfo:
        client = await self._client()
        expected = hashlib.md5(data, usedforsecurity=False).hexdigest()
        kwargs: dict[str, Any] = {
            "Bucket": self._bucket,
            "Key": key,
            "Body": data,
            "ContentType": ctype,
            "Metadata": meta,
        }
        if if_none_match:
            kwargs["IfNoneMatch"] = "*"

        async def landed() -> bool:
            return await self._stored_etag(key) == expected

        def ambiguous(e: ClientError) -> bool:
            # A retry answered 412: did our earlier attempt (outcome unknown) land after all?
            return if_none_match and is_precondition(e)

        attempt = resolving_retries(lambda: client.put_object(**kwargs), ambiguous, landed)
        resp = await self._call("PutObject", key, attempt)
        etag = expected if resp is None else strip_etag(resp["ETag"])
        return ObjectInfo(key=key, size=len(data), etag=etag, content_type=ctype, metadata=dict(meta))

    def _multipart(self, key: str) -> MultipartUpload:
        return MultipartUpload(
            bucket=self._bucket,
            key=key,
            where=self._where(key),
            settings=self._settings,
            client=self._client,
            call=self._call,
            stored_etag=self._stored_etag,
        )

    # -- multipart (MultipartStore): s3_multipart.NativeMultipart --------------------------------

    def _native(self) -> NativeMultipart:
        self._check_open()
        return NativeMultipart(self._bucket, self._settings, self._client, self._call, self._stored_etag)

    async def multipart_create(
        self, key: str, *, content_type: str | None = None, metadata: Mapping[str, str] | None = None
    ) -> str:
        check_key(key)
        return await self._native().create(
            key, normalize_content_type(content_type), normalize_metadata(metadata)
        )

    async def multipart_part(
        self, key: str, upload_id: str, number: int, body: AsyncIterable[bytes], size: int
    ) -> StoredPart:
        check_key(key)
        async with contextlib.aclosing(iter_body(body)) as chunks:
            return await self._native().part(key, upload_id, number, chunks, size)

    async def multipart_copy_part(
        self, key: str, upload_id: str, number: int, *, src_key: str, start: int, length: int
    ) -> StoredPart:
        check_key(key)
        check_key(src_key, field="src_key")
        return await self._native().copy_part(
            key, upload_id, number, src_key=src_key, start=start, length=length
        )

    async def multipart_complete(
        self, key: str, upload_id: str, parts: Sequence[StoredPart], *, if_none_match: bool = False
    ) -> ObjectInfo:
        check_key(key)
        return await self._native().complete(key, upload_id, parts, if_none_match)

    async def multipart_abort(self, key: str, upload_id: str) -> None:
        check_key(key)
        await self._native().abort(key, upload_id)

    def multipart_uploads(self, prefix: str) -> AsyncIterator[OpenUpload]:
        return self._native().uploads(prefix)

    @staticmethod
    def _range(start: int, end: int | None) -> str | None:
        if start == 0 and end is None:
            return None
        return f"bytes={start}-" if end is None else f"bytes={start}-{end - 1}"

    async def put_batch(
        self, items: Sequence[PutItem], *, if_none_match: bool = False, concurrency: int = 8
    ) -> list[ObjectInfo]:
        """Bounded concurrent PUTs (a loader runs in a worker thread when its PUT starts)."""
        self._check_open()
        return await put_batch_by_puts(
            self.put, items, if_none_match=if_none_match, concurrency=concurrency, thread_loads=True
        )

    async def get(self, key: str, *, start: int = 0, length: int | None = None) -> bytes:
        check_key(key)
        check_range(start, length)
        if length == 0:
            await self.head(key)
            return b""
        client = await self._client()
        args: dict[str, Any] = {"Bucket": self._bucket, "Key": key}
        rng = self._range(start, None if length is None else start + length)
        if rng is not None:
            args["Range"] = rng

        async def attempt() -> bytes:
            try:
                resp = await client.get_object(**args)
            except ClientError as e:
                if error_code(e) == "InvalidRange":
                    return b""  # the range starts at or after the end
                raise
            body = resp["Body"]
            async with body:
                return bytes(await body.read())

        return await self._call("GetObject", key, attempt)

    async def stream(
        self, key: str, *, start: int = 0, length: int | None = None, chunk_size: int = 1 << 20
    ) -> AsyncGenerator[bytes, None]:
        check_key(key)
        check_range(start, length)
        check_positive(chunk_size, "chunk_size")
        if length == 0:
            await self.head(key)
            return
        client = await self._client()
        end = None if length is None else start + length
        pos = start
        etag: str | None = None
        failures = 0
        rechunk = Rechunker(chunk_size)

        while end is None or pos < end:
            get = functools.partial(self._get_at, client, key, pos, end, etag)  # from here, this ETag
            resp = await self._call("GetObject", key, get)
            if resp is None:
                break
            if etag is None:
                etag = resp["ETag"]
            body = resp["Body"]
            finished = False
            async with body:
                while True:
                    try:
                        data = await body.read(chunk_size)
                    except Exception as e:
                        if not is_transient(e):
                            raise self._translate(e, "GetObject", key) from e
                        failures += 1
                        if failures >= self._settings.max_attempts:
                            raise self._translate(e, "GetObject", key) from e
                        log.warning(
                            "GetObject %s: body interrupted at byte %d, resuming", self._where(key), pos
                        )
                        break
                    if not data:
                        finished = True
                        break
                    failures = 0
                    pos += len(data)
                    for piece in rechunk.push(data):
                        yield piece
            if finished:
                break
            await asyncio.sleep(self._backoff(failures))
        tail = rechunk.flush()
        if tail:
            yield tail

    async def _get_at(self, client: Any, key: str, offset: int, end: int | None, pinned: str | None) -> Any:
        """GetObject of ``key`` from ``offset`` (to ``end``; None: to its end), only while its ETag is
        still ``pinned`` when given (a replaced object is :class:`ConflictError`); None for a range
        that starts past the object's end. One attempt: :meth:`stream` retries it."""
        args: dict[str, Any] = {"Bucket": self._bucket, "Key": key}
        rng = self._range(offset, end)
        if rng is not None:
            args["Range"] = rng
        if pinned is not None:
            args["IfMatch"] = pinned
        try:
            return await client.get_object(**args)
        except ClientError as e:
            if error_code(e) == "InvalidRange":
                return None
            if pinned is not None and is_precondition(e):
                raise ConflictError(f"{self._where(key)}: object replaced while being read") from e
            raise

    async def head(self, key: str) -> ObjectInfo:
        check_key(key)
        client = await self._client()
        resp = await self._call("HeadObject", key, lambda: client.head_object(Bucket=self._bucket, Key=key))
        return ObjectInfo(
            key=key,
            size=int(resp["ContentLength"]),
            etag=strip_etag(resp["ETag"]),
            last_modified=resp.get("LastModified"),
            content_type=resp.get("ContentType"),
            metadata=dict(resp.get("Metadata") or {}),
        )

    async def presign(self, key: str, *, method: str, expires_seconds: int) -> str:
        """A URL that lets its holder ``GET`` or ``PUT`` ``key`` without credentials until it expires
        (SigV4 query signing by the client's own signer: no request is sent)."""
        check_key(key)
        operations = {"GET": "get_object", "PUT": "put_object"}
        if method not in operations:
            raise BadInputError("must be GET or PUT", field="method")
        if not 1 <= expires_seconds <= MAX_PRESIGN_SECONDS:
            raise BadInputError("must be between 1 second and 7 days", field="expires_seconds")
        client = await self._client()
        params = {"Bucket": self._bucket, "Key": key}
        return await self._call(
            "Presign", key, lambda: client.generate_presigned_url(
                operations[method], Params=params, ExpiresIn=expires_seconds)
        )  # fmt: skip

    async def exists(self, key: str) -> bool:
        try:
            await self.head(key)
        except NotFoundError:
            return False
        return True

    async def delete(self, key: str) -> None:
        check_key(key)
        client = await self._client()
        await self._call("DeleteObject", key, lambda: client.delete_object(Bucket=self._bucket, Key=key))

    async def delete_many(self, keys: Sequence[str]) -> None:
        checked = list(dict.fromkeys(check_key(k, field="keys") for k in keys))
        if not checked:
            return
        client = await self._client()
        for i in range(0, len(checked), DELETE_BATCH):
            remaining = checked[i : i + DELETE_BATCH]
            for round_ in range(1, self._settings.max_attempts + 1):
                request = {"Objects": [{"Key": k} for k in remaining], "Quiet": True}
                resp = await self._call(
                    "DeleteObjects",
                    None,
                    functools.partial(client.delete_objects, Bucket=self._bucket, Delete=request),  # type: ignore[arg-type]
                )
                errors = resp.get("Errors") or []
                if not errors:
                    break
                retry = [e for e in errors if e.get("Code") in TRANSIENT_CODES]
                final = [e for e in errors if e.get("Code") not in TRANSIENT_CODES]
                if final:
                    shown = ", ".join(f"{e.get('Key')} ({e.get('Code')})" for e in final[:5])
                    more = f" (+{len(final) - 5} more)" if len(final) > 5 else ""
                    message = f"DeleteObjects {self.uri}: {len(final)} key(s) not deleted: {shown}{more}"
                    if all(e.get("Code") in ACCESS_CODES for e in final):
                        raise AccessDeniedError(message)
                    raise LakeFSError(message)
                remaining = [str(e.get("Key")) for e in retry]
                if round_ < self._settings.max_attempts:
                    await asyncio.sleep(self._backoff(round_))
            else:
                shown = ", ".join(remaining[:5])
                more = f" (+{len(remaining) - 5} more)" if len(remaining) > 5 else ""
                raise TransientError(
                    f"DeleteObjects {self.uri}: {len(remaining)} key(s) still failing after "
                    f"{self._settings.max_attempts} attempt(s): {shown}{more}"
                )

    async def list(
        self,
        prefix: str = "",
        *,
        delimiter: str | None = None,
        start_after: str | None = None,
        page_size: int = 1000,
    ) -> AsyncGenerator[ObjectInfo | CommonPrefix, None]:
        prefix, delimiter, start_after, page_size = check_list_args(prefix, delimiter, start_after, page_size)
        client = await self._client()
        base: dict[str, Any] = {"Bucket": self._bucket, "Prefix": prefix, "MaxKeys": min(page_size, 1000)}
        if delimiter is not None:
            base["Delimiter"] = delimiter
        if start_after is not None:
            base["StartAfter"] = start_after
        token: str | None = None
        while True:
            args = dict(base)
            if token is not None:
                args["ContinuationToken"] = token
            resp = await self._call(
                "ListObjectsV2", prefix or None, functools.partial(client.list_objects_v2, **args)
            )
            objects: builtins.list[ObjectInfo | CommonPrefix] = [
                ObjectInfo(
                    key=c["Key"],
                    size=int(c["Size"]),
                    etag=strip_etag(c.get("ETag", "")),
                    last_modified=c.get("LastModified"),
                )
                for c in resp.get("Contents") or []
            ]
            prefixes: builtins.list[ObjectInfo | CommonPrefix] = [
                CommonPrefix(p["Prefix"]) for p in resp.get("CommonPrefixes") or [] if "Prefix" in p
            ]
            merged: builtins.list[ObjectInfo | CommonPrefix] = builtins.list(
                heapq.merge(objects, prefixes, key=_sort_key)
            )
            for item in merged:
                yield item
            token = resp.get("NextContinuationToken")
            if not resp.get("IsTruncated") or not token:
                return

    async def list_keys(
        self, prefix: str = "", *, start_after: str | None = None
    ) -> AsyncGenerator[KeyInfo, None]:
        """``ListObjectsV2`` pages of 1,000 (each retried like any call), reduced to key, size, mtime."""
        prefix, start_after = check_list_keys_args(prefix, start_after)
        client = await self._client()
        base: dict[str, Any] = {"Bucket": self._bucket, "Prefix": prefix, "MaxKeys": 1000}
        if start_after is not None:
            base["StartAfter"] = start_after
        token: str | None = None
        while True:
            args = dict(base, ContinuationToken=token) if token is not None else base
            resp = await self._call(
                "ListObjectsV2", prefix or None, functools.partial(client.list_objects_v2, **args)
            )
            for c in resp.get("Contents") or []:
                yield KeyInfo(c["Key"], int(c["Size"]), c["LastModified"].timestamp())
            token = resp.get("NextContinuationToken")
            if not resp.get("IsTruncated") or not token:
                return

    async def delete_batch(
        self, keys: Sequence[str], *, if_match: Mapping[str, str] | None = None
    ) -> DeleteResult:
        """ONE ``DeleteObjects`` request (``Quiet=False``), never retried here: see the contract in
        :mod:`lakefs_core.block.base`. A transient failure of the whole request fails every key
        (transient; ``throttled`` for 503/429/SlowDown, with its ``Retry-After``); a key the answer
        does not mention is failed (``NoOutcome``, transient), never assumed deleted."""
        checked, etags = check_delete_batch(keys, if_match, MAX_DELETE_BATCH)
        if not checked:
            return DeleteResult()
        client = await self._client()
        objects: builtins.list[dict[str, str]] = [
            {"Key": k, "ETag": f'"{etags[k]}"'} if k in etags else {"Key": k} for k in checked
        ]
        try:
            resp = await client.delete_objects(
                Bucket=self._bucket,
                Delete={"Objects": objects, "Quiet": False},  # type: ignore[typeddict-item]
            )
        except Exception as e:
            if not is_transient(e):
                raise self._translate(e, "DeleteObjects", None) from e
            code = error_code(e) if isinstance(e, ClientError) else type(e).__name__
            return DeleteResult(
                failed=[FailedKey(k, code or "Transient", True) for k in checked],
                throttled=is_throttle(e),
                retry_after=retry_after_seconds(e),
            )
        return _delete_outcome(checked, resp)

    async def copy(self, src_key: str, dst_key: str, *, if_none_match: bool = False) -> ObjectInfo:
        """Server-side ``CopyObject``; a create-only copy streams through ``put(if_none_match=True)``
        instead, because conditional ``CopyObject`` is silently ignored by some S3 implementations
        (moto, older S3-compatible stores) and a create-only write must never overwrite."""
        check_key(src_key, field="src_key")
        check_key(dst_key, field="dst_key")
        if if_none_match:
            info = await self.head(src_key)
            async with contextlib.aclosing(self.stream(src_key, chunk_size=MIB)) as chunks:
                await self.put(
                    dst_key,
                    chunks,
                    if_none_match=True,
                    content_type=info.content_type,
                    metadata=info.metadata,
                )
            return await self.head(dst_key)
        client = await self._client()
        args: dict[str, Any] = {
            "Bucket": self._bucket,
            "Key": dst_key,
            "CopySource": {"Bucket": self._bucket, "Key": src_key},
            "MetadataDirective": "COPY",
        }
        await self._call(
            "CopyObject", f"{src_key} -> {dst_key}", functools.partial(client.copy_object, **args)
        )
        return await self.head(dst_key)
