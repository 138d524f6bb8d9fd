"""The ``lakefs`` and ``lakefs-changes`` data sources on the suite's real local[2] Spark session, over a
SQLite core and local namespaces written by the real core."""

from __future__ import annotations

import datetime as dt
import threading
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from lakefs_core.errors import (
    BadInputError,
    ConflictError,
    LakeFSError,
    NotFoundError,
    PurgedError,
    ReadOnlyError,
)
from lakefs_core.spark import project_error, project_errors, snapshot
from lakefs_core.spark import read as spark_read
from lakefs_core.spark import write as spark_write
from lakefs_core.spark.errors import one_line_errors
from lakefs_core.spark.read import OPEN_COST_BYTES, FileSpec, pack, partition_values, split_bytes
from tests.spark.conftest import Lake, parquet_bytes

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from lakefs_core.wiring import Core

pytestmark = pytest.mark.spark


def load(spark: SparkSession, lake: Lake, uri: str, **options: str) -> DataFrame:
    return spark.read.format("lakefs").option("config", lake.config).options(**options).load(uri)


def save(df: DataFrame, lake: Lake, uri: str, mode: str = "append", **options: str) -> None:
    df.write.format("lakefs").option("config", lake.config).options(**options).mode(mode).save(uri)


def rows(df: DataFrame, *columns: str) -> list[tuple[object, ...]]:
    return sorted(tuple(r[c] for c in columns) for r in df.collect())


# -- planning (no Spark) ------------------------------------------------------------------------------


def test_partition_values_and_packing() -> None:
    assert partition_values("date=2026-11-01/h=3/part-0.parquet") == (("date", "2026-11-01"), ("h", "3"))
    assert partition_values("_SUCCESS") is None
    assert partition_values("x/.part.crc") is None
    files = [FileSpec(f"f{i}", f"a{i}", "RELATIVE", size) for i, size in enumerate([60, 60, 10, 200, 5])]
    assert [[f.path for f in g] for g in pack(files, 128)] == [["f0", "f1"], ["f2"], ["f3"], ["f4"]]
    mib = 1 << 20
    big = [FileSpec(f"g{i}", f"b{i}", "RELATIVE", 40 * mib) for i in range(4)]
    assert split_bytes(big, 128 * mib, 2) == 88 * mib  # two partitions' worth, open cost included
    assert split_bytes(big, 64 * mib, 2) == 64 * mib
    assert split_bytes(files[:1], 128 * mib, 2) == 4 * mib  # never below the open cost
    # as Spark packs: each file costs its size and the open cost (8 files of 5 MiB: 4 and 4, not 7 and 1)
    five = [FileSpec(f"h{i}", f"c{i}", "RELATIVE", 5 * mib) for i in range(8)]
    assert [len(g) for g in pack(five, split_bytes(five, 128 * mib, 2), OPEN_COST_BYTES)] == [4, 4]


# -- read -------------------------------------------------------------------------------------------


def test_read_every_format_and_partition_columns(spark: SparkSession, lake: Lake) -> None:
    repo = lake.new_repo()
    lake.upload(
        repo,
        {
            "events/date=2026-11-01/a.parquet": parquet_bytes({"id": [1, 2], "name": ["a", "b"]}),
            "events/date=2026-11-02/b.parquet": parquet_bytes({"id": [3], "name": ["c"]}),
            "events/_SUCCESS": b"",
            "raw/x.csv": b"id,name\n1,a\n2,b\n",
            "json/x.json": b'{"id": 1, "name": "a"}\n{"id": 2, "name": "b"}\n',
            "text/x.txt": b"hello\nworld\n",
            "bin/blob": b"\x00\x01\x02",
        },
    )
    df = load(spark, lake, f"lakefs://{repo}/main/events/")
    assert df.columns == ["id", "name", "date"]
    assert rows(df, "id", "name", "date") == [
        (1, "a", "2026-11-01"),
        (2, "b", "2026-11-01"),
        (3, "c", "2026-11-02"),
    ]
    pruned = load(spark, lake, f"lakefs://{repo}/main/events/date=2026-11-02/")
    assert rows(pruned, "id", "date") == [(3, "2026-11-02")]  # a prefix inside the partitions
    # a user schema: exact casts (int64 -> int32 fits), the partition column typed
    user = (
        spark.read.format("lakefs").option("config", lake.config)
        .schema("id int, name string, date date").load(f"lakefs://{repo}/main/events/")
    )  # fmt: skip
    assert rows(user, "id", "date")[0] == (1, dt.date(2026, 11, 1))
    csv = load(spark, lake, f"lakefs://{repo}/main/raw/", format="csv", header="true")
    assert rows(csv, "id", "name") == [(1, "a"), (2, "b")]
    js = load(spark, lake, f"lakefs://{repo}/main/json/", format="json")
    assert rows(js, "id", "name") == [(1, "a"), (2, "b")]
    text = load(spark, lake, f"lakefs://{repo}/main/text/", format="text")
    assert rows(text, "value") == [("hello",), ("world",)]
    binary = load(spark, lake, f"lakefs://{repo}/main/bin/", format="binaryFile")
    assert rows(binary, "path", "size", "content") == [("bin/blob", 3, bytearray(b"\x00\x01\x02"))]


