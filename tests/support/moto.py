"""Run ``moto_server`` as a real subprocess on 127.0.0.1, one per named region.

Each :class:`MotoServer` owns one process on a free port. Tests get isolation by resetting the
server's state (``POST /moto-api/reset``) rather than restarting it, which takes a second. Shutdown
is by PID: terminate, wait, then kill.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.timing import scaled

ACCESS_KEY = "testing-access-key"
SECRET_KEY = "testing-secret-key"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _moto_executable() -> list[str]:
    # moto_server with its request handling serialized: AWS's per-item atomicity (moto_serialized.py).
    # -P: this directory (which holds a moto.py) must not shadow the moto package.
    return [sys.executable, "-P", str(Path(__file__).with_name("moto_serialized.py"))]


@dataclass
class MotoServer:
    """One moto_server process standing for one AWS region."""

    region: str
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None
    log_path: Path | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, log_dir: Path, timeout: float = scaled(30.0)) -> None:
        self.log_path = log_dir / f"moto-{self.region}-{self.port}.log"
        env = dict(os.environ)
        env.setdefault("AWS_DEFAULT_REGION", self.region)
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(
                [*_moto_executable(), "-H", "127.0.0.1", "-p", str(self.port)],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                tail = self.log_path.read_text()[-2000:]
                raise RuntimeError(f"moto_server for {self.region} exited: {tail}")
            try:
                with urllib.request.urlopen(f"{self.endpoint}/moto-api/", timeout=scaled(1)):
                    return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"moto_server for {self.region} did not come up on port {self.port}")

    def reset(self) -> None:
        """Drop every bucket, table and object: per-test isolation."""
        req = urllib.request.Request(f"{self.endpoint}/moto-api/reset", method="POST", data=b"")
        with urllib.request.urlopen(req, timeout=scaled(10)) as resp:
            resp.read()

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(timeout=scaled(10))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=scaled(10))

    def client_kwargs(self) -> dict[str, str]:
        """Keyword arguments for a boto3/aioboto3 client talking to this region."""
        return {
            "endpoint_url": self.endpoint,
            "region_name": self.region,
            "aws_access_key_id": ACCESS_KEY,
            "aws_secret_access_key": SECRET_KEY,
        }


class MotoRegions:
    """Lazily started moto servers keyed by region name (shared by the whole test session)."""

    def __init__(self, log_dir: Path) -> None:
        self._log_dir = log_dir
        self._servers: dict[str, MotoServer] = {}

    def get(self, region: str) -> MotoServer:
        server = self._servers.get(region)
        if server is None:
            server = MotoServer(region)
            server.start(self._log_dir)
            self._servers[region] = server
        return server

    def started(self) -> list[MotoServer]:
        return list(self._servers.values())

    def stop_all(self) -> None:
        for server in self._servers.values():
            server.stop()
        self._servers.clear()
