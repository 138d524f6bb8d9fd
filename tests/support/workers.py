"""Module-level functions for tests that run work in ``lakefs_core.offloop``'s worker processes
(a spawned worker imports them by name, so they cannot live inside a test)."""

from __future__ import annotations

import os
import signal


def pid_and_square(x: int) -> tuple[int, int]:
    return os.getpid(), x * x


def sigkill_self(*_args: object) -> None:
    """The worker process ends the way the OOM killer or ``kill -9`` would end it."""
    os.kill(os.getpid(), signal.SIGKILL)


def raise_value_error(message: str) -> None:
    raise ValueError(message)
