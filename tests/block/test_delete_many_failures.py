"""delete_many reports keys it could not delete, on the local and the S3 drivers.

- Local (lakefs_core/block/local.py): a key whose unlink fails (PermissionError injected at the
  ``os.unlink`` seam) makes ``delete_many`` raise TransientError naming that key, after the other
  keys of the batch are deleted.
- S3 (lakefs_core/block/s3.py): a DeleteObjects result carrying a non-transient per-key error
  raises. Only when every such error is an access code is it AccessDeniedError; any other code, alone
  or mixed with AccessDenied, raises a plain LakeFSError naming the keys and their codes.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from lakefs_core.block import AccessDeniedError, LocalBlockStore
from lakefs_core.errors import LakeFSError, TransientError
from tests.block.faults import Fault, FaultProxy, is_method
from tests.block.test_s3 import delete_result, proxied

# -- local -------------------------------------------------------------------------------------------


@pytest.fixture
async def local_store(local_root: Path) -> AsyncIterator[LocalBlockStore]:
    async with LocalBlockStore(local_root) as s:
        yield s


async def test_local_delete_many_raises_naming_undeletable_key(
    local_store: LocalBlockStore, local_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    keys = ["a", "d/stuck", "z"]
    for key in keys:
        await local_store.put(key, key.encode())
    stuck = local_root / "d" / "stuck"
    real_unlink = os.unlink

    def unlink(path: object, *args: object, **kwargs: object) -> None:
        if unlinked(path, kwargs.get("dir_fd")) == stuck:
            raise PermissionError(13, "Permission denied", str(path))
        real_unlink(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr("lakefs_core.block.local.os.unlink", unlink)
    with pytest.raises(TransientError, match="1 key\\(s\\) could not be deleted") as info:
        await local_store.delete_many(keys)
    assert "d/stuck" in str(info.value)
    monkeypatch.undo()
    assert not await local_store.exists("a")
    assert not await local_store.exists("z")
    assert await local_store.exists("d/stuck")
    assert await local_store.get("d/stuck") == b"d/stuck"
    await local_store.delete_many(keys)  # once unlink works again the leftover goes
    assert not await local_store.exists("d/stuck")


def unlinked(path: object, dir_fd: object) -> Path:
    """The path unlinked: the store unlinks an entry of a directory descriptor (``dir_fd``)."""
    name = Path(os.fsdecode(path))  # type: ignore[arg-type]
    return Path(os.readlink(f"/proc/self/fd/{dir_fd}")) / name if isinstance(dir_fd, int) else name


# -- S3 ----------------------------------------------------------------------------------------------


async def test_s3_delete_many_non_access_error_raises_plain_lakefs_error(proxy: FaultProxy) -> None:
    async with proxied(proxy) as store:
        await store.put("a", b"1")
        await store.put("b", b"2")
        proxy.fail(
            Fault(200, body=delete_result(("a", "InvalidObjectState"))),
            times=1,
            when=is_method("POST", "delete"),
        )
        with pytest.raises(LakeFSError, match="a \\(InvalidObjectState\\)") as info:
            await store.delete_many(["a", "b"])
        assert not isinstance(info.value, (AccessDeniedError, TransientError))
        assert "1 key(s) not deleted" in str(info.value)
        assert proxy.count("POST", "delete") == 1  # a final per-key error is not retried


async def test_s3_delete_many_mixed_access_and_other_error_is_not_access_denied(
    proxy: FaultProxy,
) -> None:
    async with proxied(proxy) as store:
        await store.put("a", b"1")
        await store.put("b", b"2")
        proxy.fail(
            Fault(200, body=delete_result(("a", "AccessDenied"), ("b", "InvalidObjectState"))),
            times=1,
            when=is_method("POST", "delete"),
        )
        with pytest.raises(LakeFSError) as info:
            await store.delete_many(["a", "b"])
        assert type(info.value) is LakeFSError
        message = str(info.value)
        assert "2 key(s) not deleted" in message
        assert "a (AccessDenied)" in message
        assert "b (InvalidObjectState)" in message
        # Only access codes: AccessDeniedError.
        proxy.fail(
            Fault(200, body=delete_result(("a", "AccessDenied"), ("b", "AllAccessDisabled"))),
            times=1,
            when=is_method("POST", "delete"),
        )
        with pytest.raises(AccessDeniedError, match="2 key\\(s\\) not deleted"):
            await store.delete_many(["a", "b"])
