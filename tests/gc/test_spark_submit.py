"""Jobs as child processes: a real ``spark-submit --master local[2]``, kills that leave nothing behind,
and the one-line error when PySpark is missing."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest

from lakefs_core.compute.child import RUN_TOKEN_ENV, end_run, run_spark_job
from lakefs_core.errors import BadInputError, StartupError, TransientError
from tests.gc.conftest import MakeNamespace
from tests.support.env import require_tool
from tests.support.timing import scaled

MARK_ENV = "LAKEFS_GC_TEST_MARK"


def marked_processes(mark: str) -> list[int]:
    """Live processes whose environment carries ``MARK_ENV=mark`` (zombies excluded)."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            environ = Path(f"/proc/{entry}/environ").read_bytes()
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        if f"{MARK_ENV}={mark}".encode() in environ.split(b"\0") and stat.rsplit(")", 1)[1].split()[0] != "Z":
            out.append(int(entry))
    return out


def group_alive(pgid: int) -> bool:
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == pgid and fields[0] != "Z":
                return True
    return False


class KeepLines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@pytest.mark.spark
async def test_spark_submit_runs_count_objects(make_namespace: MakeNamespace) -> None:
    require_tool("java", "default-jre-headless")
    built = await make_namespace(slices=4, per_slice=75)  # 300 objects
    args = {"store": built.ref.to_json(), "partitions": 3}
    keep = KeepLines()
    logger = logging.getLogger("tests.gc.spark_submit")
    logger.addHandler(keep)
    logger.setLevel(logging.INFO)
    try:
        result = await run_spark_job(
            "count-objects",
            args,
            master="local[2]",
            timeout=scaled(120),
            launcher="spark-submit",
            logger=logger,
        )
    finally:
        logger.removeHandler(keep)
    assert result["executor"] == "spark"
    assert result["objects"] == 300 == len(built.addresses)
    assert result["bytes"] == sum(built.addresses.values())
    assert {s: v["objects"] for s, v in result["per_slice"].items()} == built.slices
    assert any("job count-objects done" in line for line in keep.lines)  # the child's log reached us

    # The in-process lite executor gives the same answer without a JVM.
    lite = await run_spark_job("count-objects", args, timeout=scaled(60), launcher="python", executor="lite")
    assert lite["executor"] == "lite"
    assert {k: v for k, v in lite.items() if k != "executor"} == {
        k: v for k, v in result.items() if k != "executor"
    }


def _pgid(pid: int) -> int | None:
    """The process group of ``pid``; None once it has exited (spark-submit's launcher scripts
    start short-lived helpers that carry the mark too, and one can exit between listing and here)."""
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None


@pytest.mark.spark
@pytest.mark.parametrize("how", ["cancel", "timeout"])
async def test_killed_job_leaves_no_process(how: str, make_namespace: MakeNamespace) -> None:
    require_tool("java", "default-jre-headless")
    built = await make_namespace(slices=1, per_slice=5)
    mark = uuid.uuid4().hex
    call = run_spark_job(
        "count-objects",
        {"store": built.ref.to_json()},
        master="local[2]",
        timeout=4 if how == "timeout" else scaled(120),
        env={MARK_ENV: mark},
        kill_grace=2,
    )
    task = asyncio.create_task(call)
    # Mid-run: wait until the JVM (and whatever it started) is up.
    for _ in range(200):
        await asyncio.sleep(0.05)
        if len(marked_processes(mark)) >= 1 and not task.done():
            break
    if not marked_processes(mark):  # say what the run did instead (an error, or nothing seen)
        detail = repr(task.exception()) if task.done() and not task.cancelled() else "running, unseen"
        pytest.fail(f"the job never started: {detail}")
    leaders = [p for p in marked_processes(mark) if _pgid(p) == p]
    assert len(leaders) == 1  # spark-submit's JVM leads the run's own process group
    leader = leaders[0]
    if how == "cancel":
        await asyncio.sleep(1.5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    else:
        with pytest.raises(TransientError, match="timed out"):
            await task
    assert marked_processes(mark) == []
    assert not group_alive(leader)


async def test_end_run_kills_processes_that_left_the_group() -> None:
    """PySpark's worker daemon moves to its own process group: the run token still finds it."""
    mark, token = uuid.uuid4().hex, uuid.uuid4().hex
    escapee = textwrap.dedent(
        """
        import os, subprocess, sys, time
        subprocess.Popen([sys.executable, "-c", "import os, time; os.setpgid(0, 0); time.sleep(120)"])
        time.sleep(120)
        """
    )
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        escapee,
        env={**os.environ, MARK_ENV: mark, RUN_TOKEN_ENV: token},
        start_new_session=True,
    )
    for _ in range(100):
        if len(marked_processes(mark)) == 2:
            break
        await asyncio.sleep(0.05)
    assert len(marked_processes(mark)) == 2
    await end_run(proc, token, grace=1)
    assert marked_processes(mark) == []
    assert proc.returncode is not None


async def test_child_error_comes_back_as_the_same_class(tmp_path: Path) -> None:
    with pytest.raises(BadInputError, match="unknown keys"):
        await run_spark_job(
            "count-objects",
            {"store": {"namespace": f"local://{tmp_path}", "password": "x"}},
            timeout=scaled(60),
            launcher="python",
            executor="lite",
        )
    with pytest.raises(BadInputError, match="unknown job"):
        await run_spark_job("no-such-job", {}, timeout=scaled(60), launcher="python", executor="lite")


BLOCK_PYSPARK = "import sys; sys.modules['pyspark'] = None; "


def _blocked(code: str, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", BLOCK_PYSPARK + code, *argv],
        capture_output=True,
        check=False,
        text=True,
        timeout=scaled(60),
        cwd=Path(__file__).resolve().parents[2],
    )


async def test_without_pyspark(make_namespace: MakeNamespace, tmp_path: Path) -> None:
    built = await make_namespace(slices=2, per_slice=10)
    args = tmp_path / "args.json"
    args.write_text(json.dumps({"store": built.ref.to_json()}))
    main = "from lakefs_core.compute.job import main; sys.exit(main(sys.argv[1:]))"

    # lakefs-gc (its group imports a command's module only when it runs: import them all) and the
    # whole spark package import without PySpark.
    imports = _blocked(
        "import lakefs_gc.cli, lakefs_gc.cli.jobs, lakefs_gc.cli.daemon, lakefs_gc.cli.purge; "
        "import lakefs_core.compute, lakefs_core.compute.child, lakefs_core.compute.job; "
        "import lakefs_gc.mark.count_objects, lakefs_core.compute.session; print('ok')"
    )
    assert imports.returncode == 0, imports.stderr
    assert imports.stdout.strip() == "ok"

    spark = _blocked(main, "count-objects", "--args", str(args), "--result", str(tmp_path / "r1.json"))
    assert spark.returncode == StartupError.exit_code
    assert spark.stderr.strip().splitlines() == [
        "lakefs-gc-job count-objects: spark: PySpark is not installed: install the 'spark' extra "
        "(pip install 'lakefs-open[spark]') or use the lite executor"
    ]
    assert not (tmp_path / "r1.json").exists()

    lite = _blocked(
        main,
        "count-objects",
        "--args",
        str(args),
        "--result",
        str(tmp_path / "r2.json"),
        "--executor",
        "lite",
    )
    assert lite.returncode == 0, lite.stderr
    assert json.loads((tmp_path / "r2.json").read_text())["objects"] == 20
