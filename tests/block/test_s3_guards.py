"""S3 driver guards beyond test_s3.py: resumed streams (progress resets the failure count, the resume
is pinned to the object first read), statuses that decide retrying and error classes, and per-key
throttling in ``DeleteObjects``. Real sockets: the fault proxy of ``faults.py`` (or the scripted
``ThrottlingProxy``) in front of moto_server."""

from __future__ import annotations

import random
from contextlib import aclosing

import pytest

from lakefs_core.block import AccessDeniedError, FailedKey, S3BlockStore
from lakefs_core.errors import ConflictError, NotFoundError, PreconditionFailedError
from tests.block.conftest import BUCKET, raw_client, s3_settings, shared_session
from tests.block.faults import Fault, FaultProxy, is_method
from tests.block.test_gc_seams import _delete_result
from tests.support.moto import MotoServer
from tests.support.s3proxy import ThrottlingProxy

KIB = 1 << 10


def proxied(proxy: FaultProxy) -> S3BlockStore:
    return S3BlockStore(
        BUCKET, settings=s3_settings(proxy.endpoint), session=shared_session()
    )  # max_attempts=3


async def test_stream_interrupted_more_often_than_max_attempts_but_always_progressing(
    proxy: FaultProxy,
) -> None:
    """Three cut bodies in one stream, each after some progress: every resume starts a new count, so
    max_attempts (3) bounds consecutive failures without progress, not the stream's total."""
    data = random.randbytes(512 * KIB)
    async with proxied(proxy) as store:
        await store.put("obj", data)
        proxy.fail(Fault(mode="truncate", keep=0.5), times=3, when=is_method("GET"))
        async with aclosing(store.stream("obj", chunk_size=64 * KIB)) as s:
            got = b"".join([c async for c in s])
        assert got == data
        assert proxy.count("GET") == 4


async def test_stream_resume_after_the_object_was_replaced_is_a_conflict(
    proxy: FaultProxy, s3_server: MotoServer
) -> None:
    """The body is cut; before the resume another writer replaces the object. The resume must not
    splice the new object's bytes onto the old one's: ConflictError, no silent mix. And not
    PreconditionFailedError, which to a create-only ``copy`` (it streams its source) would mean "the
    destination exists"."""
    old = random.randbytes(512 * KIB)
    async with proxied(proxy) as store:
        await store.put("obj", old)
        proxy.fail(Fault(mode="truncate", keep=0.5), times=1, when=is_method("GET"))
        received = bytearray()
        with pytest.raises(ConflictError) as info:
            async with aclosing(store.stream("obj", chunk_size=64 * KIB)) as s:
                async for chunk in s:
                    if not received:  # the first piece is in: replace the object behind the proxy
                        async with raw_client(s3_server) as s3:
                            await s3.put_object(Bucket=BUCKET, Key="obj", Body=random.randbytes(len(old)))
                    received += chunk
        assert not isinstance(info.value, PreconditionFailedError)
        assert "replaced while being read" in str(info.value)
        assert bytes(received) == old[: len(received)]  # whatever was handed out is the old object


async def test_429_with_an_unlisted_code_is_retried(proxy: FaultProxy) -> None:
    """HTTP 429 means "too many requests" whatever code the store puts in the body."""
    async with proxied(proxy) as store:
        await store.put("obj", b"payload")
        proxy.fail(Fault(429, "TooManyRequests"), times=2, when=is_method("GET"))
        assert await store.get("obj") == b"payload"
        assert proxy.count("GET") == 3


async def test_403_without_an_access_code_is_access_denied(proxy: FaultProxy) -> None:
    """A HEAD answered 403 has no body, so no S3 error code: the status alone means access denied
    (not bad input), and it is not retried."""
    async with proxied(proxy) as store:
        await store.put("obj", b"payload")
        proxy.fail(Fault(403, "Forbidden"), times=None, when=is_method("HEAD"))
        with pytest.raises(AccessDeniedError):
            await store.head("obj")
        assert proxy.count("HEAD") == 1


async def test_delete_batch_per_key_throttling_is_reported(s3_server: MotoServer) -> None:
    """A per-key ``SlowDown`` in an HTTP 200 ``DeleteObjects`` answer asks the caller to slow down."""
    async with ThrottlingProxy(s3_server.endpoint) as proxy:
        store = await S3BlockStore(BUCKET, settings=s3_settings(proxy.endpoint)).open()
        try:
            proxy.script(200, _delete_result(["k1"], [("k2", "SlowDown")]))
            result = await store.delete_batch(["k1", "k2"])
        finally:
            await store.close()
    assert result.deleted == ["k1"]
    assert result.failed == [FailedKey("k2", "SlowDown", True)]
    assert result.throttled


async def test_empty_range_stream_of_a_missing_key_is_not_found(s3_server: MotoServer) -> None:
    """``length=0`` reads nothing, but still answers whether the object exists (as ``get`` does)."""
    async with S3BlockStore(BUCKET, settings=s3_settings(s3_server.endpoint)) as store:
        await store.put("obj", b"payload")
        async with aclosing(store.stream("obj", start=3, length=0)) as s:
            assert [c async for c in s] == []
        with pytest.raises(NotFoundError):
            async with aclosing(store.stream("missing", length=0)) as s:
                async for _ in s:
                    pass
