"""The one clock of a GC process: every timestamp of a run comes from a :class:`RunClock`.

Contract:

- ``RunClock(base, offset_seconds)``: :meth:`RunClock.now` is ``base() + offset_seconds`` (an aware
  UTC datetime; a naive or non-datetime answer of ``base`` is a
  :class:`~lakefs_core.errors.BadInputError`). ``base`` is the core's clock (``Graveler.clock``),
  so a test's injected clock reaches GC too; ``offset_seconds`` is the daemon's
  ``clock_offset_seconds`` (0 in production; demos and tests move retention forward with it).
- It is the only source of time of a GC run: retention ``now`` (unless given explicitly, as
  ``lakefs-gc mark --now``), ``run.json``'s and ``summary.json``'s ``start_time``, the run record's
  ``start_time``/``end_time``, ``sweep.json``'s times, the run ids (:meth:`RunClock.new_run_id`,
  which sort by this clock and strictly increase per base clock and offset in a process), the
  daemon's schedule (compared with the runs' times), its in-memory run states and its
  ``last_success`` metric.
- Not from it, on purpose: lease expiry (judged against other processes' clocks, which do not share
  the offset: ``lakefs_core.service.lease`` uses the real clock), intervals between a daemon's own
  checks (monotonic), and comparisons with the object store's modification times (the store's
  wall clock). ``tests/gc/test_run_clock.py`` holds every other use of the wall clock out of
  ``lakefs_gc``.
- A mark run as a child job gets the offset as a job argument (never the time itself), so the child's
  clock is the same clock.
"""

from __future__ import annotations

import math
import threading
import weakref
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from lakefs_core.errors import BadInputError
from lakefs_core.repos.graveler import RunIds

__all__ = ["RunClock", "check_offset"]

MAX_OFFSET_SECONDS = 100 * 365 * 86400.0  # a century either way: further is a configuration error


def check_offset(offset_seconds: object) -> float:
    """``offset_seconds`` as a float if it is a usable clock offset (finite, within a century)."""
    if (
        isinstance(offset_seconds, bool)
        or not isinstance(offset_seconds, int | float)
        or not math.isfinite(offset_seconds)
        or abs(offset_seconds) > MAX_OFFSET_SECONDS
    ):
        raise BadInputError(
            f"must be a finite number of seconds within {MAX_OFFSET_SECONDS:g}", field="clock_offset_seconds"
        )
    return float(offset_seconds)


# One id sequence per (base clock, offset) in this process: every RunClock made over the same clock
# (a run_mark call without an explicit clock makes one from the Graveler's) continues one sequence,
# so ids of successive runs strictly increase even when that clock stands still.
_sequences: weakref.WeakKeyDictionary[Callable[[], datetime], dict[float, RunIds]] = (
    weakref.WeakKeyDictionary()
)
_sequences_lock = threading.Lock()


def _sequence(base: Callable[[], datetime], offset_seconds: float) -> RunIds:
    with _sequences_lock:
        try:
            by_offset = _sequences.setdefault(base, {})
        except TypeError:  # not weakly referenceable (a bound method): its own sequence
            return RunIds()
        return by_offset.setdefault(offset_seconds, RunIds())


class RunClock:
    """``base() + offset_seconds``, and the run ids minted from it."""

    def __init__(self, base: Callable[[], datetime], offset_seconds: float = 0.0) -> None:
        self._base = base
        self.offset_seconds = check_offset(offset_seconds)
        self._offset = timedelta(seconds=self.offset_seconds)
        self._ids = _sequence(base, self.offset_seconds)

    def now(self) -> datetime:
        at = self._base()
        if not isinstance(at, datetime) or at.tzinfo is None or at.utcoffset() is None:
            raise BadInputError("the clock answered a naive or non-datetime value", field="clock")
        return (at + self._offset).astimezone(UTC)

    __call__ = now

    def timestamp(self) -> float:
        """:meth:`now` as Unix seconds."""
        return self.now().timestamp()

    def new_run_id(self) -> str:
        """A fresh run id at :meth:`now` (sorted by this clock, strictly increasing per clock)."""
        return self._ids.new(self.now())

    def __repr__(self) -> str:
        return f"RunClock(offset_seconds={self.offset_seconds:g})"
