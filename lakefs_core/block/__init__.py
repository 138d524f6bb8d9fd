"""Block stores: one flat object key space per bucket / root directory / memory name.

- :class:`BlockStore` is the seam (see :mod:`lakefs_core.block.base` for the contract);
- drivers: :class:`MemoryBlockStore` (``mem://name``), :class:`LocalBlockStore` (``local:///abs/root``),
  :class:`S3BlockStore` (``s3://bucket``, configured by :class:`S3Settings`);
- :func:`open_block_store` opens one from its store URI (bucket-level: key prefixes are the business of
  :mod:`lakefs_core.keys`); :func:`copy_object` copies between any two stores.
"""

from __future__ import annotations

import contextlib
import re
from pathlib import Path
from typing import TYPE_CHECKING

from lakefs_core.block._common import DEFAULT_CONTENT_TYPE
from lakefs_core.block.base import (
    MAX_DELETE_BATCH,
    BlockStore,
    Body,
    CommonPrefix,
    DeleteResult,
    FailedKey,
    KeyInfo,
    ObjectInfo,
    PutItem,
)
from lakefs_core.block.local import LocalBlockStore
from lakefs_core.block.s3_settings import S3Settings
from lakefs_core.errors import AccessDeniedError, BadInputError

__all__ = [
    "DEFAULT_CONTENT_TYPE",
    "MAX_DELETE_BATCH",
    "AccessDeniedError",
    "BlockStore",
    "Body",
    "CommonPrefix",
    "DeleteResult",
    "FailedKey",
    "KeyInfo",
    "LocalBlockStore",
    "MemoryBlockStore",
    "ObjectInfo",
    "PutItem",
    "S3BlockStore",
    "S3Settings",
    "copy_object",
    "open_block_store",
    "split_store_uri",
]

if TYPE_CHECKING:
    from lakefs_core.block.memory import MemoryBlockStore
    from lakefs_core.block.s3 import S3BlockStore


def __getattr__(name: str) -> object:
    # ``lakefs_core.block.S3BlockStore`` stays available without importing aioboto3 eagerly, and
    # ``MemoryBlockStore`` without loading it into every command.
    if name == "S3BlockStore":
        from lakefs_core.block.s3 import S3BlockStore

        return S3BlockStore
    if name == "MemoryBlockStore":  # tests and the demo; commands never
        from lakefs_core.block.memory import MemoryBlockStore

        return MemoryBlockStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


_SCHEME = re.compile(r"([a-z][a-z0-9+.-]*)://(.*)", re.DOTALL)


def _shown(uri: str) -> str:
    """``uri`` fit for a message: a ``user:password@`` is masked whole (even with ``@``/``/`` in it)."""
    from lakefs_core.redact import redact_url  # the one masking function

    return redact_url(uri)


def split_store_uri(uri: str) -> tuple[str, str]:
    """Validate a bucket-level store URI and return ``(scheme, location)``: the absolute root path for
    ``local``, the name for ``mem``, the bucket for ``s3``. Raises :class:`BadInputError` naming it."""
    if not isinstance(uri, str):
        raise BadInputError("must be a str", field="uri")
    m = _SCHEME.fullmatch(uri)
    if m is None:
        raise BadInputError(f"{_shown(uri)!r} is not a store URI (scheme://...)", field="uri")
    scheme, rest = m.group(1), m.group(2)
    if scheme == "local":
        if not rest.startswith("/"):
            raise BadInputError(
                f"{_shown(uri)!r}: a local store URI is local:///absolute/path (no host)", field="uri"
            )
        parts = [p for p in rest.split("/") if p]
        if any(p in (".", "..") or "\0" in p for p in parts) or "//" in rest.rstrip("/"):
            raise BadInputError(f"{_shown(uri)!r}: the path must be normalised", field="uri")
        return scheme, "/" + "/".join(parts)
    if scheme == "mem":
        name = rest[:-1] if rest.endswith("/") else rest
        if not re.fullmatch(r"[A-Za-z0-9._-]+", name):
            raise BadInputError(f"{_shown(uri)!r}: a memory store URI is mem://name", field="uri")
        return scheme, name
    if scheme == "s3":
        bucket = rest[:-1] if rest.endswith("/") else rest
        if "/" in bucket:
            raise BadInputError(
                f"{_shown(uri)!r}: a block store URI names a bucket only (s3://bucket); "
                "key prefixes belong to the storage namespace",
                field="uri",
            )
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{1,253}[A-Za-z0-9]", bucket):
            raise BadInputError(f"{_shown(uri)!r}: not a valid bucket name", field="uri")
        return scheme, bucket
    raise BadInputError(f"{_shown(uri)!r}: unsupported scheme {scheme!r} (local, mem, s3)", field="uri")


async def open_block_store(
    uri: str,
    *,
    s3: S3Settings | None = None,
    local_tmp_grace_seconds: float | None = None,
    local_strict_names: bool = False,
) -> BlockStore:
    """Open the block store named by ``uri``: ``local:///abs/root``, ``mem://name`` or ``s3://bucket``.

    ``s3`` configures S3 stores (default :class:`S3Settings()`: region and credentials from the
    environment). ``local_tmp_grace_seconds`` is a local store's leftover temp-file sweep grace
    (``None``: the store's default); ``local_strict_names`` makes a local store's listing refuse a
    file name that is not UTF-8 instead of skipping it. The caller owns the store and must
    ``await store.close()`` it.
    """
    scheme, location = split_store_uri(uri)
    if scheme == "local":
        if local_tmp_grace_seconds is not None:
            return LocalBlockStore(
                Path(location), tmp_grace_seconds=local_tmp_grace_seconds, strict_names=local_strict_names
            )
        return LocalBlockStore(Path(location), strict_names=local_strict_names)
    if scheme == "mem":
        from lakefs_core.block.memory import MemoryBlockStore

        return MemoryBlockStore(location)
    from lakefs_core.block.s3 import S3BlockStore  # the SDK is imported only when S3 is used

    store = S3BlockStore(location, settings=s3 if s3 is not None else S3Settings())
    return await store.open()


async def copy_object(
    src: BlockStore, src_key: str, dst: BlockStore, dst_key: str, *, if_none_match: bool = False
) -> ObjectInfo:
    """Copy one object, keeping its content type and user metadata.

    Within one store (``src is dst``) this is the store's own (server-side where possible) ``copy``;
    across stores the body is streamed from ``src`` into ``dst.put`` (multipart when large).
    ``if_none_match=True`` makes the write create-only.
    """
    if src is dst:
        return await src.copy(src_key, dst_key, if_none_match=if_none_match)
    info = await src.head(src_key)
    chunks = src.stream(src_key)
    try:
        return await dst.put(
            dst_key,
            chunks,
            if_none_match=if_none_match,
            content_type=info.content_type,
            metadata=info.metadata,
        )
    finally:
        aclose = getattr(chunks, "aclose", None)
        if aclose is not None:
            with contextlib.suppress(Exception):
                await aclose()
