"""Bulk and streaming transfers of ``lakefs-core fs``: ``upload --recursive``, ``cat``, ``download``.

- ``upload --recursive`` walks the tree, then uploads it in batches of at most ``BATCH_FILES``
  files (and about ``BATCH_BYTES``; the first one ``FIRST_BATCH_FILES``, so that writing starts
  soon): per batch, one repository and branch read, the PUTs ``upload_concurrency`` at a time and
  every entry staged in one KV batch
  (:meth:`~lakefs_core.repos.objects.Objects.upload_many`), ``UPLOAD_IN_FLIGHT`` batches at a
  time, writing their objects one batch after the other (one write gate): the threads write one
  batch while the event loop records the next batch's journal intents and stages the previous
  batch's entries. After a failing batch no
  new one starts, one already in flight runs to its end, and the error says how many objects were
  staged. Files above ``STREAM_THRESHOLD`` are streamed (multipart on S3); smaller
  ones are read whole in the store's worker threads when written, in batches
  (``BlockStore.put_batch``: one thread hop per few dozen files and one filesystem sync per window
  on a local namespace); memory is bounded by ``upload_concurrency`` bodies. The progress bar
  (stderr, only on a terminal) counts bytes and files.
- ``cat`` streams the object to stdout. With ``--json`` it is read twice from its pinned address
  (once to learn whether it is UTF-8, once to write the JSON string piece by piece), so memory stays
  constant for any size; the document is byte-identical to ``json.dumps(doc, sort_keys=True)``.
- ``download`` (lakectl's shape) writes an object, or with ``--recursive`` every object under a
  prefix, to local files: each streamed to a temporary file beside its destination and renamed into
  place when complete. Keys that would leave the destination directory (``..``, empty or ``.``
  segments, a leading ``/``) are refused before anything is written.
"""

from __future__ import annotations

import asyncio
import base64
import codecs
import contextlib
import functools
import json
import os
import sys
import uuid
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from pathlib import Path
from stat import S_ISDIR, S_ISREG
from typing import IO, TYPE_CHECKING, Any, TypeVar

from lakefs_core.aio import bounded_each
from lakefs_core.cli.context import Session, local_path_error
from lakefs_core.errors import BadInputError, LakeFSError, NotFoundError
from lakefs_core.repos.uri import LakeFSURI

if TYPE_CHECKING:
    from tqdm import tqdm

    from lakefs_core.block.base import ObjectInfo
    from lakefs_core.repos.objects import ObjectStat, UploadItem

T = TypeVar("T")

STREAM_THRESHOLD = 8 << 20  # bigger files are streamed to the store
# Streamed bodies are read this much at a time: a few chunks are alive at once (read, hashed,
# written in worker threads, each of which may keep a malloc arena), so 8 MiB chunks cost ~60 MB of
# peak RSS where 1 MiB ones cost ~10. S3's multipart upload gathers them into parts itself.
READ_CHUNK = 1 << 20
BATCH_FILES = 1000  # objects staged per KV batch by upload --recursive
# The first batch is small: no object is written before its batch's journal intents are recorded,
# and the writer threads idle until then.
FIRST_BATCH_FILES = 100
BATCH_BYTES = 256 << 20  # a batch closes early once its files add up to this
# Batches of upload --recursive in flight. Their PUTs pass one write gate, a batch at a time, so
# the writer threads never wait for the KV: while they write batch N, the loop stages batch N-1
# and records batch N+1's intents. Three, so that N+1 is waiting at the gate when N is written
# (with two, batch N+1 started only once N-1 was staged). Without the gate, two batches in flight
# wrote at the same time, split the threads and then both staged while no file was written: a
# 5,000-file upload on PostgreSQL + local took 10-17% longer (bench/RESULTS.md, stop 31).
UPLOAD_IN_FLIGHT = 3
PRESTART_TIMEOUT_S = 5.0  # the most the writer threads' start may take (see _widen_thread_pool)


def _open_regular(path: Path) -> IO[bytes]:
    """``path`` opened for reading if it is still a regular file (a FIFO swapped in since a walk
    listed the file must not block, a device swapped in must not stream forever)."""
    from lakefs_core.block.base import open_regular

    fd = open_regular(path)
    try:
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _open_any(path: Path) -> IO[bytes]:
    return path.open("rb")


async def file_chunks(
    path: Path, size: int = READ_CHUNK, *, regular_only: bool = False
) -> AsyncIterator[bytes]:
    """The file's bytes, chunk by chunk; a failing open or read is a one-line error naming it.
    ``regular_only``: refuse what is not a regular file when opened (files listed by a walk; a
    single ``--source`` may be a FIFO on purpose, ``<(command)``)."""
    try:
        f = await asyncio.to_thread(_open_regular if regular_only else _open_any, path)
    except OSError as e:
        raise local_path_error(e, path, "--source") from e
    try:
        async for chunk in stream_chunks(f, path, size):
            yield chunk
    finally:
        f.close()


