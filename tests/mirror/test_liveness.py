"""Liveness: a hung pass turns ``/_health`` to 503 and stops the systemd watchdog (real datagrams).

The daemon is the real :class:`MirrorService` (SQLite KV and mirrors database, real HTTP port);
only its step is wrapped so that it hangs forever after two real passes. systemd is played by a
real ``AF_UNIX`` datagram socket (an abstract one, ``@name``) given as ``NOTIFY_SOCKET``.
"""

from __future__ import annotations

import asyncio
import os
import socket
import time
import uuid
from pathlib import Path

import aiohttp

from lakefs_core.service.daemon import DaemonLoop
from lakefs_core.service.systemd import Notifier, run_notified
from lakefs_mirror.config import load_mirror_config
from lakefs_mirror.service import MirrorService


def write_config(tmp: Path) -> Path:
    path = tmp / "mirror.yaml"
    path.write_text(
        f"""
region: region-a
regions:
  region-a:
    kv_url: sqlite:///{tmp}/kv.sqlite3
    local_roots: [{tmp}/objects]
mirrors_db_url: sqlite:///{tmp}/mirrors.sqlite3
listen: 127.0.0.1:0
access_keys:
  - access_key_id: AKIATESTLIVENESS
    secret_access_key: test-secret
poll_interval_seconds: 1
state_dir: {tmp}/state
"""
    )
    return path


def drain(sock: socket.socket) -> list[str]:
    out: list[str] = []
    while True:
        try:
            out.append(sock.recv(4096).decode())
        except BlockingIOError:
            return out


async def health(http: aiohttp.ClientSession, port: int) -> tuple[int, dict[str, object]]:
    async with http.get(f"http://127.0.0.1:{port}/_health") as r:
        return r.status, await r.json()


def test_notifier_is_a_no_op_without_notify_socket() -> None:
    quiet = Notifier.from_env({"WATCHDOG_USEC": "1000000"})
    assert not quiet.enabled and not quiet.notify("READY=1")
    # WATCHDOG_PID naming another process: the watchdog is not ours to feed
    other = Notifier.from_env({"NOTIFY_SOCKET": "@x", "WATCHDOG_USEC": "1000000", "WATCHDOG_PID": "1"})
    assert other.address == "\0x" and other.watchdog_interval is None
    env = {"NOTIFY_SOCKET": "/run/n", "WATCHDOG_USEC": "1000000", "WATCHDOG_PID": str(os.getpid())}
    mine = Notifier.from_env(env)
    assert mine.address == "/run/n" and mine.watchdog_interval == 0.5


async def test_hung_step_turns_health_503_and_stops_the_watchdog(tmp_path: Path) -> None:
    name = f"lakefs-test-notify-{uuid.uuid4().hex}"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind("\0" + name)
    sock.setblocking(False)
    config = load_mirror_config(write_config(tmp_path), {})
    service = await MirrorService.open(config)
    passes = 0
    hang = asyncio.Event()  # never set: the third pass never returns

    async def step() -> object:
        nonlocal passes
        passes += 1
        if passes > 2:
            await hang.wait()
        return await service.step()

    loop = DaemonLoop(step, name="t", interval=0.05, pass_timeout=0.6, grace=0.2)
    service.loop = loop
    notifier = Notifier.from_env({"NOTIFY_SOCKET": "@" + name, "WATCHDOG_USEC": "100000"})
    task = asyncio.create_task(run_notified(loop, notifier))
    try:
        assert service.bound_port is not None
        async with aiohttp.ClientSession() as http:
            status, body = await health(http, service.bound_port)
            assert (status, body["status"]) == (200, "ok")
            deadline = time.monotonic() + 10
            while status == 200:
                assert time.monotonic() < deadline, "/_health never noticed the hung pass"
                await asyncio.sleep(0.05)
                status, body = await health(http, service.bound_port)
            assert status == 503 and body["status"] == "unavailable" and "hung" in str(body["message"])
            assert passes == 3 and not loop.is_live()
        before = drain(sock)
        assert before[0] == "READY=1" and before.count("WATCHDOG=1") >= 2
        await asyncio.sleep(0.5)  # five watchdog intervals: a live loop would have sent ~5
        assert "WATCHDOG=1" not in drain(sock)
        loop.request_stop()
        loop.request_stop()  # the second request cancels the hung pass
        assert await asyncio.wait_for(task, 5) == 0
        assert drain(sock) == ["STOPPING=1"]
    finally:
        task.cancel()
        await service.close()
        sock.close()


async def test_idle_loop_stays_live_past_the_pass_timeout() -> None:
    async def quick() -> None:
        return None

    # Idle waits far longer than pass_timeout + grace: the idle heartbeat must keep it live.
    loop = DaemonLoop(quick, name="t", interval=3.0, pass_timeout=0.05, grace=0.05)
    task = asyncio.create_task(loop.run())
    try:
        await asyncio.sleep(1.5)
        assert loop.passes == 1 and loop.is_live()
    finally:
        loop.request_stop()
        assert await asyncio.wait_for(task, 5) == 0
