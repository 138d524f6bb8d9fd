"""What runs inside one partition: the job's store reference, async I/O, text part files.

Partition functions are plain top-level functions taking picklable arguments (Spark ships them to
executors by reference, so executors must have the project installed: a venv archive on a cluster).

- :class:`StoreRef`: a storage namespace plus how to reach its S3 endpoint (region, endpoint URL,
  addressing style). NEVER credentials: executors take them from their own environment or role,
  through botocore's default chain. Built from job arguments, so every field is checked.
- :func:`stream_async` turns an async iterator (a block store listing) into a plain iterator with ONE
  private event loop for the whole partition; :func:`run_async` runs one coroutine the same way. Both
  work from a thread whose own loop is running (they then drive a loop in a helper thread), but a
  partition should not need that: executors run partitions off the caller's event loop.
- :func:`write_text_part`: a partition's lines streamed into ``<relative_dir>/part-NNNNN`` of the
  namespace. The name depends only on the partition index, so a retried task overwrites its own part;
  the store's put is atomic, so a reader never sees half a part. An empty partition writes an empty
  part, so a re-run never leaves a stale part of an earlier attempt beside the new ones.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterable, Iterator, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, fields
from typing import Any, Literal, NamedTuple, TypeVar, cast
from urllib.parse import urlsplit

from lakefs_core.block import BlockStore, S3Settings, open_block_store
from lakefs_core.compute.loops import new_loop, run_on_new_loop
from lakefs_core.errors import BadInputError
from lakefs_core.namespace import StorageNamespace

T = TypeVar("T")
R = TypeVar("R")

PART_DIGITS = 5
TEXT_CHUNK = 1 << 20  # bytes per streamed put chunk: bounded memory per partition
_REGION = re.compile(r"[a-z0-9][a-z0-9-]{0,62}")


@dataclass(frozen=True)
class StoreRef:
    """A namespace and the way to its store, as passed to executors (picklable, no secrets)."""

    namespace: str
    region: str | None = None
    endpoint_url: str | None = None
    addressing_style: Literal["auto", "path", "virtual"] | None = None

    def __post_init__(self) -> None:
        ns = StorageNamespace(self.namespace)  # validates and normalises; BadInputError names it
        object.__setattr__(self, "namespace", ns.uri)
        if self.region is not None and (
            not isinstance(self.region, str) or not _REGION.fullmatch(self.region)
        ):
            raise BadInputError("not a region name", field="region")
        if self.endpoint_url is not None:
            _check_endpoint(self.endpoint_url)
        if self.addressing_style not in (None, "auto", "path", "virtual"):
            raise BadInputError("must be auto, path or virtual", field="addressing_style")

    @property
    def ns(self) -> StorageNamespace:
        return StorageNamespace(self.namespace)

    def s3_settings(self) -> S3Settings:
        """Settings for the namespace's S3 store; credentials come from the environment or role."""
        return S3Settings(
            region=self.region, endpoint_url=self.endpoint_url, addressing_style=self.addressing_style
        )

    async def open(self, *, strict_names: bool = False) -> BlockStore:
        """Open the namespace's block store (the caller closes it); ``strict_names`` for an import's
        source (see :func:`~lakefs_core.block.open_block_store`)."""
        return await open_block_store(
            self.ns.store_uri, s3=self.s3_settings(), local_strict_names=strict_names
        )

    def to_json(self) -> dict[str, str]:
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}

    @classmethod
    def from_json(cls, data: object, *, field: str = "store") -> StoreRef:
        """Parse job arguments (hostile): an object with ``namespace`` and optional string fields."""
        if not isinstance(data, Mapping):
            raise BadInputError("must be an object", field=field)
        known = {f.name for f in fields(cls)}
        unknown = sorted(str(k) for k in data if k not in known)
        if unknown:
            raise BadInputError(f"unknown keys {unknown} (credentials are never job arguments)", field=field)
        for key, value in data.items():
            if not isinstance(value, str):
                raise BadInputError("must be a string", field=f"{field}.{key}")
        if "namespace" not in data:
            raise BadInputError("is required", field=f"{field}.namespace")
        style = data.get("addressing_style")  # checked by __post_init__ like every other field
        try:
            return cls(
                namespace=data["namespace"],
                region=data.get("region"),
                endpoint_url=data.get("endpoint_url"),
                addressing_style=cast('Literal["auto", "path", "virtual"] | None', style),
            )
        except BadInputError as e:
            raise BadInputError(str(e), field=field) from e


