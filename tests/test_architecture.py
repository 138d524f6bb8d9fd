"""The house plan holds and would fail if broken: import-linter's contracts ([tool.importlinter] in
pyproject.toml) pass on the tree and fail, naming the contract, when an upward import is added to a
copy of it; the import graph (scripts/import_graph.py) has no cycle among packages."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.timing import scaled

ROOT = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")
PACKAGES = ("lakefs_core", "lakefs_gc", "lakefs_mirror", "lakefs_server")


def lint_imports(tree: Path) -> subprocess.CompletedProcess[str]:
    """``lint-imports`` on the packages found first in ``tree`` (its pyproject.toml's contracts)."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"], cwd=tree, env=env, capture_output=True, text=True,
        timeout=scaled(600), check=False,
    )  # fmt: skip


def copy_tree(target: Path) -> Path:
    for package in PACKAGES:
        shutil.copytree(
            ROOT / package, target / package, ignore=shutil.ignore_patterns("__pycache__", "*.so", "*.c")
        )
    shutil.copy(ROOT / "pyproject.toml", target / "pyproject.toml")
    return target


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return copy_tree(tmp_path_factory.mktemp("tree"))


def test_the_contracts_pass_on_the_tree() -> None:
    if not LINT_IMPORTS.exists():
        pytest.fail(f"{LINT_IMPORTS} is missing: install the dev extra (import-linter)")
    done = lint_imports(ROOT)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "0 broken" in done.stdout


def add_import(tree: Path, module: str, line: str) -> Path:
    path = tree / (module.replace(".", "/") + ".py")
    if not path.exists():
        path = tree / module.replace(".", "/") / "__init__.py"
    original = path.read_text()
    path.write_text(original + f"\n{line}\n")
    return path


@pytest.mark.parametrize(
    ("module", "line", "contract"),
    [
        # the format layer importing the repository layer: upward
        ("lakefs_core.format", "import lakefs_core.repos", "lakefs_core is layered"),
        # the core importing a daemon (the import command importing GC's Spark plumbing, as before)
        ("lakefs_core.cli.import_cmd", "import lakefs_gc.mark.mark", "lakefs_core imports no daemon"),
        # GC reaching into the mirror (pins.py importing its database, as before)
        ("lakefs_gc.pins", "import lakefs_mirror.db", "are independent"),
        # the mirror reaching past GC's published interface (gc_apply importing the sweep, as before)
        ("lakefs_mirror.gc_apply", "import lakefs_gc.sweep.sweep", "through lakefs_gc.published alone"),
        # the run registry importing a phase it reports on
        ("lakefs_gc.runs.runs", "import lakefs_gc.mark.mark", "lakefs_gc is layered"),
        # a daemon importing the shipped test suites
        ("lakefs_gc.service", "import lakefs_core.testing.kv", "imported by tests alone"),
        # the server reaching into GC, and an S3 operation importing the daemon above it
        ("lakefs_server.service", "import lakefs_gc.service", "are independent"),
        ("lakefs_server.gateway.objects", "import lakefs_server.service", "lakefs_server is layered"),
    ],
)
def test_an_upward_import_breaks_its_contract(tree: Path, module: str, line: str, contract: str) -> None:
    path = add_import(tree, module, line)
    original = path.read_text()
    try:
        done = lint_imports(tree)
    finally:
        path.write_text(original.removesuffix(f"\n{line}\n"))
    assert done.returncode != 0, done.stdout[-2000:]
    broken = done.stdout[done.stdout.index("Broken contracts") :]
    assert contract in broken, broken[:2000]


def test_no_package_depends_on_itself_through_another() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "import_graph.py")],
        capture_output=True,
        text=True,
        check=True,
    )
    lines = done.stdout.splitlines()
    package_level = next(line for line in lines if line.startswith("package level"))
    top_level = next(line for line in lines if line.startswith("top level"))
    assert package_level.endswith(" 0 cycles"), done.stdout
    assert top_level.endswith(" 0 cycles"), done.stdout


@pytest.mark.parametrize(
    ("container", "contract"),
    [("lakefs_core", "core-layers"), ("lakefs_gc", "gc-layers"), ("lakefs_server", "server-layers")],
)
def test_every_module_of_a_layered_package_has_its_layer(container: str, contract: str) -> None:
    """A module left out of a layers contract is checked by none: a new package must be placed."""
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    (layers,) = [c["layers"] for c in config["contracts"] if c["id"] == contract]
    names = {name.strip() for layer in layers for name in layer.replace(":", "|").split("|")}
    optional = {name[1:-1] for name in names if name.startswith("(")}  # e.g. another helper's package
    placed = {name for name in names if not name.startswith("(")} | optional
    present = {
        p.stem if p.suffix == ".py" else p.name
        for p in (ROOT / container).iterdir()
        if (p.suffix == ".py" and p.name != "__init__.py") or (p / "__init__.py").is_file()
    }
    assert present - placed == set(), f"not in any layer of {contract}"
    assert placed - present - optional == set(), f"layers of {contract} name what does not exist"
