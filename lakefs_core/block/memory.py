"""In-memory :class:`~lakefs_core.block.base.BlockStore` (``mem://name``), for tests and tools.

Stores named alike share one key space while any of them is alive: ``MemoryBlockStore("x")`` twice (or
``open_block_store("mem://x")`` twice) sees the same objects, the way two clients see one bucket. The
key space is dropped when the last store naming it is garbage collected. Single event loop only (no
locking beyond asyncio's): every operation is atomic with respect to the others; a streamed ``put``
collects the whole body before it becomes visible.

ETags are the hex MD5 of the content, like S3 single-part uploads.
"""

from __future__ import annotations

import asyncio
import builtins
import hashlib
import re
import weakref
from bisect import bisect_left, bisect_right, insort
from collections.abc import AsyncGenerator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import TracebackType

from lakefs_core.block._common import (
    Grouper,
    check_body,
    check_delete_batch,
    check_key,
    check_list_args,
    check_list_keys_args,
    check_positive,
    check_range,
    closed_error,
    iter_body,
    normalize_content_type,
    normalize_metadata,
    prefix_successor,
    put_batch_by_puts,
    slice_range,
)
from lakefs_core.block.base import (
    MAX_DELETE_BATCH,
    Body,
    CommonPrefix,
    DeleteResult,
    FailedKey,
    KeyInfo,
    ObjectInfo,
    PutItem,
)
from lakefs_core.errors import BadInputError, NotFoundError, PreconditionFailedError

_NAME = re.compile(r"[A-Za-z0-9._-]+")


@dataclass(frozen=True)
class _Object:
    data: bytes
    etag: str
    last_modified: datetime
    content_type: str
    metadata: Mapping[str, str]


@dataclass
class _Space:
    objects: dict[str, _Object] = field(default_factory=dict)
    keys: builtins.list[str] = field(default_factory=builtins.list)  # sorted


_SPACES: weakref.WeakValueDictionary[str, _Space] = weakref.WeakValueDictionary()


def _space(name: str) -> _Space:
    space = _SPACES.get(name)
    if space is None:
        space = _Space()
        _SPACES[name] = space
    return space


