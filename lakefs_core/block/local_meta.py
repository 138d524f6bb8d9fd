"""Object metadata of :class:`~lakefs_core.block.local.LocalBlockStore`: sidecars and the ETag cache.

:class:`Sidecars` keeps one JSON sidecar per object under ``<root>/.lakefs-meta/<key>`` (ETag, content
type, user metadata, and the data file's inode, size and mtime). A sidecar that does not match its data
file, or that cannot be read, counts as absent; leftovers blocking a new sidecar are removed, and a
new sidecar is staged in a temporary file and moved into place atomically. :class:`EtagCache` remembers
recent ETags by file identity (device, inode, size, mtime), so a recomputed ETag is not recomputed
again (a lock guards it). Everything here is synchronous: the store calls it in worker threads.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from lakefs_core.block.local_files import CREATE_FLAGS, RETRIES, map_oserror, write_all
from lakefs_core.block.local_leftovers import temp_name
from lakefs_core.errors import ConflictError, TransientError

SIDECAR_VERSION = 1
_ETAG_CACHE_SIZE = 4096


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
    """The metadata sidecars below ``root`` (fsynced when ``fsync``)."""

    def __init__(self, root: Path, fsync: bool) -> None:
        self.root = root
        self._root_s = str(root).rstrip("/")
        self.fsync = fsync

    def path(self, parts: Sequence[str]) -> Path:
        """Where the sidecar of the key with segments ``parts`` lives."""
        return self.root.joinpath(*parts)

    def read(self, parts: Sequence[str], st: os.stat_result) -> dict[str, Any] | None:
        """The sidecar record of the data file ``st``, or ``None`` when missing, unreadable or stale."""
        try:
            with open(self.path(parts), "rb") as f:
                raw = f.read()
        except OSError:
            return None
        return _current(raw, st)

    def clear_stale(self, meta_path: Path) -> None:
        """Remove sidecar leftovers that block ``meta_path`` (a file where a directory must go, or a
        directory where the sidecar file must go). The data tree proves they are stale."""
        node = meta_path.parent
        while node != self.root and self.root in node.parents:
            if node.is_file():
                with contextlib.suppress(OSError):
                    os.unlink(node)
            node = node.parent
        if meta_path.is_dir() and not meta_path.is_symlink():
            shutil.rmtree(meta_path, ignore_errors=True)

    def prepare(
        self,
        parts: Sequence[str],
        where: str,
        record: Mapping[str, Any],
        *,
        fsync: bool | None = None,
        known_dirs: set[str] | None = None,
    ) -> Path:
        """Write the sidecar to a temporary file beside its final place; returns the temp path.
        ``fsync=False``: the caller syncs the whole filesystem later (a batch); ``known_dirs`` as
        :meth:`~lakefs_core.block.local_files.TempFile.open`'s."""
        meta_path = self.path(parts)
        data = json.dumps(record, sort_keys=True, separators=(",", ":")).encode()
        for attempt in range(RETRIES):
            try:
                if attempt or known_dirs is None or str(meta_path.parent) not in known_dirs:
                    os.makedirs(meta_path.parent, exist_ok=True)
            except (FileExistsError, NotADirectoryError):
                if attempt:
                    raise ConflictError(f"{where}: cannot create the metadata sidecar directory") from None
                self.clear_stale(meta_path)
                continue
            except OSError as e:
                raise map_oserror(e, where, reading=False) from e
            tmp = meta_path.parent / temp_name()  # swept like the data files' temporaries
            try:
                fd = os.open(tmp, CREATE_FLAGS, 0o666)
            except FileNotFoundError:
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
                    os.unlink(tmp)
                raise map_oserror(e, where, reading=False) from e
            os.close(fd)
            if known_dirs is not None:
                known_dirs.add(str(meta_path.parent))
            return tmp
        raise TransientError(f"{where}: metadata directory kept disappearing while writing")

    def file(self, parts: Sequence[str]) -> str:
        """:meth:`path` as a string (cheaper, for per-object work of batches)."""
        return f"{self._root_s}/{'/'.join(parts)}"

    def drop_stale(self, parts: Sequence[str], data_file: str, ours: tuple[int, int]) -> None:
        """After a put without a sidecar (``ours``: device and inode of the file it wrote): remove
        the key's sidecar, unless another writer's file replaced ours meanwhile and the sidecar
        describes that one (a concurrent put of the same key with metadata). While our file is in
        place no sidecar can be right, so one is removed whatever it says (an old one could match a
        reused inode on a filesystem with coarse mtimes). The usual case, no sidecar, costs one
        failed ``open``."""
        path = self.file(parts)  # a string: this runs for every bare put
        try:
            with open(path, "rb") as f:
                raw = f.read()
        except OSError:
            return
        try:
            now = os.stat(data_file)
            if (now.st_dev, now.st_ino) != ours and _current(raw, now) is not None:
                return
        except OSError:
            pass  # the data file is gone as well: the sidecar is stale
        with contextlib.suppress(OSError):
            os.unlink(path)

    def install(self, tmp: Path, parts: Sequence[str], where: str) -> None:
        """Move the sidecar staged in ``tmp`` into place (``tmp`` is removed on failure)."""
        meta_path = self.path(parts)
        try:
            try:
                os.replace(tmp, meta_path)
            except IsADirectoryError:
                self.clear_stale(meta_path)
                os.replace(tmp, meta_path)
        except OSError as e:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise map_oserror(e, where, reading=False) from e


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
