"""The thin loop every daemon runs around its ``step()``.

- cadence: a successful pass is followed by a wait of ``interval`` seconds;
- backoff: a failed pass (any exception) is followed by a wait that grows exponentially with the
  number of consecutive failures, with full jitter, capped at ``max_backoff``;
- two-stage graceful shutdown: the first SIGTERM/SIGINT lets the current pass finish and then
  stops; a second one cancels the pass in flight;
- ``once``: run exactly one pass and return its outcome as the exit status.

The loop never swallows a pass's error silently: it is logged with its class, counted in
``consecutive_errors``, and (with ``once``) turned into exit status 1.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import signal
from collections.abc import Awaitable, Callable

log = logging.getLogger(__name__)


class DaemonLoop:
    def __init__(
        self,
        step: Callable[[], Awaitable[object]],
        *,
        name: str,
        interval: float,
        max_backoff: float = 60.0,
        on_result: Callable[[int], None] | None = None,
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
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), timeout=self.next_delay())
            if self._stopping.is_set():
                return 0
