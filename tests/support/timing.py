"""The suite's time factor: every time limit a test sets scales with ``LAKEFS_TEST_TIME_FACTOR``.

A limit in a test (a subprocess timeout, an ``asyncio.timeout`` guard, a ``proc.wait``, pytest-timeout's
per-test limit, hypothesis's deadline) bounds how long a hang may last; it is not what the test checks.
On a loaded machine (CI runners shared by jobs, two cores shared by several suites) honest work can
take several times longer, so such limits are written ``scaled(60)``: 60 s at the default factor 1,
180 s with ``LAKEFS_TEST_TIME_FACTOR=3``. Durations the code under test is configured with (a lease
TTL, a pool timeout, a pass timeout whose expiry a test provokes) are behaviour and never scaled.

An unparsable, non-finite or non-positive factor fails the run at import with a message naming the
variable (a silently ignored factor would hide the cause of the next timeout).
"""

from __future__ import annotations

import math
import os

ENV = "LAKEFS_TEST_TIME_FACTOR"


def parse_time_factor(raw: str | None) -> float:
    """The factor ``raw`` names (unset or empty: 1.0); ValueError naming :data:`ENV` otherwise."""
    if raw is None or not raw.strip():
        return 1.0
    try:
        factor = float(raw)
    except ValueError:
        raise ValueError(f"{ENV}={raw!r} is not a number") from None
    if not math.isfinite(factor) or factor <= 0:
        raise ValueError(f"{ENV}={raw!r} must be a finite number > 0")
    return factor


TIME_FACTOR = parse_time_factor(os.environ.get(ENV))


def scaled(seconds: float) -> float:
    """``seconds`` times the suite's time factor."""
    return seconds * TIME_FACTOR
