"""Fault points for crash tests: ``<ENV>=<phase>:<point>[:<n>][:<how>]`` (``LAKEFS_GC_FAULT`` for the
GC, ``LAKEFS_CORE_FAULT`` for the core: ``import:before-commit``, ``upload:before-stage``,
``spark-write:before-commit``, ``multipart:before-record``: the S3 gateway between the store's
multipart creation and its KV record).

A run calls :func:`fault_point` at the places a crash matters; when the variable names that place
(and, for counted points, ``n`` equals the count), the process fails there:

- ``how`` = ``raise`` (default): raise :class:`InjectedFault` (in-process tests);
- ``exit``: ``os._exit(FAULT_EXIT)`` at once, no cleanup, no ``finally`` (a crash);
- ``kill``: ``SIGKILL`` to itself (the crash tests' ``kill -9``);
- ``stop``: ``SIGSTOP`` to itself, a stall of any length: the process goes on from there when a
  test sends it ``SIGCONT``.

The points are listed where their variable is named (:mod:`lakefs_gc.faults` for the GC's). Unset
(production): a dict lookup per call, nothing else.
"""

from __future__ import annotations

import os
import signal

from lakefs_core.errors import BadInputError, InjectedFaultError

ENV = "LAKEFS_CORE_FAULT"
FAULT_EXIT = InjectedFaultError.exit_code
_HOW = ("raise", "exit", "kill", "stop")


InjectedFault = InjectedFaultError  # the one tree's class (lakefs_core.errors); FAULT_EXIT is its code


def _parse(spec: str) -> tuple[str, int | None, str]:
    parts = spec.split(":")
    how = "raise"
    if parts and parts[-1] in _HOW:
        how = parts.pop()
    n: int | None = None
    if len(parts) == 3:
        if not parts[2].isdigit():
            raise BadInputError(f"{spec!r}: the count must be a number", field="fault")
        n = int(parts[2])
        parts = parts[:2]
    if len(parts) != 2 or not all(parts):
        raise BadInputError(f"{spec!r} is not <phase>:<point>[:<n>][:raise|exit|kill|stop]", field="fault")
    return f"{parts[0]}:{parts[1]}", n, how


def fault_point(point: str, n: int | None = None, *, env: str = ENV) -> None:
    """Fail here if the variable ``env`` names ``point`` (and ``n``, for a counted point)."""
    spec = os.environ.get(env)
    if not spec:
        return
    wanted, count, how = _parse(spec)
    if wanted != point or (count is not None and count != n):
        return
    if how == "exit":
        os._exit(FAULT_EXIT)
    if how == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if how == "stop":
        os.kill(os.getpid(), signal.SIGSTOP)
        return
    raise InjectedFault(f"injected fault at {point}" + (f" #{n}" if n is not None else ""))
