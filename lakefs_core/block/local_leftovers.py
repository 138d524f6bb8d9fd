"""Temporary files of :class:`~lakefs_core.block.local.LocalBlockStore`: their names, and removing leftovers.

Every write stages its bytes (data files and metadata sidecars alike) in a temporary file beside the
target and renames it into place. A writer killed in between (``kill -9``, OOM, power loss) leaves
the temporary file behind. Their names make them findable by name and age::

    .lakefs-tmp-<host>-<pid>-<32 hex>      (<host>: 8 hex of the writer's host name hash;
                                            <pid>: the writer's process id)
    .lakefs-tmp-<32 hex>                   (written before the host and pid were recorded)

and their age is their mtime (every chunk written refreshes it). Object keys can never have a
segment starting with ``.lakefs-tmp-`` (the store refuses them), so such a file is never an object.

:func:`sweep_leftovers` removes, below a store root (including its ``.lakefs-meta`` sidecars), the
regular files whose name matches :data:`TMP_NAME` EXACTLY and whose mtime is older than the grace
period, except those whose writer is a live process of this host (same host hash, pid alive). It
never follows symlinks (every directory is opened below the root's descriptor with
:mod:`~lakefs_core.block.local_beneath`, a link at any component refused, and files are removed
with ``unlinkat`` in that directory), examines a bounded number of entries, and stops early when asked to. The
store runs it once per root per process (:func:`claim_root`), in a worker thread, in the background
of its first write, and only when no sweep of the root completed within the grace period: a
completed sweep touches the stamp ``<root>/.lakefs-meta/.lakefs-meta`` (a path no sidecar can
have), whose mtime the next process checks. Without that, every short-lived
writer (each ``fs upload``) walked the whole namespace again, a cost growing with the namespace and
competing for the GIL with the writes. A leftover is so removed within about two grace periods. The
grace period is the configuration key ``temp_sweep_grace_seconds`` (default
one hour) of the CLI and the daemons. A writer on another host stalled for longer than it loses its
temporary file; its commit then fails (the rename finds no file) rather than publishing anything.
Everything here is synchronous and raises nothing for a file that vanished or cannot be removed: the
sweep is best effort and the next process tries again.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import os
import re
import secrets
import socket
import stat
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from lakefs_core.block.local_beneath import CLOEXEC, NOFOLLOW, Root, open_dir

TMP_PREFIX = ".lakefs-tmp-"
TMP_NAME = re.compile(r"\.lakefs-tmp-(?:(?P<host>[0-9a-f]{8})-(?P<pid>[0-9]{1,10})-)?[0-9a-f]{32}")
# Configurable as ``temp_sweep_grace_seconds`` (lakefs_core.settings.CoreSettings, which repeats this
# literal to keep the drivers out of a CLI's start-up; a test checks they agree).
DEFAULT_TMP_GRACE_SECONDS = 3600.0
DEFAULT_SWEEP_LIMIT = 1_000_000  # directory entries examined by one sweep
# In the store's metadata directory (``.lakefs-meta``): the one name there no sidecar can have, since
# no key's first segment may be ``.lakefs-meta``. See the module doc.
SWEEP_STAMP = ".lakefs-meta"

_HOST = hashlib.sha256(socket.gethostname().encode("utf-8", "surrogateescape")).hexdigest()[:8]
_claimed: set[Path] = set()
_claim_lock = threading.Lock()


def temp_name() -> str:
    """A fresh temporary file name recording this host and process (see the module docstring).
    Unique without a system call per name: a random per-process salt (new in a forked child) and a
    counter, in place of ``uuid4``, whose ``getrandom`` was measurable on small batched puts."""
    return temp_names(1)[0]


def temp_names(n: int) -> list[str]:
    """``n`` fresh names (:func:`temp_name`'s), the prefix built once, for a batch's hop."""
    prefix = f"{TMP_PREFIX}{_HOST}-{os.getpid()}-{_salt}"
    return [f"{prefix}{next(_counter):016x}" for _ in range(n)]


def _new_salt() -> None:
    global _salt, _counter
    _salt, _counter = secrets.token_hex(8), itertools.count()


_salt, _counter = "", itertools.count()
_new_salt()
os.register_at_fork(after_in_child=_new_salt)


def claim_root(root: Path) -> bool:
    """True the first time ``root`` is claimed in this process: its sweep is then the caller's."""
    with _claim_lock:
        if root in _claimed:
            return False
        _claimed.add(root)
        return True


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, ValueError):
        return True  # another user's live process (or not a pid we can probe): keep its file
    return True


