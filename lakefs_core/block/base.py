"""The ``BlockStore`` seam: one flat key space (an S3 bucket, a local root directory, memory).

Keys are plain strings without a leading slash; ``/`` is only meaningful to ``list(delimiter=...)``.
Which key an id lives under is decided by :mod:`lakefs_core.keys` alone; drivers never format keys.

Contract every driver honours (checked by ``tests/block/test_contract.py``):

- ``put`` writes the whole object or nothing. ``if_none_match=True`` is a create-only put: it raises
  :class:`~lakefs_core.errors.PreconditionFailedError` when the key exists (the data is untouched).
  Large streamed bodies may be uploaded in parts (multipart on S3); the caller cannot tell.
  ``content_type`` defaults to ``application/octet-stream``; user ``metadata`` keys are HTTP tokens,
  lower-cased on the way in, values printable ASCII, 2 KiB in all (S3's rules, for every driver).
- ``get``/``stream`` raise :class:`~lakefs_core.errors.NotFoundError` for a missing key; byte ranges
  are ``start`` (inclusive) and ``length`` (``None`` = to the end). A range running past the end is
  cut at the end; one starting at or after the end is empty (not an error). ``stream`` yields chunks of
  exactly ``chunk_size`` bytes, the last one shorter.
- ``head`` returns :class:`ObjectInfo` or raises ``NotFoundError``.
- ``delete`` of a missing key is not an error; ``delete_many`` deletes a batch and raises if any key
  could not be deleted (naming it).
- ``list`` yields :class:`ObjectInfo` (and, with a delimiter, :class:`CommonPrefix`) in ascending key
  order, starting strictly after ``start_after``; it pages internally. A common prefix is listed only
  when the prefix itself sorts after ``start_after`` (S3's rule). Listed objects carry key, size, etag
  and last-modified; ``head`` gives content type and metadata too.
- ``copy`` copies within the store (server-side where the backend can), keeping content type and
  metadata; ``if_none_match=True`` makes it create-only like ``put``.
- Transient backend failures surface as :class:`~lakefs_core.errors.TransientError` after the
  driver's own bounded retries; they never look like "not found".
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol, runtime_checkable


@dataclass(frozen=True)
class ObjectInfo:
    key: str
    size: int
    etag: str
    last_modified: datetime | None = None
    content_type: str | None = None
    metadata: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class CommonPrefix:
    prefix: str


Body = bytes | AsyncIterable[bytes]


@runtime_checkable
class BlockStore(Protocol):
    """A flat object key space. ``uri`` names it (``s3://bucket``, ``local:///abs/root``, ``mem://x``)."""

    @property
    def uri(self) -> str: ...

    async def put(
        self,
        key: str,
        body: Body,
        *,
        if_none_match: bool = False,
        content_type: str | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> ObjectInfo: ...

    async def get(self, key: str, *, start: int = 0, length: int | None = None) -> bytes: ...

    def stream(
        self, key: str, *, start: int = 0, length: int | None = None, chunk_size: int = 1 << 20
    ) -> AsyncIterator[bytes]: ...

    async def head(self, key: str) -> ObjectInfo: ...

    async def exists(self, key: str) -> bool: ...

    async def delete(self, key: str) -> None: ...

    async def delete_many(self, keys: Sequence[str]) -> None: ...

    def list(
        self,
        prefix: str = "",
        *,
        delimiter: str | None = None,
        start_after: str | None = None,
        page_size: int = 1000,
    ) -> AsyncIterator[ObjectInfo | CommonPrefix]: ...

    async def copy(self, src_key: str, dst_key: str, *, if_none_match: bool = False) -> ObjectInfo: ...

    async def close(self) -> None: ...
