"""Group commit for the SQLite KV store: concurrent write operations share one transaction and one
fsync (the WAL is synced at every ``COMMIT`` under ``synchronous = FULL``, which the store keeps).

:class:`GroupWriter` is the one writer path of a store (per process). A write operation is a
function run on a connection (``fn(db)``); it is queued, and whenever the writer is free it takes
the operations queued at that moment (at most :data:`MAX_GROUP_OPS` of them and
:data:`MAX_GROUP_BYTES` of values, at least one) and runs them as ONE group on a pooled connection,
in ONE call into that connection's thread (:func:`run_group`)::

    BEGIN IMMEDIATE
    SAVEPOINT op; <operation 1>; RELEASE op        -- or ROLLBACK TO op when it raised
    SAVEPOINT op; <operation 2>; RELEASE op
    ...
    COMMIT

No waiting is added: the first write of an idle writer starts at once, and the writes arriving
while a group is in flight form the next one.

Semantics, per operation, as when each had its own transaction:

- **Atomic and isolated.** An operation that raises (an integrity error, a failed expectation, any
  ``sqlite3`` error) is rolled back to its savepoint and fails alone, with its own error; the
  others of its group go on. Operations run in queue order, each seeing the ones before it: a
  group is one serial history, committed at once.
- **Nothing reported before the commit.** Results are handed out only after the group's
  ``COMMIT`` succeeded. An operation whose statement error ended the whole transaction (SQLite
  does so for a full disk or an I/O error, rolling back the operations before it too) fails alone
  as well: the others run again, in a new transaction. When the group fails as a whole
  (``BEGIN IMMEDIATE`` busy beyond the busy timeout, or the ``COMMIT`` failing), EVERY operation
  of the group fails with that error
  (translated as for a write: a "disk I/O error" is an unknown outcome, busy is transient, a full
  disk is :class:`~lakefs_core.errors.StorageFullError`), even one that had failed alone before.
- **Cancellation.** A caller cancelled while its operation is still queued removes it: it is
  skipped when the next group is formed and never runs. One cancelled after its group started runs
  to its end in the group (committed or not with the others), as a cancelled operation did before:
  never half-applied.

A caller's wait is its group's: up to the busy timeout for the write lock (another process
holding it), after the group in flight before it.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

T = TypeVar("T")

MAX_GROUP_OPS = 128  # operations per group, at most (a group's work stays a few milliseconds)
MAX_GROUP_BYTES = 8 * 1024 * 1024  # values' bytes per group, at most (a bigger operation goes alone)

WriteFn = Callable[[sqlite3.Connection], Any]
# (the error, cas) -> the error the caller sees (the store's translation for a write)
Translate = Callable[[BaseException, bool], BaseException]
# fn -> fn(db) in a pooled connection's thread; sqlite3 errors raised as they are
OnConnection = Callable[[Callable[[sqlite3.Connection], Any]], Awaitable[Any]]


@dataclass(frozen=True)
class Failed:
    """An operation of a committed group that raised: rolled back to its savepoint, alone."""

    error: Exception


class _Ended(Exception):
    """An operation's statement error ended the whole transaction (SQLite does so for a full
    disk, an I/O error): the operations before it in the transaction were rolled back too."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


def run_group(db: sqlite3.Connection, fns: Sequence[WriteFn]) -> list[object]:
    """Run ``fns`` in ONE transaction, each in its own savepoint, then ``COMMIT``; in the
    connection's thread. Returns each one's result, or :class:`Failed` for one that raised (rolled
    back alone). An operation whose error ended the transaction fails alone too: the others run
    again in a new transaction (each attempt has one operation fewer). Raises (everything rolled
    back) when the group fails as a whole: ``BEGIN IMMEDIATE``, a rollback to a savepoint or the
    ``COMMIT`` failing."""
    outcomes: list[object] = [None] * len(fns)
    todo = list(range(len(fns)))
    while todo:
        db.execute("BEGIN IMMEDIATE")
        current = -1
        try:
            for current in todo:
                outcomes[current] = _in_savepoint(db, fns[current])
            db.execute("COMMIT")
            return outcomes
        except _Ended as ended:
            outcomes[current] = Failed(ended.error)
            todo.remove(current)
        except BaseException:
            if db.in_transaction:
                with contextlib.suppress(sqlite3.Error):
                    db.execute("ROLLBACK")
            raise
    return outcomes


