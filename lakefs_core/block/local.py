"""Local-filesystem :class:`~lakefs_core.block.base.BlockStore` (``local:///abs/root``).

Layout: the object ``a/b/c`` is the plain file ``<root>/a/b/c`` (the layout lakeFS's local adapter
uses, readable by any tool). Because of that a key and a longer key below it (``a`` and ``a/b``) cannot
both exist: the second put raises :class:`~lakefs_core.errors.ConflictError`. lakeFS never writes such
pairs (``data/<slice>/<id>``, ``_lakefs/<id>``).

Keys are validated: no empty segment (no leading, trailing or double ``/``), no ``.``/``..`` segment,
no NUL, at most 255 bytes per segment; the first segment may not be ``.lakefs-meta`` and no segment
may start with ``.lakefs-tmp-`` (both reserved, see below). Bad keys raise
:class:`~lakefs_core.errors.BadInputError`.

Writes are atomic: the body goes to a temporary file ``.lakefs-tmp-<random>`` in the target's
directory, is fsynced, and is then moved into place with ``os.replace`` (overwrite) or ``os.link``
(create-only: the link fails atomically when the target exists, giving
:class:`~lakefs_core.errors.PreconditionFailedError`; this needs a filesystem with hard links).
Readers see the old object or the new one, never a partial file. Every write gets a new inode; files
are never modified in place, so an open ``stream`` keeps reading the version it opened.

Metadata sidecar: ``<root>/.lakefs-meta/<key>`` (JSON) holds the ETag (hex MD5 of the content, like S3
single-part uploads), the content type and the user metadata, plus the data file's inode, size and
mtime. A sidecar whose inode/size/mtime do not match the data file is stale (the file was replaced by
another tool) and is ignored: the ETag is then recomputed from the content (cached per
inode/size/mtime) and the content type is the default. Sidecars and temporary files are never listed.
A "bare" object, at most :data:`BARE_MAX_BYTES` with the default content type and no user metadata
(what ``fs upload`` of small files writes), gets no sidecar: a missing sidecar already means exactly
that, and its ETag is recomputed when asked (reading 16 KiB costs about what reading a sidecar
does). Writing one is then 4 file operations fewer: about half the cost of a small put.
A sidecar is chosen over extended attributes because it works on every filesystem (tmpfs, NFS,
overlay, macOS) and survives plain ``cp -r`` of the tree along with the data.

Empty directories left by ``delete`` are removed up to the root (S3 has no empty "directories"); a
listing never reports a directory without objects as a common prefix. A file name that is not UTF-8
cannot be a key: ``list`` skips it, or, for a store opened with ``strict_names`` (an import's
source, where a skipped file would be a missing entry), refuses it with :class:`BadInputError`
naming it. A symbolic link is no file of the tree (to a file or a directory, dangling or not):
every listing skips it.

Symbolic links are never followed (anyone with write access to the tree can plant one): every file
operation, write, delete or read, is made through directory descriptors opened below the root
without following a link at any component (:mod:`~lakefs_core.block.local_beneath`: ``openat2``
with ``RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS``, else ``O_NOFOLLOW`` per component), files as
entries of those directories (``openat``, ``linkat``, ``renameat``, ``unlinkat``). A key whose path
crosses a link, or whose own name is one, is refused with :class:`BadInputError` naming the key
(``delete_batch``: the final failure ``SymlinkRefused``; nothing is deleted, nothing outside the
root is touched). A link in the metadata tree makes the sidecar behind it unreadable (the object
reads as having none) and refuses a write that needs it. The root is resolved once, when the store
is made (:attr:`real_root`), and opened by that path, refusing links, for every operation: a root
later replaced by a link is refused.

A full filesystem (ENOSPC, EDQUOT) raises :class:`~lakefs_core.errors.StorageFullError`, which is not
retryable; other unexpected ``OSError`` s are transient (see ``local_files.map_oserror``).

Leftover temporary files of writers that died (``kill -9``) are removed by a later process writing
to the root: its first ``put`` starts one background sweep (in a worker thread, once per root per
process, bounded, skipped while a completed sweep's stamp is younger than ``tmp_grace_seconds``) of
the ``.lakefs-tmp-*`` files older than ``tmp_grace_seconds`` (default one hour) whose writer is not a
live process of this host; see :mod:`~lakefs_core.block.local_leftovers`.

``list_keys`` and ``delete_batch`` (bulk scans and deletes for GC) are in
:mod:`~lakefs_core.block.local_keys`: one ``scandir`` plus one ``fstatat`` per listed object, one
``fstatat`` and one ``unlinkat`` per deleted key in a directory opened once per batch (plus the
sidecar's, where the key's sidecar directory exists), emptied directories pruned once per batch.

All blocking file I/O runs in worker threads (:mod:`~lakefs_core.block.local_threads`), streamed
bodies chunk by chunk, the write of one chunk overlapping the receipt of the next. The one exception
never blocks: a ``get`` of at most :data:`CACHED_READ_BYTES` first tries to read on
the caller's thread with calls that refuse rather than wait for the disk (``openat2`` with
``RESOLVE_CACHED``, ``preadv`` with ``RWF_NOWAIT``), and reads in a thread when they refuse. Multipart
uploads (:class:`~lakefs_core.block.base.MultipartStore`) are :mod:`~lakefs_core.block.local_multipart`'s.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import os
import stat
import threading
from collections.abc import AsyncGenerator, AsyncIterable, AsyncIterator, Mapping, Sequence
from itertools import islice
from pathlib import Path
from types import TracebackType
from typing import Any

from lakefs_core.aio import bounded_each
from lakefs_core.block._common import (
    DEFAULT_CONTENT_TYPE,
    CheckedPut,
    Grouper,
    check_body,
    check_delete_batch,
    check_key,
    check_list_args,
    check_list_keys_args,
    check_positive,
    check_put_batch,
    check_range,
    closed_error,
    load_body,
    normalize_content_type,
    normalize_metadata,
    slice_range,
)
from lakefs_core.block.base import (
    MAX_DELETE_BATCH,
    Body,
    CommonPrefix,
    DeleteResult,
    KeyInfo,
    ObjectInfo,
    OpenUpload,
    PutItem,
    StoredPart,
)
from lakefs_core.block.local_batch import LOCALPUT, eligible, keep_for_sync, put_compiled
from lakefs_core.block.local_beneath import Dirs, Root, lstat_in, open_file, open_file_cached, symlink_error
from lakefs_core.block.local_files import (
    IO_CHUNK,
    META_DIR,
    NAME_MAX,
    TempFile,
    group_sync_available,
    map_oserror,
    mtime_datetime,
    prune,
    read_exact,
    segments_ok,
    sync_filesystems,
)
from lakefs_core.block.local_keys import delete_keys, walk_keys
from lakefs_core.block.local_leftovers import (
    DEFAULT_TMP_GRACE_SECONDS,
    SWEEP_STAMP,
    TMP_PREFIX,
    claim_root,
    sweep_leftovers,
)
from lakefs_core.block.local_listing import READ_FLAGS, describe_in, walk_objects
from lakefs_core.block.local_meta import SIDECAR_VERSION, EtagCache, Sidecars
from lakefs_core.block.local_multipart import MP_DIR, LocalMultipart
from lakefs_core.block.local_threads import open_in_thread as _open_in_thread
from lakefs_core.block.local_threads import pump as _pump
from lakefs_core.block.local_threads import run as _run
from lakefs_core.errors import BadInputError, LakeFSError, NotFoundError, TransientError

__all__ = ["BARE_MAX_BYTES", "CACHED_READ_BYTES", "META_DIR", "TMP_PREFIX", "LocalBlockStore"]

_KEYS_PER_HOP = 2000  # list_keys entries per worker-thread hop: the hop costs more than a stat
# put_batch objects per worker-thread hop: a hop costs about what writing a small object does
_PUTS_PER_HOP = 32
# Objects up to this size with default content type and no metadata have no sidecar (module doc).
BARE_MAX_BYTES = 16 * 1024
# A get of at most this many bytes first tries a read on the caller's thread that cannot wait for
# the disk (:meth:`LocalBlockStore._read_cached`): a worker-thread hop costs ~0.1 ms of CPU, several
# times such a read of a cached file, and a small GET of the S3 gateway is one such read.
CACHED_READ_BYTES = 64 * 1024
_NOWAIT = getattr(os, "RWF_NOWAIT", 0)


def _discard(temp: TempFile) -> None:
    """Remove a streamed put's temporary file (if still there) and close its directories."""
    try:
        temp.discard()
    finally:
        temp.dirs.close()


