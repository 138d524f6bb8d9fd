"""S3 multipart uploads for :class:`~lakefs_core.block.s3.S3BlockStore`, S3 ETags, and
:func:`resolving_retries` (retried writes whose earlier attempt may have landed unseen).

A :class:`MultipartUpload` puts one object: it cuts the body into parts of ``multipart_chunk`` bytes
(doubling every 2,000 parts, capped at 5 GiB, at most 10,000 parts), uploads up to
``multipart_concurrency`` of them at once, and completes the upload (``If-None-Match: *`` when
create-only). A retried completion that answers ``NoSuchUpload`` or 412 succeeds when the stored ETag
equals :func:`multipart_etag` of our parts. On any failure or cancellation the upload is aborted
(best effort, logged) and the error re-raised. Every S3 call goes through the store's retrying call.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import tempfile
from collections.abc import (
    AsyncGenerator,
    AsyncIterable,
    AsyncIterator,
    Awaitable,
    Callable,
    Mapping,
    Sequence,
)
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, BinaryIO, Protocol, TypeVar

from botocore.exceptions import ClientError

from lakefs_core.block.base import ObjectInfo, StoredPart
from lakefs_core.block.s3_errors import error_code, is_precondition
from lakefs_core.block.s3_settings import MAX_PART, S3Settings
from lakefs_core.errors import BadInputError, LakeFSError, NotFoundError

if TYPE_CHECKING:
    from types_aiobotocore_s3.client import S3Client


log = logging.getLogger("lakefs_core.block.s3")  # the store's logger: one logger for the S3 driver

T = TypeVar("T")

MAX_PARTS = 10_000


def strip_etag(etag: str) -> str:
    """An S3 ETag without its surrounding double quotes."""
    return etag.strip('"')


def multipart_etag(part_etags: Sequence[str]) -> str:
    """The ETag S3 gives a multipart object: MD5 of the concatenated binary part MD5s, ``-<parts>``."""
    digest = hashlib.md5(usedforsecurity=False)
    for etag in part_etags:
        digest.update(bytes.fromhex(strip_etag(etag)))
    return f"{digest.hexdigest()}-{len(part_etags)}"


def resolving_retries(
    send: Callable[[], Awaitable[T]],
    ambiguous: Callable[[ClientError], bool],
    landed: Callable[[], Awaitable[bool]],
) -> Callable[[], Awaitable[T | None]]:
    """An attempt for the store's retrying call of a write whose first attempt may have landed
    unseen (a lost response): ``send()``; a LATER attempt failing with an ``ambiguous`` error
    (412 of a create-only write, ``NoSuchUpload`` of a completed upload) returns ``None`` when
    ``landed()`` finds our object stored, and raises otherwise."""
    attempts = 0

    async def attempt() -> T | None:
        nonlocal attempts
        attempts += 1
        try:
            return await send()
        except ClientError as e:
            if attempts > 1 and ambiguous(e) and await landed():
                return None
            raise

    return attempt


class S3Call(Protocol):
    """The store's call of one S3 operation ``op`` on ``key``: retries, then translates errors."""

    async def __call__(self, op: str, key: str | None, fn: Callable[[], Awaitable[T]]) -> T: ...


