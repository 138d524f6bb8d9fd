"""Run a module of this project as another user (``setpriv``), from files that user can read.

A checkout may sit in a private directory (mode 0700: a home directory, ``mktemp -d``), where
another user reaches neither the sources nor the virtual environment. :func:`readable_runtime`
therefore lays the code under test out in a directory every user may enter: the top-level packages
(whole, so their lazy imports are there too) of every module a traced run as the current user
imported, hard-linked where the file system allows (instant, and the files' own modes still apply),
copied otherwise. The other user runs it with an interpreter it can execute: this one's base
interpreter, or a ``python3.X`` of the same version on ``PATH`` (extension modules match the minor
version), with ``-S`` and ``PYTHONPATH`` pointing at the copy only.

Contract: :func:`readable_runtime` returns the argv prefix (``setpriv`` ... ``python -S``) and the
environment additions, or skips (locally) / fails (CI) naming what the other user cannot run.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tests.support.env import skip_or_fail
from tests.support.timing import scaled

NOBODY = 65534

# Prints, at exit, the top-level packages of every imported module that lives in a file.
_TRACER = """
import atexit, json, runpy, sys
out = sys.argv[1]
def dump():
    roots = {}
    for name in list(sys.modules):
        top = sys.modules.get(name.split(".")[0])
        where = getattr(top, "__file__", None) or next(iter(getattr(top, "__path__", None) or []), None)
        if where and not name.startswith(("__main__", "__mp_main__")):
            roots[name.split(".")[0]] = where
    with open(out, "w") as f:
        json.dump(roots, f)
atexit.register(dump)
module, sys.argv = sys.argv[2], [sys.argv[2], *sys.argv[3:]]
runpy.run_module(module, run_name="__main__", alter_sys=True)
"""


@dataclass(frozen=True)
class Runtime:
    argv: list[str]  # setpriv ... python -S (append "-m", module, args)
    env: dict[str, str]  # PYTHONPATH (and nothing else) to add to the caller's environment


def as_user(uid: int) -> list[str]:
    setpriv = shutil.which("setpriv")
    if os.geteuid() != 0 or setpriv is None:
        skip_or_fail("needs root and util-linux setpriv to run a command as another user")
        raise AssertionError("unreachable")
    return [setpriv, f"--reuid={uid}", f"--regid={uid}", "--clear-groups"]


def _interpreter(user: list[str]) -> str:
    """An interpreter of this Python's minor version that the other user can execute."""
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    on_path = [os.path.join(d, version) for d in os.environ.get("PATH", "").split(os.pathsep) if d]
    candidates = [
        os.path.realpath(getattr(sys, "_base_executable", sys.executable)),
        *(p for p in on_path if os.access(p, os.X_OK)),  # a pyenv shim too: the probe decides
        f"/usr/bin/{version}",
        f"/usr/local/bin/{version}",
    ]
    for candidate in dict.fromkeys(c for c in candidates if c):
        probe = subprocess.run(
            [*user, candidate, "-S", "-c", "import sys; print(sys.version_info[:2])"],
            capture_output=True, text=True, timeout=scaled(30), check=False,
        )  # fmt: skip
        if probe.returncode == 0 and probe.stdout.strip() == str(sys.version_info[:2]):
            return candidate
    skip_or_fail(f"no {version} that uid {user[1].split('=')[1]} can execute (tried {candidates})")
    raise AssertionError("unreachable")


def _link_tree(src: Path, dst: Path) -> None:
    def link_or_copy(s: str, d: str) -> object:
        try:
            os.link(s, d)
        except OSError:  # another file system, or linking refused
            shutil.copy2(s, d)
        return d

    if src.is_dir():
        shutil.copytree(src, dst, copy_function=link_or_copy, ignore=shutil.ignore_patterns("__pycache__"))
    else:
        link_or_copy(str(src), str(dst))


def readable_runtime(
    base: Path, trace_runs: Sequence[Sequence[str]], *, module: str, env: dict[str, str], uid: int = NOBODY
) -> Runtime:
    """Lay out under ``base`` (a directory the other user may enter) the packages ``module`` needs:
    those imported by running ``python -m module <args>`` here for each of ``trace_runs``."""
    user = as_user(uid)
    python = _interpreter(user)
    roots: dict[str, str] = {}
    for i, args in enumerate(trace_runs):
        out = base / f".trace-{i}.json"
        done = subprocess.run(
            [sys.executable, "-c", _TRACER, str(out), module, *args],
            capture_output=True, text=True, env=env, cwd=base, timeout=scaled(120), check=False,
        )  # fmt: skip
        assert out.exists(), f"tracing {module} {list(args)} failed: {done.stderr[-2000:]}"
        roots.update(json.loads(out.read_text()))
        out.unlink()
    stdlib = Path(sys.base_prefix).resolve()
    site = base / "site"
    site.mkdir()
    for file in sorted(roots.values()):
        path = Path(file).resolve()
        if path.is_relative_to(stdlib) and "site-packages" not in path.parts:
            continue  # the standard library: the other user's interpreter has its own
        src = path.parent if path.name == "__init__.py" else path
        # with the shared libraries a wheel vendors beside its package (auditwheel's <name>.libs)
        for item in (src, src.with_name(f"{src.name.split('.')[0]}.libs")):
            if item.exists() and not (site / item.name).exists():
                _link_tree(item, site / item.name)
    site_dirs = {Path(*p.parts[: p.parts.index("site-packages") + 1]) for p in map(Path, roots.values())
                 if "site-packages" in p.parts}  # fmt: skip
    for packages in site_dirs:
        for meta in packages.glob("*.dist-info"):  # importlib.metadata answers as it does here
            if not (site / meta.name).exists():
                _link_tree(meta, site / meta.name)
    for path in [site, *site.rglob("*")]:  # directories enterable, files readable (links share modes)
        if path.is_dir():
            path.chmod(0o755)
    return Runtime([*user, python, "-S"], {"PYTHONPATH": str(site)})
