"""The ``BlockStore`` seam: one flat key space (an S3 bucket, a local root directory, memory).

Keys are plain strings without a leading slash; ``/`` is only meaningful to ``list(delimiter=...)``.
Which key an id lives under is decided by :mod:`lakefs_core.keys` alone; drivers never format keys.

Contract every driver honours (checked by ``tests/block/test_contract.py``):

- ``put`` writes the whole object or nothing. ``if_none_match=True`` is a create-only put: it raises
  :class:`~lakefs_core.errors.PreconditionFailedError` when the key exists (the data is untouched).
  Large streamed bodies may be uploaded in parts (multipart on S3); the caller cannot tell.
  ``content_type`` defaults to ``application/octet-stream``; user ``metadata`` keys are HTTP tokens,
  lower-cased on the way in, values printable ASCII, 2 KiB in all (S3's rules, for every driver).
- ``put_batch`` puts many whole (small) bodies: each item as ``put`` would, all of them checked
  (keys, content types, metadata) before anything is written, at most ``concurrency`` at a time, the
  results in the order of the items. A body may be a blocking callable returning the bytes (a local
  file's reader): it is called once, in a worker thread, only when its item is written, so a batch
  holds at most ``concurrency`` bodies. A :class:`SourceFile` is such a callable that names a local
  file: a driver may copy it without calling it (the local driver does, in compiled code), with
  the same outcome. The first failure raises; objects of the batch written
  before it stay (the caller's garbage: an upload's journal intents cover them). Every object is
  durable when the call returns (the local driver syncs the batch's files once, not one by one).
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
- ``list_keys`` is the lean listing for bulk scans (GC): every object below ``prefix`` (no delimiter),
  ascending, strictly after ``start_after``, as :class:`KeyInfo` (key, size, mtime in POSIX seconds) and
  nothing else: no ETag, no metadata, no sidecar read (local), no MD5. It skips what ``list`` skips.
- ``delete_batch`` deletes at most :data:`MAX_DELETE_BATCH` keys in one go and reports an outcome
  PER KEY in a :class:`DeleteResult` instead of raising for a key: a missing key counts as deleted (S3
  semantics), a key that could not be deleted is in ``failed`` with a code and whether retrying may
  help. The driver never sleeps and never retries here (one ``DeleteObjects`` request on S3): the
  caller paces and retries (``lakefs_core.service.deleter``). A backend asking to slow down sets ``throttled``
  (every key then failed, transient) and ``retry_after`` when it said how long to wait. ``if_match``
  maps keys to ETags: such a key is deleted only while its ETag matches (``PreconditionFailed``
  otherwise; not atomic on the local driver). Bad input (over 1,000 keys, a bad key) raises
  :class:`~lakefs_core.errors.BadInputError` before anything is deleted; a failure of the whole
  request that retrying cannot fix (access denied, no such bucket) raises as usual.
- ``MultipartStore`` (optional: S3 and local) writes one object in numbered parts, as S3's
  multipart upload: ``multipart_create`` names the final key (content type and metadata given
  then), ``multipart_part`` stores part ``number`` (``size`` bytes exactly, else
  :class:`~lakefs_core.errors.BadInputError` and the part is not stored; a part uploaded again
  replaces the earlier one), ``multipart_copy_part`` stores a byte range of another object of the
  store as a part, ``multipart_complete`` makes the listed parts (ascending, each with the ETag its
  upload answered) the object at the key, create-only when asked, with S3's multipart ETag (MD5 of
  the part MD5s, ``-<parts>``), and ``multipart_abort`` drops an upload (an unknown or finished
  one is not an error). Nothing is visible at the key before the completion; an unknown upload id
  raises :class:`~lakefs_core.errors.NotFoundError`.
- Transient backend failures surface as :class:`~lakefs_core.errors.TransientError` after the
  driver's own bounded retries; they never look like "not found".
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import AsyncIterable, AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import NamedTuple, Protocol, runtime_checkable

from lakefs_core.errors import BadInputError


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
BatchBody = bytes | Callable[[], bytes]

_READ_MORE = 1 << 20  # read size once a file turns out longer than it was listed
#: The most a :class:`SourceFile` reads: one that grew past this since it was listed is refused.
MAX_SOURCE_FILE = 64 << 20


def open_regular(path: str | os.PathLike[str]) -> int:
    """A read-only descriptor of ``path`` if it is a regular file now, else ``OSError``. The open
    does not block (a FIFO swapped in for a listed file would wait for a writer); reads from a
    regular file ignore the non-blocking flag."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | getattr(os, "O_NONBLOCK", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", os.fspath(path))
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_small_file(path: str, size: int, limit: int = MAX_SOURCE_FILE) -> bytes:
    """The whole file, in four system calls when ``size`` (from a listing) is still right: asked
    for one byte more, a regular file's read returns exactly ``size`` bytes only at its end. Any
    other length (the file changed since, or a short read) reads on until end of file. Raises
    ``OSError`` for what is not a regular file now (a FIFO swapped in would block, a device never
    end) and for a file over ``limit`` bytes now. Blocking."""
    fd = open_regular(path)
    try:
        data = os.read(fd, size + 1)
        if len(data) == size:
            return data
        pieces, total = [data], len(data)
        while chunk := os.read(fd, _READ_MORE):
            total += len(chunk)
            if total > limit:
                raise OSError(errno.EFBIG, f"over {limit} bytes now ({size} when it was listed)", path)
            pieces.append(chunk)
        return b"".join(pieces)
    finally:
        os.close(fd)


