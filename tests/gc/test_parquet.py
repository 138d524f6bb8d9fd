"""The mark's ``deleted/`` report as Parquet (lakeFS's shape): the same addresses as ``deleted.text``,
read back the way a lakeFS user does (``spark.read.parquet`` on the directory) and with
``pyarrow.dataset``; written by the executors of both kinds with deterministic, idempotent parts."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lakefs_core.compute.executor import Executor, LiteExecutor, SparkExecutor
from lakefs_core.errors import BadInputError
from lakefs_gc.mark.mark import run_mark
from lakefs_gc.mark.parquet import ROW_GROUP, parquet_part_name, write_parquet_part
from tests.gc.conftest import MakeNamespace
from tests.gc.test_mark import Env, deleted_set, expected, options
from tests.support.timing import scaled

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@pytest.fixture(params=["lite", pytest.param("spark", marks=pytest.mark.spark)])
def executor(request: pytest.FixtureRequest) -> Iterator[Executor]:
    if request.param == "lite":
        with LiteExecutor(workers=2) as lite:
            yield lite
    else:
        yield SparkExecutor(request.getfixturevalue("spark"))


def local_dir(env: Env, run_id: str) -> Path:
    return env.root / "_lakefs/retention/gc/unified" / run_id / "deleted"


def read_with_pyarrow(directory: Path) -> list[str]:
    import pyarrow.dataset as pads  # here: it imports pandas, a second of every worker's collection

    table = pads.dataset(str(directory), format="parquet").to_table()  # ignores _SUCCESS like Spark
    assert table.schema.names == ["address"] and table.schema.field("address").type == pa.string()
    return [str(a) for a in table.column("address").to_pylist()]


async def test_mark_writes_parquet_equal_to_text(env: Env, executor: Executor) -> None:
    result = await run_mark(env.g, env.built.repo, executor, options=options(partitions=3))
    text = await deleted_set(env.g, env.built, result.run_id)
    _, garbage = await expected(env, ["c3", "d", "c1"])
    assert text == garbage and text  # the scenario has garbage to report

    directory = local_dir(env, result.run_id)
    names = sorted(p.name for p in directory.iterdir())
    assert names == ["_SUCCESS"] + [parquet_part_name(i) for i in range(3)]  # Spark's layout
    assert (directory / "_SUCCESS").stat().st_size == 0
    for i in range(3):
        meta = pq.ParquetFile(directory / parquet_part_name(i)).metadata
        assert meta.num_columns == 1 and meta.row_group(0).column(0).compression == "SNAPPY"
    addresses = read_with_pyarrow(directory)
    assert len(addresses) == len(set(addresses)) == result.summary.num_deleted_objects
    assert set(addresses) == text


@pytest.mark.spark
async def test_lakefs_reader_reads_both_executors_reports(env: Env, spark: SparkSession) -> None:
    """What lakeFS's sweep-only mode does with a mark: ``spark.read.parquet(<run>/deleted)``."""
    with LiteExecutor(workers=2) as lite:
        lite_run = await run_mark(env.g, env.built.repo, lite, options=options())
    spark_run = await run_mark(env.g, env.built.repo, SparkExecutor(spark), options=options(partitions=2))
    for run in (lite_run, spark_run):
        df = spark.read.parquet(str(local_dir(env, run.run_id)))
        assert [(f.name, f.dataType.simpleString()) for f in df.schema.fields] == [("address", "string")]
        rows = [row["address"] for row in df.select("address").collect()]
        text = await deleted_set(env.g, env.built, run.run_id)
        assert len(rows) == len(text) and set(rows) == text


@pytest.mark.spark
async def test_spark_reads_an_empty_report(spark: SparkSession, make_namespace: MakeNamespace) -> None:
    """Nothing to delete still leaves readable parts: Spark infers the schema, zero rows."""
    built = await make_namespace(slices=1, per_slice=1)
    ns_dir = Path(built.ref.ns.store_uri.removeprefix("local://"))
    with LiteExecutor(workers=2) as lite:
        assert lite.parallelize([], 2).write_parts(built.ref, "run/deleted", write_parquet_part) == 0
    df = spark.read.parquet(str(ns_dir / "run/deleted"))
    assert df.columns == ["address"] and df.count() == 0


