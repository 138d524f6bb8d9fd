"""lakefs_core.offloop's worker processes: real spawned processes, a real SIGKILL."""

from __future__ import annotations

import asyncio
import os

import pytest

from lakefs_core import offloop
from lakefs_core.errors import LakeFSError, PurgedError, TransientError
from tests.support.workers import (
    pid_and_square,
    raise_purged,
    raise_unpicklable,
    raise_value_error,
    sigkill_self,
)


async def test_run_process_runs_in_another_process_and_reuses_it() -> None:
    pool = offloop.process_executor()
    pid, square = await offloop.run_process(pid_and_square, 12)
    assert square == 144 and pid != os.getpid()
    for x in range(3):
        # The pool marks a worker idle just after handing its result over; a call made before that
        # would start a second worker (on demand, up to PROCESS_WORKERS) instead of reusing it.
        await asyncio.sleep(0.2)
        again, _ = await offloop.run_process(pid_and_square, x)
        assert offloop.process_executor() is pool  # the pool stays for the next call
        # the pool is shared by the whole test run: with several workers any idle one may answer
        assert again == pid or offloop.PROCESS_WORKERS > 1


async def test_an_exception_comes_back_unchanged() -> None:
    with pytest.raises(ValueError, match="bad input 7"):
        await offloop.run_process(raise_value_error, "bad input 7")


async def test_our_errors_come_back_with_their_fields() -> None:
    with pytest.raises(PurgedError, match="gone") as info:
        await offloop.run_process(raise_purged, "gone", "audit-7")
    assert info.value.audit_id == "audit-7"


async def test_an_exception_that_does_not_unpickle_comes_back_named_and_the_pool_survives() -> None:
    before, _ = await offloop.run_process(pid_and_square, 2)
    pool = offloop.process_executor()
    with pytest.raises(LakeFSError, match="Unpicklable in a worker process: needs two") as info:
        await offloop.run_process(raise_unpicklable, "needs two")
    assert type(info.value) is LakeFSError
    await asyncio.sleep(0.2)  # see the reuse test
    pid, square = await offloop.run_process(pid_and_square, 6)
    assert offloop.process_executor() is pool  # not a broken pool (that one would be replaced)
    assert square == 36 and (pid == before or offloop.PROCESS_WORKERS > 1)


async def test_a_killed_worker_is_a_transient_error_and_a_new_pool_takes_over() -> None:
    before, _ = await offloop.run_process(pid_and_square, 2)
    with pytest.raises(TransientError, match="CPU worker process died") as info:
        await offloop.run_process(sigkill_self)
    assert info.value.retryable
    pid, square = await offloop.run_process(pid_and_square, 5)  # a fresh pool, fresh workers
    assert square == 25 and pid not in (before, os.getpid())
