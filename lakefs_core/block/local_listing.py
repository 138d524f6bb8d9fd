"""Describing and listing objects of :class:`~lakefs_core.block.local.LocalBlockStore` (synchronous).

:func:`describe_in` answers ``head`` (and each listed object): the data file's status, taken
through the descriptor of its directory without following a link, then its sidecar, or the
MD5 of its content when there is none (or a stale one), remembered in the store's ETag cache.

:func:`walk_objects` is ``list``'s walk: directories in key order, each opened below the root's
descriptor without following a link (:mod:`~lakefs_core.block.local_beneath`); it lists regular
files and descends into real directories only, skipping every symbolic link (a linked directory
is never entered, a linked file never reported: no key can be read through a link either), the
store's temporary files, the root's metadata directory and names that are not UTF-8 (refused by
name when ``strict``). A directory is held open only while its own entries are
described: its parent is opened again after each subdirectory, so a deep tree holds no more than
two descriptors (the directory's and its sidecars').
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
from collections.abc import Generator

from lakefs_core.block._common import MAX_KEY_BYTES, normalize_content_type
from lakefs_core.block.base import CommonPrefix, ObjectInfo
from lakefs_core.block.local_beneath import CLOEXEC, NOFOLLOW, SYMLINK, Root, lstat_in, symlink_error
from lakefs_core.block.local_files import (
    IO_CHUNK,
    META_DIR,
    map_oserror,
    mtime_datetime,
    scan_dir,
    segments_ok,
)
from lakefs_core.block.local_keys import open_listed
from lakefs_core.block.local_meta import EtagCache, Sidecars
from lakefs_core.errors import BadInputError, NotFoundError

READ_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | CLOEXEC  # a FIFO in a key's place never blocks


def describe_in(
    directory: int,
    meta_dir: int,
    name: str,
    key: str,
    *,
    where: str,
    etags: EtagCache,
    full: bool,
) -> ObjectInfo:
    """The object ``key``, the entry ``name`` of the directory open as ``directory`` (its sidecar's
    directory ``meta_dir``, -1 for none). :class:`NotFoundError` when it is not a regular file;
    a link there is refused (:class:`BadInputError` naming ``where``)."""
    try:
        st = lstat_in(directory, name)
    except OSError as e:
        raise map_oserror(e, where, reading=True) from e
    if st is not None and stat.S_ISLNK(st.st_mode):
        link = symlink_error(name)
        raise map_oserror(link, where, reading=True) from link
    if st is None or not stat.S_ISREG(st.st_mode):
        raise NotFoundError(f"{where}: no such object")
    record = Sidecars.read_in(meta_dir, name, st)
    if record is not None:
        etag: str = record["etag"]
        ctype, meta = record.get("content_type"), record.get("metadata")
    else:
        ctype, meta = None, None
        cached = etags.get(st)
        if cached is not None:
            etag = cached
        else:
            etag, st = _md5_of(directory, name, where)
            etags.remember(st, etag)
    if not full:
        return ObjectInfo(key=key, size=st.st_size, etag=etag, last_modified=mtime_datetime(st))
    return ObjectInfo(
        key=key,
        size=st.st_size,
        etag=etag,
        last_modified=mtime_datetime(st),
        content_type=normalize_content_type(ctype if isinstance(ctype, str) else None),
        metadata={str(k): str(v) for k, v in meta.items()} if isinstance(meta, dict) else {},
    )


def _md5_of(directory: int, name: str, where: str) -> tuple[str, os.stat_result]:
    """The hex MD5 of the regular file ``name`` of ``directory`` and its status."""
    try:
        fd = os.open(name, READ_FLAGS | NOFOLLOW, dir_fd=directory)
    except OSError as e:
        raise map_oserror(e, where, reading=True) from e
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotFoundError(f"{where}: no such object")
        md5 = hashlib.md5(usedforsecurity=False)
        offset = 0
        while piece := os.pread(fd, IO_CHUNK, offset):
            md5.update(piece)
            offset += len(piece)
    except OSError as e:
        raise map_oserror(e, where, reading=True) from e
    finally:
        os.close(fd)
    return md5.hexdigest(), st


class _Walk:
    """One listing's walk (see the module docstring)."""

    def __init__(self, root: int, uri: str, strict: bool, etags: EtagCache) -> None:
        self.root = root
        self.uri = uri.rstrip("/")
        self.strict = strict
        self.etags = etags

    def objects(
        self, parts: list[str], name_prefix: str, start_after: str | None, collapse: bool
    ) -> Generator[ObjectInfo | CommonPrefix, None, None]:
        key_prefix = "".join(p + "/" for p in parts)
        fd = open_listed(self.root, parts)
        if fd < 0:
            return
        meta = -1
        try:
            entries = scan_dir(fd, not parts, f"{self.uri}/{key_prefix}".rstrip("/"), strict=self.strict)
            meta = open_listed(self.root, [META_DIR, *parts])
            for sort_key, name, is_dir in entries:
                if not sort_key.startswith(name_prefix):
                    continue
                full = key_prefix + sort_key
                inside = is_dir and start_after is not None and start_after.startswith(full)
                if start_after is not None and not inside and full <= start_after:
                    continue  # the whole entry sorts at or before start_after
                if not is_dir:
                    with contextlib.suppress(NotFoundError):  # deleted while listing
                        yield self.describe(fd, meta, name, full)
                    continue
                if len(full.encode("utf-8", "surrogateescape")) >= MAX_KEY_BYTES:
                    continue  # no key below it is short enough to be one (and depth stays bounded)
                if collapse and start_after is not None and full <= start_after:
                    continue  # a common prefix is listed only if it sorts after start_after
                fd, meta = _closed(fd, meta)
                yield from self._below([*parts, name], full, start_after if inside else None, collapse)
                fd = open_listed(self.root, parts)  # again: a directory's descriptors at a time
                if fd < 0:
                    return  # removed (or swapped for a link) meanwhile: nothing more to list here
                meta = open_listed(self.root, [META_DIR, *parts])
        finally:
            _closed(fd, meta)

    def _below(
        self, parts: list[str], full: str, start_after: str | None, collapse: bool
    ) -> Generator[ObjectInfo | CommonPrefix, None, None]:
        below = self.objects(parts, "", start_after, False)
        if not collapse:
            yield from below
            return
        with contextlib.closing(below):
            if next(below, None) is not None:
                yield CommonPrefix(full)

    def describe(self, directory: int, meta: int, name: str, key: str) -> ObjectInfo:
        try:
            return describe_in(
                directory, meta, name, key, where=f"{self.uri}/{key}", etags=self.etags, full=False
            )
        except BadInputError as e:
            if isinstance(e.__cause__, OSError) and e.__cause__.errno == SYMLINK:
                raise NotFoundError(str(e)) from e  # swapped for a link while listing: skipped
            raise


def _closed(*fds: int) -> tuple[int, int]:
    for fd in fds:
        if fd >= 0:
            os.close(fd)
    return -1, -1


def walk_objects(
    root: Root,
    uri: str,
    prefix: str,
    delimiter: str | None,
    start_after: str | None,
    *,
    strict: bool,
    etags: EtagCache,
) -> Generator[ObjectInfo | CommonPrefix, None, None]:
    """``list``'s objects and common prefixes below ``prefix``, in key order (see the module doc).
    A missing root lists nothing; a root that became a link since the store opened is refused."""
    dir_part, _, name_prefix = prefix.rpartition("/")
    segments = dir_part.split("/") if dir_part else []
    if not segments_ok(segments):
        return  # no valid local key can start with this prefix
    try:
        root_fd = root.open()
    except (FileNotFoundError, NotADirectoryError):
        return
    except OSError as e:
        raise map_oserror(e, uri, reading=False) from e
    try:
        yield from _Walk(root_fd, uri, strict, etags).objects(
            segments, name_prefix, start_after, delimiter == "/"
        )
    finally:
        os.close(root_fd)