async def stream_chunks(f: IO[bytes], name: Path, size: int = READ_CHUNK) -> AsyncIterator[bytes]:
    """What the open binary stream ``f`` yields (stdin, a file), ``size`` bytes at a time, read in a
    thread: memory stays at one chunk whatever the stream's length. Errors name ``name``."""
    while True:
        try:
            chunk = await asyncio.to_thread(f.read, size)
        except OSError as e:
            raise local_path_error(e, name, "--source") from e
        if not chunk:
            return
        yield chunk


class NoProgress:
    """The bar when none is shown (``--no-progress``, or stderr is not a terminal): importing tqdm
    costs a command ~20 ms of start-up, and a disabled tqdm bar still ran for every file."""

    def update(self, n: float | None = 1) -> bool | None:
        return None

    def set_postfix_str(self, s: str = "", refresh: bool | None = True) -> None:
        return None

    def close(self) -> None:
        return None


def progress_bar(total: int, files: int, desc: str, disabled: bool) -> tqdm[Any] | NoProgress:
    if disabled or not sys.stderr.isatty():
        return NoProgress()
    from tqdm import tqdm

    bar: tqdm[Any] = tqdm(
        total=total,
        unit="B",
        unit_scale=True,
        unit_divisor=1000,  # SI units, as the summary line (human_bytes, lakectl's go-humanize)
        desc=desc,
        file=sys.stderr,
        leave=False,
    )
    bar.set_postfix_str(f"0/{files} files", refresh=False)
    return bar


