"""Worker-thread helpers of :class:`~lakefs_core.block.local.LocalBlockStore`: every blocking file
operation runs in a thread, and a cancelled caller waits for its thread (a thread cannot be
interrupted), so cleanup never races a write still running.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import os
from collections.abc import AsyncIterable, Callable
from typing import ParamSpec, TypeVar

from lakefs_core.block._common import iter_body
from lakefs_core.block.local_files import IO_CHUNK

__all__ = ["open_in_thread", "pump", "run"]

P = ParamSpec("P")
T = TypeVar("T")


def _in_thread(fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> asyncio.Future[T]:
    """``asyncio.to_thread``'s call (the default executor, the caller's context variables) as the
    executor's future itself: no task wrapping a coroutine, which cost a small read a task and one
    more turn of the loop (a local GET of 1 KiB is one such hop)."""
    call = functools.partial(contextvars.copy_context().run, fn, *args, **kwargs)
    return asyncio.get_running_loop().run_in_executor(None, call)


async def run(fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """Run ``fn`` in a worker thread. On cancellation, wait for the thread to finish before re-raising
    (a thread cannot be interrupted), so cleanup code never races a still-running write."""
    task = _in_thread(fn, *args, **kwargs)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        if not task.done():
            await asyncio.wait([task])
        if not task.cancelled():
            task.exception()  # retrieved: never reported as "exception was never retrieved"
        raise


async def open_in_thread(fn: Callable[P, tuple[int, T]], *args: P.args, **kwargs: P.kwargs) -> tuple[int, T]:
    """Like :func:`run` for a function returning ``(fd, ...)``: a descriptor opened by a thread whose
    caller was cancelled meanwhile is closed rather than leaked."""
    task = _in_thread(fn, *args, **kwargs)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        if not task.done():
            await asyncio.wait([task])
        if not task.cancelled() and task.exception() is None:
            os.close(task.result()[0])
        raise


async def pump(body: AsyncIterable[bytes], write: Callable[[bytes], None]) -> None:
    """Write a streamed body through ``write`` in a worker thread, about ``IO_CHUNK`` at a time,
    the write of one piece overlapping the receipt of the next (never two writes at once). Returns
    or raises only once no write is running (the caller then removes or commits the file)."""
    buf = bytearray()
    pending: asyncio.Future[None] | None = None
    try:
        async for chunk in iter_body(body):
            buf += chunk
            if len(buf) >= IO_CHUNK:
                if pending is not None:
                    await pending
                pending = asyncio.ensure_future(run(write, bytes(buf)))
                buf.clear()
        if pending is not None:
            await pending
        if buf:
            await run(write, bytes(buf))
    finally:
        if pending is not None and not pending.done():
            await asyncio.wait([pending])  # a failed body or a cancellation: let the write finish
        if pending is not None and not pending.cancelled():
            pending.exception()  # retrieved: the body's own error is the one raised
