"""``upload --recursive`` keeps ``UPLOAD_IN_FLIGHT`` batches in flight (``fs_transfer._overlapped``):
results in the batches' order, never more than the bound running, no batch started after one
failed, a batch already running finishes (so the count of staged objects is exact), and anything
but a LakeFSError (a bug, a cancellation) cancels what runs."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Iterator

import pytest

from lakefs_core.cli import fs_transfer
from lakefs_core.errors import TransientError


class Jobs:
    """Jobs that each sleep a given time and return ``[i]``; records concurrency and starts."""

    def __init__(self, delays: list[float], fail: dict[int, BaseException] | None = None) -> None:
        self.delays, self.fail = delays, fail or {}
        self.running = self.peak = 0
        self.started: list[int] = []
        self.finished: list[int] = []

    def __iter__(self) -> Iterator[Callable[[], Awaitable[list[int]]]]:
        return (self.job(i) for i in range(len(self.delays)))

    def job(self, i: int) -> Callable[[], Awaitable[list[int]]]:
        async def run() -> list[int]:
            self.started.append(i)
            self.running += 1
            self.peak = max(self.peak, self.running)
            try:
                await asyncio.sleep(self.delays[i])
                if i in self.fail:
                    raise self.fail[i]
                self.finished.append(i)
                return [i]
            finally:
                self.running -= 1

        return run


@pytest.mark.parametrize("in_flight", [2, fs_transfer.UPLOAD_IN_FLIGHT])
async def test_results_keep_the_order_of_the_batches(in_flight: int) -> None:
    jobs = Jobs([0.03, 0.0, 0.02, 0.0, 0.01, 0.0])
    results, failure = await fs_transfer._overlapped(iter(jobs), in_flight)
    assert failure is None and results == [0, 1, 2, 3, 4, 5]
    assert jobs.peak == in_flight


async def test_no_batch_starts_after_a_failure_and_the_running_one_finishes() -> None:
    # job 1 fails at once while job 0 runs; job 2 must not start; job 0's result is kept
    jobs = Jobs([0.05, 0.0, 0.0, 0.0], fail={1: TransientError("503 SlowDown")})
    results, failure = await fs_transfer._overlapped(iter(jobs), 2)
    assert isinstance(failure, TransientError) and results == [0]
    assert jobs.started == [0, 1]
    # job 1 fails late while job 2 (started meanwhile) runs: job 2 runs to its end and counts
    jobs = Jobs([0.0, 0.05, 0.02, 0.0], fail={1: TransientError("503 SlowDown")})
    results, failure = await fs_transfer._overlapped(iter(jobs), 2)
    assert isinstance(failure, TransientError) and results == [0, 2]
    assert jobs.started == [0, 1, 2] and jobs.running == 0


async def test_a_bug_cancels_the_running_batches() -> None:
    jobs = Jobs([0.0, 10.0, 0.0], fail={0: ValueError("bug")})
    with pytest.raises(ValueError, match="bug"):
        await asyncio.wait_for(fs_transfer._overlapped(iter(jobs), 2), 5)
    assert jobs.running == 0 and 1 not in jobs.finished


async def test_the_writer_threads_start_before_any_is_busy() -> None:
    """``_widen_thread_pool`` starts every thread of the loop's new executor at once (a start
    under GIL contention kept the loop waiting), and the executor still runs work."""

    def writers() -> set[threading.Thread]:
        return {t for t in threading.enumerate() if t.name.startswith("lakefs-io")}

    before = writers()  # another test's, not yet joined
    fs_transfer._widen_thread_pool(3)
    started = writers() - before
    assert len(started) == 3 + 4
    assert await asyncio.to_thread(lambda: 42) == 42
    assert writers() - before == started
