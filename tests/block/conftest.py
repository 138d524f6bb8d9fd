"""Block-store fixtures: one ``store`` per driver (memory, local, S3 on moto) and a fault proxy."""

from __future__ import annotations

import functools
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aioboto3
import pytest

from lakefs_core.block import BlockStore, LocalBlockStore, MemoryBlockStore, S3BlockStore, S3Settings
from tests.block.faults import FaultProxy
from tests.support.moto import ACCESS_KEY, SECRET_KEY, MotoServer
from tests.support.timing import scaled

if TYPE_CHECKING:
    from aiobotocore.session import ClientCreatorContext
    from types_aiobotocore_s3.client import S3Client

BUCKET = "contract-bucket"
MIB = 1 << 20


def s3_settings(endpoint: str, **overrides: Any) -> S3Settings:
    """Settings for tests: moto credentials, 5 MiB multipart, tiny bounded backoff."""
    values: dict[str, Any] = {
        "region": "us-east-1",
        "endpoint_url": endpoint,
        "access_key_id": ACCESS_KEY,
        "secret_access_key": SECRET_KEY,
        "multipart_threshold": 5 * MIB,
        "multipart_chunk": 5 * MIB,
        "max_attempts": 3,
        "retry_initial_backoff": 0.001,
        "retry_max_backoff": 0.01,
        "connect_timeout": 2.0,
        "read_timeout": scaled(10.0),  # a safety net: a loaded moto answers slowly
    }
    values.update(overrides)
    return S3Settings(**values)


@functools.cache
def shared_session() -> aioboto3.Session:
    """One aioboto3 session per test process for the S3 stores and clients of these tests: a new
    session loads botocore's S3 model again (~0.2 s of CPU), twice per S3 test (its store and the
    client creating its bucket) before it was shared. Each store and client is still its own."""
    return aioboto3.Session()


def raw_client(server: MotoServer) -> ClientCreatorContext[S3Client]:
    """A plain aioboto3 S3 client on ``server`` (to set up or inspect state behind the driver)."""
    kw = server.client_kwargs()
    return shared_session().client(
        "s3",
        endpoint_url=kw["endpoint_url"],
        region_name=kw["region_name"],
        aws_access_key_id=kw["aws_access_key_id"],
        aws_secret_access_key=kw["aws_secret_access_key"],
    )


async def create_bucket(server: MotoServer, bucket: str = BUCKET) -> None:
    async with raw_client(server) as s3:
        await s3.create_bucket(Bucket=bucket)


@pytest.fixture(params=["memory", "local", "s3"])
async def store(request: pytest.FixtureRequest, local_root: Path) -> AsyncIterator[BlockStore]:
    """The same contract, once per driver."""
    kind = request.param
    s: BlockStore
    if kind == "memory":
        s = MemoryBlockStore(f"contract-{uuid.uuid4().hex[:12]}")
    elif kind == "local":
        s = LocalBlockStore(local_root)
    else:
        moto: Callable[[str], MotoServer] = request.getfixturevalue("moto")
        server = moto("us-east-1")
        await create_bucket(server)
        s = await S3BlockStore(BUCKET, settings=s3_settings(server.endpoint), session=shared_session()).open()
    try:
        yield s
    finally:
        await s.close()


@pytest.fixture
async def s3_server(moto: Callable[[str], MotoServer]) -> MotoServer:
    server = moto("us-east-1")
    await create_bucket(server)
    return server


@pytest.fixture
async def proxy(s3_server: MotoServer) -> AsyncIterator[FaultProxy]:
    """A fault proxy in front of a moto server holding the bucket ``BUCKET``."""
    p = FaultProxy(s3_server.endpoint)
    await p.start()
    try:
        yield p
    finally:
        await p.close()
