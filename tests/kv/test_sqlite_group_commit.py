"""SQLite group commit (:mod:`lakefs_core.kv.sqlite_writer`): concurrent writes of one store share
one transaction and one ``COMMIT``, each operation in its own savepoint.

Real SQLite files. Transactions are counted by the statements the store's connections run
(``set_trace_callback``); a failing operation is a trigger raising for one key; a failing
``COMMIT`` is a wrapper around the store's connections that raises the ``sqlite3`` error SQLite
raises there, once armed. The property test compares concurrent writes, in groups, with the same
writes made one after the other on the memory store."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator, Awaitable
from pathlib import Path
from typing import Any, cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lakefs_core.errors import (
    ConflictError,
    LakeFSError,
    PreconditionFailedError,
    StorageFullError,
    TransientError,
)
from lakefs_core.kv import Expect, KVStore
from lakefs_core.kv import sqlite_writer as writer_module
from lakefs_core.kv.memory import MemoryKVStore
from lakefs_core.kv.sqlite import SQLiteKVStore
from tests.support.profiles import examples
from tests.support.timing import scaled

P = b"partition"


class TracedStore(SQLiteKVStore):
    """The store, with every statement its connections run recorded, and a ``COMMIT`` that fails
    with ``commit_error`` while it is set (a wrapper around the real connection)."""

    statements: list[str]
    commit_error: sqlite3.Error | None = None

    def _open_in_thread(self) -> sqlite3.Connection:
        db = super()._open_in_thread()
        db.set_trace_callback(self.statements.append)
        return cast(sqlite3.Connection, _FaultyCommit(db, self))

    def commits(self) -> int:
        return self.statements.count("COMMIT")


class _FaultyCommit:
    def __init__(self, db: sqlite3.Connection, store: TracedStore) -> None:
        self._db = db
        self._store = store

    def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:
        if sql == "COMMIT" and self._store.commit_error is not None:
            raise self._store.commit_error
        return self._db.execute(sql, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._db, name)


@pytest.fixture
async def kv(tmp_path: Path) -> AsyncIterator[TracedStore]:
    store = TracedStore(str(tmp_path / "kv.sqlite3"))
    store.statements = []
    await store.create_table()
    try:
        yield store
    finally:
        await store.close()


def refuse_key(path: str, key: bytes) -> None:
    """A trigger that aborts the insert of ``key`` (SQLite raises it as an integrity error)."""
    with sqlite3.connect(path) as raw:
        raw.execute(
            f"CREATE TRIGGER refuse BEFORE INSERT ON kv WHEN NEW.key = X'{key.hex()}' "
            "BEGIN SELECT RAISE(ABORT, 'injected failure'); END"
        )
    raw.close()


async def outcomes(*writes: Awaitable[object]) -> list[object]:
    return list(await asyncio.gather(*writes, return_exceptions=True))


async def test_concurrent_inserts_of_one_key_one_wins_in_one_commit(kv: TracedStore) -> None:
    kv.statements.clear()
    results = await outcomes(*(kv.set_if(P, b"k", b"%d" % i, Expect.ABSENT) for i in range(40)))
    winners = [i for i, r in enumerate(results) if r is None]
    assert len(winners) == 1
    assert all(isinstance(r, PreconditionFailedError) for i, r in enumerate(results) if i != winners[0])
    assert await kv.get(P, b"k") == b"%d" % winners[0]
    assert kv.commits() == 1  # one group, one transaction, one fsync of the WAL


async def test_writes_arriving_during_a_commit_form_the_next_group(kv: TracedStore) -> None:
    kv.statements.clear()
    first = asyncio.ensure_future(kv.set(P, b"first", b"1"))
    await asyncio.sleep(0)  # the writer takes the first write alone, at once
    rest = [asyncio.ensure_future(kv.set(P, b"k%d" % i, b"v")) for i in range(30)]
    await asyncio.gather(first, *rest)
    assert kv.commits() == 2
    assert len([e async for e in kv.scan(P)]) == 31


async def test_a_failing_operation_fails_alone_and_the_group_commits(kv: TracedStore) -> None:
    await kv.set(P, b"exists", b"old")
    refuse_key(kv._path, b"refused")
    kv.statements.clear()
    results = await outcomes(
        kv.set(P, b"a", b"1"),
        kv.set(P, b"refused", b"x"),  # the trigger aborts it
        kv.set_many([(P, b"b", b"2"), (P, b"c", b"3")]),
        kv.set_if(P, b"exists", b"new", Expect.ABSENT),  # a failed condition
        kv.set_many_if([(P, b"d", b"4")], [(P, b"exists", Expect.equals(b"other"))]),
        kv.set_many([(P, b"e", b"5"), (P, b"refused", b"x")]),  # its first item is rolled back too
        kv.set_many_then_get([(P, b"f", b"6")], P, b"a"),  # reads the group's earlier write
        kv.set_if(P, b"exists", b"newer", Expect.equals(b"old")),
    )
    assert results[0] is None and results[2] is None
    assert isinstance(results[1], ConflictError) and "injected failure" in str(results[1])
    assert isinstance(results[1].__cause__, sqlite3.IntegrityError)
    assert isinstance(results[3], PreconditionFailedError)
    assert isinstance(results[4], PreconditionFailedError)
    assert isinstance(results[5], ConflictError)
    assert results[6] == b"1" and results[7] is None
    stored = {e.key: e.value async for e in kv.scan(P)}
    assert stored == {b"a": b"1", b"b": b"2", b"c": b"3", b"exists": b"newer", b"f": b"6"}
    assert kv.commits() == 1


@pytest.mark.parametrize(
    ("error", "expected", "text"),
    [
        (sqlite3.OperationalError("disk I/O error"), TransientError, "outcome unknown"),
        (sqlite3.OperationalError("database or disk is full"), StorageFullError, "no space left"),
        (sqlite3.OperationalError("database is locked"), TransientError, "busy"),
    ],
)
async def test_a_failing_commit_fails_every_operation_of_the_group(
    kv: TracedStore, error: sqlite3.Error, expected: type[LakeFSError], text: str
) -> None:
    await kv.set(P, b"exists", b"old")
    kv.commit_error = error
    results = await outcomes(
        kv.set(P, b"a", b"1"),
        kv.set_if(P, b"exists", b"new", Expect.ABSENT),  # had failed alone: fails with the group
        kv.set_many_then_get([(P, b"b", b"2")], P, b"a"),
        kv.delete(P, b"exists"),
    )
    for result in results:
        assert type(result) is expected, repr(result)
        assert text in str(result) and result.__cause__ is error
    kv.commit_error = None
    assert {e.key: e.value async for e in kv.scan(P)} == {b"exists": b"old"}  # rolled back
    await kv.set(P, b"a", b"1")  # the store carries on
    assert await kv.get(P, b"a") == b"1"


async def test_an_operation_filling_the_database_fails_alone(tmp_path: Path) -> None:
    """A real SQLITE_FULL (``max_page_count``) in the middle of a group: SQLite ends the whole
    transaction, the operation that hit it fails with :class:`StorageFullError`, and the others,
    which fit, are run again and stored, as each would have been in a transaction of its own."""
    kv = await SQLiteKVStore.open(f"sqlite:///{tmp_path / 'kv.sqlite3'}", pragmas=["max_page_count = 12"])
    try:
        small = [kv.set(P, b"small%02d" % i, b"v") for i in range(10)]
        results = await outcomes(*small[:5], kv.set(P, b"big", b"x" * 200_000), *small[5:])
        stored = [e.key async for e in kv.scan(P)]
    finally:
        await kv.close()
    assert isinstance(results[5], StorageFullError)
    assert results[:5] + results[6:] == [None] * 10
    assert stored == [b"small%02d" % i for i in range(10)]


async def test_a_caller_cancelled_while_queued_is_removed_from_the_queue(kv: TracedStore) -> None:
    holder = sqlite3.connect(kv._path, isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")  # another writer holds the lock: the first group waits
        first = asyncio.ensure_future(kv.set(P, b"first", b"1"))
        await asyncio.sleep(0.1)
        queued = asyncio.ensure_future(kv.set(P, b"cancelled", b"x"))
        kept = asyncio.ensure_future(kv.set(P, b"kept", b"y"))
        await asyncio.sleep(0.05)
        queued.cancel()
        holder.execute("ROLLBACK")
        await asyncio.wait_for(asyncio.gather(first, kept), scaled(30))
        with pytest.raises(asyncio.CancelledError):
            await queued
    finally:
        holder.close()
    assert [e.key async for e in kv.scan(P)] == [b"first", b"kept"]


async def test_a_caller_cancelled_in_a_running_group_still_commits_with_it(kv: TracedStore) -> None:
    holder = sqlite3.connect(kv._path, isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")
        running = asyncio.ensure_future(kv.set_many([(P, b"a", b"1"), (P, b"b", b"2")]))
        await asyncio.sleep(0.1)  # its group is waiting for the lock in the connection's thread
        running.cancel()
        with pytest.raises(asyncio.CancelledError):
            await running
        holder.execute("ROLLBACK")
    finally:
        holder.close()
    await kv.set(P, b"c", b"3")  # queued behind the running group
    assert [e.key async for e in kv.scan(P)] == [b"a", b"b", b"c"]


async def test_groups_are_bounded(kv: TracedStore, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(writer_module, "MAX_GROUP_OPS", 4)
    monkeypatch.setattr(writer_module, "MAX_GROUP_BYTES", 1000)
    kv.statements.clear()
    await asyncio.gather(*(kv.set(P, b"k%d" % i, b"v") for i in range(10)))  # 4 + 4 + 2
    assert kv.commits() == 3
    kv.statements.clear()
    await asyncio.gather(*(kv.set(P, b"big%d" % i, b"x" * 600) for i in range(3)))  # one a group
    assert kv.commits() == 3


# -- concurrent groups against the sequential model --------------------------------------------------

KEYS = [b"a", b"b", b"c", b"d"]
_key = st.sampled_from(KEYS)
_value = st.sampled_from([b"0", b"1", b"2"])
_expect = st.one_of(st.just(Expect.ABSENT), st.just(Expect.EXISTS), _value.map(Expect.equals))
_op = st.one_of(
    st.tuples(st.just("set"), _key, _value),
    st.tuples(st.just("set_if"), _key, _value, _expect),
    st.tuples(st.just("delete"), _key),
    st.tuples(st.just("set_many"), st.lists(st.tuples(_key, _value), min_size=1, max_size=3)),
    st.tuples(
        st.just("set_many_if"),
        st.lists(st.tuples(_key, _value), min_size=1, max_size=2),
        _key,
        st.sampled_from([Expect.EXISTS, Expect.equals(b"1")]),
    ),
    st.tuples(st.just("then_get"), st.lists(st.tuples(_key, _value), min_size=1, max_size=2), _key),
    st.tuples(st.just("refused"), _key),  # a write of the key the trigger refuses
)


def call(kv: KVStore, op: tuple[Any, ...]) -> Awaitable[object]:
    kind = op[0]
    if kind == "set":
        return kv.set(P, op[1], op[2])
    if kind == "set_if":
        return kv.set_if(P, op[1], op[2], op[3])
    if kind == "delete":
        return kv.delete(P, op[1])
    if kind == "set_many":
        return kv.set_many([(P, k, v) for k, v in op[1]])
    if kind == "set_many_if":
        return kv.set_many_if([(P, k, v) for k, v in op[1]], [(P, op[2], op[3])])
    if kind == "then_get":
        return kv.set_many_then_get([(P, k, v) for k, v in op[1]], P, op[2])
    return kv.set_many([(P, op[1], b"v"), (P, b"refused", b"x")])


def outcome(result: object) -> object:
    if isinstance(result, BaseException):
        # the trigger's refusal is a conflict; the model has no trigger: its ops fail by name below
        return type(result).__name__
    return result


async def model_outcomes(ops: list[tuple[Any, ...]]) -> tuple[list[object], dict[bytes, bytes]]:
    model = MemoryKVStore()
    results: list[object] = []
    for op in ops:
        if op[0] == "refused":
            results.append("ConflictError")  # the trigger refuses the whole batch
            continue
        try:
            results.append(await call(model, op))
        except LakeFSError as e:
            results.append(e)
    state = {e.key: e.value async for e in model.scan(P)}
    return [outcome(r) for r in results], state


@settings(max_examples=examples(0.5), deadline=None)
@given(ops=st.lists(_op, min_size=1, max_size=24), group_ops=st.sampled_from([1, 3, 128]))
def test_concurrent_groups_match_the_sequential_model(
    tmp_path_factory: pytest.TempPathFactory, ops: list[tuple[Any, ...]], group_ops: int
) -> None:
    """Writes fired at once (queued in order) end as the same writes made one after the other:
    each one's result or error, and the final state."""
    path = tmp_path_factory.mktemp("model") / "kv.sqlite3"

    async def run() -> tuple[list[object], dict[bytes, bytes], int]:
        kv = TracedStore(str(path))
        kv.statements = []
        await kv.create_table()
        refuse_key(str(path), b"refused")
        try:
            kv.statements.clear()
            results = await outcomes(*(call(kv, op) for op in ops))
            state = {e.key: e.value async for e in kv.scan(P)}
            return [outcome(r) for r in results], state, kv.commits()
        finally:
            await kv.close()

    original = writer_module.MAX_GROUP_OPS
    writer_module.MAX_GROUP_OPS = group_ops
    try:
        got, state, commits = asyncio.run(run())
    finally:
        writer_module.MAX_GROUP_OPS = original
    want, want_state = asyncio.run(model_outcomes(ops))
    assert got == want
    assert state == want_state
    assert commits == -(-len(ops) // group_ops)  # all queued at once: groups of group_ops
