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
A sidecar is chosen over extended attributes because it works on every filesystem (tmpfs, NFS,
overlay, macOS) and survives plain ``cp -r`` of the tree along with the data.

Empty directories left by ``delete`` are removed up to the root (S3 has no empty "directories"); a
listing never reports a directory without objects as a common prefix.

All blocking file I/O runs in worker threads (``asyncio.to_thread``), streamed bodies chunk by chunk.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import errno
import hashlib
import json
import os
import shutil
import stat
import threading
import uuid
from collections import OrderedDict
from collections.abc import AsyncGenerator, Callable, Generator, Mapping, Sequence
from datetime import UTC, datetime
from itertools import islice
from pathlib import Path
from types import TracebackType
from typing import Any, ParamSpec, TypeVar

from lakefs_core.block._common import (
    AccessDeniedError,
    Grouper,
    check_body,
    check_key,
    check_list_args,
    check_positive,
    check_range,
    closed_error,
    iter_body,
    normalize_content_type,
    normalize_metadata,
    slice_range,
)
from lakefs_core.block.base import Body, CommonPrefix, ObjectInfo
from lakefs_core.errors import (
    BadInputError,
    ConflictError,
    LakeFSError,
    NotFoundError,
    PreconditionFailedError,
    TransientError,
)

META_DIR = ".lakefs-meta"
TMP_PREFIX = ".lakefs-tmp-"
_NAME_MAX = 255
_IO_CHUNK = 1 << 20
_RETRIES = 8  # re-creating a directory removed by a concurrent delete's pruning
_ETAG_CACHE_SIZE = 4096
_SIDECAR_VERSION = 1
_CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)

P = ParamSpec("P")
T = TypeVar("T")


