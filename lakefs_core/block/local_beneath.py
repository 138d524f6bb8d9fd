"""Opening directories and files beneath a root without ever following a symbolic link (synchronous).

A local store's namespace, and a download's destination, are directory trees that other people and
programs can write: a symbolic link planted anywhere below the root (``data/<slice> -> /elsewhere``,
``.lakefs-meta -> /etc``) must never take a write, a delete or a read outside the tree. So nothing
here resolves a path as a string. Every file operation of the local store and of ``fs download``
goes through a directory descriptor opened by this module and names one plain entry of it
(``openat``, ``unlinkat``, ``linkat``, ``renameat``, ``mkdirat``, ``fstatat`` with ``dir_fd``):

- :func:`open_dir` opens ``base/<segments>`` as a directory descriptor with Linux's ``openat2``
  (``RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS``: one system call, the kernel
  refuses a link at any component and any escape), or, where the kernel has no ``openat2`` (before
  5.6, or a seccomp filter that refuses it), one ``openat(O_NOFOLLOW | O_DIRECTORY)`` per
  component. With ``create`` the missing components are made one ``mkdirat`` at a time, each then
  opened without following. A symbolic link at any component fails with ``OSError(ELOOP)``
  (:data:`SYMLINK`), whichever way it was found.
- :class:`Root` is a tree's root: its real path is resolved ONCE (``os.path.realpath``, when the
  store or the download starts: a root given through a link is taken where it points then), and
  every use opens that real path afresh refusing links at every component, so a root (or one of its
  parents) swapped for a link later is refused, not followed. A root that does not exist is made,
  one component at a time, only by writers.
- :class:`Dirs` caches one operation's directory descriptors (a batch's slice directory is opened
  once, then each object is created in it with ``openat``) and closes them all at the end.

Segments are checked by the caller (no empty, ``.`` or ``..`` segment, no ``/`` or NUL): this
module relies on that only for speed; ``RESOLVE_BENEATH`` and the per-component walk both keep a
``..`` from leaving the root anyway.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import stat
import sys
import threading
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import cast

#: The errno of every refused symbolic link (``openat2`` with ``RESOLVE_NO_SYMLINKS`` and
#: ``O_NOFOLLOW`` report ELOOP; an ``O_DIRECTORY`` open of a link found by the walk is made to).
SYMLINK = errno.ELOOP
CLOEXEC = getattr(os, "O_CLOEXEC", 0)
NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | CLOEXEC
_RESOLVE_NO_MAGICLINKS, _RESOLVE_NO_SYMLINKS, _RESOLVE_BENEATH = 0x02, 0x04, 0x08
_RESOLVE_CACHED = 0x20  # Linux 5.12: EAGAIN rather than a lookup that would wait for the disk
_SYS_OPENAT2 = 437  # the same number on every Linux architecture (the generic syscall table)
_CREATE_ATTEMPTS = 4  # a directory made here and pruned by a concurrent delete before it was opened


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


def _load_syscall() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        fn = ctypes.CDLL(None, use_errno=True).syscall
    except (OSError, AttributeError):
        return None
    fn.restype = ctypes.c_long
    return cast("Callable[..., int]", fn)


_SYSCALL = _load_syscall()
# syscall(2) is variadic: every argument is passed at its full width
_NR, _HOW_SIZE = ctypes.c_long(_SYS_OPENAT2), ctypes.c_size_t(ctypes.sizeof(_OpenHow))
_AT_FDCWD = -100
# Cleared for good the first time the kernel answers that it has no openat2 (ENOSYS, or EPERM
# from a seccomp filter); tests clear it to exercise the per-component walk.
_state = {"openat2": _SYSCALL is not None, "cached": True}  # cached: RESOLVE_CACHED not refused yet
_state_lock = threading.Lock()


def openat2_in_use() -> bool:
    """Whether :func:`open_dir` and :func:`open_file` use ``openat2`` (else the per-component walk)."""
    return _state["openat2"]


def use_openat2(on: bool) -> bool:
    """Switch ``openat2`` on (where the system has it) or off; returns the previous setting. For
    tests of the per-component walk."""
    with _state_lock:
        before = _state["openat2"]
        _state["openat2"] = on and _SYSCALL is not None
        return before


def _openat2(base: int, path: str, flags: int, mode: int, beneath: bool) -> int | None:
    """``openat2`` refusing links (and, when ``beneath``, any escape from ``base``); None when this
    kernel has none (the caller walks). Raises OSError like ``os.open``."""
    assert _SYSCALL is not None
    resolve = _RESOLVE_NO_SYMLINKS | _RESOLVE_NO_MAGICLINKS | (_RESOLVE_BENEATH if beneath else 0)
    how = _OpenHow(flags | CLOEXEC, mode if flags & os.O_CREAT else 0, resolve)
    encoded = os.fsencode(path)
    for _ in range(_CREATE_ATTEMPTS):
        fd = _SYSCALL(_NR, ctypes.c_long(base), encoded, ctypes.byref(how), _HOW_SIZE)
        if fd >= 0:
            return int(fd)
        err = ctypes.get_errno()
        if err in (errno.ENOSYS, errno.EPERM) and not _kernel_has_openat2():
            use_openat2(False)
            return None
        if err == errno.EXDEV:
            err = SYMLINK  # an escape from base: only a link (an absolute one) can lead out
        if err not in (errno.EAGAIN, errno.EINTR):  # EAGAIN: a concurrent rename; the kernel asks to retry
            raise OSError(err, os.strerror(err), path)
    return None  # still racing a rename: the walk, which cannot be fooled by one either


def open_file_cached(root: Root, parts: Sequence[str], flags: int) -> int | None:
    """:func:`open_file` of ``root/<parts>`` (read flags: nothing is created) only if every
    component is in the kernel's caches (``openat2`` with ``RESOLVE_CACHED``, the root's real path
    included): the call never waits for the disk, so a caller on an event loop may make it. None
    when a lookup would have to wait, on a kernel without ``openat2``/``RESOLVE_CACHED``, and on any
    error (the caller then opens in a thread with :func:`open_file`, which answers the error)."""
    if not (_state["openat2"] and _state["cached"]) or _SYSCALL is None:
        return None
    refuse_links = _RESOLVE_NO_SYMLINKS | _RESOLVE_NO_MAGICLINKS | _RESOLVE_CACHED
    how = _OpenHow(DIR_FLAGS, 0, refuse_links)
    base = int(_SYSCALL(_NR, ctypes.c_long(_AT_FDCWD), os.fsencode(root.path), ctypes.byref(how), _HOW_SIZE))
    if base < 0:
        if ctypes.get_errno() == errno.EINVAL:  # a kernel before 5.12: no RESOLVE_CACHED, never ask again
            _state["cached"] = False
        return None
    try:
        how = _OpenHow(flags | CLOEXEC, 0, refuse_links | _RESOLVE_BENEATH)
        path = os.fsencode("/".join(parts))
        fd = int(_SYSCALL(_NR, ctypes.c_long(base), path, ctypes.byref(how), _HOW_SIZE))
    finally:
        os.close(base)
    return fd if fd >= 0 else None


def _kernel_has_openat2() -> bool:
    """Whether ``openat2`` works at all here: EPERM is also a legitimate answer for one path."""
    assert _SYSCALL is not None
    how = _OpenHow(DIR_FLAGS, 0, 0)
    fd = _SYSCALL(_NR, ctypes.c_long(_AT_FDCWD), b"/", ctypes.byref(how), _HOW_SIZE)
    if fd >= 0:
        os.close(fd)
        return True
    return False


def _refuse_if_link(base: int, name: str, e: OSError) -> OSError:
    """The error for an ``O_DIRECTORY | O_NOFOLLOW`` open of ``name`` that failed with ``e``: Linux
    answers ENOTDIR for a link there, made :data:`SYMLINK` here."""
    if e.errno == errno.ENOTDIR:
        with contextlib.suppress(OSError):
            if stat.S_ISLNK(os.stat(name, dir_fd=base, follow_symlinks=False).st_mode):
                return OSError(SYMLINK, os.strerror(SYMLINK), name)
    return e


def _open_child(base: int, name: str, create: bool) -> int:
    """The directory ``name`` in ``base`` (made first when missing and ``create``), never a link."""
    for _ in range(_CREATE_ATTEMPTS):
        try:
            return os.open(name, DIR_FLAGS | NOFOLLOW, dir_fd=base)
        except FileNotFoundError:
            if not create:
                raise
        except OSError as e:
            raise _refuse_if_link(base, name, e) from None
        with contextlib.suppress(FileExistsError):  # made meanwhile by another writer: fine
            os.mkdir(name, 0o777, dir_fd=base)  # never follows: a link in the way is EEXIST
    raise FileNotFoundError(errno.ENOENT, "directory kept disappearing", name)


def _walk(base: int, parts: Sequence[str], create: bool) -> int:
    fd = base
    try:
        for name in parts:
            child = _open_child(fd, name, create)
            if fd != base:
                os.close(fd)
            fd = child
    except BaseException:
        if fd != base:
            os.close(fd)
        raise
    return fd if fd != base else os.dup(base)


def open_dir(base: int, parts: Sequence[str], *, create: bool = False) -> int:
    """A new descriptor of the directory ``base/<parts>`` (``base`` itself for no parts), never
    through a link; with ``create`` the missing directories are made. Raises ``OSError``:
    ``ENOENT`` (missing), ``ENOTDIR`` (a component is a file), :data:`SYMLINK` (a link)."""
    if not parts:
        return os.dup(base)
    if _state["openat2"]:
        try:
            fd = _openat2(base, "/".join(parts), DIR_FLAGS, 0, True)
        except FileNotFoundError:
            if not create:
                raise
            fd = None  # made below, one component at a time
        if fd is not None:
            return fd
    return _walk(base, parts, create)


def open_file(base: int, parts: Sequence[str], flags: int, mode: int = 0o666) -> int:
    """``os.open`` of the file ``base/<parts>`` (at least one part), no component a link (the last
    one neither: ``O_NOFOLLOW``)."""
    if _state["openat2"]:
        fd = _openat2(base, "/".join(parts), flags, mode, True)
        if fd is not None:
            return fd
    parent = open_dir(base, parts[:-1]) if len(parts) > 1 else base
    try:
        return os.open(parts[-1], flags | NOFOLLOW | CLOEXEC, mode, dir_fd=parent)
    finally:
        if parent != base:
            os.close(parent)


def lstat_in(directory: int, name: str) -> os.stat_result | None:
    """The status of the entry ``name`` of ``directory`` itself (a link is not followed), or None
    when there is none."""
    try:
        return os.stat(name, dir_fd=directory, follow_symlinks=False)
    except (FileNotFoundError, NotADirectoryError):
        return None


def symlink_error(name: str) -> OSError:
    return OSError(SYMLINK, os.strerror(SYMLINK), name)


class Root:
    """A tree's root directory, by the real path it had when this was made (see the module doc)."""

    def __init__(self, path: str) -> None:
        self.path = os.path.realpath(path)
        self._parts = [p for p in self.path.split("/") if p]

    def __repr__(self) -> str:
        return f"Root({self.path!r})"

    def open(self, *, create: bool = False) -> int:
        """A new descriptor of the root, opened without following a link at any component of its
        real path; with ``create`` the missing directories are made. ``OSError`` as :func:`open_dir`
        (ENOENT when it does not exist)."""
        if _state["openat2"]:
            try:
                fd = _openat2(_AT_FDCWD, self.path, DIR_FLAGS, 0, False)  # an absolute path
            except FileNotFoundError:
                if not create:
                    raise
                fd = None
            if fd is not None:
                return fd
        top = os.open("/", DIR_FLAGS)
        try:
            return open_dir(top, self._parts, create=create) if self._parts else os.dup(top)
        finally:
            os.close(top)


