"""The suite's hypothesis profiles, registered once (tests/conftest.py imports this module first).

- ``ci`` (the default): hypothesis's 100 examples per property, the sizes CI has always run;
- ``nightly``: ten times as many, for a scheduled or pre-release run;
- ``dev``: a fifth, for a quick local loop (never the default: a run without a choice is CI's).

Select one with ``HYPOTHESIS_PROFILE=<name>`` or pytest's ``--hypothesis-profile <name>`` (the
option wins). A test that needs another size scales the profile's by a documented factor with
:func:`examples` (``@settings(max_examples=examples(3))``: 300 under ``ci``, 3,000 under
``nightly``), never with a literal or an environment knob of its own. The deadline (for the tests
that keep one) is hypothesis's 200 ms times the time factor (:mod:`tests.support.timing`).
"""

from __future__ import annotations

import os
from datetime import timedelta

from hypothesis import settings

from tests.support.timing import TIME_FACTOR

ENV = "HYPOTHESIS_PROFILE"
DEFAULT_PROFILE = "ci"
BASE_EXAMPLES = {"ci": 100, "nightly": 1000, "dev": 20}


def register_profiles() -> None:
    """Register every profile and load the one ``HYPOTHESIS_PROFILE`` names (default ``ci``)."""
    deadline = timedelta(milliseconds=200 * TIME_FACTOR)
    for name, n in BASE_EXAMPLES.items():
        settings.register_profile(name, max_examples=n, deadline=deadline, print_blob=True)
    chosen = os.environ.get(ENV) or DEFAULT_PROFILE
    if chosen not in BASE_EXAMPLES:
        raise ValueError(f"{ENV}={chosen!r} is not one of the suite's profiles {sorted(BASE_EXAMPLES)}")
    settings.load_profile(chosen)


def examples(factor: float) -> int:
    """The loaded profile's ``max_examples`` times ``factor`` (at least 1). Evaluated when a test
    module is imported, after pytest has loaded the profile (``--hypothesis-profile`` included)."""
    return max(1, round(settings().max_examples * factor))
