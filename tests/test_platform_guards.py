"""Guards of the shared daemon platform that mutation testing found unwatched.

Each test pins one rule a daemon relies on, at its boundary: the jittered backoff's bounds
(:class:`~lakefs_core.service.daemon.DaemonLoop`), the liveness window and its grace (injected clock),
the request-body size limit of :func:`~lakefs_core.service.http.build_app` (real sockets on 127.0.0.1,
the demo daemon of ``tests/service/http/test_app.py``), and the per-process pools of
:mod:`lakefs_core.offloop`.
"""

from __future__ import annotations

import asyncio
import gzip
import importlib.util
import io
import json
import os
import signal
import threading
from types import SimpleNamespace

import pytest

from lakefs_core import offloop
from lakefs_core.errors import NotFoundError
from lakefs_core.service import daemon as daemon_mod
from lakefs_core.service.daemon import IDLE_BEAT_SECONDS, DaemonLoop
from lakefs_core.service.http import MAX_BODY_BYTES
from tests.mirror.test_hostile_http import _request, exchange
from tests.service.http.test_app import AUTH, RAISE, demo


async def _nothing() -> None:
    return None


# -- the daemon loop: backoff bounds -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("interval", "max_backoff", "errors", "bounds"),
    [
        (1.0, 60.0, 0, None),  # a success: exactly the interval, no jitter
        (1.0, 60.0, 1, (0.5, 2.0)),  # the first failure already doubles the upper bound
        (1.0, 60.0, 3, (0.5, 8.0)),
        (1.0, 60.0, 10, (0.5, 60.0)),  # capped at max_backoff
        (1.0, 60.0, 10_000, (0.5, 60.0)),  # no overflow for a long outage
        (10.0, 2.0, 5, (5.0, 10.0)),  # a cap below the interval never waits less than the cadence allows
    ],
)
def test_backoff_draws_between_half_the_interval_and_the_capped_exponential(
    monkeypatch: pytest.MonkeyPatch,
    interval: float,
    max_backoff: float,
    errors: int,
    bounds: tuple[float, float] | None,
) -> None:
    drawn: list[tuple[float, float]] = []

    def uniform(a: float, b: float) -> float:
        drawn.append((a, b))
        return b

    monkeypatch.setattr(daemon_mod.random, "uniform", uniform)
    loop = DaemonLoop(_nothing, name="t", interval=interval, max_backoff=max_backoff)
    loop.consecutive_errors = errors
    delay = loop.next_delay()
    if bounds is None:
        assert delay == interval and drawn == []
    else:
        assert drawn == [bounds]


# -- the daemon loop: liveness window (injected clock) -------------------------------------------------------


def test_liveness_holds_up_to_exactly_pass_timeout_plus_grace(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [100.0]
    monkeypatch.setattr(daemon_mod, "time", SimpleNamespace(monotonic=lambda: now[0]))
    loop = DaemonLoop(_nothing, name="t", interval=1.0, pass_timeout=8.0, grace=2.0)
    assert loop.last_heartbeat == 100.0 and loop.grace == 2.0
    now[0] = 110.0  # exactly pass_timeout + grace since the last beat: still live
    assert loop.heartbeat_age() == 10.0 and loop.is_live()
    now[0] = 110.25
    assert not loop.is_live()
    loop.beat()
    assert loop.is_live() and loop.heartbeat_age() == 0.0


def test_default_grace_is_the_interval_plus_one_idle_beat_and_never_below_two_beats() -> None:
    assert DaemonLoop(_nothing, name="t", interval=3.0).grace == 3.0 + IDLE_BEAT_SECONDS
    assert DaemonLoop(_nothing, name="t", interval=0.1).grace == 2 * IDLE_BEAT_SECONDS
    assert DaemonLoop(_nothing, name="t", interval=3.0, grace=0.2).grace == 2 * IDLE_BEAT_SECONDS
    assert DaemonLoop(_nothing, name="t", interval=3.0, grace=7.0).grace == 7.0


# -- the daemon loop: stopping and cancellation --------------------------------------------------------------


async def test_a_stop_while_idle_ends_the_loop_without_another_pass() -> None:
    loop = DaemonLoop(_nothing, name="t", interval=30.0)
    task = asyncio.create_task(loop.run())
    for _ in range(100):
        if loop.passes:
            break
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.05)  # now idling between passes
    loop.request_stop()
    assert await asyncio.wait_for(task, 5) == 0
    assert loop.passes == 1