async def _run(fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """Run ``fn`` in a worker thread. On cancellation, wait for the thread to finish before re-raising
    (a thread cannot be interrupted), so cleanup code never races a still-running write."""
    task = asyncio.ensure_future(asyncio.to_thread(fn, *args, **kwargs))
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        if not task.done():
            await asyncio.wait([task])
        if not task.cancelled():
            task.exception()  # retrieved: never reported as "exception was never retrieved"
        raise


async def _open_in_thread(fn: Callable[P, tuple[int, T]], *args: P.args, **kwargs: P.kwargs) -> tuple[int, T]:
    """Like :func:`_run` for a function returning ``(fd, ...)``: a descriptor opened by a thread whose
    caller was cancelled meanwhile is closed rather than leaked."""
    task = asyncio.ensure_future(asyncio.to_thread(fn, *args, **kwargs))
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        if not task.done():
            await asyncio.wait([task])
        if not task.cancelled() and task.exception() is None:
            os.close(task.result()[0])
        raise


def _map_oserror(e: OSError, where: str, *, reading: bool) -> LakeFSError:
    if isinstance(e, (FileNotFoundError, NotADirectoryError, IsADirectoryError)) and reading:
        return NotFoundError(f"{where}: no such object")
    if e.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return AccessDeniedError(f"{where}: {os.strerror(e.errno or 0)}")
    if e.errno == errno.ENAMETOOLONG:
        return BadInputError(f"{where}: name too long for the filesystem", field="key")
    name = errno.errorcode.get(e.errno or 0, "OSError")
    return TransientError(f"{where}: {name}: {os.strerror(e.errno or 0)}")


def _segments_ok(parts: Sequence[str]) -> bool:
    for i, seg in enumerate(parts):
        if (
            not seg
            or seg in (".", "..")
            or "\0" in seg
            or len(seg.encode("utf-8")) > _NAME_MAX
            or seg.startswith(TMP_PREFIX)
            or (i == 0 and seg == META_DIR)
        ):
            return False
    return True


def _datetime(st: os.stat_result) -> datetime:
    return datetime.fromtimestamp(st.st_mtime_ns / 1e9, UTC)


def _same_file(record: Mapping[str, Any], st: os.stat_result) -> bool:
    return bool(
        record.get("ino") == st.st_ino
        and record.get("size") == st.st_size
        and record.get("mtime_ns") == st.st_mtime_ns
    )


def _write_all(fd: int, data: bytes | memoryview) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _read_exact(fd: int, n: int, offset: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        piece = os.pread(fd, n - len(out), offset + len(out))
        if not piece:
            break
        out += piece
    return bytes(out)


class _TempFile:
    """A temporary file beside its target, moved into place by :meth:`commit` (sync; run in a thread)."""

    def __init__(self, target: Path, where: str, fsync: bool) -> None:
        self.target = target
        self.where = where
        self.fsync = fsync
        self.md5 = hashlib.md5(usedforsecurity=False)
        self.size = 0
        self.fd: int | None = None
        self.tmp: Path | None = None
        self.linked = False

    @staticmethod
    def make_parent(parent: Path, where: str) -> None:
        try:
            os.makedirs(parent, exist_ok=True)
        except (FileExistsError, NotADirectoryError) as e:
            raise ConflictError(f"{where}: a prefix of this key is an object") from e
        except OSError as e:
            raise _map_oserror(e, where, reading=False) from e

    def open(self) -> None:
        parent = self.target.parent
        for _ in range(_RETRIES):
            self.make_parent(parent, self.where)
            tmp = parent / f"{TMP_PREFIX}{uuid.uuid4().hex}"
            try:
                self.fd = os.open(tmp, _CREATE_FLAGS, 0o666)
            except FileNotFoundError:
                continue  # the directory was pruned by a concurrent delete: make it again
            except OSError as e:
                raise _map_oserror(e, self.where, reading=False) from e
            self.tmp = tmp
            return
        raise TransientError(f"{self.where}: directory kept disappearing while writing")

    def write(self, data: bytes) -> None:
        assert self.fd is not None
        self.md5.update(data)
        try:
            _write_all(self.fd, data)
        except OSError as e:
            raise _map_oserror(e, self.where, reading=False) from e
        self.size += len(data)

    def finish(self) -> os.stat_result:
        """Flush and close; the returned stat (inode, size, mtime) stays valid after the move."""
        assert self.fd is not None
        fd, self.fd = self.fd, None
        try:
            if self.fsync:
                os.fsync(fd)
            return os.fstat(fd)
        except OSError as e:
            raise _map_oserror(e, self.where, reading=False) from e
        finally:
            os.close(fd)

    def commit(self, if_none_match: bool) -> None:
        assert self.tmp is not None
        try:
            if if_none_match:
                try:
                    os.link(self.tmp, self.target)
                except FileExistsError as e:
                    if self.target.is_dir():
                        raise ConflictError(f"{self.where}: keys below this key exist") from e
                    raise PreconditionFailedError(f"{self.where}: already exists (create-only put)") from e
                except OSError as e:
                    if e.errno in (errno.ENOTSUP, errno.EOPNOTSUPP):
                        raise LakeFSError(
                            f"{self.where}: the filesystem has no hard links, needed for create-only puts"
                        ) from e
                    raise
                self.linked = True
                os.unlink(self.tmp)
            else:
                try:
                    os.replace(self.tmp, self.target)
                except OSError as e:
                    if self.target.is_dir():
                        raise ConflictError(f"{self.where}: keys below this key exist") from e
                    raise
            self.tmp = None
            if self.fsync:
                _fsync_dir(self.target.parent)
        except LakeFSError:
            raise
        except OSError as e:
            raise _map_oserror(e, self.where, reading=False) from e

    def discard(self) -> None:
        if self.fd is not None:
            fd, self.fd = self.fd, None
            with contextlib.suppress(OSError):
                os.close(fd)
        if self.tmp is not None:
            tmp, self.tmp = self.tmp, None
            with contextlib.suppress(OSError):
                os.unlink(tmp)


class LocalBlockStore:
    """A block store in a local directory tree (see the module docstring for the layout)."""

    def __init__(self, root: Path | str, *, fsync: bool = True) -> None:
        raw = os.fspath(root)
        if not isinstance(raw, str) or not os.path.isabs(raw):
            raise BadInputError("must be an absolute path", field="root")
        self._root = Path(os.path.normpath(raw))
        self._meta_root = self._root / META_DIR
        self._fsync = fsync
        self._closed = False
        self._etags: OrderedDict[tuple[int, int, int, int], str] = OrderedDict()
        self._etags_lock = threading.Lock()

    @property
    def uri(self) -> str:
        return "local://" + self._root.as_posix()

    @property
    def root(self) -> Path:
        return self._root

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
        return f"{self.uri.rstrip('/')}/{key}"

    def _check_open(self) -> None:
        if self._closed:
            raise closed_error(self.uri)

    def _parts(self, key: str, field: str = "key") -> builtins.list[str]:
        self._check_open()
        check_key(key, field)
        parts = key.split("/")
        if not _segments_ok(parts):
            raise BadInputError(
                f"{key!r} is not a valid local key (empty, '.', '..' or reserved segment, NUL, "
                f"or a segment over {_NAME_MAX} bytes)",
                field=field,
            )
        return parts

    def _path(self, parts: Sequence[str]) -> Path:
        return self._root.joinpath(*parts)

    def _meta_path(self, parts: Sequence[str]) -> Path:
        return self._meta_root.joinpath(*parts)

    # -- sidecars and etags (sync) ----------------------------------------------------------------

    def _read_sidecar(self, parts: Sequence[str], st: os.stat_result) -> dict[str, Any] | None:
        try:
            with open(self._meta_path(parts), "rb") as f:
                record = json.loads(f.read())
        except (OSError, ValueError):
            return None
        if not isinstance(record, dict) or record.get("v") != _SIDECAR_VERSION or not _same_file(record, st):
            return None
        if not isinstance(record.get("etag"), str):
            return None
        return record

    def _cached_etag(self, st: os.stat_result) -> str | None:
        with self._etags_lock:
            key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
            etag = self._etags.get(key)
            if etag is not None:
                self._etags.move_to_end(key)
            return etag

    def _remember_etag(self, st: os.stat_result, etag: str) -> None:
        with self._etags_lock:
            self._etags[(st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)] = etag
            while len(self._etags) > _ETAG_CACHE_SIZE:
                self._etags.popitem(last=False)

    def _open_object(self, parts: Sequence[str], key: str) -> tuple[int, os.stat_result]:
        where = self._where(key)
        try:
            fd = os.open(self._path(parts), os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        except OSError as e:
            raise _map_oserror(e, where, reading=True) from e
        try:
            st = os.fstat(fd)
        except OSError as e:
            os.close(fd)
            raise _map_oserror(e, where, reading=True) from e
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            raise NotFoundError(f"{where}: no such object")
        return fd, st

    def _describe(self, parts: Sequence[str], key: str, *, full: bool) -> ObjectInfo:
        where = self._where(key)
        try:
            st = os.stat(self._path(parts))
        except OSError as e:
            raise _map_oserror(e, where, reading=True) from e
        if not stat.S_ISREG(st.st_mode):
            raise NotFoundError(f"{where}: no such object")
        record = self._read_sidecar(parts, st)
        if record is not None:
            etag: str = record["etag"]
            ctype = record.get("content_type")
            meta = record.get("metadata")
        else:
            ctype, meta = None, None
            cached = self._cached_etag(st)
            if cached is not None:
                etag = cached
            else:
                fd, st = self._open_object(parts, key)
                try:
                    md5 = hashlib.md5(usedforsecurity=False)
                    offset = 0
                    while piece := os.pread(fd, _IO_CHUNK, offset):
                        md5.update(piece)
                        offset += len(piece)
                except OSError as e:
                    raise _map_oserror(e, where, reading=True) from e
                finally:
                    os.close(fd)
                etag = md5.hexdigest()
                self._remember_etag(st, etag)
        if not full:
            return ObjectInfo(key=key, size=st.st_size, etag=etag, last_modified=_datetime(st))
        return ObjectInfo(
            key=key,
            size=st.st_size,
            etag=etag,
            last_modified=_datetime(st),
            content_type=normalize_content_type(ctype if isinstance(ctype, str) else None),
            metadata={str(k): str(v) for k, v in meta.items()} if isinstance(meta, dict) else {},
        )

    def _clear_stale_meta(self, meta_path: Path) -> None:
        """Remove sidecar leftovers that block ``meta_path`` (a file where a directory must go, or a
        directory where the sidecar file must go). The data tree proves they are stale."""
        node = meta_path.parent
        while node != self._meta_root and self._meta_root in node.parents:
            if node.is_file():
                with contextlib.suppress(OSError):
                    os.unlink(node)
            node = node.parent
        if meta_path.is_dir() and not meta_path.is_symlink():
            shutil.rmtree(meta_path, ignore_errors=True)

    def _prepare_sidecar(self, parts: Sequence[str], key: str, record: Mapping[str, Any]) -> Path:
        """Write the sidecar to a temporary file beside its final place; returns the temp path."""
        meta_path = self._meta_path(parts)
        data = json.dumps(record, sort_keys=True, separators=(",", ":")).encode()
        where = self._where(key)
        for attempt in range(_RETRIES):
            try:
                os.makedirs(meta_path.parent, exist_ok=True)
            except (FileExistsError, NotADirectoryError):
                if attempt:
                    raise ConflictError(f"{where}: cannot create the metadata sidecar directory") from None
                self._clear_stale_meta(meta_path)
                continue
            except OSError as e:
                raise _map_oserror(e, where, reading=False) from e
            tmp = meta_path.parent / f"{TMP_PREFIX}{uuid.uuid4().hex}"
            try:
                fd = os.open(tmp, _CREATE_FLAGS, 0o666)
            except FileNotFoundError:
                continue
            except OSError as e:
                raise _map_oserror(e, where, reading=False) from e
            try:
                _write_all(fd, data)
                if self._fsync:
                    os.fsync(fd)
            except OSError as e:
                os.close(fd)
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise _map_oserror(e, where, reading=False) from e
            os.close(fd)
            return tmp
        raise TransientError(f"{where}: metadata directory kept disappearing while writing")

    def _install_sidecar(self, tmp: Path, parts: Sequence[str], key: str) -> None:
        meta_path = self._meta_path(parts)
        try:
            try:
                os.replace(tmp, meta_path)
            except IsADirectoryError:
                self._clear_stale_meta(meta_path)
                os.replace(tmp, meta_path)
        except OSError as e:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise _map_oserror(e, self._where(key), reading=False) from e

    def _commit(
        self,
        temp: _TempFile,
        parts: Sequence[str],
        key: str,
        *,
        if_none_match: bool,
        content_type: str,
        metadata: Mapping[str, str],
    ) -> ObjectInfo:
        """Finish the data file, stage its sidecar, move both into place (sync)."""
        st = temp.finish()
        etag = temp.md5.hexdigest()
        record = {
            "v": _SIDECAR_VERSION,
            "ino": st.st_ino,
            "size": st.st_size,
            "mtime_ns": st.st_mtime_ns,
            "etag": etag,
            "content_type": content_type,
            "metadata": dict(metadata),
        }
        sidecar_tmp = self._prepare_sidecar(parts, key, record)
        try:
            temp.commit(if_none_match)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(sidecar_tmp)
            raise
        self._install_sidecar(sidecar_tmp, parts, key)
        self._remember_etag(st, etag)
        return ObjectInfo(
            key=key,
            size=st.st_size,
            etag=etag,
            last_modified=_datetime(st),
            content_type=content_type,
            metadata=dict(metadata),
        )

    def _put_bytes(
        self,
        parts: Sequence[str],
        key: str,
        data: bytes,
        *,
        if_none_match: bool,
        content_type: str,
        metadata: Mapping[str, str],
    ) -> ObjectInfo:
        temp = _TempFile(self._path(parts), self._where(key), self._fsync)
        try:
            temp.open()
            temp.write(data)
            return self._commit(
                temp, parts, key, if_none_match=if_none_match, content_type=content_type, metadata=metadata
            )
        finally:
            temp.discard()

    # -- deletes (sync) ---------------------------------------------------------------------------

    def _prune(self, directory: Path, stop: Path) -> None:
        while directory != stop and stop in directory.parents:
            try:
                os.rmdir(directory)
            except OSError:
                return
            directory = directory.parent

    def _delete_one(self, parts: Sequence[str], key: str) -> None:
        path = self._path(parts)
        try:
            st = os.stat(path)
        except (FileNotFoundError, NotADirectoryError):
            st = None
        except OSError as e:
            raise _map_oserror(e, self._where(key), reading=False) from e
        if st is not None and stat.S_ISREG(st.st_mode):
            try:
                os.unlink(path)
            except (FileNotFoundError, NotADirectoryError):
                pass
            except OSError as e:
                raise _map_oserror(e, self._where(key), reading=False) from e
        meta_path = self._meta_path(parts)
        # Drop the sidecar unless it already describes a newer file put there concurrently.
        try:
            current: os.stat_result | None = os.stat(path)
        except OSError:
            current = None
        if current is None or self._read_sidecar(parts, current) is None:
            with contextlib.suppress(OSError):
                if meta_path.is_file():
                    os.unlink(meta_path)
            self._prune(meta_path.parent, self._meta_root)
        self._prune(path.parent, self._root)

    def _delete_batch(self, batch: Sequence[tuple[Sequence[str], str]]) -> builtins.list[tuple[str, str]]:
        failed: builtins.list[tuple[str, str]] = []
        for parts, key in batch:
            try:
                self._delete_one(parts, key)
            except LakeFSError as e:
                failed.append((key, str(e)))
        return failed

    # -- listing (sync generator, advanced page by page in worker threads) -------------------------

    def _scan(self, directory: Path) -> builtins.list[tuple[str, str, bool]]:
        """``(sort_key, name, is_dir)`` of the listable entries of ``directory``, in key order."""
        at_root = directory == self._root
        out: builtins.list[tuple[str, str, bool]] = []
        try:
            with os.scandir(directory) as it:
                for entry in it:
                    name = entry.name
                    if name.startswith(TMP_PREFIX) or (at_root and name == META_DIR):
                        continue
                    try:
                        name.encode("utf-8")
                    except UnicodeEncodeError:
                        continue  # not valid UTF-8: cannot be an object key
                    try:
                        if entry.is_dir(follow_symlinks=False):
                            out.append((name + "/", name, True))
                        elif entry.is_file():
                            out.append((name, name, False))
                    except OSError:
                        continue
        except (FileNotFoundError, NotADirectoryError):
            return []
        except OSError as e:
            raise _map_oserror(e, f"{self.uri}: listing {directory}", reading=False) from e
        out.sort()
        return out

    def _walk_dir(
        self, directory: Path, key_prefix: str, name_prefix: str, start_after: str | None, collapse: bool
    ) -> Generator[ObjectInfo | CommonPrefix, None, None]:
        for sort_key, name, is_dir in self._scan(directory):
            if not sort_key.startswith(name_prefix):
                continue
            full = key_prefix + sort_key
            inside = is_dir and start_after is not None and start_after.startswith(full)
            if start_after is not None and not inside and full <= start_after:
                continue  # the whole entry sorts at or before start_after
            if is_dir:
                if collapse and start_after is not None and full <= start_after:
                    continue  # a common prefix is listed only if it sorts after start_after
                below = self._walk_dir(directory / name, full, "", start_after if inside else None, False)
                if collapse:
                    with contextlib.closing(below):
                        if next(below, None) is not None:
                            yield CommonPrefix(full)
                else:
                    yield from below
            else:
                try:
                    yield self._describe([*key_prefix.split("/")[:-1], name], full, full=False)
                except NotFoundError:
                    continue  # deleted while listing

    def _walk(
        self, prefix: str, delimiter: str | None, start_after: str | None
    ) -> Generator[ObjectInfo | CommonPrefix, None, None]:
        dir_part, _, name_prefix = prefix.rpartition("/")
        segments = dir_part.split("/") if dir_part else []
        if not _segments_ok(segments):
            return  # no valid local key can start with this prefix
        key_prefix = dir_part + "/" if dir_part else ""
        collapse = delimiter == "/"
        yield from self._walk_dir(self._path(segments), key_prefix, name_prefix, start_after, collapse)

    # -- BlockStore ---------------------------------------------------------------------------------

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
        check_body(body)
        ctype = normalize_content_type(content_type)
        meta = normalize_metadata(metadata)
        if isinstance(body, (bytes, bytearray, memoryview)):
            return await _run(
                self._put_bytes,
                parts,
                key,
                bytes(body),
                if_none_match=if_none_match,
                content_type=ctype,
                metadata=meta,
            )
        temp = _TempFile(self._path(parts), self._where(key), self._fsync)
        try:
            await _run(temp.open)
            buf = bytearray()
            async for chunk in iter_body(body):
                buf += chunk
                if len(buf) >= _IO_CHUNK:
                    data = bytes(buf)
                    buf.clear()
                    await _run(temp.write, data)
            if buf:
                await _run(temp.write, bytes(buf))
            return await _run(
                self._commit, temp, parts, key, if_none_match=if_none_match, content_type=ctype, metadata=meta
            )
        finally:
            if temp.fd is not None or temp.tmp is not None:
                await _run(temp.discard)

    async def get(self, key: str, *, start: int = 0, length: int | None = None) -> bytes:
        check_range(start, length)
        parts = self._parts(key)

        def read() -> bytes:
            fd, st = self._open_object(parts, key)
            try:
                begin, end = slice_range(st.st_size, start, length)
                return _read_exact(fd, end - begin, begin)
            except OSError as e:
                raise _map_oserror(e, self._where(key), reading=True) from e
            finally:
                os.close(fd)

        return await _run(read)

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
                    piece = await _run(_read_exact, fd, min(chunk_size, end - pos), pos)
                except OSError as e:
                    raise _map_oserror(e, self._where(key), reading=True) from e
                if not piece:
                    break  # cannot happen for a file that is never modified in place
                pos += len(piece)
                yield piece
        finally:
            os.close(fd)

    async def head(self, key: str) -> ObjectInfo:
        parts = self._parts(key)
        return await _run(self._describe, parts, key, full=True)

    async def exists(self, key: str) -> bool:
        path = self._path(self._parts(key))

        def check() -> bool:
            try:
                return stat.S_ISREG(os.stat(path).st_mode)
            except (FileNotFoundError, NotADirectoryError):
                return False
            except OSError as e:
                raise _map_oserror(e, self._where(key), reading=True) from e

        return await _run(check)

    async def delete(self, key: str) -> None:
        parts = self._parts(key)
        await _run(self._delete_one, parts, key)

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
        walker = self._walk(prefix, delimiter, start_after)

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

    async def copy(self, src_key: str, dst_key: str, *, if_none_match: bool = False) -> ObjectInfo:
        self._parts(dst_key, field="dst_key")
        info = await self.head(src_key)
        async with contextlib.aclosing(self.stream(src_key, chunk_size=_IO_CHUNK)) as chunks:
            return await self.put(
                dst_key,
                chunks,
                if_none_match=if_none_match,
                content_type=info.content_type,
                metadata=info.metadata,
            )

    async def close(self) -> None:
        self._closed = True
