"""The compiled path of the local store's batched small puts (``put_batch``), with its fallback.

A hop of ``put_batch`` (a few dozen objects, one worker thread) hands the objects this path can
take to the optional extension ``_localput``, which does every system call of a bare create
(read the source, temporary file, write, ``fstat``, close, ``link``/``unlink`` or ``rename``,
sidecar probe; for a create-only put an unnamed file linked into place where the system has
them) without the GIL, the whole hop at once. Every one of those calls is relative to the
descriptor of the object's directory, which this module opens once per directory and
hop below the store's root without following a symbolic link
(:mod:`~lakefs_core.block.local_beneath`): the extension only ever names entries of it.

Why compiled: in the pure-Python path each of
those ~10 calls per object gives the GIL up and takes it back, and while the event loop encodes
and journals entries on the other core each take-back waits for it; the writer threads then move
at the loop's pace instead of the disk's.

Which objects: bare ones (at most ``BARE_MAX_BYTES``, default content type, no metadata: no
sidecar to write) whose body is bytes or a :class:`~lakefs_core.block.base.SourceFile`, and only
when files are not fsynced one by one (a batch synced by ``syncfs``, or no fsync at all). Every
other object, and every object the compiled path gives up on (``FALLBACK``: a directory to make
or that cannot be opened, a source whose size changed, an existing target, a link at the target's name,
any error before the object is in place; the
extension has removed its temporary file), goes through the store's pure-Python put, which makes
directories, retries and raises the store's typed errors. So the outcome of a batch is the same
on both paths; ``tests/block/test_local_batch.py`` checks it, including every fallback.
"""

from __future__ import annotations

import hashlib
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from lakefs_core.block._common import DEFAULT_CONTENT_TYPE, CheckedPut
from lakefs_core.block.base import ObjectInfo, SourceFile
from lakefs_core.block.local_beneath import Dirs
from lakefs_core.block.local_files import CREATE_FLAGS, META_DIR, map_oserror, ns_datetime
from lakefs_core.block.local_leftovers import temp_names
from lakefs_core.format.accel import load

#: The compiled module, or None (not built, or ``LAKEFS_PURE_PYTHON=1``).
LOCALPUT = load("lakefs_core.block._localput")

# The extension's outcomes per object (_localput.pyx has the same numbers).
DONE, FALLBACK, UNLINK_FAILED = 0, 1, 2


class Written(NamedTuple):
    """An object the compiled path put in place, for the store's bookkeeping."""

    position: int  # in the batch
    info: ObjectInfo
    st: tuple[int, int, int, int]  # (dev, ino, size, mtime_ns): the ETag cache's key
    has_sidecar: bool  # something is at the key's sidecar name: the store checks whether it is stale


# What os.fsencode does, without its Python-level call: four names per object in a hop, and this
# runs in writer threads that hold the GIL while they prepare a hop (see the module docstring).
_FS_ENCODING, _FS_ERRORS = sys.getfilesystemencoding(), sys.getfilesystemencodeerrors()


def eligible(item: CheckedPut, bare_max: int) -> bool:
    """Whether the compiled path may write ``item``: a bare object from bytes or a source file."""
    if item.content_type != DEFAULT_CONTENT_TYPE or item.metadata:
        return False
    body = item.body
    if isinstance(body, bytes):
        return len(body) <= bare_max
    return isinstance(body, SourceFile) and 0 <= body.size <= bare_max


