"""One way every daemon runs: :func:`run_daemon`, called by each daemon's ``run`` command.

A daemon's service object (:class:`DaemonService`) opens itself from its configuration and does one
pass per :meth:`~DaemonService.step`. :func:`run_daemon` does everything around it, the same for
every daemon:

1. logging (:func:`lakefs_core.service.logfmt.configure_logging`: the configuration's ``log_level``,
   the command line's ``--log-format``);
2. an event loop (uvloop when installed, else asyncio's);
3. the service opened (``open_service()``), a :class:`~lakefs_core.service.daemon.DaemonLoop` around
   its pass (``once_step`` for ``--once`` when the daemon has one: GC waits for the runs its pass
   started), the loop handed to the service (``service.loop``: its ``/_health`` reads liveness);
4. SIGTERM/SIGINT handlers (a first signal stops after the pass, a second cancels it);
5. the start-up heap frozen, after importing ``preload`` (modules loaded on first use) and the core's
   lazy modules, so nothing is imported on the loop later;
6. systemd ``Type=notify``: READY=1, WATCHDOG=1 while the loop is live, STOPPING=1
   (:func:`lakefs_core.service.systemd.run_notified`);
7. the service closed, whatever happened; the exit status returned (``--once``: 0 when the pass
   succeeded, 1 otherwise; a stopped daemon: 0).

The loop's cadence, backoff and hang detection come from :class:`~lakefs_core.service.config.DaemonConfig`
(``poll_interval_seconds``, ``pass_timeout_seconds``, overridable by the command line). The click
options both daemons' ``run`` commands share are :func:`config_option`, :func:`once_option` and
:func:`log_format_option`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any, Protocol, TypeVar

import click

from lakefs_core.errors import ConfigError
from lakefs_core.service.config import DaemonConfig
from lakefs_core.service.daemon import DaemonLoop, freeze_startup_heap
from lakefs_core.service.logfmt import LOG_FORMATS, configure_logging
from lakefs_core.service.systemd import Notifier, run_notified

__all__ = ["DaemonService", "config_option", "log_format_option", "once_option", "run_daemon"]

F = TypeVar("F", bound=Callable[..., Any])


class DaemonService(Protocol):
    """What :func:`run_daemon` needs of a daemon's service object."""

    loop: DaemonLoop | None

    def step(self) -> Awaitable[object]:
        """One pass."""
        ...

    def record_errors(self, consecutive: int) -> None:
        """The loop's count of passes failed in a row (a gauge)."""
        ...

    async def close(self) -> None: ...


S = TypeVar("S", bound=DaemonService)


def run_daemon(
    open_service: Callable[[], Awaitable[S]],
    config: DaemonConfig,
    *,
    name: str,
    once: bool,
    log_format: str,
    pass_timeout: float | None = None,
    once_step: Callable[[S], Callable[[], Awaitable[object]]] | None = None,
    preload: Iterable[str] = (),
) -> int:
    """Run a daemon until it is stopped (or one pass with ``once``); returns the exit status."""
    configure_logging(config.log_level, log_format)
    main = _serve(
        open_service,
        config,
        name=name,
        once=once,
        pass_timeout=config.pass_timeout_seconds if pass_timeout is None else pass_timeout,
        once_step=once_step,
        preload=tuple(preload),
    )
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency; plain asyncio still works
        return asyncio.run(main)
    return uvloop.run(main)


async def _serve(
    open_service: Callable[[], Awaitable[S]],
    config: DaemonConfig,
    *,
    name: str,
    once: bool,
    pass_timeout: float,
    once_step: Callable[[S], Callable[[], Awaitable[object]]] | None,
    preload: tuple[str, ...],
) -> int:
    service = await open_service()
    try:
        step = once_step(service) if once and once_step is not None else service.step
        loop = DaemonLoop(
            step,
            name=name,
            interval=config.poll_interval_seconds,
            max_backoff=max(60.0, config.poll_interval_seconds),
            on_result=service.record_errors,
            pass_timeout=pass_timeout,
            # the backoff after failed passes can exceed the interval: never read it as a hang
            grace=max(60.0, config.poll_interval_seconds) + 1.0,
        )
        service.loop = loop
        loop.install_signal_handlers()
        from lakefs_core.repos.graveler import LAZY_MODULES

        freeze_startup_heap(preload=(*LAZY_MODULES, *preload))
        return await run_notified(loop, Notifier.from_env(), once=once)
    finally:
        await service.close()


# -- the options every daemon's ``run`` command shares ----------------------------------------------


def config_option(envvar: str, help: str) -> Callable[[F], F]:
    """``--config FILE`` (the daemon's YAML configuration; ``envvar`` names it too)."""
    return click.option(
        "--config",
        "config_path",
        type=click.Path(dir_okay=False, path_type=Path),
        envvar=envvar,
        help=help,
    )


C = TypeVar("C")


def load_with_file_hint(load: Callable[[], C], config_path: Path | None, envvar: str) -> C:
    """``load()`` a daemon's configuration; when it fails and no file was given, the first problem
    says so (``lakefs-gc run`` without ``--config`` names the option, not only the missing keys)."""
    try:
        return load()
    except ConfigError as e:
        if config_path is not None:
            raise
        hint = f"no configuration file given (--config FILE or {envvar}); the environment alone is incomplete"
        raise ConfigError([("--config", hint), *e.problems]) from None


def once_option(help: str) -> Callable[[F], F]:
    """``--once``: one pass, then exit with its outcome."""
    return click.option("--once", is_flag=True, help=help)


def log_format_option(envvar: str) -> Callable[[F], F]:
    """``--log-format text|json`` (``envvar`` too)."""
    return click.option(
        "--log-format",
        type=click.Choice(LOG_FORMATS),
        default="text",
        envvar=envvar,
        show_default=True,
        help="text, or json: one object per line (time, level, logger, message, and the daemon's context).",
    )
