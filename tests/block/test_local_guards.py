"""Local-filesystem driver delete guards (lakefs_core/block/local.py, ``_delete_one``).

- Deleting a key that names a directory (a prefix of other keys) is a no-op, as on S3: the objects
  under it stay.
- Deleting a key drops its sidecar only if the sidecar does not describe a newer file: a put of the
  same key that lands between the delete's unlink of the data file and its sidecar cleanup keeps
  its metadata. The interleaving is forced by wrapping ``os.unlink`` (of an entry of the data file's
  directory descriptor).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from lakefs_core.block import LocalBlockStore
from lakefs_core.block.local import META_DIR


@pytest.fixture
async def store(local_root: Path) -> AsyncIterator[LocalBlockStore]:
    async with LocalBlockStore(local_root) as s:
        yield s


async def test_delete_of_a_prefix_is_a_noop(store: LocalBlockStore, local_root: Path) -> None:
    await store.put("p/q", b"1", metadata={"m": "x"})
    await store.delete("p")
    assert await store.get("p/q") == b"1"
    assert (await store.head("p/q")).metadata == {"m": "x"}
    assert (local_root / "p").is_dir()
    await store.delete_many(["p"])
    assert await store.get("p/q") == b"1"


async def test_delete_keeps_the_sidecar_of_a_put_that_lands_mid_delete(
    store: LocalBlockStore, local_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = "d/obj"
    data_path = os.fspath(local_root / key)
    await store.put(key, b"old", metadata={"v": "1"})
    loop = asyncio.get_running_loop()
    real_unlink = os.unlink
    raced: list[str] = []

    def unlink(path: str | bytes | os.PathLike[str], *args: object, **kwargs: object) -> None:
        real_unlink(path, *args, **kwargs)  # type: ignore[arg-type]
        if not raced and unlinked(path, kwargs.get("dir_fd")) == data_path:
            # The delete runs in a worker thread: put the new version through the event loop and
            # wait for it before the delete goes on to its sidecar cleanup.
            info = asyncio.run_coroutine_threadsafe(store.put(key, b"new", metadata={"v": "2"}), loop).result(
                10
            )
            raced.append(info.etag)

    def unlinked(path: str | bytes | os.PathLike[str], dir_fd: object) -> str:
        """The path unlinked (the store unlinks an entry of a directory descriptor)."""
        if isinstance(dir_fd, int):
            parent = local_root / "d"
            if os.path.samestat(os.fstat(dir_fd), os.stat(parent)):
                return os.fspath(parent / os.fsdecode(path))
            return "elsewhere"
        return os.fsdecode(path)

    monkeypatch.setattr(os, "unlink", unlink)
    await store.delete(key)
    monkeypatch.undo()
    assert len(raced) == 1
    assert await store.get(key) == b"new"
    head = await store.head(key)
    assert head.metadata == {"v": "2"}
    assert head.etag == raced[0]
    assert (local_root / META_DIR / key).is_file()