def _widen_thread_pool(concurrency: int) -> None:
    """Give the loop's default executor a thread per concurrent transfer: local reads, writes and
    fsyncs run in it (``asyncio.to_thread``), and its default size (CPUs + 4) would cap them.

    Its threads are started here, before any is busy. A pool starts a thread when a task finds none
    idle, and ``Thread.start`` waits until the new thread holds the GIL once: with writer threads
    and the loop already competing for it, each start kept the loop waiting up to a switch
    interval (5 ms), 20-55 ms per 5,000-file upload. Here they cost about 0.1 ms each."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    workers = concurrency + 4
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="lakefs-io")
    asyncio.get_running_loop().set_default_executor(pool)
    # Each task holds its thread until all have started, so every submit starts a new one.
    started = threading.Barrier(workers + 1)
    for _ in range(workers):
        pool.submit(started.wait, PRESTART_TIMEOUT_S)
    with contextlib.suppress(threading.BrokenBarrierError):  # slow to start: they start on demand
        started.wait(PRESTART_TIMEOUT_S)


# -- upload --recursive ------------------------------------------------------------------------------


def batches(files: Sequence[tuple[str, str, int]]) -> list[list[tuple[str, str, int]]]:
    out: list[list[tuple[str, str, int]]] = []
    current: list[tuple[str, str, int]] = []
    size = 0
    limit = min(FIRST_BATCH_FILES, BATCH_FILES)
    for item in files:
        if current and (len(current) >= limit or size + item[2] > BATCH_BYTES):
            out.append(current)
            current, size, limit = [], 0, BATCH_FILES
        current.append(item)
        size += item[2]
    if current:
        out.append(current)
    return out


def _upload_items(
    batch: Sequence[tuple[str, str, int]], prefix: str, content_type: str | None
) -> list[UploadItem]:
    """The items of one batch of ``(local path, relative path, size)``."""
    from lakefs_core.block.base import SourceFile
    from lakefs_core.repos.objects import BlockingBody, UploadItem

    items: list[UploadItem] = []
    for local, rel, size in batch:
        key = object_key(prefix, rel)
        if size <= STREAM_THRESHOLD:
            # read in the store's worker thread when the object is written (or copied there in C)
            describe = functools.partial(local_path_error, path=local, field="--source")
            items.append(UploadItem(key, BlockingBody(SourceFile(local, size, describe)), content_type))
        else:
            items.append(UploadItem(key, _streamed(Path(local)), content_type))
    return items


def _streamed(local: Path) -> Callable[[], Awaitable[AsyncIterator[bytes]]]:
    async def streamed() -> AsyncIterator[bytes]:
        return file_chunks(local, regular_only=True)

    return streamed


async def upload_tree(
    s: Session,
    dest: LakeFSURI,
    files: Sequence[tuple[str, str, int]],
    content_type: str | None,
    no_progress: bool,
) -> list[ObjectStat]:
    """Upload ``files`` (``(local, relative path, size)``) below ``dest`` batch by batch."""
    _widen_thread_pool(s.config.upload_concurrency)
    total = sum(size for _, _, size in files)
    bar = progress_bar(total, len(files), f"upload {len(files)} objects", no_progress)
    done = 0

    def stored(_item: UploadItem, info: ObjectInfo) -> None:
        nonlocal done
        done += 1
        bar.set_postfix_str(f"{done}/{len(files)} files", refresh=False)
        bar.update(info.size)

    gate = asyncio.Lock()  # one batch's PUTs at a time: see Objects.upload_many

    async def upload(batch: list[tuple[str, str, int]]) -> list[ObjectStat]:
        return await s.objects.upload_many(
            dest.repo,
            dest.ref,
            _upload_items(batch, dest.path, content_type),
            concurrency=s.config.upload_concurrency,
            on_stored=None if isinstance(bar, NoProgress) else stored,
            write_gate=gate,
        )

    try:
        results, failure = await _overlapped(
            (functools.partial(upload, batch) for batch in batches(files)), UPLOAD_IN_FLIGHT
        )
    finally:
        bar.close()
    if failure is not None:
        if not results:
            raise failure
        staged = f"{len(results)} of {len(files)} objects were staged before it"
        raise failure.with_note(f"{staged}; uploading again overwrites them") from failure
    return results


async def _overlapped(
    jobs: Iterable[Callable[[], Awaitable[list[T]]]], in_flight: int
) -> tuple[list[T], LakeFSError | None]:
    """Run ``jobs`` ``in_flight`` at a time, their results concatenated in the jobs' order, until
    one fails with a :class:`LakeFSError`: no job starts after that, those already running run to
    their end (their outcome is then known), and the first failure is returned with the results of
    every job that succeeded. Anything else (a bug, a cancellation) cancels the running jobs."""
    results: list[T] = []
    failure: LakeFSError | None = None
    pending: deque[asyncio.Task[list[T]]] = deque()

    async def collect() -> None:
        nonlocal failure
        try:
            results.extend(await pending.popleft())
        except LakeFSError as e:
            failure = failure or e

    try:
        for job in jobs:
            if failure is not None or any(t.done() and not t.cancelled() and t.exception() for t in pending):
                break
            pending.append(asyncio.ensure_future(job()))
            if len(pending) >= in_flight:
                await collect()
        while pending:
            await collect()
    finally:
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
    return results, failure


def object_key(prefix: str, rel: str) -> str:
    """The object path of the file at ``rel`` (relative to the uploaded tree) under ``prefix``."""
    base = prefix.rstrip("/")
    return f"{base}/{rel}" if base else rel


# -- cat ---------------------------------------------------------------------------------------------


async def cat_json(s: Session, path: LakeFSURI, out: IO[bytes]) -> None:
    """``fs cat --json``: one JSON document, written piece by piece (see the module docstring)."""
    stat = await s.objects.stat(path.repo, path.ref, path.path)
    decoder = codecs.getincrementaldecoder("utf-8")()
    utf8, size = True, 0
    async for chunk in s.objects.read_stat(path.repo, stat):
        size += len(chunk)
        if utf8:
            try:
                decoder.decode(chunk)
            except UnicodeDecodeError:
                utf8 = False
    if utf8:
        try:
            decoder.decode(b"", final=True)
        except UnicodeDecodeError:
            utf8 = False
    out.write(b'{"content": "')
    if utf8:
        decoder = codecs.getincrementaldecoder("utf-8")()
        async for chunk in s.objects.read_stat(path.repo, stat):
            out.write(json.dumps(decoder.decode(chunk))[1:-1].encode())
    else:
        rest = b""
        async for chunk in s.objects.read_stat(path.repo, stat):
            data = rest + chunk
            cut = len(data) - len(data) % 3  # base64 pieces concatenate when cut at 3-byte bounds
            out.write(base64.b64encode(data[:cut]))
            rest = data[cut:]
        out.write(base64.b64encode(rest))
    tail = {"encoding": "utf-8" if utf8 else "base64", "path": path.path, "size_bytes": size}
    out.write(b'", ' + json.dumps(tail, sort_keys=True)[1:].encode() + b"\n")


# -- download ----------------------------------------------------------------------------------------


def safe_relative(rel: str, key: str) -> Path:
    """``rel`` as a relative local path, refusing anything that could leave the destination."""
    parts = rel.split("/")
    if "\0" in rel:
        raise BadInputError(f"object key {key!r} cannot be a local path (it holds a NUL)")
    if not rel or rel.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise BadInputError(f"object key {key!r} cannot be a local path (empty, '.' or '..' segment)")
    if os.sep != "/" and any(os.sep in p for p in parts):  # pragma: no cover - Windows only
        raise BadInputError(f"object key {key!r} cannot be a local path")
    return Path(*parts)


def download_plan(
    stats: Sequence[ObjectStat], prefix: str, dest: Path, recursive: bool, *, into: bool = False
) -> list[tuple[ObjectStat, Path]]:
    """Where each object goes: below ``dest`` by its key after ``prefix`` (recursive), else
    ``dest`` itself, or ``dest/<base name>`` when ``dest`` is a directory or ``into`` (the user
    wrote it with a trailing ``/``: a directory, created if missing)."""
    if not recursive:
        (stat,) = stats
        base = safe_relative(stat.path.rsplit("/", 1)[-1], stat.path)
        return [(stat, dest / base if into or dest.is_dir() else dest)]
    return [(st, dest / safe_relative(st.path[len(prefix) :], st.path)) for st in stats]


async def download_one(
    s: Session, repo: str, stat: ObjectStat, target: Path, on_chunk: Callable[[int], object]
) -> None:
    """Stream one object to ``target`` through a temporary file renamed into place when complete;
    an existing device, FIFO or socket (``/dev/null``) is written in place instead, as ``cat >``
    would: a rename would replace the device itself with a regular file."""
    if await asyncio.to_thread(_special_file, target):
        await _stream_into(s, repo, stat, target, mode="wb", target=target, on_chunk=on_chunk)
        return
    try:
        await asyncio.to_thread(target.parent.mkdir, parents=True, exist_ok=True)
    except OSError as e:
        raise local_path_error(e, target.parent, "DEST", doing="create") from e
    # Not derived from the target's name: a name near the 255-byte limit must still fit.
    temp = target.parent / f".lakefs-download-{uuid.uuid4().hex}"
    try:
        await _stream_into(s, repo, stat, temp, mode="xb", target=target, on_chunk=on_chunk)
        try:
            await asyncio.to_thread(os.replace, temp, target)
        except OSError as e:
            raise local_path_error(e, target, "DEST", doing="write") from e
    finally:
        if temp.exists():
            temp.unlink()


def _special_file(path: Path) -> bool:
    """Whether ``path`` exists (following symlinks) as neither a regular file nor a directory."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return not (S_ISREG(mode) or S_ISDIR(mode))