def put_compiled(
    items: Sequence[CheckedPut],
    indices: Sequence[int],
    parts: Sequence[Sequence[str]],
    dirs: Dirs,
    where: Callable[[str], str],
    *,
    exclusive: bool,
    unnamed: bool,
) -> tuple[list[Written], list[int], bool]:
    """Write ``items[i]`` (key segments ``parts[i]``) for each ``i`` in ``indices`` (all
    :func:`eligible`) in one call of the extension, each in the descriptor of its directory from
    ``dirs`` (opened once per directory without following a link; an object whose directory
    cannot be opened is left to the pure path, which makes it or raises the right error); ``where(key)``:
    its URI for errors. Create-only (``exclusive``) ones go through unnamed files when ``unnamed``
    (see ``_localput``). Returns what was written, the indices left for the pure-Python path, and
    whether unnamed files still work on this system (pass that next time). A failure after an
    object is in place (its temporary name could not be removed) raises, as the pure path does.
    Blocking: run it in a worker thread. Requires :data:`LOCALPUT`."""
    assert LOCALPUT is not None
    enc, errors = _FS_ENCODING, _FS_ERRORS
    sources: list[bytes | None] = []
    datas: list[bytes | None] = []
    sizes: list[int] = []
    tmps: list[bytes] = []
    dir_fds: list[int] = []
    names: list[bytes] = []
    meta_fds: list[int] = []
    taken: list[int] = []
    rest: list[int] = []
    for i, tmp in zip(indices, temp_names(len(indices)), strict=True):
        segments = parts[i]
        directory = segments[:-1]
        try:
            dir_fd = dirs.get(directory)
        except OSError:
            rest.append(i)  # missing (the pure path makes it), or a file or a link in the way
            continue
        body = items[i].body
        if isinstance(body, SourceFile):
            source = body.path
            sources.append(source.encode(enc, errors) if type(source) is str else os.fsencode(source))
            datas.append(None)
            sizes.append(body.size)
        else:
            assert isinstance(body, bytes)
            sources.append(None)
            datas.append(body)
            sizes.append(len(body))
        taken.append(i)
        tmps.append(tmp.encode(enc, errors))
        dir_fds.append(dir_fd)
        names.append(segments[-1].encode(enc, errors))
        meta_fds.append(dirs.find((META_DIR, *directory)))  # -1: no sidecar directory, no sidecar
    outcomes, unnamed = LOCALPUT.put_files(
        sources, datas, sizes, tmps, dir_fds, names, meta_fds, CREATE_FLAGS, exclusive, unnamed
    )
    written = _written(items, taken, outcomes, where, rest)
    return written, sorted(rest), bool(unnamed)


def _written(
    items: Sequence[CheckedPut],
    taken: Sequence[int],
    outcomes: Sequence[tuple[Any, ...]],
    where: Callable[[str], str],
    rest: list[int],
) -> list[Written]:
    """What the extension wrote of ``items[i]`` for each ``i`` in ``taken`` (its ``outcomes``, in
    that order); the indices it left to the pure path are appended to ``rest``."""
    written: list[Written] = []
    for i, (status, err, data, dev, ino, size, mtime_ns, has_sidecar) in zip(taken, outcomes, strict=True):
        if status == FALLBACK:
            rest.append(i)
            continue
        if status == UNLINK_FAILED:
            raise map_oserror(OSError(err, os.strerror(err)), where(items[i].key), reading=False)
        info = ObjectInfo(
            key=items[i].key,
            size=size,
            etag=hashlib.md5(data, usedforsecurity=False).hexdigest(),
            last_modified=ns_datetime(mtime_ns),
            content_type=DEFAULT_CONTENT_TYPE,
            metadata={},
        )
        written.append(Written(i, info, (dev, ino, size, mtime_ns), bool(has_sidecar)))
    return written


def keep_for_sync(dirs: Dirs, sync_fds: dict[int, int]) -> None:
    """Keep a descriptor of each filesystem a hop wrote to (``sync_fds``: device -> descriptor,
    shared by a batch's hops) until the batch's ``syncfs``."""
    for fd in dirs.opened():
        try:
            device = os.fstat(fd).st_dev
        except OSError:
            continue
        if device not in sync_fds:
            kept = os.dup(fd)
            if sync_fds.setdefault(device, kept) != kept:
                os.close(kept)  # another hop kept one meanwhile
