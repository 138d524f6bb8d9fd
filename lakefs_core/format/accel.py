"""Which per-record paths are compiled: the optional extension ``format/_fastpath``.

The extension (Cython, built by ``setup.py`` where a C compiler is available) speeds up the
table writer's per-record path, the range split decision included; pure-Python twins produce the
same bytes and are used when it is not built, or when ``LAKEFS_PURE_PYTHON=1`` is set (the tests
run both ways).
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

_NAME = "lakefs_core.format._fastpath"


def _load() -> ModuleType | None:
    if os.environ.get("LAKEFS_PURE_PYTHON") == "1":
        return None
    try:
        return importlib.import_module(_NAME)
    except ModuleNotFoundError as e:
        if e.name != _NAME:
            raise  # a missing dependency of the extension is a broken install, not "not built"
        return None


#: The compiled module, or None when the pure-Python paths are in use.
FASTPATH: ModuleType | None = _load()
