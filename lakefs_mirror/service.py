"""Assembling one region's mirroring daemon from its configuration, and tearing it down.

:class:`MirrorService` opens every region's KV store and object stores (this region's daemon reads
source repositories in other regions and writes the mirror repositories of its own), the shared
mirrors database, the persisted presence cache, the metrics, the engine and the HTTP API. Its
:meth:`step` is one engine pass; :mod:`lakefs_mirror.commands` runs it in the shared daemon loop.
"""

from __future__ import annotations

import logging
import os
import socket
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from aiohttp import web

from lakefs_core.errors import NotFoundError, StartupError
from lakefs_core.fileperm import make_private_dir
from lakefs_core.repos.graveler import Graveler
from lakefs_core.service.daemon import DaemonLoop
from lakefs_core.service.http import serve_api
from lakefs_core.wiring import Core, build_table_cache, open_core
from lakefs_mirror.admission import store_probe
from lakefs_mirror.api import create_app
from lakefs_mirror.config import MirrorConfig, config_startup_problems
from lakefs_mirror.db import MirrorsDB
from lakefs_mirror.engine import EngineSettings, MirrorEngine, PassReport
from lakefs_mirror.metrics import MirrorMetrics
from lakefs_mirror.presence import PresenceCache

log = logging.getLogger(__name__)


@dataclass
class MirrorService:
    config: MirrorConfig
    gravelers: dict[str, Graveler]
    cores: list[Core]
    db: MirrorsDB
    presence: PresenceCache
    metrics: MirrorMetrics
    engine: MirrorEngine
    runner: web.AppRunner | None = None
    bound_port: int | None = None
    loop: DaemonLoop | None = None  # set by the runner; ``/_health`` reports its liveness
    _closed: bool = field(default=False, repr=False)

    @classmethod
    async def open(cls, config: MirrorConfig, *, serve_api: bool = True) -> MirrorService:
        _preflight(config)
        cores = await _open_cores(config)
        gravelers = {name: core.graveler for name, core in zip(config.regions, cores, strict=True)}
        db = await MirrorsDB.open(config.mirrors_db_url.get_secret_value())
        state = config.state_dir
        presence = await PresenceCache.open(
            Path(state) / f"presence-{config.region}.sqlite3" if state is not None else None,
            max_objects=max(config.presence_cache_entries, 1),
            negative_cooldown=config.negative_cooldown_seconds,
        )
        metrics = MirrorMetrics(region=config.region)
        engine = MirrorEngine(
            region=config.region,
            gravelers=gravelers,
            db=db,
            presence=presence,
            metrics=metrics,
            settings=EngineSettings(
                lease_ttl_seconds=config.lease_ttl_seconds,
                active_copy_grace_seconds=config.active_copy_grace_seconds,
                validation_workers=config.workers,
                error_cooldown_seconds=config.error_cooldown_seconds,
                error_cooldown_max_seconds=config.error_cooldown_max_seconds,
            ),
            # Unique per process: two daemons of one region on one host must never share a holder
            # (``id()`` alone repeats across processes when address randomisation is off).
            holder=f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:12]}",
        )
        service = cls(config, gravelers, cores, db, presence, metrics, engine)
        if serve_api:
            try:
                await service._serve()
            except BaseException:
                await service.close()
                raise
        return service

    def record_errors(self, consecutive: int) -> None:
        """The daemon loop's count of passes failed in a row (``consecutive_errors``)."""
        self.metrics.consecutive_errors.set(consecutive)

    def is_live(self) -> bool:
        """The daemon loop's liveness (true before a loop is attached: start-up is not a hang)."""
        return self.loop is None or self.loop.is_live()

    async def _source_repo_exists(self, repo_id: str) -> bool:
        try:
            await self.gravelers[self.config.region].repository(repo_id)
        except NotFoundError:
            return False
        return True

    async def _serve(self) -> None:
        app = create_app(
            self.config,
            self.db,
            source_repo_exists=self._source_repo_exists,
            metrics_registry=self.metrics.registry,
            gravelers=self.gravelers,
            is_live=self.is_live,
            # POST probes the destination namespace through that region's block store, configured here
            namespace_probe=store_probe(self.gravelers),
            lease_holder=lambda: self.engine.holder,
        )
        # ApiRunner: requests aiohttp's parser rejects get JSON errors and secret-free log lines.
        self.runner, self.bound_port = await serve_api(app, self.config.listen_host, self.config.listen_port)
        log.info("API listening on %s:%s", self.config.listen_host, self.bound_port)

    async def step(self) -> PassReport:
        report = await self.engine.step()
        for error in report.errors:
            log.warning("%s", error)
        return report

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self.runner is not None:
            await self.runner.cleanup()
        try:
            await self.engine.lease.release()  # hand over to a standby at once
        finally:
            await self.presence.close()
            await self.db.close()
            for core in self.cores:
                await core.aclose()


async def _open_cores(config: MirrorConfig) -> list[Core]:
    """Every region's core (this daemon reads sources elsewhere and writes its own region's mirrors),
    sharing one table cache (ids name the same bytes wherever they live); all closed on a failure."""
    first = config.core_settings()
    table_cache = build_table_cache(first)
    cores: list[Core] = []
    try:
        for name in config.regions:
            settings = first if name == config.region else config.core_settings(name)
            cores.append(
                await open_core(
                    settings,
                    table_cache=table_cache,
                    kv_key=f"regions.{name}.kv_url",
                    s3_key=f"regions.{name}.s3",
                )
            )
    except BaseException:
        for core in cores:
            await core.aclose()
        raise
    return cores


def _preflight(config: MirrorConfig) -> None:
    """Start-up checks that must fail with one line naming the key(s), before anything is opened:
    every missing SQLite directory and an uncreatable ``state_dir`` at once (StartupError, exit 16)."""
    problems = config_startup_problems(config)
    if problems:
        (key, first), rest = problems[0], problems[1:]
        raise StartupError(first + "".join(f"; {k}: {m}" for k, m in rest), key=key)
    if config.state_dir is not None:
        try:
            make_private_dir(config.state_dir)  # 0700: the presence cache names every mirrored object
        except OSError as e:
            raise StartupError(f"cannot create {config.state_dir}: {e.strerror or e}", key="state_dir") from e
