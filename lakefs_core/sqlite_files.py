"""SQLite database files, without SQLAlchemy: URLs, creating the file, opening pragmas, a full disk.

Shared by the SQLite KV store (:mod:`lakefs_core.kv.sqlite`, which uses the ``sqlite3`` module
directly so a ``lakefs-core`` process never imports SQLAlchemy on the embedded default) and the
SQLAlchemy engines of :mod:`lakefs_core.sqlengine` (the mirrors database and the lease on SQLite).
"""

from __future__ import annotations

import errno
import os
import sqlite3
import time
from pathlib import Path
from urllib.parse import unquote

from lakefs_core.errors import BadInputError, StorageFullError, UnreachableError
from lakefs_core.fileperm import create_private_file, make_private_dir

SQLITE_SCHEMES = frozenset({"sqlite", "sqlite+aiosqlite"})
NEARLY_FULL_BYTES = 1 << 20  # less free space than this cannot hold SQLite's -wal/-shm growth


def sqlite_database(url: str) -> str:
    """The database file of ``sqlite:///<path>`` (or ``sqlite+aiosqlite:///``): the path as
    SQLAlchemy reads it (percent-decoded; ``sqlite:////abs`` is ``/abs``, ``sqlite:///rel`` is
    ``rel``). Raises :class:`BadInputError` naming ``url`` (never echoing it) for another scheme, a
    host, parameters, or an in-memory database (each pooled connection would see its own)."""
    scheme, sep, rest = url.partition("://")
    if not sep or scheme.lower() not in SQLITE_SCHEMES:
        raise BadInputError("not a SQLite URL (sqlite:///path)", field="url")
    if not rest.startswith("/"):
        raise BadInputError("a SQLite URL takes no host (sqlite:///path)", field="url")
    if "?" in rest:
        raise BadInputError("a SQLite URL takes no parameters", field="url")
    try:
        database = unquote(rest[1:], errors="strict")
        database.encode()  # a lone surrogate (environment bytes the OS could not decode)
    except UnicodeError:
        raise BadInputError("the SQLite URL is not valid UTF-8", field="url") from None
    if database in ("", ":memory:") or database.startswith("file::memory:") or "\0" in database:
        raise BadInputError(
            "in-memory SQLite cannot be shared between pooled connections; use a file", field="url"
        )
    return database


def prepare_database_file(db_path: Path) -> None:
    """Create ``db_path`` (``0600``) and its missing directories (``0700``) unless they exist: the
    -wal and -shm files SQLite makes inherit the file's mode (see :mod:`lakefs_core.fileperm`)."""
    try:
        make_private_dir(db_path.parent)
        create_private_file(db_path)
    except OSError as e:
        what = f"cannot create SQLite database {db_path} or its directory"
        if is_disk_full(e, ""):
            raise StorageFullError(f"{what}: {e.strerror}") from e
        raise UnreachableError(f"{what}: {e.strerror}") from e


def execute_pragma(cursor: sqlite3.Cursor, pragma: str, busy_timeout: float) -> None:
    """Run one PRAGMA, retrying "database is locked" within the busy timeout.

    Switching a new file to WAL needs an exclusive lock, and SQLite answers that attempt with
    SQLITE_BUSY at once (without its busy handler) when several connections open the file at the
    same moment; the switch succeeds as soon as the others are done. This runs in the connection's
    own thread, so a short sleep blocks no event loop.
    """
    deadline = time.monotonic() + max(busy_timeout, 1.0)
    delay = 0.005
    while True:
        try:
            cursor.execute(pragma)
            return
        except sqlite3.OperationalError as e:
            if "locked" not in str(e).lower() or time.monotonic() >= deadline:
                raise
            time.sleep(delay)
            delay = min(delay * 2, 0.1)


def opening_pragmas(busy_timeout: float, extra: tuple[str, ...] = ()) -> list[str]:
    """The pragmas every new connection runs: the busy timeout, WAL, then ``extra`` (``name = value``)."""
    pragmas = [f"PRAGMA busy_timeout = {max(0, int(busy_timeout * 1000))}", "PRAGMA journal_mode = WAL"]
    return pragmas + [f"PRAGMA {p}" for p in extra]


def is_disk_full(e: BaseException, text: str, db_path: str | None = None) -> bool:
    """ENOSPC/EDQUOT, SQLite's SQLITE_FULL ("database or disk is full"; ``text`` is the error's
    message, lower case), or SQLite's "disk I/O error" on a filesystem with (next to) no free space
    under ``db_path``: SQLite reports a failed growth of its -shm/-wal files (SQLITE_IOERR_SHMSIZE,
    _WRITE) that way, hiding the ENOSPC. PostgreSQL's disk_full is :mod:`lakefs_core.sqlengine`'s."""
    if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    if "database or disk is full" in text or "sqlite_full" in text:
        return True
    if db_path and "disk i/o error" in text:
        try:
            fs = os.statvfs(os.path.dirname(os.path.abspath(db_path)))
        except OSError:
            return False
        return fs.f_bavail * fs.f_frsize < NEARLY_FULL_BYTES
    return False


def is_busy(text: str) -> bool:
    """SQLite's SQLITE_BUSY / SQLITE_LOCKED (another writer holds the lock past the busy timeout)."""
    return "database is locked" in text or "database table is locked" in text or "sqlite_busy" in text
