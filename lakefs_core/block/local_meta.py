"""Object metadata of :class:`~lakefs_core.block.local.LocalBlockStore`: sidecars and the ETag cache.

:class:`Sidecars` keeps one JSON sidecar per object under ``<root>/.lakefs-meta/<key>`` (ETag, content
type, user metadata, and the data file's inode, size and mtime). A sidecar that does not match its data
file, or that cannot be read (not a regular file, larger than :data:`MAX_SIDECAR_BYTES`, reached only
through a symbolic link), counts as absent; leftovers blocking a new sidecar are removed, and a
new sidecar is staged in a temporary file and moved into place atomically. Every sidecar file is
reached through a directory descriptor (:mod:`~lakefs_core.block.local_beneath`), never a link.
:class:`EtagCache` remembers recent ETags by file identity (device, inode, size, mtime), so a
recomputed ETag is not recomputed again (a lock guards it). Everything here is synchronous: the
store calls it in worker threads.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import stat
import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from lakefs_core.block.local_beneath import CLOEXEC, NOFOLLOW, Dirs, lstat_in, symlink_error
from lakefs_core.block.local_files import CREATE_FLAGS, META_DIR, RETRIES, map_oserror, read_exact, write_all
from lakefs_core.block.local_leftovers import temp_name
from lakefs_core.errors import ConflictError, TransientError

SIDECAR_VERSION = 1
_ETAG_CACHE_SIZE = 4096
# A sidecar holds an ETag, a content type and at most 2 KiB of user metadata: anything much larger
# in its place is not one of ours (and is not read into memory whole).
MAX_SIDECAR_BYTES = 64 * 1024
_READ_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | NOFOLLOW | CLOEXEC


def _same_file(record: Mapping[str, Any], st: os.stat_result) -> bool:
    return bool(
        record.get("ino") == st.st_ino
        and record.get("size") == st.st_size
        and record.get("mtime_ns") == st.st_mtime_ns
    )


def _current(raw: bytes, st: os.stat_result) -> dict[str, Any] | None:
    """The sidecar record in ``raw`` if it describes the data file ``st``."""
    try:
        record = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(record, dict) or record.get("v") != SIDECAR_VERSION or not _same_file(record, st):
        return None
    if not isinstance(record.get("etag"), str):
        return None
    return record


class Sidecars:
    """The metadata sidecars of a store (fsynced when ``fsync``), each reached through the
    descriptor of its directory below ``<root>/.lakefs-meta`` from the caller's :class:`Dirs`. A
    sidecar that is not a regular file, or whose directory is reached only through a link, does
    not exist for a reader; a writer refuses a link on the way or at the sidecar's own name."""

    def __init__(self, fsync: bool) -> None:
        self.fsync = fsync

    @staticmethod
    def directory(parts: Sequence[str]) -> tuple[str, ...]:
        """The segments (below the root) of the directory holding the sidecar of key ``parts``."""
        return (META_DIR, *parts[:-1])

    def read(self, dirs: Dirs, parts: Sequence[str], st: os.stat_result) -> dict[str, Any] | None:
        """The sidecar record of the data file ``st``, or ``None`` when missing, unreadable or stale."""
        return self.read_in(dirs.find(self.directory(parts)), parts[-1], st)

    @staticmethod
    def read_in(directory: int, name: str, st: os.stat_result) -> dict[str, Any] | None:
        """:meth:`read` given the descriptor of the sidecar's directory (-1: none)."""
        raw = _read_regular(directory, name) if directory >= 0 else None
        return None if raw is None else _current(raw, st)

    def clear_stale(self, dirs: Dirs, parts: Sequence[str]) -> None:
        """Remove sidecar leftovers that block the sidecar of key ``parts``: a file where one of its
        directories must go, or a directory where the sidecar file must go. The data tree proves
        they are stale. A link is left alone (the write that needs the path refuses it)."""
        path = (META_DIR, *parts)
        for n in range(len(path)):
            try:
                parent = dirs.get(path[:n])
            except OSError:
                return
            st = lstat_in(parent, path[n])
            if st is None:
                return
            if n < len(path) - 1 and stat.S_ISREG(st.st_mode):
                with contextlib.suppress(OSError):
                    os.unlink(path[n], dir_fd=parent)
                return
            if n == len(path) - 1 and stat.S_ISDIR(st.st_mode):
                shutil.rmtree(path[n], dir_fd=parent, ignore_errors=True)  # never follows links
                dirs.forget(path)
            if not stat.S_ISDIR(st.st_mode):
                return

    def prepare(
        self,
        dirs: Dirs,
        parts: Sequence[str],
        where: str,
        record: Mapping[str, Any],
        *,
        fsync: bool | None = None,
    ) -> str:
        """Write the sidecar to a temporary file beside its final place; returns the temporary
        file's name (in :meth:`directory`). ``fsync=False``: the caller syncs the whole filesystem
        later (a batch)."""
        meta = self.directory(parts)
        data = json.dumps(record, sort_keys=True, separators=(",", ":")).encode()
        for attempt in range(RETRIES):
            try:
                directory = dirs.get(meta, create=True)
            except (FileExistsError, NotADirectoryError):
                if attempt:
                    raise ConflictError(f"{where}: cannot create the metadata sidecar directory") from None
                self.clear_stale(dirs, parts)
                continue
            except OSError as e:
                raise map_oserror(e, where, reading=False) from e
            _refuse_a_link(directory, parts[-1], where)  # before the data file is moved into place
            tmp = temp_name()  # swept like the data files' temporaries
            try:
                fd = os.open(tmp, CREATE_FLAGS, 0o666, dir_fd=directory)
            except FileNotFoundError:
                dirs.forget(meta)
                continue
            except OSError as e:
                raise map_oserror(e, where, reading=False) from e
            try:
                write_all(fd, data)
                if self.fsync if fsync is None else fsync:
                    os.fsync(fd)
            except OSError as e:
                os.close(fd)
                with contextlib.suppress(OSError):
                    os.unlink(tmp, dir_fd=directory)
                raise map_oserror(e, where, reading=False) from e
            os.close(fd)
            return tmp
        raise TransientError(f"{where}: metadata directory kept disappearing while writing")

    def discard(self, dirs: Dirs, parts: Sequence[str], tmp: str) -> None:
        """Remove the temporary file ``tmp`` that :meth:`prepare` wrote."""
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=dirs.get(self.directory(parts)))

    def drop_stale(self, dirs: Dirs, parts: Sequence[str], ours: tuple[int, int]) -> None:
        """After a put without a sidecar (``ours``: device and inode of the file it wrote): remove
        the key's sidecar, unless another writer's file replaced ours meanwhile and the sidecar
        describes that one (a concurrent put of the same key with metadata). While our file is in
        place no sidecar can be right, so one is removed whatever it says (an old one could match a
        reused inode on a filesystem with coarse mtimes). The usual case, no sidecar directory,
        costs nothing once per directory and operation (``dirs`` remembers)."""
        directory = dirs.find(self.directory(parts))
        if directory < 0:
            return
        raw = _read_regular(directory, parts[-1])
        if raw is None:
            return
        data_dir = dirs.find(parts[:-1])
        now = lstat_in(data_dir, parts[-1]) if data_dir >= 0 else None
        if (
            now is not None
            and stat.S_ISREG(now.st_mode)
            and (now.st_dev, now.st_ino) != ours
            and _current(raw, now) is not None
        ):
            return
        self.remove(dirs, parts)

    def remove(self, dirs: Dirs, parts: Sequence[str]) -> None:
        """Remove the sidecar of key ``parts`` if it is a regular file (nothing else is ours)."""
        directory = dirs.find(self.directory(parts))
        if directory < 0:
            return
        with contextlib.suppress(OSError):
            st = lstat_in(directory, parts[-1])
            if st is not None and stat.S_ISREG(st.st_mode):
                os.unlink(parts[-1], dir_fd=directory)

    def install(self, dirs: Dirs, tmp: str, parts: Sequence[str], where: str) -> None:
        """Move the sidecar staged in ``tmp`` into place (``tmp`` is removed on failure)."""
        try:
            for attempt in range(2):
                directory = dirs.get(self.directory(parts))
                st = lstat_in(directory, parts[-1])
                if st is not None and stat.S_ISLNK(st.st_mode):
                    raise symlink_error(parts[-1])  # planted since prepare: refused, not replaced
                try:
                    os.replace(tmp, parts[-1], src_dir_fd=directory, dst_dir_fd=directory)
                    return
                except IsADirectoryError:
                    if attempt:
                        raise
                    self.clear_stale(dirs, parts)
        except OSError as e:
            self.discard(dirs, parts, tmp)
            raise map_oserror(e, where, reading=False) from e