class LocalBlockStore:
    """A block store in a local directory tree (see the module docstring for the layout)."""

    def __init__(
        self,
        root: Path | str,
        *,
        fsync: bool = True,
        tmp_grace_seconds: float | None = DEFAULT_TMP_GRACE_SECONDS,
        strict_names: bool = False,
    ) -> None:
        raw = os.fspath(root)
        if not isinstance(raw, str) or not os.path.isabs(raw):
            raise BadInputError("must be an absolute path", field="root")
        if tmp_grace_seconds is not None and not tmp_grace_seconds >= 0:
            raise BadInputError("must be a number of seconds >= 0, or None", field="tmp_grace_seconds")
        self._tmp_grace = tmp_grace_seconds
        self._sweep: asyncio.Future[int] | None = None
        self._sweep_stop = threading.Event()
        self._root = Path(os.path.normpath(raw))
        self._tree = Root(str(self._root))  # its real path, resolved once: see the module doc
        self._uri = "local://" + self._root.as_posix()
        self._uri_base = self._uri.rstrip("/")  # a key's URI is this, "/" and the key
        self._fsync = fsync
        self._strict_names = strict_names
        self._closed = False
        self._sidecars = Sidecars(fsync)
        self._etags = EtagCache()
        self._multipart = LocalMultipart(self._tree, fsync)
        # create-only batched puts through unnamed files (block/_localput) until this system shows
        # it has none; hop threads may clear it at once, to the same value
        self._unnamed = True

    @property
    def uri(self) -> str:
        return self._uri

    @property
    def root(self) -> Path:
        return self._root

    @property
    def real_root(self) -> Path:
        """The root's real path, resolved once when the store was made: every file operation is
        below it (the root as given may have been a link)."""
        return Path(self._tree.path)

    def __repr__(self) -> str:
        return f"LocalBlockStore({str(self._root)!r})"

    async def __aenter__(self) -> LocalBlockStore:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    # -- keys and paths ---------------------------------------------------------------------------

    def _where(self, key: str) -> str:
        return f"{self._uri_base}/{key}"

    def _check_open(self) -> None:
        if self._closed:
            raise closed_error(self.uri)

    def _parts(self, key: str, field: str = "key") -> builtins.list[str]:
        self._check_open()
        check_key(key, field)
        parts = key.split("/")
        if not segments_ok(parts):
            raise BadInputError(
                f"{key!r} is not a valid local key (empty, '.', '..' or reserved segment, NUL, "
                f"or a segment over {NAME_MAX} bytes)",
                field=field,
            )
        return parts

    # -- objects (sync) ---------------------------------------------------------------------------

    def _open_object(self, parts: Sequence[str], key: str) -> tuple[int, os.stat_result]:
        where = self._where(key)
        try:
            root = self._tree.open()
            try:
                fd = open_file(root, parts, READ_FLAGS)
            finally:
                os.close(root)
        except OSError as e:
            raise map_oserror(e, where, reading=True) from e
        try:
            st = os.fstat(fd)
        except OSError as e:
            os.close(fd)
            raise map_oserror(e, where, reading=True) from e
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            raise NotFoundError(f"{where}: no such object")
        return fd, st

    def _describe(self, dirs: Dirs, parts: Sequence[str], key: str, *, full: bool) -> ObjectInfo:
        where = self._where(key)
        try:
            directory = dirs.get(parts[:-1])
        except OSError as e:
            raise map_oserror(e, where, reading=True) from e
        meta = dirs.find(Sidecars.directory(parts))
        return describe_in(directory, meta, parts[-1], key, where=where, etags=self._etags, full=full)

    def _commit(
        self,
        temp: TempFile,
        parts: Sequence[str],
        key: str,
        *,
        if_none_match: bool,
        content_type: str,
        metadata: Mapping[str, str],
        fsync: bool | None = None,
        etag: str | None = None,
    ) -> ObjectInfo:
        """Finish the data file, stage its sidecar (none for a bare object), move both into place
        (sync), each through the descriptors of ``temp.dirs``. ``etag``: the object's when it is
        not the MD5 of what ``temp`` wrote (a multipart upload's)."""
        st = temp.finish()
        bare = etag is None and st.st_size <= BARE_MAX_BYTES and content_type == DEFAULT_CONTENT_TYPE
        etag = etag or temp.md5.hexdigest()
        dirs = temp.dirs
        if bare and not metadata:
            temp.commit(if_none_match)
            self._sidecars.drop_stale(dirs, parts, (st.st_dev, st.st_ino))  # an earlier one's
        else:
            record = {
                "v": SIDECAR_VERSION,
                "ino": st.st_ino,
                "size": st.st_size,
                "mtime_ns": st.st_mtime_ns,
                "etag": etag,
                "content_type": content_type,
                "metadata": dict(metadata),
            }
            sidecar_tmp = self._sidecars.prepare(dirs, parts, self._where(key), record, fsync=fsync)
            try:
                temp.commit(if_none_match)
            except BaseException:
                self._sidecars.discard(dirs, parts, sidecar_tmp)
                raise
            self._sidecars.install(dirs, sidecar_tmp, parts, self._where(key))
        self._etags.remember(st, etag)
        return ObjectInfo(
            key=key,
            size=st.st_size,
            etag=etag,
            last_modified=mtime_datetime(st),
            content_type=content_type,
            metadata=dict(metadata),
        )

    def _put_bytes(
        self,
        dirs: Dirs,
        parts: Sequence[str],
        key: str,
        data: bytes,
        *,
        if_none_match: bool,
        content_type: str,
        metadata: Mapping[str, str],
        fsync: bool | None = None,
    ) -> ObjectInfo:
        temp = TempFile(dirs, parts, self._where(key), self._fsync if fsync is None else fsync)
        try:
            temp.open()
            temp.write(data)
            return self._commit(
                temp,
                parts,
                key,
                if_none_match=if_none_match,
                content_type=content_type,
                metadata=metadata,
                fsync=fsync,
            )
        finally:
            temp.discard()

    def _put_one(self, parts: Sequence[str], key: str, data: bytes, **kwargs: Any) -> ObjectInfo:
        with Dirs(self._tree, create=True) as dirs:
            return self._put_bytes(dirs, parts, key, data, **kwargs)

    def _put_hop(
        self,
        items: Sequence[CheckedPut],
        parts: Sequence[Sequence[str]],
        hop: range,
        results: builtins.list[ObjectInfo | None],
        sync_fds: dict[int, int] | None,
        *,
        if_none_match: bool,
        fsync: bool,
    ) -> None:
        """Write the items ``hop`` of a batch in this worker thread: what it can through the
        compiled path (:mod:`~lakefs_core.block.local_batch`), the rest one after the other, each
        directory opened once for the hop. ``sync_fds``: one descriptor per filesystem written to,
        for the batch's sync (None: no sync of the batch)."""
        with Dirs(self._tree, create=True) as dirs:
            rest: Sequence[int] = hop
            if LOCALPUT is not None and not fsync:
                fast = [i for i in hop if eligible(items[i], BARE_MAX_BYTES)]
                if fast:
                    written, fell_back, self._unnamed = put_compiled(
                        items, fast, parts, dirs, self._where, exclusive=if_none_match, unnamed=self._unnamed
                    )
                    for w in written:
                        if w.has_sidecar:
                            self._sidecars.drop_stale(dirs, parts[w.position], w.st[:2])
                        results[w.position] = w.info
                    self._etags.remember_keys([(w.st, w.info.etag) for w in written])
                    if len(fell_back) < len(hop):
                        taken = set(fast).difference(fell_back)
                        rest = [i for i in hop if i not in taken]
            for i in rest:
                item = items[i]
                results[i] = self._put_bytes(
                    dirs,
                    parts[i],
                    item.key,
                    load_body(item.body),
                    if_none_match=if_none_match,
                    content_type=item.content_type,
                    metadata=item.metadata,
                    fsync=fsync,
                )
            if sync_fds is not None:
                keep_for_sync(dirs, sync_fds)

    # -- deletes (sync) ---------------------------------------------------------------------------

    def _delete_one(self, dirs: Dirs, parts: Sequence[str], key: str) -> None:
        where = self._where(key)
        try:
            directory = dirs.get(parts[:-1])
        except (FileNotFoundError, NotADirectoryError):
            directory = -1  # nothing there: deleted
        except OSError as e:
            raise map_oserror(e, where, reading=False) from e
        if directory >= 0:
            try:
                st = lstat_in(directory, parts[-1])
                if st is not None and stat.S_ISLNK(st.st_mode):
                    raise symlink_error(parts[-1])  # never removed nor followed: refused
                if st is not None and stat.S_ISREG(st.st_mode):
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(parts[-1], dir_fd=directory)
                current = lstat_in(directory, parts[-1])
            except OSError as e:
                raise map_oserror(e, where, reading=False) from e
        else:
            current = None
        # Drop the sidecar unless it already describes a newer file put there concurrently.
        if (
            current is None
            or not stat.S_ISREG(current.st_mode)
            or self._sidecars.read(dirs, parts, current) is None
        ):
            self._sidecars.remove(dirs, parts)
            prune(dirs, Sidecars.directory(parts), keep=1)
        prune(dirs, parts[:-1])

    def _delete_batch_raising(self, batch: Sequence[tuple[Sequence[str], str]]) -> None:
        with Dirs(self._tree) as dirs:
            for parts, key in batch:
                self._delete_one(dirs, parts, key)

    def _delete_batch(self, batch: Sequence[tuple[Sequence[str], str]]) -> builtins.list[tuple[str, str]]:
        failed: builtins.list[tuple[str, str]] = []
        with Dirs(self._tree) as dirs:
            for parts, key in batch:
                try:
                    self._delete_one(dirs, parts, key)
                except LakeFSError as e:
                    failed.append((key, str(e)))
        return failed

    # -- BlockStore ---------------------------------------------------------------------------------

    def _start_sweep(self) -> None:
        """On the first write of this process to the root: remove leftover temporaries in the background."""
        real = Path(self._tree.path)
        if self._sweep is None and self._tmp_grace is not None and claim_root(real):
            self._sweep = asyncio.ensure_future(
                _run(
                    sweep_leftovers,
                    self._tree,
                    self._tmp_grace,
                    self._sweep_stop,
                    stamp=real / META_DIR / SWEEP_STAMP,
                )
            )

    async def sweep_leftovers(self) -> int:
        """Start the leftover sweep if this process has not, wait for the one this store runs, and
        return how many temporary files it removed (0 when another store of this process swept the
        root, when a sweep of the root completed within the grace period, or when
        ``tmp_grace_seconds`` is ``None``). See :mod:`~lakefs_core.block.local_leftovers`."""
        self._check_open()
        self._start_sweep()
        return await asyncio.shield(self._sweep) if self._sweep is not None else 0

    async def put(
        self,
        key: str,
        body: Body,
        *,
        if_none_match: bool = False,
        content_type: str | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> ObjectInfo:
        parts = self._parts(key)
        self._start_sweep()
        check_body(body)
        ctype = normalize_content_type(content_type)
        meta = normalize_metadata(metadata)
        if isinstance(body, (bytes, bytearray, memoryview)):
            return await _run(
                self._put_one,
                parts,
                key,
                bytes(body),
                if_none_match=if_none_match,
                content_type=ctype,
                metadata=meta,
            )
        temp = TempFile(Dirs(self._tree, create=True), parts, self._where(key), self._fsync)
        try:
            await _run(temp.open)
            await _pump(body, temp.write)
            return await _run(
                self._commit, temp, parts, key, if_none_match=if_none_match, content_type=ctype, metadata=meta
            )
        finally:
            await _run(_discard, temp)

    async def put_batch(
        self, items: Sequence[PutItem], *, if_none_match: bool = False, concurrency: int = 8
    ) -> builtins.list[ObjectInfo]:
        """Up to ``concurrency`` worker threads each write a hop of up to ``_PUTS_PER_HOP`` objects
        (one thread hop per hop, not per object); with ``fsync``, the files are not synced one by one
        but by one ``syncfs`` per filesystem once all are in place (where the platform has it; else
        each file and directory is fsynced as ``put`` does). Nothing is reported stored before that
        sync returns."""
        self._check_open()
        checked = check_put_batch(items, concurrency)
        parts = [self._parts(item.key) for item in checked]
        if not checked:
            return []
        self._start_sweep()
        group = self._fsync and group_sync_available()
        results: builtins.list[ObjectInfo | None] = [None] * len(checked)
        sync_fds: dict[int, int] | None = {} if group else None  # filesystem -> a directory on it
        hops = [range(i, min(i + _PUTS_PER_HOP, len(checked))) for i in range(0, len(checked), _PUTS_PER_HOP)]

        async def one(hop: range) -> None:
            await _run(
                self._put_hop,
                checked,
                parts,
                hop,
                results,
                sync_fds,
                if_none_match=if_none_match,
                fsync=self._fsync and not group,
            )

        try:
            await bounded_each(hops, concurrency, one)
            if sync_fds is not None:
                await _run(sync_filesystems, builtins.list(sync_fds.values()), self._where(checked[0].key))
        finally:
            for fd in (sync_fds or {}).values():
                os.close(fd)
        return [info for info in results if info is not None]

    async def get(self, key: str, *, start: int = 0, length: int | None = None) -> bytes:
        check_range(start, length)
        parts = self._parts(key)
        if _NOWAIT and (length is None or length <= CACHED_READ_BYTES):
            cached = self._read_cached(parts, start, length)
            if cached is not None:
                return cached

        def read() -> bytes:
            fd, st = self._open_object(parts, key)
            try:
                begin, end = slice_range(st.st_size, start, length)
                return read_exact(fd, end - begin, begin)
            except OSError as e:
                raise map_oserror(e, self._where(key), reading=True) from e
            finally:
                os.close(fd)

        return await _run(read)

    def _read_cached(self, parts: Sequence[str], start: int, length: int | None) -> bytes | None:
        """The ``length`` bytes from ``start`` (fewer at the end of the object; None: to its end, if
        that is at most :data:`CACHED_READ_BYTES`) read on the caller's
        thread when the kernel has the path and every byte cached (:func:`open_file_cached`,
        ``preadv`` with ``RWF_NOWAIT``: neither waits for the disk); None otherwise, and on any
        error or anything that is not a plain file: :meth:`get`'s read in a thread answers those."""
        fd = open_file_cached(self._tree, parts, READ_FLAGS)
        if fd is None:
            return None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                return None
            begin, end = slice_range(st.st_size, start, length)
            if end - begin > CACHED_READ_BYTES:
                return None
            buf = bytearray(end - begin)
            if buf and os.preadv(fd, [buf], begin, _NOWAIT) != len(buf):
                return None  # a partial read (a page not cached): the thread reads it all
            return bytes(buf)
        except OSError:  # EAGAIN (not cached), or no RWF_NOWAIT on this file system
            return None
        finally:
            os.close(fd)

    async def stream(
        self, key: str, *, start: int = 0, length: int | None = None, chunk_size: int = 1 << 20
    ) -> AsyncGenerator[bytes, None]:
        check_range(start, length)
        check_positive(chunk_size, "chunk_size")
        parts = self._parts(key)
        fd, st = await _open_in_thread(self._open_object, parts, key)
        try:
            pos, end = slice_range(st.st_size, start, length)
            while pos < end:
                try:
                    piece = await _run(read_exact, fd, min(chunk_size, end - pos), pos)
                except OSError as e:
                    raise map_oserror(e, self._where(key), reading=True) from e
                if not piece:
                    break  # cannot happen for a file that is never modified in place
                pos += len(piece)
                yield piece
        finally:
            os.close(fd)

    async def head(self, key: str) -> ObjectInfo:
        parts = self._parts(key)

        def describe() -> ObjectInfo:
            with Dirs(self._tree) as dirs:
                return self._describe(dirs, parts, key, full=True)

        return await _run(describe)

    async def exists(self, key: str) -> bool:
        parts = self._parts(key)

        def check() -> bool:
            with Dirs(self._tree) as dirs:
                try:
                    st = lstat_in(dirs.get(parts[:-1]), parts[-1])
                except (FileNotFoundError, NotADirectoryError):
                    return False
                except OSError as e:
                    raise map_oserror(e, self._where(key), reading=True) from e
            if st is not None and stat.S_ISLNK(st.st_mode):
                link = symlink_error(parts[-1])
                raise map_oserror(link, self._where(key), reading=True) from link
            return st is not None and stat.S_ISREG(st.st_mode)

        return await _run(check)

    async def delete(self, key: str) -> None:
        parts = self._parts(key)
        await _run(self._delete_batch_raising, [(parts, key)])

    async def delete_many(self, keys: Sequence[str]) -> None:
        checked = [(self._parts(k, field="keys"), k) for k in keys]
        failed: builtins.list[tuple[str, str]] = []
        for i in range(0, len(checked), 256):
            failed += await _run(self._delete_batch, checked[i : i + 256])
        if failed:
            shown = "; ".join(msg for _, msg in failed[:5])
            more = f" (+{len(failed) - 5} more)" if len(failed) > 5 else ""
            raise TransientError(f"{self.uri}: {len(failed)} key(s) could not be deleted: {shown}{more}")

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
        walker = walk_objects(
            self._tree, self.uri, prefix, delimiter, start_after, strict=self._strict_names, etags=self._etags
        )

        def take() -> builtins.list[ObjectInfo | CommonPrefix]:
            return builtins.list(islice(walker, page_size))

        try:
            while True:
                self._check_open()
                page = await _run(take)
                for item in grouper.feed_all(page):
                    yield item
                if len(page) < page_size:
                    return
        finally:
            walker.close()

    async def list_keys(
        self, prefix: str = "", *, start_after: str | None = None
    ) -> AsyncGenerator[KeyInfo, None]:
        prefix, start_after = check_list_keys_args(prefix, start_after)
        self._check_open()
        walker = walk_keys(self._tree, self.uri, prefix, start_after)

        def take() -> builtins.list[KeyInfo] | None:
            """At least ``_KEYS_PER_HOP`` keys (whole directories), or ``None`` at the end."""
            page: builtins.list[KeyInfo] = []
            for chunk in walker:
                page += chunk
                if len(page) >= _KEYS_PER_HOP:
                    return page
            return page or None

        try:
            while True:
                self._check_open()
                page = await _run(take)
                if page is None:
                    return
                for info in page:
                    yield info
        finally:
            walker.close()

    async def delete_batch(
        self, keys: Sequence[str], *, if_match: Mapping[str, str] | None = None
    ) -> DeleteResult:
        checked, etags = check_delete_batch(keys, if_match, MAX_DELETE_BATCH)
        self._check_open()
        if not checked:
            return DeleteResult()

        def run() -> DeleteResult:
            batch = [(self._parts(k, field="keys"), k) for k in checked]  # every key checked first
            with Dirs(self._tree) as dirs:

                def etag_of(parts: Sequence[str], key: str) -> str:
                    return self._describe(dirs, parts, key, full=False).etag

                return delete_keys(dirs, self._sidecars, batch, etags=etags, etag_of=etag_of)

        return await _run(run)

    async def copy(self, src_key: str, dst_key: str, *, if_none_match: bool = False) -> ObjectInfo:
        self._parts(dst_key, field="dst_key")
        info = await self.head(src_key)
        async with contextlib.aclosing(self.stream(src_key, chunk_size=IO_CHUNK)) as chunks:
            return await self.put(
                dst_key,
                chunks,
                if_none_match=if_none_match,
                content_type=info.content_type,
                metadata=info.metadata,
            )

    # -- multipart (MultipartStore): lakefs_core/block/local_multipart.py -------------------------

    async def multipart_create(
        self, key: str, *, content_type: str | None = None, metadata: Mapping[str, str] | None = None
    ) -> str:
        self._parts(key)
        ctype, meta = normalize_content_type(content_type), normalize_metadata(metadata)
        return await _run(self._multipart.create, key, ctype, meta, self._where(key))

    async def multipart_part(
        self, key: str, upload_id: str, number: int, body: AsyncIterable[bytes], size: int
    ) -> StoredPart:
        self._parts(key)
        writer = await _run(self._multipart.open_part, key, upload_id, number, size, self._where(key))
        try:
            await _pump(body, writer.write)
            return await _run(writer.finish)
        finally:
            await _run(writer.discard)  # after finish: only closes

    async def multipart_copy_part(
        self, key: str, upload_id: str, number: int, *, src_key: str, start: int, length: int
    ) -> StoredPart:
        async with contextlib.aclosing(self.stream(src_key, start=start, length=length)) as chunks:
            return await self.multipart_part(key, upload_id, number, chunks, length)

    async def multipart_complete(
        self, key: str, upload_id: str, parts: Sequence[StoredPart], *, if_none_match: bool = False
    ) -> ObjectInfo:
        key_parts = self._parts(key)
        info = await _run(self._complete, key_parts, key, upload_id, parts, if_none_match)
        await _run(self._multipart.remove, upload_id)
        return info

    def _complete(
        self,
        parts: Sequence[str],
        key: str,
        upload_id: str,
        stored: Sequence[StoredPart],
        if_none_match: bool,
    ) -> ObjectInfo:
        temp = TempFile(Dirs(self._tree, create=True), parts, self._where(key), self._fsync)
        try:
            sealed = self._multipart.seal_into(temp, key, upload_id, stored)
            return self._commit(
                temp,
                parts,
                key,
                if_none_match=if_none_match,
                content_type=normalize_content_type(sealed.content_type),
                metadata=sealed.metadata,
                etag=sealed.etag,
            )
        finally:
            _discard(temp)

    async def multipart_abort(self, key: str, upload_id: str) -> None:
        if key:  # "": an upload whose creation died before recording its key (multipart_uploads)
            self._parts(key)
        await _run(self._multipart.remove, upload_id)

    async def multipart_uploads(self, prefix: str) -> AsyncIterator[OpenUpload]:
        for upload in await _run(self._multipart.uploads, self._where(MP_DIR)):
            if upload.key.startswith(prefix) or not upload.key:
                yield upload

    async def close(self) -> None:
        self._closed = True
        if self._sweep is not None:
            self._sweep_stop.set()  # a partial sweep is fine: the next process sweeps again
            await asyncio.wait([self._sweep])
            self._sweep.result()
