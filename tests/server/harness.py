"""A real ``lakefs-server`` process for the gateway's tests, on SQLite + local or PostgreSQL + S3 (moto).

:func:`prepare` seeds the KV store in this process with the library (lakeFS's auth setup: an admin,
a Developer and a Viewer, each with keys; one repository ``repo`` with branch ``main``), writes the
server's YAML configuration, and :class:`Server` runs ``lakefs-server run --config`` as a child
process until ``/_ready`` answers. Ports are picked free at start.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from lakefs_core.auth.crypt import SecretStore
from lakefs_core.auth.setup import setup
from lakefs_core.auth.store import AuthStore
from lakefs_core.settings import CoreSettings
from lakefs_core.wiring import open_core
from tests.support.timing import scaled

ENCRYPT_SECRET = "gateway-tests-encryption-secret-0123"
BIN = Path(sys.executable).parent
REPO = "repo"  # with branches main and dev
REPO2 = "repo2"  # a second repository (cross-repository copies)


@dataclass(frozen=True)
class Keys:
    access_key_id: str
    secret_access_key: str


ADMIN = Keys("AKIAIOSFODNN7ADMIN00", "admin/secret/0123456789abcdefghijklmnopqrstu"[:40])
DEVELOPER = Keys("AKIAIOSFODNN7DEVEL00", "developer+secret0123456789abcdefghijklmn"[:40])
VIEWER = Keys("AKIAIOSFODNN7VIEWER0", "viewer0secret0123456789abcdefghijklmnopq"[:40])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _seed(core_settings: dict[str, Any], namespace: str) -> None:
    core = await open_core(CoreSettings.model_validate(core_settings))
    try:
        auth = AuthStore(core.kv, SecretStore(ENCRYPT_SECRET))
        await setup(
            auth, "admin", access_key_id=ADMIN.access_key_id, secret_access_key=ADMIN.secret_access_key
        )
        for user, group, keys in (("dev", "Developers", DEVELOPER), ("viewer", "Viewers", VIEWER)):
            await auth.create_user(user)
            await auth.add_user_to_group(user, group)
            await auth.create_credentials(user, keys.access_key_id, keys.secret_access_key)
        await core.graveler.create_repository(REPO, namespace)
        await core.graveler.create_branch(REPO, "dev", "main")
        await core.graveler.create_repository(REPO2, namespace + "2")
    finally:
        await core.aclose()


def self_signed(directory: Path) -> tuple[Path, Path, Path]:
    """A test CA and a server certificate it signed for 127.0.0.1 and localhost (rustls refuses a CA
    certificate used as the server's): ``(server cert, server key, CA cert)`` PEM files in ``directory``."""
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "lakefs-server test CA")])
    ca = (
        x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1)).not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
                key_encipherment=False, data_encipherment=False, key_agreement=False,
                encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )  # fmt: skip
    key = ec.generate_private_key(ec.SECP256R1())
    names = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")]))
        .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1)).not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )  # fmt: skip
    cert_file, key_file, ca_file = directory / "cert.pem", directory / "key.pem", directory / "ca.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    ca_file.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return cert_file, key_file, ca_file


