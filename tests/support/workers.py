"""Module-level functions for tests that run work in ``lakefs_core.offloop``'s worker processes
(a spawned worker imports them by name, so they cannot live inside a test)."""

from __future__ import annotations

import os
import signal

from lakefs_core.errors import PurgedError


def pid_and_square(x: int) -> tuple[int, int]:
    return os.getpid(), x * x


def sigkill_self(*_args: object) -> None:
    """The worker process ends the way the OOM killer or ``kill -9`` would end it."""
    os.kill(os.getpid(), signal.SIGKILL)


def raise_value_error(message: str) -> None:
    raise ValueError(message)


def raise_purged(message: str, audit_id: str) -> None:
    raise PurgedError(message, audit_id=audit_id)


class Unpicklable(Exception):
    """Pickles as ``Unpicklable(message)`` but needs two arguments to be made: unpickling fails."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


def raise_unpicklable(message: str) -> None:
    raise Unpicklable(message, 3)