async def test_cancelling_the_runner_without_a_stop_request_propagates() -> None:
    """Only a second stop request may swallow the cancellation of a pass; the task's owner cancelling
    ``run()`` (e.g. the service shutting down its task group) must end it with CancelledError."""
    started = asyncio.Event()

    async def slow() -> None:
        started.set()
        await asyncio.sleep(30)

    loop = DaemonLoop(slow, name="t", interval=0.01)
    task = asyncio.create_task(loop.run())
    await asyncio.wait_for(started.wait(), 5)
    task.cancel()
    try:
        await asyncio.wait({task}, timeout=3)
        assert task.done(), "the cancellation was swallowed: run() is still going"
        assert task.cancelled()
    finally:
        loop.request_stop()
        loop.request_stop()  # stop a loop that swallowed the cancellation, so no task leaks
        await asyncio.wait({task}, timeout=3)


async def test_a_pass_beats_when_it_ends(monkeypatch: pytest.MonkeyPatch) -> None:
    """The heartbeat is fresh right after a long pass (injected clock), not as old as the pass."""
    now = [100.0]
    monkeypatch.setattr(daemon_mod, "time", SimpleNamespace(monotonic=lambda: now[0]))

    async def long_pass() -> None:
        now[0] += 50.0

    loop = DaemonLoop(long_pass, name="t", interval=1.0, pass_timeout=60.0)
    assert await loop.run(once=True) == 0
    assert loop.last_heartbeat == 150.0 and loop.heartbeat_age() == 0.0


# -- HTTP: the request body size limit -----------------------------------------------------------------------


def _item_body(size: int) -> bytes:
    """A valid ``ItemBody`` JSON document of exactly ``size`` bytes."""
    empty = json.dumps({"size": 1, "note": ""}).encode()
    body = json.dumps({"size": 1, "note": "x" * (size - len(empty))}).encode()
    assert len(body) == size
    return body


async def test_a_body_of_exactly_the_limit_is_read_one_byte_more_is_413() -> None:
    headers = {**AUTH, "Content-Type": "application/json"}
    async with demo() as d:
        url = f"{d.url}/items/abcd"
        async with d.http.put(url, data=io.BytesIO(_item_body(MAX_BODY_BYTES)), headers=headers) as r:
            assert r.status == 200 and (await r.json())["size"] == 1
        async with d.http.put(url, data=io.BytesIO(_item_body(MAX_BODY_BYTES + 1)), headers=headers) as r:
            assert (r.status, await r.json()) == (413, {"message": "request body too large"})


async def test_a_compressed_body_is_limited_by_its_decoded_size() -> None:
    """A small gzip body that inflates past the limit (a decompression bomb) is refused too."""
    packed = gzip.compress(_item_body(2 * MAX_BODY_BYTES))
    assert len(packed) < MAX_BODY_BYTES // 100
    headers = {**AUTH, "Content-Type": "application/json", "Content-Encoding": "gzip"}
    async with demo() as d, d.http.put(f"{d.url}/items/abcd", data=packed, headers=headers) as r:
        assert (r.status, await r.json()) == (413, {"message": "request body too large"})


# -- offloop: which pool runs what ---------------------------------------------------------------------------


async def test_run_cpu_runs_on_a_named_thread_of_this_process() -> None:
    def where() -> tuple[int, str]:
        return os.getpid(), threading.current_thread().name

    pid, thread = await offloop.run_cpu(where)
    assert pid == os.getpid() and thread.startswith("lakefs-cpu")
    assert offloop.cpu_executor()._max_workers == offloop.CPU_WORKERS == 2


