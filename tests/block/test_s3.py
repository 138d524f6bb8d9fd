"""S3 driver specifics: settings, error mapping and fault injection through a misbehaving proxy."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import io
import logging
import random
import tempfile
import threading
import zlib
from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Any

import pytest

from lakefs_core.block import AccessDeniedError, S3BlockStore, S3Settings
from lakefs_core.errors import (
    BadInputError,
    LakeFSError,
    NotFoundError,
    PreconditionFailedError,
    TransientError,
    UnreachableError,
)
from tests.block.conftest import BUCKET, raw_client, s3_settings, shared_session
from tests.block.faults import Fault, FaultProxy, is_method
from tests.support.moto import SECRET_KEY, MotoServer, free_port
from tests.support.timing import scaled

MIB = 1 << 20


def md5(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()


async def chunks_of(data: bytes, size: int) -> AsyncIterator[bytes]:
    for i in range(0, len(data), size):
        yield data[i : i + size]


def proxied(proxy: FaultProxy, **overrides: object) -> S3BlockStore:
    return S3BlockStore(BUCKET, settings=s3_settings(proxy.endpoint, **overrides), session=shared_session())


async def pending_uploads(server: MotoServer) -> list[str]:
    async with raw_client(server) as s3:
        resp = await s3.list_multipart_uploads(Bucket=BUCKET)
    return [u["Key"] for u in resp.get("Uploads", [])]


# -- settings ------------------------------------------------------------------------------------------


def test_settings_repr_hides_secrets() -> None:
    settings = S3Settings(
        access_key_id="AKIDEXAMPLE", secret_access_key="very-secret", session_token="tok-123"
    )
    for text in (repr(settings), str(settings), repr(S3BlockStore("some-bucket", settings=settings))):
        assert "very-secret" not in text
        assert "tok-123" not in text
    assert "AKIDEXAMPLE" in repr(settings)
    assert "secret_access_key='***'" in repr(settings)


@pytest.mark.parametrize(
    ("field", "kwargs"),
    [
        ("multipart_chunk", {"multipart_chunk": 1 * MIB}),
        ("max_attempts", {"max_attempts": 0}),
        ("multipart_threshold", {"multipart_threshold": 0}),
        ("retry_initial_backoff", {"retry_initial_backoff": -1}),
        ("secret_access_key", {"access_key_id": "only-half"}),
    ],
)
def test_settings_validation(field: str, kwargs: dict[str, object]) -> None:
    with pytest.raises(BadInputError) as info:
        S3Settings(**kwargs)  # type: ignore[arg-type]
    assert info.value.field == field


def test_bad_bucket_name() -> None:
    with pytest.raises(BadInputError):
        S3BlockStore("x")


# -- lifecycle and plain errors ------------------------------------------------------------------------


async def test_one_client_opened_lazily_and_closed(s3_server: MotoServer) -> None:
    store = S3BlockStore(BUCKET, settings=s3_settings(s3_server.endpoint))
    await store.put("lazy", b"opened on first use")
    async with store:  # open() is idempotent; exiting closes
        assert await store.get("lazy") == b"opened on first use"
    with pytest.raises(LakeFSError):
        await store.get("lazy")
    with pytest.raises(LakeFSError):
        await store.open()


async def test_missing_bucket_is_not_found_naming_it(s3_server: MotoServer) -> None:
    async with S3BlockStore("no-such-bucket", settings=s3_settings(s3_server.endpoint)) as store:
        with pytest.raises(NotFoundError) as info:
            await store.get("k")
        assert "no-such-bucket" in str(info.value)
        with pytest.raises(NotFoundError, match="no-such-bucket"):
            await store.put("k", b"v")


async def test_unreachable_endpoint(caplog: pytest.LogCaptureFixture) -> None:
    endpoint = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    async with S3BlockStore(BUCKET, settings=s3_settings(endpoint, connect_timeout=1.0)) as store:
        with (
            caplog.at_level(logging.WARNING, logger="lakefs_core.block.s3"),
            pytest.raises(UnreachableError) as info,
        ):
            await store.get("k")
    assert info.value.retryable
    assert "3 attempt" in str(info.value)
    assert SECRET_KEY not in str(info.value)
    assert SECRET_KEY not in caplog.text
    assert len([r for r in caplog.records if "retrying" in r.getMessage()]) == 2


async def test_a_server_that_never_answers_a_put_is_bounded_by_read_timeout() -> None:
    """A server (or a proxy cut off behind it) that takes a PutObject and never answers: each
    attempt ends at read_timeout. botocore asked for "Expect: 100-continue" on the file-like
    body the store hands it, and aiohttp waits for that interim answer with no timeout at all:
    the PUT hung forever (the failover drill's writer, once its region's proxy went silent)."""

    accepted: list[asyncio.StreamWriter] = []

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(writer)
        await reader.read(1)  # take the request; answer nothing until the client gives up
        await reader.read()

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    endpoint = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    settings = s3_settings(endpoint, read_timeout=0.5, max_attempts=2, retry_initial_backoff=0.01)
    try:
        async with S3BlockStore(BUCKET, settings=settings) as store:
            with pytest.raises(TransientError, match="2 attempt"):
                await asyncio.wait_for(store.put("k", b"v" * 100), scaled(20))
    finally:
        server.close()
        # Every accepted connection closed before the loop ends: one left to the garbage collector
        # warned (ResourceWarning: unclosed socket) in whatever test ran next in the worker.
        for writer in accepted:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()
        await server.wait_closed()
    assert len(accepted) == 2


# -- transient faults ----------------------------------------------------------------------------------


async def test_transient_503_is_retried(proxy: FaultProxy) -> None:
    async with proxied(proxy) as store:
        proxy.fail(Fault(503, "SlowDown"), times=2, when=is_method("PUT"))
        info = await store.put("k", b"survives two 503s")
        assert info.etag == md5(b"survives two 503s")
        assert proxy.count("PUT") == 3
        proxy.fail(
            Fault(500, "InternalError", "We encountered an internal error."), times=1, when=is_method("GET")
        )
        assert await store.get("k") == b"survives two 503s"
        proxy.fail(Fault(503, "ServiceUnavailable"), times=2, when=is_method("HEAD"))
        assert (await store.head("k")).size == 17


async def test_persistent_503_ends_as_transient_error(proxy: FaultProxy) -> None:
    async with proxied(proxy) as store:
        proxy.fail(Fault(503, "SlowDown"), times=None)
        with pytest.raises(TransientError) as info:
            await store.put("k", b"never lands")
        assert not isinstance(info.value, UnreachableError)
        assert info.value.retryable
        assert "SlowDown" in str(info.value)
        assert proxy.count("PUT") == 3  # max_attempts, then give up
        assert info.value.__cause__ is not None
        with pytest.raises(TransientError):
            await store.get("k")
        with pytest.raises(TransientError):
            async with aclosing(store.list()) as items:
                async for _ in items:
                    pass
        proxy.clear()
        assert not await store.exists("k")


async def test_conditional_request_conflict_409_is_transient(proxy: FaultProxy) -> None:
    async with proxied(proxy) as store:
        proxy.fail(
            Fault(409, "ConditionalRequestConflict", "A conflicting operation is in progress."), times=1
        )
        await store.put("k", b"v", if_none_match=True)
        assert await store.get("k") == b"v"


async def test_access_denied_is_not_retried(proxy: FaultProxy) -> None:
    async with proxied(proxy) as store:
        proxy.fail(Fault(403, "AccessDenied", "Access Denied"), times=None)
        with pytest.raises(AccessDeniedError) as info:
            await store.put("k", b"v")
        assert info.value.exit_code == 12
        assert not info.value.retryable
        assert proxy.count("PUT") == 1


async def test_dropped_connection_is_retried(proxy: FaultProxy) -> None:
    async with proxied(proxy) as store:
        await store.put("k", b"value")
        proxy.fail(Fault(mode="drop"), times=1, when=is_method("GET"))
        assert await store.get("k") == b"value"
        assert proxy.count("GET") == 2


async def test_lost_response_of_create_only_put_is_resolved(proxy: FaultProxy) -> None:
    """The first attempt lands but its answer is lost (500); the retry then sees 412 for our own write."""
    async with proxied(proxy) as store:
        proxy.fail(Fault(500, "InternalError", mode="forward_then_reply"), times=1, when=is_method("PUT"))
        info = await store.put("k", b"mine", if_none_match=True)
        assert info.etag == md5(b"mine")
        assert proxy.count("PUT") == 2
        # Someone else's object: a lost answer followed by 412 stays a precondition failure.
        await store.put("theirs", b"theirs")
        proxy.fail(Fault(500, "InternalError", mode="forward_then_reply"), times=1, when=is_method("PUT"))
        with pytest.raises(PreconditionFailedError):
            await store.put("theirs", b"mine", if_none_match=True)
        assert await store.get("theirs") == b"theirs"


async def test_truncated_stream_resumes(proxy: FaultProxy) -> None:
    data = random.randbytes(3 * MIB + 7)
    async with proxied(proxy) as store:
        await store.put("big", data)
        proxy.fail(Fault(mode="truncate"), times=2, when=is_method("GET"))
        async with aclosing(store.stream("big", chunk_size=MIB)) as s:
            chunks = [c async for c in s]
        assert [len(c) for c in chunks] == [MIB, MIB, MIB, 7]
        assert b"".join(chunks) == data
        assert proxy.count("GET") == 3
        proxy.fail(Fault(mode="truncate"), times=1, when=is_method("GET"))
        assert await store.get("big", start=5, length=MIB) == data[5 : 5 + MIB]


async def test_truncated_stream_gives_up_as_transient(proxy: FaultProxy) -> None:
    async with proxied(proxy) as store:
        await store.put("big", random.randbytes(MIB))
        proxy.fail(Fault(mode="truncate", keep=0.0), times=None, when=is_method("GET"))
        with pytest.raises(TransientError):
            async with aclosing(store.stream("big")) as s:
                async for _ in s:
                    pass
        assert proxy.count("GET") == 3  # no progress: max_attempts in all


# -- multipart under faults ----------------------------------------------------------------------------


async def test_multipart_part_retry(proxy: FaultProxy) -> None:
    data = random.randbytes(11 * MIB)
    async with proxied(proxy) as store:
        proxy.fail(Fault(503, "SlowDown"), times=2, when=is_method("PUT", "partNumber"))
        info = await store.put("mp", chunks_of(data, MIB))
        assert info.etag.endswith("-3")
        assert await store.get("mp") == data


async def test_multipart_failure_aborts_upload(proxy: FaultProxy, s3_server: MotoServer) -> None:
    data = random.randbytes(11 * MIB)
    async with proxied(proxy) as store:
        proxy.fail(Fault(503, "SlowDown"), times=None, when=is_method("PUT", "partNumber"))
        with pytest.raises(TransientError):
            await store.put("mp", chunks_of(data, MIB))
        proxy.clear()
        assert not await store.exists("mp")
    assert await pending_uploads(s3_server) == []


async def test_failing_body_aborts_upload(s3_server: MotoServer) -> None:
    async def body() -> AsyncIterator[bytes]:
        for _ in range(7):
            yield b"y" * MIB
        raise RuntimeError("source broke")

    async with S3BlockStore(BUCKET, settings=s3_settings(s3_server.endpoint)) as store:
        with pytest.raises(RuntimeError, match="source broke"):
            await store.put("mp", body())
        assert not await store.exists("mp")
    assert await pending_uploads(s3_server) == []


@pytest.mark.parametrize(
    ("create_only", "retry_answer"),
    [
        (True, Fault(412, "PreconditionFailed", "At least one of the pre-conditions did not hold")),
        (False, Fault(404, "NoSuchUpload", "The specified upload does not exist.")),
    ],
    ids=["create-only-412", "overwrite-NoSuchUpload"],
)
async def test_lost_response_of_multipart_completion_is_resolved(
    proxy: FaultProxy, create_only: bool, retry_answer: Fault
) -> None:
    """The completion lands but its answer is lost (500); the retry is answered as S3 answers a
    repeated completion (NoSuchUpload, or 412 when create-only): the stored object has our parts'
    ETag, so the put succeeds. Without the landed object the same answer stays an error."""
    data = random.randbytes(11 * MIB)
    complete = is_method("POST", "uploadId")
    async with proxied(proxy) as store:
        proxy.fail(Fault(500, "InternalError", mode="forward_then_reply"), times=1, when=complete)
        proxy.fail(retry_answer, times=1, when=complete)
        info = await store.put("mp", chunks_of(data, 2 * MIB), if_none_match=create_only)
        assert info.etag.endswith("-3")
        assert (await store.head("mp")).etag == info.etag
        assert await store.get("mp") == data

        proxy.clear()
        proxy.fail(Fault(500, "InternalError"), times=1, when=complete)  # this one never lands
        proxy.fail(retry_answer, times=1, when=complete)
        with pytest.raises(LakeFSError):
            await store.put("other", chunks_of(data, 2 * MIB), if_none_match=create_only)
        assert not await store.exists("other")


# -- delete_many ---------------------------------------------------------------------------------------


def delete_result(*errors: tuple[str, str]) -> bytes:
    body = "".join(f"<Error><Key>{k}</Key><Code>{c}</Code><Message>m</Message></Error>" for k, c in errors)
    return f'<?xml version="1.0" encoding="UTF-8"?><DeleteResult>{body}</DeleteResult>'.encode()


async def test_delete_many_raises_naming_failed_keys(proxy: FaultProxy) -> None:
    async with proxied(proxy) as store:
        await store.put("a", b"1")
        proxy.fail(
            Fault(200, body=delete_result(("a", "AccessDenied"))), times=1, when=is_method("POST", "delete")
        )
        with pytest.raises(AccessDeniedError, match="a \\(AccessDenied\\)"):
            await store.delete_many(["a", "b"])
        proxy.fail(
            Fault(200, body=delete_result(("a", "InternalError"))), times=1, when=is_method("POST", "delete")
        )
        await store.delete_many(["a", "b"])  # the per-key transient error is retried
        assert not await store.exists("a")
        proxy.fail(
            Fault(200, body=delete_result(("a", "SlowDown"))), times=None, when=is_method("POST", "delete")
        )
        with pytest.raises(TransientError, match="a"):
            await store.delete_many(["a"])


async def test_native_multipart_spools_a_big_part_to_disk(
    s3_server: MotoServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A part over the in-memory bound goes up from a temporary file (bounded memory)."""
    from lakefs_core.block import s3_multipart

    monkeypatch.setattr(s3_multipart, "PART_BUFFER_BYTES", 1 << 20)
    data = random.randbytes(5 << 20)

    async def body() -> AsyncIterator[bytes]:
        for i in range(0, len(data), 1 << 18):
            yield data[i : i + (1 << 18)]

    async with S3BlockStore(BUCKET, settings=s3_settings(s3_server.endpoint)) as store:
        upload = await store.multipart_create("mp/spooled")
        first = await store.multipart_part("mp/spooled", upload, 1, body(), len(data))
        last = await store.multipart_part("mp/spooled", upload, 2, body(), len(data))
        info = await store.multipart_complete("mp/spooled", upload, [first, last])
        assert first.etag == hashlib.md5(data).hexdigest() and info.etag.endswith("-2")
        # the CRC32 made off the loop while spooling is the one S3 recorded (it checked it)
        assert first.checksum == base64.b64encode(zlib.crc32(data).to_bytes(4, "big")).decode()
        assert await store.get("mp/spooled") == data + data


