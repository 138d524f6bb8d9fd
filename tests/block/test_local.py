"""Local-filesystem driver specifics: layout, key rules, sidecars, atomicity, cleanup."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from lakefs_core.block import LocalBlockStore
from lakefs_core.block.base import ObjectInfo
from lakefs_core.block.local import META_DIR, TMP_PREFIX
from lakefs_core.errors import BadInputError, ConflictError, PreconditionFailedError
from lakefs_core.testing.block import listing

MIB = 1 << 20


def md5(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()


def temp_files(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.name.startswith(TMP_PREFIX)]


@pytest.fixture
async def store(local_root: Path) -> AsyncIterator[LocalBlockStore]:
    async with LocalBlockStore(local_root) as s:
        yield s


def test_uri_and_root(local_root: Path) -> None:
    store = LocalBlockStore(local_root)
    assert store.uri == f"local://{local_root}"
    assert store.uri.startswith("local:///")
    with pytest.raises(BadInputError):
        LocalBlockStore("relative/dir")


@pytest.mark.parametrize(
    "key",
    [
        "../escape",
        "a/../../b",
        "/abs",
        "a//b",
        "a/",
        "./a",
        "a/./b",
        "..",
        f"{META_DIR}/x",
        f"a/{TMP_PREFIX}x",
        "a\0b",
    ],
)
async def test_bad_keys(store: LocalBlockStore, key: str) -> None:
    with pytest.raises(BadInputError):
        await store.put(key, b"x")
    with pytest.raises(BadInputError):
        await store.get(key)


async def test_plain_file_layout_and_hidden_sidecar(store: LocalBlockStore, local_root: Path) -> None:
    await store.put("data/slice/obj", b"content", content_type="text/plain", metadata={"k": "v"})
    assert (local_root / "data/slice/obj").read_bytes() == b"content"
    sidecar = json.loads((local_root / META_DIR / "data/slice/obj").read_text())
    assert sidecar["etag"] == md5(b"content")
    assert (sidecar["content_type"], sidecar["metadata"]) == ("text/plain", {"k": "v"})
    assert await listing(store) == ["data/slice/obj"]
    assert await listing(store, delimiter="/") == ["data/*"]
    assert await listing(store, ".") == []
    assert temp_files(local_root) == []


async def test_bare_objects_have_no_sidecar_and_the_same_answers(
    store: LocalBlockStore, local_root: Path
) -> None:
    """Small, default content type, no metadata: no sidecar, and nothing a caller could tell."""
    from lakefs_core.block.local import BARE_MAX_BYTES

    small, big = b"s" * BARE_MAX_BYTES, b"b" * (BARE_MAX_BYTES + 1)
    written = {
        "bare": (await store.put("d/bare", small), False),
        "big": (await store.put("d/big", big), True),
        "typed": (await store.put("d/typed", b"t", content_type="text/csv"), True),
        "meta": (await store.put("d/meta", b"m", metadata={"k": "v"}), True),
    }
    async with LocalBlockStore(local_root) as fresh:  # no ETag cache: recomputed for the bare one
        for name, (info, has_sidecar) in written.items():
            assert (local_root / META_DIR / "d" / name).exists() is has_sidecar, name
            head = await fresh.head(f"d/{name}")
            assert (head.etag, head.size, head.content_type, dict(head.metadata)) == (
                info.etag,
                info.size,
                info.content_type,
                dict(info.metadata),
            )
        assert (await fresh.head("d/bare")).etag == md5(small)
        listed = {i.key: i.etag async for i in fresh.list("d/") if isinstance(i, ObjectInfo)}
        assert listed == {f"d/{name}": info.etag for name, (info, _) in written.items()}


async def test_a_bare_overwrite_removes_the_old_sidecar(store: LocalBlockStore, local_root: Path) -> None:
    await store.put("k", b"typed", content_type="text/plain", metadata={"m": "1"})
    assert (local_root / META_DIR / "k").exists()
    await store.put("k", b"plain")
    assert not (local_root / META_DIR / "k").exists()
    head = await store.head("k")
    assert (head.etag, head.content_type, dict(head.metadata)) == (
        md5(b"plain"),
        "application/octet-stream",
        {},
    )


async def test_key_and_longer_key_conflict(store: LocalBlockStore) -> None:
    await store.put("a", b"file")
    with pytest.raises(ConflictError):
        await store.put("a/b", b"below a file")
    await store.put("x/y", b"file below x")
    with pytest.raises(ConflictError):
        await store.put("x", b"over a directory")
    with pytest.raises(ConflictError):
        await store.put("x", b"over a directory", if_none_match=True)
    assert not await store.exists("x")
    assert await store.get("a") == b"file"


async def test_file_replaced_by_another_tool(store: LocalBlockStore, local_root: Path) -> None:
    await store.put("k", b"ours", content_type="text/plain", metadata={"m": "1"})
    (local_root / "k").write_bytes(b"replaced by someone else")
    head = await store.head("k")
    assert head.etag == md5(b"replaced by someone else")  # the stale sidecar is ignored
    assert (head.content_type, dict(head.metadata)) == ("application/octet-stream", {})
    assert await store.get("k") == b"replaced by someone else"


async def test_foreign_files_are_objects(store: LocalBlockStore, local_root: Path) -> None:
    (local_root / "imported").mkdir()
    (local_root / "imported" / "f.csv").write_bytes(b"a,b\n")
    (local_root / "imported" / f"{TMP_PREFIX}inflight").write_bytes(b"partial")
    (local_root / "empty" / "dir").mkdir(parents=True)
    assert await listing(store) == ["imported/f.csv"]
    assert await listing(store, delimiter="/") == ["imported/*"]  # empty directories are not prefixes
    assert (await store.head("imported/f.csv")).etag == md5(b"a,b\n")
    assert not await store.exists("empty/dir")


async def test_delete_prunes_empty_directories(store: LocalBlockStore, local_root: Path) -> None:
    await store.put("p/q/r", b"1", metadata={"a": "b"})
    await store.put("p/s", b"2")
    await store.delete("p/q/r")
    assert not (local_root / "p/q").exists()
    assert not (local_root / META_DIR / "p/q").exists()
    await store.delete_many(["p/s"])
    assert sorted(os.listdir(local_root)) in ([], [META_DIR])
    assert await listing(store) == []
    await store.put("p/q", b"a file where a directory was")
    assert await store.get("p/q") == b"a file where a directory was"


async def test_failed_and_cancelled_puts_leave_no_temp_files(
    store: LocalBlockStore, local_root: Path
) -> None:
    async def failing() -> AsyncIterator[bytes]:
        yield b"x" * MIB
        yield b"y" * MIB
        raise RuntimeError("source broke")

    with pytest.raises(RuntimeError):
        await store.put("dir/failed", failing())

    started = asyncio.Event()

    async def slow() -> AsyncIterator[bytes]:
        for _ in range(3):
            yield b"z" * MIB
        started.set()
        await asyncio.sleep(3600)
        yield b"never"

    task = asyncio.create_task(store.put("dir/cancelled", slow()))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert temp_files(local_root) == []
    assert not await store.exists("dir/failed")
    assert not await store.exists("dir/cancelled")


async def test_concurrent_create_only_puts(store: LocalBlockStore, local_root: Path) -> None:
    async def attempt(i: int) -> bool:
        try:
            await store.put("slot", f"{i}".encode() * 1000, if_none_match=True)
        except PreconditionFailedError:
            return False
        return True

    results = await asyncio.gather(*(attempt(i) for i in range(20)))
    assert results.count(True) == 1
    winner = results.index(True)
    assert await store.get("slot") == f"{winner}".encode() * 1000
    assert (await store.head("slot")).etag == md5(f"{winner}".encode() * 1000)
    assert temp_files(local_root) == []


async def test_open_stream_keeps_reading_its_version(store: LocalBlockStore) -> None:
    await store.put("k", b"A" * 10)
    stream = store.stream("k", chunk_size=4)
    first = await anext(stream)
    await store.put("k", b"B" * 10)  # a new file replaces the old one; the open stream is unaffected
    rest = [c async for c in stream]
    assert first + b"".join(rest) == b"A" * 10
    assert await store.get("k") == b"B" * 10


# -- put_batch: one filesystem sync per batch --------------------------------------------------------


class SyncCounter:
    """Counts ``os.fsync`` and ``syncfs`` calls (both still really done)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, syncfs: bool = True) -> None:
        from lakefs_core.block import local_files

        self.fsyncs = 0
        self.syncfs: list[int] = []
        real_fsync, real_syncfs = os.fsync, local_files._SYNCFS

        def fsync(fd: int) -> None:
            self.fsyncs += 1
            real_fsync(fd)

        def counted_syncfs(fd: int) -> int:
            self.syncfs.append(os.fstat(fd).st_dev)
            assert real_syncfs is not None
            return real_syncfs(fd)

        monkeypatch.setattr(os, "fsync", fsync)
        monkeypatch.setattr(local_files, "_SYNCFS", counted_syncfs if syncfs else None)


