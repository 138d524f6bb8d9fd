"""lakefs_core.compute.loops: the partitions' private loops share one thread pool, and a loop's end
still does what ``asyncio.run``'s did (left tasks cancelled, async generators finalised)."""

from __future__ import annotations

import asyncio
import multiprocessing
import threading
from collections.abc import AsyncIterator

import pytest

from lakefs_core.compute.loops import new_loop, run_on_new_loop, shared_pool
from lakefs_core.compute.partition import run_async, stream_async
from tests.support.timing import scaled


def _thread_name() -> str:
    return threading.current_thread().name


async def _names(n: int) -> set[str]:
    return {await asyncio.to_thread(_thread_name) for _ in range(n)}


def test_partitions_loops_run_file_operations_on_one_pool(monkeypatch: pytest.MonkeyPatch) -> None:
    assert all(name.startswith("lakefs-partition-io") for name in run_async(lambda: _names(3)))
    started: list[str] = []
    start = threading.Thread.start

    def counting(self: threading.Thread) -> None:
        started.append(self.name)
        start(self)

    monkeypatch.setattr(threading.Thread, "start", counting)
    for _ in range(10):  # ten new loops, three file operations each
        run_async(lambda: _names(3))
    # asyncio.run's loops started a pool thread each and one more to shut it down: 20 or more
    assert len(started) <= 2, started


def test_a_loop_closing_leaves_the_pool_running() -> None:
    loop = new_loop()
    loop.close()  # closing a loop shuts its default executor down: not the shared one
    assert shared_pool().submit(_thread_name).result(timeout=scaled(10)).startswith("lakefs-partition-io")

    async def numbers() -> AsyncIterator[int]:
        for i in range(3):
            yield await asyncio.to_thread(int, i)

    assert list(stream_async(numbers)) == [0, 1, 2]
    assert list(stream_async(numbers)) == [0, 1, 2]


def test_tasks_left_running_are_cancelled_and_generators_finalised() -> None:
    ended: list[str] = []

    async def forever() -> None:
        try:
            await asyncio.sleep(3600)
        finally:
            ended.append("task")

    async def gen() -> AsyncIterator[int]:
        try:
            yield 1
            yield 2
        finally:
            ended.append("generator")

    async def main() -> int:
        asyncio.get_running_loop().create_task(forever())
        g = gen()
        first = await g.__anext__()  # left suspended: finalised when the loop ends
        await asyncio.sleep(0)
        return first

    assert run_on_new_loop(main()) == 1
    assert sorted(ended) == ["generator", "task"]


def test_errors_come_back_to_the_caller() -> None:
    async def fail() -> None:
        await asyncio.to_thread(int, "1")
        raise KeyError("boom")

    with pytest.raises(KeyError, match="boom"):
        run_async(fail)


def _in_child(out: multiprocessing.queues.Queue[set[str]]) -> None:
    out.put(run_async(lambda: _names(2)))


def test_a_forked_child_gets_a_pool_of_its_own() -> None:
    """The parent's pool threads do not exist in a forked child: the child's loops must not queue
    work for them (it would wait forever)."""
    run_async(lambda: _names(2))  # the parent's pool exists, its threads idle
    ctx = multiprocessing.get_context("fork")
    out: multiprocessing.queues.Queue[set[str]] = ctx.Queue()
    child = ctx.Process(target=_in_child, args=(out,))
    child.start()
    try:
        names = out.get(timeout=scaled(30))
    finally:
        child.join(scaled(30))
        if child.is_alive():
            child.kill()
    assert child.exitcode == 0 and all(n.startswith("lakefs-partition-io") for n in names)
