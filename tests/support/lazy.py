"""Modules a test file names at its top but imports at its first use (issue 33: ``make test-fast``).

Every pytest-xdist worker imports every test module to collect it, while only the worker that runs
a file uses what the file imports. :func:`lazy_module` returns the module object at once and runs
its code at the first attribute read (:class:`importlib.util.LazyLoader`), so a heavy client
library costs nothing to the worker that only collects the file: ``lakefs_sdk`` (pydantic models
of the whole lakeFS API) was a fifth of a collection's CPU. The module is the real one; only the
moment it is imported moves.
"""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

import pytest


def lazy_module(name: str) -> ModuleType:
    """Module ``name``, imported at its first attribute read; skips the file when it is not
    installed (as ``pytest.importorskip`` would, without importing it)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None:
        pytest.skip(f"could not import {name!r}: not installed", allow_module_level=True)
    spec.loader = importlib.util.LazyLoader(spec.loader)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
