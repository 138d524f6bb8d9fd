"""The SAME mark pipeline on PySpark: the shared local session gives the lite executor's deleted set,
and a real ``spark-submit --master local[2]`` child runs the ``gc-mark`` job against a SQLite core."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from lakefs_core.compute.child import run_spark_job
from lakefs_core.compute.executor import LiteExecutor, SparkExecutor
from lakefs_core.kv import open_kv
from lakefs_core.repos.graveler import Graveler, StoreRegistry
from lakefs_gc.mark.mark import JOB_NAME, run_mark
from tests.gc.mark_support import MARK_NOW, MIN_AGE, Clock, build_repo
from tests.gc.test_mark import Env, deleted_set, expected, options
from tests.support.env import require_tool
from tests.support.timing import scaled

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.spark


async def test_spark_mark_equals_lite_mark(env: Env, spark: SparkSession) -> None:
    b = env.built
    with LiteExecutor(workers=2) as lite:
        lite_run = await run_mark(env.g, b.repo, lite, options=options())
    spark_run = await run_mark(env.g, b.repo, SparkExecutor(spark), options=options(partitions=3))
    lite_set = await deleted_set(env.g, b, lite_run.run_id)
    spark_set = await deleted_set(env.g, b, spark_run.run_id)
    live, garbage = await expected(env, ["c3", "d", "c1"])
    assert spark_set == lite_set == garbage
    assert not spark_set & live
    fields = (
        "num_deleted_objects",
        "active_commits",
        "expired_commits",
        "ranges_read",
        "listed",
        "uncommitted",
    )
    for name in fields:
        assert getattr(spark_run.summary, name) == getattr(lite_run.summary, name), name


async def test_spark_submit_runs_the_mark_job(tmp_path: Path) -> None:
    require_tool("java", "default-jre-headless")
    kv_url = f"sqlite:///{tmp_path / 'kv.sqlite3'}"
    root = tmp_path / "ns"
    clock = Clock()
    kv = await open_kv(kv_url)
    g = Graveler(kv, StoreRegistry(), clock=clock)
    try:
        built = await build_repo(g, clock, "repo1", f"local://{root}", local_root=str(root))
        env = Env(g, clock, built, root)
        config = tmp_path / "core.yaml"
        config.write_text(f"kv_url: {kv_url}\n")
        args = {
            "config": str(config),
            "repository": "repo1",
            "now": MARK_NOW.isoformat().replace("+00:00", "Z"),
            "min_age_seconds": int(MIN_AGE.total_seconds()),
            "partitions": 2,
        }
        result = await run_spark_job(
            JOB_NAME, args, master="local[2]", timeout=scaled(240), launcher="spark-submit"
        )
        assert result["executor"] == "spark" and result["success"] is True
        marked = await deleted_set(g, built, result["run_id"])
        _, garbage = await expected(env, ["c3", "d", "c1"])
        assert marked == garbage and result["num_deleted_objects"] == len(garbage)
    finally:
        await g.stores.close()
        await kv.close()