def store_ref(s3: S3Settings | None, ns: StorageNamespace) -> StoreRef:
    """How executors reach ``ns`` with a core's S3 settings ``s3``: its endpoint and region, never its
    credentials."""
    if s3 is None or ns.scheme != "s3":
        return StoreRef(ns.uri)
    return StoreRef(
        ns.uri, region=s3.region, endpoint_url=s3.endpoint_url, addressing_style=s3.addressing_style
    )


def _check_endpoint(url: object) -> None:
    if not isinstance(url, str):
        raise BadInputError("must be a string", field="endpoint_url")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise BadInputError("must be an http(s) URL", field="endpoint_url")
    if parts.username is not None or parts.password is not None or parts.query or parts.fragment:
        # Credentials in a URL would travel with the job to every executor and into logs.
        raise BadInputError("must not carry credentials, a query or a fragment", field="endpoint_url")


# -- async I/O inside a partition -----------------------------------------------------------------


def _loop_running() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def run_async(make: Callable[[], Awaitable[T]]) -> T:
    """Run ``make()`` to completion on a private event loop (one per call: call it once per partition;
    its default executor is the process's shared pool, :mod:`lakefs_core.compute.loops`)."""
    box: list[T] = []

    async def main() -> None:
        # The result is kept out of the main task: on CPython 3.11, asyncio.run in the main thread
        # ends by comparing signal.getsignal(SIGINT), which fails to turn its handler (a partial
        # holding the main task) into an enum and formats the error with repr(task), and with it
        # repr(result): a partition's bytes cost a full repr (about twice the CPU of parsing them;
        # PySpark's workers run tasks in their main thread with the default SIGINT handler).
        box.append(await make())

    if not _loop_running():
        run_on_new_loop(main())
        return box[0]
    done: Future[T] = Future()

    def target() -> None:
        try:
            run_on_new_loop(main())
            done.set_result(box[0])
        except BaseException as e:  # handed to the waiting caller, who re-raises it
            done.set_exception(e)

    worker = threading.Thread(target=target, name="lakefs-gc-run-async", daemon=True)
    worker.start()
    return done.result()


async def _next(source: AsyncIterator[T]) -> T:
    return await source.__anext__()


async def _await(awaitable: Awaitable[Any]) -> None:
    await awaitable


def stream_async(make: Callable[[], AsyncIterator[T]]) -> Iterator[T]:
    """Iterate ``make()`` on one private event loop, closed when the iteration ends or is abandoned.

    Each item costs one loop round trip, so an async source should yield batches (pages).
    """
    loop = new_loop()
    helper: threading.Thread | None = None
    if _loop_running():
        # This thread's loop is busy: drive the private loop from a helper thread instead.
        helper = threading.Thread(target=loop.run_forever, name="lakefs-gc-stream-async", daemon=True)
        helper.start()

    def step(coro: Coroutine[Any, Any, R]) -> R:
        if helper is None:
            return loop.run_until_complete(coro)
        return asyncio.run_coroutine_threadsafe(coro, loop).result()

    source = make()
    try:
        while True:
            try:
                item = step(_next(source))
            except StopAsyncIteration:
                return
            yield item
    finally:
        aclose = getattr(source, "aclose", None)
        try:
            if aclose is not None:
                step(_await(aclose()))
            step(loop.shutdown_asyncgens())
        finally:
            if helper is not None:
                loop.call_soon_threadsafe(loop.stop)
                helper.join()
            loop.close()


