"""The ``lakefs-server`` command line.

- ``lakefs-server run --config FILE [--log-format text|json] [--workers N]``: serve the S3 gateway
  (and lakeFS's REST API under ``/api/v1``) on ``gateway.listen`` and the admin API on ``listen``
  until SIGTERM/SIGINT; the daemon loop sweeps expired multipart uploads every
  ``poll_interval_seconds``. Configuration: the YAML file plus ``LAKEFS_SERVER__...`` environment
  overrides. Under systemd ``Type=notify``: READY=1 once both listeners are bound, WATCHDOG=1 while
  the loop is live, STOPPING=1. ``--workers N`` (N > 1) runs N server processes sharing the S3 port
  with ``SO_REUSEPORT`` (the admin listener of worker i listens on ``listen``'s port + i).
- ``lakefs-server check-config --config FILE``: report every problem at once, or print the
  configuration with secrets masked.

Exit codes: 0 success; 9 a configuration error; 16 a start-up error naming the key (a port in use,
a SQLite directory missing, an unreadable certificate); 64 usage; 130 Ctrl-C during start-up.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import click

from lakefs_core.config import display
from lakefs_core.service.cli import echo_problems, project_group, run
from lakefs_core.service.run import config_option, log_format_option, run_daemon
from lakefs_server.config import ServerConfig, inspect_server_config, load_server_config

if TYPE_CHECKING:
    from lakefs_server.service import ServerService


@project_group("lakefs-server")
def cli() -> None:
    """lakeFS's S3 gateway (and REST API) over lakeFS-compatible repositories."""


CONFIG_OPTION = config_option(
    "LAKEFS_SERVER_CONFIG", "YAML configuration (LAKEFS_SERVER__* variables override it)."
)


def _load(config: Path | None) -> ServerConfig:
    return load_server_config(config, dict(os.environ))


@cli.command("run")
@CONFIG_OPTION
@log_format_option("LAKEFS_SERVER_LOG_FORMAT")
@click.option(
    "--workers",
    type=click.IntRange(min=1, max=256),
    default=1,
    envvar="LAKEFS_SERVER_WORKERS",
    show_default=True,
    help="Server processes sharing the S3 port (SO_REUSEPORT); one per core is a good start.",
)
def run_cmd(config_path: Path | None, log_format: str, workers: int) -> None:
    """Run the server."""
    config = _load(config_path)
    worker = 0
    if workers > 1:
        worker = _fork_workers(workers)
        if worker > 0 and config.listen_port != 0:
            host, port = config.listen_host, config.listen_port + worker
            config = config.model_copy(
                update={"listen": f"[{host}]:{port}" if ":" in host else f"{host}:{port}"}
            )

    async def open_service() -> ServerService:
        from lakefs_server.service import ServerService

        return await ServerService.open(config, reuse_port=workers > 1)

    status = run_daemon(
        open_service,
        config,
        name="lakefs-server" if worker == 0 else f"lakefs-server[{worker}]",
        once=False,
        log_format=log_format,
    )
    raise click.exceptions.Exit(status)


def _fork_workers(workers: int) -> int:
    """Fork ``workers - 1`` children before any event loop exists; returns this process's index.
    The parent (index 0) is the one systemd watches; children exit with it (PR_SET_PDEATHSIG)."""
    import signal

    for index in range(1, workers):
        pid = os.fork()
        if pid == 0:
            try:
                import ctypes

                libc = ctypes.CDLL(None, use_errno=True)
                libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG: stop when the parent dies
            except (OSError, AttributeError):  # pragma: no cover - not Linux
                pass
            os.environ.pop("NOTIFY_SOCKET", None)  # only the parent talks to systemd
            os.environ.pop("WATCHDOG_USEC", None)
            return index
    return 0


@cli.command("check-config")
@CONFIG_OPTION
def check_config_cmd(config_path: Path | None) -> None:
    """Report every problem of a configuration (file plus environment), or print it, secrets masked."""
    report = inspect_server_config(config_path, dict(os.environ))
    echo_problems(report, "lakefs-server", config_path)
    click.echo(json.dumps(display(report.config), indent=2, sort_keys=True))


def main(argv: Sequence[str] | None = None) -> int:
    return run(cli, argv, "lakefs-server")


if __name__ == "__main__":
    sys.exit(main())