def test_cast_that_does_not_fit_fails_naming_file(spark: SparkSession, lake: Lake) -> None:
    repo = lake.new_repo()
    lake.upload(repo, {"t/a.parquet": parquet_bytes({"id": [1, 2**40]})})
    df = (
        spark.read.format("lakefs")
        .option("config", lake.config)
        .schema("id int")
        .load(f"lakefs://{repo}/main/t/")
    )
    with pytest.raises(Exception, match=r"BadInputError: .*column 'id' of 't/a.parquet'"):
        df.collect()


def test_snapshot_plan_shows_the_commit(
    spark: SparkSession, lake: Lake, capsys: pytest.CaptureFixture[str]
) -> None:
    repo = lake.new_repo()
    first = lake.upload(repo, {"t/a.parquet": parquet_bytes({"id": [1]})})
    df = snapshot(spark, f"lakefs://{repo}/main/t/", config=lake.config)
    second = lake.upload(repo, {"t/b.parquet": parquet_bytes({"id": [2]})})  # the branch moves
    lake.upload(repo, {"t/c.parquet": parquet_bytes({"id": [3]})}, commit=False)
    staged = snapshot(spark, f"lakefs://{repo}/main/t/", "id long", config=lake.config, uncommitted=True)
    df.explain()
    staged.explain()
    plans = capsys.readouterr().out
    assert f"BatchScan lakefs@{first}[id#" in plans and f"BatchScan lakefs@{second}+uncommitted[id#" in plans
    assert rows(df, "id") == [(1,)] and rows(staged, "id") == [(1,), (2,), (3,)]
    with pytest.raises(NotFoundError, match="nope"):  # the project's error, not Spark's AnalysisException
        snapshot(spark, f"lakefs://{repo}/nope/t/", config=lake.config)
    with pytest.raises(ConflictError, match=f"is now {second}, not the expected {first}"), project_errors():
        load(spark, lake, f"lakefs://{repo}/main/t/", expectedCommit=first)


def test_copy_job_fails_with_the_projects_error(spark: SparkSession, lake: Lake) -> None:
    from lakefs_core.compute.executor import SparkExecutor
    from lakefs_core.spark.jobs import copy_job

    repo = lake.new_repo()
    args = {"source": f"lakefs://{repo}/v9/src/", "dest": f"lakefs://{repo}/main/dst/", "config": lake.config}
    with pytest.raises(NotFoundError, match="v9"):  # planning fails in a worker: the job re-raises it
        copy_job(SparkExecutor(spark), args)


def test_project_error_from_spark_text_and_one_line() -> None:
    text = (
        "An exception was thrown from the Python worker:\nTraceback (most recent call last):\n"
        '  File "read.py", line 9, in read\n    raise BadInputError(...)\n'
        "lakefs_core.errors.BadInputError: format: 't/x.csv' is not readable as csv: bad\n SQLSTATE: 38000\n"
    )
    found = project_error(RuntimeError(text))
    assert type(found) is BadInputError and str(found) == "format: 't/x.csv' is not readable as csv: bad"
    assert found.field is None
    assert project_error(RuntimeError("lakefs_core.errors.Exception: x\nos.error: y")) is None
    assert project_error(RuntimeError("x", "y")) is None
    with pytest.raises(NotFoundError) as caught, one_line_errors():
        raise NotFoundError("CSV parse error:\n  row 3\r\nhas 2 columns")
    assert str(caught.value) == "CSV parse error: | row 3 | has 2 columns"


