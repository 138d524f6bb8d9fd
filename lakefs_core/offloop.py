"""CPU-heavy work off the event loop: one small, process-wide pool of worker threads.

Daemons serve their HTTP API (``/_health``, the mirror API) from the same event loop that runs their
passes, so a pass must never hold the loop for long: table opening (CRC32C of every block, index
parsing), metarange parsing, bulk record decoding and sorting of large key sets run here instead,
through :func:`run_cpu`.

Threads, not processes: CRC32C (``google-crc32c``) and Snappy (``cramjam``) release the GIL, and the
pure-Python parts (record decoding) hand the GIL back to the loop thread at every switch interval
(5 ms by default), so the loop keeps answering while a worker decodes. A process pool would spare
the GIL but pay for pickling a table's bytes in and every decoded record out (the unpickling then
competes for the GIL anyway), and would not share the open tables of the table cache.

The pool is separate from the loop's default executor on purpose: blocking file I/O
(``asyncio.to_thread`` in the block stores) must not queue behind a burst of CPU work, and only a
couple of CPU workers make sense under one GIL. Long work is split by its caller into batches (one
:func:`run_cpu` call each), so a cancelled pass stops at the next batch instead of decoding a whole
table for nothing.

A process that serves an API while workers compute calls :func:`favour_the_loop` (the shared HTTP
platform's ``serve_api`` does): it shortens the interpreter's GIL switch interval from 5 ms to
:data:`LOOP_SWITCH_INTERVAL`. Every time the loop thread blocks in a system call (accept, recv,
send, epoll) it gives the GIL up and must win it back from the workers; at 5 ms per hand-back a
request pays tens of them, and ``/_health`` was measured at p99 150-200 ms during a CPU-bound
validation pass with two workers; at 0.2 ms the same pass answers at p99 ~12 ms and takes as long.

Objects handed to a worker must not be mutated by the loop while the call runs (callers await it,
and pass snapshots or objects only they hold); the functions run must be thread-safe (a
:class:`~lakefs_core.format.sstable.reader.TableReader` is).
"""

from __future__ import annotations

import asyncio
import functools
import os
import sys
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import ParamSpec, TypeVar

__all__ = ["CPU_WORKERS", "LOOP_SWITCH_INTERVAL", "cpu_executor", "favour_the_loop", "run_cpu"]

P = ParamSpec("P")
T = TypeVar("T")

CPU_WORKERS = 2  # one GIL: more threads only add contention with the loop thread
LOOP_SWITCH_INTERVAL = 0.0002  # seconds; see the module doc

_lock = threading.Lock()
_pools: dict[int, ThreadPoolExecutor] = {}  # by process id: a forked child must not use its parent's


def favour_the_loop() -> None:
    """Make a waiting thread (the event loop's, after a system call) get the GIL back within
    :data:`LOOP_SWITCH_INTERVAL` instead of CPython's default 5 ms. Process-wide; never lengthens an
    interval someone already shortened."""
    if sys.getswitchinterval() > LOOP_SWITCH_INTERVAL:
        sys.setswitchinterval(LOOP_SWITCH_INTERVAL)


def cpu_executor() -> ThreadPoolExecutor:
    """The process-wide pool for CPU-heavy work (created on first use)."""
    pid = os.getpid()
    with _lock:
        pool = _pools.get(pid)
        if pool is None:
            _pools.clear()
            pool = _pools[pid] = ThreadPoolExecutor(max_workers=CPU_WORKERS, thread_name_prefix="lakefs-cpu")
        return pool


async def run_cpu(fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """``fn(*args, **kwargs)`` in the CPU pool; its exception is raised here unchanged."""
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(cpu_executor(), functools.partial(fn, *args, **kwargs))
