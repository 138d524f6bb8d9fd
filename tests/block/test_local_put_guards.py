"""Local block store guards: when a metadata sidecar still describes its data file (inode, size and
mtime each matter, plus the record's version and shape), key rules at their edges, and ``put_batch``
validating every key before it writes anything. Real files in the test's tmp dir."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from lakefs_core.block import LocalBlockStore
from lakefs_core.block.base import PutItem
from lakefs_core.block.local import META_DIR
from lakefs_core.errors import BadInputError
from lakefs_core.testing.block import listing

OLD = b"written through the store, with a sidecar"
NEW = OLD.upper()  # as long as OLD, other bytes


def md5(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()


@pytest.fixture
async def store(local_root: Path) -> AsyncIterator[LocalBlockStore]:
    async with LocalBlockStore(local_root) as s:
        yield s


async def put_with_sidecar(store: LocalBlockStore, local_root: Path) -> os.stat_result:
    """``k`` = OLD with a content type (so it has a sidecar); the data file's stat."""
    await store.put("k", OLD, content_type="text/plain", metadata={"m": "1"})
    assert (local_root / META_DIR / "k").is_file()
    return os.stat(local_root / "k")


def rewrite_in_place(path: Path, content: bytes, atime_ns: int, mtime_ns: int) -> None:
    """Overwrite ``path``'s bytes in the same inode (as an editor saving in place does), then set
    its times."""
    with open(path, "r+b") as f:
        f.write(content)
    os.utime(path, ns=(atime_ns, mtime_ns))


def entries_outside_meta(root: Path) -> list[str]:
    return [p.name for p in root.iterdir() if p.name != META_DIR]


async def assert_sidecar_ignored(store: LocalBlockStore, content: bytes) -> None:
    info = await store.head("k")
    assert info.etag == md5(content)
    assert (info.content_type, info.metadata) == ("application/octet-stream", {})
    assert await store.get("k") == content


async def test_replaced_file_with_same_size_and_mtime_is_detected_by_inode(
    store: LocalBlockStore, local_root: Path
) -> None:
    """``rsync -t`` style: a new file of the same size renamed over the object, mtime preserved."""
    before = await put_with_sidecar(store, local_root)
    tmp = local_root / "k.rsync-tmp"
    tmp.write_bytes(NEW)
    os.utime(tmp, ns=(before.st_atime_ns, before.st_mtime_ns))
    os.replace(tmp, local_root / "k")
    after = os.stat(local_root / "k")
    assert (after.st_size, after.st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    assert after.st_ino != before.st_ino
    await assert_sidecar_ignored(store, NEW)


async def test_file_rewritten_in_place_with_another_size_is_detected_by_size(
    store: LocalBlockStore, local_root: Path
) -> None:
    """Same inode, mtime restored: only the size tells the sidecar is stale."""
    before = await put_with_sidecar(store, local_root)
    content = NEW + b" and longer"
    rewrite_in_place(local_root / "k", content, before.st_atime_ns, before.st_mtime_ns)
    after = os.stat(local_root / "k")
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    await assert_sidecar_ignored(store, content)


async def test_file_rewritten_in_place_with_the_same_size_is_detected_by_mtime(
    store: LocalBlockStore, local_root: Path
) -> None:
    """Same inode, same size, new bytes: the changed mtime tells the sidecar is stale."""
    before = await put_with_sidecar(store, local_root)
    rewrite_in_place(local_root / "k", NEW, before.st_atime_ns, before.st_mtime_ns + 1_000_000_000)
    after = os.stat(local_root / "k")
    assert (after.st_ino, after.st_size) == (before.st_ino, before.st_size)
    await assert_sidecar_ignored(store, NEW)


def rewrite_sidecar(local_root: Path, **changes: object) -> None:
    path = local_root / META_DIR / "k"
    record = json.loads(path.read_text())
    record.update(changes)
    path.write_text(json.dumps(record))


async def test_sidecar_of_another_format_version_is_ignored(store: LocalBlockStore, local_root: Path) -> None:
    await put_with_sidecar(store, local_root)
    rewrite_sidecar(local_root, v=2, etag="0" * 32)  # still naming the data file's inode/size/mtime
    await assert_sidecar_ignored(store, OLD)


@pytest.mark.parametrize("etag", [None, 123, ["x"]])
async def test_sidecar_without_a_string_etag_is_ignored(
    store: LocalBlockStore, local_root: Path, etag: object
) -> None:
    await put_with_sidecar(store, local_root)
    rewrite_sidecar(local_root, etag=etag)
    await assert_sidecar_ignored(store, OLD)


async def test_segment_of_255_bytes_is_a_valid_key(store: LocalBlockStore) -> None:
    longest = "a/" + "x" * 255
    assert len(longest.split("/")[1].encode()) == 255
    await store.put(longest, b"v")
    assert await store.get(longest) == b"v"
    with pytest.raises(BadInputError):
        await store.put(longest + "z", b"v")  # 256 bytes


@pytest.mark.parametrize("key", [f"a/{META_DIR}", f"a/{META_DIR}/b", f"{META_DIR}x/y"])
async def test_reserved_name_below_the_root_is_a_valid_key(store: LocalBlockStore, key: str) -> None:
    """Only the root's ``.lakefs-meta`` is reserved: the same name deeper down is an ordinary segment."""
    await store.put(key, b"v", metadata={"m": "1"})
    assert await store.get(key) == b"v"
    assert (await store.head(key)).metadata == {"m": "1"}
    assert await listing(store) == [key]


@pytest.mark.parametrize("bad", ["../escape", "a/../../escape", "a//b", f"{META_DIR}/x"])
async def test_put_batch_checks_every_key_before_writing_anything(
    store: LocalBlockStore, local_root: Path, bad: str
) -> None:
    items = [PutItem("first", b"1"), PutItem("d/second", b"2"), PutItem(bad, b"3")]
    with pytest.raises(BadInputError):
        await store.put_batch(items)
    assert await listing(store) == []
    assert not (local_root.parent / "escape").exists()
    assert entries_outside_meta(local_root) == []
