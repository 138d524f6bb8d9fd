"""The sweep's adaptive rate limiter, in keys per second (gc.md §3b; lakeFS #5729).

AIMD, paced rather than bursty:

- :meth:`RateLimiter.acquire` ``(n)`` waits until ``n`` more keys may be sent. Sends are spaced so the
  long-run rate is :attr:`RateLimiter.rate`: after a send of ``n`` keys the next one may start
  ``n / rate`` seconds later (the first send of an idle limiter goes at once).
- :meth:`RateLimiter.on_success` after every request the backend did not throttle: each time
  ``increase_every`` seconds (default 10) have passed without a throttle and since the last increase,
  the rate grows by ``step`` (default 100 keys/s), up to ``cap`` (default 3,000 keys/s: S3 allows 3,500
  DELETE/s per partitioned prefix).
- :meth:`RateLimiter.on_throttle` after a request answered 503 SlowDown (or kin): the rate halves,
  down to ``floor``, and the clean period starts again. A ``Retry-After`` (seconds) holds every send
  back until it has passed. A throttle of a request sent before the previous throttle was seen
  (``sent_at``, as :meth:`RateLimiter.acquire` returned it) belongs to the same burst and does not
  halve again: concurrent requests caught by one burst of 503s are one signal, not a collapse to
  the floor.

The clock (monotonic seconds) and the sleep are injectable, so tests run without waiting. One event
loop; ``acquire`` may be awaited by several tasks, which are then served in turn.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

from lakefs_core.errors import BadInputError

START_RATE = 500.0
STEP = 100.0
INCREASE_EVERY = 10.0
CAP = 3000.0
FLOOR = 10.0
MAX_WAIT = 3600.0  # no single hold-back (Retry-After included) is longer than this


def _positive(value: object, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < float("inf"):
        raise BadInputError("must be a positive number", field=name)
    return float(value)


class RateLimiter:
    """An AIMD limiter in keys/s (see the module docstring)."""

    def __init__(
        self,
        *,
        start: float = START_RATE,
        step: float = STEP,
        increase_every: float = INCREASE_EVERY,
        cap: float = CAP,
        floor: float = FLOOR,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
    ) -> None:
        self.cap = _positive(cap, "cap")
        self.floor = _positive(floor, "floor")
        if self.floor > self.cap:
            raise BadInputError("must not exceed cap", field="floor")
        self.step = _positive(step, "step")
        self.increase_every = _positive(increase_every, "increase_every")
        self._rate = min(self.cap, max(self.floor, _positive(start, "start")))
        self._clock, self._sleep = clock, sleep
        now = clock()
        self._next_send = now  # the earliest time the next send may start
        self._clean_since = now  # the last throttle or increase
        self._last_throttle: float | None = None
        self._lock = asyncio.Lock()
        self.throttles = 0  # throttle signals counted (bursts once)
        self.waited = 0.0  # seconds spent holding sends back

    @property
    def rate(self) -> float:
        """The current rate, keys/s."""
        return self._rate

    async def acquire(self, n: int) -> float:
        """Wait until ``n`` keys may be sent, book them, and return the send time (clock seconds)."""
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise BadInputError("must be a positive integer", field="n")
        async with self._lock:
            delay = min(self._next_send - self._clock(), MAX_WAIT)
            if delay > 0:
                self.waited += delay
                await self._sleep(delay)
            now = self._clock()
            self._next_send = max(now, self._next_send) + n / self._rate
            return now

    def on_success(self) -> None:
        """The backend took a request without throttling: grow the rate after each clean period."""
        now = self._clock()
        if now - self._clean_since >= self.increase_every:
            self._rate = min(self.cap, self._rate + self.step)
            self._clean_since = now

    def on_throttle(self, retry_after: float | None = None, *, sent_at: float | None = None) -> None:
        """The backend asked to slow down: halve the rate (once per burst: see the module docstring)
        and hold every send back for ``retry_after`` seconds if given."""
        now = self._clock()
        burst = sent_at is not None and self._last_throttle is not None and sent_at < self._last_throttle
        if not burst:
            self._rate = max(self.floor, self._rate / 2)
            self.throttles += 1
        self._last_throttle = now
        self._clean_since = now
        if retry_after is not None and retry_after > 0:
            self._next_send = max(self._next_send, now + min(float(retry_after), MAX_WAIT))