def is_leftover(name: str, st: os.stat_result, cutoff: float) -> bool:
    """Whether the file ``name`` with status ``st`` is a temporary file no live writer can own."""
    m = TMP_NAME.fullmatch(name)
    if m is None or not stat.S_ISREG(st.st_mode) or st.st_mtime >= cutoff:
        return False
    return not (m.group("host") == _HOST and _pid_alive(int(m.group("pid"))))


def _swept_within(root: int, stamp: Sequence[str], seconds: float) -> bool:
    try:
        directory = open_dir(root, stamp[:-1])
    except OSError:
        return False  # never swept (or the stamp is unreachable): sweep
    try:
        age = time.time() - os.stat(stamp[-1], dir_fd=directory, follow_symlinks=False).st_mtime
    except OSError:
        return False
    finally:
        os.close(directory)
    return 0 <= age < seconds  # a stamp from the future (clock stepped back, NFS skew): sweep


def _mark_swept(root: int, stamp: Sequence[str]) -> None:
    with contextlib.suppress(OSError):  # best effort: without a stamp the next process sweeps again
        directory = open_dir(root, stamp[:-1], create=True)
        try:
            flags = os.O_WRONLY | os.O_CREAT | CLOEXEC | NOFOLLOW
            fd = os.open(stamp[-1], flags, 0o666, dir_fd=directory)
            try:
                os.utime(fd)
            finally:
                os.close(fd)
        finally:
            os.close(directory)


def sweep_leftovers(
    root: Root | Path,
    grace_seconds: float,
    stop: threading.Event | None = None,
    limit: int = DEFAULT_SWEEP_LIMIT,
    stamp: Path | None = None,
) -> int:
    """Remove the leftover temporary files below ``root``; the number removed (see the module).
    With ``stamp`` (a path below ``root``): nothing when a sweep of ``root`` completed within
    ``grace_seconds`` (by the stamp's mtime), and a completed sweep touches it. Every directory is
    opened below the root's descriptor without following a link; a root that is missing (or no
    longer reachable without one) is not swept."""
    tree = root if isinstance(root, Root) else Root(os.fspath(root))
    stamp_parts = (
        Path(stamp).relative_to(tree.path if isinstance(root, Root) else root).parts if stamp else ()
    )
    try:
        root_fd = tree.open()
    except OSError:
        return 0
    try:
        if stamp_parts and _swept_within(root_fd, stamp_parts, grace_seconds):
            return 0
        removed, complete = _sweep(root_fd, time.time() - grace_seconds, stop, limit)
        if stamp_parts and complete:
            _mark_swept(root_fd, stamp_parts)
        return removed
    finally:
        os.close(root_fd)


def _sweep(root: int, cutoff: float, stop: threading.Event | None, limit: int) -> tuple[int, bool]:
    """``(files removed, whether the sweep saw everything)``."""
    removed = 0
    examined = 0
    pending: list[tuple[str, ...]] = [()]
    while pending and examined < limit and not (stop is not None and stop.is_set()):
        parts = pending.pop()
        try:
            fd = open_dir(root, parts)
        except OSError:
            continue  # a directory removed meanwhile (pruned by a delete), unreadable, or now a link
        try:
            with os.scandir(fd) as entries:
                for entry in entries:
                    examined += 1
                    if examined > limit:
                        break
                    try:
                        if entry.is_dir(follow_symlinks=False):
                            pending.append((*parts, entry.name))
                        elif TMP_NAME.fullmatch(entry.name) and is_leftover(
                            entry.name, entry.stat(follow_symlinks=False), cutoff
                        ):
                            os.unlink(entry.name, dir_fd=fd)
                            removed += 1
                    except OSError:
                        continue  # vanished meanwhile or not ours to remove: the next sweep retries
        except OSError:
            continue  # unreadable
        finally:
            os.close(fd)
    complete = not pending and examined <= limit and not (stop is not None and stop.is_set())
    return removed, complete
