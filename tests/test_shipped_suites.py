"""The shipped contract suites (lakefs_core.testing) run as a third-party driver runs them: a test
module outside this repository's tests (no conftest of ours), importing a suite and defining the
fixture it asks for, in a pytest process of its own."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

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


@pytest.mark.parametrize(("suite", "tests"), [("kv", 47), ("block", 35), ("lease", 7)])
def test_a_third_party_module_runs_a_shipped_suite(tmp_path: Path, suite: str, tests: int) -> None:
    module = tmp_path / f"test_my_{suite}_driver.py"
    module.write_text(textwrap.dedent(THIRD_PARTY[suite]))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "asyncio_mode=auto",
         "-o", "asyncio_default_fixture_loop_scope=function", "--rootdir", str(tmp_path), str(module)],
        cwd=tmp_path, capture_output=True, text=True, timeout=600, env=env, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert f"{tests} passed" in proc.stdout.splitlines()[-1], proc.stdout[-500:]
