"""Group fsync of directories for :class:`~lakefs_core.block.local.LocalBlockStore` (synchronous:
called from its worker threads).

A put makes its file's name durable with an ``fsync`` of the file's directory after linking it
into place. Concurrent puts of one process mostly write to one directory (a slice,
:class:`~lakefs_core.keys.SliceAllocator`), and one ``fsync`` of a directory makes every entry
made in it before that fsync started durable. :meth:`DirSyncs.sync` therefore returns once an
``fsync`` of the directory that STARTED after the call returned without error: it runs one itself
when none is running, else waits for the running one to end and for the next, which one of the
waiters runs for all of them. Durability is unchanged (every caller's own link precedes a sync that
began after it); the number of directory fsyncs falls to about one per running fsync's duration.

A failed fsync is the failure of every caller that waited on it (a later fsync may report success
although the failed writeback was lost: Linux clears the error once reported), never retried here.
Directories are told apart by device and inode, not by path: a directory removed and made again
under the same path is another directory. The state of a directory lives only while calls for it
are in progress.
"""

from __future__ import annotations

import os
import threading

__all__ = ["DirSyncs"]


class _Directory:
    """The fsync state of one directory: syncs started and done, numbered from 1."""

    __slots__ = ("done", "failed", "ready", "running", "started", "users")

    def __init__(self, lock: threading.Lock) -> None:
        self.ready = threading.Condition(lock)
        self.started = 0
        self.done = 0
        self.running = False
        self.failed: dict[int, OSError] = {}  # sync number -> its error
        self.users = 0


class DirSyncs:
    """Shared fsyncs of the directories of one store (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._dirs: dict[tuple[int, int], _Directory] = {}

    def sync(self, fd: int) -> None:
        """Return once an ``fsync`` of the directory open as ``fd``, started after this call, has
        succeeded; raise its ``OSError`` if it failed."""
        st = os.fstat(fd)
        key = (st.st_dev, st.st_ino)
        with self._lock:
            directory = self._dirs.get(key)
            if directory is None:
                directory = self._dirs[key] = _Directory(self._lock)
            directory.users += 1
            target = directory.started + 1  # the first sync that starts from now on
            try:
                while directory.done < target:
                    if directory.running:
                        directory.ready.wait()
                    else:
                        self._run(directory, fd)
                error = directory.failed.get(target)
            finally:
                directory.users -= 1
                if directory.users == 0:
                    del self._dirs[key]
        if error is not None:
            raise error

    def _run(self, directory: _Directory, fd: int) -> None:
        """One fsync for every caller waiting on ``directory`` (called and returning with the
        lock held; released while the fsync runs)."""
        directory.running = True
        directory.started += 1
        number = directory.started
        error: OSError | None = None
        self._lock.release()
        try:
            os.fsync(fd)
        except OSError as e:
            error = e
        finally:
            self._lock.acquire()
            directory.running = False
            directory.done = number
            if error is not None:
                directory.failed[number] = error
            directory.ready.notify_all()
