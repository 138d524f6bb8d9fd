"""File-system primitives of :class:`~lakefs_core.block.local.LocalBlockStore` (synchronous).

The reserved names (:data:`META_DIR`, :data:`TMP_PREFIX`) and the key-segment rule; atomic writes
through :class:`TempFile` (a temporary file beside the target, fsynced, then moved into place with
``os.replace`` or, create-only, ``os.link``); exact positional reads; pruning of emptied directories;
and directory scans in key order that skip reserved and non-UTF-8 names. ``OSError`` becomes a project
error through :func:`map_oserror`. Everything here blocks: the store runs it in worker threads.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import hashlib
import os
import sys
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import cast

from lakefs_core.block.local_leftovers import TMP_PREFIX, temp_name
from lakefs_core.errors import (
    AccessDeniedError,
    BadInputError,
    ConflictError,
    LakeFSError,
    NotFoundError,
    PreconditionFailedError,
    StorageFullError,
    TransientError,
)

META_DIR = ".lakefs-meta"
NAME_MAX = 255
IO_CHUNK = 1 << 20
RETRIES = 8  # re-creating a directory removed by a concurrent delete's pruning
CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)


def map_oserror(e: OSError, where: str, *, reading: bool) -> LakeFSError:
    """The project error for ``e`` raised at ``where`` (missing paths are "no such object" when reading)."""
    if isinstance(e, (FileNotFoundError, NotADirectoryError, IsADirectoryError)) and reading:
        return NotFoundError(f"{where}: no such object")
    if e.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return AccessDeniedError(f"{where}: {os.strerror(e.errno or 0)}")
    if e.errno == errno.ENAMETOOLONG:
        return BadInputError(f"{where}: name too long for the filesystem", field="key")
    if e.errno in (errno.ENOSPC, errno.EDQUOT):  # retrying cannot free space: not transient
        return StorageFullError(f"{where}: {os.strerror(e.errno or 0)}")
    name = errno.errorcode.get(e.errno or 0, "OSError")
    return TransientError(f"{where}: {name}: {os.strerror(e.errno or 0)}")


def segments_ok(parts: Sequence[str]) -> bool:
    """True when every key segment is a usable, unreserved file name."""
    for i, seg in enumerate(parts):
        if (
            not seg
            or seg in (".", "..")
            or "\0" in seg
            or len(seg.encode("utf-8")) > NAME_MAX
            or seg.startswith(TMP_PREFIX)
            or (i == 0 and seg == META_DIR)
        ):
            return False
    return True


def mtime_datetime(st: os.stat_result) -> datetime:
    """The modification time of ``st`` as an aware UTC datetime."""
    return ns_datetime(st.st_mtime_ns)


def ns_datetime(ns: int) -> datetime:
    """A time in nanoseconds since the epoch (``st_mtime_ns``) as an aware UTC datetime."""
    return datetime.fromtimestamp(ns / 1e9, UTC)


def write_all(fd: int, data: bytes | memoryview) -> None:
    """Write all of ``data`` to ``fd``."""
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def _fsync_dir(path: str | Path) -> None:
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _load_syncfs() -> Callable[[int], int] | None:
    """Linux's ``syncfs(2)`` from libc (the os module has ``sync()``, which flushes every mounted
    filesystem, but not ``syncfs``); None elsewhere."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        fn = ctypes.CDLL(None, use_errno=True).syncfs
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int]
    fn.restype = ctypes.c_int
    return cast("Callable[[int], int]", fn)


_SYNCFS = _load_syncfs()


def group_sync_available() -> bool:
    """Whether :func:`sync_filesystems` can make a batch durable with one call per filesystem."""
    return _SYNCFS is not None