class MemoryBlockStore:
    """A block store held in this process's memory."""

    def __init__(self, name: str) -> None:
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise BadInputError("must be non-empty and use only letters, digits, '.', '_', '-'", field="name")
        self._name = name
        self._space = _space(name)
        self._closed = False

    @property
    def uri(self) -> str:
        return f"mem://{self._name}"

    def __repr__(self) -> str:
        return f"MemoryBlockStore({self._name!r})"

    async def __aenter__(self) -> MemoryBlockStore:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    def _where(self, key: str) -> str:
        return f"{self.uri}/{key}"

    def _check_open(self) -> None:
        if self._closed:
            raise closed_error(self.uri)

    def _lookup(self, key: str) -> _Object:
        self._check_open()
        obj = self._space.objects.get(check_key(key))
        if obj is None:
            raise NotFoundError(f"{self._where(key)}: no such object")
        return obj

    @staticmethod
    def _info(key: str, obj: _Object, *, full: bool = True) -> ObjectInfo:
        if not full:
            return ObjectInfo(key=key, size=len(obj.data), etag=obj.etag, last_modified=obj.last_modified)
        return ObjectInfo(
            key=key,
            size=len(obj.data),
            etag=obj.etag,
            last_modified=obj.last_modified,
            content_type=obj.content_type,
            metadata=dict(obj.metadata),
        )

    def _store(self, key: str, obj: _Object, if_none_match: bool) -> ObjectInfo:
        self._check_open()
        space = self._space
        if key in space.objects:
            if if_none_match:
                raise PreconditionFailedError(f"{self._where(key)}: already exists (create-only put)")
        else:
            insort(space.keys, key)
        space.objects[key] = obj
        return self._info(key, obj)

    async def put(
        self,
        key: str,
        body: Body,
        *,
        if_none_match: bool = False,
        content_type: str | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> ObjectInfo:
        self._check_open()
        check_key(key)
        check_body(body)
        ctype = normalize_content_type(content_type)
        meta = normalize_metadata(metadata)
        if isinstance(body, (bytes, bytearray, memoryview)):
            data = bytes(body)
        else:
            buf = bytearray()
            async for chunk in iter_body(body):
                buf += chunk
            data = bytes(buf)
        obj = _Object(
            data=data,
            etag=hashlib.md5(data, usedforsecurity=False).hexdigest(),
            last_modified=datetime.now(UTC),
            content_type=ctype,
            metadata=meta,
        )
        return self._store(key, obj, if_none_match)

    async def put_batch(
        self, items: Sequence[PutItem], *, if_none_match: bool = False, concurrency: int = 8
    ) -> list[ObjectInfo]:
        self._check_open()
        return await put_batch_by_puts(
            self.put, items, if_none_match=if_none_match, concurrency=concurrency, thread_loads=False
        )

    async def get(self, key: str, *, start: int = 0, length: int | None = None) -> bytes:
        check_range(start, length)
        data = self._lookup(key).data
        begin, end = slice_range(len(data), start, length)
        return data[begin:end]

    async def stream(
        self, key: str, *, start: int = 0, length: int | None = None, chunk_size: int = 1 << 20
    ) -> AsyncGenerator[bytes, None]:
        check_range(start, length)
        check_positive(chunk_size, "chunk_size")
        data = self._lookup(key).data
        begin, end = slice_range(len(data), start, length)
        for pos in range(begin, end, chunk_size):
            yield data[pos : min(end, pos + chunk_size)]
            await asyncio.sleep(0)

    async def head(self, key: str) -> ObjectInfo:
        return self._info(key, self._lookup(key))

    async def exists(self, key: str) -> bool:
        self._check_open()
        return check_key(key) in self._space.objects

    def _remove(self, key: str) -> None:
        space = self._space
        if space.objects.pop(key, None) is not None:
            i = bisect_left(space.keys, key)
            del space.keys[i]

    async def delete(self, key: str) -> None:
        self._check_open()
        self._remove(check_key(key))

    async def delete_many(self, keys: Sequence[str]) -> None:
        self._check_open()
        checked = [check_key(k, field="keys") for k in keys]
        for key in checked:
            self._remove(key)

    async def list(
        self,
        prefix: str = "",
        *,
        delimiter: str | None = None,
        start_after: str | None = None,
        page_size: int = 1000,
    ) -> AsyncGenerator[ObjectInfo | CommonPrefix, None]:
        prefix, delimiter, start_after, page_size = check_list_args(prefix, delimiter, start_after, page_size)
        self._check_open()
        grouper = Grouper(prefix, delimiter, start_after)
        # Resume point for the next page: keys >= lower (inclusive) or > lower.
        if start_after is not None and start_after >= prefix:
            lower, inclusive = start_after, False
        else:
            lower, inclusive = prefix, True
        finished = False
        while not finished:
            self._check_open()
            keys = self._space.keys
            i = bisect_left(keys, lower) if inclusive else bisect_right(keys, lower)
            page: builtins.list[ObjectInfo | CommonPrefix] = []
            while len(page) < page_size:
                if i >= len(keys) or not keys[i].startswith(prefix):
                    finished = True
                    break
                k = keys[i]
                out = grouper.feed(self._info(k, self._space.objects[k], full=False))
                if isinstance(out, CommonPrefix) or out is None:
                    if out is not None:
                        page.append(out)
                    assert grouper.last_prefix is not None
                    succ = prefix_successor(grouper.last_prefix)
                    if succ is None:
                        finished = True
                        break
                    lower, inclusive = succ, True
                    i = bisect_left(keys, succ)
                    continue
                page.append(out)
                lower, inclusive = k, False
                i += 1
            for item in page:
                yield item
            await asyncio.sleep(0)

    async def list_keys(
        self, prefix: str = "", *, start_after: str | None = None
    ) -> AsyncGenerator[KeyInfo, None]:
        prefix, start_after = check_list_keys_args(prefix, start_after)
        self._check_open()
        lower, inclusive = (
            (start_after, False) if start_after is not None and start_after >= prefix else (prefix, True)
        )
        while True:
            self._check_open()
            keys, objects = self._space.keys, self._space.objects
            i = bisect_left(keys, lower) if inclusive else bisect_right(keys, lower)
            page = [
                KeyInfo(k, len(objects[k].data), objects[k].last_modified.timestamp())
                for k in keys[i : i + 1000]
                if k.startswith(prefix)
            ]
            for info in page:
                yield info
            if len(page) < 1000:
                return
            lower, inclusive = page[-1].key, False
            await asyncio.sleep(0)

    async def delete_batch(
        self, keys: Sequence[str], *, if_match: Mapping[str, str] | None = None
    ) -> DeleteResult:
        checked, etags = check_delete_batch(keys, if_match, MAX_DELETE_BATCH)
        self._check_open()
        result = DeleteResult()
        for key in checked:
            obj = self._space.objects.get(key)
            if obj is not None and key in etags and obj.etag != etags[key]:
                result.failed.append(FailedKey(key, "PreconditionFailed", False))
                continue
            self._remove(key)
            result.deleted.append(key)
        return result

    async def copy(self, src_key: str, dst_key: str, *, if_none_match: bool = False) -> ObjectInfo:
        src = self._lookup(src_key)
        check_key(dst_key, field="dst_key")
        obj = _Object(
            data=src.data,
            etag=src.etag,
            last_modified=datetime.now(UTC),
            content_type=src.content_type,
            metadata=dict(src.metadata),
        )
        return self._store(dst_key, obj, if_none_match)

    async def close(self) -> None:
        self._closed = True