def _refuse_a_link(directory: int, name: str, where: str) -> None:
    """Refuse (:class:`BadInputError` naming ``where``) a link at the sidecar's name ``name``."""
    try:
        st = lstat_in(directory, name)
    except OSError as e:
        raise map_oserror(e, where, reading=False) from e
    if st is not None and stat.S_ISLNK(st.st_mode):
        link = symlink_error(name)
        raise map_oserror(link, where, reading=False) from link


def _read_regular(directory: int, name: str, limit: int = MAX_SIDECAR_BYTES) -> bytes | None:
    """The content of the regular file ``name`` of ``directory`` (not through a link; never
    blocking on a FIFO; at most ``limit`` bytes), or None."""
    try:
        fd = os.open(name, _READ_FLAGS, dir_fd=directory)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > limit:
            return None
        return read_exact(fd, limit + 1, 0)
    except OSError:
        return None
    finally:
        os.close(fd)


class EtagCache:
    """The ETags of the most recently used files, by ``(device, inode, size, mtime)``."""

    def __init__(self) -> None:
        self._etags: OrderedDict[tuple[int, int, int, int], str] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, st: os.stat_result) -> str | None:
        """The remembered ETag of the file ``st``, or ``None``."""
        with self._lock:
            key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
            etag = self._etags.get(key)
            if etag is not None:
                self._etags.move_to_end(key)
            return etag

    def remember(self, st: os.stat_result, etag: str) -> None:
        """Remember the ETag of the file ``st`` (forgetting the least recently used beyond 4,096)."""
        self.remember_key((st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns), etag)

    def remember_key(self, key: tuple[int, int, int, int], etag: str) -> None:
        """:meth:`remember` given ``(st_dev, st_ino, st_size, st_mtime_ns)``."""
        self.remember_keys([(key, etag)])

    def remember_keys(self, pairs: Iterable[tuple[tuple[int, int, int, int], str]]) -> None:
        """:meth:`remember_key` of each pair, in order, under one lock (a batch's hop)."""
        with self._lock:
            for key, etag in pairs:
                self._etags[key] = etag
                if len(self._etags) > _ETAG_CACHE_SIZE:
                    self._etags.popitem(last=False)