# -- text parts ---------------------------------------------------------------------------------------


def part_name(index: int) -> str:
    """``part-00000``: the file a partition writes (Spark's own naming, sortable)."""
    if not isinstance(index, int) or index < 0:
        raise BadInputError("must be an int >= 0", field="partition")
    return f"part-{index:0{PART_DIGITS}d}"


def _check_relative_dir(relative_dir: str) -> str:
    if not isinstance(relative_dir, str) or not relative_dir.strip("/"):
        raise BadInputError("must be a non-empty relative path", field="relative_dir")
    return relative_dir.strip("/")


class _LineCounter:
    """Encodes lines into ~1 MiB chunks, counting them; a line may not contain a line break."""

    def __init__(self, lines: Iterable[str]) -> None:
        self._lines = lines
        self.count = 0

    async def chunks(self) -> AsyncIterator[bytes]:
        buf: list[bytes] = []
        size = 0
        for line in self._lines:
            if not isinstance(line, str) or "\n" in line or "\r" in line:
                raise BadInputError(f"{line!r} is not a single line of text", field="line")
            data = line.encode()
            buf.append(data)
            size += len(data) + 1
            self.count += 1
            if size >= TEXT_CHUNK:
                yield b"\n".join(buf) + b"\n"
                buf, size = [], 0
        if buf:
            yield b"\n".join(buf) + b"\n"


def write_text_part(target: StoreRef, relative_dir: str, index: int, lines: Iterable[str]) -> int:
    """Stream ``lines`` into ``<relative_dir>/part-<index>`` of ``target``'s namespace (overwriting
    it: the write is idempotent per partition). Returns the number of lines written."""
    key = target.ns.key(f"{_check_relative_dir(relative_dir)}/{part_name(index)}")
    counter = _LineCounter(lines)

    async def write() -> int:
        store = await target.open()
        try:
            await store.put(key, counter.chunks(), content_type="text/plain; charset=utf-8")
        finally:
            await store.close()
        return counter.count

    return run_async(write)


class WrittenPart(NamedTuple):
    """What :func:`write_text_part_digested` wrote: lines, bytes and the SHA-256 of those bytes."""

    lines: int
    size: int
    sha256: str


def write_text_part_digested(
    target: StoreRef, relative_dir: str, index: int, lines: Iterable[str]
) -> WrittenPart:
    """:func:`write_text_part` that also digests the bytes as they are written (SHA-256, streamed:
    no second read), so a caller can bind the part to a record it keeps elsewhere."""
    key = target.ns.key(f"{_check_relative_dir(relative_dir)}/{part_name(index)}")
    counter = _LineCounter(lines)
    digest = hashlib.sha256()
    size = 0

    async def digested() -> AsyncIterator[bytes]:
        nonlocal size
        async for chunk in counter.chunks():
            digest.update(chunk)
            size += len(chunk)
            yield chunk

    async def write() -> None:
        store = await target.open()
        try:
            await store.put(key, digested(), content_type="text/plain; charset=utf-8")
        finally:
            await store.close()

    run_async(write)
    return WrittenPart(counter.count, size, digest.hexdigest())


def write_text_part_digested_indexed(
    target: StoreRef, relative_dir: str, index: int, lines: Iterator[str]
) -> Iterator[tuple[int, WrittenPart]]:
    """:func:`write_text_part_digested` shaped for ``mapPartitionsWithIndex``."""
    yield index, write_text_part_digested(target, relative_dir, index, lines)


def write_text_part_indexed(
    target: StoreRef, relative_dir: str, index: int, lines: Iterator[str]
) -> Iterator[int]:
    """:func:`write_text_part` shaped for ``mapPartitionsWithIndex``: yields the line count."""
    yield write_text_part(target, relative_dir, index, lines)