async def test_parts_deterministic_idempotent_and_bounded(
    executor: Executor, make_namespace: MakeNamespace
) -> None:
    built = await make_namespace(slices=1, per_slice=1)
    ns_dir = Path(built.ref.ns.store_uri.removeprefix("local://"))
    lines = [f"data/s/{i:06d}" for i in range(ROW_GROUP + 10)]  # more than one row group per part
    ds = executor.parallelize(lines, 2)
    assert ds.write_parts(built.ref, "_lakefs/gc/run1/deleted", write_parquet_part) == len(lines)
    directory = ns_dir / "_lakefs/gc/run1/deleted"
    first = {p.name: p.read_bytes() for p in directory.iterdir()}
    assert sorted(first) == [parquet_part_name(0), parquet_part_name(1)]
    assert sorted(read_with_pyarrow(directory)) == lines
    assert pq.ParquetFile(directory / parquet_part_name(0)).metadata.num_row_groups >= 1

    # A retry overwrites its own parts: same names, same rows, nothing added beside them.
    assert ds.write_parts(built.ref, "_lakefs/gc/run1/deleted", write_parquet_part) == len(lines)
    assert sorted(p.name for p in directory.iterdir()) == sorted(first)
    assert sorted(read_with_pyarrow(directory)) == lines

    empty = executor.parallelize([], 2)
    assert empty.write_parts(built.ref, "_lakefs/gc/run2/deleted", write_parquet_part) == 0
    assert read_with_pyarrow(ns_dir / "_lakefs/gc/run2/deleted") == []


def test_bad_rows_and_directories_refused(tmp_path: Path) -> None:
    from lakefs_core.compute.partition import StoreRef

    ref = StoreRef(f"local://{tmp_path / 'ns'}")
    with pytest.raises(BadInputError, match="not an address"):
        write_parquet_part(ref, "run/deleted", 0, iter(["data/a", ""]))
    with pytest.raises(BadInputError, match="not valid UTF-8"):
        write_parquet_part(ref, "run/deleted", 0, iter(["data/a", "data/\udc80"]))
    with pytest.raises(BadInputError, match="relative path"):
        write_parquet_part(ref, "/", 0, iter(["data/a"]))
    assert not (tmp_path / "ns" / "run" / "deleted").exists()  # a failed part leaves nothing


def test_parts_hold_any_utf8_and_never_import_pandas(tmp_path: Path) -> None:
    """The batch is built from its buffers (multi-byte values, empty parts) and, in a fresh
    interpreter, writing a part leaves pandas unimported (``pa.array`` would import it: a second of
    every ``lakefs-gc mark`` process's start-up)."""
    lines = ["data/ü/ß", "data/日本/語", "data/a", "data/😀"]
    script = (
        "import sys; from lakefs_core.compute.partition import StoreRef; "
        "from lakefs_gc.mark.parquet import write_parquet_part; "
        f"ref = StoreRef('local://{tmp_path / 'ns'}'); "
        f"assert write_parquet_part(ref, 'run/deleted', 0, iter({lines!r})) == {len(lines)}; "
        "assert write_parquet_part(ref, 'run/empty', 0, iter([])) == 0; "
        "assert 'pandas' not in sys.modules, 'pandas was imported'"
    )
    argv = [sys.executable, "-c", script]
    done = subprocess.run(argv, check=False, capture_output=True, text=True, timeout=scaled(60))
    assert done.returncode == 0, done.stderr[-2000:]
    assert read_with_pyarrow(tmp_path / "ns/run/deleted") == lines
    assert read_with_pyarrow(tmp_path / "ns/run/empty") == []
