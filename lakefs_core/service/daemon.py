"""The thin loop every daemon runs around its ``step()``.

- cadence: a successful pass is followed by a wait of ``interval`` seconds;
- backoff: a failed pass (any exception) is followed by a wait that grows exponentially with the
  number of consecutive failures, with full jitter, capped at ``max_backoff``;
- two-stage graceful shutdown: the first SIGTERM/SIGINT lets the current pass finish and then
  stops; a second one cancels the pass in flight;
- ``once``: run exactly one pass and return its outcome as the exit status;
- liveness: the loop records a monotonic heartbeat at the start and end of every pass and at least
  every :data:`IDLE_BEAT_SECONDS` while it waits between passes. :meth:`DaemonLoop.is_live` is
  true while the last heartbeat is younger than ``pass_timeout + grace`` (``grace`` defaults to
  the interval plus :data:`IDLE_BEAT_SECONDS`, and is at least two idle beats), so a step that
  never returns makes the loop not live; ``/_health`` answers 503 and the systemd watchdog stops
  being fed (see :mod:`lakefs_core.service.systemd`).

The loop never swallows a pass's error silently: it is logged with its class, counted in
``consecutive_errors``, and (with ``once``) turned into exit status 1.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import importlib
import logging
import random
import signal
import time
from collections.abc import Awaitable, Callable, Iterable

from lakefs_core.errors import StartupError

log = logging.getLogger(__name__)

IDLE_BEAT_SECONDS = 0.5  # the idle wait wakes this often to beat, so idling never looks hung
DEFAULT_PASS_TIMEOUT = 900.0  # a pass running longer than this counts as hung


def freeze_startup_heap(preload: Iterable[str] = ()) -> int:
    """Import the modules ``preload`` names (what the daemon's libraries load on first use, so
    nothing is imported on its event loop later), collect, then move every object alive now
    (modules, schemas, the app, open clients) to the collector's permanent generation
    (``gc.freeze``), so the full collections a pass triggers no longer walk them: measured on the
    mirror daemon, a generation-2 collection during a pass went from ~53 ms to ~8 ms of loop stall.
    Called once by a daemon's entry point after start-up; the cost is that start-up objects which
    later die in a reference cycle are never reclaimed. Returns how many objects were frozen."""
    for name in preload:
        importlib.import_module(name)
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


def require_sqlite_dir(url: str, *, key: str) -> None:
    """Raise :class:`StartupError` naming ``key`` when ``url`` is a SQLite file URL whose directory
    does not exist. Daemons call this before opening: a typo in a path must not silently create
    a fresh, empty database somewhere (only the lakefs-core CLI's embedded default creates it).
    The check itself is :func:`lakefs_core.settings.sqlite_dir_problem` (also run by check-config)."""
    from lakefs_core.settings import sqlite_dir_problem

    problem = sqlite_dir_problem(url)
    if problem is not None:
        raise StartupError(problem, key=key)


class DaemonLoop:
    def __init__(
        self,
        step: Callable[[], Awaitable[object]],
        *,
        name: str,
        interval: float,
        max_backoff: float = 60.0,
        on_result: Callable[[int], None] | None = None,
        pass_timeout: float = DEFAULT_PASS_TIMEOUT,
        grace: float | None = None,
    ) -> None:
        self.step = step
        self.name = name
        self.interval = interval
        self.max_backoff = max_backoff
        self.on_result = on_result  # called with the consecutive error count after each pass
        self.consecutive_errors = 0
        self.passes = 0
        self._stopping = asyncio.Event()
        self._current: asyncio.Task[object] | None = None
        self.pass_timeout = pass_timeout
        # never below two idle beats: an idling loop must not flicker to "not live" between beats
        self.grace = max(interval + IDLE_BEAT_SECONDS if grace is None else grace, 2 * IDLE_BEAT_SECONDS)
        self.last_heartbeat = time.monotonic()

    def beat(self) -> None:
        self.last_heartbeat = time.monotonic()

    def heartbeat_age(self) -> float:
        return time.monotonic() - self.last_heartbeat

    def is_live(self) -> bool:
        """True while the last heartbeat is fresher than ``pass_timeout + grace``."""
        return self.heartbeat_age() <= self.pass_timeout + self.grace

    def request_stop(self) -> None:
        """First call: finish the current pass, then stop. Second call: cancel the pass too."""
        if self._stopping.is_set():
            if self._current is not None and not self._current.done():
                log.warning("%s: second stop request, cancelling the pass in flight", self.name)
                self._current.cancel()
            return
        log.info("%s: stop requested, finishing the current pass", self.name)
        self._stopping.set()

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    def install_signal_handlers(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.request_stop)

    def next_delay(self) -> float:
        if self.consecutive_errors == 0:
            return self.interval
        cap = min(self.max_backoff, self.interval * (2 ** min(self.consecutive_errors, 30)))
        return random.uniform(self.interval / 2, max(cap, self.interval))

    async def _one_pass(self) -> bool:
        self.beat()
        self._current = asyncio.create_task(self._call())
        ok = False
        try:
            await self._current
            ok = True
        except asyncio.CancelledError:
            if not self._stopping.is_set():
                raise
        except Exception as e:
            log.error("%s: pass failed: %s: %s", self.name, type(e).__name__, e)
        finally:
            self._current = None
            self.beat()
            self.passes += 1
            self.consecutive_errors = 0 if ok else self.consecutive_errors + 1
            if self.on_result is not None:
                self.on_result(self.consecutive_errors)
        return ok

    async def _call(self) -> object:
        return await self.step()

    async def run(self, *, once: bool = False) -> int:
        """Run passes until stopped (or one pass with ``once``). Returns a process exit status."""
        while True:
            ok = await self._one_pass()
            if once:
                return 0 if ok else 1
            if self._stopping.is_set():
                return 0
            await self._idle(self.next_delay())
            if self._stopping.is_set():
                return 0

    async def _idle(self, delay: float) -> None:
        """Wait ``delay`` seconds or until a stop request, beating at least every IDLE_BEAT_SECONDS."""
        deadline = time.monotonic() + delay
        while not self._stopping.is_set():
            self.beat()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), timeout=min(remaining, IDLE_BEAT_SECONDS))
