"""Helpers shared by the block-store drivers (argument checks, ranges, listing). Not public API.

The rules here are what makes the drivers behave alike; ``tests/block/test_contract.py`` checks them:

- keys are non-empty, valid UTF-8, at most 1024 bytes (S3's limit); drivers may add rules (local);
- ``content_type`` defaults to :data:`DEFAULT_CONTENT_TYPE`;
- user metadata keys are HTTP tokens and are lower-cased (S3 lower-cases them), values are printable
  ASCII, the total is at most 2 KiB (S3's limit);
- byte ranges: ``start >= 0``, ``length >= 0`` or ``None``; a range running past the end is cut at the
  end, a range starting at or after the end is empty (never an error);
- ``list`` yields objects and common prefixes merged in ascending key order (code-point order, which is
  UTF-8 byte order, S3's order). Listing entries carry key, size, etag and last-modified only.
  ``start_after`` compares with what is listed: an object is listed if its key sorts after it, a common
  prefix if the prefix itself sorts after it (S3's rule, so the last key or prefix of a page continues
  a listing; a ``start_after`` inside a group skips the rest of that group).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import (
    AsyncGenerator,
    AsyncIterable,
    Awaitable,
    Callable,
    Iterable,
    Iterator,
    Mapping,
)
from typing import NamedTuple

from lakefs_core.aio import bounded_each
from lakefs_core.block.base import BatchBody, CommonPrefix, ObjectInfo, PutItem
from lakefs_core.errors import BadInputError, LakeFSError

DEFAULT_CONTENT_TYPE = "application/octet-stream"
MAX_KEY_BYTES = 1024
MAX_METADATA_BYTES = 2048

# Always ``fullmatch``: ``$`` would also match before a trailing newline (a header injection).
_TOKEN = re.compile(r"[A-Za-z0-9!#$%&'*+.^_`|~-]+")
_PRINTABLE_ASCII = re.compile(r"[\x20-\x7e]*")


def closed_error(uri: str) -> LakeFSError:
    """The error for an operation on a store after ``close()`` (a programming error, not retryable)."""
    return LakeFSError(f"block store {uri} is closed")


def check_key(key: object, field: str = "key") -> str:
    """A non-empty ``str`` key, valid UTF-8, at most 1024 bytes encoded."""
    if not isinstance(key, str):
        raise BadInputError(f"must be a str, not {type(key).__name__}", field=field)
    if not key:
        raise BadInputError("must not be empty", field=field)
    try:
        encoded = key.encode("utf-8")
    except UnicodeEncodeError:
        raise BadInputError(f"{key!r} is not valid UTF-8", field=field) from None
    if len(encoded) > MAX_KEY_BYTES:
        raise BadInputError(f"longer than {MAX_KEY_BYTES} bytes", field=field)
    return key


def check_range(start: object, length: object) -> tuple[int, int | None]:
    if not isinstance(start, int) or isinstance(start, bool) or start < 0:
        raise BadInputError("must be an integer >= 0", field="start")
    if length is not None and (not isinstance(length, int) or isinstance(length, bool) or length < 0):
        raise BadInputError("must be None or an integer >= 0", field="length")
    return start, length


def check_positive(value: object, field: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise BadInputError("must be a positive integer", field=field)
    return value


def slice_range(size: int, start: int, length: int | None) -> tuple[int, int]:
    """``(begin, end)`` offsets of the range within an object of ``size`` bytes (``begin <= end``)."""
    begin = min(start, size)
    end = size if length is None else min(size, start + length)
    return begin, max(begin, end)


def normalize_content_type(content_type: object) -> str:
    if content_type is None or content_type == "":
        return DEFAULT_CONTENT_TYPE
    if not isinstance(content_type, str) or not _PRINTABLE_ASCII.fullmatch(content_type):
        raise BadInputError("must be printable ASCII", field="content_type")
    return content_type


def normalize_metadata(metadata: Mapping[str, str] | None) -> dict[str, str]:
    """Validated user metadata with lower-cased keys."""
    if not metadata:
        return {}
    out: dict[str, str] = {}
    total = 0
    for k, v in metadata.items():
        if not isinstance(k, str) or not _TOKEN.fullmatch(k):
            raise BadInputError("metadata keys must be non-empty HTTP tokens", field=f"metadata.{k!s}")
        if not isinstance(v, str) or not _PRINTABLE_ASCII.fullmatch(v):
            raise BadInputError("metadata values must be printable ASCII", field=f"metadata.{k}")
        lower = k.lower()
        if lower in out:
            raise BadInputError("duplicate key (metadata keys are case-insensitive)", field=f"metadata.{k}")
        out[lower] = v
        total += len(lower) + len(v)
    if total > MAX_METADATA_BYTES:
        raise BadInputError(f"larger than {MAX_METADATA_BYTES} bytes in total", field="metadata")
    return out


def is_bytes_body(body: object) -> bool:
    return isinstance(body, (bytes, bytearray, memoryview))


def check_body(body: object) -> None:
    if not is_bytes_body(body) and not isinstance(body, AsyncIterable):
        raise BadInputError("must be bytes or an async iterable of bytes", field="body")


async def iter_body(body: AsyncIterable[bytes]) -> AsyncGenerator[bytes, None]:
    """The non-empty chunks of a streamed body, each checked to be bytes-like."""
    async for chunk in body:
        if not is_bytes_body(chunk):
            raise BadInputError(f"chunks must be bytes, not {type(chunk).__name__}", field="body")
        if chunk:
            yield bytes(chunk)


class CheckedPut(NamedTuple):
    """A :class:`PutItem` after :func:`check_put_batch`: key checked, content type and metadata
    normalised."""

    key: str
    body: BatchBody
    content_type: str
    metadata: dict[str, str]


MAX_PUT_BATCH = 100_000  # items per put_batch call: the caller's batches are far smaller


def check_put_batch(items: object, concurrency: object) -> list[CheckedPut]:
    """Every item of a ``put_batch`` checked before anything is written (one BadInputError naming
    the first bad one)."""
    if not isinstance(items, (list, tuple)) or len(items) > MAX_PUT_BATCH:
        raise BadInputError(f"must be a list of at most {MAX_PUT_BATCH} PutItem", field="items")
    check_positive(concurrency, "concurrency")
    out: list[CheckedPut] = []
    for item in items:
        if not isinstance(item, PutItem):
            raise BadInputError(f"must hold PutItem, not {type(item).__name__}", field="items")
        check_key(item.key)
        if not is_bytes_body(item.body) and not callable(item.body):
            raise BadInputError("must be bytes or a callable returning bytes", field="body")
        out.append(
            CheckedPut(
                item.key,
                item.body,
                normalize_content_type(item.content_type),
                normalize_metadata(item.metadata),
            )
        )
    return out


def load_body(body: BatchBody) -> bytes:
    """The bytes of a batch body (calls a loader; blocking: run it in a worker thread)."""
    data = body() if callable(body) else body
    if not is_bytes_body(data):
        raise BadInputError(f"a body loader returned {type(data).__name__}, not bytes", field="body")
    return bytes(data)


async def put_batch_by_puts(
    put: Callable[..., Awaitable[ObjectInfo]],
    items: object,
    *,
    if_none_match: bool,
    concurrency: int,
    thread_loads: bool,
) -> list[ObjectInfo]:
    """``put_batch`` as bounded concurrent ``put`` s (memory, S3): every item checked first, each
    body loaded only when its put starts (a loader in a worker thread with ``thread_loads``)."""
    checked = check_put_batch(items, concurrency)
    results: list[ObjectInfo | None] = [None] * len(checked)

    async def one(i: int) -> None:
        item = checked[i]
        body = item.body
        if callable(body):
            data = await asyncio.to_thread(load_body, body) if thread_loads else load_body(body)
        else:
            data = bytes(body)
        results[i] = await put(
            item.key,
            data,
            if_none_match=if_none_match,
            content_type=item.content_type,
            metadata=item.metadata,
        )

    await bounded_each(range(len(checked)), concurrency, one)
    return [r for r in results if r is not None]


def prefix_successor(prefix: str) -> str | None:
    """The smallest string greater than every string starting with ``prefix`` (None: no such bound)."""
    chars = list(prefix)
    while chars:
        last = ord(chars[-1])
        if last < 0x10FFFF:
            nxt = last + 1
            if 0xD800 <= nxt <= 0xDFFF:  # skip surrogates, never part of a valid key
                nxt = 0xE000
            chars[-1] = chr(nxt)
            return "".join(chars)
        chars.pop()
    return None


class Grouper:
    """Turns an ascending stream of objects into S3-style delimited listing items.

    ``feed`` returns the item to emit (an :class:`ObjectInfo`, a :class:`CommonPrefix`) or None when
    the object is rolled up into the common prefix emitted just before.
    """

    def __init__(self, prefix: str, delimiter: str | None, start_after: str | None = None) -> None:
        if delimiter is not None and (not isinstance(delimiter, str) or not delimiter):
            raise BadInputError("must be None or a non-empty string", field="delimiter")
        self.prefix = prefix
        self.delimiter = delimiter
        self.start_after = start_after
        self.last_prefix: str | None = None

    def common_prefix_of(self, key: str) -> str | None:
        if self.delimiter is None:
            return None
        rest = key[len(self.prefix) :]
        i = rest.find(self.delimiter)
        if i < 0:
            return None
        return self.prefix + rest[: i + len(self.delimiter)]

    def feed(self, item: ObjectInfo | CommonPrefix) -> ObjectInfo | CommonPrefix | None:
        """The item to emit, or None (rolled into the previous common prefix, or a common prefix that
        does not sort after ``start_after``; :attr:`last_prefix` then names the group to skip)."""
        if isinstance(item, CommonPrefix):
            cp = item.prefix
        else:
            if self.last_prefix is not None and item.key.startswith(self.last_prefix):
                return None
            found = self.common_prefix_of(item.key)
            if found is None:
                return item
            cp = found
        if cp == self.last_prefix:
            return None
        self.last_prefix = cp
        if self.start_after is not None and cp <= self.start_after:
            return None
        return CommonPrefix(cp)

    def feed_all(self, items: Iterable[ObjectInfo | CommonPrefix]) -> Iterator[ObjectInfo | CommonPrefix]:
        for item in items:
            out = self.feed(item)
            if out is not None:
                yield out


def check_list_args(
    prefix: object, delimiter: object, start_after: object, page_size: object
) -> tuple[str, str | None, str | None, int]:
    if not isinstance(prefix, str):
        raise BadInputError("must be a str", field="prefix")
    if delimiter is not None and (not isinstance(delimiter, str) or not delimiter):
        raise BadInputError("must be None or a non-empty string", field="delimiter")
    if start_after is not None and not isinstance(start_after, str):
        raise BadInputError("must be None or a str", field="start_after")
    return prefix, delimiter, start_after or None, check_positive(page_size, "page_size")


class Rechunker:
    """Accumulates bytes and hands out pieces of exactly ``size`` bytes (the last may be shorter)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.buf = bytearray()

    def push(self, data: bytes) -> Iterator[bytes]:
        self.buf += data
        while len(self.buf) >= self.size:
            piece = bytes(self.buf[: self.size])
            del self.buf[: self.size]
            yield piece

    def flush(self) -> bytes:
        piece = bytes(self.buf)
        self.buf.clear()
        return piece


