"""A full disk is one error class wherever it happens (local namespace, SQLite/PostgreSQL KV, sst
output), with its own exit code, and never "transient" (issue 8).

The local cases fill a real 256 KiB tmpfs (needs ``mount``, i.e. root: skipped otherwise); SQLite's
own limit ``PRAGMA max_page_count`` makes SQLite report SQLITE_FULL genuinely.
"""

from __future__ import annotations

import errno
import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from botocore.exceptions import ClientError
from sqlalchemy.exc import OperationalError

from lakefs_core.block import LocalBlockStore
from lakefs_core.block.s3_errors import is_transient, translate_error
from lakefs_core.block.s3_settings import S3Settings
from lakefs_core.errors import LakeFSError, StorageFullError, TransientError, is_retryable
from lakefs_core.kv.sqlite import SQLiteKVStore
from lakefs_core.sqlengine import translate_db_error
from tests.cli.helpers import Cli, user_env

TINY = 256 * 1024


@pytest.fixture
def tiny_fs(tmp_path: Path) -> Iterator[Path]:
    """A 256 KiB tmpfs mounted for this test (root only)."""
    mnt = tmp_path / "tiny"
    mnt.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={TINY}", "tmpfs", str(mnt)],
        capture_output=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode(errors='replace').strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def fill(mnt: Path) -> None:
    """Leave no free block on ``mnt``."""
    fd = os.open(mnt / f"filler-{uuid.uuid4().hex}", os.O_WRONLY | os.O_CREAT)
    try:
        while os.write(fd, b"\0" * 4096):
            pass
    except OSError as e:
        assert e.errno == errno.ENOSPC
    finally:
        os.close(fd)


def test_the_class() -> None:
    assert issubclass(StorageFullError, LakeFSError)
    assert not issubclass(StorageFullError, TransientError)
    assert not StorageFullError.retryable and not is_retryable(StorageFullError("x"))
    assert StorageFullError.exit_code == 14


async def test_local_block_store_full(tiny_fs: Path) -> None:
    async with LocalBlockStore(tiny_fs / "store") as store:
        with pytest.raises(StorageFullError, match="No space left"):
            await store.put("big", b"x" * (2 * TINY))
        fill(tiny_fs)
        with pytest.raises(StorageFullError):
            await store.put("small", b"y" * 8192)


async def test_sqlite_kv_full(tmp_path: Path) -> None:
    # A real SQLite file whose connections may not grow it past a few pages.
    path = tmp_path / "kv.sqlite3"
    kv = await SQLiteKVStore.open(f"sqlite:///{path}", pragmas=["max_page_count = 8"])
    try:
        with pytest.raises(StorageFullError, match="full") as info:
            for i in range(1000):
                await kv.set(b"p", f"k{i:04}".encode(), os.urandom(1024))
        assert not is_retryable(info.value)
    finally:
        await kv.close()


def test_postgres_disk_full_is_not_transient() -> None:
    class PgDiskFull(Exception):  # the SQLSTATE attribute asyncpg's errors carry
        sqlstate = "53100"

    e = OperationalError("INSERT", {}, PgDiskFull("could not extend file: No space left on device"))
    assert isinstance(translate_db_error(e, "KV", connecting=False, write=True), StorageFullError)
    assert isinstance(translate_db_error(e, "KV", connecting=True, write=True), StorageFullError)

    class PgOutOfMemory(Exception):
        sqlstate = "53200"

    oom = OperationalError("INSERT", {}, PgOutOfMemory("out of memory"))
    assert isinstance(translate_db_error(oom, "KV", connecting=False, write=True), TransientError)


def test_s3_compatible_store_full_is_not_retried() -> None:
    e = ClientError(
        {
            "Error": {"Code": "XMinioStorageFull", "Message": "Storage backend has reached its limit"},
            "ResponseMetadata": {
                "HTTPStatusCode": 507,
                "HTTPHeaders": {},
                "HostId": "",
                "RequestId": "",
                "RetryAttempts": 0,
            },
        },
        "PutObject",
    )
    assert not is_transient(e)
    err = translate_error(e, "put s3://b/k", bucket="b", key="k", settings=S3Settings())
    assert isinstance(err, StorageFullError)


def test_cli_disk_full_exit_code_for_namespace_kv_and_sst(tmp_path: Path, tiny_fs: Path) -> None:
    cli = Cli(user_env(tmp_path / "home"), tmp_path)
    (tmp_path / "f").write_bytes(b"z" * 64 * 1024)
    records = b'{"key":"a","address":"x","size":1,"etag":"e"}\n'
    kv_url = f"sqlite:///{tiny_fs / 'kv.sqlite3'}"
    cli("repo", "create", "lakefs://full", f"local://{tiny_fs / 'ns'}").ok()
    full = Cli(user_env(tmp_path / "home", LAKEFS_CORE__KV_URL=kv_url), tmp_path)
    full("repo", "create", "lakefs://small", f"local://{tmp_path / 'ns2'}").ok()
    fill(tiny_fs)
    cli("fs", "upload", "lakefs://full/main/f", "--source", str(tmp_path / "f")).failed(14, "No space left")
    full("repo", "create", "lakefs://more", f"local://{tmp_path / 'ns3'}").failed(14, "full")
    cli("sst", "write-range", str(tiny_fs / "out"), stdin=records).failed(14, "No space left")
