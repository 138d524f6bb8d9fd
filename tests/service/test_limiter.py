"""The sweep's AIMD rate limiter, on a fake clock (its sleep moves the clock: no real waiting)."""

from __future__ import annotations

import pytest

from lakefs_core.errors import BadInputError
from lakefs_core.service.limiter import RateLimiter


class FakeTime:
    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def limiter(t: FakeTime, **kw: float) -> RateLimiter:
    return RateLimiter(clock=t.clock, sleep=t.sleep, **kw)


async def test_paces_sends_at_the_rate() -> None:
    t = FakeTime()
    lim = limiter(t)
    assert lim.rate == 500
    start = t.now
    for _ in range(5):
        await lim.acquire(1000)
    # the first send goes at once, each later one 1000/500 = 2 s after the previous
    assert t.slept == [2.0, 2.0, 2.0, 2.0]
    assert t.now - start == 8.0
    assert lim.waited == 8.0


async def test_idle_time_is_not_saved_up_as_a_burst() -> None:
    t = FakeTime()
    lim = limiter(t)
    await lim.acquire(1000)
    t.now += 60  # idle for a minute
    await lim.acquire(1000)
    await lim.acquire(1000)
    assert t.slept == [2.0]


async def test_additive_increase_after_each_clean_period_up_to_the_cap() -> None:
    t = FakeTime()
    lim = limiter(t, cap=800)
    for _ in range(9):
        t.now += 1
        lim.on_success()
    assert lim.rate == 500  # 9 s: not yet a clean period
    t.now += 1
    lim.on_success()
    assert lim.rate == 600
    lim.on_success()
    assert lim.rate == 600  # at most one step per period
    for _ in range(10):
        t.now += 10
        lim.on_success()
    assert lim.rate == 800


async def test_multiplicative_decrease_and_retry_after() -> None:
    t = FakeTime()
    lim = limiter(t, floor=100)
    sent = await lim.acquire(1000)
    t.now += 0.1
    lim.on_throttle(None, sent_at=sent)
    assert lim.rate == 250 and lim.throttles == 1
    sent = await lim.acquire(1000)  # booked at the old rate: 2 s after the first
    assert t.slept == [pytest.approx(1.9)]
    lim.on_throttle(7.5, sent_at=sent)
    assert lim.rate == 125
    t.slept.clear()
    await lim.acquire(10)
    assert t.slept == [pytest.approx(7.5)]  # Retry-After holds the next send back
    for _ in range(5):
        lim.on_throttle()
    assert lim.rate == 100  # the floor
    # the clean period restarts at each throttle
    t.now += 9.9
    lim.on_success()
    assert lim.rate == 100


async def test_one_burst_of_throttles_halves_once() -> None:
    t = FakeTime()
    lim = limiter(t, start=2000)
    sends = [await lim.acquire(100) for _ in range(4)]  # four requests in flight
    t.now += 0.5
    for sent in sends:
        lim.on_throttle(None, sent_at=sent)
    assert lim.rate == 1000 and lim.throttles == 1
    later = await lim.acquire(100)
    lim.on_throttle(None, sent_at=later)  # a request sent after the burst was seen: a new signal
    assert lim.rate == 500 and lim.throttles == 2


async def test_waits_are_bounded_and_arguments_checked() -> None:
    t = FakeTime()
    lim = limiter(t)
    lim.on_throttle(10**9)  # a hostile Retry-After
    await lim.acquire(1)
    assert t.slept == [3600.0]
    for bad in [0, -1, 1.5, True]:
        with pytest.raises(BadInputError):
            await lim.acquire(bad)  # type: ignore[arg-type]
    with pytest.raises(BadInputError):
        RateLimiter(cap=10, floor=20)
    with pytest.raises(BadInputError):
        RateLimiter(start=float("nan"))
    assert RateLimiter(start=10**6, cap=3000).rate == 3000
