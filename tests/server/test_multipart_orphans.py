"""A multipart upload orphaned by a crash: a real ``lakefs-server`` SIGKILLed (its fault point
``multipart:before-record``) after the store opened the upload and before its KV record was written,
on a local namespace and on S3 (moto). The daemon's sweep then aborts that store upload and only it:
an upload whose record exists (younger than the expiry) and what lies outside the reserved
directory / the namespace's prefix are left alone.
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.client import Config
from botocore.exceptions import BotoCoreError, ClientError

from lakefs_core.block.base import MultipartStore
from lakefs_core.block.local_multipart import MP_DIR
from lakefs_core.namespace import StorageNamespace
from lakefs_core.refs import kvkeys
from lakefs_server.gateway.multipart import PARTITION, Upload, sweep_expired
from tests.server.harness import ADMIN, REPO, Server, local_core, running, swept_context
from tests.support.moto import MotoServer

KILL = {"LAKEFS_CORE_FAULT": "multipart:before-record:kill"}


@pytest.fixture(params=["local", "s3"])
def killed(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Server, dict[str, Any]]]:
    """A server that dies (SIGKILL) inside its first CreateMultipartUpload; and the moto client
    arguments with the bucket ``bucket`` (S3 only: the worker's moto server, a bucket of the test's own)."""
    if request.param == "local":
        core, namespace = local_core(tmp_path)
        with running(tmp_path, core, namespace, env=KILL) as server:
            yield server, {}
        return
    moto: MotoServer = request.getfixturevalue("moto_regions").get("us-east-1")
    kwargs = moto.client_kwargs()
    bucket = f"lake-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", **kwargs).create_bucket(Bucket=bucket)
    core = {
        "kv_url": f"sqlite:///{tmp_path / 'kv.sqlite3'}",
        "s3": {
            "endpoint_url": moto.endpoint,
            "region": "us-east-1",
            "credentials": {
                "source": "static",
                "access_key_id": kwargs["aws_access_key_id"],
                "secret_access_key": kwargs["aws_secret_access_key"],
            },
        },
    }
    with running(tmp_path, core, f"s3://{bucket}/repo", env=KILL) as server:
        yield server, {**kwargs, "bucket": bucket}


def _crash_in_create(server: Server) -> None:
    s3 = boto3.client(
        "s3",
        endpoint_url=server.endpoint,
        aws_access_key_id=ADMIN.access_key_id,
        aws_secret_access_key=ADMIN.secret_access_key,
        region_name="us-east-1",
        config=Config(retries={"max_attempts": 1, "mode": "standard"}, s3={"addressing_style": "path"}),
    )
    with pytest.raises((BotoCoreError, ClientError)):
        s3.create_multipart_upload(Bucket=REPO, Key="main/mp/orphan")
    assert server.process is not None
    assert server.process.wait(60) == -9, server.output()


async def _sweep(server: Server) -> tuple[int, list[str], list[str], str]:
    """Record a second (young) upload, then sweep with a tiny expiry: the number aborted, the store
    uploads before and after, and the recorded one's id."""
    async with swept_context(server, 1e-6) as ctx:
        core = ctx.core
        repo = await core.graveler.repository(REPO)
        ns = StorageNamespace.parse(repo.storage_namespace)
        store = await core.graveler.namespace_store(ns)
        assert isinstance(store, MultipartStore)
        prefix = ns.prefix + "/" if ns.prefix else ""
        address = ctx.objects.slices.new_relative_address()
        kept = await store.multipart_create(ns.key(address))
        record = Upload(REPO, "main", "mp/kept", repo.storage_namespace, time.time() + 3600)
        record.address, record.store_upload = address, kept
        await core.kv.set(PARTITION, kvkeys.multipart_upload_key(REPO, "f" * 32), record.encode())
        before = sorted([u.upload_id async for u in store.multipart_uploads(prefix)])
        aborted = await sweep_expired(ctx)
        after = sorted([u.upload_id async for u in store.multipart_uploads(prefix)])
        return aborted, before, after, kept


def test_an_upload_orphaned_by_a_kill_is_aborted_by_the_sweep(killed: tuple[Server, dict[str, Any]]) -> None:
    server, moto = killed
    _crash_in_create(server)
    outside: list[str] = []
    if moto:  # an upload in the bucket outside the namespace: not the sweep's
        bucket, kwargs = moto["bucket"], {k: v for k, v in moto.items() if k != "bucket"}
        raw = boto3.client("s3", **kwargs)
        outside.append(raw.create_multipart_upload(Bucket=bucket, Key="other/x")["UploadId"])
    else:  # a directory of the reserved one not named as an upload: not the sweep's
        mp = server.directory / "data" / "repo" / MP_DIR
        (mp / "not-an-upload").mkdir(parents=True)
        os.utime(mp / "not-an-upload", (0, 0))
    aborted, before, after, kept = asyncio.run(_sweep(server))
    orphans = [u for u in before if u != kept]
    assert len(orphans) == 1, before
    assert aborted == 1 and after == [kept]
    if moto:
        listed = raw.list_multipart_uploads(Bucket=bucket, Prefix="other/")
        assert [u["UploadId"] for u in listed.get("Uploads", [])] == outside
    else:
        assert (server.directory / "data" / "repo" / MP_DIR / "not-an-upload").is_dir()
