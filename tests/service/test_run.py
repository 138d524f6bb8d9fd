"""run_daemon: the one way every daemon's ``run`` command runs its service (real processes: it
installs signal handlers, freezes the heap and talks to systemd's notify socket)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest

from tests.support.timing import scaled

ROOT = Path(__file__).resolve().parents[2]

TOY = textwrap.dedent(
    """
    import asyncio, sys
    from lakefs_core.service.config import DaemonConfig
    from lakefs_core.service.run import run_daemon

    class Toy:
        loop = None
        errors = []

        def __init__(self, fail):
            self.fail = fail

        async def step(self):
            print("step", flush=True)
            if self.fail:
                raise RuntimeError("the pass failed")

        async def final(self):
            print("final step", flush=True)

        def record_errors(self, consecutive):
            print(f"errors {consecutive}", flush=True)

        async def close(self):
            print("closed", flush=True)

    mode = sys.argv[1]
    config = DaemonConfig(
        access_keys=[{"access_key_id": "a", "secret_access_key": "s"}], poll_interval_seconds=0.05
    )

    async def open_service():
        return Toy(fail=mode == "fail")

    status = run_daemon(
        open_service, config, name="toy", once=mode != "forever", log_format="json",
        once_step=(lambda s: s.final) if mode == "final" else None,
    )
    print(f"status {status}", flush=True)
    sys.exit(status)
    """
)


def _run(mode: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", TOY, mode], cwd=ROOT, capture_output=True, text=True, timeout=scaled(120),
        env={**os.environ, **(env or {})}, check=False,
    )  # fmt: skip


def test_once_runs_one_pass_closes_and_exits_with_its_outcome() -> None:
    ok = _run("ok")
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.split("\n")[:4] == ["step", "errors 0", "closed", "status 0"]
    failed = _run("fail")
    assert failed.returncode == 1
    assert "errors 1" in failed.stdout and "closed" in failed.stdout
    assert '"level": "ERROR"' in failed.stderr  # --log-format json applied before the loop ran


def test_once_step_replaces_the_pass_of_a_once_run() -> None:
    final = _run("final")
    assert final.returncode == 0, final.stderr
    assert "final step" in final.stdout and "\nstep\n" not in "\n" + final.stdout


def test_a_signal_stops_the_daemon_and_systemd_hears_ready_and_stopping() -> None:
    name = f"lakefs-test-run-{uuid.uuid4().hex}"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind("\0" + name)
    sock.settimeout(scaled(60))
    try:
        proc = subprocess.Popen(
            [sys.executable, "-c", TOY, "forever"], cwd=ROOT, stdout=subprocess.PIPE, text=True,
            env={**os.environ, "NOTIFY_SOCKET": "@" + name},
        )  # fmt: skip
        try:
            assert sock.recv(256) == b"READY=1"
            proc.send_signal(signal.SIGTERM)
            out, _ = proc.communicate(timeout=scaled(60))
        finally:
            if proc.poll() is None:
                proc.kill()
        assert proc.returncode == 0
        assert out.rstrip().split("\n")[-2:] == ["closed", "status 0"]
        deadline = time.monotonic() + 10
        got = b""
        while got != b"STOPPING=1" and time.monotonic() < deadline:
            got = sock.recv(256)
        assert got == b"STOPPING=1"
    finally:
        sock.close()


@pytest.mark.parametrize("cli", ["lakefs_gc.cli.daemon", "lakefs_mirror.commands"])
def test_both_daemons_run_through_run_daemon(cli: str) -> None:
    source = (ROOT / (cli.replace(".", "/") + ".py")).read_text()
    assert "run_daemon(" in source
    duplicated = ("DaemonLoop(", "freeze_startup_heap(", "run_notified(", "uvloop", "configure_logging(")
    assert not [d for d in duplicated if d in source]
