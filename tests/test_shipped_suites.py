"""The shipped contract suites (lakefs_core.testing) run as a third-party driver runs them: a test
module outside this repository's tests (no conftest of ours), importing a suite and defining the
fixture it asks for, in a pytest process of its own."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from xml.etree import ElementTree

import pytest

from tests.support.timing import scaled

THIRD_PARTY = {
    "kv": """
        import pytest
        from lakefs_core.kv.memory import MemoryKVStore
        from lakefs_core.testing.kv import *  # noqa: F403
        from lakefs_core.testing.kv import KVDriver

        @pytest.fixture
        def kv_driver() -> KVDriver:
            async def open_store():
                return MemoryKVStore()
            return KVDriver(open_store, persistent=False)
        """,
    "block": """
        import pytest
        from lakefs_core.block import LocalBlockStore
        from lakefs_core.testing.block import *  # noqa: F403
        from lakefs_core.testing.block import BlockTraits

        @pytest.fixture
        async def store(tmp_path):
            s = LocalBlockStore(tmp_path / "root")
            yield s
            await s.close()

        @pytest.fixture
        def block_traits() -> BlockTraits:
            return BlockTraits(keys_are_paths=True)
        """,
    "lease": """
        import pytest
        from lakefs_core.kv import open_kv
        from lakefs_core.testing.lease import *  # noqa: F403
        from lakefs_core.testing.lease import kv_backend

        @pytest.fixture
        async def backend(tmp_path):
            async def open_store():
                return await open_kv(f"sqlite:///{tmp_path / 'kv.sqlite3'}")
            async for b in kv_backend(open_store):
                yield b
        """,
}


def _pytest(tmp_path: Path, module: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "asyncio_mode=auto",
         "-o", "asyncio_default_fixture_loop_scope=function", "--rootdir", str(tmp_path), *extra,
         str(module)],
        cwd=tmp_path, capture_output=True, text=True, timeout=scaled(600), env=env, check=False,
    )  # fmt: skip


@pytest.mark.parametrize("suite", ["kv", "block", "lease"])
def test_a_third_party_module_runs_a_shipped_suite(tmp_path: Path, suite: str) -> None:
    module = tmp_path / f"test_my_{suite}_driver.py"
    module.write_text(textwrap.dedent(THIRD_PARTY[suite]))
    shipped = importlib.import_module(f"lakefs_core.testing.{suite}")
    functions = [name for name in shipped.__all__ if name.startswith("test_")]
    # One pytest process collects and runs: its JUnit report counts what it collected and how each ended.
    proc = _pytest(tmp_path, module, "--junitxml", str(tmp_path / "report.xml"))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    report = ElementTree.parse(tmp_path / "report.xml").find("testsuite")
    assert report is not None
    counts = {k: int(report.get(k, "-1")) for k in ("tests", "failures", "errors", "skipped")}
    tests = counts["tests"]
    assert tests >= len(functions) > 0, proc.stdout[-2000:]  # every test of the suite, at least once
    assert counts == {"tests": tests, "failures": 0, "errors": 0, "skipped": 0}, counts  # all passed
    assert proc.stdout.splitlines()[-1].startswith(f"{tests} passed"), proc.stdout[-500:]
