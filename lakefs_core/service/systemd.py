"""systemd ``Type=notify`` support without extra dependencies (the sd_notify(3) datagram protocol).

- :meth:`Notifier.from_env` reads ``NOTIFY_SOCKET`` (a path, or an abstract socket when it starts
  with ``@``) and ``WATCHDOG_USEC`` (honoured only when ``WATCHDOG_PID`` is unset or names this
  process). Without ``NOTIFY_SOCKET`` every method is a no-op, so daemons call them unconditionally.
- :meth:`Notifier.notify` sends one datagram (``READY=1``, ``STOPPING=1``, ...). A send that fails
  is logged at WARNING and never raised, and a send never blocks (a full receiver queue drops the
  datagram): the notification channel must not take the daemon down or freeze its event loop.
- :meth:`Notifier.watchdog` is a task body that sends ``WATCHDOG=1`` every ``WATCHDOG_USEC/2`` but
  ONLY while ``is_live()`` is true: a hung daemon loop stops feeding the watchdog and systemd
  restarts the service after ``WatchdogSec=``.
- :func:`run_notified` runs a :class:`~lakefs_core.service.daemon.DaemonLoop` with that protocol:
  ``READY=1`` once the loop runs (the caller has bound its HTTP port before), the watchdog while it
  runs, ``STOPPING=1`` when it ends (normally, by signal, or by an error).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from lakefs_core.service.daemon import DaemonLoop

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Notifier:
    address: str | None = None  # a socket path, or "\0name" for an abstract socket
    watchdog_interval: float | None = None  # seconds between WATCHDOG=1 (WATCHDOG_USEC / 2)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Notifier:
        env = os.environ if env is None else env
        raw = env.get("NOTIFY_SOCKET", "")
        address = ("\0" + raw[1:] if raw.startswith("@") else raw) or None
        interval: float | None = None
        pid = env.get("WATCHDOG_PID", "")
        usec = env.get("WATCHDOG_USEC", "")
        if usec.isascii() and usec.isdigit() and int(usec) > 0 and (not pid or pid == str(os.getpid())):
            interval = int(usec) / 2_000_000
        return cls(address, interval)

    @property
    def enabled(self) -> bool:
        return self.address is not None

    def notify(self, state: str) -> bool:
        """Send ``state`` (e.g. ``"READY=1"``); True when a datagram was sent."""
        if self.address is None:
            return False
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
                # Non-blocking: a receiver that stopped reading (full queue) must never freeze the
                # event loop; the datagram is dropped and the next watchdog tick tries again.
                sock.setblocking(False)
                sock.sendto(state.encode("utf-8"), self.address)
        except OSError as e:
            log.warning("systemd notification %r failed: %s", state, e)
            return False
        return True

    async def watchdog(self, is_live: Callable[[], bool]) -> None:
        """Feed the watchdog every interval while ``is_live()``; returns at once when disabled."""
        if self.address is None or self.watchdog_interval is None:
            return
        while True:
            if is_live():
                self.notify("WATCHDOG=1")
            else:
                log.error("daemon loop not live: not feeding the systemd watchdog")
            await asyncio.sleep(self.watchdog_interval)


async def run_notified(loop: DaemonLoop, notifier: Notifier, *, once: bool = False) -> int:
    """Run ``loop`` with READY=1 / WATCHDOG=1 / STOPPING=1 notifications; returns its exit status."""
    task = asyncio.create_task(loop.run(once=once))
    notifier.notify("READY=1")
    log.info("%s: running (pid %d)", loop.name, os.getpid())
    feeder = asyncio.create_task(notifier.watchdog(loop.is_live))
    try:
        return await task
    finally:
        notifier.notify("STOPPING=1")
        feeder.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await feeder
        if not task.done():  # we were cancelled: the loop must not outlive us
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