@pytest.mark.parametrize(("cpus", "workers"), [(1, 1), (2, 1), (3, 2), (5, 4), (64, 4)])
def test_process_workers_leave_one_core_to_the_loop(
    monkeypatch: pytest.MonkeyPatch, cpus: int, workers: int
) -> None:
    """Evaluated in a private copy of the module, loaded with a chosen CPU affinity."""
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: set(range(cpus)), raising=False)
    spec = importlib.util.spec_from_file_location("offloop_copy", offloop.__file__)
    assert spec is not None and spec.loader is not None
    copy = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(copy)
    assert workers == copy.PROCESS_WORKERS


async def test_worker_processes_ignore_ctrl_c() -> None:
    """Ctrl-C reaches the whole process group: a worker must keep computing, not die mid-call."""
    try:
        result = await offloop.run_process(signal.raise_signal, signal.SIGINT)
    except KeyboardInterrupt:
        pytest.fail("SIGINT interrupted the worker process")
    assert result is None


# -- HTTP: an undecodable body closes the connection ---------------------------------------------------------


async def test_an_undecodable_body_is_400_and_closes_the_connection() -> None:
    headers = {**AUTH, "Content-Type": "application/json", "Content-Encoding": "gzip"}
    async with (
        demo() as d,
        d.http.put(f"{d.url}/items/abcd", data=b"not gzip at all", headers=headers) as r,
    ):
        assert r.status == 400
        assert (await r.json())["field"] == "body"
        assert r.headers.get("Connection", "").lower() == "close"


# -- HTTP: the authentication scheme -------------------------------------------------------------------------


async def test_only_the_basic_scheme_carries_credentials() -> None:
    token = AUTH["Authorization"].removeprefix("Basic ")
    async with demo() as d:
        d.app[RAISE][0] = NotFoundError("nothing here")
        for scheme in ("Basic", "basic", "BASIC"):  # the scheme is case-insensitive (RFC 7235)
            status, _, _ = await d.get("/boom", headers={"Authorization": f"{scheme} {token}"})
            assert status == 404, scheme
        for scheme in ("Bearer", "Digest", "Basicx", "Token"):  # the right secret, the wrong scheme
            status, body, headers = await d.get("/boom", headers={"Authorization": f"{scheme} {token}"})
            assert status == 401 and "WWW-Authenticate" in headers, (scheme, body)


# -- HTTP: metric labels stay bounded ------------------------------------------------------------------------


async def test_an_unknown_method_is_405_before_auth_and_counted_as_other() -> None:
    """Request methods are client-chosen: one outside the usual set (WebDAV's PROPFIND,
    which the HTTP parser knows) must not mint a new metric series."""
    async with demo() as d:
        async with d.http.request("PROPFIND", f"{d.url}/boom") as r:
            assert r.status == 405 and "GET" in r.headers["Allow"]
            assert await r.json() == {"message": "method not allowed"}
        _, text, _ = await d.get("/metrics")
    assert 'api_requests_total{method="OTHER",route="unmatched",status="405"} 1.0' in text
    assert "PROPFIND" not in text


# -- HTTP: what the runner answers to requests its parser rejects --------------------------------------------

_LONG = "Q" * 9000  # over aiohttp's 8190-byte line limit


@pytest.mark.parametrize(
    ("raw", "message", "field"),
    [
        (
            _request("GET", [f"X-Big: {_LONG}"], target="/boom"),
            "the request line or a header line is too long",
            None,
        ),
        (_request("GET", [], target=f"/{_LONG}"), "the request line or a header line is too long", None),
        (_request("GET", [f"X-H{i}: v" for i in range(200)], target="/boom"), "too many headers", None),
    ],
    ids=["header-line", "request-target", "header-count"],
)
async def test_parser_rejections_get_their_fixed_message(raw: bytes, message: str, field: str | None) -> None:
    async with demo() as d:
        port = int(d.url.rsplit(":", 1)[1])
        status, _, body = await exchange(port, [raw])  # reads until the server closes
    assert status == 400
    assert json.loads(body) == (
        {"message": message} if field is None else {"message": message, "field": field}
    )
