"""The GC seams of the BlockStore contract, once per driver (memory, local, S3 on moto_server):
``list_keys`` (lean listing) and ``delete_batch`` (an outcome per key, no raise, no retry). Driver
specifics follow: the local store's private files and sidecars, S3's per-key errors and throttling
through a real proxy in front of moto."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
from contextlib import aclosing
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from lakefs_core.block import (
    MAX_DELETE_BATCH,
    BlockStore,
    FailedKey,
    KeyInfo,
    LocalBlockStore,
    S3BlockStore,
)
from lakefs_core.errors import AccessDeniedError, BadInputError
from lakefs_core.testing.block import listing, put_all, put_tricky
from tests.block.conftest import BUCKET, s3_settings
from tests.block.test_contract import traits_of
from tests.support.moto import MotoServer
from tests.support.moto_seed import seed_objects
from tests.support.s3proxy import ThrottlingProxy


async def seed(store: BlockStore, keys: list[str], request: pytest.FixtureRequest) -> None:
    """Each key stored with its own bytes: through the store, or on S3 as plain PUTs straight to moto
    (set-up, not the code under test: a PUT through the store costs ~6 ms of client CPU more)."""
    if isinstance(store, S3BlockStore):
        await seed_objects(request.getfixturevalue("moto")("us-east-1"), BUCKET, keys)
    else:
        await put_all(store, keys)


async def keys_of(store: BlockStore, prefix: str = "", start_after: str | None = None) -> list[KeyInfo]:
    async with aclosing(store.list_keys(prefix, start_after=start_after)) as items:  # type: ignore[type-var]
        return [info async for info in items]


# -- list_keys ---------------------------------------------------------------------------------------


async def test_list_keys_matches_list(store: BlockStore) -> None:
    keys = await put_tricky(store, traits_of(store))
    before = (datetime.now(UTC) - timedelta(minutes=5)).timestamp()
    got = await keys_of(store)
    assert [k.key for k in got] == sorted(keys)
    assert [k.key for k in got] == await listing(store)
    for info in got:
        assert info.size == len(info.key.encode())  # put_tricky stores each key as its content
        assert isinstance(info.mtime, float) and before < info.mtime < before + 3600
        head = await store.head(info.key)
        assert head.last_modified is not None and abs(head.last_modified.timestamp() - info.mtime) < 1.0
    for prefix in ["", "a", "a/", "a/c", "b", "\U0001f600/", "nothing", "a//", "../"]:
        for start_after in [None, "a", "a/", "a/b", "a/c", "a/c/d", "a0", "zz", "\u00e9"]:
            expected = await listing(store, prefix, start_after=start_after)
            got_keys = [k.key for k in await keys_of(store, prefix, start_after)]
            assert got_keys == expected, (prefix, start_after)


async def test_list_keys_pages(store: BlockStore, request: pytest.FixtureRequest) -> None:
    keys = [f"p/{i // 100:02d}/{i:05d}" for i in range(2150)]
    await seed(store, keys, request)
    await store.put("q", b"x")
    assert [k.key for k in await keys_of(store, "p/")] == keys
    assert [k.key for k in await keys_of(store, "p/", start_after=keys[1000])] == keys[1001:]
    assert [k.key for k in await keys_of(store, "p/0")] == keys[:1000]


async def test_list_keys_rejects_bad_arguments(store: BlockStore) -> None:
    with pytest.raises(BadInputError):
        await keys_of(store, 5)  # type: ignore[arg-type]
    with pytest.raises(BadInputError):
        await keys_of(store, "", start_after=b"x")  # type: ignore[arg-type]


# -- delete_batch ------------------------------------------------------------------------------------


async def test_delete_batch_outcome_per_key(store: BlockStore, request: pytest.FixtureRequest) -> None:
    keys = [f"d/{i:04d}" for i in range(MAX_DELETE_BATCH)]
    await seed(store, keys, request)
    await store.put("keep/x", b"k")
    batch = [*keys[:-2], "d/missing", keys[0]]  # 1000 keys given, one missing, one duplicate
    result = await store.delete_batch(batch)
    assert sorted(result.deleted) == sorted([*keys[:-2], "d/missing"])
    assert result.failed == [] and not result.throttled and result.retry_after is None
    assert await listing(store) == [*keys[-2:], "keep/x"]
    again = await store.delete_batch([keys[-1], keys[0], keys[-2]])
    assert sorted(again.deleted) == sorted([keys[-1], keys[0], keys[-2]]) and again.failed == []
    assert await listing(store) == ["keep/x"]
    empty = await store.delete_batch([])
    assert (empty.deleted, empty.failed) == ([], [])


async def test_delete_batch_refuses_bad_input_before_deleting(store: BlockStore) -> None:
    await store.put("a/x", b"1")
    with pytest.raises(BadInputError):
        await store.delete_batch([f"k{i}" for i in range(MAX_DELETE_BATCH + 1)])
    with pytest.raises(BadInputError):
        await store.delete_batch(["a/x", ""])
    with pytest.raises(BadInputError):
        await store.delete_batch("a/x")  # a str is not a batch of keys
    with pytest.raises(BadInputError):
        await store.delete_batch(["a/x"], if_match={"other": "abc"})
    assert await store.exists("a/x")


async def test_delete_batch_if_match(store: BlockStore) -> None:
    if isinstance(store, S3BlockStore):
        pytest.skip("moto ignores DeleteObjects' per-object ETag; S3's answer is checked below via the proxy")
    a = await store.put("c/a", b"a")
    b = await store.put("c/b", b"b")
    result = await store.delete_batch(
        ["c/a", "c/b", "c/gone"], if_match={"c/a": f'"{a.etag}"', "c/b": a.etag, "c/gone": b.etag}
    )
    assert sorted(result.deleted) == ["c/a", "c/gone"]
    assert result.failed == [FailedKey("c/b", "PreconditionFailed", False)]
    assert await listing(store) == ["c/b"]


# -- local specifics ---------------------------------------------------------------------------------


async def test_local_list_keys_skips_private_files(local_root: Path) -> None:
    store = LocalBlockStore(local_root)
    await store.put("data/s/obj", b"12345")
    (local_root / "data" / "s" / ".lakefs-tmp-0123456789abcdef0123456789abcdef").write_bytes(b"t")
    os.mkdir(local_root / "data" / "empty")
    os.symlink(local_root / "data", local_root / "link-to-dir")
    (local_root / "outside").write_bytes(b"o")
    os.symlink(local_root / "outside", local_root / "link-to-file")
    got = await keys_of(store)
    # A symbolic link is never a key, to a directory nor to a file: reading one is refused (issue 32)
    assert [(k.key, k.size) for k in got] == [
        ("data/s/obj", 5),
        ("outside", 1),
    ]
    assert [k.key for k in got] == await listing(store)
    assert got[0].mtime == os.stat(local_root / "data/s/obj").st_mtime_ns / 1e9


async def test_local_delete_batch_removes_sidecars_and_empty_dirs(local_root: Path) -> None:
    store = LocalBlockStore(local_root)
    keys = [f"data/s{i % 3}/o{i}" for i in range(30)]
    for key in keys[::2]:  # a content type: a sidecar each; the others are bare (no sidecar)
        await store.put(key, key.encode(), content_type="text/plain")
    await put_all(store, keys[1::2])
    await store.put("data/s0/keep", b"k", metadata={"m": "1"})
    sidecars = [p for p in (local_root / ".lakefs-meta" / "data").rglob("*") if p.is_file()]
    assert len(sidecars) == 16
    result = await store.delete_batch(keys)
    assert sorted(result.deleted) == sorted(keys) and result.failed == []
    assert sorted(p.name for p in (local_root / "data").iterdir()) == ["s0"]
    meta = local_root / ".lakefs-meta" / "data"
    assert sorted(str(p.relative_to(meta)) for p in meta.rglob("*") if p.is_file()) == ["s0/keep"]
    assert (await store.head("data/s0/keep")).etag  # the survivor keeps its metadata


def _chattr(flag: str, *paths: Path) -> bool:
    exe = shutil.which("chattr")
    if exe is None:
        return False
    return subprocess.run([exe, flag, *map(str, paths)], capture_output=True, check=False).returncode == 0


async def test_local_delete_batch_permission_error_is_final(local_root: Path) -> None:
    """Keys the filesystem refuses to unlink are failed, final; the others of the batch are deleted.
    Root ignores directory permissions, so as root the files are made immutable (``chattr +i``)."""
    store = LocalBlockStore(local_root)
    await put_all(store, ["ro/a", "ro/b", "rw/c"])
    locked = [local_root / "ro" / "a", local_root / "ro" / "b"]
    if os.geteuid() == 0:
        if not await asyncio.to_thread(_chattr, "+i", *locked):
            pytest.skip("running as root without chattr +i (immutable files) on this filesystem")
    else:
        os.chmod(local_root / "ro", 0o555)
    try:
        result = await store.delete_batch(["ro/a", "rw/c", "ro/b"])
    finally:
        if os.geteuid() == 0:
            await asyncio.to_thread(_chattr, "-i", *locked)
        else:
            os.chmod(local_root / "ro", 0o755)
    assert result.deleted == ["rw/c"]
    assert result.failed == [
        FailedKey("ro/a", "AccessDenied", False),
        FailedKey("ro/b", "AccessDenied", False),
    ]
    assert await listing(store) == ["ro/a", "ro/b"]
    assert (await store.head("ro/a")).etag  # its sidecar is intact


async def test_local_delete_batch_non_objects_count_as_deleted(local_root: Path) -> None:
    store = LocalBlockStore(local_root)
    await put_all(store, ["x/a/b", "y"])
    result = await store.delete_batch(["x/a", "y", "x/a/b/c"])
    # ``x/a`` is a directory (keys below it), ``x/a/b/c`` has a file as parent: neither is an object.
    assert sorted(result.deleted) == ["x/a", "x/a/b/c", "y"] and result.failed == []
    assert await listing(store) == ["x/a/b"]


# -- S3 specifics (a real proxy in front of moto_server) --------------------------------------------


def _delete_result(deleted: list[str], errors: list[tuple[str, str]]) -> bytes:
    body = "".join(f"<Deleted><Key>{k}</Key></Deleted>" for k in deleted)
    body += "".join(f"<Error><Key>{k}</Key><Code>{c}</Code><Message>m</Message></Error>" for k, c in errors)
    return (
        '<?xml version="1.0" encoding="UTF-8"?>'
        f'<DeleteResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">{body}</DeleteResult>'
    ).encode()


async def test_s3_delete_batch_per_key_errors(s3_server: MotoServer) -> None:
    async with ThrottlingProxy(s3_server.endpoint) as proxy:
        store = await S3BlockStore(BUCKET, settings=s3_settings(proxy.endpoint)).open()
        try:
            proxy.script(
                200,
                _delete_result(
                    ["k1", "not-asked"],
                    [("k2", "InternalError"), ("k3", "AccessDenied"), ("k4", "PreconditionFailed")],
                ),
            )
            result = await store.delete_batch(["k1", "k2", "k3", "k4", "k5"], if_match={"k4": "abc"})
        finally:
            await store.close()
    assert result.deleted == ["k1"]
    assert result.failed == [
        FailedKey("k2", "InternalError", True),
        FailedKey("k3", "AccessDenied", False),
        FailedKey("k4", "PreconditionFailed", False),
        FailedKey("k5", "NoOutcome", True),  # not in the answer: never assumed deleted
    ]
    assert not result.throttled
    assert proxy.requests["DeleteObjects"] == 1


@pytest.mark.parametrize("retry_after", [None, 2.5])
async def test_s3_delete_batch_throttled_is_not_retried(
    s3_server: MotoServer, retry_after: float | None
) -> None:
    async with ThrottlingProxy(s3_server.endpoint, throttle_next=1, retry_after=retry_after) as proxy:
        store = await S3BlockStore(BUCKET, settings=s3_settings(proxy.endpoint)).open()
        try:
            await put_all(store, ["t/a", "t/b"])
            result = await store.delete_batch(["t/a", "t/b"])
            assert result.throttled and result.retry_after == retry_after
            assert result.deleted == []
            assert result.failed == [FailedKey("t/a", "SlowDown", True), FailedKey("t/b", "SlowDown", True)]
            assert proxy.requests["DeleteObjects"] == 1  # one request, no internal retry
            assert await listing(store) == ["t/a", "t/b"]
            result = await store.delete_batch(["t/a", "t/b"])
            assert sorted(result.deleted) == ["t/a", "t/b"] and not result.throttled
            assert await listing(store) == []
        finally:
            await store.close()


async def test_s3_delete_batch_access_denied_raises(s3_server: MotoServer) -> None:
    denied = (
        b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>AccessDenied</Code>'
        b"<Message>Access Denied</Message></Error>"
    )
    async with ThrottlingProxy(s3_server.endpoint) as proxy:
        store = await S3BlockStore(BUCKET, settings=s3_settings(proxy.endpoint)).open()
        try:
            proxy.script(403, denied)
            with pytest.raises(AccessDeniedError):
                await store.delete_batch(["k"])
        finally:
            await store.close()


def test_retry_after_http_date() -> None:
    from botocore.exceptions import ClientError

    from lakefs_core.block.s3_errors import MAX_RETRY_AFTER, retry_after_seconds

    def err(value: str) -> ClientError:
        return ClientError(
            {
                "Error": {"Code": "SlowDown"},
                "ResponseMetadata": {"HTTPStatusCode": 503, "HTTPHeaders": {"retry-after": value}},
            },
            "DeleteObjects",
        )

    now = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC).timestamp()
    assert retry_after_seconds(err("Thu, 01 Jan 2026 12:00:30 GMT"), now) == 30.0
    assert retry_after_seconds(err("Thu, 01 Jan 2026 11:00:00 GMT"), now) == 0.0
    assert retry_after_seconds(err("7"), now) == 7.0
    assert retry_after_seconds(err("99999999"), now) == MAX_RETRY_AFTER
    assert retry_after_seconds(err("soon"), now) is None
    assert retry_after_seconds(err("-3"), now) is None
