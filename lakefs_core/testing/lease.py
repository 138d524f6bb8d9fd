"""The lease contract (:mod:`lakefs_core.service.lease`) as a pytest suite a backend runs.

A test module imports the suite and provides the fixture ``backend``: a :class:`LeaseBackend`
whose ``make(name, holder, ttl=10.0, *, daemon=0, extra=None)`` hands out leases of one fresh
store, from two independent connections (``daemon`` 0 or 1: races go through the real database or
KV, not one client object). A KV driver's module gets one from :func:`kv_backend`::

    from lakefs_core.testing.lease import *  # noqa: F403 (the contract's tests)
    from lakefs_core.testing.lease import LeaseBackend, kv_backend

    @pytest.fixture
    async def backend(tmp_path) -> AsyncIterator[LeaseBackend]:
        async for b in kv_backend(lambda: MyKVStore.open(tmp_path / "db")):
            yield b

The project runs it against every backend of its own (``tests/service/test_lease.py``: SQLLease on
SQLite and PostgreSQL, KVLease on every KV driver). Needs pytest and pytest-asyncio in
``asyncio_mode = "auto"`` (the ``dev`` extra); the library itself never imports this module.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from lakefs_core.errors import BadInputError
from lakefs_core.kv import KVStore
from lakefs_core.service.lease import Lease, LeaseState, kv_lease

__all__ = [  # ``import *`` takes every test
    "LeaseBackend",
    "kv_backend",
    "test_acquire_renew_expire_release",
    "test_bad_inputs",
    "test_datetimes_and_fractional_ttl",
    "test_extra_fields_reach_the_log_record",
    "test_lifecycle_logs",
    "test_racing_contenders_have_one_winner",
    "test_real_time_exclusivity",
]

T0 = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)

MakeLease = Callable[..., Lease]  # make(name, holder, ttl=10.0, *, daemon=0, extra=None) -> Lease


@dataclass
class LeaseBackend:
    kind: str  # "kv" records the previous holder (a hand-over is logged as one); others do not
    make: MakeLease
    kv: KVStore | None = None  # the first daemon's store (KV backends)


async def kv_backend(
    open_store: Callable[[], Awaitable[KVStore]], *, shared: bool = False
) -> AsyncIterator[LeaseBackend]:
    """A backend of :func:`~lakefs_core.service.lease.kv_lease` leases on two handles of one fresh
    store (``shared``: one handle for both daemons, for a store that lives in one process)."""
    first = await open_store()
    stores = [first, first if shared else await open_store()]

    def make(
        name: str, holder: str, ttl: float = 10.0, *, daemon: int = 0, extra: Mapping[str, Any] | None = None
    ) -> Lease:
        return kv_lease(stores[daemon], name, holder, ttl, extra=extra)

    try:
        yield LeaseBackend("kv", make, first)
    finally:
        for store in {id(s): s for s in stores}.values():
            await store.close()


# -- the contract -------------------------------------------------------------------------------------


async def test_acquire_renew_expire_release(backend: LeaseBackend) -> None:
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


async def test_datetimes_and_fractional_ttl(backend: LeaseBackend) -> None:
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


async def test_racing_contenders_have_one_winner(backend: LeaseBackend) -> None:
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


async def test_real_time_exclusivity(backend: LeaseBackend) -> None:
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


async def test_lifecycle_logs(backend: LeaseBackend, caplog: pytest.LogCaptureFixture) -> None:
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


async def test_extra_fields_reach_the_log_record(
    backend: LeaseBackend, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="lakefs_core.service.lease")
    lease = backend.make("gc/repo1", "me", 5.0, extra={"repository": "repo1"})
    assert await lease.try_acquire()
    (record,) = [r for r in caplog.records if r.name == "lakefs_core.service.lease"]
    assert record.__dict__["repository"] == "repo1"


async def test_bad_inputs(backend: LeaseBackend) -> None:
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