def test_snapshot_isolation_and_uncommitted(spark: SparkSession, lake: Lake) -> None:
    repo = lake.new_repo()
    lake.upload(repo, {"t/a.parquet": parquet_bytes({"id": [1]})})
    df = load(spark, lake, f"lakefs://{repo}/main/t/")
    lake.upload(repo, {"t/b.parquet": parquet_bytes({"id": [2]})})  # the branch moves
    lake.upload(repo, {"t/c.parquet": parquet_bytes({"id": [3]})}, commit=False)
    assert rows(df, "id") == [(1,)]  # the snapshot taken when the DataFrame was created
    assert rows(load(spark, lake, f"lakefs://{repo}/main/t/"), "id") == [(1,), (2,)]
    staged = load(spark, lake, f"lakefs://{repo}/main/t/", uncommitted="true")
    assert rows(staged, "id") == [(1,), (2,), (3,)]
    assert rows(load(spark, lake, f"lakefs://{repo}/main~1/t/"), "id") == [(1,)]


def test_missing_object_fails_with_the_projects_error(spark: SparkSession, lake: Lake) -> None:
    repo = lake.new_repo()
    lake.upload(repo, {"t/a.parquet": parquet_bytes({"id": [1]})})
    df = load(spark, lake, f"lakefs://{repo}/main/t/")
    for path in (lake.root / "ns" / repo / "data").rglob("*"):
        if path.is_file():
            path.unlink()
    missing = rf"NotFoundError: lakefs://{repo}/t/a.parquet \(address data/"
    with pytest.raises(Exception, match=missing) as caught:
        df.collect()
    # Spark's PythonException carries the error as text; project_error recovers class and message
    recovered = project_error(caught.value)
    assert type(recovered) is NotFoundError and not isinstance(caught.value, LakeFSError)
    assert str(recovered).startswith(f"lakefs://{repo}/t/a.parquet (address data/")

    purged_repo = lake.new_repo()
    lake.upload(purged_repo, {"u/b.parquet": parquet_bytes({"id": [2]})})
    purged = load(spark, lake, f"lakefs://{purged_repo}/main/u/", format="binaryFile")

    async def purge(core: Core) -> object:
        return await core.graveler.purge_path(
            purged_repo, "main", "u/b.parquet", all_history=True, reason="test", actor="t", yes=True
        )

    lake.run(purge)
    gone = rf"^lakefs://{purged_repo}/u/b.parquet \(address data/"
    with pytest.raises(PurgedError, match=gone) as purged_error, project_errors():
        purged.collect()
    assert purged_error.value.audit_id is None  # the fields do not travel in Spark's text
    assert purged_error.value.__cause__ is not None


# -- write ------------------------------------------------------------------------------------------


def test_write_round_trip_append_overwrite_and_one_commit(spark: SparkSession, lake: Lake) -> None:
    repo = lake.new_repo()
    lake.upload(repo, {"other/x": b"x"}, commit=False)  # another writer's uncommitted change
    before = len(lake.log(repo))
    df = spark.range(0, 1000, numPartitions=3).selectExpr("id", "cast(id % 7 as string) as k")
    for fmt in ("parquet", "csv", "json"):
        save(
            df,
            lake,
            f"lakefs://{repo}/main/{fmt}/",
            format=fmt,
            message=f"load {fmt}",
            **{"metadata.run": fmt},
        )
        back = load(spark, lake, f"lakefs://{repo}/main/{fmt}/", format=fmt, header="true")
        assert sorted(int(r["id"]) for r in back.collect()) == list(range(1000))
    log = lake.log(repo)
    assert len(log) == before + 3  # one commit per job
    assert log[0].message == "load json" and log[0].metadata["run"] == "json"
    # Spark's ids, recorded from what the tasks saw (the driver's commit worker sees neither)
    assert log[0].metadata["lakefs_spark.app_id"] == spark.sparkContext.applicationId
    assert len(log[0].metadata["lakefs_spark.query_id"]) == 36  # a UUID per query
    assert log[0].metadata["lakefs_spark.query_id"] != log[1].metadata["lakefs_spark.query_id"]
    assert "other/x" not in lake.paths(repo, log[0].id)  # the staged change stays staged
    assert "other/x" in lake.paths(repo, "main")
    # overwrite replaces the prefix's entries in one commit
    save(spark.range(5, 8, numPartitions=1), lake, f"lakefs://{repo}/main/parquet/", mode="overwrite")
    assert rows(load(spark, lake, f"lakefs://{repo}/main/parquet/"), "id") == [(5,), (6,), (7,)]
    assert len(lake.paths(repo, "main", "parquet/")) == 1
    assert len(lake.paths(repo, "main", "csv/")) == 3  # other prefixes untouched


