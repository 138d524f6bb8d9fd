"""lakefs_core.offloop's worker processes: real spawned processes, a real SIGKILL."""

from __future__ import annotations

import os

import pytest

from lakefs_core import offloop
from lakefs_core.errors import TransientError
from tests.support.workers import pid_and_square, raise_value_error, sigkill_self


async def test_run_process_runs_in_another_process_and_reuses_it() -> None:
    pid, square = await offloop.run_process(pid_and_square, 12)
    assert square == 144 and pid != os.getpid()
    again, _ = await offloop.run_process(pid_and_square, 3)
    assert offloop.PROCESS_WORKERS > 1 or again == pid  # the worker stays for the next call


async def test_an_exception_comes_back_unchanged() -> None:
    with pytest.raises(ValueError, match="bad input 7"):
        await offloop.run_process(raise_value_error, "bad input 7")


async def test_a_killed_worker_is_a_transient_error_and_a_new_pool_takes_over() -> None:
    before, _ = await offloop.run_process(pid_and_square, 2)
    with pytest.raises(TransientError, match="CPU worker process died") as info:
        await offloop.run_process(sigkill_self)
    assert info.value.retryable
    pid, square = await offloop.run_process(pid_and_square, 5)  # a fresh pool, fresh workers
    assert square == 25 and pid not in (before, os.getpid())
