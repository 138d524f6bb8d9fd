"""The ``lakefs-mirror`` commands (``run``, ``check-config``), imported by :mod:`lakefs_mirror.cli`
only when one of them runs: the group's ``--help`` and ``--version`` load neither the daemon
platform nor the configuration schema. See :mod:`lakefs_mirror.cli` for what they do.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

import click

from lakefs_core.config import display
from lakefs_core.service.cli import echo_problems
from lakefs_core.service.run import (
    config_option,
    load_with_file_hint,
    log_format_option,
    once_option,
    run_daemon,
)
from lakefs_mirror.config import MirrorConfig, inspect_mirror_config, load_mirror_config

if TYPE_CHECKING:
    from lakefs_mirror.service import MirrorService


def _load(config: Path | None) -> MirrorConfig:
    return load_with_file_hint(
        lambda: load_mirror_config(config, dict(os.environ)), config, MIRROR_CONFIG_ENV
    )


def pass_timeout_of(config: MirrorConfig, flag: float | None) -> float:
    """The ``--pass-timeout`` flag (or its env variable) when given, else ``pass_timeout_seconds``."""
    return config.pass_timeout_seconds if flag is None else flag


MIRROR_CONFIG_ENV = "LAKEFS_MIRROR_CONFIG"
CONFIG_OPTION = config_option(
    MIRROR_CONFIG_ENV, "YAML configuration (LAKEFS_MIRROR__* variables override it)."
)


@click.command("run")
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


@click.command("check-config")
@CONFIG_OPTION
def check_config_cmd(config_path: Path | None) -> None:
    """Report every problem of a configuration (file plus environment), or print it, secrets masked."""
    report = inspect_mirror_config(config_path, dict(os.environ))
    echo_problems(report, "lakefs-mirror", config_path)
    click.echo(json.dumps(display(report.config), indent=2, sort_keys=True))
