"""The real ``lakefs-gc run`` process: ``--once`` on the embedded-style SQLite + local core,
``check-config``, and SIGKILL of the daemon at every fault point of a run and at random moments
(and of the daemon while its spark-submit child marks): nothing live is ever deleted, and the
next start resumes or abandons cleanly and completes the collection."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.gc.daemon_support import SqliteRepo, gc_config, sqlite_repo, write_config
from tests.support.env import require_tool
from tests.support.timing import scaled

GC = [sys.executable, "-m", "lakefs_gc.cli"]
FAULT_POINTS = (
    "mark:claimed",
    "mark:before-summary",
    "sweep:verified",
    "sweep:batch:1",
    "sweep:before-report",
)


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAKEFS_")}
    env.update(extra)
    return env


async def _gc(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return await asyncio.to_thread(
        subprocess.run, [*GC, *args], capture_output=True, text=True, env=env or _env(), timeout=scaled(300)
    )


async def _start(config: Path, env: dict[str, str]) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        *GC, "run", "--config", str(config), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )


async def _assert_complete(repo: SqliteRepo, config: Path, live: set[str], garbage: set[str]) -> None:
    done = await _gc("run", "--config", str(config), "--once")
    assert done.returncode == 0, done.stderr[-3000:]
    stored = await repo.stored()
    assert not live - stored, "a live object was deleted"
    left = stored & garbage
    why = f"{len(left)} of {len(garbage)} garbage objects survived the completing run"
    assert not left, f"{why}; its log: {done.stderr[-3000:]}"


async def test_run_once_collects(tmp_path: Path) -> None:
    repo = await sqlite_repo(tmp_path)
    try:
        live, garbage = await repo.live_and_garbage()
        config = write_config(tmp_path / "gc.yaml", gc_config(repo.kv_url, tmp_path / "work"))
        checked = await _gc("check-config", "--config", str(config))
        assert checked.returncode == 0 and "gc-secret-1" not in checked.stdout
        await _assert_complete(repo, config, live, garbage)
    finally:
        await repo.close()


async def test_check_config_lists_every_problem(tmp_path: Path) -> None:
    bad = {"core": {"kv_url": "sqlite:////no/such/dir/kv.sqlite3"}, "access_keys": [], "listen": "nope",
           "spark": {"mode": "yarn"}}  # fmt: skip
    config = write_config(tmp_path / "bad.yaml", bad)
    out = await _gc("check-config", "--config", str(config))
    assert out.returncode == 9
    for key in ("access_keys", "listen", "spark.mode"):
        assert key in out.stderr
    assert "Traceback" not in out.stderr
    missing_dir = write_config(
        tmp_path / "dir.yaml", gc_config("sqlite:////no/such/dir/kv.sqlite3", tmp_path / "work")
    )
    out = await _gc("run", "--config", str(missing_dir), "--once")
    assert out.returncode == 16 and "core.kv_url" in out.stderr and "Traceback" not in out.stderr


@pytest.mark.parametrize("point", FAULT_POINTS)
async def test_sigkill_at_each_fault_point(tmp_path: Path, point: str) -> None:
    repo = await sqlite_repo(tmp_path)
    try:
        live, garbage = await repo.live_and_garbage()
        config = write_config(tmp_path / "gc.yaml", gc_config(repo.kv_url, tmp_path / "work"))
        killed = await _gc(
            "run", "--config", str(config), "--once", env=_env(LAKEFS_GC_FAULT=f"{point}:kill")
        )
        assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
        assert not live - await repo.stored(), f"a live object was deleted before the kill at {point}"
        await repo.expire_dead_lease()
        await _assert_complete(repo, config, live, garbage)
    finally:
        await repo.close()


@pytest.mark.parametrize("seed", range(6))
async def test_sigkill_at_random_moments(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    repo = await sqlite_repo(tmp_path)
    try:
        live, garbage = await repo.live_and_garbage()
        config = write_config(tmp_path / "gc.yaml", gc_config(repo.kv_url, tmp_path / "work"))
        for _ in range(2):  # two kills in a row, then a clean run
            proc = await _start(config, _env())
            await asyncio.sleep(rng.uniform(0.3, 3.0))
            proc.kill()
            await proc.wait()
            assert not live - await repo.stored(), f"seed {seed}: a live object was deleted"
            await repo.expire_dead_lease()
        await _assert_complete(repo, config, live, garbage)
    finally:
        await repo.close()


def _children_with(*needles: str) -> list[int]:
    """Processes whose environment holds every needle (the run token variable, this test's mark)."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                environ = f.read()
        except OSError:
            continue
        if all(n.encode() in environ for n in needles):
            found.append(int(pid))
    return found


@pytest.mark.spark
async def test_sigkill_of_the_daemon_takes_its_spark_child_along(tmp_path: Path) -> None:
    require_tool("java", "default-jre-headless")
    pytest.importorskip("pyspark")
    repo = await sqlite_repo(tmp_path)
    try:
        live, garbage = await repo.live_and_garbage()
        conf = gc_config(repo.kv_url, tmp_path / "work", spark={"mode": "submit", "master": "local[1]"})
        config = write_config(tmp_path / "gc.yaml", conf)
        marker = f"LAKEFS_TEST_MARK={tmp_path.name}"
        proc = await _start(config, _env(LAKEFS_TEST_MARK=tmp_path.name))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            children = [p for p in _children_with("LAKEFS_GC_SPARK_RUN=", marker) if p != proc.pid]
            if children:
                break
            await asyncio.sleep(0.2)
        assert children, "the daemon never started its spark-submit child"
        await asyncio.sleep(2.0)  # the JVM is up and marking
        proc.kill()
        await proc.wait()
        deadline = time.monotonic() + 30
        alive = _alive(children)
        while time.monotonic() < deadline and alive:
            await asyncio.sleep(0.2)
            alive = _alive(children)
        assert not alive, f"spark child processes outlived the killed daemon: {alive}"
        assert not live - await repo.stored()
        await repo.expire_dead_lease()
        await _assert_complete(repo, config, live, garbage)
    finally:
        await repo.close()


def _alive(pids: list[int]) -> list[int]:
    """The processes of ``pids`` still running (zombies awaiting their reaper count as gone)."""
    return [p for p in pids if _state(p) not in ("gone", "Z")]


def _state(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"