async def _stream_into(
    s: Session,
    repo: str,
    stat: ObjectStat,
    path: Path,
    *,
    mode: str,
    target: Path,
    on_chunk: Callable[[int], object],
) -> None:
    """Open ``path`` with ``mode`` (in a thread: a FIFO waits there for its reader), write the
    object's bytes into it and close it; a failure names ``target``."""
    try:
        f = await asyncio.to_thread(path.open, mode)
    except OSError as e:
        raise local_path_error(e, target, "DEST", doing="write") from e
    try:
        try:
            async for chunk in s.objects.read_stat(repo, stat, start=0):
                await asyncio.to_thread(f.write, chunk)
                on_chunk(len(chunk))
        finally:
            f.close()
    except OSError as e:
        raise local_path_error(e, target, "DEST", doing="write") from e


async def list_for_download(s: Session, src: LakeFSURI, recursive: bool) -> tuple[str, list[ObjectStat]]:
    if not recursive:
        if not src.path or src.path.endswith("/"):
            raise BadInputError("needs an object path (use --recursive for a prefix)", field="PATH")
        return "", [await s.objects.stat(src.repo, src.ref, src.path)]
    prefix = src.path if not src.path or src.path.endswith("/") else src.path + "/"
    stats: list[ObjectStat] = []
    after = ""
    while True:
        page = await s.objects.list(src.repo, src.ref, prefix=prefix, after=after, amount=1000)
        stats += page.objects
        if not page.has_more:
            break
        after = page.next_after
    if not stats:
        raise NotFoundError(f"no objects under {src.with_path(prefix)}")
    return prefix, stats


async def download(
    s: Session,
    src: LakeFSURI,
    dest: Path,
    *,
    recursive: bool,
    parallelism: int,
    no_progress: bool,
    into: bool = False,
) -> list[tuple[ObjectStat, Path]]:
    prefix, stats = await list_for_download(s, src, recursive)
    _widen_thread_pool(parallelism)
    plan = download_plan(stats, prefix, dest, recursive, into=into)
    total = sum(st.size for st in stats)
    bar = progress_bar(total, len(plan), f"download {len(plan)} objects", no_progress)
    done = 0

    async def one(item: tuple[ObjectStat, Path]) -> None:
        nonlocal done
        await download_one(s, src.repo, item[0], item[1], bar.update)
        done += 1
        bar.set_postfix_str(f"{done}/{len(plan)} files", refresh=False)

    try:
        await bounded_each(plan, parallelism, one)
    finally:
        bar.close()
    return plan