@dataclass(frozen=True)
class MultipartUpload:
    """One multipart upload of ``key`` into ``bucket`` (``where`` is the object's URI, for messages).

    ``client`` returns the store's S3 client, ``call`` runs one S3 operation with the store's retries
    and ``stored_etag`` gives the ETag of the object now stored under a key (``None``: none).
    """

    bucket: str
    key: str
    where: str
    settings: S3Settings
    client: Callable[[], Awaitable[S3Client]]
    call: S3Call
    stored_etag: Callable[[str], Awaitable[str | None]]

    def _part_size(self, number: int) -> int:
        """Size of part ``number`` (1-based): doubles every 2,000 parts, capped at 5 GiB."""
        return min(MAX_PART, self.settings.multipart_chunk << ((number - 1) // 2000))

    async def _pieces(self, first: bytes, rest: AsyncIterator[bytes] | None) -> AsyncGenerator[bytes, None]:
        buf = bytearray(first)
        number = 1
        while True:
            size = self._part_size(number)
            while len(buf) >= size:
                yield bytes(buf[:size])
                del buf[:size]
                number += 1
                size = self._part_size(number)
            if rest is None:
                break
            try:
                buf += await anext(rest)
            except StopAsyncIteration:
                break
        if buf:
            yield bytes(buf)

    @property
    def _checksum(self) -> bool:
        return self.settings.request_checksum_calculation == "when_supported"

    async def put(
        self,
        first: bytes,
        rest: AsyncIterator[bytes] | None,
        *,
        if_none_match: bool,
        ctype: str,
        meta: dict[str, str],
    ) -> ObjectInfo:
        """Upload ``first`` followed by what ``rest`` yields (``None``: nothing more) as the object."""
        client = await self.client()
        create_args: dict[str, Any] = {
            "Bucket": self.bucket,
            "Key": self.key,
            "ContentType": ctype,
            "Metadata": meta,
        }
        if self._checksum:
            create_args["ChecksumAlgorithm"] = "CRC32"
        created = await self.call(
            "CreateMultipartUpload", self.key, lambda: client.create_multipart_upload(**create_args)
        )
        upload_id = created["UploadId"]
        try:
            parts, size = await self._upload_parts(client, upload_id, first, rest)
            etag = await self._complete(client, upload_id, parts, if_none_match)
        except BaseException:
            await asyncio.shield(self._abort(upload_id))
            raise
        return ObjectInfo(key=self.key, size=size, etag=etag, content_type=ctype, metadata=dict(meta))

    async def _upload_parts(
        self, client: S3Client, upload_id: str, first: bytes, rest: AsyncIterator[bytes] | None
    ) -> tuple[list[dict[str, Any]], int]:
        """Upload every part, ``multipart_concurrency`` at once; the parts in order and the size. On
        failure or cancellation, the parts still in flight are cancelled before the error propagates."""
        parts: dict[int, dict[str, Any]] = {}
        pending: set[asyncio.Task[tuple[int, dict[str, Any]]]] = set()
        size = 0

        async def drain_one() -> None:
            nonlocal pending
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                number, part = task.result()
                parts[number] = part

        try:
            number = 0
            async with contextlib.aclosing(self._pieces(first, rest)) as pieces:
                async for piece in pieces:
                    number += 1
                    if number > MAX_PARTS:
                        raise BadInputError(f"{self.where}: body needs more than {MAX_PARTS} parts")
                    size += len(piece)
                    while len(pending) >= self.settings.multipart_concurrency:
                        await drain_one()
                    pending.add(asyncio.ensure_future(self._upload_part(client, upload_id, number, piece)))
            while pending:
                await drain_one()
        except BaseException:
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
            raise
        return [parts[n] for n in sorted(parts)], size

    async def _upload_part(
        self, client: S3Client, upload_id: str, number: int, piece: bytes
    ) -> tuple[int, dict[str, Any]]:
        args: dict[str, Any] = {
            "Bucket": self.bucket,
            "Key": self.key,
            "UploadId": upload_id,
            "PartNumber": number,
            "Body": piece,
        }
        if self._checksum:
            args["ChecksumAlgorithm"] = "CRC32"
        resp = await self.call(f"UploadPart {number}", self.key, lambda: client.upload_part(**args))
        part: dict[str, Any] = {"PartNumber": number, "ETag": resp["ETag"]}
        if self._checksum and resp.get("ChecksumCRC32"):
            part["ChecksumCRC32"] = resp["ChecksumCRC32"]
        return number, part

    async def _complete(
        self, client: S3Client, upload_id: str, parts: list[dict[str, Any]], if_none_match: bool
    ) -> str:
        """Complete the upload; its ETag. A retried completion that answers ``NoSuchUpload`` (or 412
        when create-only) succeeded if the stored object has our parts' ETag."""
        expected = multipart_etag([p["ETag"] for p in parts])
        args: dict[str, Any] = {
            "Bucket": self.bucket,
            "Key": self.key,
            "UploadId": upload_id,
            "MultipartUpload": {"Parts": parts},
        }
        if if_none_match:
            args["IfNoneMatch"] = "*"

        async def landed() -> bool:
            return await self.stored_etag(self.key) == expected

        def ambiguous(e: ClientError) -> bool:
            return error_code(e) == "NoSuchUpload" or (if_none_match and is_precondition(e))

        attempt = resolving_retries(lambda: client.complete_multipart_upload(**args), ambiguous, landed)
        resp = await self.call("CompleteMultipartUpload", self.key, attempt)
        return expected if resp is None else strip_etag(resp.get("ETag", expected))

    async def _abort(self, upload_id: str) -> None:
        key = self.key
        try:
            client = await self.client()
            await self.call(
                "AbortMultipartUpload",
                key,
                lambda: client.abort_multipart_upload(Bucket=self.bucket, Key=key, UploadId=upload_id),
            )
        except NotFoundError:
            pass  # already completed or aborted
        except LakeFSError as e:
            log.warning("could not abort multipart upload of %s: %s", self.where, e)


#: A part up to this size is buffered in memory before its ``UploadPart``; a larger one in a
#: temporary file (a part may be 5 GiB: memory stays bounded).
PART_BUFFER_BYTES = 64 << 20


@dataclass(frozen=True)
class NativeMultipart:
    """The :class:`~lakefs_core.block.base.MultipartStore` operations of an S3 store: the client's
    parts are S3 parts of the final key's upload, so completion copies nothing."""

    bucket: str
    settings: S3Settings
    client: Callable[[], Awaitable[S3Client]]
    call: S3Call
    stored_etag: Callable[[str], Awaitable[str | None]]

    @property
    def _checksum(self) -> bool:
        return self.settings.request_checksum_calculation == "when_supported"

    async def create(self, key: str, ctype: str, meta: dict[str, str]) -> str:
        client = await self.client()
        args: dict[str, Any] = {"Bucket": self.bucket, "Key": key, "ContentType": ctype, "Metadata": meta}
        if self._checksum:
            args["ChecksumAlgorithm"] = "CRC32"
        created = await self.call(
            "CreateMultipartUpload", key, lambda: client.create_multipart_upload(**args)
        )
        return str(created["UploadId"])

    def _part_args(self, key: str, upload_id: str, number: int) -> dict[str, Any]:
        return {"Bucket": self.bucket, "Key": key, "UploadId": upload_id, "PartNumber": number}

    def _stored(self, number: int, resp: Mapping[str, Any], size: int) -> StoredPart:
        return StoredPart(number, strip_etag(resp["ETag"]), size, str(resp.get("ChecksumCRC32") or ""))

    async def part(
        self, key: str, upload_id: str, number: int, body: AsyncIterable[bytes], size: int
    ) -> StoredPart:
        if not 1 <= number <= MAX_PARTS or not 0 <= size <= MAX_PART:
            raise BadInputError("part number 1-10,000, size up to 5 GiB", field="part")
        async with _buffered(body, size) as data:
            client = await self.client()
            args = self._part_args(key, upload_id, number) | {"Body": data, "ContentLength": size}
            if self._checksum:
                args["ChecksumAlgorithm"] = "CRC32"

            async def send() -> Any:
                if not isinstance(data, bytes):
                    await asyncio.to_thread(data.seek, 0)  # a retry sends the file again
                return await client.upload_part(**args)

            resp = await self.call(f"UploadPart {number}", key, send)
        return self._stored(number, resp, size)

    async def copy_part(
        self, key: str, upload_id: str, number: int, *, src_key: str, start: int, length: int
    ) -> StoredPart:
        if length < 1:  # S3 refuses an empty copy range
            return await self.part(key, upload_id, number, _empty(), 0)
        client = await self.client()
        args = self._part_args(key, upload_id, number) | {
            "CopySource": {"Bucket": self.bucket, "Key": src_key},
            "CopySourceRange": f"bytes={start}-{start + length - 1}",
        }
        resp = await self.call(f"UploadPartCopy {number}", key, lambda: client.upload_part_copy(**args))
        return self._stored(number, resp["CopyPartResult"], length)

    async def complete(
        self, key: str, upload_id: str, parts: Sequence[StoredPart], if_none_match: bool
    ) -> ObjectInfo:
        listed: list[dict[str, Any]] = []
        for p in parts:
            item: dict[str, Any] = {"PartNumber": p.number, "ETag": f'"{p.etag}"'}
            if p.checksum:
                item["ChecksumCRC32"] = p.checksum
            listed.append(item)
        upload = MultipartUpload(
            self.bucket, key, key, self.settings, self.client, self.call, self.stored_etag
        )
        etag = await upload._complete(await self.client(), upload_id, listed, if_none_match)
        return ObjectInfo(key=key, size=sum(p.size for p in parts), etag=etag)

    async def abort(self, key: str, upload_id: str) -> None:
        client = await self.client()
        with contextlib.suppress(NotFoundError):  # completed or aborted already
            await self.call(
                "AbortMultipartUpload",
                key,
                lambda: client.abort_multipart_upload(Bucket=self.bucket, Key=key, UploadId=upload_id),
            )


async def _empty() -> AsyncIterator[bytes]:
    return
    yield b""  # pragma: no cover (an async generator with nothing in it)


@contextlib.asynccontextmanager
async def _buffered(body: AsyncIterable[bytes], size: int) -> AsyncIterator[bytes | BinaryIO]:
    """The part's ``size`` bytes, exactly (:class:`BadInputError` otherwise): in memory up to
    :data:`PART_BUFFER_BYTES`, else in a temporary file (removed on exit)."""
    if size <= PART_BUFFER_BYTES:
        buf = bytearray()
        async for chunk in body:
            buf += chunk
            if len(buf) > size:
                raise BadInputError(f"the part is longer than its {size} bytes", field="body")
        if len(buf) != size:
            raise BadInputError(f"the part has {len(buf)} bytes, not {size}", field="body")
        yield bytes(buf)
        return
    spool = await asyncio.to_thread(tempfile.TemporaryFile)
    try:
        written = 0
        async for chunk in body:
            written += len(chunk)
            if written > size:
                raise BadInputError(f"the part is longer than its {size} bytes", field="body")
            await asyncio.to_thread(spool.write, chunk)
        if written != size:
            raise BadInputError(f"the part has {written} bytes, not {size}", field="body")
        await asyncio.to_thread(spool.seek, 0)
        yield spool
    finally:
        await asyncio.to_thread(spool.close)