def test_refused_targets_before_any_task(spark: SparkSession, lake: Lake) -> None:
    repo = lake.new_repo()
    head = lake.upload(repo, {"a": b"a"})
    lake.run(lambda core: core.graveler.create_tag(repo, "v1", "main"))
    mirror = lake.new_repo(read_only=True)
    df = spark.range(3)
    cases = [
        (f"lakefs://{repo}/v1/x/", "is a tag"),
        (f"lakefs://{repo}/{head}/x/", "is a commit id"),
        (f"lakefs://{repo}/main~1/x/", "not a branch"),
        (f"lakefs://{mirror}/main/x/", "read-only"),
    ]
    for uri, why in cases:
        with pytest.raises(Exception, match=why):
            save(df, lake, uri)
    assert not list((lake.root / "ns" / repo / "data").rglob("part-*"))  # no task wrote anything
    assert lake.head(repo) == head


def test_concurrent_writers_on_one_branch_both_land(spark: SparkSession, lake: Lake) -> None:
    repo = lake.new_repo()
    errors: list[BaseException] = []

    def writer(i: int) -> None:
        try:
            # A new thread has no active session in the JVM, where Spark looks Python data sources
            # up (every thread that writes sets it; a job's own thread has it).
            spark._jvm.org.apache.spark.sql.SparkSession.setActiveSession(spark._jsparkSession)
            save(spark.range(i * 100, i * 100 + 100, numPartitions=2), lake, f"lakefs://{repo}/main/w{i}/")
        except BaseException as e:  # surfaced by the assertion below
            errors.append(e)

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [str(e)[:3000] for e in errors] == []
    assert rows(load(spark, lake, f"lakefs://{repo}/main/w0/"), "id") == [(i,) for i in range(100)]
    assert rows(load(spark, lake, f"lakefs://{repo}/main/w1/"), "id") == [(i,) for i in range(100, 200)]
    assert [c.message for c in lake.log(repo)][:2] == ["Spark write to w1/", "Spark write to w0/"] or [
        c.message for c in lake.log(repo)
    ][:2] == ["Spark write to w0/", "Spark write to w1/"]


def _decisions(lake: Lake, repo: str) -> dict[str, str]:
    """The hard-delete reconciler's decision for every journalled address, as if its timeouts passed."""

    async def go(core: Core) -> dict[str, str]:
        journal = await core.graveler.journal(repo)
        later = core.graveler.clock() + dt.timedelta(days=2)
        out = {}
        async for intent in journal.intents():
            effective = await journal.effective(intent)
            out[intent.address] = await journal.decide(effective, now=later)
        return out

    return lake.run(go)


def test_failed_job_commits_nothing_and_its_files_are_reclaimed(spark: SparkSession, lake: Lake) -> None:
    from pyspark.sql.functions import udf

    repo = lake.new_repo()
    head = lake.head(repo)

    @udf("long", useArrow=False)
    def boom(x: int) -> int:
        if x == 999:
            raise ValueError("task dies mid-job")
        return x

    df = spark.range(0, 1000, numPartitions=4).select(boom("id").alias("id"))
    with pytest.raises(Exception, match="task dies mid-job"):
        save(df, lake, f"lakefs://{repo}/main/t/")
    assert lake.head(repo) == head and lake.paths(repo, "main") == []
    decisions = _decisions(lake, repo)
    assert decisions and set(decisions.values()) == {"delete"}  # every file written is garbage
    # a re-run of the job lands, and its files are the committed ones
    save(spark.range(0, 1000, numPartitions=4), lake, f"lakefs://{repo}/main/t/")
    assert len(lake.paths(repo, "main", "t/")) == 4  # one file per task
    after = _decisions(lake, repo)
    assert sorted(after.values()).count("committed") == 4


def test_speculative_attempts_only_the_committed_one_is_kept(lake: Lake) -> None:
    """Two attempts of one task (a speculative copy) write the same names at their own addresses;
    the driver commits one attempt's message, the other's files go to the reconciler."""
    import pyarrow as pa

    repo = lake.new_repo()
    plan = spark_write.WritePlan(lake.core, repo, "main", "s/", "parquet", False, "spec")
    batch = pa.record_batch({"id": pa.array([1, 2, 3], pa.int64())})
    first = spark_write.write_task(plan, 0, iter([batch]))
    second = spark_write.write_task(plan, 0, iter([batch]))
    assert [r[0] for r in first.records] == [r[0] for r in second.records]
    spark_write.commit_job(plan, [second])
    decisions = _decisions(lake, repo)
    kept = {a for a, d in decisions.items() if d == "committed"}
    dropped = {a for a, d in decisions.items() if d == "delete"}
    assert len(kept) == len(dropped) == 1
    assert lake.paths(repo, "main") == [first.records[0][0].decode()]


