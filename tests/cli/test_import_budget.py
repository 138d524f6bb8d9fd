"""The import set of each command line's fast paths stays within a recorded budget (issue 38).

Each command runs once in a fresh interpreter (:func:`tests.cli.helpers.run_probe`) and reports how
many modules ``sys.modules`` holds afterwards. ``import_budget.json`` records, per command, the count
measured when the budget was set plus a margin of a few modules (a new dependency's handful), so a
change that pulls a heavy package into start-up (pydantic into ``--help``, an SDK into ``fs ls``)
fails here with the modules it added; lowering a budget is always welcome. Timings themselves are
``bench/bench_cli_startup.py``'s (never asserted in tests).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli.helpers import run_probe

BUDGET = json.loads((Path(__file__).parent / "import_budget.json").read_text())

_PROBE = """
import importlib, json, sys
module, argv = sys.argv[2], sys.argv[3:]
main = importlib.import_module(module).main
code = main(argv)
with open(sys.argv[1], "w") as out:
    json.dump({"code": code, "modules": sorted(sys.modules)}, out)
"""

ENTRIES = {
    "lakefs-core": "lakefs_core.cli",
    "lakefs-gc": "lakefs_gc.cli",
    "lakefs-mirror": "lakefs_mirror.cli",
}


def modules_of(tmp_path: Path, command: str, *args: str) -> list[str]:
    result = run_probe(tmp_path, _PROBE, ENTRIES[command], *args)
    assert result["code"] == 0, result
    modules: list[str] = result["modules"]
    return modules


def within_budget(name: str, modules: list[str]) -> None:
    budget = BUDGET["commands"][name]
    ours = [m for m in modules if m.split(".")[0] in ("lakefs_core", "lakefs_gc", "lakefs_mirror")]
    assert len(modules) <= budget, (
        f"{name!r} imports {len(modules)} modules, budget {budget}; "
        f"top-level packages: {sorted({m.split('.')[0] for m in modules})}; the project's: {ours}"
    )


@pytest.mark.parametrize(
    "name", ["lakefs-core --help", "lakefs-core --version", "lakefs-gc --help", "lakefs-mirror --help"]
)
def test_help_stays_within_its_import_budget(tmp_path: Path, name: str) -> None:
    command, *args = name.split()
    within_budget(name, modules_of(tmp_path, command, *args))


def test_fs_ls_stays_within_its_import_budget(tmp_path: Path) -> None:
    modules_of(tmp_path, "lakefs-core", "repo", "create", "lakefs://budget", f"local://{tmp_path / 'ns'}")
    modules = modules_of(tmp_path, "lakefs-core", "fs", "ls", "lakefs://budget/main/")
    within_budget("lakefs-core fs ls", modules)
    # and none of the heavy packages the embedded default never needs: no SDK, no SQLAlchemy, and
    # no configuration schema (pydantic, ~0.1 s) when there is no configuration to read
    heavy = ("sqlalchemy", "boto3", "botocore", "aioboto3", "yaml", "pydantic", "pydantic_core")
    assert not [m for m in modules if m.split(".")[0] in heavy]
