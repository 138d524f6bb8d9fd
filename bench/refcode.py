"""Another commit's ``lakefs_core`` imported beside this one, for same-run before/after figures.

:func:`load_ref` extracts ``lakefs_core/`` of a commit with ``git archive`` into a temporary
directory (removed when the process exits), renames the package (every ``lakefs_core`` word in its
Python sources becomes ``lakefs_ref_<commit>``) and puts it on ``sys.path``. Both versions then run
in one process on the same tables, so a benchmark can alternate them and report same-run ratios:
on a shared machine, figures from separate runs differ by more than the changes being measured.

What runs is the commit's pure Python. Its compiled extensions are not built (its ``accel`` finds
none under the new name and uses the pure-Python twins), and its generated protobuf modules are
this checkout's (a descriptor may be registered once per process): compare code paths whose
compiled parts and messages are equal, or say so beside the figure.
"""

from __future__ import annotations

import atexit
import importlib
import importlib.util
import io
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
_WORD = re.compile(r"\blakefs_core\b")


def _git(*args: str) -> bytes:
    return subprocess.run(["git", "-C", str(ROOT), *args], check=True, capture_output=True).stdout


def load_ref(commit: str) -> ModuleType:
    """The top-level package of ``commit``'s ``lakefs_core`` under the name ``lakefs_ref_<hash>``."""
    short = _git("rev-parse", "--short=12", f"{commit}^{{commit}}").decode().strip()
    name = f"lakefs_ref_{short}"
    if name in sys.modules:
        return sys.modules[name]
    root = Path(tempfile.mkdtemp(prefix="lakefs-ref-"))
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    with tarfile.open(fileobj=io.BytesIO(_git("archive", "--format=tar", short, "lakefs_core"))) as tar:
        tar.extractall(root, filter="data")
    package = root / name
    (root / "lakefs_core").rename(package)
    for path in package.rglob("*.py"):
        if not path.name.endswith("_pb2.py"):
            path.write_text(_WORD.sub(name, path.read_text(encoding="utf-8")), encoding="utf-8")
    for path in (package / "format" / "proto").glob("*_pb2.py"):
        sys.modules[f"{name}.format.proto.{path.stem}"] = importlib.import_module(
            f"lakefs_core.format.proto.{path.stem}"
        )
    sys.path.insert(0, str(root))
    return importlib.import_module(name)


def submodule(package: ModuleType, *candidates: str) -> ModuleType:
    """The first of ``candidates`` (dotted paths under ``package``) that exists: modules move
    between commits (``graveler`` became ``committed``)."""
    for candidate in candidates:
        dotted = f"{package.__name__}.{candidate}"
        try:
            found = importlib.util.find_spec(dotted)
        except ModuleNotFoundError:  # its parent package is missing
            found = None
        if found is not None:
            return importlib.import_module(dotted)
    raise ModuleNotFoundError(f"none of {candidates} in {package.__name__}")