def test_commit_entries_expected_head(lake: Lake) -> None:
    from lakefs_core.errors import ConflictError

    repo = lake.new_repo(journal=False)
    head = lake.head(repo)
    lake.upload(repo, {"a": b"a"})

    async def stale(core: Core) -> object:
        return await core.graveler.commit_entries(
            repo, "main", [], committer="t", message="m", expected_head=head
        )

    with pytest.raises(ConflictError, match="moved from"):
        lake.run(stale)
    with pytest.raises(BadInputError):
        lake.run(lambda core: core.graveler.commit_entries(repo, "main", [], committer="t", message=""))
    with pytest.raises(ReadOnlyError):
        mirror = lake.new_repo(read_only=True)
        lake.run(lambda core: core.graveler.commit_entries(mirror, "main", [], committer="t", message="m"))


# -- change feed ------------------------------------------------------------------------------------


def test_change_feed_batch_and_stream_across_restart(spark: SparkSession, lake: Lake, tmp_path: Path) -> None:
    repo = lake.new_repo()
    c1 = lake.upload(repo, {"a": b"1", "b": b"2"})
    uri = f"lakefs://{repo}/main"
    checkpoint, out = str(tmp_path / "checkpoint"), str(tmp_path / "out")

    def run_stream() -> None:
        stream = (
            spark.readStream.format("lakefs-changes").option("config", lake.config)
            .option("startingCommit", c1).load(uri)
        )  # fmt: skip
        query = (
            stream.writeStream.format("parquet")
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start(out)
        )
        query.awaitTermination(120)

    c2 = lake.upload(repo, {"a": b"changed", "c": b"3"})
    lake.run(lambda core: core.graveler.delete_entry(repo, "main", b"b"))
    c3 = lake.run(lambda core: core.graveler.commit(repo, "main", committer="t", message="rm b")).id
    run_stream()
    c4 = lake.upload(repo, {"d": b"4"})
    run_stream()  # a restart resumes from the checkpoint's offset
    streamed = rows(spark.read.parquet(out), "commit_id", "path", "change_type")
    expected = [
        (c2, "a", "changed"), (c2, "c", "added"), (c3, "b", "removed"), (c4, "d", "added"),
    ]  # fmt: skip
    assert streamed == sorted(expected)
    batch = (
        spark.read.format("lakefs-changes")
        .option("config", lake.config)
        .option("startingCommit", c1)
        .load(uri)
    )
    collected = batch.collect()
    assert sorted((r["commit_id"], r["path"], r["change_type"]) for r in collected) == sorted(expected)
    (one,) = [r for r in collected if r["commit_id"] == c3]
    assert one["parent"] == c2 and one["size"] == 1 and one["address"].startswith("data/")


def test_read_plan_uses_ranges_not_listing(lake: Lake) -> None:
    from lakefs_core.repos.uri import Kind, parse_uri

    repo = lake.new_repo()
    lake.upload(repo, {f"p/{i:03d}.bin": b"x" for i in range(50)} | {"q/z": b"z"})
    plan = lake.run(
        lambda core: spark_read.plan_read(
            lake.core, parse_uri(f"lakefs://{repo}/main/p/", Kind.PREFIX), {}, "binaryFile"
        )
    )
    assert len(plan.files) == 50 and plan.commit_id == lake.head(repo)


def test_run_async_never_reprs_its_result() -> None:
    """A task's bytes come back through run_async: CPython 3.11's asyncio.run formatted its main
    task (and the result) when it restored the SIGINT handler, a full repr of every byte read."""
    import signal

    from lakefs_core.compute.partition import run_async

    formatted: list[int] = []

    class Counted:
        def __repr__(self) -> str:
            formatted.append(1)
            return "counted"

    async def make() -> Counted:
        return Counted()

    # A PySpark worker's handler (a SparkContext in this process installs its own)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        assert isinstance(run_async(make), Counted) and formatted == []
    finally:
        signal.signal(signal.SIGINT, previous)