def check_list_keys_args(prefix: object, start_after: object) -> tuple[str, str | None]:
    """Checked ``list_keys`` arguments (an empty ``start_after`` is no ``start_after``)."""
    if not isinstance(prefix, str):
        raise BadInputError("must be a str", field="prefix")
    if start_after is not None and not isinstance(start_after, str):
        raise BadInputError("must be None or a str", field="start_after")
    return prefix, start_after or None


def check_delete_batch(
    keys: object, if_match: Mapping[str, str] | None, limit: int
) -> tuple[list[str], dict[str, str]]:
    """``(keys without duplicates, key -> bare ETag)`` for ``delete_batch``; at most ``limit`` keys,
    each valid, and ``if_match`` only naming keys of the batch."""
    if isinstance(keys, (str, bytes)) or not isinstance(keys, Iterable):
        raise BadInputError("must be a sequence of keys", field="keys")
    given = list(keys)
    if len(given) > limit:
        raise BadInputError(f"{len(given)} keys: at most {limit} per batch", field="keys")
    checked = list(dict.fromkeys(check_key(k, field="keys") for k in given))
    etags: dict[str, str] = {}
    if if_match:
        if not isinstance(if_match, Mapping):
            raise BadInputError("must be a mapping of key to ETag", field="if_match")
        wanted = set(checked)
        for k, v in if_match.items():
            if k not in wanted:
                raise BadInputError(f"{k!r} is not in the batch", field="if_match")
            bare = v.strip('"') if isinstance(v, str) else ""
            if not bare or not _PRINTABLE_ASCII.fullmatch(bare):
                raise BadInputError("ETags must be non-empty printable ASCII", field=f"if_match.{k}")
            etags[k] = bare
    return checked, etags
