"""The ``lakefs`` data source on PySpark ``local[2]`` against Spark's own parquet source (issue 36).

Usage: ``python -m bench.bench_spark_ds [--read-rows N] [--write-rows N] [--plan-objects N]
[--rounds R]`` (defaults 4,000,000 / 2,000,000 / 100,000 / 3).

A repository on the embedded default (SQLite KV, local namespace, hard-delete journal on) in a temp
directory; one session for the whole run (the JVM start is excluded). Each figure is a ratio
against a baseline in the same run, best of ``R`` rounds each:

- read: ``N`` rows of parquet (8 files, int64 + double + string columns) uploaded into the
  repository, read with ``format("lakefs")`` vs ``spark.read.parquet`` of the same files in a local
  directory; both materialise every row and column (``write.format("noop")``). Ratio = Spark's time
  / ours (>= 1.0 means as fast). The floor: a minimal Python data source reading the same local
  files with pyarrow and nothing else (``floor_ratio`` = Spark / floor bounds what any Python data
  source can reach; ``ours_vs_floor`` is what the core adds);
- write: ``N`` generated rows written with ``format("lakefs")`` (append, one commit included) vs
  ``df.write.parquet`` to a local directory. Ratio = Spark's time / ours (target >= 0.9). The
  floor: a minimal Python sink writing each task's batches as one local parquet file;
- planning: a prefix with ``N`` objects (one commit of that many entries made with
  ``Graveler.commit_entries``, no data behind them: planning never lists or reads objects), the
  driver's plan (ref resolved, files listed from the ranges, packed) timed alone (target <= 2 s).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.common import machine, report


def _best(rounds: int, fn: Callable[[], Any]) -> float:
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def _floor_source(paths: list[str], partitions: int) -> Any:
    """The floor of ANY Python data source: pyarrow reading the same local files, nothing else (no
    core, no KV, no object store, no cast); what the data source API itself costs per row."""
    import pyarrow.parquet as pq
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    class FloorReader(DataSourceReader):  # type: ignore[misc]
        def partitions(self) -> list[InputPartition]:
            return [InputPartition(paths[i::partitions]) for i in range(partitions)]

        def read(self, partition: InputPartition) -> Any:
            for path in partition.value:
                yield from pq.read_table(path).to_batches(max_chunksize=65536)

    class FloorSource(DataSource):  # type: ignore[misc]
        @classmethod
        def name(cls) -> str:
            return "bench-floor-parquet"

        def schema(self) -> str:
            return "id bigint, value double, name string"

        def reader(self, schema: Any) -> DataSourceReader:
            return FloorReader()

    return FloorSource


def _floor_sink(directory: str) -> Any:
    """The floor of ANY Python data source's write: each task's Arrow batches as one parquet file in
    a local directory, nothing else (no core, no journal, no commit)."""
    from pyspark.sql.datasource import DataSource, DataSourceArrowWriter, WriterCommitMessage

    class FloorWriter(DataSourceArrowWriter):  # type: ignore[misc]
        def write(self, iterator: Any) -> WriterCommitMessage:
            import uuid

            import pyarrow as pa
            import pyarrow.parquet as pq

            batches = list(iterator)
            if batches:
                path = f"{directory}/{uuid.uuid4().hex}.parquet"
                pq.write_table(pa.Table.from_batches(batches), path, row_group_size=1 << 20)
            return WriterCommitMessage()

    class FloorSink(DataSource):  # type: ignore[misc]
        @classmethod
        def name(cls) -> str:
            return "bench-floor-sink"

        def writer(self, schema: Any, overwrite: bool) -> DataSourceArrowWriter:
            return FloorWriter()

    return FloorSink


def _parquet_files(directory: Path, rows: int, files: int = 8) -> list[Path]:
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    directory.mkdir(parents=True)
    out = []
    per = rows // files
    for i in range(files):
        ids = pa.array(range(i * per, (i + 1) * per), pa.int64())
        names = pa.array([f"n{j % 1000}" for j in range(i * per, (i + 1) * per)])
        table = pa.table({"id": ids, "value": pc.multiply(ids, 0.5), "name": names})
        path = directory / f"part-{i:05d}.parquet"
        pq.write_table(table, path)
        out.append(path)
    return out


async def _setup(config: str, root: Path, files: list[Path], plan_objects: int) -> tuple[str, str]:
    from lakefs_core.format.records import ValueRecord, make_entry
    from lakefs_core.spark.options import CoreRef

    async with CoreRef(config).open() as core:
        await core.graveler.create_repository("bench", f"local://{root / 'ns'}", hard_delete_journal=True)
        for path in files:
            await core.objects.upload("bench", "main", f"events/{path.name}", path.read_bytes())
        await core.graveler.commit("bench", "main", committer="bench", message="read data")
        records = []
        for i in range(plan_objects):
            identity, data = make_entry(f"data/gbench/{i:024x}", 1 << 20, f"{i:032x}", content_type="")
            records.append(ValueRecord(f"many/p{i % 100:02d}/f{i:08d}.parquet".encode(), identity, data))
        await core.graveler.commit_entries("bench", "main", records, committer="bench", message="many")
        return "bench", "main"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--read-rows", type=int, default=4_000_000)
    parser.add_argument("--write-rows", type=int, default=2_000_000)
    parser.add_argument("--plan-objects", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    ns = parser.parse_args()

    from lakefs_core.compute.partition import run_async
    from lakefs_core.compute.session import spark_session, stop_spark_session
    from lakefs_core.repos.uri import Kind, parse_uri
    from lakefs_core.spark import register
    from lakefs_core.spark.options import CoreRef
    from lakefs_core.spark.read import pack, plan_read

    root = Path(tempfile.mkdtemp(prefix="bench-spark-ds-"))
    try:
        config = root / "config.yaml"
        config.write_text(f"kv_url: sqlite:///{root / 'kv.sqlite3'}\ncommitter: bench\n")
        files = _parquet_files(root / "plain", ns.read_rows)
        asyncio.run(_setup(str(config), root, files, ns.plan_objects))
        spark = spark_session(
            "local[2]", app_name="bench-spark-ds", conf={"spark.local.dir": str(root / "spark")}
        )
        register(spark)
        lake = spark.read.format("lakefs").option("config", str(config))

        def ours_read() -> None:
            lake.load("lakefs://bench/main/events/").write.format("noop").mode("overwrite").save()

        def spark_read() -> None:
            spark.read.parquet(str(root / "plain")).write.format("noop").mode("overwrite").save()

        spark.dataSource.register(_floor_source([str(p) for p in files], 2))

        def floor_read() -> None:
            spark.read.format("bench-floor-parquet").load().write.format("noop").mode("overwrite").save()

        ours_read(), spark_read(), floor_read()  # warm all three (workers, JIT)
        t_ours, t_spark = _best(ns.rounds, ours_read), _best(ns.rounds, spark_read)
        t_floor = _best(ns.rounds, floor_read)
        report("spark_ds.read", rows=ns.read_rows, ours_s=round(t_ours, 3), spark_parquet_s=round(t_spark, 3),
               ratio=round(t_spark / t_ours, 3), target=1.0, python_floor_s=round(t_floor, 3),
               floor_ratio=round(t_spark / t_floor, 3), ours_vs_floor=round(t_floor / t_ours, 3),
               **machine())  # fmt: skip

        df = spark.range(0, ns.write_rows, numPartitions=2).selectExpr(
            "id", "id * 0.5 as value", "concat('n', cast(id % 1000 as string)) as name"
        )
        outs = iter(range(1000))

        def ours_write() -> None:
            df.write.format("lakefs").option("config", str(config)).mode("append").save(
                f"lakefs://bench/main/w{next(outs)}/"
            )

        def spark_write() -> None:
            df.write.parquet(str(root / f"plain-w{next(outs)}"))

        sink_dir = root / "floor-sink"
        sink_dir.mkdir()
        spark.dataSource.register(_floor_sink(str(sink_dir)))

        def floor_write() -> None:
            df.write.format("bench-floor-sink").mode("append").save()

        ours_write(), spark_write(), floor_write()
        t_ours, t_spark = _best(ns.rounds, ours_write), _best(ns.rounds, spark_write)
        t_floor = _best(ns.rounds, floor_write)
        report("spark_ds.write", rows=ns.write_rows, ours_s=round(t_ours, 3),
               spark_parquet_s=round(t_spark, 3), ratio=round(t_spark / t_ours, 3), target=0.9,
               python_floor_s=round(t_floor, 3), floor_ratio=round(t_spark / t_floor, 3),
               ours_vs_floor=round(t_floor / t_ours, 3))  # fmt: skip

        uri = parse_uri("lakefs://bench/main/many/", Kind.PREFIX)

        def plan() -> None:
            planned = run_async(lambda: plan_read(CoreRef(str(config)), uri, {}, "binaryFile"))
            assert len(planned.files) == ns.plan_objects
            pack(planned.files, 128 << 20)

        t_plan = _best(ns.rounds, plan)
        cpu = time.process_time()
        plan()
        cpu = time.process_time() - cpu  # this process's CPU: the wall clock of a loaded machine
        report("spark_ds.plan", objects=ns.plan_objects, seconds=round(t_plan, 3), cpu_s=round(cpu, 3),
               target_s=2.0, load=os.getloadavg()[0])  # fmt: skip
        stop_spark_session()
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