@dataclass(frozen=True, slots=True)
class SourceFile:
    """A :data:`BatchBody` that is a local file, read whole when its object is written: a blocking
    callable like any other, so every driver can load it. ``size`` is the size it had when the
    caller listed it (a hint: a file of another size is read as it is now). ``describe`` turns an
    ``OSError`` of reading it into the caller's typed error (a missing ``--source`` file, say).
    The local driver copies such files in compiled code without calling this, and calls it only
    when that path gives up on the file, so the error is the same either way."""

    path: str
    size: int
    describe: Callable[[OSError], Exception]

    def __post_init__(self) -> None:
        if not isinstance(self.path, str) or not self.path or "\0" in self.path:
            raise BadInputError("must be a non-empty file path without NUL", field="body.path")
        if type(self.size) is not int or self.size < 0:
            raise BadInputError("must be an int >= 0", field="body.size")
        if not callable(self.describe):
            raise BadInputError("must be callable", field="body.describe")

    def __call__(self) -> bytes:
        try:
            return read_small_file(self.path, self.size)
        except OSError as e:
            raise self.describe(e) from e


@dataclass(frozen=True)
class PutItem:
    """One object of :meth:`BlockStore.put_batch`: ``body`` is the bytes, or a blocking callable
    returning them (called once, in a worker thread)."""

    key: str
    body: BatchBody
    content_type: str | None = None
    metadata: Mapping[str, str] | None = None


MAX_DELETE_BATCH = 1000  # S3's DeleteObjects limit, the same for every driver


class KeyInfo(NamedTuple):
    """One object of a lean listing (:meth:`BlockStore.list_keys`). A tuple, not a dataclass: GC lists
    millions of them and a tuple is the cheapest record Python builds."""

    key: str
    size: int
    mtime: float  # last modified, POSIX seconds (UTC)


class FailedKey(NamedTuple):
    """A key ``delete_batch`` did not delete: the backend's error ``code`` and whether a retry may help."""

    key: str
    code: str
    transient: bool


@dataclass
class DeleteResult:
    """The outcome of one ``delete_batch``: every key given is in ``deleted`` or in ``failed``."""

    deleted: list[str] = field(default_factory=list)
    failed: list[FailedKey] = field(default_factory=list)
    throttled: bool = False  # the backend asked us to slow down (S3 503 SlowDown and kin)
    retry_after: float | None = None  # seconds the backend asked us to wait, when it said


@dataclass(frozen=True)
class StoredPart:
    """One stored part of a :class:`MultipartStore` upload: its number, ETag (hex MD5), size, and
    the store's checksum of it when the store keeps one (S3's CRC32; given back at completion)."""

    number: int
    etag: str
    size: int
    checksum: str = ""


@runtime_checkable
class MultipartStore(Protocol):
    """A block store that writes an object in parts without copying them (see the module docstring)."""

    async def multipart_create(
        self, key: str, *, content_type: str | None = None, metadata: Mapping[str, str] | None = None
    ) -> str: ...

    async def multipart_part(
        self, key: str, upload_id: str, number: int, body: AsyncIterable[bytes], size: int
    ) -> StoredPart: ...

    async def multipart_copy_part(
        self, key: str, upload_id: str, number: int, *, src_key: str, start: int, length: int
    ) -> StoredPart: ...

    async def multipart_complete(
        self, key: str, upload_id: str, parts: Sequence[StoredPart], *, if_none_match: bool = False
    ) -> ObjectInfo: ...

    async def multipart_abort(self, key: str, upload_id: str) -> None: ...


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

    async def put_batch(
        self, items: Sequence[PutItem], *, if_none_match: bool = False, concurrency: int = 8
    ) -> list[ObjectInfo]: ...

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

    def list_keys(self, prefix: str = "", *, start_after: str | None = None) -> AsyncIterator[KeyInfo]: ...

    async def delete_batch(
        self, keys: Sequence[str], *, if_match: Mapping[str, str] | None = None
    ) -> DeleteResult: ...