class _Spool(io.BufferedRandom):
    """A temporary file that counts the bytes read from it on the event loop's thread."""

    on_loop = 0

    def read(self, size: int | None = -1, /) -> bytes:
        data = super().read(size)
        if threading.current_thread() is threading.main_thread():
            _Spool.on_loop += len(data)
        return data


async def test_a_spooled_part_is_not_read_on_the_event_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    """botocore checksums (and, unless given a checksum, signs) a file body synchronously; the part's
    digests, made while spooling in a thread, spare it that: over https it reads nothing of the file
    before the send (aiohttp then reads it in a thread). Stopped at the send: no server needed."""
    from lakefs_core.block import s3_multipart

    monkeypatch.setattr(s3_multipart, "PART_BUFFER_BYTES", 1 << 20)
    make = tempfile.TemporaryFile

    def spool() -> _Spool:
        return _Spool(make(buffering=0))

    monkeypatch.setattr(s3_multipart.tempfile, "TemporaryFile", spool)
    data, sent = random.randbytes(3 << 20), []

    def stop(request: Any, **_: Any) -> None:
        sent.append(type(request.body))
        raise BadInputError("stopped at the send")

    async def body() -> AsyncIterator[bytes]:
        yield data

    _Spool.on_loop = 0
    for checksum in ("when_supported", "when_required"):
        settings = s3_settings("https://127.0.0.1:9", request_checksum_calculation=checksum)
        async with S3BlockStore(BUCKET, settings=settings) as store:
            (await store._client()).meta.events.register("before-send.s3.UploadPart", stop)
            with pytest.raises(BadInputError, match="stopped"):
                await store.multipart_part("mp/k", "upload", 1, body(), len(data))
    assert sent == [_Spool, _Spool] and _Spool.on_loop == 0
