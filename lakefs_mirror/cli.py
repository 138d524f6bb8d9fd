"""The ``lakefs-mirror`` command line.

- ``lakefs-mirror run --config FILE [--once] [--log-format text|json] [--pass-timeout S]``: run
  this region's daemon (HTTP API + mirroring passes) until SIGTERM/SIGINT (a second signal cancels
  the pass in flight); ``--once`` runs one pass and exits 0 if it succeeded. Configuration: the YAML
  file plus ``LAKEFS_MIRROR__...`` environment overrides (see ``deploy/mirror-local.yaml``). Under
  systemd ``Type=notify`` it sends READY=1 once the API is bound and the loop runs, WATCHDOG=1
  while the loop is live (a pass running longer than ``pass_timeout_seconds``, or ``--pass-timeout``
  when given, is hung), STOPPING=1.
- ``lakefs-mirror check-config --config FILE``: report EVERY problem at once, one per line on
  stderr, each naming its key path (schema problems, exit 9; and what would stop the start-up: a
  SQLite directory missing, ``state_dir`` not creatable, exit 16 when nothing else is wrong); a
  valid configuration is printed as JSON with secrets masked (URLs keep all but their password) and
  paths shown.

Exit codes: 0 success; 1 a ``--once`` pass failed; 9 a configuration error (bad value, unknown key:
every problem listed; systemd must not restart); 16 a start-up error naming the key (``listen`` port in use,
``state_dir`` not creatable, a SQLite ``mirrors_db_url`` or ``regions.<name>.kv_url`` whose
directory does not exist); 64 usage; 130 Ctrl-C during start-up (``aborted``). Each is one line on
stderr, never a traceback.
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
from lakefs_core.service.run import config_option, log_format_option, once_option, run_daemon
from lakefs_mirror.config import MirrorConfig, inspect_mirror_config, load_mirror_config

if TYPE_CHECKING:
    from lakefs_mirror.service import MirrorService


@project_group("lakefs-mirror")
def cli() -> None:
    """Transactional cross-region mirroring daemon for lakeFS-compatible repositories."""


def _load(config: Path | None) -> MirrorConfig:
    return load_mirror_config(config, dict(os.environ))


def pass_timeout_of(config: MirrorConfig, flag: float | None) -> float:
    """The ``--pass-timeout`` flag (or its env variable) when given, else ``pass_timeout_seconds``."""
    return config.pass_timeout_seconds if flag is None else flag


CONFIG_OPTION = config_option(
    "LAKEFS_MIRROR_CONFIG", "YAML configuration (LAKEFS_MIRROR__* variables override it)."
)


@cli.command("run")
@CONFIG_OPTION
@once_option("Run one pass and exit (0 if it succeeded).")
@log_format_option("LAKEFS_MIRROR_LOG_FORMAT")
@click.option(
    "--pass-timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    envvar="LAKEFS_MIRROR_PASS_TIMEOUT",
    help="Seconds after which a running pass counts as hung (/_health 503, systemd watchdog unfed); "
    "overrides the pass_timeout_seconds key (default 900).",
)
def run_cmd(config_path: Path | None, once: bool, log_format: str, pass_timeout: float | None) -> None:
    """Run this region's mirroring daemon."""
    config = _load(config_path)

    async def open_service() -> MirrorService:
        from lakefs_mirror.service import MirrorService

        return await MirrorService.open(config)

    status = run_daemon(
        open_service,
        config,
        name=f"lakefs-mirror[{config.region}]",
        once=once,
        log_format=log_format,
        pass_timeout=pass_timeout_of(config, pass_timeout),
    )
    raise click.exceptions.Exit(status)


@cli.command("check-config")
@CONFIG_OPTION
def check_config_cmd(config_path: Path | None) -> None:
    """Report every problem of a configuration (file plus environment), or print it, secrets masked."""
    report = inspect_mirror_config(config_path, dict(os.environ))
    echo_problems(report, "lakefs-mirror", config_path)
    click.echo(json.dumps(display(report.config), indent=2, sort_keys=True))


def main(argv: Sequence[str] | None = None) -> int:
    # Ctrl-C during start-up reaches click as KeyboardInterrupt -> "aborted", 130
    # (lakefs_core.service.cli.run);
    # once the loop runs, SIGINT is a graceful stop (exit 0).
    return run(cli, argv, "lakefs-mirror")


if __name__ == "__main__":
    sys.exit(main())