def sync_filesystems(dirs: Iterable[str | Path], where: str) -> None:
    """Make every write below ``dirs`` durable: one ``syncfs`` per filesystem they live on (file
    data, inodes and directory entries alike; since Linux 5.8 it reports writeback errors)."""
    assert _SYNCFS is not None
    by_device: dict[int, str | Path] = {}
    try:
        for d in dirs:
            by_device.setdefault(os.stat(d).st_dev, d)
        for d in by_device.values():
            fd = os.open(d, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
            try:
                if _SYNCFS(fd) != 0:
                    err = ctypes.get_errno()
                    raise OSError(err, os.strerror(err), str(d))
            finally:
                os.close(fd)
    except OSError as e:
        raise map_oserror(e, where, reading=False) from e


def read_exact(fd: int, n: int, offset: int) -> bytes:
    """``n`` bytes of ``fd`` from ``offset`` (fewer only at the end of the file)."""
    out = bytearray()
    while len(out) < n:
        piece = os.pread(fd, n - len(out), offset + len(out))
        if not piece:
            break
        out += piece
    return bytes(out)


def prune(directory: Path, stop: Path) -> None:
    """Remove ``directory`` and its parents below ``stop`` while they are empty."""
    while directory != stop and stop in directory.parents:
        try:
            os.rmdir(directory)
        except OSError:
            return
        directory = directory.parent


def scan_dir(directory: Path, root: Path, uri: str, *, strict: bool = False) -> list[tuple[str, str, bool]]:
    """``(sort_key, name, is_dir)`` of the listable entries of ``directory``, in key order.

    ``root`` is the store's root (whose metadata directory is not listed), ``uri`` names the store in
    errors. A name that is not UTF-8 cannot be a key: skipped, or with ``strict`` refused by name.
    """
    at_root = directory == root
    out: list[tuple[str, str, bool]] = []
    try:
        with os.scandir(directory) as it:
            for entry in it:
                name = entry.name
                if name.startswith(TMP_PREFIX) or (at_root and name == META_DIR):
                    continue
                try:
                    name.encode("utf-8")
                except UnicodeEncodeError:
                    if strict:
                        raise _not_utf8(uri, entry.path) from None
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
        raise map_oserror(e, f"{uri}: listing {directory}", reading=False) from e
    out.sort()
    return out


def _not_utf8(uri: str, path: str) -> BadInputError:
    shown = os.fsencode(path).decode("utf-8", "backslashreplace")
    return BadInputError(f"{uri}: {shown}: the file name is not valid UTF-8 (not a key)", field="key")


class TempFile:
    """A temporary file beside its target, moved into place by :meth:`commit` (sync; run in a thread).
    Paths are plain strings: this is the per-object path of batched small puts, where ``pathlib``
    objects cost more than the system calls."""

    def __init__(self, target: str, where: str, fsync: bool) -> None:
        self.target = target
        self.parent = os.path.dirname(target)
        self.where = where
        self.fsync = fsync
        self.md5 = hashlib.md5(usedforsecurity=False)
        self.size = 0
        self.fd: int | None = None
        self.tmp: str | None = None
        self.linked = False

    @staticmethod
    def make_parent(parent: str, where: str) -> None:
        try:
            os.makedirs(parent, exist_ok=True)
        except (FileExistsError, NotADirectoryError) as e:
            raise ConflictError(f"{where}: a prefix of this key is an object") from e
        except OSError as e:
            raise map_oserror(e, where, reading=False) from e

    def open(self, known_dirs: set[str] | None = None) -> None:
        """Create the temporary file. ``known_dirs``: directories a batch already wrote into (the
        first attempt skips making them; a concurrent prune is caught by the retry)."""
        parent = self.parent
        for attempt in range(RETRIES):
            if attempt or known_dirs is None or parent not in known_dirs:
                self.make_parent(parent, self.where)
            tmp = f"{parent}/{temp_name()}"  # findable by name and age if this process dies
            try:
                self.fd = os.open(tmp, CREATE_FLAGS, 0o666)
            except FileNotFoundError:
                continue  # the directory was pruned by a concurrent delete: make it again
            except OSError as e:
                raise map_oserror(e, self.where, reading=False) from e
            self.tmp = tmp
            if known_dirs is not None:
                known_dirs.add(parent)
            return
        raise TransientError(f"{self.where}: directory kept disappearing while writing")

    def write(self, data: bytes) -> None:
        assert self.fd is not None
        self.md5.update(data)
        try:
            write_all(self.fd, data)
        except OSError as e:
            raise map_oserror(e, self.where, reading=False) from e
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
            raise map_oserror(e, self.where, reading=False) from e
        finally:
            os.close(fd)

    def commit(self, if_none_match: bool) -> None:
        assert self.tmp is not None
        try:
            if if_none_match:
                try:
                    os.link(self.tmp, self.target)
                except FileExistsError as e:
                    if os.path.isdir(self.target):
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
                    if os.path.isdir(self.target):
                        raise ConflictError(f"{self.where}: keys below this key exist") from e
                    raise
            self.tmp = None
            if self.fsync:
                _fsync_dir(self.parent)
        except LakeFSError:
            raise
        except OSError as e:
            raise map_oserror(e, self.where, reading=False) from e

    def discard(self) -> None:
        if self.fd is not None:
            fd, self.fd = self.fd, None
            with contextlib.suppress(OSError):
                os.close(fd)
        if self.tmp is not None:
            tmp, self.tmp = self.tmp, None
            with contextlib.suppress(OSError):
                os.unlink(tmp)
