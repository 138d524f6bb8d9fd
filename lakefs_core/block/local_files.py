"""File-system primitives of :class:`~lakefs_core.block.local.LocalBlockStore` (synchronous).

The reserved names (:data:`META_DIR`, :data:`TMP_PREFIX`) and the key-segment rule; atomic writes
through :class:`TempFile` (a temporary file beside the target, fsynced, then moved into place with
``os.replace`` or, create-only, ``os.link``); exact positional reads; pruning of emptied directories;
and directory scans in key order that skip reserved and non-UTF-8 names and symbolic links. Every
path is reached through directory descriptors of :mod:`~lakefs_core.block.local_beneath` (no link
followed, a link where a key's file or directory should be refused). ``OSError`` becomes a project
error through :func:`map_oserror`. Everything here blocks: the store runs it in worker threads.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import hashlib
import os
import stat
import sys
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from typing import cast

from lakefs_core.block.local_beneath import SYMLINK, Dirs, lstat_in, symlink_error
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
SYMLINK_REFUSED = "a symbolic link on the way: refused (a local store never follows one)"
CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)


def map_oserror(e: OSError, where: str, *, reading: bool) -> LakeFSError:
    """The project error for ``e`` raised at ``where`` (missing paths are "no such object" when reading).
    A symbolic link refused on the way (:data:`~lakefs_core.block.local_beneath.SYMLINK`) is bad
    input naming ``where``: the tree holds something no key can be."""
    if e.errno == SYMLINK:
        return BadInputError(f"{where}: {SYMLINK_REFUSED}", field="key")
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


def sync_filesystems(dirs: Iterable[int], where: str) -> None:
    """Make every write below the directories open as ``dirs`` durable: one ``syncfs`` per
    filesystem they live on (file data, inodes and directory entries alike; since Linux 5.8 it
    reports writeback errors)."""
    assert _SYNCFS is not None
    by_device: dict[int, int] = {}
    try:
        for fd in dirs:
            by_device.setdefault(os.fstat(fd).st_dev, fd)
        for fd in by_device.values():
            if _SYNCFS(fd) != 0:
                err = ctypes.get_errno()
                raise OSError(err, os.strerror(err))
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


def prune(dirs: Dirs, parts: Sequence[str], keep: int = 0) -> None:
    """Remove the directory ``<root>/<parts>`` and its parents while they are empty, but never the
    first ``keep`` levels (nor the root). Each through its parent's descriptor: a link is not a
    directory to ``rmdir`` (ENOTDIR), so pruning stops there."""
    for n in range(len(parts), keep, -1):
        try:
            os.rmdir(parts[n - 1], dir_fd=dirs.get(parts[: n - 1]))
        except OSError:
            return
        dirs.forget(parts[:n])  # a cached descriptor of it names a removed directory


def scan_dir(fd: int, at_root: bool, shown: str, *, strict: bool = False) -> list[tuple[str, str, bool]]:
    """``(sort_key, name, is_dir)`` of the listable entries of the directory open as ``fd``, in key
    order: regular files and directories, never a symbolic link (to a file or a directory).

    ``at_root``: the store's root (whose metadata directory is not listed); ``shown`` names the
    directory in errors. A name that is not UTF-8 cannot be a key: skipped, or with ``strict`` (an
    import's source, where a skipped file would be a missing entry) refused by name. A link is no
    file of the tree, strict or not (what it points to is read where it is, or not at all): skipped.
    """
    out: list[tuple[str, str, bool]] = []
    try:
        with os.scandir(fd) as it:
            for entry in it:
                name = entry.name
                if name.startswith(TMP_PREFIX) or (at_root and name == META_DIR):
                    continue
                try:
                    name.encode("utf-8")
                except UnicodeEncodeError:
                    if strict:
                        raise _refused(shown, name, "the file name is not valid UTF-8 (not a key)") from None
                    continue  # not valid UTF-8: cannot be an object key
                try:
                    if entry.is_dir(follow_symlinks=False):
                        out.append((name + "/", name, True))
                    elif entry.is_file(follow_symlinks=False):
                        out.append((name, name, False))
                except OSError:
                    continue
    except OSError as e:
        raise map_oserror(e, f"{shown}: listing", reading=False) from e
    out.sort()
    return out


def _refused(shown: str, name: str, why: str) -> BadInputError:
    path = f"{shown}/{name}".encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    return BadInputError(f"{path}: {why}", field="key")


class TempFile:
    """A temporary file beside its target, moved into place by :meth:`commit` (sync; run in a
    thread). Everything goes through the descriptor of the target's directory from ``dirs``
    (opened, or made, without following a link), which the caller closes."""

    def __init__(self, dirs: Dirs, parts: Sequence[str], where: str, fsync: bool) -> None:
        self.dirs = dirs
        self.parent = tuple(parts[:-1])
        self.name = parts[-1]
        self.where = where
        self.fsync = fsync
        self.md5 = hashlib.md5(usedforsecurity=False)
        self.size = 0
        self.fd: int | None = None
        self.tmp: str | None = None
        self.dir_fd = -1
        self.linked = False

    def _directory(self) -> int:
        try:
            return self.dirs.get(self.parent, create=True)
        except (FileExistsError, NotADirectoryError) as e:
            raise ConflictError(f"{self.where}: a prefix of this key is an object") from e
        except OSError as e:
            raise map_oserror(e, self.where, reading=False) from e

    def open(self) -> None:
        """Create the temporary file (and the directories on the way); a directory removed
        meanwhile by a concurrent delete's pruning is made again."""
        for _ in range(RETRIES):
            directory = self._directory()
            tmp = temp_name()  # findable by name and age if this process dies
            try:
                self.fd = os.open(tmp, CREATE_FLAGS, 0o666, dir_fd=directory)
            except FileNotFoundError:
                self.dirs.forget(self.parent)  # pruned by a concurrent delete: make it again
                continue
            except OSError as e:
                raise map_oserror(e, self.where, reading=False) from e
            self.tmp, self.dir_fd = tmp, directory
            return
        raise TransientError(f"{self.where}: directory kept disappearing while writing")

    def adopt(self, src_dir: int, src_name: str, fd: int) -> None:
        """Take the file ``src_name`` of directory ``src_dir`` (open as ``fd``, which this now
        owns) as the temporary file: renamed beside the target, on the same filesystem, so no
        byte is copied (a multipart upload's completed file)."""
        for _ in range(RETRIES):
            directory = self._directory()
            tmp = temp_name()
            try:
                os.rename(src_name, tmp, src_dir_fd=src_dir, dst_dir_fd=directory)
            except FileNotFoundError:
                if lstat_in(src_dir, src_name) is None:
                    os.close(fd)
                    raise NotFoundError(f"{self.where}: the completed upload's file is gone") from None
                self.dirs.forget(self.parent)  # pruned by a concurrent delete: make it again
                continue
            except OSError as e:
                os.close(fd)
                raise map_oserror(e, self.where, reading=False) from e
            self.tmp, self.dir_fd, self.fd = tmp, directory, fd
            return
        os.close(fd)
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

    def _in_the_way(self) -> LakeFSError | None:
        """The error for a target that could not be replaced or linked: keys below it, or a link."""
        st = lstat_in(self.dir_fd, self.name)
        if st is not None and stat.S_ISDIR(st.st_mode):
            return ConflictError(f"{self.where}: keys below this key exist")
        if st is not None and stat.S_ISLNK(st.st_mode):
            link = symlink_error(self.name)
            refused = map_oserror(link, self.where, reading=False)
            refused.__cause__ = link
            return refused
        return None

    def commit(self, if_none_match: bool) -> None:
        assert self.tmp is not None
        d = self.dir_fd
        try:
            if if_none_match:
                try:
                    os.link(self.tmp, self.name, src_dir_fd=d, dst_dir_fd=d, follow_symlinks=False)
                except FileExistsError as e:
                    raise self._in_the_way() or PreconditionFailedError(
                        f"{self.where}: already exists (create-only put)"
                    ) from e
                except OSError as e:
                    if e.errno in (errno.ENOTSUP, errno.EOPNOTSUPP):
                        raise LakeFSError(
                            f"{self.where}: the filesystem has no hard links, needed for create-only puts"
                        ) from e
                    raise
                self.linked = True
                os.unlink(self.tmp, dir_fd=d)
            else:
                st = lstat_in(d, self.name)
                if st is not None and stat.S_ISLNK(st.st_mode):  # refused, not replaced
                    link = symlink_error(self.name)
                    raise map_oserror(link, self.where, reading=False) from link
                try:
                    os.replace(self.tmp, self.name, src_dir_fd=d, dst_dir_fd=d)
                except OSError as e:
                    raise (self._in_the_way() or e) from e
            self.tmp = None
            if self.fsync:
                os.fsync(d)
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
                os.unlink(tmp, dir_fd=self.dir_fd)
