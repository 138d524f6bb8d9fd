"""The real ``lakefs-gc run`` process: ``--once`` on the embedded-style SQLite + local core,
``check-config``, and SIGKILL of the daemon at every fault point of a run and at random moments
(and of the daemon while its spark-submit child marks): nothing live is ever deleted, and the
next start resumes or abandons cleanly and completes the collection.

The daemons the lite tests kill are forked from a pre-imported ``lakefs-gc`` (the module's
:func:`zygote`, :mod:`tests.support.zygote`): real processes in a new session that run
``lakefs_gc.cli.main``, whose ~0.7 s of imports happened once before the fork, so a kill at a
random moment lands in the daemon's pass rather than in its imports. The runs that complete a
collection, and the Spark test's daemon, are fresh processes."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.gc.daemon_support import SqliteRepo, gc_config, sqlite_repo, write_config
from tests.support.env import require_tool
from tests.support.timing import scaled
from tests.support.zygote import Zygote, ZygoteProcess

GC = [sys.executable, "-m", "lakefs_gc.cli"]
FORKED = ["lakefs-gc"]  # a zygote child's argv[0]: the program, as the console script's sys.argv
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


# What ``lakefs-gc run`` imports for a lite pass (pyarrow aside: it starts a thread; the report's
# writer imports it), for the zygote the killed daemons fork from.
DAEMON_MODULES = (
    "lakefs_gc.cli.daemon",
    "lakefs_gc.service",
    "lakefs_gc.api",
    "lakefs_gc.mark.mark",
    "lakefs_gc.sweep.sweep",
    "lakefs_core.kv.sqlite",
    "lakefs_core.repos.objects",
    "lakefs_core.repos.committing",
    "lakefs_core.repos.importing",
    "lakefs_core.service.deleter",
    "uvloop",
    "yaml",
)


@pytest.fixture(scope="module")
def zygote() -> Iterator[Zygote]:
    with Zygote("lakefs_gc.cli:main", DAEMON_MODULES) as z:
        yield z


async def _start(config: Path, env: dict[str, str]) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        *GC, "run", "--config", str(config), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )


async def _fork(zygote: Zygote, config: Path, env: dict[str, str]) -> ZygoteProcess:
    """:func:`_start` forked from ``zygote``."""
    return await zygote.spawn([*FORKED, "run", "--config", str(config)], env, discard=True)


async def _killed(zygote: Zygote, *args: str, env: dict[str, str]) -> tuple[int, str]:
    """Run ``lakefs-gc ARGS`` forked from ``zygote`` until it ends; its exit status and stderr."""
    proc = await zygote.spawn([*FORKED, *args], env)
    try:
        _, err = await asyncio.wait_for(proc.communicate(), scaled(300))
    finally:
        if proc.returncode is None:
            os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()
    assert proc.returncode is not None
    return proc.returncode, err.decode(errors="replace")


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
async def test_sigkill_at_each_fault_point(tmp_path: Path, point: str, zygote: Zygote) -> None:
    repo = await sqlite_repo(tmp_path)
    try:
        live, garbage = await repo.live_and_garbage()
        config = write_config(tmp_path / "gc.yaml", gc_config(repo.kv_url, tmp_path / "work"))
        env = _env(LAKEFS_GC_FAULT=f"{point}:kill")
        code, err = await _killed(zygote, "run", "--config", str(config), "--once", env=env)
        assert code == -signal.SIGKILL, err[-2000:]
        assert not live - await repo.stored(), f"a live object was deleted before the kill at {point}"
        await repo.expire_dead_lease()
        await _assert_complete(repo, config, live, garbage)
    finally:
        await repo.close()


@pytest.mark.parametrize("seed", range(6))
async def test_sigkill_at_random_moments(tmp_path: Path, seed: int, zygote: Zygote) -> None:
    rng = random.Random(seed)
    repo = await sqlite_repo(tmp_path)
    try:
        live, garbage = await repo.live_and_garbage()
        config = write_config(tmp_path / "gc.yaml", gc_config(repo.kv_url, tmp_path / "work"))
        for _ in range(2):  # two kills in a row, then a clean run
            proc = await _fork(zygote, config, _env())
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
