"""The shared daemon loop: cadence, backoff, --once, two-stage graceful shutdown (real signals)."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import textwrap
import time

from lakefs_core.service.daemon import DaemonLoop
from tests.support.timing import scaled


async def test_once_reports_the_outcome() -> None:
    async def ok() -> None:
        return None

    async def boom() -> None:
        raise RuntimeError("nope")

    assert await DaemonLoop(ok, name="t", interval=1).run(once=True) == 0
    failing = DaemonLoop(boom, name="t", interval=1)
    assert await failing.run(once=True) == 1
    assert failing.consecutive_errors == 1


async def test_backoff_grows_with_jitter_and_resets() -> None:
    calls = 0

    async def flaky() -> None:
        nonlocal calls
        calls += 1
        if calls <= 3:
            raise RuntimeError("down")

    loop = DaemonLoop(flaky, name="t", interval=0.01, max_backoff=0.05)
    seen: list[int] = []
    five = asyncio.Event()

    def record(errors: int) -> None:
        seen.append(errors)
        if len(seen) == 5:
            five.set()

    loop.on_result = record
    task = asyncio.create_task(loop.run())
    await asyncio.wait_for(five.wait(), timeout=scaled(10))
    loop.request_stop()
    assert await task == 0
    assert seen[:5] == [1, 2, 3, 0, 0]
    loop.consecutive_errors = 10
    delays = [loop.next_delay() for _ in range(50)]
    assert all(0.005 <= d <= 0.05 for d in delays) and len(set(delays)) > 1


async def test_first_stop_finishes_the_pass_second_cancels_it() -> None:
    finished = []

    async def slow() -> None:
        await asyncio.sleep(0.2)
        finished.append(True)

    loop = DaemonLoop(slow, name="t", interval=10)
    task = asyncio.create_task(loop.run())
    await asyncio.sleep(0.05)
    loop.request_stop()
    assert await task == 0
    assert finished == [True]

    finished.clear()
    loop2 = DaemonLoop(slow, name="t", interval=10)
    task2 = asyncio.create_task(loop2.run())
    await asyncio.sleep(0.05)
    loop2.request_stop()
    loop2.request_stop()
    assert await task2 == 0
    assert finished == []


def test_sigterm_in_a_real_process() -> None:
    script = textwrap.dedent(
        """
        import asyncio, sys
        from lakefs_core.service.daemon import DaemonLoop

        async def step():
            print("pass-start", flush=True)
            await asyncio.sleep(1.0)
            print("pass-end", flush=True)

        async def main():
            loop = DaemonLoop(step, name="t", interval=0.01)
            loop.install_signal_handlers()
            sys.exit(await loop.run())

        asyncio.run(main())
        """
    )
    with subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True) as proc:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "pass-start"
        proc.send_signal(signal.SIGTERM)
        t0 = time.monotonic()
        assert proc.wait(timeout=scaled(10)) == 0
        assert proc.stdout.read().split() == ["pass-end"]  # the pass in flight finished, no new one
        assert time.monotonic() - t0 < 5

    with subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True) as proc:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "pass-start"
        proc.send_signal(signal.SIGTERM)
        time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=scaled(10)) == 0
        assert "pass-end" not in proc.stdout.read()  # the second signal cancelled it


def test_freeze_startup_heap_takes_startup_objects_out_of_collections() -> None:
    """After the freeze, a full collection no longer walks what existed at start-up."""
    import gc

    from lakefs_core.service.daemon import freeze_startup_heap

    try:
        frozen = freeze_startup_heap()
        assert frozen > 10_000  # at least the imported modules' objects
        # Frozen objects can still die (a thread an earlier test left winding down drops its
        # frames), so the count may shrink a little after the freeze; it never grows by itself.
        assert frozen - frozen // 100 <= gc.get_freeze_count() <= frozen
        assert len(gc.get_objects(generation=2)) < frozen // 10
    finally:
        gc.unfreeze()
    assert gc.get_freeze_count() == 0


def test_freeze_startup_heap_loads_the_facades_lazy_modules_first() -> None:
    """A daemon loads what the facade imports on first use before it freezes, so no commit, import
    or purge imports a module on its event loop later (a fresh interpreter: this one has them)."""
    probe = (
        "import sys, gc\n"
        "from lakefs_core.repos.graveler import LAZY_MODULES\n"
        "from lakefs_core.service.daemon import freeze_startup_heap\n"
        "before = [m for m in LAZY_MODULES if m in sys.modules]\n"
        "freeze_startup_heap(preload=LAZY_MODULES)\n"
        "after = [m for m in LAZY_MODULES if m in sys.modules]\n"
        "print(before == [] and after == list(LAZY_MODULES) and gc.get_freeze_count() > 0)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=scaled(60), check=True
    )
    assert out.stdout.strip() == "True", out.stderr
