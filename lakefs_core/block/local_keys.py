"""Bulk key operations of :class:`~lakefs_core.block.local.LocalBlockStore`: the lean listing behind
``list_keys`` and the batch delete behind ``delete_batch`` (synchronous; the store runs them in worker
threads, many entries per thread hop).

:func:`walk_keys` yields :class:`~lakefs_core.block.base.KeyInfo` (in per-directory lists) in
ascending key order from one
``os.scandir`` and one ``stat`` per object: no sidecar read, no MD5. It skips exactly what ``list``
skips (the store's temporary files, the root's metadata directory, names that are not UTF-8) and, like
``list``, follows a symbolic link to a file but never into a directory.

:func:`delete_keys` unlinks each key's file (a missing one counts as deleted), then its metadata
sidecar unless a concurrent ``put`` already replaced the data file, then prunes each emptied directory
once per batch (not once per key). Failures are reported per key: permission errors are final
(``AccessDenied``), a full or read-only filesystem too, anything else is transient.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Callable, Generator, Mapping, Sequence
from pathlib import Path

from lakefs_core.block.base import DeleteResult, FailedKey, KeyInfo
from lakefs_core.block.local_files import META_DIR, map_oserror, prune, segments_ok
from lakefs_core.block.local_leftovers import TMP_PREFIX
from lakefs_core.errors import LakeFSError, NotFoundError

# (sort key, entry, is a directory): a directory sorts as ``name/``, as its keys do. Sort keys are
# unique within a directory, so sorting never compares the entries themselves.
_Entry = tuple[str, os.DirEntry[str], bool]


def _entries(directory: str, at_root: bool, where: str) -> list[_Entry]:
    out: list[_Entry] = []
    try:
        with os.scandir(directory) as it:
            for entry in it:
                name = entry.name
                if name.startswith(TMP_PREFIX) or (at_root and name == META_DIR):
                    continue
                try:
                    name.encode("utf-8")
                    if entry.is_dir(follow_symlinks=False):
                        out.append((name + "/", entry, True))
                    elif entry.is_file():
                        out.append((name, entry, False))
                except (UnicodeEncodeError, OSError):
                    continue  # not a key (not UTF-8), or gone while we looked
    except (FileNotFoundError, NotADirectoryError):
        return []
    except OSError as e:
        raise map_oserror(e, f"{where}: listing {directory}", reading=False) from e
    out.sort(key=lambda e: e[0])
    return out


def walk_keys(
    root: Path, where: str, prefix: str, start_after: str | None
) -> Generator[list[KeyInfo], None, None]:
    """Every object below ``prefix`` of the store rooted at ``root`` (named ``where`` in errors) whose
    key sorts after ``start_after``, in ascending key order, in chunks (at most one directory each:
    handing over lists, not items, keeps the generator overhead per directory, not per key)."""
    dir_part, _, name_prefix = prefix.rpartition("/")
    segments = dir_part.split("/") if dir_part else []
    if not segments_ok(segments):
        return  # no valid local key starts with this prefix
    yield from _walk(
        os.fspath(root),
        os.path.join(root, *segments),
        key_prefix=dir_part + "/" if dir_part else "",
        name_prefix=name_prefix,
        start_after=start_after,
        where=where,
    )


def _walk(
    root: str, directory: str, *, key_prefix: str, name_prefix: str, start_after: str | None, where: str
) -> Generator[list[KeyInfo], None, None]:
    chunk: list[KeyInfo] = []
    for sort_key, entry, is_dir in _entries(directory, directory == root, where):
        if not sort_key.startswith(name_prefix):
            continue
        full = key_prefix + sort_key
        if start_after is not None and full <= start_after and not (is_dir and start_after.startswith(full)):
            continue  # the entry (a whole directory included) sorts at or before start_after
        if is_dir:
            if chunk:
                yield chunk
                chunk = []
            inside = start_after if start_after is not None and start_after.startswith(full) else None
            yield from _walk(
                root, entry.path, key_prefix=full, name_prefix="", start_after=inside, where=where
            )
            continue
        try:
            st = entry.stat()  # follows a symbolic link, as ``list`` does
        except (FileNotFoundError, NotADirectoryError):
            continue  # deleted while listing
        except OSError as e:
            raise map_oserror(e, f"{where}/{full}", reading=True) from e
        if stat.S_ISREG(st.st_mode):
            chunk.append(KeyInfo(full, st.st_size, st.st_mtime_ns / 1e9))
    if chunk:
        yield chunk


def _failure(key: str, e: OSError) -> FailedKey:
    if e.errno in (errno.EACCES, errno.EPERM):
        return FailedKey(key, "AccessDenied", False)
    if e.errno in (errno.EROFS, errno.ENOSPC, errno.EDQUOT):
        return FailedKey(key, errno.errorcode.get(e.errno or 0, "OSError"), False)
    return FailedKey(key, errno.errorcode.get(e.errno or 0, "OSError"), True)


def delete_keys(
    root: Path,
    meta_root: Path,
    batch: Sequence[tuple[Sequence[str], str]],
    *,
    etags: Mapping[str, str],
    etag_of: Callable[[Sequence[str], str], str],
    sidecar_is_current: Callable[[Sequence[str], os.stat_result], bool],
) -> DeleteResult:
    """Delete the ``(segments, key)`` of ``batch`` (see the module docstring). ``etags`` holds the
    ETag each conditional key must still have (``etag_of`` computes the current one); a data file
    found again after the unlink keeps its sidecar when ``sidecar_is_current`` says it is its own.
    Paths are plain strings here: building ``Path`` objects cost more than the unlinks."""
    result = DeleteResult()
    root_s, meta_s = os.fspath(root), os.fspath(meta_root)
    emptied: set[str] = set()
    for parts, key in batch:
        path = f"{root_s}/{key}"  # the key's segments were checked: a plain relative path
        if key in etags and not _etag_matches(key, parts, etags[key], etag_of, result):
            continue
        try:
            os.unlink(path)
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            pass  # no object under this key (a directory is keys below it, not this key)
        except OSError as e:
            if e.errno != errno.EISDIR:
                result.failed.append(_failure(key, e))
                continue
        _drop_sidecar(path, f"{meta_s}/{key}", parts, sidecar_is_current)
        emptied.add(key.rpartition("/")[0])
        result.deleted.append(key)
    for directory in sorted(emptied, key=lambda d: d.count("/"), reverse=True):
        if directory:
            prune(Path(f"{root_s}/{directory}"), root)
            prune(Path(f"{meta_s}/{directory}"), meta_root)
    return result


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
        result.failed.append(FailedKey(key, type(e).__name__, e.retryable))
    return False


def _drop_sidecar(
    path: str,
    meta_path: str,
    parts: Sequence[str],
    sidecar_is_current: Callable[[Sequence[str], os.stat_result], bool],
) -> None:
    try:
        current: os.stat_result | None = os.stat(path)
    except OSError:
        current = None
    if current is not None and stat.S_ISREG(current.st_mode) and sidecar_is_current(parts, current):
        return  # a concurrent put replaced the object: its sidecar stays
    with contextlib.suppress(OSError):
        os.unlink(meta_path)
