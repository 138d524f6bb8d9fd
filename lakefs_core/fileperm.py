"""Private files and directories for the embedded default's local state (owner-only, whatever the umask).

The embedded SQLite databases (KV store, mirrors database), their ``-wal``/``-shm`` companions and the
on-disk caches may hold credentials-adjacent data (repository layout, object keys, branch names).
They are created owner-only: directories ``0700`` (:func:`make_private_dir`) and files ``0600``
(:func:`create_private_file`). Only what is *created* here gets these modes; existing files and
directories keep the modes their owner gave them (an operator may have chosen a group deliberately).

SQLite creates its ``-wal``, ``-shm`` and ``-journal`` files with the permission bits of the main
database file, so pre-creating the main file ``0600`` before SQLite opens it covers them too.
Raises :class:`OSError` as the file system reports it; callers translate it at their edge.
"""

from __future__ import annotations

import os
from pathlib import Path

PRIVATE_DIR_MODE = 0o700
PRIVATE_FILE_MODE = 0o600


def make_private_dir(path: Path) -> None:
    """Create ``path`` and its missing parents, each new level ``0700`` (existing levels untouched)."""
    missing: list[Path] = []
    probe = path
    while not probe.exists():
        missing.append(probe)
        if probe.parent == probe:
            break
        probe = probe.parent
    for level in reversed(missing):
        try:
            os.mkdir(level, PRIVATE_DIR_MODE)
        except FileExistsError:
            continue  # created concurrently by another process: not ours to re-mode
        # mkdir's mode is filtered by the umask; chmod makes it exact (a 0o277 umask would lose u+w).
        os.chmod(level, PRIVATE_DIR_MODE)
    if not path.is_dir():
        raise NotADirectoryError(20, "not a directory", str(path))


def create_private_file(path: Path) -> bool:
    """Create ``path`` empty with mode ``0600`` unless it exists; True when this call created it."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags, PRIVATE_FILE_MODE)
    except FileExistsError:
        return False
    try:
        os.fchmod(fd, PRIVATE_FILE_MODE)  # exact, whatever the umask
    finally:
        os.close(fd)
    return True
