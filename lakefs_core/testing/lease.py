"""One lease contract (lakefs_core.service.lease), run against every backend.

SQLLease on SQLite and PostgreSQL (a fresh table per test); KVLease on every KV driver (memory,
SQLite, PostgreSQL, DynamoDB on moto). Each backend hands out contenders from two independent
connections ("daemons"), so races go through the real database or KV, not one client object.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import asyncpg
import pytest
from sqlalchemy import MetaData
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.schema import CreateTable, DropTable

from lakefs_core.errors import BadInputError, CorruptDataError
from lakefs_core.kv import KVStore, open_kv
from lakefs_core.refs import kvkeys
from lakefs_core.service.lease import KVLease, Lease, LeaseState, SQLLease, kv_lease, lease_table
from lakefs_core.sqlengine import create_sql_engine, normalize_sql_url
from tests.support.kv import KV_DRIVERS, kv_url_for
from tests.support.pg import PgDatabase

BACKENDS = [*(f"sql-{d}" for d in ("sqlite", "postgres")), *(f"kv-{d}" for d in KV_DRIVERS)]
T0 = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)

MakeLease = Callable[..., Lease]


@dataclass
class Backend:
    kind: str
    make: MakeLease  # make(name, holder, ttl=10.0, *, daemon=0) -> Lease
    kv: KVStore | None = None  # the first daemon's store (KV backends)


async def _sql_backend(url: str) -> AsyncIterator[Backend]:
    metadata = MetaData()
    table = lease_table(metadata, f"leases_{uuid.uuid4().hex[:12]}")
    engines: list[AsyncEngine] = [create_sql_engine(normalize_sql_url(url)) for _ in range(2)]
    async with engines[0].begin() as conn:
        await conn.execute(CreateTable(table))

    def make(name: str, holder: str, ttl: float = 10.0, *, daemon: int = 0) -> Lease:
        return SQLLease(engines[daemon], table, name, holder, ttl, where="test lease database")

    try:
        yield Backend("sql", make)
    finally:
        async with engines[0].begin() as conn:
            await conn.execute(DropTable(table))
        for engine in engines:
            await engine.dispose()


async def _kv_backend(url: str) -> AsyncIterator[Backend]:
    first = await open_kv(url)
    # The memory driver is one process's store: both "daemons" share it.
    stores = [first, first if url.startswith("memory://") else await open_kv(url)]
    if url.startswith("postgresql://"):
        conn = await asyncpg.connect(url)
        try:
            await conn.execute("TRUNCATE kv")
        finally:
            await conn.close()

    def make(name: str, holder: str, ttl: float = 10.0, *, daemon: int = 0) -> Lease:
        return kv_lease(stores[daemon], name, holder, ttl)

    try:
        yield Backend("kv", make, first)
    finally:
        for store in {id(s): s for s in stores}.values():
            await store.close()


@pytest.fixture(params=BACKENDS)
def backend_url(request: pytest.FixtureRequest, sqlite_url: str, tmp_path: Path) -> tuple[str, str]:
    """``(kind, url)`` of a fresh store for the parametrised backend (resolved synchronously)."""
    kind, _, driver = str(request.param).partition("-")
    if kind == "kv":
        return kind, kv_url_for(driver, request, sqlite_url)
    if driver == "postgres":
        pg: PgDatabase = request.getfixturevalue("pg_database")
        return kind, pg.url
    return kind, f"sqlite:///{tmp_path / 'leases.sqlite3'}"


@pytest.fixture
async def backend(backend_url: tuple[str, str]) -> AsyncIterator[Backend]:
    kind, url = backend_url
    factory = _sql_backend(url) if kind == "sql" else _kv_backend(url)
    async for b in factory:
        yield b


# -- the contract -------------------------------------------------------------------------------------


async def test_acquire_renew_expire_release(backend: Backend) -> None:
    d1, d2 = backend.make("eu", "daemon-1"), backend.make("eu", "daemon-2", daemon=1)
    assert await d1.current() is None
    assert await d1.try_acquire(100.0) is True
    assert await d2.try_acquire(105.0) is False  # held
    assert await d1.try_acquire(105.0) is True  # re-acquire extends
    assert await d2.current() == LeaseState("eu", "daemon-1", datetime.fromtimestamp(115, tz=UTC))
    assert await d1.renew(110.0) is True  # now until 120
    assert await d2.renew(110.0) is False
    assert await d2.try_acquire(119.999) is False
    other = backend.make("ap", "daemon-2", daemon=1)
    assert await other.try_acquire(119.999) is True  # names are independent
    # expired: taken over; the old holder can neither renew nor release it
    assert await d2.try_acquire(120.0) is True
    assert await d1.renew(121.0) is False
    assert await d1.release() is False
    state = await d1.current()
    assert state is not None and state.holder == "daemon-2"
    # a lapsed lease is not revived by renew (re-acquire instead)
    assert await d2.renew(131.0) is False
    assert await d2.release() is True
    assert await d1.current() is None
    assert await d2.release() is False  # not twice
    assert await d1.try_acquire(0.0) is True  # free again
    assert (await other.current()) is not None  # "ap" untouched


async def test_datetimes_and_fractional_ttl(backend: Backend) -> None:
    d, e = backend.make("dt", "d", 5), backend.make("dt", "e", 5, daemon=1)
    assert await d.try_acquire(T0) is True
    assert await e.try_acquire(T0 + timedelta(seconds=4, microseconds=999_999)) is False
    assert await e.try_acquire(T0 + timedelta(seconds=5)) is True  # expires_at <= now: expired
    state = await d.current()
    assert state is not None and state.expires_at == T0 + timedelta(seconds=10)
    f = backend.make("frac", "f", 0.25)
    assert await f.try_acquire(T0) is True
    state = await f.current()
    assert state is not None and state.expires_at == T0 + timedelta(milliseconds=250)


async def test_racing_contenders_have_one_winner(backend: Backend) -> None:
    for round_no in range(8):
        now = 1000.0 + round_no * 20  # every round starts after the previous lease expired
        holders = [f"daemon-{i}" for i in range(6)]
        contenders = [backend.make("race", h, 10.0, daemon=i % 2) for i, h in enumerate(holders)]
        results = await asyncio.gather(*(c.try_acquire(now) for c in contenders))
        winners = [c.holder for c, won in zip(contenders, results, strict=True) if won]
        assert len(winners) == 1, (round_no, results)
        state = await contenders[0].current()
        assert state is not None and state.holder == winners[0]
        # while held: the losers' takeover attempts race the winner's renew
        winner = contenders[results.index(True)]
        losers = [c for c in contenders if c is not winner]
        outcome = await asyncio.gather(winner.renew(now + 5), *(c.try_acquire(now + 5) for c in losers))
        assert outcome == [True] + [False] * len(losers)


async def test_real_time_exclusivity(backend: Backend) -> None:
    """Contenders hammer acquire/release with the real clock: never two holders at once."""
    holding: set[str] = set()
    overlaps: list[set[str]] = []

    async def daemon(i: int) -> int:
        me = backend.make("hammer", f"daemon-{i}", 30.0, daemon=i % 2)
        wins = 0
        for _ in range(5):
            if await me.try_acquire():
                holding.add(me.holder)
                if len(holding) > 1:
                    overlaps.append(set(holding))
                wins += 1
                await asyncio.sleep(0)
                holding.discard(me.holder)
                assert await me.release()
            await asyncio.sleep(0)
        return wins

    wins = await asyncio.gather(*(daemon(i) for i in range(5)))
    assert overlaps == []
    assert sum(wins) >= 1


async def test_lifecycle_logs(backend: Backend, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="lakefs_core.service.lease")
    a, b = backend.make("logs", "a", 10.0), backend.make("logs", "b", 10.0, daemon=1)
    assert await a.try_acquire(100.0)
    assert await a.try_acquire(105.0)  # still held: no second "acquired"
    assert await a.try_acquire(300.0)  # expired, but still ours: re-acquired, no log
    assert await b.try_acquire(500.0)  # a's lease expired: b takes it over
    assert not await a.renew(501.0)  # a learns it lost it
    assert await b.release()
    messages = [r.getMessage() for r in caplog.records if r.name == "lakefs_core.service.lease"]
    assert messages[0] == "lease logs acquired by a"
    assert messages[1].startswith("lease logs acquired by b")
    if backend.kind == "kv":  # the KV record names the previous holder: a hand-over
        assert messages[1] == "lease logs acquired by b (handed over from a)"
    assert messages[2:] == ["lease logs lost by a", "lease logs released by b (handed over)"]
    assert all(r.levelno == logging.INFO for r in caplog.records if r.name == "lakefs_core.service.lease")


async def test_extra_fields_reach_the_log_record(backend: Backend, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="lakefs_core.service.lease")
    if backend.kind == "kv":
        assert backend.kv is not None
        lease: Lease = kv_lease(backend.kv, "gc/repo1", "me", 5.0, extra={"repository": "repo1"})
    else:
        lease = backend.make("x", "me", 5.0)
        assert isinstance(lease, SQLLease)
        lease.extra = {"repository": "repo1"}
    assert await lease.try_acquire()
    (record,) = [r for r in caplog.records if r.name == "lakefs_core.service.lease"]
    assert record.__dict__["repository"] == "repo1"


async def test_bad_inputs(backend: Backend) -> None:
    for bad_ttl in (0, -1.0, True):
        with pytest.raises(BadInputError):
            backend.make("n", "h", bad_ttl)
    with pytest.raises(BadInputError):
        backend.make("n", "", 1.0)
    with pytest.raises(BadInputError):
        backend.make("n", "h\0", 1.0)
    with pytest.raises(BadInputError):
        backend.make("", "h", 1.0)
    lease = backend.make("n", "h", 1.0)
    with pytest.raises(BadInputError):
        await lease.try_acquire(datetime(2024, 1, 1))  # naive: refused, never guessed


@pytest.mark.parametrize("backend_url", [b for b in BACKENDS if b.startswith("kv-")], indirect=True)
async def test_kv_record_that_does_not_parse_is_never_taken_over(backend: Backend) -> None:
    assert backend.kv is not None
    key = kvkeys.lease_key("junk")
    await backend.kv.set(kvkeys.LEASES_PARTITION, key, b"not json")
    lease = KVLease(backend.kv, kvkeys.LEASES_PARTITION, key, "me", 5.0)
    with pytest.raises(CorruptDataError):
        await lease.try_acquire(0.0)
    assert await backend.kv.get(kvkeys.LEASES_PARTITION, key) == b"not json"
    await backend.kv.set(kvkeys.LEASES_PARTITION, key, b'{"holder": "x", "expires_us": true}')
    with pytest.raises(CorruptDataError):
        await lease.current()