@dataclass
class Server:
    """A running ``lakefs-server``: ``endpoint`` (S3), ``admin`` (health, metrics), ``config`` (path)."""

    directory: Path
    core: dict[str, Any]
    tls: bool = False
    domain: str | None = None
    workers: int = 1
    extra: dict[str, Any] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)  # LAKEFS_* variables for the server (faults)
    process: subprocess.Popen[bytes] | None = None
    endpoint: str = ""
    admin: str = ""
    ca_bundle: str | None = None
    config: Path = Path()

    def start(self) -> Server:
        s3_port, admin_port = free_port(), free_port()
        gateway: dict[str, Any] = {"listen": f"127.0.0.1:{s3_port}", "region": "us-east-1"}
        if self.domain:
            gateway["domain_names"] = [self.domain]
        if self.tls:
            cert, key, ca = self_signed(self.directory)
            gateway["tls"] = {"cert_file": str(cert), "key_file": str(key)}
            self.ca_bundle = str(ca)
        config = {
            "core": self.core,
            "auth": {"encrypt": {"secret_key": ENCRYPT_SECRET}, "cache_seconds": 0},
            "gateway": gateway,
            "listen": f"127.0.0.1:{admin_port}",
            **self.extra,
        }
        self.config = self.directory / "server.yaml"
        self.config.write_text(yaml.safe_dump(config))
        scheme = "https" if self.tls else "http"
        self.endpoint = f"{scheme}://127.0.0.1:{s3_port}"
        self.admin = f"http://127.0.0.1:{admin_port}"
        env = {k: v for k, v in os.environ.items() if not k.startswith("LAKEFS_")} | self.env
        self.log = (self.directory / "server.log").open("wb")
        self.process = subprocess.Popen(
            [str(BIN / "lakefs-server"), "run", "--config", str(self.config), "--workers", str(self.workers)],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
        deadline = time.monotonic() + scaled(60)
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"lakefs-server exited {self.process.returncode}: {self.output()}")
            with (
                contextlib.suppress(OSError),
                urllib.request.urlopen(self.admin + "/_ready", timeout=scaled(2)) as answer,
            ):
                if answer.status == 200:
                    return self
            time.sleep(0.1)
        raise RuntimeError(f"lakefs-server not ready: {self.output()}")

    def lakefs_core(self, *args: str) -> Any:
        """Run ``lakefs-core --json ARGS`` on the server's core; its JSON answer."""
        import json

        config = self.directory / "core.yaml"
        if not config.exists():
            config.write_text(yaml.safe_dump(self.core))
        env = {k: v for k, v in os.environ.items() if not k.startswith("LAKEFS_")}
        done = subprocess.run(
            [str(BIN / "lakefs-core"), "--config", str(config), "--json", *args],
            capture_output=True, text=True, env=env, timeout=scaled(120), check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    def commit_and_tag(self, tag: str) -> str:
        """Commit ``main`` of ``repo`` and tag the commit, through the library in this process (the
        client tests do it with the ``lakefs-core`` command); the commit id."""

        async def run() -> str:
            core = await open_core(CoreSettings.model_validate(self.core))
            try:
                commit = await core.graveler.commit(REPO, "main", committer="tests", message="via s3")
                await core.graveler.create_tag(REPO, tag, commit.id)
                return commit.id
            finally:
                await core.aclose()

        return asyncio.run(run())

    def tag(self, tag: str, commit_id: str) -> None:
        """Tag ``commit_id`` of ``repo`` through the library in this process."""

        async def run() -> None:
            core = await open_core(CoreSettings.model_validate(self.core))
            try:
                await core.graveler.create_tag(REPO, tag, commit_id)
            finally:
                await core.aclose()

        asyncio.run(run())

    def output(self) -> str:
        return (self.directory / "server.log").read_text(errors="replace")[-5000:]

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        self.log.close()


def local_core(directory: Path) -> tuple[dict[str, Any], str]:
    """Core settings on SQLite with a local namespace root under ``directory``."""
    (directory / "data").mkdir(parents=True, exist_ok=True)
    return {"kv_url": f"sqlite:///{directory / 'kv.sqlite3'}"}, f"local://{directory / 'data' / 'repo'}"


@contextlib.asynccontextmanager
async def swept_context(server: Server, expiry: float) -> AsyncIterator[Any]:
    """A :class:`~lakefs_server.context.ServerContext` on ``server``'s core and configuration, with
    ``gateway.multipart_expiry_seconds`` set to ``expiry`` (for calling the daemon's sweep in-process)."""
    from lakefs_server.config import load_server_config
    from lakefs_server.context import ServerContext
    from lakefs_server.metrics import ServerMetrics

    loaded = load_server_config(server.config)
    gateway = loaded.gateway.model_copy(update={"multipart_expiry_seconds": expiry})
    config = loaded.model_copy(update={"gateway": gateway})
    core = await open_core(CoreSettings.model_validate(server.core))
    try:
        yield ServerContext(config, core, AuthStore(core.kv), ServerMetrics("test"))
    finally:
        await core.aclose()


@contextlib.contextmanager
def running(directory: Path, core: dict[str, Any], namespace: str, **kw: Any) -> Iterator[Server]:
    asyncio.run(_seed(core, namespace))
    server = Server(directory, core, **kw).start()
    try:
        yield server
    finally:
        server.stop()
