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
  segments, a leading ``/``) are refused before anything is written. DEST is resolved once (a link
  given as DEST is followed, as ``cp`` would); below it every directory is made and every file
  written through directory descriptors, and a symbolic link at any component below DEST (made by
  anyone, before or during the download) is refused with one line naming it (:class:`DestTree`):
  the keys of a repository never lead a download outside DEST.
"""

from __future__ import annotations

import asyncio
import base64
import codecs
import contextlib
import errno
import functools
import json
import os
import sys
import uuid
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from pathlib import Path
from stat import S_ISDIR, S_ISLNK, S_ISREG
from typing import IO, TYPE_CHECKING, Any, TypeVar

from lakefs_core.aio import bounded_each
from lakefs_core.cli.context import Session, local_path_error
from lakefs_core.errors import BadInputError, LakeFSError, NotFoundError, PurgedError
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
    return [(st, dest.joinpath(*parts)) for st, parts in _below(stats, prefix, dest, recursive, into)]


def _below(
    stats: Sequence[ObjectStat], prefix: str, dest: Path, recursive: bool, into: bool
) -> list[tuple[ObjectStat, tuple[str, ...]]]:
    """Each object's path segments below ``dest`` (none: ``dest`` itself is the file)."""
    if not recursive:
        (stat,) = stats
        base = safe_relative(stat.path.rsplit("/", 1)[-1], stat.path)
        return [(stat, base.parts if into or dest.is_dir() else ())]
    return [(st, safe_relative(st.path[len(prefix) :], st.path).parts) for st in stats]


class DestTree:
    """Where a download writes: DEST, resolved ONCE (a link the user gave as DEST is followed, as
    ``cp`` would), and below it every directory made and every file written through directory
    descriptors (:mod:`~lakefs_core.block.local_beneath`): a symbolic link at any component below
    DEST, a pre-existing one included, is refused with one line naming it, never followed."""

    def __init__(self, dest: Path, shown: Path | None = None) -> None:
        from lakefs_core.block.local_beneath import Root

        self.shown = dest if shown is None else shown  # as the user wrote it, for messages
        self.root = Root(os.fspath(dest))

    def open_parent(self, parts: Sequence[str]) -> int:
        """A descriptor of the directory of ``DEST/<parts>`` (made, with DEST, when missing)."""
        from lakefs_core.block.local_beneath import open_dir

        try:
            root = self.root.open(create=True)
        except OSError as e:
            raise local_path_error(e, self.shown, "DEST", doing="create") from e
        try:
            return open_dir(root, parts[:-1], create=True)
        except OSError as e:
            raise self.error(e, root, parts[:-1], doing="create") from e
        finally:
            os.close(root)

    def error(self, e: OSError, root: int, parts: Sequence[str], *, doing: str) -> LakeFSError:
        """The one-line error for ``e`` met on ``DEST/<parts>`` (``root``: DEST's descriptor, or
        -1); a refused link is named."""
        if e.errno != errno.ELOOP:
            return local_path_error(e, self.shown.joinpath(*parts), "DEST", doing=doing)
        return self.refused(parts[: _first_link(root, parts) + 1])

    def refused(self, parts: Sequence[str]) -> BadInputError:
        link = self.shown.joinpath(*parts)
        return BadInputError(
            f"{link} is a symbolic link inside the destination: download never writes through one",
            field="DEST",
        )


def _first_link(root: int, parts: Sequence[str]) -> int:
    """The index of the first of ``parts`` (below the directory ``root``) that is a link now (for
    the message only); the last one when none is found."""
    for n in range(len(parts) if root >= 0 else 0):
        try:
            if S_ISLNK(os.stat("/".join(parts[: n + 1]), dir_fd=root, follow_symlinks=False).st_mode):
                return n
        except OSError:
            break
    return len(parts) - 1


async def download_one(
    s: Session,
    repo: str,
    stat: ObjectStat,
    target: tuple[DestTree, tuple[str, ...]],
    on_chunk: Callable[[int], object],
) -> None:
    """Stream one object to ``DEST/<parts>`` (``target``) through a temporary file beside it,
    renamed into place when complete, all through the descriptor of its directory; an existing
    FIFO, device or socket there is written in place instead, as ``cat >`` would (a rename would
    replace the device itself with a regular file). No parts: DEST is the file, the user's own
    path (:func:`_download_to_path`)."""
    tree, parts = target
    if not parts:
        await _download_to_path(s, repo, stat, tree.shown, on_chunk)
        return
    shown = tree.shown.joinpath(*parts)
    directory = await asyncio.to_thread(tree.open_parent, parts)
    name = parts[-1]
    temp: str | None = None
    try:
        there = await asyncio.to_thread(_lstat, directory, name, shown)
        if there is not None and S_ISLNK(there.st_mode):
            raise tree.refused(parts)
        if there is not None and not (S_ISREG(there.st_mode) or S_ISDIR(there.st_mode)):
            in_place = os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC
            opener = functools.partial(os.open, name, in_place, dir_fd=directory)
            await _stream_into(s, repo, stat, opener=opener, target=shown, on_chunk=on_chunk)
            return
        # Not derived from the target's name: a name near the 255-byte limit must still fit.
        temp = temp_name = f".lakefs-download-{uuid.uuid4().hex}"
        create = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        opener = functools.partial(os.open, temp_name, create, 0o666, dir_fd=directory)
        await _stream_into(s, repo, stat, opener=opener, target=shown, on_chunk=on_chunk)
        try:
            await asyncio.to_thread(_rename_into, directory, temp_name, name)
        except OSError as e:
            raise tree.error(e, -1, parts, doing="write") from e
        temp = None
    finally:
        await asyncio.to_thread(_cleanup, directory, temp)