@pytest.mark.skipif(os.uname().sysname != "Linux", reason="syncfs is Linux's")
async def test_put_batch_syncs_the_filesystem_once(
    store: LocalBlockStore, local_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lakefs_core.block.base import PutItem

    counter = SyncCounter(monkeypatch)
    items = [PutItem(f"data/g{i % 3}/{i:04}", f"body {i}".encode()) for i in range(200)]
    infos = await store.put_batch(items, if_none_match=True, concurrency=4)
    assert len(infos) == 200 and counter.fsyncs == 0
    assert counter.syncfs == [os.stat(local_root).st_dev]  # one filesystem, one call
    assert temp_files(local_root) == []
    # bare objects (no sidecar): a new store instance recomputes the same ETag from the content
    assert [p.name for p in (local_root / META_DIR).rglob("*")] in ([], [META_DIR])  # the sweep's stamp
    async with LocalBlockStore(local_root) as again:
        assert (await again.head("data/g1/0001")).etag == md5(b"body 1")


async def test_put_batch_without_syncfs_fsyncs_each_file(
    store: LocalBlockStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lakefs_core.block.base import PutItem

    counter = SyncCounter(monkeypatch, syncfs=False)
    await store.put_batch([PutItem(f"data/g/{i}", b"x") for i in range(10)], if_none_match=True)
    assert counter.fsyncs >= 20 and counter.syncfs == []  # data file and directory each (bare: no sidecar)


async def test_put_batch_of_an_unsynced_store_syncs_nothing(
    local_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lakefs_core.block.base import PutItem

    counter = SyncCounter(monkeypatch)
    async with LocalBlockStore(local_root, fsync=False) as s:
        await s.put_batch([PutItem(f"data/g/{i}", b"x") for i in range(10)])
    assert counter.fsyncs == 0 and counter.syncfs == []


@pytest.mark.skipif(os.uname().sysname != "Linux", reason="syncfs is Linux's")
async def test_put_batch_fails_when_the_sync_fails(
    store: LocalBlockStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writeback error reported by syncfs fails the batch: nothing is reported durable."""
    import ctypes
    import errno

    from lakefs_core.block import local_files
    from lakefs_core.block.base import PutItem
    from lakefs_core.errors import LakeFSError

    def failing(fd: int) -> int:
        ctypes.set_errno(errno.EIO)
        return -1

    monkeypatch.setattr(local_files, "_SYNCFS", failing)
    with pytest.raises(LakeFSError, match="Input/output error") as e:
        await store.put_batch([PutItem("data/g/a", b"x")])
    assert e.value.retryable


async def test_put_batch_failure_leaves_no_temporary_files(store: LocalBlockStore, local_root: Path) -> None:
    from lakefs_core.block.base import PutItem

    await store.put("data/g/taken", b"original")
    items = [PutItem(f"data/g/{i:03}", b"x") for i in range(50)] + [PutItem("data/g/taken", b"intruder")]
    with pytest.raises(PreconditionFailedError):
        await store.put_batch(items, if_none_match=True, concurrency=2)
    assert await store.get("data/g/taken") == b"original" and temp_files(local_root) == []


def ident(p: Path) -> tuple[int, int]:
    """Device and inode of ``p``: which file ``drop_stale`` was told it wrote."""
    st = os.stat(p)
    return st.st_dev, st.st_ino


async def test_a_bare_put_keeps_a_sidecar_that_describes_the_file_in_place(
    store: LocalBlockStore, local_root: Path
) -> None:
    """A bare put racing a put of the same key with metadata must not take the winner's sidecar:
    only a stale one (not matching the data file now in place) is removed."""
    from lakefs_core.block.local_beneath import Dirs, Root
    from lakefs_core.block.local_meta import Sidecars

    ours = local_root / "ours"
    ours.write_bytes(b"the bare put's file, replaced before it looked")
    await store.put("k", b"typed", content_type="text/csv")  # the other writer won the race
    sidecars = Sidecars(fsync=False)

    def drop_stale(written: Path) -> None:  # of the key "k", whose data file is local_root / "k"
        with Dirs(Root(str(local_root))) as dirs:
            sidecars.drop_stale(dirs, ["k"], ident(written))

    drop_stale(ours)
    assert (await store.head("k")).content_type == "text/csv"
    (local_root / "k").write_bytes(b"replaced by another tool")  # now the sidecar is stale
    drop_stale(ours)
    assert not (local_root / META_DIR / "k").exists()
    drop_stale(ours)  # none: nothing to do
    # Our file in place: any sidecar goes, even one that (an inode reused) seems to describe it.
    await store.put("k", b"typed", content_type="text/csv")
    drop_stale(local_root / "k")
    assert not (local_root / META_DIR / "k").exists()
