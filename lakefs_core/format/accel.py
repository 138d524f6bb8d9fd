"""Which hot paths are compiled: the optional extensions ``format/_fastpath`` and ``block/_localput``.

The extensions (Cython, built by ``setup.py`` where a C compiler is available) speed up the
table writer's per-record path, the range split decision included (``_fastpath``), and the local
store's batched small puts (``_localput``: their system calls without the GIL). The pure-Python
twins have the same outcome and are used when an extension is not built, or when
``LAKEFS_PURE_PYTHON=1`` is set (the tests run both ways).
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType


def load(name: str) -> ModuleType | None:
    """The compiled module ``name``, or None when it is not built or switched off."""
    if os.environ.get("LAKEFS_PURE_PYTHON") == "1":
        return None
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as e:
        if e.name != name:
            raise  # a missing dependency of the extension is a broken install, not "not built"
        return None


#: The compiled table-writer module, or None when the pure-Python paths are in use.
FASTPATH: ModuleType | None = load("lakefs_core.format._fastpath")
