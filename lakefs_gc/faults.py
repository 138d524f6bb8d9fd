"""The GC's fault points for crash tests: ``LAKEFS_GC_FAULT=<phase>:<point>[:<n>][:raise|exit|kill]``.

The mechanism is the core's (:mod:`lakefs_core.faults`); this module only names the GC's variable.
Points: ``mark:claimed``, ``mark:before-summary``, ``mark:before-record`` (``summary.json`` written,
the KV run record not yet), ``sweep:verified``, ``sweep:batch:<n>`` (after the
n-th batch's delete, before its checkpoint), ``sweep:before-report``. Unset (production): a dict
lookup per call, nothing else.
"""

from __future__ import annotations

from lakefs_core import faults
from lakefs_core.faults import FAULT_EXIT, InjectedFault

ENV = "LAKEFS_GC_FAULT"

__all__ = ["ENV", "FAULT_EXIT", "InjectedFault", "fault_point"]


def fault_point(point: str, n: int | None = None) -> None:
    """Fail here if ``LAKEFS_GC_FAULT`` names ``point`` (and ``n``, for a counted point)."""
    faults.fault_point(point, n, env=ENV)
