"""CPU-heavy work off the event loop: one small, process-wide pool of worker threads.

Daemons serve their HTTP API (``/_health``, the mirror API) from the same event loop that runs their
passes, so a pass must never hold the loop for long: table opening (CRC32C of every block, index
parsing), metarange parsing, bulk record decoding and sorting of large key sets run here instead,
through :func:`run_cpu`.

Threads first: CRC32C (``google-crc32c``) and Snappy (``cramjam``) release the GIL, and short
pure-Python parts (an index, a metarange) hand the GIL back to the loop thread at every switch
interval, so the loop keeps answering while a worker runs them. Threads share the open tables of
the table cache and need no pickling. Long pure-Python work goes to worker processes (below).

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

Pure-Python work that is big AND whose input and output are compact (decoding every record of a
large range into a few strings per entry) runs in worker PROCESSES instead, through
:func:`run_process`: a thread doing it holds the GIL for most of its time slices, and a daemon's loop
thread then gets about a third of one core while two such threads run. Measured on the mirror
during a 300k-entry pass: API route p99 79-82 ms with two decoding threads. The process pool has
:data:`PROCESS_WORKERS` workers (one usable core left to the loop, at most
:data:`MAX_PROCESS_WORKERS`), started on demand with ``spawn`` (never ``fork``:
the parent has threads), lazily on first use; a worker that dies (OOM killer, ``kill -9``) breaks the
pool, which is then dropped and the call raises :class:`~lakefs_core.errors.TransientError` (the
caller retries later, a new pool is started). Functions run there must be importable module-level
functions whose arguments and results pickle. Their exceptions come back as raised (the project's
errors pickle with their fields); one that would not survive the trip (a third-party class whose
``__init__`` takes other arguments than its ``args``) comes back as a :class:`LakeFSError` naming
its type and message, instead of breaking the pool.
"""

from __future__ import annotations

import asyncio
import functools
import multiprocessing
import os
import pickle
import signal
import sys
import threading
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any, ParamSpec, TypeVar

from lakefs_core.errors import LakeFSError, TransientError

__all__ = [
    "CPU_WORKERS",
    "LOOP_SWITCH_INTERVAL",
    "MAX_PROCESS_WORKERS",
    "PROCESS_WORKERS",
    "cpu_executor",
    "favour_the_loop",
    "process_executor",
    "run_cpu",
    "run_process",
]

P = ParamSpec("P")
T = TypeVar("T")
E = TypeVar("E", ThreadPoolExecutor, ProcessPoolExecutor)

CPU_WORKERS = 2  # one GIL: more threads only add contention with the loop thread
LOOP_SWITCH_INTERVAL = 0.0002  # seconds; see the module doc
MAX_PROCESS_WORKERS = 4  # each worker is a Python process (~50 MB) holding a table being decoded


def _usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))  # the CPUs this process may run on (cpusets, taskset)
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


# One core stays with the loop; at most MAX_PROCESS_WORKERS, started on demand up to that.
PROCESS_WORKERS = max(1, min(MAX_PROCESS_WORKERS, _usable_cpus() - 1))

_lock = threading.Lock()
_pools: dict[int, ThreadPoolExecutor] = {}  # by process id: a forked child must not use its parent's
_process_pools: dict[int, ProcessPoolExecutor] = {}


def favour_the_loop() -> None:
    """Make a waiting thread (the event loop's, after a system call) get the GIL back within
    :data:`LOOP_SWITCH_INTERVAL` instead of CPython's default 5 ms. Process-wide; never lengthens an
    interval someone already shortened."""
    if sys.getswitchinterval() > LOOP_SWITCH_INTERVAL:
        sys.setswitchinterval(LOOP_SWITCH_INTERVAL)


def _this_process(pools: dict[int, E], make: Callable[[], E]) -> E:
    """The pool of ``pools`` that belongs to this process, made on first use (a forked child gets
    its own instead of its parent's, whose threads or pipes it does not have)."""
    pid = os.getpid()
    with _lock:
        pool = pools.get(pid)
        if pool is None:
            pools.clear()
            pool = pools[pid] = make()
        return pool


def cpu_executor() -> ThreadPoolExecutor:
    """The process-wide pool for CPU-heavy work (created on first use)."""
    return _this_process(
        _pools, lambda: ThreadPoolExecutor(max_workers=CPU_WORKERS, thread_name_prefix="lakefs-cpu")
    )


async def run_cpu(fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """``fn(*args, **kwargs)`` in the CPU pool; its exception is raised here unchanged."""
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(cpu_executor(), functools.partial(fn, *args, **kwargs))


def process_executor() -> ProcessPoolExecutor:
    """The process-wide pool of worker processes (created, with ``spawn``, on first use)."""
    spawn = multiprocessing.get_context("spawn")
    return _this_process(
        _process_pools,
        lambda: ProcessPoolExecutor(
            max_workers=PROCESS_WORKERS, mp_context=spawn, initializer=_ignore_interrupts
        ),
    )


def _ignore_interrupts() -> None:
    """In a worker: Ctrl-C reaches the whole process group; only the daemon decides what it means."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _call_in_worker(call: Callable[[], T]) -> T:
    """In a worker: ``call()``, with an exception that would not unpickle in the parent replaced."""
    try:
        return call()
    except Exception as e:
        try:
            pickle.loads(pickle.dumps(e))
        except Exception:
            # The pool's result thread would fail to unpickle it and declare every worker dead.
            raise LakeFSError(f"{type(e).__name__} in a worker process: {e}") from None
        raise


def _drop_process_pool(pool: ProcessPoolExecutor) -> None:
    with _lock:
        if _process_pools.get(os.getpid()) is pool:
            del _process_pools[os.getpid()]
    pool.shutdown(wait=False, cancel_futures=True)


def _retrieve(outcome: asyncio.Future[Any]) -> None:
    # An abandoned call's outcome is retrieved, so asyncio never reports it as "never retrieved".
    if not outcome.cancelled():
        outcome.exception()


async def run_process(fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """``fn(*args, **kwargs)`` in a worker process; its exception is raised here (pickled back).
    A worker that died takes the pool with it: :class:`TransientError`, and the next call starts a
    new pool. Cancelling the await abandons the result; the call, once submitted, still runs: a
    queued call is never cancelled, because CPython 3.11's pool, breaking while a cancelled call is
    queued, fails in its manager thread (``InvalidStateError``, a thread traceback)."""
    pool = process_executor()
    try:
        future = pool.submit(_call_in_worker, functools.partial(fn, *args, **kwargs))
        outcome = asyncio.wrap_future(future)
        try:
            return await asyncio.shield(outcome)  # cancelling us does not cancel the call
        except asyncio.CancelledError:
            outcome.add_done_callback(_retrieve)  # nobody awaits it any more
            raise
    except BrokenProcessPool as e:
        _drop_process_pool(pool)
        raise TransientError(f"a CPU worker process died ({e}); the work will be retried") from e