def _in_savepoint(db: sqlite3.Connection, fn: WriteFn) -> object:
    db.execute("SAVEPOINT lakefs_op")
    try:
        result = fn(db)
    except Exception as e:
        if not db.in_transaction:
            raise _Ended(e) from e
        db.execute("ROLLBACK TO lakefs_op")  # raising here fails the group: nothing is committed
        db.execute("RELEASE lakefs_op")
        return Failed(e)
    db.execute("RELEASE lakefs_op")
    return result


@dataclass(eq=False)
class _Op(Generic[T]):
    fn: Callable[[sqlite3.Connection], T]
    cas: bool
    size: int
    future: asyncio.Future[T]


class GroupWriter:
    """The write path of one store: queued operations run in groups (see the module doc)."""

    def __init__(self, on_connection: OnConnection, translate: Translate) -> None:
        self._on_connection = on_connection
        self._translate = translate
        self._queue: deque[_Op[Any]] = deque()
        self._drainer: asyncio.Task[None] | None = None

    async def write(self, fn: Callable[[sqlite3.Connection], T], *, cas: bool = False, size: int = 0) -> T:
        """``fn(db)`` in the next group; its result once the group committed, or its error
        (``cas``: an integrity error is a failed precondition). ``size``: the bytes it writes."""
        loop = asyncio.get_running_loop()
        op: _Op[T] = _Op(fn, cas, size, loop.create_future())
        self._queue.append(op)
        if self._drainer is None:
            self._drainer = loop.create_task(self._drain())
        return await op.future

    def _take(self) -> list[_Op[Any]]:
        """The next group: the queued operations, cancelled ones dropped, within the bounds."""
        group: list[_Op[Any]] = []
        size = 0
        while self._queue and len(group) < MAX_GROUP_OPS:
            op = self._queue[0]
            if op.future.cancelled():
                self._queue.popleft()
                continue
            if group and size + op.size > MAX_GROUP_BYTES:
                break
            group.append(self._queue.popleft())
            size += op.size
        return group

    async def _drain(self) -> None:
        try:
            while self._queue:
                group = self._take()
                if group:
                    await self._run(group)
        except BaseException:
            for op in self._queue:  # cancelled itself (the loop is closing): nothing more runs
                op.future.cancel()
            self._queue.clear()
            raise
        finally:
            self._drainer = None

    async def _run(self, group: list[_Op[Any]]) -> None:
        fns = [op.fn for op in group]
        try:
            outcomes = await self._on_connection(lambda db: run_group(db, fns))
        except asyncio.CancelledError:
            for op in group:  # the drain itself was cancelled (the loop is closing): not ours to report
                op.future.cancel()
            raise
        except Exception as e:
            # The group failed as a whole (or no connection opened): every operation fails with it.
            for op in group:
                _fail(op, self._translate(e, False) if isinstance(e, sqlite3.Error | OSError) else e, e)
            return
        for op, outcome in zip(group, outcomes, strict=True):
            if isinstance(outcome, Failed):
                err = outcome.error
                _fail(
                    op, self._translate(err, op.cas) if isinstance(err, sqlite3.Error | OSError) else err, err
                )
            elif not op.future.done():
                op.future.set_result(outcome)


def _fail(op: _Op[Any], error: BaseException, cause: BaseException) -> None:
    if op.future.done():
        return  # its caller was cancelled meanwhile
    if error is not cause:
        error.__cause__ = cause
    op.future.set_exception(error)