def _lstat(directory: int, name: str, shown: Path) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=directory, follow_symlinks=False)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise local_path_error(e, shown, "DEST", doing="write") from e


def _rename_into(directory: int, temp: str, name: str) -> None:
    """Rename ``temp`` to ``name`` in ``directory``, unless a link appeared at ``name`` meanwhile
    (the rename would replace the link, not follow it; refused all the same)."""
    with contextlib.suppress(FileNotFoundError):
        if S_ISLNK(os.stat(name, dir_fd=directory, follow_symlinks=False).st_mode):
            raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), name)
    os.replace(temp, name, src_dir_fd=directory, dst_dir_fd=directory)


def _cleanup(directory: int, temp: str | None) -> None:
    try:
        if temp is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temp, dir_fd=directory)
    finally:
        os.close(directory)


async def _download_to_path(
    s: Session, repo: str, stat: ObjectStat, target: Path, on_chunk: Callable[[int], object]
) -> None:
    """One object to the file the user named as DEST: a special file there (``/dev/null``, a FIFO,
    through a link too) is written in place; otherwise the object goes to the file's real path
    (a link the user named is followed, as ``cp`` would), through a temporary file beside it."""
    if await asyncio.to_thread(_special_file, target):
        opener = functools.partial(os.open, target, os.O_WRONLY | os.O_CLOEXEC)
        await _stream_into(s, repo, stat, opener=opener, target=target, on_chunk=on_chunk)
        return
    real = Path(await asyncio.to_thread(os.path.realpath, target))
    tree = await asyncio.to_thread(DestTree, real.parent, target.parent)
    await download_one(s, repo, stat, (tree, (real.name,)), on_chunk)


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
    *,
    opener: Callable[[], int],
    target: Path,
    on_chunk: Callable[[int], object],
) -> None:
    """Open a descriptor with ``opener`` (in a thread: a FIFO waits there for its reader), write
    the object's bytes into it and close it; a failure names ``target``."""
    try:
        fd = await asyncio.to_thread(opener)
    except OSError as e:
        raise local_path_error(e, target, "DEST", doing="write") from e
    try:
        with os.fdopen(fd, "wb") as f:
            async for chunk in s.objects.read_stat(repo, stat, start=0):
                await asyncio.to_thread(f.write, chunk)
                on_chunk(len(chunk))
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
    skip_purged: bool = False,
) -> tuple[list[tuple[ObjectStat, Path]], list[ObjectStat]]:
    """Download ``src``; returns what was written where, and (``skip_purged``) the objects skipped
    because an audited purge destroyed them. Without ``skip_purged`` a purged object stops the
    download with :class:`PurgedError` (exit 17); a purged object's read fails before any of its
    bytes is written, so a skipped one leaves no file behind."""
    prefix, stats = await list_for_download(s, src, recursive)
    _widen_thread_pool(parallelism)
    below = _below(stats, prefix, dest, recursive, into)
    tree = await asyncio.to_thread(DestTree, dest)  # resolved once, before the first file
    total = sum(st.size for st in stats)
    bar = progress_bar(total, len(below), f"download {len(below)} objects", no_progress)
    done = 0

    skipped: list[ObjectStat] = []

    async def one(item: tuple[ObjectStat, tuple[str, ...]]) -> None:
        nonlocal done
        try:
            await download_one(s, src.repo, item[0], (tree, item[1]), bar.update)
        except PurgedError:
            if not skip_purged:
                raise
            skipped.append(item[0])
        done += 1
        bar.set_postfix_str(f"{done}/{len(below)} files", refresh=False)

    try:
        await bounded_each(below, parallelism, one)
    finally:
        bar.close()
    gone = {id(st) for st in skipped}
    written = [(st, dest.joinpath(*parts)) for st, parts in below if id(st) not in gone]
    return written, sorted(skipped, key=lambda st: st.path)
