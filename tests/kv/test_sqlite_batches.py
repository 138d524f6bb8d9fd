"""SQLite ``set_many``: a batch is written as multi-row ``INSERT`` statements of at most
``sqlite_rows()`` rows, all in one transaction. With the statement size forced small, batches
span several statements (and a remainder); every row lands with the last value of its key, and a
statement failing in the database after earlier ones succeeded leaves nothing of the batch. Real
SQLite files; the failure is a trigger that aborts the insert of one key."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from lakefs_core.errors import LakeFSError
from lakefs_core.kv import open_kv
from lakefs_core.kv import sqlite as sqlite_module

P = b"partition"


@pytest.fixture
def rows_per_statement(monkeypatch: pytest.MonkeyPatch) -> Iterator[int]:
    monkeypatch.setattr(sqlite_module, "sqlite_rows", lambda: 3)
    yield 3


def test_rows_per_statement_fit_the_librarys_limit() -> None:
    with sqlite3.connect(":memory:") as conn:
        limit = conn.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER)
    rows = sqlite_module.sqlite_rows()
    assert 1 <= rows <= sqlite_module.SQLITE_MAX_ROWS and 3 * rows <= limit


@pytest.mark.parametrize("n", [1, 2, 3, 4, 7, 9, 10])
async def test_batches_spanning_statements(tmp_path: Path, rows_per_statement: int, n: int) -> None:
    kv = await open_kv(f"sqlite:///{tmp_path / 'kv.sqlite3'}")
    try:
        await kv.set(P, b"k0", b"old")  # an existing key is updated, not duplicated
        items = [(P, b"k%d" % i, b"v%d" % i) for i in range(n)]
        items.append((P, b"k0", b"last"))  # a repeat: the last value wins
        assert await kv.set_many_then_get(items, P, b"k0") == b"last"
        got = {e.key: e.value for e in [entry async for entry in kv.scan(P)]}
        assert got == {b"k0": b"last", **{b"k%d" % i: b"v%d" % i for i in range(1, n)}}
    finally:
        await kv.close()


async def test_a_later_statement_failing_rolls_back_the_earlier_ones(
    tmp_path: Path, rows_per_statement: int
) -> None:
    path = tmp_path / "kv.sqlite3"
    kv = await open_kv(f"sqlite:///{path}")
    try:
        await kv.set(P, b"before", b"kept")
        raw = sqlite3.connect(path)
        raw.execute(
            "CREATE TRIGGER refuse BEFORE INSERT ON kv WHEN NEW.key = X'6b3730' "  # b"k70"
            "BEGIN SELECT RAISE(ABORT, 'injected failure'); END"
        )
        raw.commit()
        raw.close()
        items = [(P, b"k%d" % i, b"v") for i in range(72)]  # k70 is in the 24th statement of 3 rows
        with pytest.raises(LakeFSError):
            await kv.set_many(items)
        assert [e.key async for e in kv.scan(P)] == [b"before"]
        await kv.set_many(items[:70])  # the store is usable afterwards (no lock left held)
        assert len([e async for e in kv.scan(P)]) == 71
    finally:
        await kv.close()