class Dirs:
    """One operation's directory descriptors below a :class:`Root`, each opened once (a batch's
    hop, a delete batch, a streamed put). The root is opened on first use. Not thread-safe: one
    per thread at a time. Close it (or use it as a context manager)."""

    def __init__(self, root: Root, *, create: bool = False) -> None:
        self.root = root
        self.create = create  # whether the root itself may be made (a writer's)
        self._fds: dict[tuple[str, ...], int] = {}
        self._missing: set[tuple[str, ...]] = set()

    def __enter__(self) -> Dirs:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def root_fd(self) -> int:
        fd = self._fds.get(())
        if fd is None:
            fd = self._fds[()] = self.root.open(create=self.create)
        return fd

    def get(self, parts: Sequence[str], *, create: bool = False) -> int:
        """The descriptor of the directory ``<root>/<parts>`` (made when missing and ``create``),
        cached. ``OSError`` as :func:`open_dir`."""
        key = tuple(parts)
        fd = self._fds.get(key)
        if fd is None:
            root = self.root_fd()
            fd = self._fds[key] = open_dir(root, key, create=create)
            self._missing.discard(key)
        return fd

    def find(self, parts: Sequence[str]) -> int:
        """:meth:`get` without creating, or -1 when the directory cannot be opened (missing, a
        link, a file in the way); a miss is remembered until :meth:`forget`."""
        key = tuple(parts)
        if key in self._missing:
            return -1
        try:
            return self.get(key)
        except OSError:
            self._missing.add(key)
            return -1

    def forget(self, parts: Sequence[str]) -> None:
        """Drop the cached descriptor of ``parts`` (the directory was removed meanwhile)."""
        key = tuple(parts)
        self._missing.discard(key)
        fd = self._fds.pop(key, None) if key else None
        if fd is not None:
            os.close(fd)

    def opened(self) -> list[int]:
        """The descriptors open now (the root's included, when it was opened)."""
        return list(self._fds.values())

    def close(self) -> None:
        fds, self._fds = self._fds, {}
        self._missing.clear()
        for fd in fds.values():
            with contextlib.suppress(OSError):
                os.close(fd)
