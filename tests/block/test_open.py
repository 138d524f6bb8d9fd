"""``open_block_store``: store URIs to drivers; bad URIs are BadInputError naming the URI."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from lakefs_core.block import (
    BlockStore,
    LocalBlockStore,
    MemoryBlockStore,
    S3BlockStore,
    S3Settings,
    open_block_store,
)
from lakefs_core.errors import BadInputError
from tests.block.conftest import BUCKET, s3_settings
from tests.support.moto import MotoServer


async def test_local(local_root: Path) -> None:
    store = await open_block_store(f"local://{local_root}")
    assert isinstance(store, LocalBlockStore)
    assert isinstance(store, BlockStore)
    assert store.uri == f"local://{local_root}"
    await store.put("k", b"v")
    assert (local_root / "k").read_bytes() == b"v"
    await store.close()
    trailing = await open_block_store(f"local://{local_root}/")
    assert trailing.uri == f"local://{local_root}"


async def test_memory_stores_of_one_name_share_objects() -> None:
    name = f"shared-{uuid.uuid4().hex}"
    a = await open_block_store(f"mem://{name}")
    b = await open_block_store(f"mem://{name}")
    c = await open_block_store(f"mem://other-{uuid.uuid4().hex}")
    assert isinstance(a, MemoryBlockStore)
    assert a.uri == f"mem://{name}"
    await a.put("k", b"v")
    assert await b.get("k") == b"v"
    assert not await c.exists("k")
    for s in (a, b, c):
        await s.close()


async def test_s3(s3_server: MotoServer) -> None:
    store = await open_block_store(f"s3://{BUCKET}", s3=s3_settings(s3_server.endpoint))
    try:
        assert isinstance(store, S3BlockStore)
        assert store.uri == f"s3://{BUCKET}"
        await store.put("k", b"v")
        assert await store.get("k") == b"v"
    finally:
        await store.close()


async def test_s3_default_settings_open_and_close() -> None:
    store = await open_block_store("s3://some-bucket", s3=S3Settings(region="us-east-1"))
    await store.close()


@pytest.mark.parametrize(
    "uri",
    [
        "local://relative/path",
        "local:relative",
        "local:///a/../b",
        "local:///a/./b",
        "mem://",
        "mem://a/b",
        "s3://bucket-name/some/prefix",
        "s3://",
        "s3://x",
        "gs://bucket",
        "file:///tmp",
        "no-scheme",
        "",
    ],
)
async def test_bad_uris(uri: str) -> None:
    with pytest.raises(BadInputError) as info:
        await open_block_store(uri)
    assert info.value.field == "uri"
    assert repr(uri) in str(info.value) or uri == ""


async def test_credentials_in_uri_are_not_echoed() -> None:
    with pytest.raises(BadInputError) as info:
        await open_block_store("s3://AKID:hunter2@bucket-name/x")
    assert "hunter2" not in str(info.value)
