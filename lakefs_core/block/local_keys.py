"""Bulk key operations of :class:`~lakefs_core.block.local.LocalBlockStore`: the lean listing behind
``list_keys`` and the batch delete behind ``delete_batch`` (synchronous; the store runs them in worker
threads, many entries per thread hop).

:func:`walk_keys` yields :class:`~lakefs_core.block.base.KeyInfo` (in per-directory lists) in
ascending key order from one ``os.scandir`` and one ``fstatat`` per object: no sidecar read, no
MD5. It skips exactly what ``list`` skips (the store's temporary files, the root's metadata
directory, names that are not UTF-8, and every symbolic link: it never descends into a linked
directory nor reports a linked file). Each directory is opened below the root's descriptor without
following a link (:mod:`~lakefs_core.block.local_beneath`), and only one directory is held open
at a time however deep the tree (its parent is opened again after it).

:func:`delete_keys` unlinks each key's file (a missing one counts as deleted) through the
descriptor of its directory, opened once per directory and batch; then its metadata sidecar unless
a concurrent ``put`` already replaced the data file; then prunes each emptied directory once per
batch (not once per key). A key whose path holds a symbolic link (a linked directory on the way, or
the key's own name a link) is never unlinked: it fails, finally (``SymlinkRefused``), and nothing
outside the tree is touched. Other failures are reported per key: permission errors are final
(``AccessDenied``), a full or read-only filesystem too, anything else is transient.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable, Generator, Mapping, Sequence

from lakefs_core.block._common import MAX_KEY_BYTES
from lakefs_core.block.base import DeleteResult, FailedKey, KeyInfo
from lakefs_core.block.local_beneath import SYMLINK, Dirs, Root, lstat_in, open_dir
from lakefs_core.block.local_files import map_oserror, prune, scan_dir, segments_ok
from lakefs_core.block.local_meta import Sidecars
from lakefs_core.errors import LakeFSError, NotFoundError

#: The failure code of a key refused because its path holds a symbolic link (final: retrying
#: cannot make the link go away, and the key is not ours to reach through it).
SYMLINK_REFUSED = "SymlinkRefused"


def open_listed(root: int, parts: Sequence[str]) -> int:
    """The descriptor of the directory ``parts`` to list, or -1 when there is none to list (missing,
    a file, or reached only through a link: listings skip links)."""
    try:
        return open_dir(root, parts)
    except (FileNotFoundError, NotADirectoryError):
        return -1
    except OSError as e:
        if e.errno == SYMLINK:
            return -1
        raise


def walk_keys(
    root: Root, where: str, prefix: str, start_after: str | None
) -> Generator[list[KeyInfo], None, None]:
    """Every object below ``prefix`` of the store rooted at ``root`` (named ``where`` in errors) whose
    key sorts after ``start_after``, in ascending key order, in chunks (at most one directory each:
    handing over lists, not items, keeps the generator overhead per directory, not per key). A
    missing root lists nothing; a root that became a link since the store opened is refused."""
    dir_part, _, name_prefix = prefix.rpartition("/")
    segments = dir_part.split("/") if dir_part else []
    if not segments_ok(segments):
        return  # no valid local key starts with this prefix
    try:
        root_fd = root.open()
    except (FileNotFoundError, NotADirectoryError):
        return
    except OSError as e:
        raise map_oserror(e, where, reading=False) from e
    try:
        yield from _walk(
            root_fd,
            segments,
            key_prefix=dir_part + "/" if dir_part else "",
            name_prefix=name_prefix,
            start_after=start_after,
            where=where,
        )
    finally:
        os.close(root_fd)


def _walk(
    root: int,
    parts: list[str],
    *,
    key_prefix: str,
    name_prefix: str,
    start_after: str | None,
    where: str,
) -> Generator[list[KeyInfo], None, None]:
    fd = open_listed(root, parts)
    if fd < 0:
        return
    try:
        entries = scan_dir(fd, not parts, f"{where}/{key_prefix}".rstrip("/"))
        chunk: list[KeyInfo] = []
        for sort_key, name, is_dir in entries:
            if not sort_key.startswith(name_prefix):
                continue
            full = key_prefix + sort_key
            if (
                start_after is not None
                and full <= start_after
                and not (is_dir and start_after.startswith(full))
            ):
                continue  # the entry (a whole directory included) sorts at or before start_after
            if is_dir:
                if len(full.encode("utf-8", "surrogateescape")) >= MAX_KEY_BYTES:
                    continue  # no key below it is short enough to be one (and depth stays bounded)
                if chunk:
                    yield chunk
                    chunk = []
                os.close(fd)
                fd = -1
                inside = start_after if start_after is not None and start_after.startswith(full) else None
                yield from _walk(
                    root, [*parts, name], key_prefix=full, name_prefix="", start_after=inside, where=where
                )
                fd = open_listed(root, parts)  # again: one directory open at a time
                if fd < 0:
                    return  # removed (or swapped for a link) meanwhile: nothing more to list here
                continue
            try:
                st = lstat_in(fd, name)
            except OSError as e:
                raise map_oserror(e, f"{where}/{full}", reading=True) from e
            if st is not None and stat.S_ISREG(st.st_mode):  # deleted or swapped while listing: skipped
                chunk.append(KeyInfo(full, st.st_size, st.st_mtime_ns / 1e9))
        if chunk:
            yield chunk
    finally:
        if fd >= 0:
            os.close(fd)


def _failure(key: str, e: OSError) -> FailedKey:
    if e.errno == SYMLINK:
        return FailedKey(key, SYMLINK_REFUSED, False)
    if e.errno in (errno.EACCES, errno.EPERM):
        return FailedKey(key, "AccessDenied", False)
    if e.errno in (errno.EROFS, errno.ENOSPC, errno.EDQUOT):
        return FailedKey(key, errno.errorcode.get(e.errno or 0, "OSError"), False)
    return FailedKey(key, errno.errorcode.get(e.errno or 0, "OSError"), True)


def delete_keys(
    dirs: Dirs,
    sidecars: Sidecars,
    batch: Sequence[tuple[Sequence[str], str]],
    *,
    etags: Mapping[str, str],
    etag_of: Callable[[Sequence[str], str], str],
) -> DeleteResult:
    """Delete the ``(segments, key)`` of ``batch`` below ``dirs``' root (see the module docstring).
    ``etags`` holds the ETag each conditional key must still have (``etag_of`` computes the
    current one); a data file found again after the unlink keeps its sidecar when it is its own."""
    result = DeleteResult()
    emptied: set[tuple[str, ...]] = set()
    for parts, key in batch:
        if key in etags and not _etag_matches(key, parts, etags[key], etag_of, result):
            continue
        try:
            gone = _unlink_object(dirs, parts)
        except OSError as e:
            result.failed.append(_failure(key, e))
            continue
        _drop_sidecar(dirs, sidecars, parts)
        if gone:
            emptied.add(tuple(parts[:-1]))
        result.deleted.append(key)
    for directory in sorted(emptied, key=len, reverse=True):
        if directory:
            prune(dirs, directory)
            prune(dirs, Sidecars.directory([*directory, ""]), keep=1)
    return result


def _unlink_object(dirs: Dirs, parts: Sequence[str]) -> bool:
    """Unlink the key's regular file; False when there is none (nothing to delete: missing, a
    directory, i.e. keys below it). Raises OSError, :data:`SYMLINK` for a link on the way or at
    the key's name: a link is never removed nor followed."""
    try:
        directory = dirs.get(parts[:-1])
    except (FileNotFoundError, NotADirectoryError):
        return False
    st = lstat_in(directory, parts[-1])
    if st is None or stat.S_ISDIR(st.st_mode):
        return False
    if stat.S_ISLNK(st.st_mode):
        raise OSError(SYMLINK, os.strerror(SYMLINK), parts[-1])
    try:
        os.unlink(parts[-1], dir_fd=directory)
    except (FileNotFoundError, IsADirectoryError):
        return False
    return True


def _etag_matches(
    key: str,
    parts: Sequence[str],
    etag: str,
    etag_of: Callable[[Sequence[str], str], str],
    result: DeleteResult,
) -> bool:
    """True when the object still has ``etag`` (or is gone); else records the failure in ``result``."""
    try:
        if etag_of(parts, key) == etag:
            return True
        result.failed.append(FailedKey(key, "PreconditionFailed", False))
    except NotFoundError:
        return True  # already gone: deleted
    except LakeFSError as e:
        code = SYMLINK_REFUSED if isinstance(e.__cause__, OSError) and e.__cause__.errno == SYMLINK else None
        result.failed.append(FailedKey(key, code or type(e).__name__, e.retryable))
    return False


def _drop_sidecar(dirs: Dirs, sidecars: Sidecars, parts: Sequence[str]) -> None:
    directory = dirs.find(parts[:-1])
    current = lstat_in(directory, parts[-1]) if directory >= 0 else None
    if (
        current is not None
        and stat.S_ISREG(current.st_mode)
        and sidecars.read(dirs, parts, current) is not None
    ):
        return  # a concurrent put replaced the object: its sidecar stays
    sidecars.remove(dirs, parts)
