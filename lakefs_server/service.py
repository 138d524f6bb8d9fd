"""Assembling lakefs-server from its configuration, serving it, and tearing it down.

:class:`ServerService` opens the core (:func:`lakefs_core.wiring.open_core`), the auth store (lakeFS's
KV records, decrypting secrets with ``auth.encrypt.secret_key``, cached ``auth.cache_seconds``), the
metrics, and two listeners:

- the S3 listener (``gateway.listen``, HTTPS with ``gateway.tls``): :func:`lakefs_server.router.create_s3_app`
  (S3, and lakeFS's REST API under ``/api/v1``). With ``reuse_port`` the socket is opened with
  ``SO_REUSEPORT``, so several processes on one host share the port (the kernel spreads connections);
- the admin listener (``listen``): ``/_health``, ``/_ready`` (the KV store answers), ``/metrics``,
  ``/openapi.json`` (:func:`lakefs_core.service.http.build_app`).

Its :meth:`step` is one sweep of expired multipart uploads; :mod:`lakefs_server.cli` runs it in the
shared daemon loop (:func:`lakefs_core.service.run.run_daemon`).
"""

from __future__ import annotations

import logging
import os
import ssl
from dataclasses import dataclass, field

from aiohttp import web

from lakefs_core import __version__
from lakefs_core.auth.crypt import SecretStore
from lakefs_core.auth.store import AuthStore
from lakefs_core.errors import StartupError
from lakefs_core.service.daemon import DaemonLoop
from lakefs_core.service.http import ApiRunner, ReadinessProbe, ServiceSpec, build_app, serve_api
from lakefs_core.wiring import Core, open_core
from lakefs_server.config import ServerConfig, config_startup_problems
from lakefs_server.context import ServerContext
from lakefs_server.metrics import ServerMetrics
from lakefs_server.router import create_s3_app

__all__ = ["ServerService"]

log = logging.getLogger(__name__)


@dataclass
class ServerService:
    config: ServerConfig
    ctx: ServerContext
    runners: list[web.AppRunner] = field(default_factory=list)
    s3_port: int | None = None
    admin_port: int | None = None
    loop: DaemonLoop | None = None  # set by the runner; ``/_health`` reports its liveness
    _closed: bool = field(default=False, repr=False)

    @classmethod
    async def open(cls, config: ServerConfig, *, reuse_port: bool = False) -> ServerService:
        _preflight(config)
        core = await open_core(config.core, kv_key="core.kv_url", s3_key="core.s3")
        try:
            secret = config.auth.encrypt.secret_key
            secrets = SecretStore(secret.get_secret_value()) if secret is not None else None
            auth = AuthStore(core.kv, secrets, cache_seconds=config.auth.cache_seconds)
            ctx = ServerContext(config, core, auth, ServerMetrics(config.gateway.region))
        except BaseException:
            await core.aclose()
            raise
        service = cls(config, ctx)
        try:
            await service._serve(reuse_port)
        except BaseException:
            await service.close()
            raise
        return service

    @property
    def core(self) -> Core:
        return self.ctx.core

    def record_errors(self, consecutive: int) -> None:
        self.ctx.metrics.consecutive_errors.set(consecutive)

    def is_live(self) -> bool:
        return self.loop is None or self.loop.is_live()

    async def step(self) -> int:
        """One sweep of expired multipart uploads; the number aborted."""
        from lakefs_server.gateway.multipart import sweep_expired

        aborted = await sweep_expired(self.ctx)
        if aborted:
            self.ctx.metrics.aborted.inc(aborted)
            log.info("aborted %d expired multipart upload(s)", aborted)
        return aborted

    async def _kv_probe(self) -> tuple[bool, str]:
        await self.ctx.auth.get_metadata("setup_timestamp")
        return True, "the KV store answers"

    async def _serve(self, reuse_port: bool) -> None:
        gateway = self.config.gateway
        # auto_decompress off: S3 bodies are the object's bytes (Content-Encoding: aws-chunked or gzip
        # describes them, it is never undone by the server)
        runner = ApiRunner(create_s3_app(self.ctx), access_log=None, auto_decompress=False)
        await runner.setup()
        self.runners.append(runner)
        site = web.TCPSite(
            runner,
            gateway.listen_host,
            gateway.listen_port,
            ssl_context=_ssl_context(self.config),
            reuse_port=reuse_port or None,
        )
        try:
            await site.start()
        except OSError as e:
            reason = os.strerror(e.errno) if e.errno else str(e)
            raise StartupError(f"cannot listen on {gateway.listen}: {reason}", key="gateway.listen") from e
        sockets = getattr(site._server, "sockets", None) or []
        self.s3_port = sockets[0].getsockname()[1] if sockets else gateway.listen_port
        spec = ServiceSpec(
            daemon="server",
            region=gateway.region,
            version=__version__,
            title="lakefs-server admin API",
            description="Health, readiness and metrics of lakefs-server (S3 is served on gateway.listen).",
            routes=[],
            access_keys=self.config.access_keys,
            registry=self.ctx.metrics.registry,
            is_live=self.is_live,
            probes=[ReadinessProbe("kv", self._kv_probe)],
        )
        admin, self.admin_port = await serve_api(
            build_app(spec), self.config.listen_host, self.config.listen_port
        )
        self.runners.append(admin)
        scheme = "https" if gateway.tls.enabled else "http"
        log.info(
            "S3 gateway listening on %s://%s:%s, admin API on %s:%s",
            scheme, gateway.listen_host, self.s3_port, self.config.listen_host, self.admin_port,
        )  # fmt: skip

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            for runner in self.runners:
                await runner.cleanup()
        finally:
            await self.ctx.core.aclose()


def _ssl_context(config: ServerConfig) -> ssl.SSLContext | None:
    tls = config.gateway.tls
    if tls.cert_file is None or tls.key_file is None:
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        context.load_cert_chain(tls.cert_file, tls.key_file)
    except (OSError, ssl.SSLError) as e:
        raise StartupError(f"cannot load the certificate or key: {e}", key="gateway.tls") from e
    return context


def _preflight(config: ServerConfig) -> None:
    problems = config_startup_problems(config)
    if problems:
        (key, first), rest = problems[0], problems[1:]
        raise StartupError(first + "".join(f"; {k}: {m}" for k, m in rest), key=key)
