"""The data sources under a real ``spark-submit --master local[2]`` (the GC jobs' mechanism:
:func:`~lakefs_core.compute.child.run_spark_job` and the shipped entry script): the ``spark-copy``
job copies a prefix into a branch in one commit, and a job killed mid-write (every task wrote its
files, the driver stalled before its commit, then the whole process group killed) commits nothing
while the reconciler's decision for each of its files is ``delete``."""

from __future__ import annotations

import asyncio
import datetime as dt
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from lakefs_core.compute.child import run_spark_job
from lakefs_core.faults import ENV as FAULT_ENV
from lakefs_core.spark.jobs import JOB_NAME
from tests.spark.conftest import Lake, parquet_bytes
from tests.support.env import require_tool
from tests.support.timing import scaled

if TYPE_CHECKING:
    from lakefs_core.wiring import Core

pytestmark = [pytest.mark.spark, pytest.mark.slow]


async def _journal(lake: Lake, repo: str) -> dict[str, str]:
    async def go(core: Core) -> dict[str, str]:
        journal = await core.graveler.journal(repo)
        later = core.graveler.clock() + dt.timedelta(days=2)
        return {
            i.address: await journal.decide(await journal.effective(i), now=later)
            async for i in journal.intents()
        }

    async with lake.core.open() as core:
        return await go(core)


async def test_spark_submit_copy_and_a_killed_job(lake: Lake) -> None:
    require_tool("java", "default-jre-headless")
    repo = lake.new_repo()
    lake.upload(
        repo, {f"src/{i}.parquet": parquet_bytes({"id": list(range(i * 10, i * 10 + 10))}) for i in range(3)}
    )
    args = {
        "source": f"lakefs://{repo}/main/src/",
        "dest": f"lakefs://{repo}/main/dst/",
        "config": lake.config,
    }
    # speculation on: local mode launches no speculative copies (one executor), the setting must not
    # change the result; the copies themselves are test_datasource's speculative-attempts test
    speculative = {"spark.speculation": "true", "spark.speculation.multiplier": "1"}
    result = await run_spark_job(
        JOB_NAME, args, master="local[2]", timeout=scaled(240), launcher="spark-submit", conf=speculative
    )
    assert (
        result["commit"] == lake.head(repo) and result["files"] == len(lake.paths(repo, "main", "dst/")) >= 1
    )
    copied_rows = lake.run(lambda core: _rows(core, repo, "dst/"))
    assert sorted(copied_rows) == list(range(30))
    copied = set(await _journal(lake, repo))
    head = lake.head(repo)

    # killed mid-write: the driver's commit stalls (SIGSTOP), the job's process group is killed
    # (kill_grace 2 s: the process stopped at the fault point never acts on SIGTERM, so the default
    # 10 s were always spent waiting for it before the SIGKILL)
    killed = {**args, "dest": f"lakefs://{repo}/main/killed/"}
    job = asyncio.ensure_future(
        run_spark_job(JOB_NAME, killed, master="local[2]", timeout=scaled(240), launcher="spark-submit",
                      env={FAULT_ENV: "spark-write:before-commit:stop"}, kill_grace=2)
    )  # fmt: skip
    try:
        # until the driver stalls at its commit with every task's files journalled: the cheap /proc
        # scan first, the journal (a core opened, every intent decided) only once it is stopped
        for _ in range(int(scaled(2400))):  # 0.1 s each
            await asyncio.sleep(0.1)
            if _stopped_worker() and set(await _journal(lake, repo)) - copied:
                break
        else:
            pytest.fail("the job never reached its commit")
    finally:
        job.cancel()
        with pytest.raises(asyncio.CancelledError):
            await job
    assert lake.head(repo) == head and lake.paths(repo, "main", "killed/") == []
    decisions = await _journal(lake, repo)
    assert {decisions[a] for a in set(decisions) - copied} == {"delete"}
    assert {decisions[a] for a in copied} == {"committed"}


async def _rows(core: Core, repo: str, prefix: str) -> list[int]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    out: list[int] = []
    async for record in core.graveler.list_entries(repo, "main", prefix=prefix.encode()):
        data = await core.objects.read_all(repo, "main", record.key.decode())
        out += pq.read_table(pa.BufferReader(data)).column("id").to_pylist()
    return out


def _stopped_worker() -> bool:
    """A process stopped by the fault point (state T) whose environment names it."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if stat.rsplit(")", 1)[1].split()[0] == "T" and b"spark-write:before-commit:stop" in environ:
            return True
    return False
