"""Import on PySpark: the shared local session builds the same entries as the in-process import
(ranges written by the executors, one commit by the driver), and a real ``spark-submit --master
local[2]`` child runs the ``core-import`` job against a SQLite core."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from lakefs_core.compute.child import run_spark_job
from lakefs_core.compute.executor import SparkExecutor
from lakefs_core.compute.import_job import JOB_NAME, import_with_executor
from lakefs_core.kv import open_kv
from lakefs_core.kv.memory import MemoryKVStore
from lakefs_core.repos.graveler import Graveler, StoreRegistry
from lakefs_core.repos.objects import Objects
from tests.repos.test_import import listing, write_tree
from tests.support.env import require_tool
from tests.support.timing import scaled

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.spark

TREE = {f"d{d}/part-{i:03}.parquet": f"{d}:{i}".encode() for d in range(6) for i in range(40)} | {
    "top.json": b"{}",
    "z/last": b"z",
}


async def test_spark_import_equals_in_process(tmp_path: Path, spark: SparkSession) -> None:
    src = tmp_path / "src"
    write_tree(src, TREE)
    g = Graveler(MemoryKVStore(), StoreRegistry())
    await g.create_repository("sparkimp", f"local://{tmp_path / 'ns'}")
    await g.create_branch("sparkimp", "local", "main")
    o = Objects(g)
    await o.upload("sparkimp", "main", "kept.txt", b"k")
    await g.commit("sparkimp", "main", committer="t", message="k")
    spark_run = await import_with_executor(
        g, SparkExecutor(spark), "sparkimp", "main", dest_path="in/", source_uri=str(src), committer="t",
        partitions=3,
    )  # fmt: skip
    here = await g.import_objects("sparkimp", "local", "in/", str(src), committer="t")
    assert spark_run.entries == here.entries == len(TREE) and spark_run.chunks >= 3
    want = {f"in/{k}": v for k, v in TREE.items()}
    assert await listing(o, "sparkimp", "main", "in/") == want == await listing(o, "sparkimp", "local", "in/")
    assert await o.read_all("sparkimp", "main", "kept.txt") == b"k"


async def test_spark_submit_runs_the_import_job(tmp_path: Path) -> None:
    require_tool("java", "default-jre-headless")
    kv_url = f"sqlite:///{tmp_path / 'kv.sqlite3'}"
    kv = await open_kv(kv_url)
    g = Graveler(kv, StoreRegistry())
    src = tmp_path / "src"
    write_tree(src, TREE)
    try:
        await g.create_repository("submitimp", f"local://{tmp_path / 'ns'}")
        config = tmp_path / "core.yaml"
        config.write_text(f"kv_url: {kv_url}\n")
        args = {"config": str(config), "repository": "submitimp", "branch": "main", "source": str(src),
                "path": "landing/", "partitions": 2}  # fmt: skip
        result = await run_spark_job(
            JOB_NAME, args, master="local[2]", timeout=scaled(240), launcher="spark-submit"
        )
        assert result["executor"] == "spark" and result["entries"] == len(TREE)
        assert (await g.branch("submitimp", "main")).commit_id == result["commit_id"]
        got = await listing(Objects(g), "submitimp", "main", "landing/")
        assert got == {f"landing/{k}": v for k, v in TREE.items()}
    finally:
        await g.stores.close()
        await kv.close()
