"""Fixtures of the data source tests.

- ``spark``: the suite's ONE local session (``local[2]``, tests/gc/conftest.py), with the data
  sources registered;
- ``lake``: a ``lakefs-core`` configuration file (SQLite KV, local namespaces) shared by a module's
  tests, and helpers that drive the real core in this process (each test makes its own repository).
"""

from __future__ import annotations

import importlib.util
import io
import itertools
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import pytest

from lakefs_core.compute.partition import run_async
from lakefs_core.spark.options import CoreRef
from tests.support import spark_jvm
from tests.support.env import require_tool, skip_or_fail

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from lakefs_core.wiring import Core

T = TypeVar("T")
_names = itertools.count()


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkSession]:
    """The process's one session, as tests/gc/conftest.py makes it (``getOrCreate``: whichever
    fixture runs first starts the JVM, the other gets the same session)."""
    if importlib.util.find_spec("pyspark") is None:
        skip_or_fail("PySpark is not installed (the 'dev' and 'spark' extras install it)")
    require_tool("java", "default-jre-headless")
    from lakefs_core.compute.session import spark_session, stop_spark_session

    spark_jvm.apply()  # this fixture's JVM starts before the tests' autouse fixtures run
    from lakefs_core.spark import register

    session = spark_session(
        "local[2]",
        app_name="lakefs-gc-tests",
        conf={
            "spark.sql.shuffle.partitions": "4",
            "spark.local.dir": str(tmp_path_factory.mktemp("spark-local")),
        },
    )
    register(session)
    try:
        yield session
    finally:
        stop_spark_session()


@dataclass
class Lake:
    root: Path
    config: str

    @property
    def core(self) -> CoreRef:
        return CoreRef(self.config)

    def run(self, fn: Callable[[Core], Awaitable[T]]) -> T:
        async def go() -> T:
            async with self.core.open() as core:
                return await fn(core)

        return run_async(go)  # a helper thread's loop when the caller's loop is running

    def new_repo(self, *, journal: bool = True, read_only: bool = False) -> str:
        name = f"repo{next(_names)}"
        ns = f"local://{self.root / 'ns' / name}"

        async def create(core: Core) -> None:
            await core.graveler.create_repository(name, ns, hard_delete_journal=journal)
            if read_only:
                await core.graveler.set_read_only(name, True)

        self.run(create)
        return name

    def upload(self, repo: str, files: dict[str, bytes], branch: str = "main", commit: bool = True) -> str:
        async def go(core: Core) -> str:
            for path, body in files.items():
                await core.objects.upload(repo, branch, path, body)
            if not commit:
                return ""
            made = await core.graveler.commit(repo, branch, committer="test", message="upload")
            return made.id

        return self.run(go)

    def head(self, repo: str, branch: str = "main") -> str:
        async def go(core: Core) -> str:
            return (await core.graveler.branch(repo, branch)).commit_id

        return self.run(go)

    def paths(self, repo: str, ref: str, prefix: str = "") -> list[str]:
        async def go(core: Core) -> list[str]:
            return [
                r.key.decode() async for r in core.graveler.list_entries(repo, ref, prefix=prefix.encode())
            ]

        return self.run(go)

    def log(self, repo: str, ref: str = "main") -> list[Any]:
        async def go(core: Core) -> list[Any]:
            return [c async for c in core.graveler.log(repo, ref)]

        return self.run(go)


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lake]:
    root = tmp_path_factory.mktemp("lake")
    config = root / "config.yaml"
    config.write_text(f"kv_url: sqlite:///{root / 'kv.sqlite3'}\ncommitter: spark-tests\n")
    yield Lake(root, str(config))


def parquet_bytes(columns: dict[str, list[Any]]) -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq

    sink = io.BytesIO()
    pq.write_table(pa.table(columns), sink)
    return sink.getvalue()
