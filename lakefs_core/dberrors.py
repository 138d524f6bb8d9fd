"""How a failed database call maps to the error tree, shared by every SQL path; imports no driver.

Two callers: :mod:`lakefs_core.sqlengine` (SQLAlchemy engines: the mirrors database, the SQL lease)
and the PostgreSQL KV store :mod:`lakefs_core.kv.sql` (asyncpg directly). Each first reads what only
it can tell from its exceptions (a lost connection, an integrity error, an exhausted pool) and then
asks :func:`translate_failure` for the error, so one table decides:

- an exhausted pool -> :class:`TransientError` (the database is up but busy);
- any failure while connecting -> :class:`UnreachableError`;
- a timeout, a lost connection (class ``08`` SQLSTATEs, socket errors, the server ending the
  session) -> during a write :class:`TransientError` whose outcome is UNKNOWN (never a reason to
  delete anything), during a read :class:`UnreachableError`;
- serialization failures, deadlocks, lock timeouts, cancelled statements, admin shutdown, and the
  classes ``08``/``53``/``58`` -> :class:`TransientError`;
- integrity violations -> :class:`PreconditionFailedError` in compare-and-swap statements,
  :class:`ConflictError` elsewhere.

A full disk (:data:`PG_DISK_FULL`, or SQLite's own signs) comes first in each caller and is
:class:`~lakefs_core.errors.StorageFullError`, never retried.
"""

from __future__ import annotations

from lakefs_core.errors import (
    ConflictError,
    LakeFSError,
    PreconditionFailedError,
    TransientError,
    UnreachableError,
)

PG_DISK_FULL = "53100"  # disk_full; the rest of class 53 (out of memory, too many connections) is transient
# PostgreSQL SQLSTATEs worth retrying: serialization failure, deadlock, lock not available, query
# cancelled, admin/crash shutdown, cannot connect now; and whole classes: connection exception,
# insufficient resources (but disk_full, see PG_DISK_FULL), system error.
PG_TRANSIENT_STATES = frozenset({"40001", "40P01", "55P03", "57014", "57P01", "57P02", "57P03"})
PG_TRANSIENT_CLASSES = ("08", "53", "58")
# After these the server closes the session: the connection is gone, as after a class 08 state.
PG_SESSION_ENDED = frozenset({"57P01", "57P02", "57P03"})


def driver_reason(e: BaseException) -> str:
    """A short description of a driver's exception: its class and message, at most 500 characters."""
    return f"{type(e).__name__}: {str(e).strip() or type(e).__name__}"[:500]


def sqlstate(e: BaseException) -> str | None:
    """The SQLSTATE of a database error (through SQLAlchemy's and the driver's wrappers), if any."""
    seen: BaseException | None = e
    for _ in range(4):
        if seen is None:
            break
        state = getattr(seen, "sqlstate", None) or getattr(seen, "pgcode", None)
        if isinstance(state, str):
            return state
        seen = getattr(seen, "orig", None) or seen.__cause__
    return None


def translate_failure(
    e: BaseException,
    where: str,
    reason: str,
    *,
    state: str,
    connecting: bool,
    write: bool,
    cas: bool,
    disconnect: bool,
    integrity: bool,
    exhausted: bool = False,
) -> LakeFSError | None:
    """The error for ``e`` (see the module docstring), or None when nothing here says what it is.

    ``where`` names the database (redacted), ``reason`` is the driver's message, ``state`` its
    SQLSTATE ("" if none); ``disconnect``, ``integrity`` and ``exhausted`` are what the caller read
    from its driver's exception types."""
    if exhausted:
        return TransientError(f"{where}: no pooled connection available: {reason}")
    if connecting:
        return UnreachableError(f"cannot connect to {where}: {reason}")
    if isinstance(e, TimeoutError):  # also asyncio.TimeoutError; checked before OSError (its base)
        suffix = " during a write; outcome unknown" if write else ""
        return TransientError(f"{where} timed out{suffix}: {reason}")
    if disconnect or state.startswith("08"):
        if write:
            return TransientError(f"lost connection to {where} during a write; outcome unknown: {reason}")
        return UnreachableError(f"lost connection to {where}: {reason}")
    if state in PG_TRANSIENT_STATES or state.startswith(PG_TRANSIENT_CLASSES):
        return TransientError(f"{where} temporarily refused the operation: {reason}")
    if integrity or state.startswith("23"):
        return PreconditionFailedError(f"{where}: {reason}") if cas else ConflictError(f"{where}: {reason}")
    return None
